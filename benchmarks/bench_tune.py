"""Online tuning on real storage: the tuned knobs against a grid measured in the same run.

    sudo python benchmarks/bench_tune.py                              # full: ~25 min
    sudo python benchmarks/bench_tune.py --quick                      # a smoke run, ~1 min
    python benchmarks/bench_tune.py --conditions local,latency        # without root: no netns

Conditions (each reads the same kind of data the whole time):

* local: ``--files`` x ``--file-size`` of random bytes in ``--data-dir``, read
  with O_DIRECT (so every read comes from the device, as with a cold cache);
  the page cache is dropped first (``/proc/sys/vm/drop_caches``, as root).
* latency: the same files served over HTTP on 127.0.0.1 by
  ``bench_remote``'s aiohttp server, every answer held back ``--latency`` s.
* shaped: that server in a network namespace behind a veth pair with a token
  bucket of ``--rate`` on both ends (``bench_remote.shaped_link``), plus the latency.

In each condition, every measurement reads the files over and over for
``--point-seconds`` through a fresh reader:

1. the grid: every ``--requests`` x ``--sizes`` point whose bytes in flight fit
   the tuner's ``--budget`` (as the tuner is constrained);
2. the defaults (16 x 1 MiB, budget allowing);
3. tuning: a reader with the defaults and a :class:`fastio.reader._tuning.ReaderTuning`
   (windows of ``--window-seconds``) reads until the tuner settles (or
   ``--max-tune-seconds``); time to converge is from the first read to the
   settling decision;
4. the tuned configuration, measured like a grid point.

Printed per condition: tuned MB/s as a share of the best grid point (the goal
is >= 90%), time to converge, and the gain over the defaults; JSON goes to
benchmarks/results/tune-*.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import optuna
from bench_remote import NAMESPACE, NS_ADDRESS, bits_per_second, http_server, shaped_link

from fastio import Reader, ReaderSettings
from fastio.cli._options import parse_size
from fastio.reader._tuning import ReaderTuning, storage_fingerprint
from fastio.spec import TunerSettings

RESULTS = Path(__file__).parent / "results"
MiB = 1 << 20


def prepare(folder: Path, files: int, size: int) -> list[Path]:
    """``files`` files of ``size`` random bytes (kept between runs if the sizes match)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"part-{index:04d}.bin" for index in range(files)]
    for index, path in enumerate(paths):
        if not path.exists() or path.stat().st_size != size:
            rng = random.Random(index)
            with open(path, "wb") as handle:
                for _ in range(0, size, 4 * MiB):
                    handle.write(rng.randbytes(min(4 * MiB, size - handle.tell())))
    return paths


def drop_caches() -> bool:
    if os.geteuid() != 0:
        return False
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as handle:
        handle.write("3\n")
    return True


def stream_for(reader: Reader, sources: list[str], seconds: float, tick: Any = None) -> float:
    """Read ``sources`` over and over for ``seconds`` (calling ``tick()`` every
    chunk, if given); delivered MB/s."""
    started = time.perf_counter()
    delivered = 0
    while True:
        stream = reader.stream(sources)
        try:
            for chunk in stream:
                delivered += len(chunk.data)
                if tick is not None and tick():
                    return delivered / (time.perf_counter() - started) / 1e6
                if time.perf_counter() - started >= seconds:
                    return delivered / (time.perf_counter() - started) / 1e6
        finally:
            stream.close()  # type: ignore[attr-defined]


def measure(settings: ReaderSettings, sources: list[str], seconds: float) -> float:
    with Reader(settings) as reader:
        return stream_for(reader, sources, seconds)


def knobs(requests: int, size: int, base: ReaderSettings) -> ReaderSettings:
    # Room for every request in flight plus as much read ahead: the knobs set the depth.
    return base.replace(outstanding_requests=requests, read_size=size,
                        memory_budget=max(base.memory_budget, 2 * requests * size))  # fmt: skip


