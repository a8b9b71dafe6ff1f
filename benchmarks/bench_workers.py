"""DataLoader workers: do they add speed? fastio and webdataset, 0 and 2 workers.

    python benchmarks/bench_workers.py                      # ~1.1 GB of ~110 KB samples
    python benchmarks/bench_workers.py --samples 2000 --repeats 1

One WebDataset tar dataset (``fastio-bench gen``, ~110 KB samples, reused from
``--data-dir``), read warm (the files are read once, untimed, first) by:

* fastio samples: ``fastio.Dataset`` in this process, then in a torch
  DataLoader (``batch_size=--batch-size``, the default collate) with 2 workers;
* fastio batches: ``dataset.batches(--batch-size)``, in this process and in a
  DataLoader (``batch_size=None``) with 2 workers;
* webdataset: ``webdataset.WebDataset`` in this process and in a DataLoader with
  2 workers (the default collate);
* a plain read of the files (the warm limit of one process).

Every method runs in a fresh process, touches every payload (sums its length)
and must deliver every sample; a wrong count or payload total is a failure.
Methods run in a shuffled order in each of ``--repeats`` rounds; the table
shows medians, samples/s, MB/s of the files and the ratio to webdataset with
the same number of workers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import fastio
from fastio.cli._gen import write_dataset

SAMPLE_SIZE = 110_000
DATA_DIR = Path(tempfile.gettempdir()) / "fastio-bench-workers"  # outside the repository

# Each method is a snippet run in a fresh interpreter: `urls` (the shard paths),
# `batch_size` are given; it sets `samples` and `payload` (bytes of payloads seen).
_SETUP = """
import json, sys, time
import fastio, pyarrow.compute, webdataset  # imported untimed: torch takes seconds
from torch.utils.data import DataLoader
urls, batch_size, index_dir = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
started = time.perf_counter()
"""
_PAYLOAD = """
def payload_of(sample):
    return len(sample["bin"])
"""
_FASTIO_SAMPLES = """
dataset = fastio.Dataset(urls, shuffle=False, index_dir=index_dir{options})
samples = payload = 0
for sample in dataset:
    samples += 1
    payload += len(sample["bin"])
"""
_FASTIO_LOADER = """
dataset = fastio.Dataset(urls, shuffle=False, index_dir=index_dir{options})
samples = payload = 0
for batch in DataLoader(dataset, batch_size=batch_size, num_workers=2):
    samples += len(batch["bin"])
    payload += sum(len(value) for value in batch["bin"])
"""
_FASTIO_BATCHES = """
dataset = fastio.Dataset(urls, shuffle=False, index_dir=index_dir{options})
samples = payload = 0
batches = dataset.batches(batch_size)
for batch in DataLoader(batches, batch_size=None, num_workers=2) if {workers} else batches:
    column = batch.column("bin")
    samples += batch.num_rows
    payload += pyarrow.compute.sum(pyarrow.compute.binary_length(column)).as_py()
"""
_WEBDATASET = """
dataset = webdataset.WebDataset(urls, shardshuffle=False, empty_check=False)
samples = payload = 0
if {workers}:
    for batch in DataLoader(dataset, batch_size=batch_size, num_workers=2):
        samples += len(batch["bin"])
        payload += sum(len(value) for value in batch["bin"])
else:
    for sample in dataset:
        samples += 1
        payload += len(sample["bin"])
"""
_PLAIN = """
samples = payload = 0
for url in urls:
    with open(url, "rb", buffering=0) as file:
        while block := file.read(1 << 20):
            payload += len(block)
