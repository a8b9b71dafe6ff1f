"""Is the HTTP client the limit? Range reads over the 20 ms link: fsspec/aiohttp vs obstore vs curl.

    sudo .venv/bin/python benchmarks/bench_http_clients.py          # ~10 min
    sudo .venv/bin/python benchmarks/bench_http_clients.py --requests 8,64 --sizes 4 --repeats 1

The same link and nginx as bench_remote_link.py (run that once first: it
writes the dataset this reads), uncapped (``--rate`` to cap it). Each point
reads ``--bytes`` (at least 4 x N x R) of the shards, in order, as ranges of R
bytes with N requests in flight at all times, as fastio's reader issues them (see
fastio/sources/_remote.py), with a new client (so new connections) per run:

* fsspec: ``HTTPFileSystem._cat_file(url, start, end)`` on fsspec's event loop
  (aiohttp), N coroutines each taking the next range;
* obstore: ``obstore.get_range_async(HTTPStore, path, start=, length=)`` (Rust
  object_store on reqwest/tokio), the same N coroutines on an asyncio loop;
* curl: one ``curl --parallel --parallel-max N`` over the same ranges (C, one
  thread, bodies to /dev/null): what the link gives N streams.

Each client runs in its own fresh process for all its points; medians of
``--repeats``. CPU is the client process's (all threads) per GB read. The
machine's load average is recorded beside every point.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _wan

from fastio.cli._options import parse_size

RESULTS = Path(__file__).parent / "results"
SCRIPT = str(Path(__file__).resolve())
CLIENTS = ("fsspec", "obstore", "curl")
MiB = 1 << 20
WAVES = 4  # each run reads at least this many times N x R bytes


def ranges(urls: list[str], size: int, length: int, total: int) -> Iterator[tuple[str, int, int]]:
    """(url, offset, length) of ``total`` bytes of the shards, ``length`` at a time,
    in order, starting over at the first shard if ``total`` is more than they hold."""
    left = total
    while True:
        for url in urls:
            for offset in range(0, size, length):
                if left <= 0:
                    return
                take = min(length, size - offset, left)
                yield url, offset, take
                left -= take


async def drive(read: Callable[[str, int, int], Awaitable[int]], work: list[Any], n: int) -> int:
    """``n`` coroutines, each reading the next range until none is left; bytes read."""
    upcoming = iter(work)
    got = 0

    async def worker() -> None:
        nonlocal got
        for url, offset, length in upcoming:
            received = await read(url, offset, length)
            if received != length:
                raise RuntimeError(f"{url} at {offset}: {received} bytes, not {length}")
            got += received

    await asyncio.gather(*(worker() for _ in range(n)))
    return got


def fsspec_point(work: list[Any], n: int) -> int:
    from fsspec.asyn import get_loop, sync
    from fsspec.implementations.http import HTTPFileSystem

    # A new filesystem (so a new aiohttp session and new connections) per run;
    # fsspec would otherwise hand back its cached instance.
    fs = HTTPFileSystem(skip_instance_cache=True)

    async def read(url: str, offset: int, length: int) -> int:
        return len(await fs._cat_file(url, start=offset, end=offset + length))

    async def run() -> int:
        try:
            return await drive(read, work, n)
        finally:
            session = await fs.set_session()
            await session.close()

    return int(sync(get_loop(), run))


def obstore_point(work: list[Any], n: int) -> int:
    import obstore
    from obstore.store import HTTPStore

    base = work[0][0].rsplit("/", 1)[0]
    store = HTTPStore.from_url(base, client_options={"allow_http": True, "timeout": "300s"})

    async def read(url: str, offset: int, length: int) -> int:
        data = await obstore.get_range_async(
            store, url.rsplit("/", 1)[1], start=offset, length=length
        )
        return len(memoryview(data))

    return asyncio.run(drive(read, work, n))


def curl_point(work: list[Any], n: int) -> int:
    with tempfile.NamedTemporaryFile("w", suffix=".curl") as config:
        # One option group per transfer ("next" starts the next one): without it the
        # last range would apply to every URL.
        groups = [
            f'url = "{url}"\nrange = {offset}-{offset + length - 1}\noutput = /dev/null\n'
            'write-out = "%{size_download}\\n"\nsilent\nfail\n'
            for url, offset, length in work
        ]
        config.write("next\n".join(groups))
        config.flush()
        done = subprocess.run(
            [
                "curl",
                "--parallel",
                "--parallel-immediate",
                "--parallel-max",
                str(n),
                "-K",
                config.name,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    return sum(int(line) for line in done.stdout.split())


POINTS = {"fsspec": fsspec_point, "obstore": obstore_point, "curl": curl_point}


def cpu_seconds() -> float:
    """This process's CPU (every thread) and that of its children that ended (curl)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def child(spec_path: str) -> None:
    """Every point of one client, in this fresh process; one JSON line per run."""
    spec = json.loads(Path(spec_path).read_text())
    point = POINTS[spec["client"]]
    for requests in spec["requests"]:
        for size in spec["sizes"]:
            # Several waves of N requests, so the steady state and not the first
            # slow start of N new connections sets the figure.
            total = max(spec["bytes"], WAVES * requests * size)
            work = list(ranges(spec["urls"], spec["shard_bytes"], size, total))
            for repeat in range(spec["repeats"]):
                cpu_before, started = cpu_seconds(), time.perf_counter()
                try:
                    got = point(work, requests)
                except Exception as error:  # recorded as this point's failure
                    row: dict[str, Any] = {"error": f"{type(error).__name__}: {error}"}
                else:
                    seconds = time.perf_counter() - started
                    row = {
                        "mb_per_s": got / seconds / 1e6,
                        "cpu_s_per_gb": (cpu_seconds() - cpu_before) / (got / 1e9),
                    }
                row |= {
                    "client": spec["client"],
                    "requests": requests,
                    "size": size,
                    "repeat": repeat,
                    "load": os.getloadavg()[0],
                }
                print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/var/tmp/fastio-bench-remote-link"))
    parser.add_argument("--requests", default="8,16,32,64", help="N: requests in flight")
    parser.add_argument("--sizes", default="1,4,16", help="R: MiB per request")
    parser.add_argument("--bytes", type=parse_size, default=parse_size("1GiB"), help="per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--rate", default=None, help="cap the link (tc's syntax, e.g. 1gbit)")
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/http-clients-*.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if os.geteuid() != 0:
        parser.error("needs root: network namespaces, TUN devices, tc")
    # SIGTERM and SIGHUP unwind like Ctrl-C, so the link and nginx are taken down.
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, lambda *_: sys.exit(143))
    manifests = sorted(args.data_dir.glob("*/manifest.json"), key=lambda p: p.stat().st_size)
    if not manifests:
        parser.error(f"no dataset in {args.data_dir}: run bench_remote_link.py first")
    root = max(manifests, key=lambda p: json.loads(p.read_text())["bytes"]).parent
    manifest = json.loads((root / "manifest.json").read_text())
    shard_bytes = (root / manifest["names"][0]).stat().st_size
    clients = args.clients.split(",")
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="fastio-bench-clients-") as work,
        _wan.wan_link(args.rtt_ms / 2) as link,
        _wan.nginx(root) as base,
    ):
        link.set_rate(args.rate)
        ping = link.ping()
        print(
            f"link: ping RTT avg {ping['avg']:.2f} ms, rate {args.rate or 'uncapped'}; "
            f"{args.bytes / 1e6:,.0f} MB per run from {root}",
            file=sys.stderr,
        )
        for client in clients:
            spec = {
                "client": client,
                "urls": [f"{base}/{name}" for name in manifest["names"]],
                "shard_bytes": shard_bytes,
                "bytes": args.bytes,
                "requests": [int(n) for n in args.requests.split(",")],
                "sizes": [int(float(r) * MiB) for r in args.sizes.split(",")],
                "repeats": args.repeats,
            }
            spec_path = Path(work, f"{client}.json")
            spec_path.write_text(json.dumps(spec))
            process = subprocess.Popen(
                [sys.executable, SCRIPT, "--child", str(spec_path)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert process.stdout is not None
            try:
                for line in process.stdout:
                    row = json.loads(line)
                    rows.append(row)
                    shown = row.get("error") or (
                        f"{row['mb_per_s']:7.1f} MB/s {row['cpu_s_per_gb']:5.2f} CPU s/GB"
                    )
                    print(
                        f"  {client:8} N={row['requests']:<3} R={row['size'] // MiB:>2} MiB "
                        f"#{row['repeat'] + 1}: {shown}  load {row['load']:.1f}",
                        file=sys.stderr,
                        flush=True,
                    )
            finally:
                process.kill()
                process.wait()
    table = print_table(rows, clients)
    RESULTS.mkdir(exist_ok=True)
    out = args.json or RESULTS / f"http-clients-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items()},
                "ping_ms": ping,
                "runs": rows,
                "medians": table,
            },
            indent=1,
        )
    )
    print(f"results: {out}")