def tune(sources: list[str], base: ReaderSettings, args: argparse.Namespace,
         name: str) -> dict[str, Any]:  # fmt: skip
    """Tune on a live read until the tuner settles; its decisions and timing."""
    options = TunerSettings(memory_budget=args.budget, window_seconds=args.window_seconds,
                            warmup_seconds=args.warmup_seconds, seed=args.seed,
                            tick_seconds=min(0.1, args.window_seconds / 4))  # fmt: skip
    settings = base.replace(memory_budget=max(base.memory_budget, 2 * args.budget))
    with Reader(settings) as reader:
        tuning = ReaderTuning(reader, options, name)
        started = time.perf_counter()
        last = [started]
        settled_at: list[float] = []

        def tick() -> bool:
            now = time.perf_counter()
            if now - last[0] >= options.tick_seconds:
                last[0] = now
                decision = tuning.tick()
                if decision is not None:
                    print(f"  window {decision.window:3} {decision.phase:9} "
                          f"{decision.config['outstanding_requests']:3} x "
                          f"{decision.config['read_size'] / 1024:8.0f} KiB "
                          f"{decision.rate / 1e6:9.1f} MB/s  {decision.reason}",
                          file=sys.stderr)  # fmt: skip
                    if decision.next_phase == "settled" and decision.phase != "settled":
                        settled_at.append(now - started)
            return bool(settled_at) or now - started > args.max_tune_seconds

        mean_mb_per_s = stream_for(reader, sources, float("inf"), tick)
        tuning.close()
    tuner = tuning.tuner
    return {
        "converged": tuner.converged, "seconds_to_converge": settled_at[0] if settled_at else None,
        "windows": len(tuner.decisions), "trials": tuner.trials, "rounds": tuner.round,
        "tuned": tuner.best[0], "mean_mb_per_s_while_tuning": mean_mb_per_s,
        "decisions": [d.as_dict() for d in tuner.decisions],
    }  # fmt: skip


