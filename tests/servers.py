"""Real servers on loopback for remote-storage tests: an HTTP server with
Range support and fault injection (aiohttp), and an S3-compatible server
(moto's server mode). Started and stopped by the test fixtures."""

from __future__ import annotations

import asyncio
import hashlib
import os
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
    served: Counter[str] = field(default_factory=Counter)  # body bytes by name
    asked: list[tuple[str, int, int]] = field(default_factory=list)  # (name, offset, length)
    hold_after: int | None = None  # data requests past this many wait until it is None
    # Data requests for which hold(name, offset) is true wait until it is None.
    hold: Callable[[str, int], bool] | None = None

    def take(self, name: str) -> bool:
        count = getattr(self, name)
        if count > 0:
            setattr(self, name, count - 1)
            return True
        return False


class RangeServer:
    """Serves the files under `root` over HTTP on 127.0.0.1 with Range, HEAD and ETag."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.faults = Faults()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def start(self) -> RangeServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{name:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        asyncio.run_coroutine_threadsafe(self._cancel_handlers(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _cancel_handlers(self) -> None:
        """Handlers still sleeping (stalls) end with the server, not at exit."""
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        path = self.root / name
        faults = self.faults
        if faults.latency:
            await asyncio.sleep(faults.latency)
        if name in faults.forbidden:
            raise web.HTTPForbidden()
        if name in faults.missing or not path.is_file():
            raise web.HTTPNotFound()
        data = path.read_bytes()
        stat = path.stat()
        etag = '"' + hashlib.md5(f"{stat.st_size}-{stat.st_mtime_ns}".encode()).hexdigest() + '"'
        headers = {"ETag": etag, "Accept-Ranges": "bytes"}
        if request.method == "HEAD":
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
            while faults.hold is not None and faults.hold(name, start):
                await asyncio.sleep(0.005)
            body = data[start:end]
            faults.asked.append((name, start, len(body)))
            status = 206
            headers["Content-Range"] = f"bytes {start}-{start + len(body) - 1}/{len(data)}"
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
        return web.Response(status=status, body=body, headers=headers)


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


os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
