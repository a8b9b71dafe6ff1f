"""Epoch 1 of a remote WebDataset over a real 20 ms link: fastio vs what users compare it to.

    sudo .venv/bin/python benchmarks/bench_remote_link.py                # 8 x 260 MB, ~20 min
    sudo .venv/bin/python benchmarks/bench_remote_link.py --scale 0.1 --repeats 1   # ~4 min

The dataset (``--shards`` WebDataset tar shards of ``--shard-size``, ~110 KB
samples, written once into ``--data-dir`` by ``fastio.cli._gen.write_dataset``;
``--scale`` shrinks the shards, not their number, so 8 streams still have 8
shards) is served by nginx (Range, ETag, sendfile) in a network namespace
behind a packet-level delay line of 10 ms each way (see _wan.py): every packet,
data and ACK, is delayed, so TCP ramps and windows as over a WAN. Conditions:
``20ms`` (the link as fast as this machine moves packets) and ``20ms+1gbit``
(a token bucket at ``--rate`` on the router after the delay). Before measuring,
each condition shows the link is what it claims: ping RTT, and one curl of one
shard against the single-stream bound.

Methods, each run in a fresh process, reading every shard in order and
touching every sample (a wrong sample count or payload total fails the run):

* curl parallel 8: every shard to /dev/null, 8 transfers at once (the limit;
  bytes only; its "first sample" is its first byte);
* webdataset: ``webdataset.WebDataset(urls, shardshuffle=False)`` (curl per shard);
* fsspec: ``fsspec.open(url).read()`` per shard, samples split by ``tarfile``;
* fastio default, fastio tune=True, fastio cache (``cache_dir``/``cache_bytes``,
  a fresh empty cache): ``fastio.Dataset(pattern, format="webdataset",
  shuffle=False)`` on a never-seen dataset: a fresh ``XDG_CACHE_HOME`` and
  ``index_dir`` per run, so no index exists anywhere (what a user meets first);
* fastio indexed: the same with the indexes already built (untimed, once);
* fastio on aiohttp: fastio default with plain HTTP left to fsspec's aiohttp
  client (``FASTIO_HTTP_CLIENT=aiohttp``) instead of fastio's own;
* fastio reader bytes: ``fastio.Reader().stream(urls)``, every shard's bytes
  in order with the reader's defaults, no tar framing and no samples: how much
  of fastio default's epoch is the reader's, and how much the dataset's
  per-sample work (on a 2-core machine that work takes CPU the link needs);
* fastio obstore, fastio obstore indexed (only with ``--methods``): fastio
  default and indexed with the reader's remote source swapped for the obstore
  prototype in obstore_remote.py.

Each run is timed inside its process from the first call (constructing the
dataset, or the first open) to the first sample and to the last; imports are
not timed. Methods run in a seeded shuffled order in each of ``--repeats``
rounds; tables give medians and ratios to parallel curl, the same ratios
taken run by run (each run over parallel curl's and fastio default's in its
round: the median of those, which the machine's drift between rounds moves
less), and for tune=True
how many runs' tuners settled within the epoch and how far into it (the share
of the epoch's bytes delivered by then). MB/s counts the tar
files' bytes. The machine's load average is recorded beside every run, and
so is CPU time over the timed epoch: the client's (curl's included) and the
whole machine's busy time (/proc/stat), which says how much of the cores the
link and the server take. Results
go to benchmarks/results/ as JSON (and a plot with ``--plot``). Needs root (ip
netns, tc, TUN), nginx (apt-get install nginx-light), curl, ping (iputils-ping), cc.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _wan
from _imports import collect_imports
from bench_remote import bits_per_second, prepare, warm_up

from fastio.cli._options import parse_size

RESULTS = Path(__file__).parent / "results"
SCRIPT = str(Path(__file__).resolve())
RUN_TIMEOUT = 1800.0  # seconds: a run that takes longer is reported as hung
PROGRESS_SECONDS = 15.0  # how often a running method says how far it got
CURL_STREAMS = 8
# Goodput of one 1500-byte IP packet: 1448 bytes of TCP payload (20 IP, 20 TCP, 12 timestamps).
PAYLOAD_PER_PACKET = 1448 / 1500
METHODS = {
    "curl parallel 8": "curl",
    "webdataset": "webdataset",
    "fsspec": "fsspec",
    "fastio default": "fastio",
    "fastio tune=True": "fastio",
    "fastio cache": "fastio",
    "fastio indexed": "fastio",
    "fastio on aiohttp": "fastio",
    # fastio's reader alone: every shard's bytes in order, no tar framing and no
    # samples (where the dataset's own per-sample work shows, beside the link's).
    "fastio reader bytes": "fastio reader",
    # Not run unless asked (--methods): fastio's reader on obstore_remote.py's prototype.
    "fastio obstore": "fastio",
    "fastio obstore indexed": "fastio",
}
DEFAULT_METHODS = [m for m in METHODS if "obstore" not in m]
FASTIO_OPTIONS: dict[str, dict[str, Any]] = {
    "fastio default": {},
    "fastio tune=True": {"tune": True},
    "fastio cache": {"cache": True},
    "fastio indexed": {"indexed": True},
    "fastio on aiohttp": {"aiohttp": True},
    "fastio obstore": {"obstore": True},
    "fastio obstore indexed": {"obstore": True, "indexed": True},
}
IMPORTS = {
    "fastio": ("fastio", "fsspec.implementations.http"),
    "fsspec": ("fsspec", "fsspec.implementations.http", "tarfile"),
    "webdataset": ("webdataset",),
    "curl": (),
    "fastio reader": ("fastio",),
}


# ---- data ----------------------------------------------------------------------------


# ---- methods, each in a child process ------------------------------------------------


class Progress:
    """Tells the terminal how far a long run got, every PROGRESS_SECONDS."""

    def __init__(self, method: str, total: int) -> None:
        self.method, self.total = method, total
        self.next_report = time.perf_counter() + PROGRESS_SECONDS
        self.started = time.perf_counter()

    def __call__(self, done: int) -> None:
        now = time.perf_counter()
        if now >= self.next_report:
            self.next_report = now + PROGRESS_SECONDS
            print(
                f"    {self.method}: {done / self.total:4.0%} of the samples after "
                f"{now - self.started:5.0f} s",
                file=sys.stderr,
                flush=True,
            )


def fastio_run(spec: dict[str, Any], options: dict[str, Any], clock: dict[str, float]) -> Any:
    import fastio

    keywords: dict[str, Any] = {"index_dir": spec["index_dir"], **spec["fastio_knobs"]}
    if options.get("indexed"):
        keywords["index_dir"] = spec["shared_index_dir"]
    if options.get("tune"):
        keywords["tune"] = True
    if options.get("cache"):  # a fresh, empty cache that holds the whole dataset
        keywords |= {"cache_dir": spec["cache_dir"], "cache_bytes": 2 * spec["bytes"]}
    progress = Progress(spec["method"], spec["samples"])
    samples = payload = 0
    with fastio.Dataset(spec["pattern"], format="webdataset", shuffle=False, **keywords) as dataset:
        clock["opened"] = time.perf_counter()
        for sample in dataset:
            if samples == 0:
                clock["first"] = time.perf_counter()
            samples += 1
            payload += len(sample["bin"])
            progress(samples)
        stats = dataset.stats()
    reader = stats["reader"]
    kept = ("requests", "wait_seconds", "latency_p50_seconds", "latency_p90_seconds")
    details = {k: reader[k] for k in kept if k in reader}
    tuner = stats.get("tuner")
    if tuner is not None:  # when (and whether) the tuner settled within the epoch
        settled = tuner["settled_after"]
        details["tuner"] = {
            "windows": tuner["windows"],
            "trials": tuner["trials"],
            "config": tuner["config"],
            "settled_seconds": settled["seconds"] if settled else None,
            "settled_share": settled["bytes_delivered"] / spec["bytes"] if settled else None,
        }
    return samples, payload, details


def fsspec_run(spec: dict[str, Any], options: dict[str, Any], clock: dict[str, float]) -> Any:
    import io
    import tarfile

    import fsspec

    progress = Progress(spec["method"], spec["samples"])
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
                    if samples == 0:
                        clock["first"] = time.perf_counter()
                    samples += 1
                    last_key = key
                    progress(samples)
                if extension == "bin":
                    payload += len(body)
    return samples, payload, {}


def webdataset_run(spec: dict[str, Any], options: dict[str, Any], clock: dict[str, float]) -> Any:
    import webdataset

    progress = Progress(spec["method"], spec["samples"])
    samples = payload = 0
    for sample in webdataset.WebDataset(spec["urls"], shardshuffle=False):
        if samples == 0:
            clock["first"] = time.perf_counter()
        samples += 1
        payload += len(sample["bin"])
        progress(samples)
    return samples, payload, {}


def curl_run(spec: dict[str, Any], options: dict[str, Any], clock: dict[str, float]) -> Any:
    """Every shard to /dev/null, CURL_STREAMS at once: bytes, and the first byte's time."""
    command = [
        "curl",
        "--silent",
        "--fail",
        "--parallel",
        "--parallel-immediate",
        "--parallel-max",
        str(CURL_STREAMS),
        "--write-out",
        "%{size_download} %{time_starttransfer}\\n",
    ]
    for url in spec["urls"]:
        command += ["--output", "/dev/null", url]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=RUN_TIMEOUT)
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    clock["first"] = started + min(float(row[1]) for row in rows)
    return None, sum(int(row[0]) for row in rows), {}


