"""fastio's own HTTP client (fastio.sources._http), the path plain-HTTP reads
and shard downloads take: bodies received straight into the reader's buffers,
keep-alive connections reused, and what real servers do that a client must
take in stride (idle connections closed without notice, redirects, headers
the user set, answers shorter than asked at an object's end)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import socket
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import fastio
from fastio.sources import _http
from fastio.sources._remote import Remotes
from fastio.spec import ReaderSettings
from tests.servers import RangeServer, wait_for

DATA = random.Random(7).randbytes(3 << 20)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless an answer says otherwise
    server: _Server

    def log_message(self, *args: object) -> None:
        pass

    def _loop(self) -> bool:
        """A redirect to itself, where the path says so."""
        if not self.path.startswith("/loop"):
            return False
        self.send_response(302)
        self.send_header("Location", self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    def do_HEAD(self) -> None:  # how an object's size is asked
        self.server.heads += 1
        if self._loop():
            return
        if self.path.startswith("/moved"):
            self.send_response(302)
            self.send_header("Location", "/data")
            self.send_header("Content-Length", "5")  # what a GET would have: none comes
            self.end_headers()
            return
        if self.path.startswith("/nohead"):  # as a URL signed for GET alone
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        if not self.path.startswith("/unsized"):
            self.send_header("Content-Length", str(len(DATA)))
        self.send_header("ETag", '"data"')
        self.end_headers()

    def _whole(self) -> None:
        """A GET of the whole object: chunked where the path says so."""
        if self.path.startswith("/missing"):
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("ETag", '"data"')
        if not self.path.startswith("/chunked"):
            self.send_header("Content-Length", str(len(DATA)))
            self.end_headers()
            self.wfile.write(DATA)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for start in range(0, len(DATA), 1 << 20):
            piece = DATA[start : start + (1 << 20)]
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self) -> None:
        server = self.server
        server.requests += 1
        server.seen_headers.append(dict(self.headers))
        server.connections[self.client_address] += 1
        server.order.append(self.client_address)
        if self.path.startswith("/moved"):
            self.send_response(302)
            self.send_header("Location", "/data")
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"moved")
            return
        if self._loop():
            return
        if "Range" not in self.headers:
            self._whole()
            return
        start, end = self.headers["Range"].removeprefix("bytes=").split("-")
        body = DATA[int(start) : int(end) + 1]
        if self.path.startswith("/hinted"):  # interim answers come first (RFC 9110, 15.2)
            self.wfile.write(
                b"HTTP/1.1 100 Continue\r\n\r\n"
                b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
            )
        self.send_response(206)
        self.send_header("ETag", '"range"' if self.path.startswith("/retagged") else '"data"')
        size = "*" if self.path.startswith("/unsaid") else str(len(DATA))  # "bytes 0-9/*"
        self.send_header("Content-Range", f"bytes {start}-{int(start) + len(body) - 1}/{size}")
        if self.path.startswith("/chunked"):  # odd pieces, an extension, a trailer
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sizes, at = random.Random(len(body)), 0
            while at < len(body):
                piece = body[at : at + sizes.randrange(1, 70_000)]
                at += len(piece)
                self.wfile.write(f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\nX-Checksum: none\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if server.close_after_answer:  # as servers do at their idle timeout, without notice
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests = 0
        self.seen_headers: list[dict[str, str]] = []
        self.connections: Counter[tuple[str, int]] = Counter()
        self.order: list[tuple[str, int]] = []
        self.close_after_answer = False
        self.accepted = 0
        self.heads = 0

    def verify_request(self, request: object, client_address: object) -> bool:
        self.accepted += 1  # every connection, whether it asks for anything or not
        return True

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{path}"


@pytest.fixture
def server() -> Iterator[_Server]:
    running = _Server()
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running
    running.shutdown()
    running.server_close()
    thread.join(10)


def _read(remotes: Remotes, url: str, offset: int, length: int) -> bytes:
    buffer = bytearray(length)
    count = asyncio.run(remotes.read_into(url, offset, length, buffer))
    return bytes(buffer[:count])


def test_ranges_arrive_byte_for_byte_over_one_kept_alive_connection(server: _Server) -> None:
    remotes = Remotes(ReaderSettings(retries=0, outstanding_requests=1), {})
    try:
        rng = random.Random(1)
        for _ in range(40):
            offset = rng.randrange(len(DATA))
            length = rng.randrange(1, 600_000)
            assert (
                _read(remotes, server.url("data"), offset, length) == DATA[offset : offset + length]
            )
    finally:
        remotes.close()
    assert server.requests == 40
    # One after the other, the requests reuse one kept-alive connection. The
    # one connected ahead may come in after the first requests opened their
    # own (a busy machine), and then serves the rest: never more than these
    # two, and never back and forth between them.
    assert len(server.connections) <= 2
    assert server.accepted <= 2
    switches = sum(a != b for a, b in zip(server.order, server.order[1:], strict=False))
    assert switches <= 1


def test_every_body_byte_is_counted_as_it_arrives(server: _Server) -> None:
    # Small bodies come with the head, large ones over many receives: both
    # count once.
    remotes = Remotes(ReaderSettings(retries=0), {})
    try:
        assert remotes.bytes_arrived == 0
        lengths = [5, 1000, 70_000, len(DATA) - 10]
        for length in lengths:
            assert _read(remotes, server.url("data"), 10, length) == DATA[10 : 10 + length]
        assert remotes.bytes_arrived == sum(lengths)
    finally:
        remotes.close()


def test_a_body_is_counted_while_it_arrives() -> None:
    # A server that sends half a body and waits: the half is counted before
    # the read completes (a tuner measuring a link sees it move).
    body = DATA[: 1 << 20]
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    halfway = threading.Event()

    def answer(connection: socket.socket) -> None:
        with connection:
            request = b""
            while b"\r\n\r\n" not in request:
                received = connection.recv(65536)
                if not received:
                    return  # a connection made ahead, closed unused
                request += received
            if request.startswith(b"HEAD"):
                connection.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n"
                                   "Connection: close\r\n\r\n".encode())  # fmt: skip
                return
            head = f"HTTP/1.1 206 Partial Content\r\nContent-Length: {len(body)}\r\n"
            head += f"Content-Range: bytes 0-{len(body) - 1}/{len(body)}\r\n\r\n"
            connection.sendall(head.encode() + body[: len(body) // 2])
            halfway.wait(30)
            connection.sendall(body[len(body) // 2 :])

    def serve() -> None:
        with contextlib.suppress(OSError):  # the listener closed: the test is over
            while True:
                connection, _ = listener.accept()
                threading.Thread(target=answer, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    remotes = Remotes(ReaderSettings(retries=0), {})
    got: list[bytes] = []
    reader = threading.Thread(
        target=lambda: got.append(_read(remotes, f"http://127.0.0.1:{port}/data", 0, len(body)))
    )
    try:
        reader.start()
        wait_for(lambda: remotes.bytes_arrived >= len(body) // 2, timeout=30)
        assert not got  # the read has not completed: half of it is counted
        assert remotes.bytes_arrived < len(body)
        halfway.set()
        reader.join(30)
        assert got == [body]
        assert remotes.bytes_arrived == len(body)
    finally:
        halfway.set()
        remotes.close()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        listener.close()
        thread.join(10)
    assert not thread.is_alive()


def test_an_idle_connection_the_server_closed_is_replaced_without_a_retry(
    server: _Server,
) -> None:
    server.close_after_answer = True
    remotes = Remotes(ReaderSettings(retries=0), {})  # a retry would fail the read
    try:
        for offset in (0, 1000, 2_000_000):
            assert _read(remotes, server.url("data"), offset, 5000) == DATA[offset : offset + 5000]
    finally:
        remotes.close()
    assert server.requests == 3
    assert len(server.connections) == 3


def test_a_range_past_the_end_returns_what_the_object_holds(server: _Server) -> None:
    remotes = Remotes(ReaderSettings(), {})
    try:
        assert _read(remotes, server.url("data"), len(DATA) - 100, 4096) == DATA[-100:]
    finally:
        remotes.close()


@pytest.mark.parametrize("kind", ["chunked", "hinted", "unsaid"])
def test_answers_framed_as_http_allows_arrive_byte_for_byte(server: _Server, kind) -> None:
    """Ranges answered in chunks (with extensions and trailers), after
    interim answers (100, 103), or with a Content-Range that does not say the
    object's size: byte for byte, one after the other over one connection."""
    remotes = Remotes(ReaderSettings(retries=0, outstanding_requests=1), {})
    try:
        rng = random.Random(3)
        for _ in range(12):
            offset, length = rng.randrange(len(DATA)), rng.randrange(1, 300_000)
            got = _read(remotes, server.url(f"{kind}-data"), offset, length)
            assert got == DATA[offset : offset + length]
    finally:
        remotes.close()
    assert server.requests == 12
    assert len(server.connections) <= 2  # kept alive across the answers


