"""Byte ranges of remote objects, for the reader.

A URL with a protocol (``http://``, ``s3://``, ``gs://``, ``memory://``, chained
``simplecache::s3://``) is found through fsspec; ``file://`` and plain paths
stay on the native engine. Plain HTTP ranges go through fastio's own client
(fastio.sources._http), on threads of their own. Other async filesystems run
their requests on fsspec's own event loop thread, many at once (the reader's
``outstanding_requests``); synchronous-only filesystems run on a thread pool of
that size. Filesystems are made per process (after a fork, anew), so
DataLoader workers never share a client with their parent.

Failures that may pass (timeouts, resets, dropped connections, 5xx and 429
answers) are retried with exponential backoff and jitter, bounded in attempts
and in time (tenacity); the final error names the URL, offset and length. A
server that ignores ``Range`` (answers with more bytes than asked) is an error,
never silently accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import threading
import time
from collections import deque
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from fastio._errors import (
    CacheUnavailableError,
    DownloadCancelled,
    HTTPStatusError,
    MovedOffClient,
    RangeIgnoredError,
    RemoteConnectionError,
    RemoteReadError,
    RemoteTimeoutError,
    ShardChangedError,
    TruncatedFileError,
)
from fastio._native import prefault
from fastio.sources._http import REDIRECT_LOOP, answer_size, range_ignored
from fastio.sources._imports import ready_request_imports
from fastio.sources._objects import (
    DOWNLOAD_FIRST_BYTES,
    RemoteFile,
    remote_piece_limit,
)
from fastio.spec._reader import MAX_OUTSTANDING_REQUESTS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from fastio.cache._cache import ShardCache
    from fastio.cache._files import Download
    from fastio.cache._filling import Filling
    from fastio.cache._prefetch import Prefetcher
    from fastio.sources._http import RangeClient
    from fastio.spec._reader import ReaderSettings

__all__ = ["Remotes", "read_object"]

log = logging.getLogger("fastio")

# The most an HTTP response buffers in aiohttp before the socket is paused.
_READ_BUFFER_LIMIT = 8 << 20
_CANCEL_POLL_SECONDS = 0.05  # how soon a running download notices its reader closed
_WARM_SECONDS = 5.0  # the longest a request thread started ahead waits for its siblings
_CONNECT_AHEAD_SECONDS = 2.0
# Questions about objects' sizes and versions asked at once, at least: each
# is a small request (a HEAD), and a dataset not indexed yet asks about every
# object it streams, ahead of its reads (500 objects over a 20 ms link, all
# asked before the first sample: 0.70 s with 16 at a time, 0.28-0.31 s with
# 64; 128 gained nothing more).
STAT_REQUESTS = 64
_WHOLE_OBJECT_SECONDS = 300.0  # as aiohttp's default for a whole request

_TRANSIENT_ERRNOS = frozenset(
    {errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED, errno.EPIPE, errno.ETIMEDOUT,
     errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EAGAIN}
)  # fmt: skip


def read_object(url: str, storage_options: dict[str, Any],
                settings: ReaderSettings | None = None) -> bytes | bytearray:  # fmt: skip
    """The whole object at ``url``, in one request (retried as ``settings``
    say: every rank of a large job asks for it at once, and a store may
    answer some of them 503): plain HTTP through fastio's client (fsspec is
    not imported), anything else through fsspec. Raises FileNotFoundError
    where there is none, PermissionError where it may not be read (an HTTP
    401 or 403)."""
    if settings is None:
        from fastio.spec._reader import ReaderSettings

        settings = ReaderSettings()
    try:
        return retried(lambda: _read_object(url, storage_options, settings.request_timeout),
                       settings)  # fmt: skip
    except Exception as error:  # aiohttp's answer errors are no OSError
        if _missing(error):
            raise FileNotFoundError(errno.ENOENT, "no such object", url) from error
        if denied(error):
            raise PermissionError(errno.EACCES, f"access denied ({error})", url) from error
        if caller_error(error):
            raise
        raise naming(error, url, "reading the whole object") from error


def _read_object(url: str, storage_options: dict[str, Any], first_byte: float
                 ) -> bytes | bytearray:  # fmt: skip
    """One request for the whole of ``url``: its answer begins within
    ``first_byte`` seconds (a server that never answers fails the request
    as a read's does), its body may take up to ``_WHOLE_OBJECT_SECONDS``."""
    from fastio.sources._http import RangeClient, plain_headers

    headers = plain_headers(storage_options) if url.startswith("http://") else None
    if headers is not None:
        client = RangeClient(headers)
        try:
            data = client.get(url, _WHOLE_OBJECT_SECONDS, first_byte)
        except MovedOffClient:
            data = None  # to https://, where fsspec follows
        finally:
            client.close()
        if data is not None:
            return data
    import fsspec  # and where the answer gave no length: fsspec reads such answers

    options = storage_options
    if url.startswith(("http://", "https://")):
        options = _answering_within(storage_options, first_byte)
    filesystem, path = fsspec.core.url_to_fs(url, **options)
    return bytes(filesystem.cat_file(path))


# Failures of store clients that are no OSError (botocore's), by name: the
# connection's, and a timeout's.
_CONNECTION_FAILURES = frozenset(("EndpointConnectionError", "ConnectionClosedError",
                                  "ProxyConnectionError", "ClientConnectionError",
                                  "ServerDisconnectedError", "ClientOSError"))  # fmt: skip
_TIMEOUTS = frozenset(("ConnectTimeoutError", "ReadTimeoutError", "ServerTimeoutError"))


def _asynchronous(fs: Any) -> bool:
    """Whether ``fs``'s reads are asked of fsspec's loop (its coroutines):
    not those of a cache of fsspec's, whose coroutines are those of the
    filesystem it copies (asked there, a read would pass the cache by)."""
    return bool(getattr(fs, "async_impl", False)) and not _caching(fs)


def _caching(fs: Any) -> bool:
    from fsspec.implementations.cached import CachingFileSystem

    return isinstance(fs, CachingFileSystem)


def _one_at_a_time(fs: Any) -> bool:
    """Whether ``fs`` takes one read at a time: fsspec's caches (see
    :meth:`Remotes._read_sync`) and archives (``zip::``, ``tar::``), whose
    members are read through one file of the archive, moved to each
    member's place in turn."""
    from fsspec.archive import AbstractArchiveFileSystem

    return _caching(fs) or isinstance(fs, AbstractArchiveFileSystem)


def _cached(fs: Any) -> Any:
    """The filesystem a cache of fsspec's (blockcache, filecache,
    simplecache) keeps copies of, which says what an object is: the cache's
    own ``info`` lists the object's folder, which an HTTP server need not
    answer."""
    return fs.fs if _caching(fs) else fs


def _remote_kind(error: BaseException) -> type[RemoteReadError]:
    """The :class:`~fastio.RemoteReadError` a remote failure is given up as:
    a timeout's and a failed connection's (built-ins, or a store client's
    own by name) also the built-ins."""
    names = {kind.__name__ for kind in type(error).__mro__}
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)) or names & _TIMEOUTS:
        return RemoteTimeoutError
    if isinstance(error, ConnectionError) or names & _CONNECTION_FAILURES:
        return RemoteConnectionError
    return RemoteReadError


