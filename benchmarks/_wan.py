"""A wide-area link on this machine: nginx in a network namespace, 20 ms away.

The path a request takes (the client is this process, on the host)::

    host  --veth-->  router namespace  --TUN-->  delay_line.c  --TUN-->  server namespace
    10.99.11.1       10.99.11.2 / 10.99.12.1      (10 ms each way)         10.99.12.2 (nginx)

The kernel has no netem, so a small C program (delay_line.c, compiled here at
start) relays every packet between two TUN devices and holds it ``one_way_ms``:
ACKs and data alike, so TCP's slow start and window are those of a real path
with that round-trip time. A rate limit (``tc tbf``) sits on the router's two
egress devices, after the delay and in a forwarding hop, as a bottleneck router
does: the sender does not feel its queue through its own qdisc (TCP small
queues would pace it there), and a full queue drops packets.

Cleanup: the TUN devices live as long as the relay (not persistent); the relay
dies with its parent (PR_SET_PDEATHSIG) or when its stdin closes; deleting the
namespaces deletes the veth pair and the host's route. A run killed outright
leaves at most the namespaces and nginx, which the next start removes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_NS, ROUTER_NS = "fbwan-srv", "fbwan-rtr"
HOST_VETH, ROUTER_VETH = "fbwan-h", "fbwan-r"
ROUTER_TUN, SERVER_TUN = "fbwan-tr", "fbwan-ts"
HOST_ADDRESS, ROUTER_ADDRESS = "10.99.11.1", "10.99.11.2"
ROUTER_TUN_ADDRESS, SERVER_ADDRESS = "10.99.12.1", "10.99.12.2"
SERVER_PORT = 8080
STATUS_PATH = "/__nginx_status"  # nginx's counters (requests served)
DELAY_LINE_SOURCE = Path(__file__).with_name("delay_line.c")
# Real-time priority of the relay: below the kernel's own threads (50), above
# every normal process, so others' load does not stretch the delay.
RELAY_PRIORITY = 10
# The bottleneck's queue, in time at the rate: one round trip, the classic
# router buffer (a bandwidth-delay product); more only adds queueing delay.
TBF_QUEUE = "20ms"
TBF_BURST = "256kb"  # larger than a 64 KiB GSO segment, so tbf need not split them
# Packets a TUN device holds for the relay to read. The default (500) overflows
# when the relay is held up for a few ms (by others' load, or by the kernel's
# receive work that each of its writes runs): losses the link would not have.
# A packet that waits here is late instead (the relay stamps it when it reads it).
TUN_QUEUE = 10000


def run(words: list[str], netns: str | None = None, check: bool = True) -> str:
    """Run a command (in ``netns`` if given); its stdout. Raises RuntimeError on failure."""
    if netns is not None:
        words = ["ip", "netns", "exec", netns, *words]
    done = subprocess.run(words, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(words)}: {done.stderr.strip()}")
    return done.stdout


def remove_leftovers() -> None:
    """What an earlier run that was killed outright left: processes in our
    namespaces (nginx), the namespaces (with their devices), the host's veth end."""
    for netns in (SERVER_NS, ROUTER_NS):
        if not Path("/run/netns", netns).exists():
            continue
        for pid in run(["ip", "netns", "pids", netns], check=False).split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        run(["ip", "netns", "del", netns], check=False)
    run(["ip", "link", "del", HOST_VETH], check=False)


def compile_relay(folder: Path) -> Path:
    binary = folder / "delay_line"
    command = [
        "cc",
        "-O2",
        "-Wall",
        "-Wextra",
        "-pthread",
        "-o",
        str(binary),
        str(DELAY_LINE_SOURCE),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"compiling {DELAY_LINE_SOURCE.name}: {done.stderr.strip()}")
    return binary


@dataclass
class Link:
    """The running link; ``rate`` changes its bottleneck while it runs."""

    one_way_ms: float
    relay: subprocess.Popen[str]
    rate: str | None = None

    @property
    def server(self) -> str:
        return SERVER_ADDRESS

    def set_rate(self, rate: str | None) -> None:
        """A token bucket of ``rate`` (tc's syntax, e.g. ``1gbit``) each way, or none."""
        for device in (ROUTER_VETH, ROUTER_TUN):
            run(["tc", "qdisc", "del", "dev", device, "root"], ROUTER_NS, check=False)
            if rate is not None:
                tbf = ["tbf", "rate", rate, "burst", TBF_BURST, "latency", TBF_QUEUE]
                run(["tc", "qdisc", "add", "dev", device, "root", *tbf], ROUTER_NS)
        self.rate = rate

    def bottleneck_stats(self) -> dict[str, Any]:
        """Bytes, packets, drops and overlimits of the router's qdiscs (server -> client
        is ``to_client``), and the TUN devices' own drops (a relay that falls behind)."""
        out: dict[str, Any] = {}
        for key, device in (("to_client", ROUTER_VETH), ("to_server", ROUTER_TUN)):
            qdiscs = json.loads(run(["tc", "-s", "-j", "qdisc", "show", "dev", device], ROUTER_NS))
            out[key] = [
                {k: q.get(k) for k in ("kind", "bytes", "packets", "drops", "overlimits")}
                for q in qdiscs
            ]
        for key, device, netns in (
            ("tun_router", ROUTER_TUN, ROUTER_NS),
            ("tun_server", SERVER_TUN, SERVER_NS),
        ):
            links = json.loads(run(["ip", "-s", "-j", "link", "show", "dev", device], netns))
            stats = links[0].get("stats64", {})
            out[key] = {
                "tx_dropped": stats.get("tx", {}).get("dropped"),
                "rx_dropped": stats.get("rx", {}).get("dropped"),
            }
        return out

    def ping(self, count: int = 20) -> dict[str, float]:
        """Round-trip times (ms) of ``count`` pings to the server: min, avg, max, mdev."""
        out = run(["ping", "-n", "-q", "-c", str(count), "-i", "0.05", SERVER_ADDRESS])
        found = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", out)
        if found is None:
            raise RuntimeError(f"ping printed no times: {out.strip()}")
        return dict(zip(("min", "avg", "max", "mdev"), map(float, found.groups()), strict=True))