def test_a_redirect_loop_is_named(server: _Server) -> None:
    remotes = Remotes(ReaderSettings(retries=0), {})
    try:
        with pytest.raises(fastio.RemoteReadError, match="too many redirects") as caught:
            remotes.stat(server.url("loop"))
        assert caught.value.filename == server.url("loop")
        with pytest.raises(fastio.HTTPStatusError, match="too many redirects"):
            _read(remotes, server.url("loop"), 0, 10)
    finally:
        remotes.close()


def test_redirects_are_followed_on_the_same_connection(server: _Server) -> None:
    remotes = Remotes(ReaderSettings(retries=0), {})
    try:
        assert _read(remotes, server.url("moved"), 10, 1000) == DATA[10:1010]
    finally:
        remotes.close()
    assert server.requests == 2
    assert len(server.connections) == 1


def test_headers_in_storage_options_are_sent(server: _Server) -> None:
    options = {"headers": {"Authorization": "Bearer token-1", "X-Job": "fastio"}}
    remotes = Remotes(ReaderSettings(), options)
    try:
        assert _read(remotes, server.url("data"), 0, 100) == DATA[:100]
        assert remotes._http is not None  # served by fastio's client, not aiohttp
    finally:
        remotes.close()
    assert server.seen_headers[-1]["Authorization"] == "Bearer token-1"
    assert server.seen_headers[-1]["X-Job"] == "fastio"