def foreign_error(error: BaseException, url: str, doing: str) -> OSError:
    """A store client's failure that is no OSError (botocore's connection
    errors), as fastio's (see :func:`_remote_kind`), naming ``url``."""
    kind = _remote_kind(error)
    code = {RemoteTimeoutError: errno.ETIMEDOUT, RemoteConnectionError: errno.ECONNREFUSED}
    return kind(code.get(kind, errno.EIO), f"{doing}: {type(error).__name__}: {error}", url)


def naming(error: BaseException, url: str, doing: str) -> BaseException:
    """``error`` as one naming ``url``: itself where it names a file; a
    built-in OSError or fastio's of the same kind; a store client's own
    (botocore's, aiohttp's, whose OSErrors are made of other arguments)
    as fastio's (see :func:`foreign_error`)."""
    if not isinstance(error, OSError) or not _made_as_oserror(error):
        return foreign_error(error, url, doing)
    if error.filename is not None:
        return error
    # A connection's failure names no object: the error says which.
    reason = error.strerror or str(error)
    number = error.errno or (errno.ETIMEDOUT if isinstance(error, TimeoutError) else errno.EIO)
    return type(error)(number, f"{reason} ({doing})", url)


def caller_error(error: BaseException) -> bool:
    """Whether ``error`` is of the caller's making (a bad URL or option, an
    extra not installed), raised as it is: not a store's failure (an SSL
    error is a ValueError and an OSError)."""
    caller = isinstance(error, (TypeError, ValueError, ImportError))
    return caller and not isinstance(error, OSError)


def _made_as_oserror(error: OSError) -> bool:
    return type(error).__module__ == "builtins" or type(error).__module__.startswith("fastio.")


