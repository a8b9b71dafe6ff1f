"""Raw read throughput: fastio vs fio (the hardware limit) vs plain Python, in one run.

    python benchmarks/bench_read.py                       # ~2 GiB, full grid, 3 repeats
    python benchmarks/bench_read.py --size 512MiB --repeats 1 --grid-q 1,16 --grid-bs 1MiB

The same files are read by every method at every (outstanding requests, read
size) point of the grid, in two states:

* cold: page cache dropped before every run (needs root), O_DIRECT for all;
* warm: files in the page cache, buffered reads. fastio hands the bytes to
  Python as buffers (chunks are views, not copied again).

fio is the hardware reference: its number in each cell is the best of its
io_uring engine (and psync, warm) with ordinary memory and with buffers on
hugetlbfs (``--iomem=mmaphuge``, when run as root). fastio reads into
huge-page-backed buffers; some devices (virtio-blk: 254 segments per request)
split reads into 4 KiB-page buffers, so fio with default memory understates
what the device can do.

Every cell is the median of ``--repeats`` runs. Within each repeat the methods
run in a shuffled (seeded) order: on a virtual disk the first reader after a
pause or after another workload is often slower, and a fixed order would always
hand that penalty to the same method. One untimed pass warms everything up
first. Results print as a table with ratios to fio, and are written as JSON
(and a plot with ``--plot``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import fastio
from fastio.cli._measure import read_with_fastio
from fastio.cli._options import parse_size

RESULTS = Path(__file__).parent / "results"


@dataclass
class Cell:
    mode: str  # cold | warm
    method: str  # fio | fastio-io_uring | fastio-threads | python
    outstanding_requests: int
    read_size: int
    runs_mb_per_s: list[float]

    @property
    def mb_per_s(self) -> float:
        return statistics.median(self.runs_mb_per_s)


def make_dataset(folder: Path, total: int, files: int) -> list[str]:
    """``files`` files of random bytes summing to ``total``; reused when present."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    size = total // files
    paths = []
    generator = np.random.default_rng(0)
    for index in range(files):
        path = folder / f"shard-{index:04d}.bin"
        if not path.exists() or path.stat().st_size != size:
            with open(path, "wb") as handle:
                for _ in range(size // (1 << 20)):
                    handle.write(generator.bytes(1 << 20))
                handle.write(generator.bytes(size % (1 << 20)))
        paths.append(str(path))
    return paths


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as handle:
        handle.write("3\n")


def warm_up(paths: list[str]) -> None:
    buffer = bytearray(1 << 20)
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass


@contextlib.contextmanager
def hugetlbfs(bytes_needed: int) -> Iterator[str | None]:
    """A hugetlbfs mount with enough 2 MiB pages reserved for fio's buffers
    (root only; yields None otherwise). Restores the reservation afterwards."""
    if os.geteuid() != 0:
        yield None
        return
    control = Path("/proc/sys/vm/nr_hugepages")
    before = int(control.read_text())
    pages = bytes_needed // (2 << 20) + 8
    control.write_text(f"{before + pages}\n")
    mount = tempfile.mkdtemp(prefix="fastio-hugetlbfs-")
    try:
        subprocess.run(["mount", "-t", "hugetlbfs", "none", mount], check=True)
        try:
            yield mount
        finally:
            subprocess.run(["umount", mount], check=True)
    finally:
        os.rmdir(mount)
        control.write_text(f"{before}\n")


def run_fio(
    paths: list[str], engine: str, qd: int, bs: int, direct: bool, huge_mount: str | None = None
) -> float:
    total = sum(os.path.getsize(p) for p in paths)
    command = [
        "fio", "--name=read", "--rw=read", f"--bs={bs}", f"--iodepth={qd}",
        f"--ioengine={engine}", f"--direct={int(direct)}", "--filename=" + ":".join(paths),
        "--file_service_type=sequential", f"--size={total}", "--output-format=json",
        "--invalidate=0",
    ]  # fmt: skip
    if huge_mount is not None:
        command.append(f"--iomem=mmaphuge:{huge_mount}/fio-buffers")
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    job = json.loads(output[output.index("{") :])["jobs"][0]["read"]
    if job["io_bytes"] != total:
        raise RuntimeError(f"fio read {job['io_bytes']} of {total} bytes")
    return job["io_bytes"] / (job["runtime"] / 1000) / 1e6


def run_python(paths: list[str], bs: int, direct: bool) -> float:
    """os.preadv into one page-aligned buffer: the plain-Python loop (O_DIRECT-capable)."""
    buffer = mmap.mmap(-1, bs)
    total = 0
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    started = time.perf_counter()
    for path in paths:
        fd = os.open(path, flags)
        try:
            offset = 0
            while count := os.preadv(fd, [buffer], offset):
                total += count
                offset += count
        finally:
            os.close(fd)
    return total / (time.perf_counter() - started) / 1e6


def run_fastio(paths: list[str], engine: str, qd: int, bs: int, direct: bool) -> float:
    # fio keeps qd x bs bytes in flight; give fastio room for as much plus its
    # read-ahead and the sync hand-off, or the budget, not the knobs, sets the depth.
    budget = max(fastio.ReaderSettings().memory_budget, 3 * qd * bs)
    settings = fastio.ReaderSettings(
        engine=engine, outstanding_requests=qd, read_size=bs, direct=direct, memory_budget=budget
    )
    return read_with_fastio(paths, settings).mb_per_s


def measure(args: argparse.Namespace, paths: list[str], huge_mount: str | None) -> list[Cell]:
    cells: list[Cell] = []
    order = random.Random(args.seed)
    have_fio = shutil.which("fio") is not None
    if not have_fio:
        print("fio is not installed: the plain Python loop is the reference", file=sys.stderr)
    for mode in args.modes:
        direct = mode == "cold"
        for bs in args.grid_bs:
            for qd in args.grid_q:
                methods: dict[str, list[float]] = {}
                for _ in range(args.repeats):
                    plan = [(f"fastio-{engine}", engine) for engine in args.engines]
                    if have_fio:
                        plan.append(("fio", "io_uring"))
                        if huge_mount is not None:
                            plan.append(("fio-huge", "io_uring"))
                        if mode == "warm":
                            plan.append(("fio-psync", "psync"))
                    if qd == args.grid_q[0]:
                        plan.append(("python", ""))
                    order.shuffle(plan)
                    for method, engine in plan:
                        if mode == "cold":
                            drop_caches()
                        else:
                            warm_up(paths)
                        if method.startswith("fastio"):
                            value = run_fastio(paths, engine, qd, bs, direct)
                        elif method.startswith("fio"):
                            huge = huge_mount if method == "fio-huge" else None
                            value = run_fio(paths, engine, qd, bs, direct, huge)
                        else:
                            value = run_python(paths, bs, direct)
                        methods.setdefault(method, []).append(value)
                variants = [m for m in ("fio", "fio-huge", "fio-psync") if m in methods]
                if variants:  # fio's best at these settings is the reference
                    best = max(variants, key=lambda m: statistics.median(methods[m]))
                    methods["fio"] = methods[best]
                    for variant in variants:
                        if variant != "fio":
                            del methods[variant]
                for method, runs in methods.items():
                    cells.append(Cell(mode, method, qd, bs, runs))
                line = "  ".join(f"{m} {statistics.median(r):7.0f}" for m, r in methods.items())
                print(f"{mode:4} q={qd:<3} bs={bs >> 10:>5}KiB  {line}", file=sys.stderr)
    return cells


def summarize(cells: list[Cell]) -> dict[str, object]:
    summary: dict[str, object] = {}
    for mode in sorted({c.mode for c in cells}):
        ours = [c for c in cells if c.mode == mode and c.method.startswith("fastio")]
        reference = [c for c in cells if c.mode == mode and c.method == "fio"]
        if not reference:
            reference = [c for c in cells if c.mode == mode and c.method == "python"]
        best_ours = max(ours, key=lambda c: c.mb_per_s)
        best_ref = max(reference, key=lambda c: c.mb_per_s)
        summary[mode] = {
            "fastio_best": asdict(best_ours) | {"mb_per_s": best_ours.mb_per_s},
            "reference_best": asdict(best_ref) | {"mb_per_s": best_ref.mb_per_s},
            "ratio": best_ours.mb_per_s / best_ref.mb_per_s,
        }
    return summary


def describe_best(numbers: dict[str, dict[str, float | int | str]]) -> str:
    ours, ref = numbers["fastio_best"], numbers["reference_best"]

    def where(cell: dict[str, float | int | str]) -> str:
        return f"q={cell['outstanding_requests']}, bs={int(cell['read_size']) >> 10}KiB"

    return (
        f"best fastio {ours['mb_per_s']:.0f} MB/s ({ours['method']}, {where(ours)}) vs "
        f"best {ref['method']} {ref['mb_per_s']:.0f} MB/s ({where(ref)}): "
        f"ratio {numbers['ratio']:.2f}"
    )


def print_table(cells: list[Cell]) -> None:
    keys = sorted({(c.mode, c.read_size, c.outstanding_requests) for c in cells})
    methods = sorted({c.method for c in cells})
    header = f"{'mode':5} {'bs':>8} {'q':>4} " + " ".join(f"{m:>16}" for m in methods)
    print(header + "   best fastio / fio")
    for mode, bs, qd in keys:
        row = {
            c.method: c.mb_per_s
            for c in cells
            if (c.mode, c.read_size, c.outstanding_requests) == (mode, bs, qd)
        }
        values = " ".join(f"{row[m]:16.0f}" if m in row else f"{'':>16}" for m in methods)
        ours = max((v for m, v in row.items() if m.startswith("fastio")), default=0.0)
        ratio = f"{ours / row['fio']:.2f}" if "fio" in row else ""
        print(f"{mode:5} {bs >> 10:>6}Ki {qd:>4} {values}   {ratio}")


def plot(cells: list[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = sorted({c.mode for c in cells})
    figure, axes = plt.subplots(1, len(modes), figsize=(7 * len(modes), 4.5), squeeze=False)
    for axis, mode in zip(axes[0], modes, strict=True):
        points = sorted({(c.read_size, c.outstanding_requests) for c in cells if c.mode == mode})
        labels = [f"{bs >> 10}K q{qd}" for bs, qd in points]
        methods = sorted({c.method for c in cells if c.mode == mode})
        width = 0.8 / len(methods)
        for index, method in enumerate(methods):
            values = []
            for bs, qd in points:
                match = [
                    c.mb_per_s
                    for c in cells
                    if (c.mode, c.method, c.read_size, c.outstanding_requests)
                    == (mode, method, bs, qd)
                ]
                values.append(match[0] if match else 0)
            axis.bar([i + index * width for i in range(len(points))], values, width, label=method)
        axis.set_xticks([i + 0.4 - width / 2 for i in range(len(points))], labels, rotation=60)
        axis.set_ylabel("MB/s")
        axis.set_title(f"{mode} ({'O_DIRECT' if mode == 'cold' else 'page cache'})")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp/fastio-bench-read"))
    parser.add_argument("--size", type=parse_size, default=parse_size("2GiB"))
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="for the order of methods")
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["cold", "warm"])
    parser.add_argument("--engines", type=lambda s: s.split(","), default=["io_uring", "threads"])
    parser.add_argument(
        "--grid-q", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16, 64]
    )
    parser.add_argument(
        "--grid-bs",
        type=lambda s: [parse_size(x) for x in s.split(",")],
        default=[parse_size(x) for x in ("128KiB", "1MiB", "4MiB")],
    )
    parser.add_argument(
        "--json", type=Path, help="where to write the results (default: benchmarks/results/)"
    )
    parser.add_argument("--plot", type=Path, help="write a PNG bar chart here (needs matplotlib)")
    args = parser.parse_args()
    if "cold" in args.modes and os.geteuid() != 0:
        parser.error("cold runs drop the page cache, which needs root (or use --modes warm)")
    paths = make_dataset(args.dir, args.size, args.files)
    started = time.time()
    largest = max(args.grid_q) * max(args.grid_bs)
    warm_up_pass = fastio.ReaderSettings(direct="cold" in args.modes)
    read_with_fastio(paths, warm_up_pass)  # untimed: first-run effects land here
    with hugetlbfs(largest) as huge_mount:
        cells = measure(args, paths, huge_mount)
    print_table(cells)
    summary = summarize(cells)
    for mode, numbers in summary.items():
        print(f"{mode}: {describe_best(numbers)}")  # type: ignore[arg-type]
    RESULTS.mkdir(exist_ok=True)
    out = args.json or RESULTS / f"read-{time.strftime('%Y%m%d-%H%M%S')}.json"
    record = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "seconds": time.time() - started,
        "kernel": os.uname().release,
        "cells": [asdict(c) | {"mb_per_s": c.mb_per_s} for c in cells],
        "summary": summary,
    }
    out.write_text(json.dumps(record, indent=1))
    print(f"results: {out}")
    if args.plot:
        plot(cells, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