def fastio_reader_run(spec: dict[str, Any], options: dict[str, Any], clock: dict[str, float]
                      ) -> Any:  # fmt: skip
    """Every shard's bytes through ``fastio.Reader.stream``, in order, with the
    reader's defaults: the reader's part of fastio's epoch, without the dataset's."""
    import fastio

    nbytes = 0
    with fastio.Reader() as reader:
        for chunk in reader.stream(spec["urls"]):
            if not nbytes:
                clock["first"] = time.perf_counter()
            nbytes += len(chunk.data)
        stats = reader.stats()
    return None, nbytes, {"requests": stats.requests, "wait_seconds": stats.wait_seconds}


RUNS = {
    "fastio": fastio_run,
    "fastio reader": fastio_reader_run,
    "fsspec": fsspec_run,
    "webdataset": webdataset_run,
    "curl": curl_run,
}


def child(spec_path: str) -> None:
    """Run one method in this (fresh) process; print its measurement as JSON."""
    spec = json.loads(Path(spec_path).read_text())
    kind = METHODS[spec["method"]]
    try:
        # Imports are not timed: fastio.Dataset pulls in torch (seconds) for IterableDataset.
        for module in IMPORTS[kind]:
            importlib.import_module(module)
        if kind == "fastio":
            import fastio

            assert fastio.Dataset  # a lazy attribute: this imports it
            if FASTIO_OPTIONS[spec["method"]].get("aiohttp"):
                os.environ["FASTIO_HTTP_CLIENT"] = "aiohttp"
            if FASTIO_OPTIONS[spec["method"]].get("obstore"):
                import obstore_remote

                obstore_remote.install()
        collect_imports()
        machine, client = machine_busy_seconds(), process_and_children_cpu()
        clock = {"started": time.perf_counter()}
        samples, payload, details = RUNS[kind](spec, FASTIO_OPTIONS.get(spec["method"], {}), clock)
        clock["ended"] = time.perf_counter()
        machine = machine_busy_seconds() - machine
        client = process_and_children_cpu() - client
    except Exception as error:  # reported as the run's failure, with where it happened
        print(
            json.dumps(
                {
                    "error": f"{type(error).__name__}: {error}",
                    "where": traceback.format_exc(limit=-3),
                }
            )
        )
        return
    report = {
        "samples": samples,
        "payload": payload,
        "seconds": clock["ended"] - clock["started"],
        "first_sample_seconds": clock["first"] - clock["started"],
        "epoch_cpu_seconds": client,
        "machine_cpu_seconds": machine,
        "details": details,
    }
    if "opened" in clock:
        report["details"]["open_seconds"] = clock["opened"] - clock["started"]
    print(json.dumps(report))