def _transient(error: BaseException) -> bool:
    if isinstance(error, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    status = getattr(error, "status", None) or getattr(error, "code", None)
    if isinstance(status, int) and (status >= 500 or status == 429):
        return True
    name = type(error).__name__
    # aiohttp's (fsspec's HTTP); s3fs retries botocore's failures itself.
    if name in ("ClientConnectionError", "ServerDisconnectedError", "ClientPayloadError",
                "ClientOSError", "ServerTimeoutError", "ContentLengthError"):  # fmt: skip
        return True
    if isinstance(error, FileNotFoundError | PermissionError | IsADirectoryError):
        return False
    return isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS


class Remotes:
    """The fsspec filesystems of one reader in one process."""

    def __init__(
        self,
        settings: ReaderSettings,
        storage_options: dict[str, Any],
        cache: ShardCache | None = None,
        expected: dict[str, tuple[int, int]] | None = None,
    ) -> None:
        self.settings = settings
        self.storage_options = storage_options
        self.cache = cache
        self._filesystems: dict[str, Any] = {}
        self._info: dict[str, RemoteFile] = {}
        # Size and ETag of the first answer to a read of each object: later
        # answers must name the same (see _confirmed_by).
        self._answered: dict[str, tuple[int, str]] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._prefetcher: Prefetcher | None = None
        self._downloads: list[threading.Thread] = []  # of shards read as they arrive
        self._refused = False  # whether the shard cache refused a copy (said once)
        self._http: RangeClient | None = None
        self._fsspec_http = False  # whether plain HTTP stays with fsspec (see _http_usable)
        self._http_pool: ThreadPoolExecutor | None = None
        self._warming: threading.Barrier | None = None
        # Each remote shard's (size, version) as its layout was made, where
        # known: a shard is checked against it when a read opens it.
        self.expected: dict[str, tuple[int, int]] = {} if expected is None else expected
        self._asking: _Asking | None = None  # stat_ahead's requests
        self._asked: dict[str, Future[RemoteFile]] = {}
        self._checks: dict[str, asyncio.Future[RemoteFile]] = {}  # see _confirming
        self._check_pool: ThreadPoolExecutor | None = None
        self._cache_reads = threading.Lock()  # reads through fsspec's caches, archives
        self._moved: set[str] = set()  # servers that redirect to https:// (see _moved_off)

    @property
    def bytes_arrived(self) -> int:
        """Bytes fastio's HTTP client has received into answers' bodies."""
        client = self._http
        return client.arrivals.value if client is not None else 0

    @property
    def answer_seconds(self) -> tuple[float, float]:
        """fastio's HTTP client's answer times: the quickest, and the median
        of the last few (see :class:`fastio.sources._http.AnswerTimes`)."""
        client = self._http
        return client.answers.now() if client is not None else (0.0, 0.0)

    @property
    def prefetcher(self) -> Prefetcher:
        """Background downloads of the shards the cache's plan needs next."""
        if self._prefetcher is None:
            from fastio.cache._prefetch import Prefetcher

            count = self.cache.prefetch_count if self.cache is not None else 0
            self._prefetcher = Prefetcher(self.cache, self.fetch_ahead, count)
        return self._prefetcher

    def filesystem(self, url: str) -> tuple[Any, str]:
        """(filesystem, path within it) for ``url``."""
        import fsspec

        protocol = url.split("://", 1)[0]
        member, _, archive = url.partition("::")
        # A member of an archive (zip://a.tar::s3://b/c.zip): a filesystem per archive.
        key = f"{protocol}::{archive}" if archive and "://" in member else protocol
        with self._lock:
            if key not in self._filesystems:
                self._filesystems[key] = fsspec.core.url_to_fs(url, **self.storage_options)[0]
            fs = self._filesystems[key]
        if key != protocol:
            return fs, fs._strip_protocol(member)
        return fs, fs._strip_protocol(url) if protocol not in ("http", "https") else url

    def stat(self, url: str, in_turn: bool = False) -> RemoteFile:
        """Size and version (ETag, else modification time) of ``url``, asked
        once per reader (or taken from :meth:`stat_ahead`'s answer: where its
        request has not started, the queue before it may be long, and it is
        asked here instead, unless ``in_turn``: the caller goes through the
        URLs in the order they were asked ahead). Raises FileNotFoundError
        or PermissionError (an HTTP 401 or 403 too) naming the URL, else
        OSError."""
        cached = self._info.get(url)
        if cached is not None:
            return cached
        # The question stays asked until answered: another lookup meanwhile
        # (a read opening the object) waits for the same answer.
        asked = self._asked.get(url)
        try:
            if asked is not None and (in_turn or not asked.cancel()):
                try:
                    remote = asked.result()
                except CancelledError:  # by close(), or by a lookup out of turn
                    remote = self._ask(url)
            else:
                remote = self._ask(url)
            self._info[url] = remote
        finally:
            if asked is not None and self._asked.get(url) is asked:
                self._asked.pop(url, None)
        return remote

    def stat_ahead(self, urls: Sequence[str]) -> None:
        """Ask for the size and version of ``urls`` in the background, in
        order (after those asked before), ``outstanding_requests`` at a
        time but at least ``STAT_REQUESTS``, for :meth:`stat` to find."""
        urls = [url for url in urls if url not in self._info and url not in self._asked]
        if not urls:
            return
        with self._lock:
            if self._asking is None:
                workers = min(max(self.settings.outstanding_requests, STAT_REQUESTS),
                              MAX_OUTSTANDING_REQUESTS)  # fmt: skip
                self._asking = _Asking(self._ask, workers)
        self._asked.update(self._asking.submit(urls))

    def unask(self, url: str) -> None:
        """Cancel :meth:`stat_ahead`'s question about ``url`` if it has not
        been sent (an answer that came is kept)."""
        asked = self._asked.get(url)
        if asked is not None and asked.cancel():
            del self._asked[url]

    def opened(self, url: str) -> RemoteFile:
        """:meth:`stat` of ``url`` as a read opens it: raises
        :class:`~fastio.ShardChangedError` where it is no longer the object
        its layout was made from (``expected``)."""
        remote = self.stat(url)
        expected = self.expected.get(url)
        if expected is not None and expected != remote.identity:
            raise ShardChangedError.of(url)
        return remote

    def opening(self, url: str) -> RemoteFile:
        """:meth:`opened`, without waiting for an answer about ``url`` where
        its layout says its size (``expected``): the reads of it then confirm
        it while their bytes come (see :meth:`read_into`). A read must not
        wait for that answer before its request goes: the loop that sends
        every request would wait with it, a round trip per object."""
        expected = self.expected.get(url)
        if expected is None or url in self._info:
            return self.opened(url)
        return RemoteFile(url, expected[0], "")

    def _ask(self, url: str) -> RemoteFile:
        if self._http_usable(url):  # its threads start while the size is asked
            size, version = self._head(url)
            if size is not None:
                return RemoteFile(url, size, version)
        fs, path = self.filesystem(url)  # fsspec asks again, and with a GET where HEAD fails
        fs = _cached(fs)
        try:
            info = fs.info(path, **_within(fs, self.settings.request_timeout))
        except Exception as error:  # aiohttp's answer errors are no OSError
            if caller_error(error):
                raise
            raise _stat_error(error, url) from None
        size = info.get("size")
        if size is None:
            raise OSError(errno.EIO, "the server gives no size for the object", url)
        version = str(info.get("ETag") or info.get("etag") or info.get("mtime")
                      or info.get("LastModified") or "")  # fmt: skip
        return RemoteFile(url, int(size), version)

    def _head(self, url: str) -> tuple[int | None, str]:
        """:meth:`RangeClient.head` of ``url``, retried as reads are; no size
        where the server refuses HEAD (a 405, or a 403 of a URL signed for
        GET alone): fsspec asks again, with a GET where HEAD fails."""
        http = self._http
        assert http is not None
        try:
            size, version = retried(lambda: http.head(url, self.settings.request_timeout),
                                    self.settings,
                                    lambda e: _transient(e) and not http.closed)  # fmt: skip
        except HTTPStatusError as error:
            if _missing(error) or error.status == REDIRECT_LOOP:
                raise _stat_error(error, url) from None
            return None, ""
        except MovedOffClient:
            self._moved_off(url)
            return None, ""  # fsspec asks, following the redirect
        except OSError as error:
            raise _stat_error(error, url) from None
        if size is None:  # an answer with no length (chunked, or encoded): a range says it
            size, version = self._first_byte_says(url, version)
        return size, version

    def _first_byte_says(self, url: str, version: str) -> tuple[int | None, str]:
        """The size (and ETag) the answer to a request of the first byte of
        ``url`` gives in its Content-Range, where HEAD's gave none; ``version``
        and no size where it does not say either."""
        http = self._http
        assert http is not None
        said: list[tuple[int | None, str]] = []
        try:
            http.get_into(url, 0, 1, memoryview(bytearray(1)), self.settings.request_timeout,
                          identity=lambda size, etag: said.append((size, etag)))  # fmt: skip
        except OSError:
            return None, version  # (an empty object's 416 too): fsspec asks again
        size, etag = said[0] if said else (None, "")
        return size, etag or version

    def local_copy(self, url: str) -> str | Filling:
        """The path of a verified local copy of ``url`` in the shard cache; on
        a miss, or while this process's prefetch of it runs, the download's
        :class:`Filling`, which reads what has arrived (the download runs on
        a thread of its own). The copy stays pinned until ``cache.release``.
        Another process's download is waited for, up to the cache's
        ``wait_timeout``. Raises CacheFullError at once when there is no room
        now (the reader's own pins may be what holds it), CacheTimeoutError
        when the wait runs out."""
        assert self.cache is not None
        self.prefetcher.kick()
        remote = self.opened(url)
        return self.cache.get_filling(url, remote.size, self._download, remote.version or None,
                                      checksum=self._checksum(url, remote),
                                      spawn=self._spawn)  # fmt: skip

    def refused(self, error: CacheUnavailableError) -> None:
        """Say, once, that the shard cache's folder refuses copies (removed
        for good, read-only): the shards are read from the store meanwhile."""
        if self._refused:
            log.debug("fastio: %s; reading it from the store", error)
            return
        self._refused = True
        log.warning("fastio: %s; shards are read from the store while it does", error)

    def _spawn(self, download: Callable[[], object]) -> None:
        def run() -> None:
            try:
                download()
            except DownloadCancelled:
                pass
            except CacheUnavailableError as error:
                self.refused(error)
            except Exception as error:  # the reads waiting on it fall back to remote reads
                log.info("fastio: download failed (%s); its reads go to the store", error)

        with self._lock:
            self._downloads = [thread for thread in self._downloads if thread.is_alive()]
            thread = threading.Thread(target=run, name="fastio-download", daemon=True)
            self._downloads.append(thread)
        thread.start()

    def settle(self) -> None:
        """Wait for the cache's downloads this process read whole as they
        arrived to be published (see ShardCache.settle)."""
        if self.cache is not None:
            self.cache.settle()

    def fetch_ahead(self, url: str) -> bool:
        """Download ``url`` into the cache ahead of its use (see ShardCache.fetch_ahead)."""
        assert self.cache is not None
        remote = self.stat(url)
        return self.cache.fetch_ahead(url, remote.size, self._download, remote.version or None,
                                      checksum=self._checksum(url, remote))  # fmt: skip

    @staticmethod
    def _checksum(url: str, remote: RemoteFile) -> str | None:
        from fastio.cache._files import etag_checksum

        # S3 ETags of single-part uploads are the MD5 of the object; other
        # stores' ETags (HTTP servers, GCS) only name a version.
        is_s3 = url.startswith(("s3://", "s3a://"))
        return etag_checksum(remote.version) if is_s3 and remote.version else None

    def _download(self, url: str, file: Download) -> None:
        """The whole object into ``file``, in ranged requests retried like reads,
        several in flight (``outstanding_requests`` shared by the prefetches)."""
        size = self.stat(url).size
        ranges = _growing_ranges(size, min(self.settings.read_size, DOWNLOAD_FIRST_BYTES),
                                 remote_piece_limit(self.settings.read_size))  # fmt: skip
        in_flight = max(1, self.settings.outstanding_requests // max(1, self.prefetcher.count))
        cancelled = threading.Event()  # ends fastio's HTTP requests still running
        submit: Callable[[int, int], Future[tuple[Any, OSError | None]]]
        written: Callable[[Any], None] | None = None
        if self._http_usable(url):
            assert self._http_pool is not None
            pool = self._http_pool
            # Each range is received into a buffer a range written before it
            # gave back: a fresh one cost a zeroing and a page fault per 4 KiB
            # (about a sixth of a cached epoch's CPU over a fast link).
            spare: deque[bytearray] = deque()

            def submit(offset: int, length: int) -> Future[tuple[Any, OSError | None]]:
                while spare and len(spare[0]) < length:
                    spare.popleft()  # a first range's, smaller than the rest
                # A spare's pages are in already: the kernel need not be asked again.
                into, faulted_in = (spare.popleft(), True) if spare else (bytearray(length), False)
                return pool.submit(self._get_range, url, offset, length, cancelled, into,
                                   faulted_in)  # fmt: skip

            def written(data: Any) -> None:
                spare.append(data.obj)

        else:
            fs, path = self.filesystem(url)
            if not _asynchronous(fs) or in_flight == 1:
                for offset, length in ranges:
                    if self.prefetcher.stopping.is_set():
                        raise DownloadCancelled(f"{url}: the reader closed during the download")
                    file.write(_whole(self._read_sync(fs, path, url, offset, length), url,
                                      offset, length))  # fmt: skip
                return
            from fsspec.asyn import get_loop

            async def ranged(offset: int, length: int) -> tuple[Any, OSError | None]:
                # Over HTTP each answer's size and ETag are held to the first's
                # (see _get_range); other stores' answers say none.
                if not _is_http(fs):
                    return await self._read_async(fs, path, url, offset, length)
                into = memoryview(bytearray(length))
                count, error = await self._read_async(fs, path, url, offset, length, into)
                return into[: int(count or 0)], error

            def submit(offset: int, length: int) -> Future[tuple[Any, OSError | None]]:
                return asyncio.run_coroutine_threadsafe(ranged(offset, length), get_loop())

        try:
            self._download_ranges(url, file, ranges, in_flight, submit, written)
        except MovedOffClient:  # at the first range, which goes alone: nothing written
            self._moved_off(url)
            self._download(url, file)
        finally:
            cancelled.set()

    def _download_ranges(
        self, url: str, file: Download, ranges: list[tuple[int, int]], in_flight: int,
        submit: Callable[[int, int], Future[tuple[Any, OSError | None]]],
        written: Callable[[Any], None] | None = None,
    ) -> None:  # fmt: skip
        """``in_flight`` of ``ranges`` requested at once (``submit(offset,
        length)`` starts one: its future gives the bytes and the error), written
        in order (``written(bytes)`` after each). The first goes alone: a
        reader following the download waits for it, and requests sent together
        reach the server in any order."""
        stopping = self.prefetcher.stopping
        pending: deque[tuple[int, int, Future[tuple[Any, OSError | None]]]] = deque()
        upcoming = iter(ranges)
        first = True
        try:
            while True:
                while len(pending) < (1 if first else in_flight) and not stopping.is_set():
                    offset, length = next(upcoming, (-1, 0))
                    if offset < 0:
                        break
                    pending.append((offset, length, submit(offset, length)))
                if not pending:
                    if stopping.is_set():
                        raise DownloadCancelled(f"{url}: the reader closed during the download")
                    break
                while True:  # a close must not wait out a slow request
                    try:
                        data, error = pending[0][2].result(timeout=_CANCEL_POLL_SECONDS)
                        break
                    except FutureTimeout:
                        if stopping.is_set():
                            closed = f"{url}: the reader closed during the download"
                            raise DownloadCancelled(closed) from None
                offset, length, _ = pending.popleft()
                if error is not None:
                    raise error
                file.write(_whole(data, url, offset, length))
                if written is not None:
                    written(data)
                first = False
        finally:
            for _, _, future in pending:
                future.cancel()

    def forget(self, url: str) -> None:
        """Drop what is known of ``url`` (after an error: it may have changed)."""
        self._info.pop(url, None)
        self._answered.pop(url, None)
        asked = self._asked.pop(url, None)
        if asked is not None:
            asked.cancel()  # an answer on its way is not kept

    async def read_into(self, url: str, offset: int, length: int, buffer: Any) -> int:
        """``length`` bytes of ``url`` from ``offset`` into ``buffer`` (writable,
        at least ``length`` long), retried as the settings say; returns how many
        arrived. Plain HTTP goes through fastio's own client (see
        fastio.sources._http): the body is received into ``buffer`` on a
        thread of its own, without the GIL; other HTTP(S) through aiohttp,
        copied from the socket's chunks into ``buffer``. Where ``url`` is
        not yet confirmed to be the object ``expected`` (see :meth:`opening`),
        the answer's headers confirm it (fastio's client), or else it is asked
        about (through fsspec, while the bytes come), and the read raises
        :class:`~fastio.ShardChangedError` rather than return where it is not."""
        own = self._http_usable(url)
        # fastio's client confirms it from the answer's headers, where they say.
        check = None if own else self._confirming(url)
        try:
            count = await self._read_into(url, offset, length, buffer, own)
        except MovedOffClient:
            self._moved_off(url)
            return await self.read_into(url, offset, length, buffer)
        if own:
            check = self._confirming(url)  # the answer did not say
        if check is not None:
            await asyncio.shield(check)  # shared by the reads of the object
        return count

    def answers_confirm(self, url: str) -> bool:
        """Whether the answers to reads of ``url`` say its size and ETag
        (fastio's HTTP client reads it), so that no other request need ask."""
        return self._http_usable(url)

    def _confirmed_by(self, url: str, size: int | None, etag: str) -> None:
        """Records ``url`` as confirmed where an answer's headers say the size
        and ETag ``expected``. Otherwise it is asked about after the read (see
        :meth:`read_into`), as where they say nothing: a server may tag the
        answer to a range otherwise than the object. Raises
        :class:`~fastio.ShardChangedError` where the answer names another
        size than the object had when it was opened, or another size or
        (strong) ETag than the first answer to a read of ``url`` did: the
        object was replaced (or cut) while it was being read, and its bytes
        would mix two objects (ETags compared with answers alone, as a server
        tags its answers to ranges alike)."""
        if size is not None:
            strong = "" if etag.startswith("W/") else etag  # a weak one may vary by answer
            opened = self._info.get(url)
            seen = self._answered.setdefault(url, (size if opened is None else opened.size,
                                                   strong))  # fmt: skip
            if size != seen[0] or (strong and seen[1] and strong != seen[1]):
                raise ShardChangedError(url, f"{url} changed while it was read (another size "
                                             "or ETag from one answer to the next)")  # fmt: skip
        expected = self.expected.get(url)
        if expected is None or url in self._info or size is None or not etag:
            return
        remote = RemoteFile(url, size, etag)
        if remote.identity == expected:
            self._info.setdefault(url, remote)

    def _confirming(self, url: str) -> asyncio.Future[RemoteFile] | None:
        """The question whether ``url`` is the object ``expected``, asked once
        on a thread of the check pool, for every read of it to wait for; None
        where it was answered or nothing is expected. Runs on the reader's loop."""
        expected = self.expected.get(url)
        known = self._info.get(url)
        # What is known of it may be another object: a check that found it
        # changed keeps its answer until the read that failed forgets it,
        # and a read whose bytes came meanwhile must fail too.
        if expected is None or (known is not None and known.identity == expected):
            return None
        check = self._checks.get(url)
        if check is None:
            if self._check_pool is None:
                self._check_pool = ThreadPoolExecutor(
                    min(self.settings.outstanding_requests, MAX_OUTSTANDING_REQUESTS),
                    thread_name_prefix="fastio-check")  # fmt: skip
            loop = asyncio.get_running_loop()
            check = self._checks[url] = loop.run_in_executor(self._check_pool, self.opened, url)
            check.add_done_callback(functools.partial(self._checked, url))
        return check

    def _checked(self, url: str, check: asyncio.Future[RemoteFile]) -> None:
        if self._checks.get(url) is check:
            del self._checks[url]
        if not check.cancelled():
            check.exception()  # taken: a read that failed first leaves it unawaited

    async def _read_into(self, url: str, offset: int, length: int, buffer: Any, own: bool
                         ) -> int:  # fmt: skip
        # The view keeps the buffer exported until the request ends, so a
        # read cancelled here never has its buffer reused while another
        # thread may still write into it (the pool holds exported buffers back).
        view = memoryview(buffer)[:length]
        if own:
            cancelled = threading.Event()
            assert self._http_pool is not None
            confirm = functools.partial(self._confirmed_by, url)
            future = self._http_pool.submit(self._get_into, url, offset, length, view, cancelled,
                                            confirm)  # fmt: skip
            try:
                count, error = await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                cancelled.set()  # the request ends at its next receive
                raise
        else:
            fs, path = self.filesystem(url)
            if not _is_http(fs):
                data = await self.read(url, offset, length)
                view[: len(data)] = data
                return len(data)
            from fsspec.asyn import get_loop

            future = asyncio.run_coroutine_threadsafe(
                self._read_async(fs, path, url, offset, length, view), get_loop()
            )
            count, error = await asyncio.wrap_future(future)
        if error is not None:
            raise error
        return int(count)

    def _moved_off(self, url: str) -> None:
        """Reads of ``url``'s server go through fsspec from now on: it
        redirects them to a URL fastio's client does not read (https://)."""
        with self._lock:
            self._moved.add(urlsplit(url).netloc)

    def _http_usable(self, url: str) -> bool:
        """Whether fastio's HTTP client serves ``url`` (plain HTTP, asking
        nothing of its requests the client does not do); makes the client and
        its threads (connected to ``url``'s server) on first use."""
        if not url.startswith("http://") or urlsplit(url).netloc in self._moved:
            return False
        if self._http is not None or self._fsspec_http:
            return self._http is not None
        from fastio.sources._http import RangeClient, plain_headers, usable

        headers = plain_headers(self.storage_options)
        if headers is None:  # options for fsspec: its filesystem says what they ask
            fs = self.filesystem(url)[0]
            if not usable(fs):
                self._fsspec_http = True  # decided once, not at every read
                return False
            headers = fs.kwargs.get("headers")
        with self._lock:
            if self._http is None:
                self._http_pool = ThreadPoolExecutor(MAX_OUTSTANDING_REQUESTS,
                                                     thread_name_prefix="fastio-http")  # fmt: skip
                self._http = RangeClient(headers)
                self._warm_http_threads(self._http_pool, self._http, url)
        return True

    def _warm_http_threads(self, pool: ThreadPoolExecutor, client: RangeClient, url: str
                           ) -> None:  # fmt: skip
        """Start, on a thread of its own, the request threads a window of
        reads keeps busy, each with a connection to ``url``'s server. The pool
        starts a thread per request that finds none idle, on the caller's
        thread (the reader's loop), which waits until it runs; and a request
        on a new connection waits a round trip to connect before it is sent.
        Started while the sizes are asked, they are ready when the reads
        come: the first request of a 20 ms link took 114 ms, not 135."""
        count = min(self.settings.outstanding_requests, MAX_OUTSTANDING_REQUESTS)
        barrier = self._warming = threading.Barrier(count)
        # A server slow to accept is left to the reads: close() waits for these.
        timeout = min(self.settings.request_timeout, _CONNECT_AHEAD_SECONDS)

        def meet() -> None:  # held until ``count`` threads run it: each is a thread of its own
            with contextlib.suppress(threading.BrokenBarrierError):
                client.connect_ahead(url, timeout)
                barrier.wait(timeout=_WARM_SECONDS)

        def start() -> None:
            with contextlib.suppress(RuntimeError):  # the pool shut down meanwhile
                for _ in range(count):
                    pool.submit(meet)

        threading.Thread(target=start, name="fastio-http-warm", daemon=True).start()

    def _get_range(
        self, url: str, offset: int, length: int, cancelled: threading.Event, into: bytearray,
        faulted_in: bool,
    ) -> tuple[memoryview, OSError | None]:  # fmt: skip
        """:meth:`_get_into` ``into`` (at least ``length`` bytes; ``faulted_in``:
        written before, so its pages are in): a view of the bytes that
        arrived, and the error."""
        data = memoryview(into)[:length]
        # Every answer names the object it is of: a download's ranges must
        # all be of one (an object replaced meanwhile would be cached as one
        # shard made of both), as a read's are (see _confirmed_by).
        count, error = self._get_into(url, offset, length, data, cancelled,
                                      functools.partial(self._confirmed_by, url),
                                      faulted_in=faulted_in)  # fmt: skip
        return data[:count], error

    def _get_into(
        self, url: str, offset: int, length: int, into: memoryview, cancelled: threading.Event,
        identity: Callable[[int | None, str], None] | None = None, faulted_in: bool = False,
    ) -> tuple[int, OSError | None]:  # fmt: skip
        """On a thread of the HTTP pool: one range into ``into``, retried as
        the settings say (``identity``: see :meth:`RangeClient.get_into`).
        Returns the count and the error rather than raising it, as
        ``_read_async`` does."""
        http = self._http
        assert http is not None
        # The reader maps remote buffers without faulting them in (its loop
        # would wait for tens of MiB to be zeroed before its next request):
        # this thread does it, in one call, while the request is on its way.
        if not faulted_in:
            prefault(into)
        attempts, timeout = 0, self.settings.request_timeout

        def attempt() -> int:
            nonlocal attempts
            attempts += 1
            return http.get_into(url, offset, length, into, timeout, cancelled, identity)

        try:
            count = retried(attempt, self.settings, lambda e: _transient(e)
                            and not cancelled.is_set() and not http.closed)  # fmt: skip
            return count, None
        except Exception as error:
            return 0, _final(error, url, offset, length, attempts)

    async def read(self, url: str, offset: int, length: int) -> bytes:
        """``length`` bytes of ``url`` from ``offset``, retried as the settings say."""
        fs, path = self.filesystem(url)
        if _asynchronous(fs):
            from fsspec.asyn import get_loop

            future = asyncio.run_coroutine_threadsafe(
                self._read_async(fs, path, url, offset, length), get_loop()
            )
            data, error = await asyncio.wrap_future(future)
            if error is not None:
                raise error
            return bytes(data)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.settings.outstanding_requests,
                                            thread_name_prefix="fastio-remote")  # fmt: skip
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._read_sync, fs, path, url, offset,
                                          length)  # fmt: skip

    async def _read_async(
        self, fs: Any, path: str, url: str, offset: int, length: int,
        into: memoryview | None = None,
    ) -> tuple[Any, OSError | None]:  # fmt: skip
        """Runs on fsspec's loop. Returns the data (with ``into``: the count
        of bytes written into it) and its error rather than raising it: a read
        whose consumer went away must not leave an unretrieved exception."""
        attempts = 0

        async def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            if into is not None:
                confirm = functools.partial(self._confirmed_by, url)
                return await asyncio.wait_for(
                    _http_read_into(fs, path, url, offset, length, into, confirm),
                    self.settings.request_timeout)  # fmt: skip
            known = self._info.get(url)
            if known is not None and known.version and _is_s3(fs):
                # Each range of the object asked of it as it was when asked
                # about: one replaced meanwhile answers 412, not another's bytes.
                return await asyncio.wait_for(
                    _s3_range(fs, path, url, offset, length, known.version),
                    self.settings.request_timeout)  # fmt: skip
            return await asyncio.wait_for(fs._cat_file(path, start=offset, end=offset + length),
                                          self.settings.request_timeout)  # fmt: skip

        try:
            result = await retried_async(attempt, self.settings)
            if into is not None:
                return result, None
            return _checked(result, url, offset, length), None
        except Exception as error:
            return b"", _final(error, url, offset, length, attempts)

    def _read_sync(self, fs: Any, path: str, url: str, offset: int, length: int) -> bytes:
        if not _one_at_a_time(fs):
            return self._read_sync_now(fs, path, url, offset, length)
        # fsspec's caches take one read at a time: simplecache and filecache
        # copy an object whole at its first read, under the name later reads
        # open (another read meanwhile would open the part copied so far as
        # the whole object), and each copy rewrites the notes of what is
        # copied that other reads look up; blockcache marks a block held
        # before its bytes come (another read of it would take zeros). So do
        # archives: a read moves the archive's one file to its member's place.
        with self._cache_reads:
            return self._read_sync_now(fs, path, url, offset, length)

    def _read_sync_now(self, fs: Any, path: str, url: str, offset: int, length: int) -> bytes:
        attempts = 0

        def attempt() -> bytes:
            nonlocal attempts
            attempts += 1
            data: bytes = fs.cat_file(path, start=offset, end=offset + length)
            return data

        try:
            data = retried(attempt, self.settings)
        except Exception as error:
            raise _final(error, url, offset, length, attempts) from None
        return _checked(data, url, offset, length)

    def stop_downloads(self) -> None:
        """Make running shard downloads end at once (safe from any thread)."""
        if self._prefetcher is not None:
            self._prefetcher.stopping.set()

    def close(self) -> None:
        self.stop_downloads()
        with self._lock:
            downloads, self._downloads = self._downloads, []
        for thread in downloads:  # they end at their next range
            thread.join()
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._asking is not None:
            self._asking.close()
            self._asking = None
        if self._check_pool is not None:
            self._check_pool.shutdown(wait=True, cancel_futures=True)
            self._check_pool = None
        if self._warming is not None:
            self._warming.abort()  # threads still starting return at once
        if self._http is not None:
            self._http.close()  # requests still in flight fail at once
        if self._http_pool is not None:
            self._http_pool.shutdown(wait=True, cancel_futures=True)
            self._http_pool = None


