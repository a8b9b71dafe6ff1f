"""WebDataset tar: ``.batches(n)`` beside per-sample iteration, as CPU time per sample.

    python benchmarks/bench_tar_batches_cpu.py --case-dir /path/to/large-7273x110000

``--case-dir`` is one case of the datasets ``benchmarks/bench_datasets.py``
writes (it holds ``manifest.json`` and a ``webdataset/`` copy). Batches of
110 KB samples span several reads and shards; the point of this measurement
is what gathering them costs next to handing out each sample. Wall-clock
rates swing on a shared machine; CPU time per sample does much less, and the
thread split says which thread a change relieves. Each method reports, per
sample: samples/s, the CPU time of the thread that iterates (the one a
training loop waits on) and of the whole process (reader threads included).

Every run is a fresh process that reads the shards once untimed first (warm
page cache, index built) and times the next pass; methods run in a rotated
order for ``--repeats`` rounds; medians are printed with each method's ratio
to per-sample iteration (samples/s, and its CPU over the method's). Every
payload's length is read, as a consumer would touch it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

METHODS = ("fastio samples", "fastio batches 256", "fastio batches 1024")


def _samples(method: str, url: str) -> int:
    import fastio

    with fastio.Dataset(url, format="webdataset", shuffle=False) as ds:
        if method == "fastio samples":
            return sum(len(sample["bin"]) >= 0 for sample in ds)
        import pyarrow.compute as pc

        count = 0
        for batch in ds.batches(int(method.rsplit(" ", 1)[1])):
            count += batch.num_rows
            pc.sum(pc.binary_length(batch.column("bin")))
        return count


def child(method: str, case_dir: str) -> dict[str, float]:
    manifest = json.loads(Path(case_dir, "manifest.json").read_text())
    url = manifest["copies"]["webdataset"]["url"]
    samples = manifest["case"]["samples"]
    _samples(method, url)  # warm: page cache, indexes, imports
    started, thread, process = time.perf_counter(), time.thread_time(), time.process_time()
    count = _samples(method, url)
    seconds = time.perf_counter() - started
    if count != samples:
        raise SystemExit(f"{method} delivered {count} of {samples} samples")
    return {
        "rate": samples / seconds,
        "thread_us": 1e6 * (time.thread_time() - thread) / samples,
        "process_us": 1e6 * (time.process_time() - process) / samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case-dir", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.case_dir)))
        return
    methods = [m.strip() for m in args.methods.split(",")]
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    for round_ in range(args.repeats):
        for method in methods[round_ % len(methods) :] + methods[: round_ % len(methods)]:
            command = [sys.executable, __file__, "--case-dir", args.case_dir, "--child", method]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(f"{method} failed:\n{done.stderr[-3000:]}")
            results[method].append(json.loads(done.stdout.strip().splitlines()[-1]))
    medians = {m: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
               for m, runs in results.items()}  # fmt: skip
    peer = medians.get("fastio samples")
    print(f"{'method':22s} {'samples/s':>10s} {'main us':>8s} {'proc us':>8s}  vs per sample")
    for method, m in medians.items():
        ratios = ""
        if peer:
            ratios = (f"{m['rate'] / peer['rate']:.2f}x rate, "
                      f"{peer['thread_us'] / m['thread_us']:.2f}x main CPU, "
                      f"{peer['process_us'] / m['process_us']:.2f}x process CPU")  # fmt: skip
        print(f"{method:22s} {m['rate']:10.0f} {m['thread_us']:8.1f} {m['process_us']:8.1f}  "
              f"{ratios}")  # fmt: skip
    print(f"medians of {args.repeats} fresh processes each, warm page cache")


if __name__ == "__main__":
    main()