def test_sizes_are_asked_by_fastios_client_without_fsspec(server: _Server) -> None:
    remotes = Remotes(ReaderSettings(retries=0), {})
    try:
        for name in ("data", "moved"):  # the redirect of a HEAD has no body to wait for
            remote = remotes.stat(server.url(name))
            assert (remote.size, remote.version) == (len(DATA), '"data"')
        assert remotes._http is not None
        assert not remotes._filesystems  # fsspec made no filesystem
    finally:
        remotes.close()
    assert server.heads == 3


@pytest.mark.parametrize(("name", "through_fsspec"), [("unsized", False), ("nohead", True)])
def test_a_size_the_head_does_not_give_is_asked_again(server: _Server, name,
                                                      through_fsspec) -> None:  # fmt: skip
    """A HEAD answered without the size: the Content-Range of a request of
    the first byte gives it. A HEAD refused: fsspec asks (with a GET)."""
    remotes = Remotes(ReaderSettings(retries=0), {})
    try:
        remote = remotes.stat(server.url(name))
        assert (remote.size, remote.version) == (len(DATA), '"data"')
        assert ("http" in remotes._filesystems) == through_fsspec
    finally:
        remotes.close()


def test_a_read_confirms_its_object_by_its_answer_or_else_by_asking(server: _Server) -> None:
    """A read of an object whose size and ETag a layout expects is confirmed
    by the answer's headers, with no other request; where they differ (a
    server may tag a range's answer otherwise) the object is asked about,
    and only a different answer to that is a changed object."""
    from fastio.sources._objects import version_number

    def read(name: str, etag: str) -> bytes:
        url = server.url(name)
        remotes = Remotes(ReaderSettings(retries=0), {},
                          expected={url: (len(DATA), version_number(etag))})  # fmt: skip
        try:
            return _read(remotes, url, 0, 100)
        finally:
            remotes.close()

    assert read("data", '"data"') == DATA[:100]
    assert server.heads == 0
    assert read("retagged", '"data"') == DATA[:100]  # its HEAD answers '"data"'
    assert server.heads == 1
    with pytest.raises(fastio.ShardChangedError) as raised:
        read("data", '"before"')
    assert raised.value.filename == server.url("data")