class _Asking:
    """Questions asked ahead (``ask`` of each URL), answered in order by up
    to ``workers`` threads of its own; each answer is a future. Many are
    asked at once: one call, with no thread woken per question (a thread
    pool's ``submit`` of each of 500, while its threads ran the first ones,
    took 0.2 s of the caller's time, waiting for the GIL)."""

    def __init__(self, ask: Callable[[str], RemoteFile], workers: int) -> None:
        self._ask = ask
        self._workers = workers
        self._queue: deque[tuple[str, Future[RemoteFile]]] = deque()
        self._running = 0
        self._starting = 0  # of _running: threads that have not taken a question yet
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, urls: Sequence[str]) -> dict[str, Future[RemoteFile]]:
        """Ask about ``urls`` after what is asked already."""
        asked: dict[str, Future[RemoteFile]] = {url: Future() for url in urls}
        with self._lock:
            if self._closed:
                return {}
            self._queue.extend(asked.items())
        self._spread()
        return asked

    def _spread(self) -> None:
        """Start one more thread while questions wait for one: each thread
        starts the next, so the caller waits for one thread to start, not
        for ``workers`` (about a millisecond each on a busy process)."""
        with self._lock:
            # Threads that took a question are busy with it: one more while
            # more questions wait than threads about to take one.
            if (self._closed or self._running >= self._workers
                    or len(self._queue) <= self._starting):  # fmt: skip
                return
            self._running += 1
            self._starting += 1
        # A request running at exit is left: daemon threads.
        threading.Thread(target=self._work, name="fastio-stat", daemon=True).start()

    def _work(self) -> None:
        self._spread()
        starting = True
        while True:
            with self._lock:
                if starting:
                    self._starting -= 1
                    starting = False
                if self._closed or not self._queue:
                    self._running -= 1
                    return
                url, future = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue  # cancelled: asked by its lookup itself
            try:
                future.set_result(self._ask(url))
            except Exception as error:
                future.set_exception(error)

    def close(self) -> None:
        """Cancel what has not started; a request running ends on its own."""
        with self._lock:
            self._closed = True
            queued, self._queue = self._queue, deque()
        for _, future in queued:
            future.cancel()


