"""Time to the first sample: fastio.Dataset vs webdataset.WebDataset, fresh processes.

    python benchmarks/bench_startup.py --data-dir /work/data/fmt-bench-02
    python benchmarks/bench_startup.py --data-dir /work/data/fmt-bench-02 --runs 9 --cold

The tar copy of ``bench_datasets.py``'s "large" case (written by it; ~110 KB
samples, 64 shards, indexes present). Each run is a fresh process that first
imports what ``bench_datasets.py`` imports before its clock (fastio, numpy,
pyarrow, torch, uvloop, webdataset: a once-per-process cost), then times, as
that benchmark does, from constructing the dataset to its first sample (or
the first batch of a 2-worker DataLoader; "spawn": its workers spawned, each
sent the pickled dataset), and stops there, with the
iteration still open (its teardown is not part of the wait): seconds per
run, not a whole epoch. Besides wall-clock time it reports the process's
CPU time to the first sample (all threads) and the main thread's, which a
loaded machine disturbs less, and what leaving the iteration then costs (a
``break`` out of the loop: read-ahead cancelled, workers stopped). Methods
run in a shuffled order in each round; the table shows medians and
webdataset's time over fastio's (above 1: fastio starts sooner).

fastio runs with ``shuffle=False`` (as ``bench_datasets.py``), with the
default settings (``shuffle=True``), and never seen (an empty index folder:
the first epoch streams). Warm by default (the files are read once,
untimed); ``--cold`` drops the page cache before every run (root).
``--imports`` counts importing the library too (``import fastio`` and the
modules its first dataset loads; ``import webdataset``), with numpy, pyarrow
and torch imported before the clock, as a training script has them.

``--shards N`` measures how the start grows with a dataset's shard count
instead: N small shards (8 samples of 1 KB each, written once into
``--data-dir`` by webdataset's ``TarWriter``, with a fastio dataset index
beside them), read with the same methods. "never seen" reads a copy of
them in a folder of its own, where no dataset index is, with an empty
default index folder (a fresh ``XDG_CACHE_HOME``, as on a user's first run),
so that it finds no index at all and streams:

    python benchmarks/bench_startup.py --shards 2000 --methods "fastio,fastio never seen,webdataset"

``--fs-latency MS`` reads the data through a FUSE mount whose every lookup,
stat and open first waits MS milliseconds, as on a network filesystem (NFS,
Lustre, a bucket mounted with FUSE): what checking each shard against its
index costs there. Needs root, libfuse and fusepy (see ``_slowfs.py``):

    python benchmarks/bench_startup.py --shards 2000 --fs-latency 1 --methods "fastio,webdataset"
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _slowfs import slow_mount
from bench_read import drop_caches, warm_up

CHILD = str(Path(__file__).with_name("_startup_child.py"))
METHODS = ["fastio", "fastio shuffled", "fastio never seen", "webdataset", "fastio loader",
           "webdataset loader", "fastio loader spawn", "webdataset loader spawn"]  # fmt: skip


def measure(method: str, url: str, cold: bool, imports: bool) -> dict[str, float]:
    if cold:
        drop_caches()
    with tempfile.TemporaryDirectory(prefix="fastio-startup-index-") as index_dir:
        command = [sys.executable, CHILD, method, url, index_dir, str(int(imports))]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{method}: exit {done.returncode}: {done.stderr[-2000:]}")
    report: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def many_shards(data_dir: Path, shards: int) -> dict[str, Any]:
    """A dataset of ``shards`` small WebDataset shards with its fastio index
    (written the first time), as a manifest's copy: its URL and paths."""
    folder = data_dir / f"startup-{shards}-shards"
    pattern = f"shard-{{00000..{shards - 1:05d}}}.tar"
    url = str(folder / pattern)
    paths = [str(folder / f"shard-{number:05d}.tar") for number in range(shards)]
    unindexed = folder / "unindexed"  # the same shards, with no dataset index beside them
    index = folder / "dataset.fastio-index.npz"
    if not index.exists():
        import webdataset

        import fastio

        folder.mkdir(parents=True, exist_ok=True)
        payload = random.Random(shards).randbytes(1000)
        for number, path in enumerate(paths):
            with webdataset.TarWriter(path) as writer:
                for sample in range(8):
                    writer.write({"__key__": f"{number:05d}-{sample}", "bin": payload,
                                  "cls": str(sample)})  # fmt: skip
        with fastio.Dataset(url, format="webdataset", shuffle=False) as dataset:
            dataset.save_index(str(index))
    if not unindexed.exists():
        unindexed.mkdir()
        for path in paths:  # copies: a link would be resolved at each open, or change the ctime
            shutil.copyfile(path, unindexed / Path(path).name)
    return {"url": url, "paths": paths, "unindexed_url": str(unindexed / pattern)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/work/data/bench-datasets"))
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per method")
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each")
    parser.add_argument("--methods", type=lambda s: s.split(","), default=METHODS)
    parser.add_argument("--seed", type=int, default=0, help="for the method order")
    parser.add_argument("--json", type=Path, help="also write the medians here, as JSON")
    parser.add_argument(
        "--shards",
        type=int,
        default=0,
        help="a dataset of this many small shards instead of the large case",
    )
    parser.add_argument(
        "--fs-latency",
        type=float,
        default=0.0,
        help="ms each lookup, stat and open waits (a FUSE mount of --data-dir)",
    )
    parser.add_argument(
        "--imports",
        action="store_true",
        help="count importing the library (fastio, webdataset) too; numpy, pyarrow and torch"
        " are imported before the clock",
    )
    args = parser.parse_args()
    if not args.fs_latency:
        run(args, args.data_dir, "")
        return
    with slow_mount(args.data_dir.resolve(), args.fs_latency / 1e3) as mount:
        run(args, mount, f", through a filesystem that waits {args.fs_latency:g} ms a lookup")


def run(args: argparse.Namespace, data_dir: Path, where: str) -> None:
    """The benchmark on the data under ``data_dir`` (``--data-dir`` itself or a
    slow mount of it): written and warmed where it is, read through ``data_dir``."""
    if args.shards:
        copy = many_shards(args.data_dir, args.shards)
    else:
        # bench_datasets.py writes one large case per --scale: the largest is read.
        found = glob.glob(str(args.data_dir / "large-*" / "manifest.json"))
        manifests = [json.loads(Path(path).read_text()) for path in found]
        if not manifests:
            raise SystemExit(f"no large case in {args.data_dir}: run bench_datasets.py first")
        manifest = max(manifests, key=lambda found: found["case"]["samples"])
        copy = manifest["copies"]["webdataset"]
    if not args.cold:
        warm_up(copy["paths"])
    # Every module's bytecode written now: where it is stale and Python may
    # not write it (PYTHONDONTWRITEBYTECODE), each process would compile the
    # module again inside the clock.
    import compileall

    import fastio

    compileall.compile_dir(str(Path(fastio.__file__).parent), quiet=1)
    if data_dir != args.data_dir:  # the same files, through the mount
        base = str(args.data_dir.resolve())
        copy = {key: value.replace(base, str(data_dir), 1) if isinstance(value, str) else value
                for key, value in copy.items()}  # fmt: skip
    results: dict[str, list[dict[str, float]]] = {method: [] for method in args.methods}
    order = random.Random(args.seed)
    for _ in range(args.runs):
        methods = list(args.methods)
        order.shuffle(methods)
        for method in methods:
            url = copy["url"]
            if method == "fastio never seen":
                url = copy.get("unindexed_url", url)
            results[method].append(measure(method, url, args.cold, args.imports))

    def median(method: str, key: str) -> float:
        return statistics.median(run[key] for run in results[method])

    mode = ("cold" if args.cold else "warm") + (", imports counted" if args.imports else "")
    print(
        f"time to the first sample ({mode}, {copy['url']}{where}, medians of {args.runs} processes)"
    )
    print("| method | first sample (ms) | CPU, all threads (ms) | CPU, main thread (ms) |"
          " webdataset / this (wall) | then stopping there (ms) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for method in args.methods:
        peer = method.replace("fastio", "webdataset", 1) if "loader" in method else "webdataset"
        ratio = ""
        if results.get(peer):
            ratio = f"{median(peer, 'seconds') / median(method, 'seconds'):.2f}"
        print(f"| {method} | {1e3 * median(method, 'seconds'):.1f} | "
              f"{1e3 * median(method, 'cpu'):.1f} | {1e3 * median(method, 'main_cpu'):.1f} | "
              f"{ratio} | {1e3 * median(method, 'close'):.1f} |")  # fmt: skip
    if args.json:
        medians = {method: {key: median(method, key)
                            for key in ("seconds", "cpu", "main_cpu", "close")}
                   for method in args.methods}  # fmt: skip
        args.json.write_text(json.dumps({"url": copy["url"], "mode": mode, "runs": args.runs,
                                         "fs_latency_ms": args.fs_latency, "medians": medians},
                                        indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