def run_condition(condition: str, sources: list[str], base: ReaderSettings,
                  args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    print(f"\n{condition}: {len(sources)} sources", file=sys.stderr)
    grid = []
    for requests in args.requests:
        for size in args.sizes:
            if requests * size > args.budget:
                continue
            rate = measure(knobs(requests, size, base), sources, args.point_seconds)
            grid.append({"outstanding_requests": requests, "read_size": size, "mb_per_s": rate})
            print(f"  grid {requests:3} x {size // 1024:6} KiB: {rate:9.1f} MB/s", file=sys.stderr)
    best = max(grid, key=lambda point: point["mb_per_s"])
    default = ReaderSettings()
    requests = min(default.outstanding_requests, max(1, args.budget // default.read_size))
    default_rate = measure(knobs(requests, default.read_size, base), sources, args.point_seconds)
    name = storage_fingerprint(sources, condition=condition, bench=time.time())
    tuning = tune(sources, base, args, name)
    tuned = tuning["tuned"]
    tuned_rate = measure(knobs(tuned["outstanding_requests"], tuned["read_size"], base), sources,
                         args.point_seconds)  # fmt: skip
    result = {
        "condition": condition, "grid": grid, "best_grid": best,
        "defaults": {"outstanding_requests": requests, "read_size": default.read_size,
                     "mb_per_s": default_rate},
        "tuned_mb_per_s": tuned_rate, "of_best_grid": tuned_rate / best["mb_per_s"],
        "gain_over_defaults": tuned_rate / default_rate if default_rate else None, **tuning,
    }  # fmt: skip
    return result


@contextlib.contextmanager
def sources_for(condition: str, paths: list[Path], args: argparse.Namespace) -> Iterator[list[str]]:
    if condition == "local":
        yield [str(path) for path in paths]
        return
    root = paths[0].parent
    if condition == "latency":
        with http_server(root, "127.0.0.1", args.latency, None) as base:
            yield [f"{base}/{path.name}" for path in paths]
        return
    with shaped_link(args.rate), http_server(root, NS_ADDRESS, args.latency, NAMESPACE) as base:
        yield [f"{base}/{path.name}" for path in paths]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/var/tmp/fastio-bench-tune"))
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--file-size", type=parse_size, default=parse_size("256MiB"))
    parser.add_argument("--conditions", type=lambda s: s.split(","),
                        default=["local", "latency", "shaped"])  # fmt: skip
    parser.add_argument("--requests", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 2, 4, 8, 16, 32, 64, 128])  # fmt: skip
    sizes = [parse_size(x) for x in ("64KiB", "256KiB", "1MiB", "4MiB")]
    parser.add_argument("--sizes", type=lambda s: [parse_size(x) for x in s.split(",")],
                        default=sizes)  # fmt: skip
    parser.add_argument("--budget", type=parse_size, default=parse_size("32MiB"),
                        help="bytes in flight for the tuner and the grid")  # fmt: skip
    parser.add_argument("--point-seconds", type=float, default=8.0)
    parser.add_argument("--window-seconds", type=float, default=1.0)
    parser.add_argument("--warmup-seconds", type=float, default=0.25)
    parser.add_argument("--max-tune-seconds", type=float, default=240.0)
    parser.add_argument("--latency", type=float, default=0.020)
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: 4 x 16 MiB, 1.5 s points, a 2 x 2 grid")  # fmt: skip
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/tune-*.json")
    args = parser.parse_args()
    if args.quick:
        args.files, args.file_size = 4, 16 * MiB
        args.requests, args.sizes = [4, 16], [256 * 1024, MiB]
        args.point_seconds, args.window_seconds, args.warmup_seconds = 1.5, 0.3, 0.1
        args.max_tune_seconds = 30.0
    unknown = set(args.conditions) - {"local", "latency", "shaped"}
    if unknown:
        parser.error(f"unknown conditions {sorted(unknown)}; known: local, latency, shaped")
    if "shaped" in args.conditions and os.geteuid() != 0:
        parser.error("the shaped link needs root (ip netns, tc); or leave out 'shaped'")
    bits_per_second(args.rate)  # a bad rate fails before anything runs
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    paths = prepare(args.data_dir / f"{args.files}x{args.file_size}", args.files, args.file_size)
    results = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="fastio-bench-tune-"):
        for condition in args.conditions:
            base = ReaderSettings(direct=condition == "local")
            if condition == "local":
                dropped = drop_caches()
                print(f"local: page cache {'dropped' if dropped else 'NOT dropped (not root)'}; "
                      "O_DIRECT reads", file=sys.stderr)  # fmt: skip
            with sources_for(condition, paths, args) as sources:
                results.append(run_condition(condition, sources, base, args))
    print(f"\n{'condition':10} {'best grid':>22} {'tuned':>22} {'of best':>8} "
          f"{'converge s':>10} {'x defaults':>10}")  # fmt: skip
    for r in results:
        best, tuned = r["best_grid"], r["tuned"]
        converge = r["seconds_to_converge"]
        print(f"{r['condition']:10} "
              f"{best['outstanding_requests']:3}x{best['read_size'] // 1024:6}K "
              f"{best['mb_per_s']:8.1f} MB/s "
              f"{tuned['outstanding_requests']:3}x{tuned['read_size'] // 1024:6}K "
              f"{r['tuned_mb_per_s']:8.1f} MB/s {r['of_best_grid']:8.0%} "
              f"{converge if converge is not None else float('nan'):10.1f} "
              f"{r['gain_over_defaults'] or 0:10.2f}")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    out = args.json or RESULTS / f"tune-{time.strftime('%Y%m%d-%H%M%S')}.json"
    record = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "seconds": time.time() - started, "kernel": os.uname().release,
              "results": results}  # fmt: skip
    out.write_text(json.dumps(record, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