def _growing_ranges(size: int, first: int, step: int) -> list[tuple[int, int]]:
    """``(offset, length)`` covering ``size`` bytes: ``first`` long, then
    doubling up to ``step``."""
    ranges, offset, length = [], 0, max(1, min(first, step))
    while offset < size:
        ranges.append((offset, min(length, size - offset)))
        offset += length
        length = min(length * 2, step)
    return ranges


def _is_http(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's HTTP filesystem (aiohttp), whose bodies
    :func:`_http_read_into` reads itself."""
    return type(fs).__name__ == "HTTPFileSystem" and type(fs).__module__.startswith("fsspec.")


def _within(fs: Any, seconds: float) -> dict[str, Any]:
    """What ``fs.info`` is given to fail after ``seconds``, as a read's
    request does: otherwise the client's own bound applies (aiohttp waits
    five minutes for an answer that never comes). Where ``info`` is the
    blocking wrapper fsspec makes of an asynchronous filesystem's ``_info``
    (HTTP, S3, GCS), the wrapper takes ``timeout`` as its own bound; nothing
    for filesystems whose ``info`` is their own (which may not take it)."""
    import inspect

    wrapped = getattr(fs.info, "__wrapped__", None)
    return {"timeout": seconds} if inspect.iscoroutinefunction(wrapped) else {}


def _answering_within(storage_options: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``storage_options`` for fsspec's HTTP filesystem, its client told to
    give up on a connection, or an answer, that sends nothing for
    ``seconds``: a whole object may take minutes to arrive, an answer that
    never begins may not (aiohttp waits five). As they are where they set
    a timeout of their own."""
    client = dict(storage_options.get("client_kwargs") or {})
    if "timeout" in client:
        return storage_options
    import aiohttp

    client["timeout"] = aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)
    return {**storage_options, "client_kwargs": client}