def print_table(rows: list[dict[str, Any]], clients: list[str]) -> list[dict[str, Any]]:
    """Medians per (N, R): MB/s and CPU s/GB per client, and obstore over fsspec."""
    points = sorted({(r["requests"], r["size"]) for r in rows})
    header = "".join(f" {c + ' MB/s':>13} {'CPU s/GB':>8}" for c in clients)
    print(f"\n{'N':>3} {'R MiB':>5}{header} {'obstore/fsspec':>14} {'fsspec/curl':>11}")
    table = []
    for requests, size in points:
        entry: dict[str, Any] = {"requests": requests, "size_mib": size // MiB}
        line = f"{requests:3} {size // MiB:5}"
        for client in clients:
            done = [
                r
                for r in rows
                if (r["client"], r["requests"], r["size"]) == (client, requests, size)
                and "mb_per_s" in r
            ]
            if not done:
                line += f" {'failed':>13} {'':>8}"
                continue
            mb = statistics.median(r["mb_per_s"] for r in done)
            cpu = statistics.median(r["cpu_s_per_gb"] for r in done)
            entry[client] = {"mb_per_s": mb, "cpu_s_per_gb": cpu}
            line += f" {mb:13.1f} {cpu:8.2f}"
        ratios = []
        for over, under in (("obstore", "fsspec"), ("fsspec", "curl")):
            if over in entry and under in entry:
                entry[f"{over}/{under}"] = entry[over]["mb_per_s"] / entry[under]["mb_per_s"]
                ratios.append(f"{entry[f'{over}/{under}']:.2f}")
            else:
                ratios.append("-")
        print(f"{line} {ratios[0]:>14} {ratios[1]:>11}")
        table.append(entry)
    return table


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the link and nginx are down by now (their finally blocks)
        sys.exit("interrupted")