def test_a_read_after_its_object_was_found_changed_fails_too(server: _Server) -> None:
    """Reads of an object whose answers name another ETag than its layout's
    wait for one question about it; where that finds it changed, every read
    of it fails, also one whose bytes come after the answer and before the
    reader, told of the failure, forgets what it knew of the object (a
    race that delivered bytes of a replaced shard, under skip, once in a
    few dozen epochs)."""
    from fastio.sources._objects import version_number

    url = server.url("data")
    remotes = Remotes(ReaderSettings(retries=0), {},
                      expected={url: (len(DATA), version_number('"before"'))})  # fmt: skip
    try:
        for _ in range(2):  # the second read: the answer kept, not yet forgotten
            with pytest.raises(fastio.ShardChangedError) as raised:
                _read(remotes, url, 0, 100)
            assert raised.value.filename == url
        remotes.forget(url)
        with pytest.raises(fastio.ShardChangedError):
            _read(remotes, url, 100, 100)
    finally:
        remotes.close()
    assert server.heads == 2  # asked once, and again once forgotten


def test_a_whole_object_is_read_in_one_request(server: _Server) -> None:
    from fastio.sources._remote import read_object

    assert read_object(server.url("data"), {}) == DATA
    assert server.requests == 1
    assert read_object(server.url("chunked"), {}) == DATA  # fastio's client leaves it to fsspec
    with pytest.raises(FileNotFoundError) as raised:
        read_object(server.url("missing"), {})
    assert raised.value.filename == server.url("missing")