async def _http_read_into(
    fs: Any, path: str, url: str, offset: int, length: int, into: memoryview,
    identity: Callable[[int | None, str], None],
) -> int:  # fmt: skip
    """``length`` bytes of ``url`` from ``offset`` into ``into`` through ``fs``'s
    aiohttp session (with its headers and request options, as
    ``fs._cat_file`` sends them); returns how many arrived (fewer only at the
    object's end). A server may answer part of a range (its Content-Range
    says which): the rest is asked for again, as fastio's own client does.
    ``identity`` is called with the object's size and ETag as each answer
    gives them, before its body."""
    got = 0
    while True:
        count, partial = await _http_read_part(fs, path, url, offset + got, length - got,
                                               into[got:], identity)  # fmt: skip
        got += count
        if not partial or count == 0 or got >= length:
            return got


async def _http_read_part(
    fs: Any, path: str, url: str, offset: int, length: int, into: memoryview,
    identity: Callable[[int | None, str], None],
) -> tuple[int, bool]:  # fmt: skip
    """One ranged GET of :func:`_http_read_into`, the body copied chunk by
    chunk into ``into`` as the socket delivers it: the count that arrived,
    and whether the answer held part of the range only (the object goes on
    past it). The session's read buffer grows to the request (aiohttp's
    64 KiB default pauses and resumes the socket several times per MiB)."""
    from fastio.sources._http import answers_part

    options = fs.kwargs.copy()
    headers = dict(options.pop("headers", None) or {})
    headers["Range"] = f"bytes={offset}-{offset + length - 1}"
    options.setdefault("read_bufsize", min(max(length, 1 << 16), _READ_BUFFER_LIMIT))
    session = await fs.set_session()
    async with session.get(fs.encode_url(path), headers=headers, **options) as response:
        fs._raise_not_found_for_status(response, url)
        announced = response.content_length
        if response.status == 200 and offset > 0:  # the object from its start
            raise range_ignored(url, offset, length, -1 if announced is None else announced)
        partial = response.status == 206 and answers_part(
            response.headers.get("content-range", ""), url, offset, length)  # fmt: skip
        identity(answer_size(response.headers), response.headers.get("etag", ""))
        if announced is not None and announced > length:
            raise range_ignored(url, offset, length, announced)
        content = response.content
        filled = 0
        while True:
            chunk, _ = await content.readchunk()
            if not chunk:
                return filled, partial
            end = filled + len(chunk)
            if end > length:
                raise range_ignored(url, offset, length, end)
            into[filled:end] = chunk
            filled = end