def _stop_relay(relay: subprocess.Popen[str]) -> dict[str, Any]:
    """Stop the relay (its stdin closing is its signal); its statistics."""
    try:
        out, _ = relay.communicate(input="", timeout=10)
    except subprocess.TimeoutExpired:
        relay.kill()
        relay.communicate()
        return {}
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


@contextlib.contextmanager
def wan_link(one_way_ms: float, relay_stats: dict[str, Any] | None = None) -> Iterator[Link]:
    """The link, up; torn down on every way out. ``relay_stats`` receives the
    relay's own counts at the end (packets, drops, how late it released any)."""
    remove_leftovers()
    folder = Path(tempfile.mkdtemp(prefix="fastio-wan-"))
    relay: subprocess.Popen[str] | None = None
    try:
        binary = compile_relay(folder)
        for netns in (SERVER_NS, ROUTER_NS):
            run(["ip", "netns", "add", netns])
            run(["ip", "link", "set", "lo", "up"], netns)
        relay = subprocess.Popen(
            [
                str(binary),
                ROUTER_NS,
                ROUTER_TUN,
                SERVER_NS,
                SERVER_TUN,
                str(round(one_way_ms * 1000)),
                str(RELAY_PRIORITY),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert relay.stdout is not None
        if relay.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the delay line did not start (exit {relay.wait()})")
        run(
            [
                "ip",
                "link",
                "add",
                HOST_VETH,
                "type",
                "veth",
                "peer",
                "name",
                ROUTER_VETH,
                "netns",
                ROUTER_NS,
            ]
        )
        run(["ip", "addr", "add", f"{HOST_ADDRESS}/30", "dev", HOST_VETH])
        run(["ip", "link", "set", HOST_VETH, "up"])
        run(["ip", "route", "add", f"{SERVER_ADDRESS}/32", "via", ROUTER_ADDRESS])
        run(["ip", "addr", "add", f"{ROUTER_ADDRESS}/30", "dev", ROUTER_VETH], ROUTER_NS)
        run(["ip", "link", "set", ROUTER_VETH, "up"], ROUTER_NS)
        run(
            ["ip", "addr", "add", ROUTER_TUN_ADDRESS, "peer", SERVER_ADDRESS, "dev", ROUTER_TUN],
            ROUTER_NS,
        )
        run(["ip", "link", "set", ROUTER_TUN, "up", "txqueuelen", str(TUN_QUEUE)], ROUTER_NS)
        run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"], ROUTER_NS)
        run(
            ["ip", "addr", "add", SERVER_ADDRESS, "peer", ROUTER_TUN_ADDRESS, "dev", SERVER_TUN],
            SERVER_NS,
        )
        run(["ip", "link", "set", SERVER_TUN, "up", "txqueuelen", str(TUN_QUEUE)], SERVER_NS)
        run(["ip", "route", "add", "default", "dev", SERVER_TUN], SERVER_NS)
        run(
            ["ip", "route", "add", f"{HOST_ADDRESS}/32", "via", ROUTER_ADDRESS],
            ROUTER_NS,
            check=False,
        )
        yield Link(one_way_ms, relay)
    finally:
        if relay is not None:
            stats = _stop_relay(relay)
            if relay_stats is not None:
                relay_stats.update(stats)
        remove_leftovers()
        shutil.rmtree(folder, ignore_errors=True)


NGINX_CONFIG = """\
daemon off;
master_process on;
user root root;
worker_processes 2;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    server {{
        listen {address}:{port} backlog=4096 reuseport;
        root {root};
        location / {{ }}
        location = {status} {{ stub_status; }}
    }}
}}
"""


@contextlib.contextmanager
def nginx(root: Path, address: str = SERVER_ADDRESS, port: int = SERVER_PORT) -> Iterator[str]:
    """nginx serving ``root`` (Range, ETag, sendfile: its static module) in the server
    namespace; yields the base URL. Stopped, workers too, on every way out."""
    if shutil.which("nginx") is None:
        raise RuntimeError("nginx is not installed (apt-get install -y nginx-light)")
    folder = Path(tempfile.mkdtemp(prefix="fastio-nginx-"))
    config = folder / "nginx.conf"
    config.write_text(
        NGINX_CONFIG.format(
            folder=folder, address=address, port=port, root=root, status=STATUS_PATH
        )
    )
    command = [
        "ip",
        "netns",
        "exec",
        SERVER_NS,
        "nginx",
        "-p",
        str(folder),
        "-e",
        str(folder / "error.log"),
        "-c",
        str(config),
    ]
    # Its own session: Ctrl-C reaches the benchmark, which then stops nginx in order.
    process = subprocess.Popen(command, start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://{address}:{port}"
        deadline = time.monotonic() + 10
        while run(["ss", "-Hltn", f"sport = :{port}"], SERVER_NS).strip() == "":
            if process.poll() is not None or time.monotonic() > deadline:
                log = folder / "error.log"
                error = log.read_text().strip() if log.exists() else ""
                raise RuntimeError(f"nginx did not start: {error}")
            time.sleep(0.05)
        yield base
    finally:
        process.terminate()  # the master stops its workers
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        with contextlib.suppress(ProcessLookupError):  # workers whose master did not
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        shutil.rmtree(folder, ignore_errors=True)