# ---- measuring -----------------------------------------------------------------------


@dataclass
class Cell:
    condition: str
    method: str
    bytes: int  # of the tar files
    seconds: list[float] = field(default_factory=list)
    first_sample_seconds: list[float] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)  # HTTP requests nginx answered
    cpu_seconds: list[float] = field(default_factory=list)  # the client's, all threads
    # Over the timed epoch: the client's CPU, and the whole machine's busy CPU.
    epoch_cpu_seconds: list[float] = field(default_factory=list)
    machine_cpu_seconds: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)  # 1-minute load average at the end
    details: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)  # the round of each timed run

    def over(self, other: Cell | None) -> float | None:
        """This method's rate over ``other``'s, run by run: the median, over
        the rounds both ran in, of the ratio of their rates in that round.
        The machine's state drifts between rounds (here by more than the
        gaps between methods); within a round the two ran minutes apart."""
        if other is None:
            return None
        theirs = dict(zip(other.rounds, other.seconds, strict=True))
        ratios = [theirs[r] / mine for r, mine in zip(self.rounds, self.seconds, strict=True)
                  if r in theirs]  # fmt: skip
        return statistics.median(ratios) if ratios else None

    def mb_per_s(self) -> float | None:
        return self.bytes / statistics.median(self.seconds) / 1e6 if self.seconds else None

    def first_sample(self) -> float | None:
        return statistics.median(self.first_sample_seconds) if self.first_sample_seconds else None


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy so far (/proc/stat:
    all but idle and iowait): the client, the delay line, nginx and the
    kernel's network work alike."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def process_and_children_cpu() -> float:
    """CPU seconds of this process and its waited-for children (curl's)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + children_cpu()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_child(spec_path: Path, env: dict[str, str]) -> dict[str, Any]:
    """The child's report; raises RuntimeError with what went wrong. Its stderr
    (progress lines) goes to the terminal as it runs."""
    command = [sys.executable, SCRIPT, "--child", str(spec_path)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    try:
        out, _ = process.communicate(timeout=RUN_TIMEOUT)
    except BaseException as error:  # a hang, or this benchmark stopped: no run outlives it
        os.killpg(process.pid, signal.SIGKILL)  # with webdataset's and curl's children
        process.communicate()
        if isinstance(error, subprocess.TimeoutExpired):
            raise RuntimeError(f"no result after {RUN_TIMEOUT:.0f} s (hung)") from None
        raise
    lines = out.strip().splitlines()
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"exit {process.returncode}")
    report: dict[str, Any] = json.loads(lines[-1])
    if "error" in report:
        raise RuntimeError(f"{report['error']} ({report['where'].strip().splitlines()[-1]})")
    return report


def served_requests(base: str) -> int:
    """nginx's count of requests so far (stub_status; this request included):
    the link's server is nginx, not bench_remote's aiohttp server."""
    with urllib.request.urlopen(base + _wan.STATUS_PATH, timeout=10) as answer:
        return int(answer.read().decode().splitlines()[2].split()[2])


def build_index(spec: dict[str, Any], expected: int) -> float:
    """fastio's per-shard indexes of the served shards (untimed), for "fastio indexed"."""
    import fastio

    started = time.perf_counter()
    with fastio.Dataset(
        spec["pattern"], format="webdataset", shuffle=False, index_dir=spec["shared_index_dir"]
    ) as dataset:
        if len(dataset.index()) != expected:
            raise RuntimeError(f"fastio indexed {len(dataset)} samples, not {expected}")
    return time.perf_counter() - started


