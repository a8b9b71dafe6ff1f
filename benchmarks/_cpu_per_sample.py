"""What the CPU-per-sample benchmarks share: a timed pass in a fresh process,
and rounds of fresh processes in rotated order, printed as medians beside a
peer method (samples/s, and the peer's CPU per sample over the method's, for
the iterating thread and for the whole process)."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def timed_pass(
    run: Callable[[], int], samples: int, what: str, check: bool = True
) -> dict[str, float]:
    """``run()`` once untimed (warm page cache, indexes, imports), then timed;
    rate and CPU per one of the case's ``samples`` (with ``check``, a pass
    that delivers another count of ``what`` fails)."""
    run()
    started, thread, process = time.perf_counter(), time.thread_time(), time.process_time()
    count = run()
    seconds = time.perf_counter() - started
    if check and count != samples:
        raise SystemExit(f"delivered {count} of {samples} {what}")
    return {
        "rate": samples / seconds,
        "thread_us": 1e6 * (time.thread_time() - thread) / samples,
        "process_us": 1e6 * (time.process_time() - process) / samples,
    }


def main(
    description: str, script: str, methods: Sequence[str], peer: str | Mapping[str, str],
    child: Callable[[str, str], dict[str, float]],
) -> None:  # fmt: skip
    """The command line: ``--case-dir``, ``--repeats``, ``--methods``; a
    ``--child`` run is one method's timed pass, printed as JSON. ``peer``:
    the method every other is compared with, or each method's own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--case-dir", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", default=",".join(methods))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.case_dir)))
        return
    chosen = [m.strip() for m in args.methods.split(",")]
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in chosen}
    for round_ in range(args.repeats):
        for method in chosen[round_ % len(chosen) :] + chosen[: round_ % len(chosen)]:
            command = [sys.executable, script, "--case-dir", args.case_dir, "--child", method]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(f"{method} failed:\n{done.stderr[-3000:]}")
            results[method].append(json.loads(done.stdout.strip().splitlines()[-1]))
    medians = {m: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
               for m, runs in results.items()}  # fmt: skip
    peers = peer if isinstance(peer, Mapping) else dict.fromkeys(medians, peer)
    width = max(len(m) for m in medians) + 2
    against = peer if isinstance(peer, str) else "its peer"
    print(f"{'method':{width}s} {'samples/s':>10s} {'main us':>8s} {'proc us':>8s}  vs {against}")
    for method, m in medians.items():
        ratios = ""
        reference = medians.get(peers.get(method, ""))
        if reference:
            ratios = (f"{m['rate'] / reference['rate']:.2f}x rate, "
                      f"{reference['thread_us'] / m['thread_us']:.2f}x main CPU, "
                      f"{reference['process_us'] / m['process_us']:.2f}x process CPU")  # fmt: skip
        print(f"{method:{width}s} {m['rate']:10.0f} {m['thread_us']:8.1f} "
              f"{m['process_us']:8.1f}  {ratios}")  # fmt: skip
    print(f"medians of {args.repeats} fresh processes each, warm page cache")
