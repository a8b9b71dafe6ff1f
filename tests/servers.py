"""Real servers on loopback for remote-storage tests: an HTTP server with
Range support and fault injection (aiohttp), and an S3-compatible server
(moto's server mode). Started and stopped by the test fixtures."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import os
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web


@dataclass
class Faults:
    """What the HTTP server does wrong, set by a test while it runs."""

    errors_5xx: int = 0  # the next N data requests answer 503
    drops: int = 0  # the next N data requests close the connection mid-answer
    stalls: int = 0  # the next N data requests hang for `stall_seconds` first
    stall_seconds: float = 5.0
    ignore_range: bool = False  # answer 200 with the whole object
    latency: float = 0.0  # added before every answer
    missing: set[str] = field(default_factory=set)  # names that answer 404
    forbidden: set[str] = field(default_factory=set)  # names that answer 403
    requests: int = 0  # data requests served (all answers)
    bytes_served: int = 0  # body bytes of successful data answers
    gets: Counter[str] = field(default_factory=Counter)  # data requests by name
    heads: Counter[str] = field(default_factory=Counter)  # HEAD requests by name
    hold_heads: bool = False  # HEAD requests wait while true
    served: Counter[str] = field(default_factory=Counter)  # body bytes by name
    asked: list[tuple[str, int, int]] = field(default_factory=list)  # (name, offset, length)
    hold_after: int | None = None  # data requests past this many wait until it is None
    # Data requests for which hold(name, offset) is true wait until it is None.
    hold: Callable[[str, int], bool] | None = None
    # Data requests for which failing(name, offset) is true answer 503.
    failing: Callable[[str, int], bool] | None = None
    range_cap: int | None = None  # a range answers at most this many bytes (206 says which)
    gzip_ranges: bool = False  # range answers come gzip-encoded, whatever was asked
    # HEAD answers say gzip (their length not the object's) and whole GETs
    # come chunked: only a range's Content-Range says the size.
    lengths_hidden: bool = False
    # Every request answers 301 to the same name under this base (another
    # server's URL, as an http:// address moved to https:// is).
    moved_to: str | None = None

    def take(self, name: str) -> bool:
        count = getattr(self, name)
        if count > 0:
            setattr(self, name, count - 1)
            return True
        return False


def _current(path: Path) -> tuple[bytes, str]:
    """A file's bytes and the ETag it is served with (of its size and mtime)."""
    data = path.read_bytes()
    stat = path.stat()
    return data, '"' + hashlib.md5(f"{stat.st_size}-{stat.st_mtime_ns}".encode()).hexdigest() + '"'


def close_connections(known: set[asyncio.BaseTransport]) -> None:
    """Close every connection of the running loop: those a server's handlers
    saw (``known``), and those accepted that no handler saw yet (a client's
    idle keep-alive connection): left to the collector, each is a
    ResourceWarning in whichever test runs next."""
    loop = asyncio.get_running_loop()
    for transport in [*known, *getattr(loop, "_transports", {}).values()]:
        if not transport.is_closing():
            transport.close()