def _whole(data: Any, url: str, offset: int, length: int) -> Any:
    """A download's range ``data``, which must be all ``length`` bytes: the
    ranges end at the size the object was opened with, so an answer short
    of its range is of an object cut since (TruncatedFileError)."""
    if len(data) != length:
        raise TruncatedFileError(url, offset + len(data), offset + length)
    return data


def _is_s3(fs: Any) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return "s3" in protocols


async def _s3_range(fs: Any, path: str, url: str, offset: int, length: int, etag: str) -> bytes:
    """A range of an S3 object through s3fs (as ``fs._cat_file`` asks for it),
    on condition that the object still has ``etag``. Raises
    :class:`~fastio.ShardChangedError` where it does not."""
    bucket, key, version = fs.split_path(path)
    extra = {"VersionId": version} if version else {}
    try:
        response = await fs._call_s3(
            "get_object",
            Bucket=bucket,
            Key=key,
            IfMatch=etag,
            Range=f"bytes={offset}-{offset + length - 1}",
            **extra,
        )
    except Exception as error:
        if _precondition_failed(error):
            raise ShardChangedError(url, f"{url} changed while it was read (its ETag is no "
                                         f"longer {etag})") from None  # fmt: skip
        raise
    try:
        data: bytes = await response["Body"].read()
    finally:
        response["Body"].close()
    return data


