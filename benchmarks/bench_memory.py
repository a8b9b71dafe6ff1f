"""Memory over an epoch: how much a process grows reading one, fastio beside webdataset.

    python benchmarks/bench_memory.py                     # ~440 MB of ~110 KB samples
    python benchmarks/bench_memory.py --workers 0 2 8 --samples 2000

One WebDataset tar dataset (``fastio-bench gen``, ~110 KB samples, indexed
beforehand), read for one epoch with the default knobs (shuffled), in this
process and in a torch DataLoader with ``--workers`` workers (batch 64, the
default collate). A thread samples every process of the run (the main one and
each worker) every 50 ms: RSS and USS (pages no other process shares). Growth is
the peak minus the first sample: taken after the dataset is made (the main
process) or at the worker's start (a forked worker shares its parent's pages,
so its USS starts near zero and counts every page it touches or copies). Every
run is a fresh process; the table shows the median of ``--repeats`` runs.

fastio's promise: a process grows by no more than its budgets (shuffle buffer,
the reader's memory budget, a worker's hand-off ring) plus 32 MiB. The table
prints that allowance beside the growth that it bounds (the process's USS
growth without workers, the largest worker's with them) and whether it held;
webdataset's rows show the same allowance for comparison only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import fastio
from fastio.cli._gen import write_dataset
from fastio.spec import DatasetSpec

SAMPLE_SIZE = 110_000
DATA_DIR = Path(tempfile.gettempdir()) / "fastio-bench-workers"  # outside the repository
MiB = 1 << 20
SLACK = 32 * MiB  # what a process may grow by beyond its budgets

_RUN = """
import json, sys, threading, time
import psutil
loader, workers, index_dir = sys.argv[1], int(sys.argv[2]), sys.argv[4]
urls = json.loads(sys.argv[3])
from torch.utils.data import DataLoader
if loader == "fastio":
    import fastio
    dataset = fastio.Dataset(urls, index_dir=index_dir)
else:
    import webdataset
    dataset = webdataset.WebDataset(urls, shardshuffle=False, empty_check=False)
me = psutil.Process()
first, peak, running = {}, {}, True

def sample():
    for process in [me, *me.children()]:
        try:
            info = process.memory_full_info()
        except psutil.Error:
            continue
        now = (info.rss, info.uss)
        first.setdefault(process.pid, now)
        old = peak.get(process.pid, (0, 0))
        peak[process.pid] = (max(old[0], now[0]), max(old[1], now[1]))

def watch():
    while running:
        sample()
        time.sleep(0.05)

sample()
thread = threading.Thread(target=watch, daemon=True)
thread.start()
samples = 0
if workers:
    for batch in DataLoader(dataset, batch_size=64, num_workers=workers,
                            persistent_workers=False):
        samples += len(batch["bin"])
else:
    for item in dataset:
        samples += 1
running = False
thread.join()
main = me.pid
print(json.dumps({"samples": samples, "processes": [
    {"main": pid == main, "rss_growth": peak[pid][0] - first[pid][0],
     "uss_growth": peak[pid][1] - first[pid][1], "uss_peak": peak[pid][1]}
    for pid in first]}))
"""


def run(loader: str, workers: int, urls: list[str], index_dir: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _RUN, loader, str(workers), json.dumps(urls), index_dir],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Medians over runs of: the main process's growth, the largest worker's
    growth and peak USS, and the peak USS of all processes together."""

    def median(values: list[float]) -> float:
        return statistics.median(values) / MiB

    mains = [next(p for p in r["processes"] if p["main"]) for r in runs]
    workers = [[p for p in r["processes"] if not p["main"]] for r in runs]
    result = {"main_rss_growth": median([m["rss_growth"] for m in mains]),
              "main_uss_growth": median([m["uss_growth"] for m in mains]),
              "total_uss_peak": median([sum(p["uss_peak"] for p in r["processes"])
                                        for r in runs])}  # fmt: skip
    if any(workers):
        result["worker_rss_growth"] = median([max(p["rss_growth"] for p in w) for w in workers])
        result["worker_uss_growth"] = median([max(p["uss_growth"] for p in w) for w in workers])
    return result


def bounded(
    measured: dict[str, float], workers: int, budgets: dict[str, int]
) -> tuple[float, float]:
    """The growth the promise bounds and its allowance, MiB: one process's
    USS growth within shuffle buffer + memory budget + 32 MiB, or with
    workers the largest worker's, whose hand-off ring counts too."""
    allowed = budgets["shuffle_buffer"] + budgets["memory_budget"] + SLACK
    if not workers:
        return measured["main_uss_growth"], allowed / MiB
    return measured["worker_uss_growth"], (allowed + budgets["handoff_memory"]) / MiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--workers", type=int, nargs="*", default=[0, 2, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "fastio-bench-workers"
    )
    args = parser.parse_args()
    folder = args.data_dir.resolve() / f"{args.samples}x{SAMPLE_SIZE}x{args.shards}"
    if not folder.exists():
        write_dataset(folder, "webdataset", args.samples, SAMPLE_SIZE, args.shards)
    urls = sorted(str(p) for p in folder.glob("*.tar"))
    index_dir = str(folder / "index")
    with fastio.Dataset(urls, index_dir=index_dir) as dataset:
        dataset.index()
    spec = DatasetSpec.from_keywords(urls)
    budgets = {"shuffle_buffer": spec.shuffle.buffer, "memory_budget": spec.reader.memory_budget,
               "handoff_memory": spec.split.handoff_memory}  # fmt: skip
    knobs = ", ".join(f"{k} {v / MiB:g} MiB" for k, v in budgets.items())
    print(f"{args.samples} samples of {SAMPLE_SIZE / 1e3:.0f} KB in {len(urls)} tar shards, "
          f"one epoch, default knobs ({knobs}), median of {args.repeats}; MiB")  # fmt: skip
    header = ("loader", "workers", "main RSS+", "main USS+", "worker RSS+", "worker USS+",
              "all USS peak", "allowed", "within")  # fmt: skip
    print(f"{header[0]:11} {header[1]:>7} " + " ".join(f"{h:>12}" for h in header[2:]))
    results = {}
    for workers in args.workers:
        for loader in ("fastio", "webdataset"):
            measured = summary([run(loader, workers, urls, index_dir)
                                for _ in range(args.repeats)])  # fmt: skip
            results[f"{loader} {workers}"] = measured
            growth, allowed = bounded(measured, workers, budgets)
            measured["allowed"] = allowed
            cells = [measured["main_rss_growth"], measured["main_uss_growth"],
                     measured.get("worker_rss_growth"), measured.get("worker_uss_growth"),
                     measured["total_uss_peak"], allowed]  # fmt: skip
            verdict = "yes" if growth <= allowed else "NO"
            numbers = " ".join(f"{'':>12}" if c is None else f"{c:12.0f}" for c in cells)
            print(f"{loader:11} {workers:7} {numbers} {verdict:>12}")
    out = Path("benchmarks/results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory.json").write_text(json.dumps({"budgets": budgets, "results": results}, indent=1))


if __name__ == "__main__":
    main()