def check_run(report: dict[str, Any], manifest: dict[str, Any], kind: str) -> None:
    if kind in ("curl", "fastio reader"):
        if report["payload"] != manifest["bytes"]:
            raise RuntimeError(f"{kind} fetched {report['payload']} bytes, not {manifest['bytes']}")
        return
    if report["samples"] != manifest["case"]["samples"]:
        raise RuntimeError(f"{report['samples']} samples, not {manifest['case']['samples']}")
    if report["payload"] != manifest["payload_bytes"]:
        raise RuntimeError(f"{report['payload']} payload bytes, not {manifest['payload_bytes']}")


def measure_condition(
    args: argparse.Namespace, condition: str, base: str, manifest: dict[str, Any], work: Path
) -> list[Cell]:
    chosen = [m for m in METHODS if m in args.methods]
    spec_base = {
        "urls": [f"{base}/{name}" for name in manifest["names"]],
        "pattern": f"{base}/{manifest['pattern']}",
        "shared_index_dir": str(work / f"index-{condition}"),
        "samples": manifest["case"]["samples"],
        "bytes": manifest["bytes"],
        "fastio_knobs": args.fastio_knobs,
    }
    if "fastio indexed" in chosen:
        seconds = build_index(spec_base, manifest["case"]["samples"])
        print(
            f"  built fastio's indexes for 'fastio indexed' in {seconds:.1f} s (untimed)",
            file=sys.stderr,
        )
    cells = {m: Cell(condition, m, manifest["bytes"]) for m in chosen}
    order = random.Random(args.seed)
    total, count = args.repeats * len(chosen), 0
    for round_ in range(args.repeats):
        plan = list(chosen)
        order.shuffle(plan)
        for method in plan:
            count += 1
            cell = cells[method]
            # Never seen: a fresh cache home (the default index folder is under it),
            # index folder and shard cache for every run.
            fresh = Path(tempfile.mkdtemp(prefix="run-", dir=work))
            spec = spec_base | {
                "method": method,
                "index_dir": str(fresh / "index"),
                "cache_dir": str(fresh / "shard-cache"),
            }
            spec_path = fresh / "spec.json"
            spec_path.write_text(json.dumps(spec))
            env = os.environ | {"XDG_CACHE_HOME": str(fresh / "xdg-cache")}
            print(
                f"  [{count}/{total}] {condition} round {round_ + 1}: {method} ...",
                file=sys.stderr,
                flush=True,
            )
            requests_before, cpu_before = served_requests(base), children_cpu()
            try:
                report = run_child(spec_path, env)
                check_run(report, manifest, METHODS[method])
            except RuntimeError as error:
                cell.failures.append(str(error))
                line = f"FAILED: {error}"
            else:
                cell.seconds.append(report["seconds"])
                cell.rounds.append(round_)
                cell.first_sample_seconds.append(report["first_sample_seconds"])
                cell.requests.append(served_requests(base) - requests_before - 1)
                cell.cpu_seconds.append(children_cpu() - cpu_before)
                cell.epoch_cpu_seconds.append(report["epoch_cpu_seconds"])
                cell.machine_cpu_seconds.append(report["machine_cpu_seconds"])
                cell.load.append(os.getloadavg()[0])
                cell.details.append(report["details"])
                line = (
                    f"{cell.bytes / report['seconds'] / 1e6:7.1f} MB/s, first sample "
                    f"{report['first_sample_seconds']:6.2f} s, {cell.requests[-1]} requests, "
                    f"{cell.cpu_seconds[-1]:.1f} CPU s, load {cell.load[-1]:.1f}"
                )
            finally:
                shutil.rmtree(fresh, ignore_errors=True)
            print(f"      {line}", file=sys.stderr, flush=True)
    return list(cells.values())