def _precondition_failed(error: BaseException) -> bool:
    """Whether ``error`` (s3fs's translation of botocore's, or botocore's own)
    is S3's 412: the object's ETag is no longer the one asked for."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        response = getattr(cause, "response", None)
        if isinstance(response, dict):
            if response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                return True
            if response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412:
                return True
        if "pre-conditions you specified did not hold" in str(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _checked(data: bytes, url: str, offset: int, length: int) -> bytes:
    if len(data) > length:
        raise range_ignored(url, offset, length, len(data))
    return bytes(data)


def _http_status(error: BaseException) -> int | None:
    """The HTTP status of a failed request, in ``error`` or what caused it
    (fsspec's HTTP ``info`` turns every failure into FileNotFoundError)."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        status = getattr(cause, "status", None)
        if isinstance(status, int):
            return status
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def denied(error: BaseException) -> bool:
    return isinstance(error, PermissionError) or _http_status(error) in (401, 403)


def _missing(error: BaseException) -> bool:
    status = _http_status(error)
    return status in (404, 410) or (isinstance(error, FileNotFoundError) and status is None)


def _stat_error(error: BaseException, url: str) -> OSError:
    status = _http_status(error)
    if isinstance(error, HTTPStatusError):
        reason = f"HTTP {error.status} {error.reason}".rstrip()
    elif status:  # (aiohttp says 0 where no answer had one: its own text says more)
        reason = f"HTTP {status}"
    else:
        reason = str(error) or type(error).__name__
    if denied(error):
        return PermissionError(errno.EACCES, f"access denied ({reason})", url)
    if _missing(error):
        return FileNotFoundError(errno.ENOENT, "no such object", url)
    if isinstance(error, TimeoutError):  # fsspec's own says nothing
        return RemoteTimeoutError(errno.ETIMEDOUT, "cannot stat: no answer in time", url)
    number = getattr(error, "errno", None) or errno.EIO
    return _remote_kind(error)(number, f"cannot stat: {reason}", url)


_T = TypeVar("_T")


def retried(call: Callable[[], _T], settings: ReaderSettings,
            retry: Callable[[BaseException], bool] = _transient) -> _T:  # fmt: skip
    """``call()``, retried as ``settings`` say while it fails as ``retry``
    accepts; the last failure is raised. The first attempt needs no
    tenacity: nearly every request succeeds at once, and importing it (5 ms
    alone, 15-17 ms while a dataset's other threads start) held up a
    never-seen dataset's first requests."""
    started = time.monotonic()
    try:
        return call()
    except Exception as error:
        replay = _Replay(error)
    policy = _policy_after(replay, retry, started, settings)
    from tenacity import Retrying

    for attempt in Retrying(**policy):
        with attempt:
            replay.first()
            return call()
    raise AssertionError("unreachable: Retrying returns or raises")


async def retried_async(call: Callable[[], Awaitable[_T]], settings: ReaderSettings,
                        retry: Callable[[BaseException], bool] = _transient) -> _T:  # fmt: skip
    """:func:`retried` of a coroutine function, on the caller's loop."""
    started = time.monotonic()
    try:
        return await call()
    except Exception as error:
        replay = _Replay(error)
    policy = _policy_after(replay, retry, started, settings)
    from tenacity import AsyncRetrying

    async for attempt in AsyncRetrying(**policy):
        with attempt:
            replay.first()
            return await call()
    raise AssertionError("unreachable: AsyncRetrying returns or raises")


def _policy_after(replay: _Replay, retry: Callable[[BaseException], bool], started: float,
                  settings: ReaderSettings) -> dict[str, Any]:  # fmt: skip
    """Retries (tenacity's keywords) of a request whose first attempt, begun
    at ``started``, failed as ``replay`` holds; raises that failure where it
    is not to be retried. The retries replay it as their first attempt, so
    that tenacity counts and spaces the attempts as though it had made it.
    tenacity is imported here, under the lock a fork waits for."""
    error = replay.error
    assert error is not None
    if not retry(error) or not settings.retries:
        raise error
    ready_request_imports()
    from tenacity import (
        retry_if_exception,
        stop_after_attempt,
        stop_after_delay,
        wait_random_exponential,
    )

    spent = time.monotonic() - started
    return {
        "stop": stop_after_attempt(settings.retries + 1) | stop_after_delay(
            max(0.0, settings.retry_seconds - spent)),
        "wait": wait_random_exponential(multiplier=0.05, max=2.0),
        "retry": retry_if_exception(retry),
        "reraise": True,
    }  # fmt: skip


class _Replay:
    """The failure of a request's first attempt, made without tenacity:
    raised once more as the first attempt tenacity sees."""

    def __init__(self, error: Exception) -> None:
        self.error: Exception | None = error

    def first(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error


def _final(error: BaseException, url: str, offset: int, length: int, attempts: int) -> OSError:
    """The error a read of ``url`` gives up with: named by its URL and, as an
    ``offset`` attribute too, the offset it read from (where it was met: the
    skip policy's place of damage)."""
    final = _final_error(error, url, offset, length, attempts)
    if getattr(final, "offset", None) is None:
        final.offset = offset  # type: ignore[attr-defined]
    return final


def _final_error(error: BaseException, url: str, offset: int, length: int, attempts: int
                 ) -> OSError:  # fmt: skip
    where = f"reading {length} bytes at offset {offset}"
    if _missing(error):
        return FileNotFoundError(errno.ENOENT, f"no such object ({where})", url)
    if denied(error):
        return PermissionError(errno.EACCES, f"access denied ({where})", url)
    if isinstance(error, (RangeIgnoredError, ShardChangedError, MovedOffClient)):
        return error
    tried = f"; gave up after {attempts} attempts" if attempts > 1 else ""
    kind = ("timed out" if isinstance(error, (asyncio.TimeoutError, TimeoutError))
            else error.strerror if isinstance(error, OSError) and error.strerror
            else str(error))  # fmt: skip
    if isinstance(error, HTTPStatusError):  # its status kept, for callers that branch on it
        return HTTPStatusError(error.status, f"{error.reason} ({where}{tried})".lstrip(), url)
    code = error.errno if isinstance(error, OSError) and error.errno else errno.EIO
    return _remote_kind(error)(code, f"{kind or type(error).__name__} ({where}{tried})", url)
