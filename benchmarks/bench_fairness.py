"""The fairness monitor: its overhead, what mitigation buys, and false flags.

    python benchmarks/bench_fairness.py               # ~12 min, with a 3-minute balanced run
    python benchmarks/bench_fairness.py --duration 10 --runs 3 --pairs 10 --size-mb 64  # quick
    python benchmarks/bench_fairness.py --only injected --runs 2              # mitigation only
    python benchmarks/bench_fairness.py --only flagging --runs 5              # flag latency

Four parts, results as JSON in benchmarks/results/fairness-<time>.json:

1. overhead: epochs of real local files (4 KiB fixed records, read by
   fastio.Dataset in this process, warm page cache: every sample a Python
   object of a few microseconds, the hardest case), per sample and in batches
   of 256, monitoring on and off, ``--pairs`` alternating pairs; the median of
   the paired throughput ratios (the target is within 3%), beside the same
   comparison of on against on (the harness's noise floor).
2. injected: 2 DataLoader workers, a consumer training 5 ms per batch of 8, and
   worker 0's shards behind 40 ms of added latency per request
   (``ThrottledFileSystem``); mitigation off and on: Jain's index (median over
   the judged windows after the first three) and epoch time, with the
   DataLoader's round-robin and with a loader that takes batches as they come
   (``in_order=False``: only there do delivered rates differ, so only there
   does Jain's index show the imbalance); and ``balance="steal"`` with
   ``in_order=False``, with the units stolen.
3. flagging: the same 2 workers, monitoring only, worker 0's shards slowed
   (50 ms per request) for 1.6 s in the middle of the epoch: how many
   windows after the slowdown begins worker 0 is flagged (the target is 3 at
   most), how many after it ends the flag clears, and the fast worker's flags
   (the target is none). These are timing outcomes, so they are measured
   here, not asserted by the tests.
4. balanced: ``--duration`` seconds of epochs over the real local files with 2
   DataLoader workers, default settings (1 s windows): flags raised (the target
   is none), and the lowest relative rate and largest readiness gap seen, the
   margins under the defaults (0.6 and 0.3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from torch.utils.data import DataLoader

import fastio
import fastio.sources._throttled  # registers throttled://

RECORD = 4096
FLAGS = Path(tempfile.gettempdir()) / f"fastio-bench-fairness-{os.getpid()}.jsonl"


def write_shards(folder: Path, size_mb: int, shards: int = 8) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    per_shard = size_mb * (1 << 20) // shards // RECORD * RECORD
    rng = np.random.default_rng(0)
    urls = []
    for index in range(shards):
        path = folder / f"part-{index}.bin"
        if not path.exists() or path.stat().st_size != per_shard:
            path.write_bytes(rng.bytes(per_shard))
        urls.append(str(path))
    return urls


def overhead(urls: list[str], pairs: int) -> dict[str, object]:
    """Monitoring on against off, as a job sees it: one long-lived dataset each,
    epochs alternating between them (the order flipped every pair), ``pairs``
    pairs per mode; the median of the paired throughput ratios, with quartiles.
    The same harness with monitoring on in both (A/A) shows the noise floor:
    wall time on a shared VM swings by 20-30% between runs of a CPU loop."""

    def make(enabled: bool) -> fastio.Dataset:
        return fastio.Dataset(urls, "fixed", record_size=RECORD, shuffle=False,
                              fairness=enabled)  # fmt: skip

    def epoch(dataset: fastio.Dataset, batches: bool) -> tuple[float, float]:
        started, cpu_started = time.perf_counter(), time.process_time()
        if batches:
            count = sum(len(batch) for batch in dataset.batches(256))
        else:
            count = sum(1 for _ in dataset)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        assert count == dataset.total
        return count / seconds, cpu / count * 1e9

    def compare(a: fastio.Dataset, b: fastio.Dataset, batches: bool) -> dict[str, object]:
        epoch(a, batches), epoch(b, batches)  # warm: page cache, readers, boards
        rates: dict[str, list[float]] = {"a": [], "b": []}
        cpu: dict[str, list[float]] = {"a": [], "b": []}
        for index in range(pairs):
            for name in ("a", "b") if index % 2 else ("b", "a"):
                rate, ns = epoch(a if name == "a" else b, batches)
                rates[name].append(rate)
                cpu[name].append(ns)
        ratios = [x / y for x, y in zip(rates["a"], rates["b"], strict=True)]
        cpu_ratios = [x / y for x, y in zip(cpu["a"], cpu["b"], strict=True)]
        return {
            "throughput_ratio": statistics.median(ratios),
            "throughput_ratio_quartiles": statistics.quantiles(ratios, n=4),
            "cpu_ratio": statistics.median(cpu_ratios),
            "cpu_ratio_quartiles": statistics.quantiles(cpu_ratios, n=4),
            "samples_per_s": [statistics.median(rates["a"]), statistics.median(rates["b"])],
            "cpu_ns_per_sample": [statistics.median(cpu["a"]), statistics.median(cpu["b"])],
        }

    result: dict[str, object] = {"pairs": pairs}
    on, off, control = make(True), make(False), make(True)
    try:
        for mode, batches in (("samples", False), ("batches", True)):
            result[mode] = compare(on, off, batches)
            result[f"{mode}_a_a"] = compare(on, control, batches)
    finally:
        for dataset in (on, off, control):
            dataset.close()
    return result


def loader_epoch(
    dataset: fastio.Dataset, step: float, epoch: int = 0, in_order: bool = True
) -> float:
    dataset.set_epoch(epoch)
    started = time.perf_counter()
    loader = DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=len, in_order=in_order)
    for _ in loader:
        pace = time.perf_counter() + step
        while time.perf_counter() < pace:
            pass
    return time.perf_counter() - started


# name: (mitigate, balance, in_order). Stealing pays off only when the loader
# takes batches as they come: in its default round-robin the fast worker runs at
# most prefetch_factor batches ahead and never finishes its own part early.
VARIANTS = {
    "unmitigated": (False, "budget", True),
    "mitigated": (True, "budget", True),
    "unmitigated_out_of_order": (False, "budget", False),
    "mitigated_out_of_order": (True, "budget", False),
    "steal_out_of_order": (True, "steal", False),
}


def injected(urls: list[str], runs: int) -> dict[str, object]:
    slow = [os.path.basename(url) for url in urls[: len(urls) // 2]]
    result: dict[str, object] = {}
    for name, (mitigate, balance, in_order) in VARIANTS.items():
        seconds, jains, stolen = [], [], []
        for _ in range(runs):
            dataset = fastio.Dataset(
                [f"throttled://{url}" for url in urls], "fixed", record_size=RECORD,
                shuffle=False, shuffle_buffer=64 << 10,
                storage_options={"delay": 0.001, "slow": slow, "slow_delay": 0.04},
                reader=fastio.ReaderSettings(outstanding_requests=5, read_size=16 << 10,
                                             memory_budget=256 << 10),
                fairness={"window_seconds": 0.2, "mitigate": mitigate, "balance": balance},
            )  # fmt: skip
            seconds.append(loader_epoch(dataset, 0.005, in_order=in_order))
            report = dataset.fairness.report(timeline=True)
            stolen.append(sum(w["units_stolen"] for w in report["workers"]))
            rows = report["timeline"][3:]
            judged = [r["jain_index"] for r in rows
                      if sum(w["rate"] is not None for w in r["workers"]) == 2]  # fmt: skip
            jains.append(float(np.median(judged)))
            dataset.close()
        result[name] = {
            "epoch_seconds": statistics.median(seconds), "jain_index": statistics.median(jains),
            "units_stolen": statistics.median(stolen), "in_order": in_order,
            "epoch_seconds_runs": seconds, "jain_runs": jains}  # fmt: skip
    seconds_of = {name: r["epoch_seconds"] for name, r in result.items() if isinstance(r, dict)}
    result["speedup"] = seconds_of["unmitigated"] / seconds_of["mitigated"]
    result["speedup_out_of_order"] = (
        seconds_of["unmitigated_out_of_order"] / seconds_of["mitigated_out_of_order"]
    )
    result["steal_speedup"] = (
        seconds_of["unmitigated_out_of_order"] / seconds_of["steal_out_of_order"]
    )
    result["steal_speedup_vs_in_order"] = (
        seconds_of["unmitigated"] / seconds_of["steal_out_of_order"]
    )
    return result


def flagging(urls: list[str], runs: int) -> dict[str, object]:
    slow = [os.path.basename(url) for url in urls[: len(urls) // 2]]
    window = 0.2
    to_flag, to_clear, fast_flags, events = [], [], [], []
    for _ in range(runs):
        FLAGS.unlink(missing_ok=True)
        slow_from = time.time() + 1.0
        slow_until = slow_from + 1.6
        dataset = fastio.Dataset(
            [f"throttled://{url}" for url in urls], "fixed", record_size=RECORD, shuffle=False,
            shuffle_buffer=64 << 10,
            storage_options={"delay": 0.001, "slow": slow, "slow_delay": 0.05,
                             "slow_from": slow_from, "slow_until": slow_until},
            reader=fastio.ReaderSettings(outstanding_requests=2, read_size=16 << 10,
                                         memory_budget=256 << 10),
            fairness={"window_seconds": window, "mitigate": False, "callback": record_flag},
        )  # fmt: skip
        loader_epoch(dataset, 0.005)
        timeline = dataset.fairness.report(timeline=True)["timeline"]
        dataset.close()

        ends = [row["time"] for row in timeline]
        first_slow = next((i for i, end in enumerate(ends) if end > slow_from), len(ends))
        first_after = next((i for i, end in enumerate(ends) if end > slow_until), len(ends))
        slow_flags = flagged(timeline, 0)
        to_flag.append(slow_flags[0] - first_slow if slow_flags else None)
        to_clear.append(slow_flags[-1] + 1 - first_after if slow_flags else None)
        fast_flags.append(len(flagged(timeline, 1)))
        events.append(FLAGS.read_text().splitlines() if FLAGS.exists() else [])
    FLAGS.unlink(missing_ok=True)
    measured = [value for value in to_flag if value is not None]
    cleared = [value for value in to_clear if value is not None]
    return {"windows_to_flag": statistics.median(measured) if measured else None,
            "windows_to_clear": statistics.median(cleared) if cleared else None,
            "runs_flagged": len(measured), "runs": runs, "fast_worker_flags": fast_flags,
            "windows_to_flag_runs": to_flag,
            "events_per_run": [len(e) for e in events]}  # fmt: skip


def flagged(timeline: list[dict], worker: int) -> list[int]:
    """The windows of ``timeline`` in which ``worker`` was flagged starved."""
    return [i for i, row in enumerate(timeline)
            if any(w["worker"] == worker and w["starved"] for w in row["workers"])]  # fmt: skip


def record_flag(event: dict) -> None:
    with open(FLAGS, "a") as handle:
        handle.write(json.dumps(event) + "\n")


def balanced(urls: list[str], duration: float) -> dict[str, object]:
    FLAGS.unlink(missing_ok=True)
    dataset = fastio.Dataset(urls, "fixed", record_size=RECORD, shuffle=True,
                             fairness={"callback": record_flag})  # fmt: skip
    started, epochs, lowest, widest, windows = time.perf_counter(), 0, 1.0, 0.0, 0
    while time.perf_counter() - started < duration:
        loader_epoch(dataset, 0.0005, epochs)
        epochs += 1
    for row in dataset.fairness.report(timeline=True)["timeline"]:
        judged = [w for w in row["workers"] if w["rate"] is not None]
        if len(judged) == 2:
            windows += 1
            rates = sorted(w["rate"] for w in judged)
            lowest = min(lowest, rates[0] / rates[1])
            widest = max(widest, abs(judged[0]["readiness"] - judged[1]["readiness"]))
    report = dataset.fairness.report()
    dataset.close()
    flags = FLAGS.read_text().splitlines() if FLAGS.exists() else []
    FLAGS.unlink(missing_ok=True)
    return {"seconds": time.perf_counter() - started, "epochs": epochs,
            "windows": report["windows"], "windows_inspected": windows,
            "flags_raised": len(flags), "flag_events": [json.loads(f) for f in flags],
            "lowest_relative_rate": lowest, "widest_readiness_gap": widest}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "fastio-fair"))
    parser.add_argument("--size-mb", type=int, default=256, help="local data for parts 1 and 3")
    parser.add_argument("--runs", type=int, default=5, help="runs per variant (medians)")
    parser.add_argument("--pairs", type=int, default=150, help="overhead: epoch pairs per mode")
    parser.add_argument("--duration", type=float, default=180.0, help="balanced run, seconds")
    parser.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/)")
    parser.add_argument("--only", choices=("overhead", "injected", "flagging", "balanced"),
                        default=None,
                        help="run one part")  # fmt: skip
    args = parser.parse_args()
    parts = [args.only] if args.only else ["overhead", "injected", "flagging", "balanced"]
    folder = Path(args.data_dir)
    urls = write_shards(folder / "local", args.size_mb)
    slow_urls = write_shards(folder / "slow", 16)
    results: dict[str, dict[str, object]] = {}
    if "overhead" in parts:
        results["overhead"] = overhead(urls, args.pairs)
        print(json.dumps({"overhead": results["overhead"]}, indent=1))
    if "injected" in parts:
        results["injected"] = injected(slow_urls, max(1, args.runs // 2))
        print(json.dumps({"injected": results["injected"]}, indent=1))
    if "flagging" in parts:
        results["flagging"] = flagging(slow_urls, args.runs)
        print(json.dumps({"flagging": results["flagging"]}, indent=1))
    if "balanced" in parts:
        results["balanced"] = balanced(urls, args.duration)
        print(json.dumps({"balanced": {k: v for k, v in results["balanced"].items()
                                       if k != "flag_events"}}, indent=1))  # fmt: skip
    out = Path(args.out or Path(__file__).parent / "results" /
               f"fairness-{time.strftime('%Y%m%d-%H%M%S')}.json")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), **results}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