def curl_once(url: str) -> dict[str, float]:
    """One curl of ``url`` on a fresh connection: connect, first byte, MB/s."""
    out = subprocess.run(
        [
            "curl",
            "--silent",
            "--fail",
            "--output",
            "/dev/null",
            "--write-out",
            "%{time_connect} %{time_starttransfer} %{speed_download} %{size_download}",
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=RUN_TIMEOUT,
    ).stdout.split()
    return {
        "connect_ms": float(out[0]) * 1e3,
        "first_byte_ms": float(out[1]) * 1e3,
        "mb_per_s": float(out[2]) / 1e6,
        "bytes": int(out[3]),
    }


def check_link(link: _wan.Link, url: str, rate: str | None, rtt_ms: float) -> dict[str, Any]:
    """Evidence that the link is what it claims: ping RTT, and one curl of one shard
    (fresh connection: 1 RTT to connect, 2 to the first byte) against its bound."""
    ping = link.ping()
    single = [curl_once(url) for _ in range(2)]
    best = max(single, key=lambda s: s["mb_per_s"])
    if rate is not None:
        bound = bits_per_second(rate) / 8 / 1e6 * PAYLOAD_PER_PACKET
        why = f"{rate} x 1448/1500 (TCP payload of a 1500-byte packet)"
    else:
        # Uncapped, one stream is held to the sender's largest window per round trip.
        wmem = int(_wan.run(["sysctl", "-n", "net.ipv4.tcp_wmem"], _wan.SERVER_NS).split()[2])
        bound = wmem / (rtt_ms / 1e3) / 1e6
        why = (
            f"nginx's send buffer ({wmem >> 20} MiB, the namespace's tcp_wmem max) "
            "per RTT; the kernel keeps part of it for bookkeeping"
        )
    return {
        "ping_ms": ping,
        "single_curl": single,
        "single_curl_best_mb_per_s": best["mb_per_s"],
        "single_stream_bound_mb_per_s": bound,
        "bound": why,
    }


def print_link_check(condition: str, check: dict[str, Any]) -> None:
    ping = check["ping_ms"]
    print(
        f"  link {condition}: ping RTT min/avg/max/mdev {ping['min']:.2f}/{ping['avg']:.2f}/"
        f"{ping['max']:.2f}/{ping['mdev']:.2f} ms",
        file=sys.stderr,
    )
    for run in check["single_curl"]:
        print(
            f"    one curl of one shard: connect {run['connect_ms']:.1f} ms, first byte "
            f"{run['first_byte_ms']:.1f} ms, {run['mb_per_s']:.1f} MB/s",
            file=sys.stderr,
        )
    print(
        f"    single-stream bound {check['single_stream_bound_mb_per_s']:.0f} MB/s: "
        f"{check['bound']}",
        file=sys.stderr,
    )


# ---- reporting -----------------------------------------------------------------------


def print_tables(cells: list[Cell], checks: dict[str, dict[str, Any]]) -> None:
    for condition in dict.fromkeys(c.condition for c in cells):
        rows = [c for c in cells if c.condition == condition]
        curl = same_condition(rows, rows[0], "curl parallel 8")
        default = same_condition(rows, rows[0], "fastio default")
        limit = curl.mb_per_s() if curl else None
        limit_first = curl.first_sample() if curl else None
        check = checks.get(condition, {})
        ping = check.get("ping_ms", {}).get("avg")
        print(
            f"\n{condition}"
            + (
                f" (ping {ping:.1f} ms; one curl {check['single_curl_best_mb_per_s']:.0f} MB/s)"
                if ping
                else ""
            )
        )
        print(
            f"{'method':22} {'first sample s':>14} {'MB/s':>7} {'x curl':>7} "
            f"{'paired':>6} {'x default':>9} {'requests':>8} {'CPU s':>6} {'epoch CPU s':>14} "
            f"{'load':>5} {'runs':>4}  "
            "tuner settled"
        )
        for cell in rows:
            mb = cell.mb_per_s()
            if mb is None:
                print(f"{cell.method:22} FAILED: {cell.failures[-1] if cell.failures else '-'}")
                continue
            first = cell.first_sample()
            share = f"{mb / limit:7.2f}" if limit else f"{'-':>7}"
            over_curl, over_default = cell.over(curl), cell.over(default)
            paired = f"{over_curl:6.2f}" if over_curl else f"{'-':>6}"
            paired += f" {over_default:9.2f}" if over_default else f" {'-':>9}"
            print(
                f"{cell.method:22} {first:14.2f} {mb:7.1f} {share} {paired} "
                f"{statistics.median(cell.requests):8.0f} "
                f"{statistics.median(cell.cpu_seconds):6.1f} "
                f"{epoch_cpu(cell):>14} "
                f"{statistics.median(cell.load):5.1f} {len(cell.seconds):4}  {settling(cell)}"
            )
        if limit_first is not None:
            print("curl's first sample is its first byte; x curl: MB/s over parallel curl's")
        print(
            "paired, x default: the median over rounds of the run's MB/s over parallel curl's,"
            " and over fastio default's, in the same round"
        )
        print(
            f"epoch CPU s: the client's / the whole machine's (every process and the kernel, "
            f"of {os.cpu_count()} cores) over the timed epoch; CPU s: the client's process, "
            "imports included"
        )
        if any(settling(c) for c in rows):
            print(
                "tuner settled: runs whose tuner settled within the epoch, and the median "
                "share of the epoch's bytes delivered by then"
            )
        failed = sum(len(c.failures) for c in rows)
        if failed:
            print(f"{failed} failed runs (see the JSON)")


def same_condition(cells: list[Cell], cell: Cell, method: str) -> Cell | None:
    """The cell of ``method`` under ``cell``'s condition, if it ran."""
    return next((c for c in cells if c.condition == cell.condition and c.method == method), None)


def epoch_cpu(cell: Cell) -> str:
    if not cell.epoch_cpu_seconds:
        return "-"
    return (f"{statistics.median(cell.epoch_cpu_seconds):.1f} / "
            f"{statistics.median(cell.machine_cpu_seconds):.1f}")  # fmt: skip


def settling(cell: Cell) -> str:
    """For tuned runs: how many settled within the epoch, and how far into it."""
    tuned = [d["tuner"] for d in cell.details if "tuner" in d]
    if not tuned:
        return ""
    shares = [t["settled_share"] for t in tuned if t["settled_share"] is not None]
    where = f" at {statistics.median(shares):.0%} of the bytes" if shares else ""
    return f"{len(shares)}/{len(tuned)}{where}"


def plot(cells: list[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conditions = list(dict.fromkeys(c.condition for c in cells))
    figure, axes = plt.subplots(2, len(conditions), figsize=(7 * len(conditions), 7), squeeze=False)
    for column, condition in enumerate(conditions):
        rows = [c for c in cells if c.condition == condition and c.seconds]
        names = [c.method for c in rows]
        colors = [
            "tab:gray"
            if n.startswith("curl")
            else "tab:blue"
            if n.startswith("fastio")
            else "tab:orange"
            for n in names
        ]
        axes[0][column].barh(names, [c.mb_per_s() or 0 for c in rows], color=colors)
        axes[0][column].set_xlabel("epoch 1, MB/s (median)")
        axes[1][column].barh(names, [c.first_sample() or 0 for c in rows], color=colors)
        axes[1][column].set_xlabel("first sample, s (median)")
        axes[1][column].set_xscale("log")
        for row in (0, 1):
            axes[row][column].invert_yaxis()
        axes[0][column].set_title(condition)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def parse_knobs(text: str) -> dict[str, int]:
    """``name=value,...`` with sizes in fastio's syntax (``4MiB``)."""
    knobs = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        knobs[name.strip()] = parse_size(value.strip())
    return knobs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/var/tmp/fastio-bench-remote-link"))
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-size", type=parse_size, default=260_000_000)
    parser.add_argument("--sample-size", type=parse_size, default=110_000)
    parser.add_argument("--scale", type=float, default=1.0, help="of the shards' size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="for the order of methods")
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--rate", default="1gbit", help="of the capped link, as tc reads it")
    parser.add_argument(
        "--conditions",
        type=lambda s: s.split(","),
        default=["20ms", "20ms+1gbit"],
        help="20ms, 20ms+1gbit",
    )
    parser.add_argument(
        "--methods",
        type=lambda s: s.split(","),
        default=DEFAULT_METHODS,
        help=f"a comma-separated subset of: {', '.join(METHODS)}",
    )
    parser.add_argument(
        "--fastio-knobs",
        type=parse_knobs,
        default={},
        help="reader knobs for every fastio run, e.g. outstanding_requests=32,read_size=4MiB",
    )
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/remote-link-*.json")
    parser.add_argument("--plot", type=Path, help="write a PNG chart here (matplotlib)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    try:
        bits_per_second(args.rate)
    except ValueError as error:
        parser.error(str(error))
    rates = {"20ms": None, "20ms+1gbit": args.rate}
    if set(args.conditions) - set(rates) or set(args.methods) - set(METHODS):
        parser.error("unknown condition or method (see --help)")
    if os.geteuid() != 0:
        parser.error("needs root: network namespaces, TUN devices, tc")
    for tool in ("curl", "ip", "tc", "ping", "cc", "nginx"):
        if shutil.which(tool) is None:
            parser.error(
                f"{tool} is not installed (apt-get install -y curl iproute2 "
                "iputils-ping gcc nginx-light)"
            )
    # SIGTERM and SIGHUP unwind like Ctrl-C, so the link and nginx are taken down.
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, lambda *_: sys.exit(143))
    shard_size = int(args.shard_size * args.scale)
    samples_per_shard = shard_size // args.sample_size
    root = args.data_dir / f"webdataset-{args.shards}x{samples_per_shard}x{args.sample_size}"
    manifest = prepare(root, args.shards, shard_size, args.sample_size)
    print(
        f"dataset: {args.shards} shards, {manifest['bytes'] / 1e6:,.0f} MB, "
        f"{manifest['case']['samples']} samples, in {root}",
        file=sys.stderr,
    )
    started = time.time()
    cells: list[Cell] = []
    checks: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="fastio-bench-link-") as work:
        for condition in args.conditions:
            warm_up(root, manifest["names"])
            relay: dict[str, Any] = {}
            with _wan.wan_link(args.rtt_ms / 2, relay) as link, _wan.nginx(root) as base:
                link.set_rate(rates[condition])
                check = check_link(
                    link, f"{base}/{manifest['names'][0]}", rates[condition], args.rtt_ms
                )
                print_link_check(condition, check)
                cells += measure_condition(args, condition, base, manifest, Path(work))
                check["bottleneck"] = link.bottleneck_stats()
            check["relay"] = relay
            checks[condition] = check
    print_tables(cells, checks)
    for condition, check in checks.items():
        data = check["relay"].get("b_to_a", {})
        if data:
            late = ", ".join(
                f"{data[f'late_over_{bound}'] / max(1, data['packets']):.2%} > {bound}"
                for bound in ("1ms", "10ms")
                if f"late_over_{bound}" in data
            )
            print(
                f"{condition}: delay line, server -> client: {data['packets']} packets, "
                f"released late: {late} (max {data['late_max_us'] / 1e3:.1f} ms); "
                f"{data['dropped_full']} dropped"
            )
        neck = check.get("bottleneck", {})
        tbf = sum(q.get("drops") or 0 for q in neck.get("to_client", []))
        tun = sum((neck.get(k) or {}).get("tx_dropped") or 0 for k in ("tun_router", "tun_server"))
        print(f"{condition}: packets dropped by the rate limit {tbf}, by a full TUN queue {tun}")
    RESULTS.mkdir(exist_ok=True)
    out = args.json or RESULTS / f"remote-link-{time.strftime('%Y%m%d-%H%M%S')}.json"
    record = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "seconds": time.time() - started,
        "kernel": os.uname().release,
        "cpus": os.cpu_count(),
        "dataset": manifest,
        "link_checks": checks,
        "cells": [
            asdict(c)
            | {
                "mb_per_s": c.mb_per_s(),
                "first_sample_seconds_median": c.first_sample(),
                "x_curl_paired": c.over(same_condition(cells, c, "curl parallel 8")),
                "x_default_paired": c.over(same_condition(cells, c, "fastio default")),
            }
            for c in cells
        ],
    }
    out.write_text(json.dumps(record, indent=1))
    print(f"results: {out}")
    if args.plot:
        plot(cells, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the link and nginx are down by now (their finally blocks)
        sys.exit("interrupted")
