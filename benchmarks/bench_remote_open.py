"""Opening a remote dataset of many small shards: time to the open dataset,
to its first sample, and to the end of one epoch, in fresh processes.

    python benchmarks/bench_remote_open.py                       # 500 shards, 20 ms a request
    python benchmarks/bench_remote_open.py --shards 2000 --latency-ms 5 --runs 5

Writes ``--shards`` WebDataset shards of 8 samples of 1 KB (once, into
``--data-dir``), serves them from an HTTP Range server on loopback in a
process of its own (the test suite's, aiohttp) that waits ``--latency-ms``
before every answer, HEAD or GET, and writes their dataset index through it
(as ``fastio-bench index URL`` does). Then each method runs in a fresh
process, its imports done before the clock starts: fastio with the dataset
index, in stored order and shuffled; fastio never seen (the same shards,
hard-linked into a folder of their own with no index, served alike, and a
fresh index folder: each object is asked about as the epoch reads it);
and webdataset's first sample over the same server (it streams from the
first shard: no request per shard).
Prints medians of ``--runs`` processes, then JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SERVER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.servers import RangeServer
server = RangeServer(Path(sys.argv[1])).start()
print(server.url(""), flush=True)
sys.stdin.readline()  # then every answer waits
server.faults.latency = float(sys.argv[3])
print("ok", flush=True)
sys.stdin.readline()
server.stop()
"""

CHILD = """
import json, sys, tempfile, time
import fastio, fastio.dataset, gc, webdataset
gc.collect()
method, url = sys.argv[1], sys.argv[2]
started = time.perf_counter()
if method == "webdataset":
    iterator = iter(webdataset.WebDataset(url, shardshuffle=False))
    next(iterator)
    print(json.dumps({"first": time.perf_counter() - started}))
    sys.exit(0)
# Never seen: shards with no dataset index beside them, and no index kept
# from an earlier run (a fresh index folder).
fresh = {"index_dir": tempfile.mkdtemp()} if method.startswith("fastio never seen") else {}
shuffled = method.endswith("shuffled")
dataset = fastio.Dataset(url, format="webdataset", shuffle=shuffled, **fresh)
opened = time.perf_counter()
iterator = iter(dataset)
next(iterator)
first = time.perf_counter()
count = 1 + sum(1 for _ in iterator)
print(json.dumps({"open": opened - started, "first": first - started,
                  "epoch": time.perf_counter() - started, "samples": count}))
"""

METHODS = [
    "fastio",
    "fastio shuffled",
    "fastio never seen",
    "fastio never seen shuffled",
    "webdataset",
]


def write_shards(folder: Path, shards: int) -> None:
    import webdataset

    if (folder / f"shard-{shards - 1:05d}.tar").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    payload = random.Random(shards).randbytes(1000)
    for number in range(shards):
        with webdataset.TarWriter(str(folder / f"shard-{number:05d}.tar")) as writer:
            for sample in range(8):
                writer.write({"__key__": f"{number:05d}-{sample}", "bin": payload})


def unindexed(folder: Path, shards: int) -> Path:
    """The same shards (hard links) in a folder of their own, no index beside them."""
    other = folder.with_name(folder.name + "-unindexed")
    other.mkdir(exist_ok=True)
    for number in range(shards):
        name = f"shard-{number:05d}.tar"
        if not (other / name).exists():
            os.link(folder / name, other / name)
    return other


def serve(folder: Path, latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    """The Range server of ``folder`` in a process of its own, and its base URL."""
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(folder), str(ROOT), str(latency_ms / 1e3)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def released(server: subprocess.Popen[str]) -> None:
    """Every answer waits from now on."""
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdin.write("go\n")
    server.stdin.flush()
    server.stdout.readline()


def stopped(server: subprocess.Popen[str]) -> None:
    assert server.stdin is not None
    server.stdin.write("stop\n")
    server.stdin.flush()
    server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/work/data/bench-datasets"))
    parser.add_argument("--shards", type=int, default=500)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per method")
    parser.add_argument("--methods", type=lambda s: s.split(","), default=METHODS)
    parser.add_argument("--json", type=Path, help="also write the medians here")
    args = parser.parse_args()
    folder = args.data_dir / f"remote-open-{args.shards}-shards"
    write_shards(folder, args.shards)
    pattern = f"shard-{{00000..{args.shards - 1:05d}}}.tar"
    server, base = serve(folder, args.latency_ms)
    bare, bare_base = serve(unindexed(folder, args.shards), args.latency_ms)
    try:
        url = base + pattern
        index = folder / "dataset.fastio-index.npz"  # served beside the shards
        command = str(Path(sys.executable).parent / "fastio-bench")
        subprocess.run([command, "index", url, "--index", str(index)], check=True,
                       capture_output=True)  # fmt: skip
        released(server)
        released(bare)
        runs: dict[str, list[dict[str, float]]] = {method: [] for method in args.methods}
        for run in range(args.runs):
            for method in args.methods:
                served = bare_base + pattern if method.startswith("fastio never seen") else url
                done = subprocess.run([sys.executable, "-c", CHILD, method, served],
                                      capture_output=True, text=True, cwd="/tmp")  # fmt: skip
                if done.returncode:
                    raise RuntimeError(f"{method}: {done.stderr[-2000:]}")
                runs[method].append(json.loads(done.stdout))
                print(f"run {run + 1}/{args.runs} {method}: {runs[method][-1]}", file=sys.stderr)
    finally:
        stopped(server)
        stopped(bare)
    medians = {method: {key: statistics.median(row[key] for row in rows) for key in rows[0]}
               for method, rows in runs.items()}  # fmt: skip
    print(f"{args.shards} shards of 8 x 1 KB, indexed (but where never seen), each answer after "
          f"{args.latency_ms:g} ms; "
          f"medians of {args.runs} processes")  # fmt: skip
    print("| method | open (ms) | first sample (ms) | epoch (s) |")
    print("|---|---|---|---|")
    for method, row in medians.items():
        opened = f"{row['open'] * 1e3:.0f}" if "open" in row else ""
        epoch = f"{row['epoch']:.2f}" if "epoch" in row else ""
        print(f"| {method} | {opened} | {row['first'] * 1e3:.0f} | {epoch} |")
    report = {"args": {k: str(v) for k, v in vars(args).items()}, "medians": medians}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
