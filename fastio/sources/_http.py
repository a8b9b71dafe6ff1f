"""Ranged HTTP/1.1 GETs on blocking sockets, each body received straight into
the reader's buffer.

Why not aiohttp (what fsspec's HTTP filesystem uses): it receives every
response on one event-loop thread, in 64 KiB callbacks that parse, buffer and
hand over each chunk under the GIL. At a few hundred MB/s that thread is the
limit, and the GIL it holds is the one the training loop needs. Here each
request runs on a thread of its own, and one native call per body
(``_native.receive_into``) receives it into the destination buffer with the
GIL released throughout: the kernel's copy is the only copy, and many
requests receive in parallel.

An object's size (HEAD) and a small object read whole (a dataset's index)
are asked the same way, so a plain-HTTP dataset is read without importing
fsspec's HTTP filesystem and aiohttp (a few hundred ms in a fresh process).

A connection is kept alive and reused for the next request to the same host.
A reused connection the server has closed meanwhile is replaced once at no
cost to the request's retries. Plain ``http://`` only: HTTPS, proxies and
authentication stay with fsspec (see :func:`usable`).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import socket
import sys
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urljoin, urlsplit

from fastio import _native
from fastio._errors import HTTPStatusError, MovedOffClient, RangeIgnoredError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "REDIRECT_LOOP",
    "RangeClient",
    "answer_size",
    "plain_headers",
    "range_ignored",
    "usable",
]

_T = TypeVar("_T")

_HEAD_LIMIT = 64 << 10  # the most a response's status line and headers may take
_REDIRECTS = 5
_SAFE_PATH = "/%:@!$&'()*+,;=-._~"  # what a request target may hold unquoted


# What _exchange returns when a reused connection ended before any byte of
# the answer: the server closed it while idle, and the request is sent again
# on a fresh connection (not counted as a retry).
_STALE = object()


def usable(fs: Any) -> bool:
    """Whether ``fs`` (fsspec's HTTP filesystem) asks nothing of its requests
    this client does not do: plain HTTP, no client options (authentication,
    proxies, TLS settings, cookies), request options at most ``headers``.
    Setting ``FASTIO_HTTP_CLIENT=aiohttp`` keeps every request on fsspec."""
    if _left_to_aiohttp():
        return False
    if type(fs).__name__ != "HTTPFileSystem" or not type(fs).__module__.startswith("fsspec."):
        return False
    if getattr(fs, "client_kwargs", None) or set(getattr(fs, "kwargs", {})) - {"headers"}:
        return False
    return _textual(fs.kwargs.get("headers") or {})


def plain_headers(storage_options: Mapping[str, Any]) -> dict[str, str] | None:
    """The headers requests send, where ``storage_options`` ask nothing of
    plain HTTP but headers and no fsspec configuration can add options
    (``FSSPEC_*`` variables, files in fsspec's configuration folder): this
    client then serves plain HTTP without importing fsspec, whose HTTP
    filesystem (aiohttp) takes a few hundred ms to import. None otherwise:
    :func:`usable` decides on the filesystem fsspec makes."""
    if _left_to_aiohttp():
        return None
    if set(storage_options) - {"headers"}:
        return None
    # Loaded: its configuration as it is now. Being imported by another
    # thread (a stat falling back to fsspec), it has none yet: what it will
    # read is looked at as where it is not loaded.
    config = getattr(sys.modules.get("fsspec"), "config", None)
    if config is not None:
        if any(config.conf.get(name) for name in ("http", "https")):
            return None
    elif any(name.startswith("FSSPEC_") for name in os.environ) or _listed(
            os.path.join(os.path.expanduser("~"), ".config", "fsspec")):  # fmt: skip
        return None
    headers = storage_options.get("headers") or {}
    return dict(headers) if _textual(headers) else None


def _left_to_aiohttp() -> bool:
    return os.environ.get("FASTIO_HTTP_CLIENT", "").lower() == "aiohttp"


def _textual(headers: Mapping[Any, Any]) -> bool:
    return all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())


def _listed(folder: str) -> bool:
    try:
        return bool(os.listdir(folder))
    except OSError:
        return False


class _Answer:
    """An answer's head: its status, reason and headers (names lowercased),
    the bytes of it and after it in its connection's ``head`` (``filled``)
    and where the body starts in them (``held``), and the request's deadline."""

    __slots__ = ("deadline", "filled", "headers", "held", "reason", "status")

    def __init__(self, status: int, reason: str, headers: dict[str, str], filled: int,
                 held: int, deadline: float) -> None:  # fmt: skip
        self.status, self.reason, self.headers = status, reason, headers
        self.filled, self.held, self.deadline = filled, held, deadline


class _Moved:
    """Where a redirect points."""

    __slots__ = ("location",)

    def __init__(self, location: str) -> None:
        self.location = location


class _Connection:
    __slots__ = ("head", "host", "reused", "sock")

    def __init__(self, host: tuple[str, int], timeout: float) -> None:
        self.host = host
        self.sock = socket.create_connection(host, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # No SO_RCVBUF: setting it turns off the kernel's tuning of the
        # receive window, which grows to what the link's round trip needs.
        self.head = bytearray(_HEAD_LIMIT)
        self.reused = False


class AnswerTimes:
    """How long requests waited for their answers' heads: the quickest since
    the client was made (about the link's round trip: some request met an
    idle path) and the median of the last ``recent`` (the round trip as
    the link is loaded now: a queue at a shared bottleneck lengthens it)."""

    def __init__(self, recent: int = 32) -> None:
        self._lock = threading.Lock()
        self._fastest = math.inf
        self._recent: deque[float] = deque(maxlen=recent)

    def add(self, seconds: float) -> None:
        with self._lock:
            self._fastest = min(self._fastest, seconds)
            self._recent.append(seconds)

    def now(self) -> tuple[float, float]:
        """``(fastest, recent median)`` in seconds; ``(0, 0)`` before any answer."""
        with self._lock:
            recent = sorted(self._recent)
            fastest = self._fastest
        if not recent:
            return 0.0, 0.0
        return fastest, recent[len(recent) // 2]


class RangeClient:
    """Keep-alive connections to HTTP servers, shared by the threads of one
    reader in one process. ``get_into`` is blocking and thread-safe; ``close``
    ends the requests in flight (their sockets are shut down) and every idle
    connection."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self.headers = dict(headers or {})
        self.arrivals = _native.ArrivalCounter()  # body bytes received, as they arrive
        self.answers = AnswerTimes()  # from each request sent to its answer's head
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._active: set[_Connection] = set()
        self._closed = False
        self._pid = os.getpid()
        # A client dropped unclosed (its reader collected with a dataset's
        # cycle) closes its connections before the collector finalizes them
        # one by one, each with an "unclosed socket" warning.
        self._finalizer = weakref.finalize(self, _close_idle, self._idle, self._lock)

    def get_into(
        self, url: str, offset: int, length: int, into: memoryview, timeout: float,
        cancelled: threading.Event | None = None,
        identity: Callable[[int | None, str], None] | None = None,
    ) -> int:  # fmt: skip
        """``length`` bytes of ``url`` from ``offset`` into ``into``; returns
        how many arrived (fewer only at the object's end). ``identity`` is
        called with the object's size and ETag as each answer gives them (None
        and "" where it does not) before its body is received. A server may
        answer part of a range (its Content-Range says which): the rest is
        asked for again. Raises HTTPStatusError for an answer other than the
        range (``status`` set), RangeIgnoredError for more bytes than asked,
        TimeoutError when no byte comes for ``timeout`` seconds or the whole
        request takes longer, and ConnectionError (or another OSError) when
        the connection fails."""
        got = 0
        while True:
            count, partial = self._get_part(url, offset + got, length - got, into[got:], timeout,
                                            cancelled, identity)  # fmt: skip
            got += count
            if not partial or count == 0 or got >= length:
                return got

    def _get_part(
        self, url: str, offset: int, length: int, into: memoryview, timeout: float,
        cancelled: threading.Event | None, identity: Callable[[int | None, str], None] | None,
    ) -> tuple[int, bool]:  # fmt: skip
        """One request of :meth:`get_into`: the count that arrived, and whether
        the answer held part of the range only (the object goes on past it)."""

        def body(connection: _Connection, answer: _Answer, url: str) -> tuple[int, bool]:
            status, headers = answer.status, answer.headers
            if status not in (200, 206):
                raise HTTPStatusError(status, answer.reason, url)
            if status == 200 and offset > 0:
                raise range_ignored(url, offset, length, int(headers.get("content-length", -1)))
            partial = status == 206 and answers_part(headers.get("content-range", ""), url,
                                                     offset, length)  # fmt: skip
            if identity is not None:
                identity(answer_size(headers), headers.get("etag", ""))
            chunked = "chunked" in headers.get("transfer-encoding", "").lower()
            encoding = headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("identity", ""):
                # Asked for identity: the bytes of another encoding are not the object's.
                refused = f"a range answered encoded ({encoding!r}; asked for identity)"
                raise HTTPStatusError(status, refused, url)
            if chunked:
                count = self._chunked_body(connection, answer, url, into[:length], cancelled)
                return count, partial
            announced = int(headers["content-length"]) if "content-length" in headers else None
            if announced is not None and announced > length:
                raise range_ignored(url, offset, length, announced)
            count = self._body(connection, answer, url, into,
                               length if announced is None else announced, cancelled,
                               until_close=announced is None)  # fmt: skip
            return count, partial

        return self._ask(url, "GET", (offset, length), timeout, body)

    def head(self, url: str, timeout: float) -> tuple[int | None, str]:
        """The size and ETag of ``url`` (as fsspec's ``info`` names an HTTP
        object's version: "" without one), from a HEAD request; the size None
        where the answer does not give it (or gives the size of an encoding).
        Raises as :meth:`get_into` does."""

        def answered(connection: _Connection, answer: _Answer, url: str) -> tuple[int | None, str]:
            if not 200 <= answer.status < 300:
                raise HTTPStatusError(answer.status, answer.reason, url)
            self._done(connection, answer, until_close=False)  # an answer to HEAD has no body
            return answer_size(answer.headers), answer.headers.get("etag", "")

        return self._ask(url, "HEAD", None, timeout, answered)

    def get(self, url: str, timeout: float, first_byte: float | None = None
            ) -> bytearray | None:  # fmt: skip
        """The whole of ``url`` in one request; None where the answer does not
        announce its length (chunked, or until the connection closes) or
        comes encoded. Raises as :meth:`get_into` does; TimeoutError too
        where the connection or the answer's first byte takes longer than
        ``first_byte`` seconds (``timeout`` bounds the whole request, which a
        large object needs: a server that never answers is not waited for
        that long)."""

        def whole(connection: _Connection, answer: _Answer, url: str) -> bytearray | None:
            headers = answer.headers
            if answer.status != 200:
                raise HTTPStatusError(answer.status, answer.reason, url)
            length = answer_size(headers) if "transfer-encoding" not in headers else None
            if length is None:
                self._drop(connection)  # its body is not read
                return None
            into = bytearray(length)
            self._body(connection, answer, url, memoryview(into), length, None, until_close=False)
            return into

        return self._ask(url, "GET", None, timeout, whole, first_byte)

    def _ask(self, url: str, method: str, byte_range: tuple[int, int] | None, timeout: float,
             answer: Callable[[_Connection, _Answer, str], _T], first_byte: float | None = None,
             ) -> _T:  # fmt: skip
        """One request, following redirects; ``answer`` reads the answer (its
        body too) and gives the connection back. The connection and the
        answer's head come within ``first_byte`` seconds (None: ``timeout``)."""
        deadline = time.monotonic() + timeout
        for _ in range(_REDIRECTS + 1):
            head_by = (
                deadline if first_byte is None else min(deadline, time.monotonic() + first_byte)
            )
            result = self._attempt(url, method, byte_range, deadline, answer, head_by)
            if not isinstance(result, _Moved):
                return result
            if not result.location.startswith("http://"):
                raise MovedOffClient(url, result.location)
            url = result.location
        raise HTTPStatusError(REDIRECT_LOOP, "too many redirects", url)

    def _attempt(self, url: str, method: str, byte_range: tuple[int, int] | None,
                 deadline: float, answer: Callable[[_Connection, _Answer, str], _T],
                 head_by: float) -> _T | _Moved:  # fmt: skip
        """One request and its answer, or where a redirect points; the
        connection and the answer's head by ``head_by``, the rest by ``deadline``."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{url}: only http:// URLs are read by this client")
        host = (parts.hostname, parts.port or 80)
        target = quote(parts.path or "/", safe=_SAFE_PATH) + (f"?{parts.query}" if parts.query
                                                              else "")  # fmt: skip
        request = self._request(method, target, parts.netloc, byte_range)
        while True:
            connection = self._connection(host, head_by)
            try:
                head = self._exchange(connection, request, deadline, method != "HEAD", head_by)
                if head is _STALE:
                    self._drop(connection)
                    continue  # an idle connection the server had closed: once more, on a fresh one
                if isinstance(head, str):
                    return _Moved(urljoin(url, head))
                assert isinstance(head, _Answer)
                return answer(connection, head, url)
            except BaseException:
                self._drop(connection)
                raise

    def _request(self, method: str, target: str, netloc: str,
                 byte_range: tuple[int, int] | None) -> bytes:  # fmt: skip
        lines = [f"{method} {target} HTTP/1.1", f"Host: {netloc}"]
        if byte_range is not None:
            offset, length = byte_range
            lines.append(f"Range: bytes={offset}-{offset + length - 1}")
        lines += ["Accept-Encoding: identity", "User-Agent: fastio"]
        lines += [f"{name}: {value}" for name, value in self.headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _connection(self, host: tuple[str, int], deadline: float) -> _Connection:
        with self._lock:
            if self._closed:
                raise ConnectionAbortedError(errno.ECONNABORTED, "the reader is closed")
            if self._pid != os.getpid():  # a forked child never uses its parent's sockets
                for inherited in _taken(self._idle):
                    inherited.sock.close()  # the child's copy; the parent's stays open
                self._active.clear()
                self._pid = os.getpid()
            idle = self._idle.get(host)
            connection = idle.pop() if idle else None
        if connection is None:
            connection = _Connection(host, _remaining(deadline))
        else:
            connection.reused = True
        with self._lock:
            self._active.add(connection)
        if self.closed:  # close() ran meanwhile and did not see this one
            self._drop(connection)
            raise ConnectionAbortedError(errno.ECONNABORTED, "the reader is closed")
        return connection

    def connect_ahead(self, url: str, timeout: float) -> None:
        """Open a connection to ``url``'s server and keep it idle for a request
        to come: connecting costs a round trip that a first read would wait
        for. A server that cannot be reached now is left for that read to report."""
        parts = urlsplit(url)
        if not parts.hostname:
            return
        with self._lock:
            if self._closed:
                return
        try:
            connection = _Connection((parts.hostname, parts.port or 80), timeout)
        except OSError:
            return
        self._release(connection)

    def _release(self, connection: _Connection) -> None:
        """Back to the idle list after a complete answer."""
        with self._lock:
            self._active.discard(connection)
            if not self._closed:
                self._idle.setdefault(connection.host, []).append(connection)
                return
        connection.sock.close()

    def _drop(self, connection: _Connection) -> None:
        with self._lock:
            self._active.discard(connection)
        connection.sock.close()

    def _exchange(self, connection: _Connection, request: bytes, deadline: float, bodied: bool,
                  head_by: float) -> _Answer | str | object:  # fmt: skip
        """Sends ``request``; the answer's head (by ``head_by``), where a
        redirect points (the connection given back: past the redirect's body,
        where ``bodied``, as answers to all but HEAD are), or _STALE."""
        sock = connection.sock
        sock.settimeout(_remaining(head_by))
        sent = time.monotonic()
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            if connection.reused:
                return _STALE
            raise
        head = _read_head(connection, deadline, head_by)
        if head is None:
            return _STALE
        self.answers.add(time.monotonic() - sent)
        if 300 <= head.status < 400 and head.status != 304 and "location" in head.headers:
            if bodied:
                _discard(connection, head, deadline)
            self._release(connection)
            return head.headers["location"]
        return head

    def _body(
        self, connection: _Connection, answer: _Answer, url: str, into: memoryview, body: int,
        cancelled: threading.Event | None, until_close: bool,
    ) -> int:  # fmt: skip
        """Receives an answer's ``body`` bytes (or up to them, until the
        connection closes) into ``into``; gives the connection back."""
        early = answer.filled - answer.held  # body bytes that came with the head
        if early > body:
            raise HTTPStatusError(answer.status, "more bytes than the answer announced", url)
        into[:early] = connection.head[answer.held : answer.filled]
        self.arrivals.add(early)
        count = _receive(connection.sock, into, early, body, deadline=answer.deadline,
                         cancelled=cancelled, arrivals=self.arrivals,
                         until_close=until_close)  # fmt: skip
        self._done(connection, answer, until_close)
        return count

    def _chunked_body(self, connection: _Connection, answer: _Answer, url: str,
                      into: memoryview, cancelled: threading.Event | None) -> int:  # fmt: skip
        """Receives a chunked answer's body into ``into`` (raising where it
        holds more); returns its length and gives the connection back. Each
        chunk's bytes go straight into ``into``, as :meth:`_body`'s do."""
        sock, deadline = connection.sock, answer.deadline
        pending = bytearray(connection.head[answer.held : answer.filled])

        def more() -> None:
            if cancelled is not None and cancelled.is_set():
                raise ConnectionAbortedError(errno.ECONNABORTED, "the read was cancelled")
            sock.settimeout(_remaining(deadline))
            data = sock.recv(_HEAD_LIMIT)
            if not data:
                raise ConnectionResetError(errno.ECONNRESET, "the connection closed inside "
                                                             "a chunked answer")  # fmt: skip
            pending.extend(data)

        def line() -> bytes:
            while (end := pending.find(b"\r\n")) < 0:
                if len(pending) > _HEAD_LIMIT:
                    raise ConnectionError(errno.EPROTO, "a chunked answer's line is too long")
                more()
            text = bytes(pending[:end])
            del pending[: end + 2]
            return text

        filled = 0
        while True:
            text = line().split(b";", 1)[0].strip()
            try:
                size = int(text, 16)
            except ValueError:
                raise ConnectionError(errno.EPROTO, f"not a chunk's size: {text[:20]!r}") from None
            if size == 0:
                while line():  # trailer fields, up to the empty line
                    pass
                break
            if filled + size > len(into):
                raise ConnectionError(errno.EPROTO, "the answer is longer than the range asked")
            early = min(size, len(pending))
            into[filled : filled + early] = pending[:early]
            del pending[:early]
            self.arrivals.add(early)
            if early < size:
                _receive(sock, into[filled : filled + size], early, size, deadline=deadline,
                         cancelled=cancelled, arrivals=self.arrivals,
                         until_close=False)  # fmt: skip
            filled += size
            while len(pending) < 2:
                more()
            if pending[:2] != b"\r\n":
                raise ConnectionError(errno.EPROTO, "a chunk does not end where its size says")
            del pending[:2]
        # Bytes past the answer: the connection cannot serve another.
        self._done(connection, answer, until_close=bool(pending))
        return filled

    def _done(self, connection: _Connection, answer: _Answer, until_close: bool) -> None:
        """Gives ``connection`` back after ``answer``, or closes it where the
        answer ended it."""
        if until_close or answer.headers.get("connection", "").lower() == "close":
            self._drop(connection)
        else:
            self._release(connection)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """End every connection; requests in flight fail with a connection error."""
        with self._lock:
            self._closed = True
            active = list(self._active)
        for connection in active:
            with contextlib.suppress(OSError):  # already closed by its thread
                connection.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv
        self._finalizer()


def _close_idle(idle: dict[tuple[str, int], list[_Connection]], lock: threading.Lock) -> None:
    with lock:
        connections = _taken(idle)
    for connection in connections:
        connection.sock.close()


def _taken(idle: dict[tuple[str, int], list[_Connection]]) -> list[_Connection]:
    """Every idle connection, emptying ``idle`` (its lock held)."""
    connections = [c for held in idle.values() for c in held]
    idle.clear()
    return connections


# The status an HTTPStatusError gives a chain of redirects too long to follow.
REDIRECT_LOOP = 310

# The status line of an interim answer (1xx, but 101 Switching Protocols).
_INTERIM = re.compile(rb"HTTP/\d(?:\.\d)? 1(?!01)\d\d(?: |\r|$)")


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(errno.ETIMEDOUT, "the request timed out")
    return left


def _read_head(connection: _Connection, deadline: float, head_by: float) -> _Answer | None:
    """The answer's head, by ``head_by`` (its body keeps ``deadline``); None
    when a reused connection ends before the answer's first byte."""
    sock, head = connection.sock, connection.head
    view = memoryview(head)
    filled = 0
    interim = False  # an interim (1xx) answer came first
    while True:
        end = head.find(b"\r\n\r\n", 0, filled)
        if end >= 0:
            if not _INTERIM.match(head, 0, end):
                break
            # An interim answer (103 Early Hints, 100 Continue) precedes the
            # answer: RFC 9110 has clients read past it.
            head[: filled - end - 4] = head[end + 4 : filled]
            filled -= end + 4
            interim = True
            continue
        if filled == len(head):
            raise ConnectionError(errno.EPROTO, "the answer's headers are too long")
        sock.settimeout(_remaining(head_by))
        try:
            count = sock.recv_into(view[filled:])
        except ConnectionResetError:
            if connection.reused and filled == 0 and not interim:
                return None
            raise
        if count == 0:
            if connection.reused and filled == 0 and not interim:
                return None
            raise ConnectionResetError(errno.ECONNRESET, "the server closed the connection")
        filled += count
    lines = bytes(head[:end]).decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if (len(status_line) < 2 or not status_line[0].startswith("HTTP/")
            or not status_line[1].isdigit()):  # fmt: skip
        raise ConnectionError(errno.EPROTO, f"not an HTTP answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    reason = status_line[2] if len(status_line) > 2 else ""
    return _Answer(int(status_line[1]), reason, headers, filled, end + 4, deadline)


def _receive(
    sock: socket.socket, into: memoryview, filled: int, body: int, deadline: float,
    cancelled: threading.Event | None, arrivals: _native.ArrivalCounter, until_close: bool,
) -> int:  # fmt: skip
    """Receives the body into ``into[filled:body]``; returns its length. One
    native call receives it all with the GIL released (a Python loop would
    take the GIL back for every few packets, from the training loop too)."""
    if cancelled is not None and cancelled.is_set():
        raise ConnectionAbortedError(errno.ECONNABORTED, "the read was cancelled")
    end = _native.receive_into(sock.fileno(), into, filled, body, _remaining(deadline), arrivals)
    if end < body and not until_close:
        raise ConnectionResetError(
            errno.ECONNRESET, f"the connection closed after {end} of {body} bytes"
        )
    if until_close and end == body:  # no length was given: the answer must end here
        sock.settimeout(_remaining(deadline))
        if sock.recv_into(bytearray(1)):
            raise ConnectionError(errno.EPROTO, "the answer is longer than the range asked")
    return end


def _discard(connection: _Connection, answer: _Answer, deadline: float) -> None:
    """Reads past a redirect's body, so the connection can serve the next request."""
    left = int(answer.headers.get("content-length", "0") or 0) - (answer.filled - answer.held)
    scratch = memoryview(connection.head)
    while left > 0:
        connection.sock.settimeout(_remaining(deadline))
        count = connection.sock.recv_into(scratch[: min(left, len(scratch))])
        if count == 0:
            raise ConnectionResetError(errno.ECONNRESET, "the server closed the connection")
        left -= count


def answer_size(headers: Mapping[str, str]) -> int | None:
    """The object's size as an answer announces it: a range's Content-Range
    total, else its length; None where it does not, or where it is the
    length of an encoding."""
    content_range = headers.get("content-range")
    if content_range is not None:  # "bytes 0-99/*": the size is not said
        total = content_range.rpartition("/")[2].strip()
        return int(total) if total.isdigit() else None
    if headers.get("content-encoding", "identity") not in ("identity", ""):
        return None
    length = headers.get("content-length", "")
    return int(length) if length.isdigit() else None


def answers_part(value: str, url: str, offset: int, length: int) -> bool:
    """Whether a 206 whose Content-Range is ``value`` holds part of the
    ``length`` bytes asked from ``offset`` only (the object goes on past its
    end: the rest is asked for again). It must answer from the offset asked."""
    end, total = _content_range(value, url, offset)
    return end is not None and end < offset + length and (total is None or end < total)


def _content_range(value: str, url: str, offset: int) -> tuple[int | None, int | None]:
    """A 206 must answer from the offset asked. Returns where its bytes end
    (exclusive) and the object's size, each None where not said."""
    unit, _, spec = value.partition(" ")
    span, _, size = spec.partition("/")
    start, _, last = span.partition("-")
    if unit.strip().lower() != "bytes" or not start.isdigit() or int(start) != offset:
        raise HTTPStatusError(206, f"the answer starts elsewhere (Content-Range {value!r}, "
                                   f"asked from {offset})", url)  # fmt: skip
    end = int(last) + 1 if last.strip().isdigit() else None
    return end, (int(size) if size.strip().isdigit() else None)


def range_ignored(url: str, offset: int, length: int, got: int) -> RangeIgnoredError:
    return RangeIgnoredError(
        errno.EIO,
        f"asked for {length} bytes at offset {offset}, got {got}: the server "
        "ignores Range requests (reading whole objects per request would be wrong "
        "and slow; use a server that supports Range)",
        url,
    )