def test_fsspecs_configuration_still_reaches_the_requests(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fsspec.config

    monkeypatch.setitem(fsspec.config.conf, "http", {"headers": {"X-Configured": "yes"}})
    remotes = Remotes(ReaderSettings(retries=0), {})
    try:
        assert _read(remotes, server.url("data"), 0, 100) == DATA[:100]
        assert remotes._http is not None  # headers only: still fastio's client
    finally:
        remotes.close()
    assert server.seen_headers[-1]["X-Configured"] == "yes"


def test_client_options_and_the_switch_keep_requests_on_aiohttp(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for options in ({"client_kwargs": {"trust_env": True}}, {}):
        if not options:
            monkeypatch.setenv("FASTIO_HTTP_CLIENT", "aiohttp")
        remotes = Remotes(ReaderSettings(), options)
        try:
            assert _read(remotes, server.url("data"), 5, 50) == DATA[5:55]
            assert remotes._http is None
        finally:
            remotes.close()


def test_a_cancelled_read_ends_its_request_and_keeps_its_buffer_until_then(
    tmp_path: Path,
) -> None:
    (tmp_path / "blob").write_bytes(DATA)
    server = RangeServer(tmp_path).start()
    server.faults.stalls, server.faults.stall_seconds = 1, 30.0
    remotes = Remotes(ReaderSettings(retries=0, request_timeout=60), {})
    buffer = bytearray(4096)

    async def cancel_one() -> None:
        task = asyncio.ensure_future(remotes.read_into(server.url("blob"), 0, 4096, buffer))
        while server.faults.requests == 0:  # the request is on its way: the stall holds it
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancel_one())
        with pytest.raises(BufferError):  # the request still holds a view of it
            buffer.extend(b"x")
    finally:
        remotes.close()  # shuts the stalled request's socket: no wait for the stall
        server.stop()
    gc.collect()  # the cancelled task's traceback holds its frame in a cycle
    buffer.extend(b"x")  # released once the request ended


def test_closing_ends_requests_in_flight(tmp_path: Path) -> None:
    (tmp_path / "blob").write_bytes(DATA)
    server = RangeServer(tmp_path).start()
    server.faults.stalls, server.faults.stall_seconds = 1, 30.0
    remotes = Remotes(ReaderSettings(retries=3, request_timeout=60), {})
    outcome: list[BaseException | bytes] = []

    def read() -> None:
        try:
            outcome.append(_read(remotes, server.url("blob"), 0, 4096))
        except BaseException as error:
            outcome.append(error)

    reading = threading.Thread(target=read)
    try:
        reading.start()
        while server.faults.requests == 0:
            reading.join(0.01)
        remotes.close()
        reading.join(20)
        assert not reading.is_alive()
    finally:
        server.stop()
    assert len(outcome) == 1
    assert isinstance(outcome[0], OSError), outcome
    assert server.faults.requests == 1  # no retry after the close


def test_an_epoch_over_http_equals_the_local_one(tmp_path: Path) -> None:
    import webdataset

    rng = random.Random(3)
    for shard in range(3):
        with webdataset.TarWriter(str(tmp_path / f"s{shard}.tar")) as sink:
            for key in range(40):
                sink.write(
                    {"__key__": f"{shard}-{key}", "bin": rng.randbytes(rng.randrange(1, 90_000))}
                )
    local = [str(tmp_path / f"s{shard}.tar") for shard in range(3)]
    server = RangeServer(tmp_path).start()
    try:
        remote = [server.url(f"s{shard}.tar") for shard in range(3)]
        knobs = {"shuffle": False, "read_size": 64 << 10}
        with fastio.Dataset(local, index_dir=str(tmp_path / "a"), **knobs) as dataset:
            expected = [(s["__key__"], s["bin"]) for s in dataset]
        with fastio.Dataset(remote, index_dir=str(tmp_path / "b"), **knobs) as dataset:
            got = [(s["__key__"], s["bin"]) for s in dataset]
            assert dataset.reader._remotes._http is not None
    finally:
        server.stop()
    assert got == expected
    assert len(got) == 120


def test_a_forked_child_opens_its_own_connections(server: _Server) -> None:
    client = _http.RangeClient()
    buffer = bytearray(100)
    assert client.get_into(server.url("data"), 0, 100, memoryview(buffer), 10) == 100
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        ok = client.get_into(server.url("data"), 100, 100, memoryview(buffer), 10) == 100
        os.write(write, b"1" if ok and bytes(buffer) == DATA[100:200] else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(read)
    assert client.get_into(server.url("data"), 200, 100, memoryview(buffer), 10) == 100
    assert bytes(buffer) == DATA[200:300]
    client.close()
    assert len(server.connections) == 2  # the parent's, kept; the child's own
    with pytest.raises(ConnectionAbortedError):
        client.get_into(server.url("data"), 0, 1, memoryview(buffer), 10)


def test_a_server_that_is_not_http_is_a_clear_error() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer() -> None:
        connection, _ = listener.accept()
        connection.recv(65536)
        connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        connection.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    client = _http.RangeClient()
    try:
        with pytest.raises(ConnectionError, match="not an HTTP answer"):
            client.get_into(f"http://127.0.0.1:{listener.getsockname()[1]}/x", 0, 10,
                            memoryview(bytearray(10)), 10)  # fmt: skip
    finally:
        client.close()
        listener.close()
        thread.join(10)


def test_asking_a_size_readies_a_window_of_connected_request_threads(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first read of a never-seen dataset follows the sizes of its
    objects: while they are asked, the threads of a window of requests start,
    each connecting to the server, so the reads neither wait for threads to
    start nor for connections to open."""
    window = 4
    ahead: list[str] = []  # connections made ahead, as each is done (made or given up)
    connect_ahead = _http.RangeClient.connect_ahead

    def counted(client: _http.RangeClient, url: str, timeout: float) -> None:
        try:
            connect_ahead(client, url, timeout)
        finally:
            ahead.append(url)

    monkeypatch.setattr(_http.RangeClient, "connect_ahead", counted)
    remotes = Remotes(ReaderSettings(retries=0, outstanding_requests=window), {})
    url = server.url("data")
    try:
        assert remotes.stat(url).size == len(DATA)
        client = remotes._http
        assert client is not None

        def held() -> int:  # connections waiting idle for a request
            return sum(len(idle) for idle in client._idle.values())

        # They start on threads of their own; the server accepts each a little
        # after the client's connect returns. The question about the size went
        # on a connection of its own, or on one of theirs where it was idle
        # first (a busy machine): either way a window of them waits. Once every
        # one is made, all the client's connections are idle, and the server
        # has accepted them all when it has accepted as many.
        wait_for(lambda: len(ahead) == window and server.accepted >= held() >= window)
        connected = server.accepted
        assert connected in (window, window + 1)
        assert server.requests == 0  # connected, nothing read yet
        names = [t.name for t in threading.enumerate() if t.name.startswith("fastio-http")]
        assert len(names) >= window
        readers = [threading.Thread(target=_read, args=(remotes, url, i << 20, 1 << 20))
                   for i in range(window)]  # fmt: skip
        for thread in readers:
            thread.start()
        for thread in readers:
            thread.join(30)
        assert server.requests == window
        assert server.accepted == connected  # the reads took the connections made ahead
    finally:
        remotes.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("fastio-http")]


def test_a_client_dropped_unclosed_closes_its_connections(server: _Server) -> None:
    """A reader dropped without close() (a dataset and its reader collected
    as one reference cycle, sockets finalized in no set order) leaves no
    socket to be finalized open, each with an "unclosed socket" warning."""
    client = _http.RangeClient()
    for _ in range(3):
        client.connect_ahead(server.url("data"), 10)
    _read_with(client, server.url("data"))
    sockets = [c.sock for idle in client._idle.values() for c in idle]
    assert len(sockets) == 3
    cycle: list[object] = [client]
    cycle.append(cycle)
    del client, cycle
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert all(s.fileno() == -1 for s in sockets)


def _read_with(client: _http.RangeClient, url: str) -> None:
    buffer = bytearray(1000)
    assert client.get_into(url, 0, 1000, memoryview(buffer), 10) == 1000
    assert bytes(buffer) == DATA[:1000]


@pytest.mark.parametrize("total", [100, 300_000, 3_000_000])
def test_a_body_that_trickles_in_arrives_whole_and_the_socket_is_left_as_it_was(total):
    # The receive waits for bytes in batches, never for more than the body
    # still owes: a body sent in small pieces with pauses, its last piece
    # smaller than a batch, on a connection the sender keeps open (as a
    # kept-alive answer), arrives whole; then the socket wakes for a single
    # byte again, as the next answer's head is read.
    from fastio import _native

    body = random.Random(total).randbytes(total)
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    done = threading.Event()

    def send() -> None:
        for start in range(0, total, 7_001):
            server.sendall(body[start : start + 7_001])
            if start // 7_001 % 16 == 0:
                done.wait(0.002)
        done.wait()  # open until the receiver is done

    sender = threading.Thread(target=send)
    sender.start()
    try:
        into = bytearray(total + 10)
        arrivals = _native.ArrivalCounter()
        assert _native.receive_into(client.fileno(), into, 0, total, 30.0, arrivals) == total
        assert bytes(into[:total]) == body
        assert arrivals.value == total
        assert client.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
        server.sendall(b"x")  # one byte wakes a wait again
        client.settimeout(30.0)
        assert client.recv(10) == b"x"
    finally:
        done.set()
        sender.join(30)
        for sock in (client, server, listener):
            sock.close()


def test_headers_are_worked_out_while_fsspec_is_half_imported(monkeypatch) -> None:
    """Another thread (a stat falling back to fsspec) may be importing fsspec:
    its module is in sys.modules without its config yet (an AttributeError,
    3-20% of fresh processes against a server that refuses HEAD)."""
    import types

    from fastio.sources._http import plain_headers

    monkeypatch.setitem(sys.modules, "fsspec", types.ModuleType("fsspec"))  # half imported
    for name in [name for name in os.environ if name.startswith("FSSPEC_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", "/nonexistent")  # no fsspec config folder
    assert plain_headers({"headers": {"a": "b"}}) == {"a": "b"}