class RangeServer:
    """Serves the files under `root` over HTTP on 127.0.0.1 with Range, HEAD
    and ETag; over HTTPS where given a ``tls`` context (a certificate)."""

    def __init__(self, root: Path, tls: ssl.SSLContext | None = None) -> None:
        self.root = root
        self.tls = tls
        self.faults = Faults()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0
        # Every connection's transport: closed at stop, as a client that keeps
        # its idle connections (fsspec's cached sessions) may outlive the server.
        self._transports: set[asyncio.BaseTransport] = set()

    def url(self, name: str) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/{name}"

    def start(self) -> RangeServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{name:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close_connections(), self._loop).result(10)
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        asyncio.run_coroutine_threadsafe(self._cancel_handlers(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _close_connections(self) -> None:
        # First: the runner's clean-up lets go of connections it does not close.
        close_connections(self._transports)
        await asyncio.sleep(0.01)  # their closing callbacks run

    async def _cancel_handlers(self) -> None:
        """Handlers still sleeping (stalls) end with the server, not at exit;
        so do the connections clients keep open."""
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        close_connections(self._transports)
        await asyncio.sleep(0.01)  # their closing callbacks run (and close their sockets)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        path = self.root / name
        faults = self.faults
        if request.transport is not None:
            self._transports.add(request.transport)
        if faults.latency:
            await asyncio.sleep(faults.latency)
        if faults.moved_to is not None:
            raise web.HTTPMovedPermanently(faults.moved_to + name)
        if name in faults.forbidden:
            raise web.HTTPForbidden()
        if name in faults.missing or not path.is_file():
            raise web.HTTPNotFound()
        data, etag = _current(path)
        headers = {"ETag": etag, "Accept-Ranges": "bytes"}
        if request.method == "HEAD":
            faults.heads[name] += 1
            while faults.hold_heads:
                await asyncio.sleep(0.005)
            if faults.lengths_hidden:  # as a compressing front end answers for text
                return web.Response(headers={**headers, "Content-Encoding": "gzip",
                                             "Content-Length": str(len(data) // 3)})  # fmt: skip
            return web.Response(headers={**headers, "Content-Length": str(len(data))})
        faults.requests += 1
        faults.gets[name] += 1
        while faults.hold_after is not None and faults.requests > faults.hold_after:
            await asyncio.sleep(0.005)
        if faults.take("errors_5xx"):
            raise web.HTTPServiceUnavailable()
        if faults.take("stalls"):
            await asyncio.sleep(faults.stall_seconds)
        spec = request.headers.get("Range")
        status, body = 200, data
        if spec and not faults.ignore_range:
            start_text, end_text = spec.removeprefix("bytes=").split("-")
            start = int(start_text)
            end = int(end_text) + 1 if end_text else len(data)
            if start >= len(data):
                raise web.HTTPRequestRangeNotSatisfiable()
            if faults.hold is not None:
                while (hold := faults.hold) is not None and hold(name, start):
                    await asyncio.sleep(0.005)
                data, headers["ETag"] = _current(path)  # as it is now: replaced while held?
            if faults.failing is not None and faults.failing(name, start):
                raise web.HTTPServiceUnavailable()
            if faults.range_cap is not None:
                end = min(end, start + faults.range_cap)
            body = data[start:end]
            faults.asked.append((name, start, len(body)))
            status = 206
            headers["Content-Range"] = f"bytes {start}-{start + len(body) - 1}/{len(data)}"
            if faults.gzip_ranges:
                body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        if faults.take("drops"):
            response = web.StreamResponse(
                status=status, headers={**headers, "Content-Length": str(len(body))}
            )
            await response.prepare(request)
            await response.write(body[: len(body) // 2])
            assert request.transport is not None
            request.transport.close()  # the connection drops mid-answer
            return response
        faults.bytes_served += len(body)
        faults.served[name] += len(body)
        if faults.lengths_hidden and status == 200:
            response = web.StreamResponse(status=status, headers=headers)
            response.enable_chunked_encoding()
            await response.prepare(request)
            await response.write(body)
            await response.write_eof()
            return response
        return web.Response(status=status, body=body, headers=headers)


class BottleneckServer:
    """Serves the files under `root` over HTTP/1.1 (Range, HEAD, ETag,
    keep-alive) on 127.0.0.1 as through a link: every answer waits `delay`
    seconds (the round trip), then leaves in `piece`-byte pieces paced at
    `rate` bytes/s. `shared`: one queue for every connection, as at a link's
    bottleneck, where a new answer's head waits behind the pieces queued
    before it; else a queue of its own per connection, each at `rate`, as
    from a server that limits each connection."""

    def __init__(self, root: Path, rate: float, delay: float, shared: bool,
                 piece: int = 128 << 10) -> None:  # fmt: skip
        self.root, self.rate, self.delay, self.shared, self.piece = root, rate, delay, shared, piece
        self._files: dict[str, bytes] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._queue = asyncio.Lock()  # the shared queue: waiters get it in order
        self._free_at = 0.0
        self.port = 0

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def start(self) -> BottleneckServer:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            current = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not current]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            close_connections(set())
            await asyncio.sleep(0.01)  # their closing callbacks run

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        own = (asyncio.Lock(), [0.0])  # this connection's queue, where not shared
        try:
            while True:
                request = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                method, target = request.split(" ", 2)[:2]
                fields = dict(line.split(":", 1) for line in request.split("\r\n")[1:] if line)
                ranged = {k.strip().lower(): v.strip() for k, v in fields.items()}.get("range")
                name = target.lstrip("/")
                data = self._files.get(name)
                if data is None and (self.root / name).is_file():
                    data = self._files[name] = (self.root / name).read_bytes()
                if data is None:
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                start, end, status = 0, len(data), "200 OK"
                if ranged:
                    first, last = ranged.removeprefix("bytes=").split("-")
                    start, end = int(first), min(int(last) + 1 if last else len(data), len(data))
                    status = "206 Partial Content"
                lines = [f"HTTP/1.1 {status}", f"Content-Length: {end - start}",
                         f'ETag: "{len(data)}"', "Accept-Ranges: bytes"]  # fmt: skip
                if ranged:
                    lines.append(f"Content-Range: bytes {start}-{end - 1}/{len(data)}")
                answer = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
                if method != "HEAD":
                    answer += data[start:end]
                await asyncio.sleep(self.delay)
                for offset in range(0, len(answer), self.piece):
                    await self._send(writer, answer[offset : offset + self.piece], own)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the server stops
        finally:
            writer.close()

    async def _send(self, writer: asyncio.StreamWriter, piece: bytes,
                    own: tuple[asyncio.Lock, list[float]]) -> None:  # fmt: skip
        """Sends ``piece`` when the pieces queued before it have left, and
        holds the queue for its own time on the link."""
        queue, free_at = (self._queue, None) if self.shared else own
        async with queue:
            now = self._loop.time()
            start = max(self._free_at if free_at is None else free_at[0], now)
            await asyncio.sleep(start - now)
            writer.write(piece)
            if free_at is None:
                self._free_at = start + len(piece) / self.rate
            else:
                free_at[0] = start + len(piece) / self.rate
        await writer.drain()


class S3Server:
    """moto's S3-compatible server on loopback, with a bucket."""

    def __init__(self, bucket: str = "data") -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

        self.bucket = bucket
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint = ""

    def start(self) -> S3Server:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_bucket(Bucket=self.bucket)
        return self

    def storage_options(self) -> dict[str, object]:
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
        }

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options())

    def upload(self, local: str, name: str) -> str:
        self.filesystem().put_file(local, f"{self.bucket}/{name}")
        return f"s3://{self.bucket}/{name}"

    def stop(self) -> None:
        self._server.stop()


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.01)


def raised_within(call: Callable[[], object], seconds: float, hang: str) -> BaseException:
    """What ``call`` raises, run on a thread of its own: a hang check, not a
    speed (``seconds`` far beyond what it takes), failing with ``hang``
    where it is still running then (and where it raised nothing)."""
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # what it raised, for the test to look at
            outcome.append(error)

    running = threading.Thread(target=run, daemon=True)
    running.start()
    running.join(seconds)
    assert not running.is_alive(), hang
    [error] = outcome
    return error


os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