samples = -1
"""
_PICKLED = ", handoff_memory=0"  # what torch's worker queue does by itself
# name -> (DataLoader workers, snippet)
METHODS: dict[str, tuple[int, str]] = {
    "plain read": (0, _PLAIN),
    "fastio samples": (0, _FASTIO_SAMPLES.format(options="")),
    "fastio samples, 2 workers": (2, _FASTIO_LOADER.format(options="")),
    "  pickled (handoff_memory=0)": (2, _FASTIO_LOADER.format(options=_PICKLED)),
    "fastio batches": (0, _FASTIO_BATCHES.format(options="", workers=0)),
    "fastio batches, 2 workers": (2, _FASTIO_BATCHES.format(options="", workers=2)),
    "  batches pickled": (2, _FASTIO_BATCHES.format(options=_PICKLED, workers=2)),
    "webdataset samples": (0, _WEBDATASET.format(workers=0)),
    "webdataset samples, 2 workers": (2, _WEBDATASET.format(workers=2)),
}
_REPORT = """
print(json.dumps({"seconds": time.perf_counter() - started, "samples": samples,
                  "payload": payload}))
"""
PEER = {0: "webdataset samples", 2: "webdataset samples, 2 workers"}


def run_method(name: str, urls: list[str], batch_size: int, index_dir: str) -> dict[str, Any]:
    code = _SETUP + METHODS[name][1] + _REPORT
    done = subprocess.run([sys.executable, "-c", code, json.dumps(urls), str(batch_size),
                           index_dir],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def warm(urls: list[str]) -> None:
    for url in urls:
        with open(url, "rb", buffering=0) as file:
            while file.read(1 << 22):
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", nargs="*", default=list(METHODS))
    parser.add_argument(
        "--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "fastio-bench-workers"
    )
    args = parser.parse_args()
    folder = args.data_dir.resolve() / f"{args.samples}x{SAMPLE_SIZE}x{args.shards}"
    written = write_dataset(folder, "webdataset", args.samples, SAMPLE_SIZE, args.shards) \
        if not folder.exists() else None  # fmt: skip
    urls = sorted(str(p) for p in folder.glob("*.tar"))
    # Indexed beforehand, as a prepared dataset is (MDS writes its index too).
    index_dir = str(folder / "index")
    with fastio.Dataset(urls, index_dir=index_dir) as dataset:
        dataset.index()
    file_bytes = sum(os.path.getsize(u) for u in urls)
    expected = written.payload_bytes if written else None
    warm(urls)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.methods}
    for _ in range(args.repeats):
        order = list(args.methods)
        random.shuffle(order)
        for name in order:
            runs[name].append(run_method(name, urls, args.batch_size, index_dir))
    results = {}
    for name, measured in runs.items():
        errors = [m["error"] for m in measured if "error" in m]
        if errors:
            results[name] = {"error": errors[0]}
            continue
        good = [m for m in measured if m["samples"] in (args.samples, -1)]
        payloads = {m["payload"] for m in good if m["samples"] != -1}
        if len(good) < len(measured) or len(payloads) > 1 or (
                expected and payloads and payloads != {expected}):  # fmt: skip
            results[name] = {"error": f"wrong count or payload: {measured}"}
            continue
        seconds = statistics.median(m["seconds"] for m in measured)
        results[name] = {"seconds": seconds, "samples_per_s": args.samples / seconds,
                         "mb_per_s": file_bytes / seconds / 1e6,
                         "runs": [m["seconds"] for m in measured]}  # fmt: skip
    print(f"{args.samples} samples of {SAMPLE_SIZE / 1e3:.0f} KB in {len(urls)} tar shards "
          f"({file_bytes / 1e9:.2f} GB, warm), batch {args.batch_size}, "
          f"median of {args.repeats}")  # fmt: skip
    print(f"{'method':32} {'samples/s':>10} {'MB/s':>8} {'vs webdataset':>14}")
    for name, result in results.items():
        if "error" in result:
            print(f"{name:32} failed: {result['error']}")
            continue
        peer = results.get(PEER[METHODS[name][0]], {})
        ratio = (f"{result['samples_per_s'] / peer['samples_per_s']:.2f}x"
                 if "samples_per_s" in peer and not name.startswith(("webdataset", "plain"))
                 else "")  # fmt: skip
        rate = "" if name == "plain read" else f"{result['samples_per_s']:.0f}"
        print(f"{name:32} {rate:>10} {result['mb_per_s']:8.0f} {ratio:>14}")
    out = Path("benchmarks/results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "workers.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
