"""Remote read throughput: fastio vs fsspec's ``open().read()`` vs webdataset over HTTP, one run.

    sudo python benchmarks/bench_remote.py                        # 32 x 16 MiB shards, ~6 min
    sudo python benchmarks/bench_remote.py --scale 0.1 --repeats 1 --plot remote.png

One WebDataset tar dataset (``--shards`` x ``--shard-size`` of ~110 KB samples,
written once with ``fastio.cli._gen.write_dataset`` into ``--data-dir``; ``--scale``
shrinks the number of shards) is served over HTTP by an aiohttp server in a
child process: aiohttp's static files (Range, HEAD, ETag; bodies by sendfile),
every answer, HEAD or GET, held back ``--latency`` seconds. Network conditions:

* latency: the server on 127.0.0.1; only the server's added latency per request.
* shaped: the server in a network namespace (``ip netns``) at 10.99.0.2, reached
  over a veth pair (host 10.99.0.1), with a token bucket (``tc qdisc ... tbf rate
  --rate burst 1mb latency 50ms``) on both ends' egress, plus the same latency.
  The data flows namespace -> host, so it is the namespace end's tbf that limits
  it. The kernel has no netem (and no fq), so the latency is the server's time
  to first byte per request, not a round-trip time of every packet: TCP's window
  grows as fast as on a LAN, which flatters single-stream readers.
  bench_remote_link.py measures over a link that delays every packet instead.

Methods, all reading the same shards in order and touching every sample
(counted, ``.bin`` payload lengths summed; a wrong count or total fails the run):

* fastio: ``fastio.Dataset(pattern, format="webdataset", shuffle=False)`` iterated,
  with default knobs and with each ``--pairs`` (outstanding_requests:read_size;
  the memory budget raised to q x size where the default is less, so the knobs
  and not the budget set the depth). The per-shard index is built untimed
  first; the timed run includes constructing the dataset (a HEAD per shard).
* fsspec: ``fsspec.open(url).read()`` per shard (a HEAD, then one GET of the
  whole object), samples split from the bytes by Python's ``tarfile``.
* webdataset: ``webdataset.WebDataset(urls, shardshuffle=False)`` (``curl`` per
  shard through a pipe, ``tarfile`` inside).
* the limit: ``curl`` of every shard to /dev/null, one after another on one
  connection and ``--curl-parallel`` at once (bytes only, no samples); for the
  shaped link also its configured rate.

Each run is a fresh process, timed inside from constructing the dataset (or
the first open) to the last sample. Methods run in a shuffled (seeded) order in
each of ``--repeats`` rounds; tables show medians, with ratios to fsspec and
webdataset. MB/s counts the tar files' bytes. Results go to
benchmarks/results/ as JSON (and a plot with ``--plot``). Needs root for the
namespace (``--conditions latency`` runs without), iproute2 and curl.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _imports import collect_imports

from fastio import ReaderSettings
from fastio.cli._gen import write_dataset
from fastio.cli._options import parse_size

RESULTS = Path(__file__).parent / "results"
SCRIPT = str(Path(__file__).resolve())
COUNT_PATH = "/__requests"  # the server's count of data requests (not delayed, not counted)
NAMESPACE = "fastio-bench"
HOST_VETH, NS_VETH = "fbench0", "fbench1"
HOST_ADDRESS, NS_ADDRESS = "10.99.0.1", "10.99.0.2"
COLORS = {"fastio": "tab:blue", "curl": "tab:gray"}
RUN_TIMEOUT = 900.0  # seconds: a run that takes longer is reported as hung
IMPORTS = {
    "fastio": ("fastio", "fsspec.implementations.http"),
    "fsspec": ("fsspec", "fsspec.implementations.http", "tarfile"),
    "webdataset": ("webdataset",),
}


@dataclass(frozen=True)
class Method:
    name: str
    kind: str  # fastio | fsspec | webdataset | curl
    knobs: dict[str, int] = field(default_factory=dict)  # fastio's; curl: {"parallel": n}


def methods(pairs: list[tuple[int, int]], curl_parallel: int) -> list[Method]:
    chosen = [Method("fastio default", "fastio")]
    default_budget = ReaderSettings().memory_budget
    for requests, size in pairs:
        # Room for every request in flight, no more: a budget past the data's
        # reuse (3 x q x size, as bench_read gives) hands each read a fresh
        # buffer, and its page faults cost CPU (about twice as much at 64 x 4 MiB).
        budget = max(default_budget, requests * size)
        knobs = {"outstanding_requests": requests, "read_size": size, "memory_budget": budget}
        unit = f"{size >> 20}MiB" if size % (1 << 20) == 0 else f"{size >> 10}KiB"
        chosen.append(Method(f"fastio q{requests} {unit}", "fastio", knobs))
    # Through a cold shard cache (one epoch): every shard is downloaded whole,
    # by the reader on demand, or ahead of it by the prefetcher.
    chosen += [
        Method("fastio cache, on demand", "fastio", {"cache_prefetch": 0}),
        Method("fastio cache, prefetch 2", "fastio", {"cache_prefetch": 2}),
    ]
    return [
        *chosen,
        Method("fsspec open().read()", "fsspec"),
        Method("webdataset", "webdataset"),
        Method("curl sequential", "curl", {"parallel": 1}),
        Method(f"curl parallel {curl_parallel}", "curl", {"parallel": curl_parallel}),
    ]


# ---- data ----------------------------------------------------------------------------


def prepare(folder: Path, shards: int, shard_size: int, sample_size: int) -> dict[str, Any]:
    """The dataset's manifest; the shards are written unless the manifest matches."""
    wanted = {
        "shards": shards,
        "samples": shards * (shard_size // sample_size),
        "sample_size": sample_size,
    }
    manifest_path = folder / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest["case"] == wanted and all((folder / n).exists() for n in manifest["names"]):
            return manifest
    shutil.rmtree(folder, ignore_errors=True)
    result = write_dataset(folder, "webdataset", wanted["samples"], sample_size, shards)
    manifest = {
        "case": wanted,
        "names": [Path(p).name for p in result.paths],
        "pattern": Path(result.url).name,
        "bytes": result.bytes,
        "payload_bytes": result.payload_bytes,
    }
    manifest_path.write_text(json.dumps(manifest, indent=1))
    print(f"wrote {shards} shards, {result.bytes / 1e6:.0f} MB, in {folder}", file=sys.stderr)
    return manifest


def warm_up(folder: Path, names: list[str]) -> None:
    """Every shard into the page cache: the server reads from memory, not the disk."""
    buffer = bytearray(1 << 20)
    for name in names:
        with open(folder / name, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass


# ---- the server and the network ------------------------------------------------------


def serve(root: str, host: str, latency: float) -> None:
    """Run the HTTP server (in a child process); prints its port, then serves until killed."""
    import asyncio

    from aiohttp import web

    served = 0

    @web.middleware
    async def late(request: web.Request, handler: Any) -> web.StreamResponse:
        nonlocal served
        if request.path == COUNT_PATH:
            return web.json_response(served)
        served += 1
        await asyncio.sleep(latency)
        response: web.StreamResponse = await handler(request)
        return response

    async def main() -> None:
        app = web.Application(middlewares=[late])
        app.router.add_static("/", root)  # FileResponse: Range, HEAD, ETag, sendfile
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, 0, backlog=1024)
        await site.start()
        print(runner.addresses[0][1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


@contextlib.contextmanager
def http_server(root: Path, host: str, latency: float, netns: str | None) -> Iterator[str]:
    """The base URL of a server of ``root`` on ``host`` (inside ``netns`` if given)."""
    command = [sys.executable, SCRIPT, "--serve", str(root), host, str(latency)]
    if netns is not None:
        command = ["ip", "netns", "exec", netns, *command]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError(f"the HTTP server did not start (exit {process.poll()})")
        yield f"http://{host}:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def served_requests(base: str) -> int:
    with urllib.request.urlopen(base + COUNT_PATH, timeout=10) as answer:
        return int(json.loads(answer.read()))


def ip(command: str, netns: str | None = None) -> None:
    """Run an iproute2 ``command`` (its words split on spaces), in ``netns`` if given."""
    words = [*(("ip", "netns", "exec", netns) if netns else ()), *command.split()]
    done = subprocess.run(words, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{command}: {done.stderr.strip()}")


def remove_link() -> None:
    """Delete the namespace (which deletes its veth end, and so the pair) and the
    host end if it outlived it. Only this benchmark's names; absent ones are fine."""
    subprocess.run(["ip", "netns", "del", NAMESPACE], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", HOST_VETH], capture_output=True, check=False)


@contextlib.contextmanager
def shaped_link(rate: str) -> Iterator[Callable[[], str]]:
    """A namespace behind a veth pair, each end's egress through a token bucket.
    Yields a function giving the data direction's qdisc statistics (``tc -s``)."""
    remove_link()  # the leftovers of an interrupted run
    try:
        ip(f"ip netns add {NAMESPACE}")
        ip(f"ip link add {HOST_VETH} type veth peer name {NS_VETH} netns {NAMESPACE}")
        ip(f"ip addr add {HOST_ADDRESS}/24 dev {HOST_VETH}")
        ip(f"ip link set {HOST_VETH} up")
        ip(f"ip addr add {NS_ADDRESS}/24 dev {NS_VETH}", NAMESPACE)
        ip(f"ip link set {NS_VETH} up", NAMESPACE)
        ip("ip link set lo up", NAMESPACE)
        for device, netns in ((HOST_VETH, None), (NS_VETH, NAMESPACE)):
            ip(f"tc qdisc add dev {device} root tbf rate {rate} burst 1mb latency 50ms", netns)
        command = ["ip", "netns", "exec", NAMESPACE, "tc", "-s", "qdisc", "show", "dev", NS_VETH]
        yield lambda: subprocess.run(command, capture_output=True, text=True, check=True).stdout
    finally:
        remove_link()


# ---- methods (fastio, fsspec and webdataset run in a child process) ------------------


def fastio_run(spec: dict[str, Any], knobs: dict[str, int]) -> tuple[int, int, dict[str, Any]]:
    import fastio

    samples = payload = 0
    cache: dict[str, Any] = {}
    if "cache_prefetch" in knobs:  # a fresh, empty cache that holds the whole dataset
        folder = tempfile.mkdtemp(prefix="cache-", dir=Path(spec["index_dir"]).parent)
        cache = {"cache_dir": folder, "cache_bytes": 1 << 40}
    started = time.perf_counter()
    with fastio.Dataset(
        spec["pattern"], format="webdataset", shuffle=False, index_dir=spec["index_dir"],
        **knobs, **cache,
    ) as dataset:  # fmt: skip
        opened = time.perf_counter() - started  # a HEAD per shard
        for sample in dataset:
            samples += 1
            payload += len(sample["bin"])
        reader = dataset.stats()["reader"]
    if cache:
        shutil.rmtree(cache["cache_dir"])
    kept = ("requests", "wait_seconds", "latency_p50_seconds", "latency_p90_seconds")
    return samples, payload, {"open_seconds": opened} | {k: reader[k] for k in kept}


def fsspec_run(spec: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    import io
    import tarfile

    import fsspec

    samples = payload = 0
    for url in spec["urls"]:
        with fsspec.open(url, "rb") as remote:
            data = remote.read()
        last_key = None
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:
            for member in tar:
                key, _, extension = member.name.partition(".")
                body = tar.extractfile(member).read()  # type: ignore[union-attr]
                if key != last_key:
                    samples += 1
                    last_key = key
                if extension == "bin":
                    payload += len(body)
    return samples, payload, {}


def webdataset_run(spec: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    import webdataset

    samples = payload = 0
    for sample in webdataset.WebDataset(spec["urls"], shardshuffle=False):
        samples += 1
        payload += len(sample["bin"])
    return samples, payload, {}


def cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its children that ended (curl)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def child(method_name: str, spec_path: str) -> None:
    """Run one method in this (fresh) process and print its measurement."""
    spec = json.loads(Path(spec_path).read_text())
    method = next(m for m in methods(spec["pairs"], 1) if m.name == method_name)
    # Imports are not timed: fastio.Dataset pulls in torch (~3 s here) for IterableDataset.
    for module in IMPORTS[method.kind]:
        importlib.import_module(module)
    if method.kind == "fastio":
        import fastio

        assert fastio.Dataset  # a lazy attribute: this imports it
    collect_imports()
    cpu_before = cpu_seconds()
    started = time.perf_counter()
    if method.kind == "fastio":
        samples, payload, details = fastio_run(spec, method.knobs)
    elif method.kind == "fsspec":
        samples, payload, details = fsspec_run(spec)
    else:
        samples, payload, details = webdataset_run(spec)
    seconds = time.perf_counter() - started
    details["cpu_seconds"] = cpu_seconds() - cpu_before
    report = {"samples": samples, "payload": payload, "seconds": seconds, "details": details}
    print(json.dumps(report))


def curl_run(urls: list[str], parallel: int) -> tuple[float, int, float]:
    """(seconds, bytes, CPU seconds) of curl fetching every URL to /dev/null."""
    command = ["curl", "--silent", "--fail", "--write-out", "%{size_download}\\n"]
    if parallel > 1:
        command += ["--parallel", "--parallel-immediate", "--parallel-max", str(parallel)]
    for url in urls:
        command += ["--output", "/dev/null", url]
    cpu_before = cpu_seconds() - time.process_time()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=RUN_TIMEOUT)
    seconds = time.perf_counter() - started
    cpu = cpu_seconds() - time.process_time() - cpu_before
    return seconds, sum(int(line) for line in done.stdout.split()), cpu


# ---- measuring -----------------------------------------------------------------------


@dataclass
class Cell:
    condition: str
    method: str
    bytes: int  # of the tar files
    samples: int | None  # per run; None for curl (bytes only)
    seconds: list[float] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)  # HTTP requests the server answered
    cpu_seconds: list[float] = field(default_factory=list)  # client CPU (all threads, curl)
    details: list[dict[str, Any]] = field(default_factory=list)  # fastio: reader statistics
    failures: list[str] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    def mb_per_s(self) -> float | None:
        return None if self.median is None else self.bytes / self.median / 1e6

    def samples_per_s(self) -> float | None:
        if self.median is None or self.samples is None:
            return None
        return self.samples / self.median


def run_child(method: Method, spec_path: Path) -> dict[str, Any]:
    """The child's report; raises RuntimeError with what went wrong."""
    command = [sys.executable, SCRIPT, "--child", method.name, str(spec_path)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=RUN_TIMEOUT)
    except BaseException as error:  # a hang, or this benchmark stopped: no run outlives it
        os.killpg(process.pid, signal.SIGKILL)  # with webdataset's curl children
        process.communicate()
        if isinstance(error, subprocess.TimeoutExpired):
            raise RuntimeError(f"no result after {RUN_TIMEOUT:.0f} s (hung)") from None
        raise
    if process.returncode != 0:
        tail = " | ".join(err.strip().splitlines()[-3:])
        raise RuntimeError(f"exit {process.returncode}: {tail}")
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


def measure_once(
    method: Method, spec: dict[str, Any], spec_path: Path, manifest: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    """Seconds and details (CPU seconds, ...) of one run; raises RuntimeError for
    a failed or wrong one."""
    if method.kind == "curl":
        try:
            seconds, got, cpu = curl_run(spec["urls"], method.knobs["parallel"])
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            raise RuntimeError(str(error)) from None
        if got != manifest["bytes"]:
            raise RuntimeError(f"curl fetched {got} bytes, not {manifest['bytes']}")
        return seconds, {"cpu_seconds": cpu}
    report = run_child(method, spec_path)
    expected = manifest["case"]["samples"]
    if report["samples"] != expected:
        raise RuntimeError(f"delivered {report['samples']} samples, not {expected}")
    if report["payload"] != manifest["payload_bytes"]:
        raise RuntimeError(f"{report['payload']} payload bytes, not {manifest['payload_bytes']}")
    return float(report["seconds"]), report["details"]


def build_index(spec: dict[str, Any], expected: int) -> float:
    """Build fastio's per-shard indexes of the served URLs (untimed); its seconds."""
    import fastio

    started = time.perf_counter()
    with fastio.Dataset(
        spec["pattern"], format="webdataset", shuffle=False, index_dir=spec["index_dir"]
    ) as dataset:
        if len(dataset.index()) != expected:
            raise RuntimeError(f"fastio indexed {len(dataset)} samples, not {expected}")
    return time.perf_counter() - started


def measure_condition(
    args: argparse.Namespace, condition: str, base: str, manifest: dict[str, Any], work: Path
) -> list[Cell]:
    chosen = methods(args.pairs, args.curl_parallel)
    urls = [f"{base}/{name}" for name in manifest["names"]]
    index_dir = work / f"index-{condition}"
    spec = {
        "urls": urls,
        "pattern": f"{base}/{manifest['pattern']}",
        "index_dir": str(index_dir),
        "pairs": args.pairs,
    }
    spec_path = work / f"spec-{condition}.json"
    spec_path.write_text(json.dumps(spec))
    seconds = build_index(spec, manifest["case"]["samples"])
    print(f"{condition}: built fastio's index in {seconds:.1f} s (untimed)", file=sys.stderr)
    curl_run(urls, 1)  # untimed: the server, the connections and the link warm up
    cells = {
        m.name: Cell(
            condition,
            m.name,
            manifest["bytes"],
            None if m.kind == "curl" else manifest["case"]["samples"],
        )
        for m in chosen
    }
    order = random.Random(args.seed)
    for round_ in range(args.repeats):
        plan = list(chosen)
        order.shuffle(plan)
        for method in plan:
            cell = cells[method.name]
            before = served_requests(base)
            try:
                seconds, details = measure_once(method, spec, spec_path, manifest)
            except RuntimeError as error:
                cell.failures.append(str(error))
                line = f"FAILED: {error}"
            else:
                cell.seconds.append(seconds)
                cell.requests.append(served_requests(base) - before)
                cell.cpu_seconds.append(details.pop("cpu_seconds"))
                cell.details.append(details)
                line = (
                    f"{cell.bytes / seconds / 1e6:8,.1f} MB/s {cell.requests[-1]:6} requests "
                    f"{cell.cpu_seconds[-1]:6.2f} CPU s"
                )
                if cell.samples is not None:
                    line += f"  {cell.samples / seconds:9,.0f} samples/s"
            print(f"{condition} round {round_ + 1}: {method.name:24} {line}", file=sys.stderr)
    return list(cells.values())


# ---- reporting -----------------------------------------------------------------------


def ratio(value: float | None, reference: float | None) -> str:
    return f"{value / reference:.2f}" if value and reference else "-"


def print_tables(cells: list[Cell], rates: dict[str, float]) -> None:
    for condition in dict.fromkeys(c.condition for c in cells):
        rows = [c for c in cells if c.condition == condition]
        by_name = {c.method: c.mb_per_s() for c in rows}
        fsspec = by_name.get("fsspec open().read()")
        wds = by_name.get("webdataset")
        limit = max((v for m, v in by_name.items() if m.startswith("curl") and v), default=None)
        if condition in rates:
            limit = max(limit or 0.0, rates[condition])
        print(
            f"\n{condition}"
            + (f" (link rate {rates[condition]:.0f} MB/s)" if condition in rates else "")
        )
        print(
            f"{'method':24} {'MB/s':>8} {'samples/s':>10} {'s':>6} {'open s':>6} {'CPU s':>6} "
            f"{'requests':>8} {'x fsspec':>8} {'x wds':>6} {'of limit':>8}"
        )
        for cell in rows:
            mb = cell.mb_per_s()
            if mb is None:
                print(f"{cell.method:24} FAILED: {cell.failures[-1]}")
                continue
            per_s = cell.samples_per_s()
            samples = f"{per_s:10,.0f}" if per_s is not None else f"{'-':>10}"
            requests = statistics.median(cell.requests)
            cpu = statistics.median(cell.cpu_seconds)
            opens = [d["open_seconds"] for d in cell.details if "open_seconds" in d]
            opened = f"{statistics.median(opens):6.2f}" if opens else f"{'-':>6}"
            share = f"{mb / limit:.0%}" if limit else "-"
            print(
                f"{cell.method:24} {mb:8.1f} {samples} {cell.median:6.2f} {opened} {cpu:6.2f} "
                f"{requests:8.0f} {ratio(mb, fsspec):>8} {ratio(mb, wds):>6} {share:>8}"
            )
        print(
            "open s: constructing fastio.Dataset (a HEAD per shard); of limit: of the best "
            f"curl run{' or the link rate' if condition in rates else ''}"
        )
        failed = sum(len(c.failures) for c in rows)
        if failed:
            print(f"{failed} failed runs (see the JSON)")


def summary(cells: list[Cell]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for condition in dict.fromkeys(c.condition for c in cells):
        rows = {c.method: c.mb_per_s() for c in cells if c.condition == condition}
        ours = {m: v for m, v in rows.items() if m.startswith("fastio") and v}
        if not ours:
            continue
        best = max(ours, key=lambda m: ours[m])
        default = ours.get("fastio default")
        fsspec, wds = rows.get("fsspec open().read()"), rows.get("webdataset")
        out[condition] = {
            "fastio_best": best,
            "mb_per_s": ours[best],
            "x_fsspec": ours[best] / fsspec if fsspec else None,
            "x_webdataset": ours[best] / wds if wds else None,
            "default_knobs_x_fsspec": default / fsspec if default and fsspec else None,
            "default_knobs_x_webdataset": default / wds if default and wds else None,
        }
    return out


def plot(cells: list[Cell], rates: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conditions = list(dict.fromkeys(c.condition for c in cells))
    figure, axes = plt.subplots(
        1, len(conditions), figsize=(7 * len(conditions), 4.5), squeeze=False
    )
    for axis, condition in zip(axes[0], conditions, strict=True):
        rows = [c for c in cells if c.condition == condition and c.median is not None]
        colors = [COLORS.get(c.method.split()[0], "tab:orange") for c in rows]
        axis.barh([c.method for c in rows], [c.mb_per_s() or 0 for c in rows], color=colors)
        if condition in rates:
            axis.axvline(rates[condition], color="black", linestyle="--", label="link rate")
            axis.legend()
        axis.invert_yaxis()
        axis.set_xlabel("MB/s (median)")
        axis.set_title(condition)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def parse_pairs(text: str) -> list[tuple[int, int]]:
    pairs = []
    for item in filter(None, text.split(",")):
        requests, _, size = item.partition(":")
        pairs.append((int(requests), parse_size(size)))
    return pairs


def bits_per_second(rate: str) -> float:
    """tc's rate syntax (``1gbit``, ``500mbit``, ``100kbit``) in bits per second."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    for unit, scale in units.items():
        if rate.lower().endswith(unit):
            return float(rate[: -len(unit)]) * scale
    raise ValueError(f"not a tc rate: {rate!r} (try 1gbit or 500mbit)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/var/tmp/fastio-bench-remote"))
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--shard-size", type=parse_size, default=parse_size("16MiB"))
    parser.add_argument("--sample-size", type=parse_size, default=110_000)
    parser.add_argument("--scale", type=float, default=1.0, help="of the number of shards")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="for the order of methods")
    parser.add_argument("--conditions", type=lambda s: s.split(","), default=["latency", "shaped"])
    parser.add_argument("--latency", type=float, default=0.020, help="seconds per request")
    parser.add_argument("--rate", default="1gbit", help="of the shaped link, as tc reads it")
    parser.add_argument(
        "--pairs",
        type=parse_pairs,
        default=parse_pairs("32:4MiB,64:4MiB,64:1MiB"),
        help="fastio's outstanding_requests:read_size points",
    )
    parser.add_argument("--curl-parallel", type=int, default=16)
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/remote-*.json")
    parser.add_argument("--plot", type=Path, help="write a PNG bar chart here (matplotlib)")
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], args.serve[1], float(args.serve[2]))
        return
    if args.child:
        child(*args.child)
        return
    try:
        rates = {"shaped": bits_per_second(args.rate) / 8 / 1e6}
    except ValueError as error:
        parser.error(str(error))
    unknown = set(args.conditions) - {"latency", "shaped"}
    if unknown:
        parser.error(f"unknown conditions {sorted(unknown)}; known: latency, shaped")
    if "shaped" in args.conditions and os.geteuid() != 0:
        parser.error("the shaped link needs root (ip netns, tc); or use --conditions latency")
    for tool in ("curl", *(("ip", "tc") if "shaped" in args.conditions else ())):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not installed (apt-get install -y curl iproute2)")
    # SIGTERM (kill, nohup's end) unwinds like Ctrl-C, so the namespace is removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shards = max(4, round(args.shards * args.scale))
    root = args.data_dir / f"webdataset-{shards}x{args.shard_size >> 20}MiB"
    manifest = prepare(root, shards, args.shard_size, args.sample_size)
    started = time.time()
    cells: list[Cell] = []
    link_stats = ""
    with tempfile.TemporaryDirectory(prefix="fastio-bench-remote-") as work:
        for condition in args.conditions:
            warm_up(root, manifest["names"])
            if condition == "latency":
                with http_server(root, "127.0.0.1", args.latency, None) as base:
                    cells += measure_condition(args, condition, base, manifest, Path(work))
            else:
                with (
                    shaped_link(args.rate) as qdisc_stats,
                    http_server(root, NS_ADDRESS, args.latency, NAMESPACE) as base,
                ):
                    cells += measure_condition(args, condition, base, manifest, Path(work))
                    link_stats = qdisc_stats()
    rates = {c: r for c, r in rates.items() if c in args.conditions}
    print_tables(cells, rates)
    if link_stats:
        print(f"\nshaped link, server -> client qdisc over the whole run:\n{link_stats.strip()}")
    results = summary(cells)
    print()
    for condition, numbers in results.items():
        print(
            f"{condition}: best fastio ({numbers['fastio_best']}) {numbers['mb_per_s']:.1f} "
            f"MB/s: x{numbers['x_fsspec'] or 0:.2f} fsspec, "
            f"x{numbers['x_webdataset'] or 0:.2f} webdataset"
        )
    RESULTS.mkdir(exist_ok=True)
    out = args.json or RESULTS / f"remote-{time.strftime('%Y%m%d-%H%M%S')}.json"
    record = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "seconds": time.time() - started,
        "kernel": os.uname().release,
        "dataset": manifest,
        "link_rates_mb_per_s": rates,
        "link_qdisc_stats": link_stats,
        "cells": [
            asdict(c) | {"mb_per_s": c.mb_per_s(), "samples_per_s": c.samples_per_s()}
            for c in cells
        ],
        "summary": results,
    }
    out.write_text(json.dumps(record, indent=1))
    print(f"results: {out}")
    if args.plot:
        plot(cells, rates, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
