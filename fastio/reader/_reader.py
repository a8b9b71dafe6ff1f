"""The asyncio reader.

Given shards (ordered byte-range lists over many files), a :class:`Reader` keeps
``outstanding_requests`` reads of at most ``read_size`` bytes in flight on the
native engine and yields every shard's bytes in order, as zero-copy chunks.

Scheduling is driven from two places on the event loop thread: the engine's
eventfd (a read completed) and the consumer asking for data. Both run
:meth:`Reader._pump`: reap completions, top reads up to the limits, repeat while
that makes progress. Reads of cached data complete inside the submit call, so
the loop keeps going without a round trip through the event loop.

Memory is bounded by ``memory_budget``: bytes of buffers in flight, completed but
not yet taken, taken by the consumer but not yet released (released when it
asks for the next data), and released but still viewed (a batch waiting in a
sync hand-off, a chunk a decoder holds on to). When the budget is full no new
read starts: backpressure from a slow consumer reaches storage. Remote reads
may fill up to ``remote_memory_budget`` if that is larger: each waits a
network round trip, so a link needs more bytes in flight than a disk.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import errno
import functools
import inspect
import itertools
import logging
import os
import stat
import threading
import time
import warnings
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, NoReturn

from fastio import _native
from fastio._errors import EngineFallbackWarning, ReaderClosedError
from fastio._native import resident_fraction
from fastio.reader._buffers import BufferPool, bucket_size
from fastio.reader._files import RESIDENT_ENOUGH, FileTable, FollowedFile, open_for_reading
from fastio.reader._ranges import ByteRange, Chunk, Shard, ShardLike, as_shard
from fastio.reader._requests import (
    LOCAL_FIRST_BYTES,
    REMOTE_START_BYTES,
    Request,
    climbs,
    is_remote_file,
    plan_requests,
)
from fastio.reader._stats import LATENCY_BUCKETS, ReaderStats, latency_bucket
from fastio.reader._sync import Handoff, LoopThread
from fastio.sources._imports import BACKGROUND_IMPORTS
from fastio.sources._objects import is_remote, local_path, remote_piece_limit
from fastio.spec._reader import MAX_OUTSTANDING_REQUESTS, ReaderSettings

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator, Sequence

    from fastio.cache._cache import ShardCache
    from fastio.sources._remote import Remotes

__all__ = ["Reader", "listed_stamps"]

log = logging.getLogger("fastio")

_EMPTY = memoryview(b"")
# Chunks handed over per batch (the sync hand-off moves batches, not chunks),
# and bytes: at most 1/_BATCH_SHARE of the memory budget (at least one
# piece). A consumer keeps the buffers of a whole batch until it asks for the
# next, and the hand-off holds a quarter of the budget: batches of all that
# was ready (up to the read-ahead window) left room for one batch in the
# hand-off and little read-ahead, and on cached data the consumer waited
# for the reader's next burst (a third of its time at 110 KB records,
# benchmarks/bench_tfrecord_cpu.py); smaller batches keep several between
# the two threads.
_BATCH_CHUNKS = 256
_BATCH_SHARE = 16
# Bytes a stream may have queued (in flight plus read ahead): READ_AHEAD_FACTOR
# times what outstanding_requests reads of read_size hold (of the stream's
# largest piece where that is larger: remote pieces grow past read_size), and at least
# READ_AHEAD_MIN_BYTES. Read-ahead hides storage latency that varies from read
# to read, but on cached data reads finish at once and an unbounded read-ahead
# cycles through the whole budget of cache-cold buffers; twice the reads in
# flight keeps buffers warm. The floor keeps small reads in batches worth
# handing from thread to thread (see benchmarks/bench_read.py).
READ_AHEAD_FACTOR = 2
READ_AHEAD_MIN_BYTES = 4 << 20
# Reads in flight of files the page cache holds (OpenFile.cached), at most.
# Such a read is a memory copy that runs as soon as it starts: more of them
# at once buy no speed, only a read-ahead window larger than the CPU's
# caches, so the consumer meets its data cache-cold and the copies contend
# for the same cores (110 KB records, 2 cores: 16 in flight gave 55k
# samples/s, 2 gave 81-87k; benchmarks/bench_datasets.py). The window of a
# stream reading such a file follows this limit, not outstanding_requests.
CACHED_REQUESTS = 2
# The smallest piece mapped with map_cached="auto" (where the stream asks):
# mapping a range and unmapping it takes two system calls and a page-table
# update, which a smaller copy out of the page cache does not outweigh
# (a cached 256 KiB: 17 us mapped, 10 us read into a warm buffer; 1 MiB:
# 50 us and 61 us; 4 MiB: 171 us and 416 us). Each mapping is also an entry
# of the process's address space, of which Linux allows 65,530.
MAPPED_PIECE_BYTES = 512 << 10
_MAX_QUEUED_PIECES = 4096
# Pieces a local stream starts before its first batch is out: the rest of its
# read-ahead follows the hand-off. Planning a piece of a new shard opens it
# (and the plan opens the next shard ahead: 100-200 us each with small
# shards), so the first sample of 2,000 small shards waited for 16 of them
# (3.6 ms) when the first fill went on while buffers were free.
_FIRST_PIECES = 1
# Reads a pump for a waiting consumer starts before it looks whether the
# consumer's next piece is in (see Reader._pump).
_WAITED_READS = 2
# Share of the memory budget that the sync hand-off may hold.
_HANDOFF_SHARE = 4


# Readers running a background loop: closed at exit, before daemon threads stop.
_with_background_loops: weakref.WeakSet[Reader] = weakref.WeakSet()


@atexit.register
def _close_background_readers() -> None:
    for reader in list(_with_background_loops):
        reader.close()


def _remotes_of(reader_ref: weakref.ref[Reader]) -> Remotes:
    reader = reader_ref()
    assert reader is not None  # a file table is used by its own reader only
    return reader._remotes


def _pump_weakly(reader_ref: weakref.ref[Reader]) -> None:
    reader = reader_ref()
    if reader is not None:
        reader._pump()


class _Stream:
    """One pass over a list of shards: planned pieces in delivery order."""

    __slots__ = ("closed", "count_wait", "delivered", "exhausted", "first_pieces", "handoff",
                 "largest", "lookahead", "map_least", "plan", "queue", "queued_bytes", "started",
                 "waiter", "warm")  # fmt: skip

    def __init__(self, count_wait: bool) -> None:
        self.plan: Iterator[Request] = iter(())
        self.queue: deque[Request] = deque()  # submitted or finished, in delivery order
        self.queued_bytes = 0  # buffer bytes of the pieces in `queue`
        self.largest = 0  # buffer bytes of the largest piece read so far
        self.lookahead: Request | None = None  # planned, waiting for budget or a slot
        self.delivered: list[Request] = []  # taken by the consumer, released on its next ask
        self.waiter: asyncio.Future[None] | None = None
        self.exhausted = False
        self.closed = False
        self.count_wait = count_wait
        # Pieces of at least this many bytes that the page cache holds are
        # mapped, not read; None: none is.
        self.map_least: int | None = None
        self.started = False  # whether the consumer has had a batch yet
        self.warm = False  # whether its first remote pieces (REMOTE_START_BYTES) are in
        self.first_pieces: list[Request] | None = None  # those pieces, while they come
        # The hand-off of a sync stream, whose consumer may stop taking batches
        # (told from the consumer's thread): it then starts no more reads,
        # though its closing waits for the loop.
        self.handoff: Handoff | None = None

    @property
    def abandoned(self) -> bool:
        return self.handoff is not None and self.handoff.abandoned

    def next_piece(self) -> Request | None:
        if self.lookahead is None and not self.exhausted:
            try:
                self.lookahead = next(self.plan)
            except StopIteration:
                self.exhausted = True
            except Exception as error:  # bad shard input: delivered in order like any failure
                self.exhausted = True
                self.lookahead = Request.failed(self, "<plan>", error)
        return self.lookahead


class Reader:
    """Reads shards of byte ranges with many reads in flight, in order.

    ``Reader(settings, **knobs)``: knobs are :class:`ReaderSettings` fields and
    override ``settings``. Use ``async for chunk in reader.astream(shards)`` in
    async code and ``for chunk in reader.stream(shards)`` elsewhere (a loop on a
    background thread serves it). Errors come in order: every chunk before a
    failing range is delivered, then its OSError (naming path and offset) is
    raised and that stream ends; the reader stays usable for new streams.

    Close with :meth:`close` (or ``with``/``async with``): it cancels what has
    not started, waits for running reads, and releases every descriptor,
    buffer and thread. A reader made before ``fork`` starts afresh in the child;
    pickling keeps only its settings.
    """

    def __init__(
        self,
        settings: ReaderSettings | None = None,
        /,
        *,
        storage_options: dict[str, Any] | None = None,
        cache: ShardCache | None = None,
        **knobs: Any,
    ) -> None:
        base = settings if settings is not None else ReaderSettings()
        self._settings = base.replace(**knobs) if knobs else base
        self._storage_options = dict(storage_options or {})
        self._cache = cache
        self._share = 1.0
        self._request_limit = self._settings.outstanding_requests
        self._closed = False
        # What each remote object must still be when a read opens it (see
        # expect): kept across a fork, for the child's reads too.
        self._expected: dict[str, tuple[int, int]] = {}
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        settings = self._settings
        self._pid = os.getpid()
        self._engine: _native.Engine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # this process's: a parent's thread may have held it
        self._background: LoopThread | None = None
        self._loop_starter: threading.Thread | None = None  # see stat_ahead
        self._made_remotes: Remotes | None = None  # made at the first remote URL: see _remotes
        self._remotes_lock = threading.Lock()
        inherited = getattr(self, "_files", None)  # a forked child's keeps the parent's choice
        # Through a weak reference: the table is the reader's, and a cycle
        # would keep a dropped reader (and its descriptors) until a collection.
        self._files = FileTable(settings.max_idle_files,
                                functools.partial(_remotes_of, weakref.ref(self)))  # fmt: skip
        if inherited is not None:
            self._files.take_choices(inherited)
        self._remote_tasks: set[asyncio.Task[None]] = set()
        self._remote_done: list[tuple[int, int | BaseException]] = []
        self._mapped_done: list[tuple[int, int]] = []  # ranges mapped: done as they start
        self._pool = BufferPool(limit=settings.memory_budget)
        self._inflight: dict[int, Request] = {}
        self._inflight_peak = 0
        self._cached_inflight = 0  # of _inflight: reads of cached files (OpenFile.cached)
        self._streams: list[_Stream] = []
        self._handoffs: set[Handoff] = set()  # of running sync streams
        self._next_tag = 0
        self._held = 0  # bytes of buffers counted against the budget
        self._consumer_window = 0
        self._failure: BaseException | None = None  # engine failure: ends every stream
        self._started = time.perf_counter()
        self._throttled_since: float | None = None
        self._backpressure_seconds = 0.0
        self._wait_seconds = 0.0
        self._bytes_read = 0
        self._bytes_delivered = 0
        self._requests = 0
        self._chunks_delivered = 0
        # Stream heads read on the consumer's thread (see stream): counted apart,
        # since the loop thread updates the counters above without a lock.
        self._head_bytes = 0
        self._head_reads = 0
        self._head_latency = [0] * LATENCY_BUCKETS
        self._errors = 0
        self._latency = [0] * LATENCY_BUCKETS

    # ---- knobs -----------------------------------------------------------------

    @property
    def _remotes(self) -> Remotes:
        """This process's remote clients (fsspec's and fastio's HTTP), made at
        the first remote URL: a reader of local files never loads them."""
        remotes = self._made_remotes
        if remotes is None:
            from fastio.sources._remote import Remotes

            with self._remotes_lock:  # the loop thread and the caller's may both ask first
                remotes = self._made_remotes
                if remotes is None:
                    remotes = Remotes(self._settings, self._storage_options, self._cache,
                                      self._expected)  # fmt: skip
                    self._made_remotes = remotes
        return remotes

    @property
    def settings(self) -> ReaderSettings:
        """The knobs in force now."""
        return self._settings

    @property
    def outstanding_requests(self) -> int:
        """The base number of reads in flight (the user's setting, or the tuner's)."""
        return self._settings.outstanding_requests

    @outstanding_requests.setter
    def outstanding_requests(self, value: int) -> None:
        self._settings = self._settings.replace(outstanding_requests=value)
        self._request_limit = _limit(self._settings.outstanding_requests, self._share)
        self._kick()

    @property
    def share(self) -> float:
        """This reader's share of its node's reads in flight, as a multiple of
        its even share (the fairness monitor's decision; 1.0 unless it moves
        requests toward a starved worker)."""
        return self._share

    @share.setter
    def share(self, value: float) -> None:
        if not value > 0:
            raise ValueError(f"share must be positive, not {value!r}")
        self._share = float(value)
        self._request_limit = _limit(self._settings.outstanding_requests, self._share)
        self._kick()

    @property
    def request_limit(self) -> int:
        """Reads kept in flight now: the base times the share, rounded down (so
        that the shares of a node's workers never add up to more than their
        bases), at least one."""
        return self._request_limit

    @property
    def remote_memory_budget(self) -> int:
        """Bytes remote reads may hold (see ReaderSettings); may change while
        the reader runs (a DataLoader worker takes its share)."""
        return self._settings.remote_memory_budget

    @remote_memory_budget.setter
    def remote_memory_budget(self, value: int) -> None:
        self._settings = self._settings.replace(remote_memory_budget=value)
        self._kick()

    @property
    def consumer_holds(self) -> int:
        """Bytes of chunk views the consumer may keep past the next chunk (a
        shuffle window of record batches decoded in place): the buffers under
        them are reused once it lets go, rather than replaced by fresh ones."""
        return self._pool.held

    @consumer_holds.setter
    def consumer_holds(self, value: int) -> None:
        self._pool.held = value

    @property
    def consumer_window(self) -> int:
        """Bytes of chunk views the consumer holds as its window of samples not
        yet delivered (a shuffle buffer of samples gathered when their batch
        is made): memory of its own budget, so up to this many bytes of lent
        buffers do not count against ``memory_budget``, and reads go on ahead
        while the window is delivered."""
        return self._consumer_window

    @consumer_window.setter
    def consumer_window(self, value: int) -> None:
        self._consumer_window = value
        self._pool.raise_limit(self._settings.memory_budget + value)
        self._kick()

    @property
    def data_bytes(self) -> int | None:
        """The bytes of the local files this reader serves (a Dataset gives its
        shards'), where known: with ``direct="auto"``, cold files are read
        through the page cache where they fit in it with room to spare (see
        :attr:`cold_through_cache`)."""
        return self._files.data_bytes

    @data_bytes.setter
    def data_bytes(self, value: int | None) -> None:
        self._files.data_bytes = value

    @property
    def cold_through_cache(self) -> bool:
        """With ``direct="auto"``: whether a file the page cache does not hold
        is read through it anyway, not with O_DIRECT, so that it is there at
        the next read: where :attr:`data_bytes` fit in the page cache (see
        :func:`~fastio.reader._files.fits_in_page_cache`, asked when a cold
        file is first opened), or as set. Off without ``data_bytes``: cold
        files are read with O_DIRECT."""
        return self._files.cold_through_cache

    @cold_through_cache.setter
    def cold_through_cache(self, value: bool) -> None:
        self._files.cold_through_cache = value

    @property
    def read_size(self) -> int:
        return self._settings.read_size

    @read_size.setter
    def read_size(self, value: int) -> None:
        self._settings = self._settings.replace(read_size=value)

    def piece_limit(self, url: str) -> int:
        """The most bytes one read of ``url`` takes: ``read_size``, or for a
        remote object a full request (see
        :func:`~fastio.sources._objects.remote_piece_limit`), which is what a
        layout's ranges are cut to."""
        read_size = self._settings.read_size
        return remote_piece_limit(read_size) if is_remote(url) else read_size

    def stat_ahead(self, urls: Iterable[str]) -> None:
        """Ask for the size and version of the remote objects of ``urls`` in
        the background, in order, many at a time (see ``Remotes.stat_ahead``): a
        later lookup or read of one takes its answer (asks itself where the
        request has not started yet). Starts the reader's loop meanwhile, on
        a thread of its own: in a fresh process that takes tens of ms
        (importing uvloop, starting a thread), which the caller spends asking
        for the dataset's index."""
        self._check_usable()
        remote = [url for url in urls if is_remote(url)]
        if remote:
            self._remotes.stat_ahead(remote)
            self._start_loop_soon()

    def _start_loop_soon(self) -> None:
        """Start the background loop on a thread of its own, unless it runs
        or is starting: the caller goes on meanwhile."""
        with self._lock:
            if self._background is None and self._loop_starter is None:
                starter = threading.Thread(target=self._start_loop, daemon=True,
                                           name="fastio-loop-start")  # fmt: skip
                self._loop_starter = starter
                starter.start()

    def _start_loop(self) -> None:
        # Importing uvloop on this thread: a fork waits (see fastio.sources._imports).
        with BACKGROUND_IMPORTS:
            self._loop_thread()

    def unask(self, urls: Iterable[str]) -> None:
        """Cancel :meth:`stat_ahead`'s questions about ``urls`` not sent yet."""
        self._check_usable()
        remotes = self._made_remotes
        if remotes is None:  # nothing asked yet
            return
        for url in urls:
            remotes.unask(url)

    def expect(self, stamps: dict[str, tuple[int, int]]) -> None:
        """Remote objects' ``(size, version)`` (as :meth:`describe` answers) as
        a layout of each was made: a read that finds one otherwise when it
        opens it fails with :class:`~fastio.ShardChangedError`, before any of
        its bytes are used. Kept in a forked child."""
        self._expected.update(stamps)

    def _loop_thread(self) -> LoopThread:
        """The background loop that serves :meth:`stream`, started on first use."""
        with self._lock:
            if self._background is None:
                self._background = LoopThread()
                _with_background_loops.add(self)
            return self._background

    @property
    def cache(self) -> ShardCache | None:
        """The shard cache remote objects are read through, if any."""
        return self._cache

    def describe(self, url: str) -> tuple[int, int]:
        """``(size, version)`` of a local file or remote object: the version is
        the modification time in ns, or a number derived from the ETag, so that
        a changed object is told from the one an index was built from."""
        self._check_usable()
        if is_remote(url):
            remote = self._remotes.stat(url)
            return remote.identity
        status = os.stat(local_path(url))
        return status.st_size, status.st_mtime_ns

    def read_ranges(self, ranges: Sequence[ByteRange]) -> list[bytes]:
        """The bytes of each of ``ranges`` (each with a length), for small
        reads whose latency is what counts, as the footers and headers read
        to lay shards out. The ranges of local files whose pages the page
        cache holds (most of them: see :func:`_read_cached`) are read right
        here, all in one native call, a few microseconds each where a trip
        through the reader's loop takes tens of them; the others go through
        one :meth:`stream` together. Raises what that stream raises
        (:class:`~fastio.TruncatedFileError` for a range past a file's end,
        the OSError of a file that cannot be read); ValueError for a range
        without a length."""
        self._check_usable()
        if any(piece.length is None for piece in ranges):
            raise ValueError("read_ranges reads ranges with a length")
        got: list[bytes | None] = [None] * len(ranges)
        names = {path: os.fsencode(local_path(path))
                 for path in {piece.path for piece in ranges} if not is_remote(path)}  # fmt: skip
        # Empty ranges go through the stream too, which checks the file is there.
        local = [index for index, piece in enumerate(ranges)
                 if piece.path in names and piece.length]  # fmt: skip
        if local:
            found = _native.read_resident(
                [names[ranges[index].path] for index in local],
                [ranges[index].offset for index in local],
                [ranges[index].length or 0 for index in local],  # each has one (above)
                RESIDENT_ENOUGH,
            )
            for index, data in zip(local, found, strict=True):
                got[index] = data
        missing = [index for index, data in enumerate(got) if data is None]
        if missing:
            parts: dict[int, list[bytes]] = {}
            for chunk in self.stream([Shard((ranges[i],)) for i in missing]):
                parts.setdefault(chunk.shard, []).append(bytes(chunk.data))
            for shard, index in enumerate(missing):
                got[index] = b"".join(parts.get(shard, ()))
        return [data if data is not None else b"" for data in got]

    def stamp(self, url: str) -> tuple[int, int, int]:
        """:meth:`describe` and :meth:`change_stamp` together (one ``stat`` of
        a local file): ``(size, version, change stamp)``."""
        self._check_usable()
        if is_remote(url):
            remote = self._remotes.stat(url)
            return (*remote.identity, 0)
        status = os.stat(local_path(url))
        return status.st_size, status.st_mtime_ns, _change_stamp(status)

    def stamps(self, urls: Sequence[str]) -> list[tuple[int, int, int] | OSError]:
        """:meth:`stamp` of each of ``urls``, or the OSError it would raise:
        local files in one native call (a dataset checks thousands of shards
        against its index before its first sample)."""
        self._check_usable()
        far = list(map(is_remote, urls))
        paths = [url for url, remote in zip(urls, far, strict=True) if not remote]
        local = listed_stamps(self.local_stamps(paths), paths)
        if not any(far):
            return local
        found: list[tuple[int, int, int] | OSError] = []
        in_order = iter(local)
        for url, remote in zip(urls, far, strict=True):
            if not remote:
                found.append(next(in_order))
                continue
            try:
                answer = self._remotes.stat(url, in_turn=True)  # asked ahead in this order
                found.append((*answer.identity, 0))
            except OSError as error:
                found.append(error)
        return found

    def local_stamps(self, urls: list[str]) -> tuple[bytes, bytes]:
        """:meth:`stamps` of ``urls``, every one local, as two buffers (no
        object a shard, for a dataset of thousands): each file's ``(size,
        version, change)``, three native int64 (zeros where its stat failed),
        and the errno of each, a native int32 (0 where it was statted)."""
        self._check_usable()
        return local_stamps(urls)

    def change_stamp(self, url: str) -> int:
        """A local file's inode change stamp: its inode and status-change time,
        which every rewrite moves (``cp -p`` and ``rsync -t`` keep the
        modification time, not this); 0 for a remote object."""
        self._check_usable()
        if is_remote(url):
            return 0
        return _change_stamp(os.stat(local_path(url)))

    def confirm_ahead(self, urls: Iterable[str], anew: bool) -> None:
        """Have the remote objects of ``urls`` (in the order a pass reads
        them) confirmed to be what :meth:`expect` says, ahead of their reads:
        asked about in the background (see :meth:`stat_ahead`), except those
        read by fastio's HTTP client, whose answers to the reads say it.
        ``anew``: forget what was known of them first, so that reads and
        :meth:`describe` see an object replaced since."""
        self._check_usable()
        remote = [url for url in urls if is_remote(url)]
        if anew:
            for url in remote:
                self._remotes.forget(url)
        self.stat_ahead([url for url in remote if not self._remotes.answers_confirm(url)])

    @property
    def engine_kind(self) -> str:
        """``io_uring`` or ``threads``: the engine serving reads (started if needed)."""
        return self._get_engine().kind

    @property
    def closed(self) -> bool:
        return self._closed

    def _kick(self) -> None:
        """Let a loop that may be idle start reads a knob change now allows."""
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._pump)

    # ---- lifecycle ---------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise ReaderClosedError("I/O operation on a closed reader")
        if os.getpid() != self._pid:
            self._after_fork()

    def _after_fork(self) -> None:
        # Inherited descriptors are this process's copies: close them. The
        # engine's ring and threads belong to the parent: drop them untouched
        # (the binding frees only memory in a child).
        self._files.close_all(unpin=False)
        self._reset_process_state()

    def _get_engine(self) -> _native.Engine:
        self._check_usable()
        if self._engine is None:
            engine = _native.Engine(self._settings.engine, MAX_OUTSTANDING_REQUESTS)
            if engine.fallback_errno:
                code = errno.errorcode.get(engine.fallback_errno, str(engine.fallback_errno))
                warnings.warn(
                    EngineFallbackWarning(
                        f"io_uring is unavailable ({code}: {os.strerror(engine.fallback_errno)}); "
                        "reading with the pread thread pool"
                    ),
                    stacklevel=4,
                )
            self._engine = engine
        return self._engine

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        engine = self._get_engine()
        if self._loop is loop:
            return
        if self._loop is not None:
            if self._streams:
                raise RuntimeError("this reader is streaming on another event loop")
            self._unbind()
        # A weak reference, so that a forgotten reader can still be collected and closed.
        loop.add_reader(engine.fileno(), _pump_weakly, weakref.ref(self))
        self._loop = loop

    def _unbind(self) -> None:
        """Detach from the loop, first finishing reads still in flight."""
        engine, loop = self._engine, self._loop
        if engine is None or loop is None:
            return
        self._cancel_remote()
        while engine.inflight:
            engine.wait(0.1)
            self._reap()
        with contextlib.suppress(RuntimeError, ValueError):  # a closed loop: nothing to remove
            loop.remove_reader(engine.fileno())
        self._loop = None

    def close(self) -> None:
        """Stop every stream, wait for running reads, release fds, buffers and threads."""
        if self._closed:
            return
        if os.getpid() != self._pid:
            self._after_fork()
        if self._loop_starter is not None:
            self._loop_starter.join()  # the loop it starts is closed with the rest
        background = self._background
        if background is not None and background.on_loop_thread():
            # On the loop's own thread, this runs inside whatever the loop was
            # doing (the garbage collector closing an abandoned stream's
            # reader in the middle of a reap or a fill, say): the shutdown
            # runs once that is done.
            self._close_soon()
            return
        # First, from this thread: the loop thread may be waiting for a shard's
        # download, which must end before that thread can run the shutdown.
        if self._made_remotes is not None:
            self._made_remotes.stop_downloads()
        if background is not None and not background.loop.is_closed():
            background.call(self._shutdown)
            background.stop()
        else:
            self._shutdown()

    async def aclose(self) -> None:
        self.close()

    def _shutdown(self) -> None:
        self._closed = True
        error = ReaderClosedError("the reader was closed while this stream was running")
        for handoff in list(self._handoffs):  # a collected stream may discard its own meanwhile
            handoff.finish(error, discard=True)
        self._handoffs.clear()
        for stream in self._streams:
            if stream.waiter is not None and not stream.waiter.done():
                stream.waiter.set_exception(error)
        self._streams.clear()
        self._cancel_remote()
        if self._made_remotes is not None:
            self._made_remotes.close()
        engine, loop = self._engine, self._loop
        if engine is not None:
            if loop is not None and not loop.is_closed():
                loop.remove_reader(engine.fileno())
            engine.close()  # waits for running reads and releases their buffers
        self._loop = None
        self._engine = None
        self._inflight.clear()
        self._mapped_done.clear()
        self._cached_inflight = 0
        self._files.close_all()
        self._pool.clear()
        self._held = 0

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self._settings, "storage_options": self._storage_options,
                "cache": self._cache}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["settings"],
            storage_options=state.get("storage_options"),
            cache=state.get("cache"),
        )

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and getattr(self, "_pid", None) == os.getpid():
            # An abandoned reader still owns threads and descriptors. The
            # collector runs this on whichever thread it happens to run on,
            # holding whatever that thread holds (a thread pool's lock, while
            # it starts a worker, which this reader's shutdown needs to stop
            # its own pools): so nothing here waits for the loop thread.
            with contextlib.suppress(Exception):
                self._close_soon()

    def _close_soon(self) -> None:
        """What :meth:`close` does, without waiting: the shutdown is queued
        on the loop thread, which then stops."""
        if self._made_remotes is not None:
            self._made_remotes.stop_downloads()
        background = self._background
        if background is None or not background.loop.is_running():
            self._shutdown()  # no loop thread runs that could touch it meanwhile
            return
        loop = background.loop

        def shutdown_and_stop() -> None:
            try:
                self._shutdown()
            finally:
                loop.stop()

        loop.call_soon_threadsafe(shutdown_and_stop)

    def __repr__(self) -> str:
        s = self._settings
        state = "closed" if self._closed else f"inflight={len(self._inflight)}"
        return (
            f"<Reader engine={s.engine} outstanding_requests={s.outstanding_requests} "
            f"read_size={s.read_size} direct={s.direct} {state}>"
        )

    # ---- streaming -----------------------------------------------------------------

    async def astream(self, shards: Iterable[ShardLike], *, mapped: bool = False
                      ) -> AsyncIterator[Chunk]:  # fmt: skip
        """Every shard's bytes in order, as chunks. Shards are
        :class:`~fastio.Shard`, paths (whole files), or lists of
        :class:`~fastio.ByteRange`. Raises the OSError of a failing range
        after delivering every chunk before it. With ``map_cached="auto"``,
        ``mapped`` says whether ranges the page cache holds are mapped
        rather than read (read-only chunks; see ``ReaderSettings``)."""
        self._check_usable()
        self._bind(asyncio.get_running_loop())
        stream = self._open_stream(shards, count_wait=True, mapped=mapped)
        try:
            while batch := await self._next_batch(stream):
                for chunk in batch:
                    yield chunk
                # Drop our references before the next call releases the buffers,
                # so they go straight back to the pool instead of being "lent".
                batch = chunk = None  # type: ignore[assignment]
        finally:
            self._close_stream(stream)

    def _count_head(self, head: _Head) -> None:
        """Count a stream's bytes read on the consumer's thread as a read."""
        assert head.chunk is not None
        with self._lock:
            self._head_bytes += len(head.chunk.data)
            self._head_reads += 1
            self._head_latency[latency_bucket(head.nanoseconds)] += 1

    def stream(self, shards: Iterable[ShardLike], *, mapped: bool = False) -> Iterator[Chunk]:
        """Like :meth:`astream`, for synchronous callers: the reader runs on a
        background event loop and hands over chunks in batches. A share of the
        memory budget is set aside for the batches waiting in the hand-off."""
        self._check_usable()
        direct, read_size = self._settings.direct, self._settings.read_size
        # Mapped where the stream maps what the page cache holds at all: the
        # head's bytes would otherwise go into fresh memory, each page faulted
        # in as the read copies (see _read_head).
        maps = _map_least(self._settings, mapped) is not None
        head = _read_head(shards, direct, min(LOCAL_FIRST_BYTES, read_size), maps=maps)
        shards, shards_before, ranges_before = head.rest, head.shards_before, head.ranges_before
        first = head.chunk  # while the consumer has not taken it
        if first is not None:
            self._count_head(head)
            if head.complete:
                del head
                yield first
                return
            if self._background is None:
                # A fresh process: the loop starts at the consumer's next
                # request, not while it takes the head.
                read = len(first.data)
                yield first
                first = None
                if self._closed:
                    raise ReaderClosedError("the reader was closed while streaming")
                # And the next shards of one range each, while the page cache
                # holds them (see _read_cached): a shuffled epoch's first
                # window (a sample from each of 8 shards) is then out before
                # the loop starts.
                while shards_before and shards_before <= _HEAD_SHARDS and read < _HEAD_BYTES:
                    began = time.perf_counter()
                    more = _read_head(shards, direct, min(read_size, _HEAD_BYTES - read),
                                      whole_only=True, maps=maps)  # fmt: skip
                    shards = more.rest
                    if more.chunk is None:
                        break
                    # A network filesystem (each open a round trip, where the
                    # loop's read-ahead opens several at once) stops it.
                    slow = time.perf_counter() - began > _HEAD_SLOW
                    self._count_head(more)
                    read += len(more.chunk.data)
                    shards_before += 1
                    yield more.chunk._replace(shard=shards_before - 1)
                    if more.complete:
                        return
                    if self._closed:
                        raise ReaderClosedError("the reader was closed while streaming")
                    if slow:
                        break
        renumbered = bool(shards_before or ranges_before)
        background = self._loop_thread()
        loop = background.loop
        # The hand-off's batches view buffers already given back to the pool:
        # they count against the budget as lent bytes, not as a reserve.
        holds = max(self._settings.read_size, self._settings.memory_budget // _HANDOFF_SHARE)
        handoff = Handoff(loop, holds, on_wait=self._count_wait)
        self._handoffs.add(handoff)
        fed = threading.Event()  # the feeder's cleanup ran
        feeder = self._feed(shards, handoff, fed, mapped)
        del head  # the consumer's view of its chunk is the consumer's own
        future = asyncio.run_coroutine_threadsafe(feeder, loop)
        handoff.watch(future)
        try:
            if first is not None:  # read ahead meanwhile
                yield first
                first = None
            while (batch := handoff.get()) is not None:
                for chunk in batch:
                    if self._closed:
                        raise ReaderClosedError("the reader was closed while streaming")
                    if renumbered:
                        chunk = _renumbered(chunk, shards_before, ranges_before)
                    yield chunk
                batch = chunk = None  # (see astream)
            if self._made_remotes is not None:
                self._made_remotes.settle()  # shards the stream read whole are in the cache
        finally:
            self._handoffs.discard(handoff)
            handoff.abandon()
            if not future.done() and not loop.is_closed():
                loop.call_soon_threadsafe(future.cancel)
                # Cancelled because the consumer stopped early, or failed because
                # the reader was closed: waited for until the feeder has cleaned
                # up (the cancelled future is done before the feeder even sees
                # the cancellation). Never waited for from the loop's own thread
                # (the garbage collector may close a forgotten stream there):
                # the loop could not run the feeder's cleanup while this waits,
                # so it runs it once this returns.
                if not background.on_loop_thread():
                    # (A feeder cancelled before it started never runs its cleanup:
                    # its coroutine is closed all the same.)
                    while (inspect.getcoroutinestate(feeder) != inspect.CORO_CLOSED
                           and background.loop.is_running()):  # fmt: skip
                        if fed.wait(0.01):
                            time.sleep(0)  # the feeder's last lines, on the loop thread
                    # The feeder's task (its frames hold this reader) is let go by
                    # callbacks queued as it ends: two trips through the loop run
                    # them, and an abandoned reader is then the collector's.
                    with contextlib.suppress(BaseException):
                        background.call(lambda: None)
                        background.call(lambda: None)

    def _count_wait(self, seconds: float) -> None:
        self._wait_seconds += seconds

    async def _feed(self, shards: Iterable[ShardLike], handoff: Handoff, fed: threading.Event,
                    mapped: bool) -> None:  # fmt: skip
        """Loop-thread half of :meth:`stream`: moves batches into the hand-off;
        sets ``fed`` when it has cleaned up."""
        stream: _Stream | None = None
        try:
            self._bind(asyncio.get_running_loop())
            stream = self._open_stream(shards, count_wait=False, mapped=mapped)
            stream.handoff = handoff
            while batch := await self._next_batch(stream):
                await handoff.put(batch, sum(len(chunk.data) for chunk in batch))
                batch = None  # (see astream)
        except Exception as error:
            handoff.finish(error)
        except BaseException as error:
            # Cancelled (the loop winding down under a read in flight): the
            # consumer hears that the reader stopped, as when it never ran.
            closed = ReaderClosedError("the stream's reading was cancelled before the stream ended")
            closed.__cause__ = error
            handoff.finish(closed)
            raise
        else:
            handoff.finish()
        finally:
            if stream is not None:
                self._close_stream(stream)
            fed.set()

    def _open_stream(self, shards: Iterable[ShardLike], count_wait: bool, mapped: bool
                     ) -> _Stream:  # fmt: skip
        stream = _Stream(count_wait)
        settings = self._settings
        stream.map_least = _map_least(settings, mapped)
        stream.plan = plan_requests(
            stream, shards, self._files, settings.direct,
            lambda: self._settings.read_size, settings.coalesce_gap, settings.memory_budget // 2,
        )  # fmt: skip
        self._streams.append(stream)
        return stream

    def _close_stream(self, stream: _Stream) -> None:
        if stream.closed:
            return
        stream.closed = True
        if stream in self._streams:
            self._streams.remove(stream)
        self._release_delivered(stream)
        for piece in stream.queue:
            if piece.done:
                self._drop(piece)
            # pieces still in flight are dropped when they complete
        stream.queue.clear()
        stream.queued_bytes = 0
        if stream.lookahead is not None and stream.lookahead.file is not None:
            self._files.release(stream.lookahead.file)
        stream.lookahead = None
        stream.plan.close()  # type: ignore[attr-defined]
        if not self._streams:
            self._end_throttle()
        self._pump()

    def _release_delivered(self, stream: _Stream) -> None:
        for piece in stream.delivered:
            self._drop(piece)
        stream.delivered.clear()

    def _drop(self, piece: Request) -> None:
        buffer = piece.buffer
        if buffer is not None:
            piece.buffer = None
            self._held -= len(buffer)
            if not self._closed:
                self._pool.give_back(buffer)

    async def _next_batch(self, stream: _Stream) -> list[Chunk]:
        """The chunks that are ready at the head of the stream (waiting for the
        head if needed); an empty list at the end. Raises the head's error."""
        self._release_delivered(stream)
        queue = stream.queue
        read_after = False  # the reads this call skipped start once the batch is out
        while True:
            if self._closed:
                raise ReaderClosedError("I/O operation on a closed reader")
            if self._failure is not None:
                raise self._failure
            if queue and queue[0].done:
                # What is ready goes first: on cached data a pump reads up to
                # the whole read-ahead window inline (milliseconds), and a
                # consumer that has run dry would wait for all of it.
                read_after = True
                break
            # A consumer waits: the pump stops once the head is in, and the
            # read-ahead (a window of small shards is hundreds of reads) follows
            # the hand-off instead of delaying the first sample, or the next
            # (a shuffle window's first reads, one from each of its shards).
            self._pump(stream)
            if self._failure is not None:  # this pump failed: nothing would wake the wait
                raise self._failure
            if queue and queue[0].done:
                read_after = True
                break
            if not queue and stream.lookahead is None and stream.exhausted:
                return []
            waiter = stream.waiter = asyncio.get_running_loop().create_future()
            started = time.perf_counter()
            try:
                await waiter
            finally:
                stream.waiter = None
                if stream.count_wait:
                    self._wait_seconds += time.perf_counter() - started
        chunks: list[Chunk] = []
        batch_bytes, most_bytes = 0, self._settings.memory_budget // _BATCH_SHARE
        while (queue and queue[0].done and len(chunks) < _BATCH_CHUNKS
               and batch_bytes < most_bytes):  # fmt: skip
            piece = queue[0]
            if piece.error is not None:
                if chunks:
                    break  # deliver what came before the failure first
                queue.popleft()
                if piece.buffer is not None:
                    stream.queued_bytes -= len(piece.buffer)
                self._drop(piece)
                raise piece.error
            queue.popleft()
            if piece.buffer is None:
                view = _EMPTY
            else:
                view = memoryview(piece.buffer)
                stream.queued_bytes -= len(piece.buffer)
                batch_bytes += len(piece.buffer)
            for (
                shard,
                rng,
                path,
                offset,
                start,
                length,
                end_of_range,
                end_of_shard,
            ) in piece.deliveries:
                chunks.append(Chunk(shard, rng, path, offset, view[start : start + length],
                                    end_of_range, end_of_shard))  # fmt: skip
                self._bytes_delivered += length
            stream.delivered.append(piece)
        self._chunks_delivered += len(chunks)
        stream.started = True
        if read_after:
            # Reads the window has room for run while the batch waits for room
            # in a hand-off, or while an async consumer works through it.
            asyncio.get_running_loop().call_soon(self._pump)
        return chunks

    # ---- the scheduler ---------------------------------------------------------------

    def _pump(self, until: _Stream | None = None) -> None:
        """Reap completions and start reads until neither makes progress (or
        ``until``'s head is done), then wake consumers whose data is ready.
        Runs on the loop thread; an engine failure is stored and raised to
        every consumer, never lost in a callback."""
        if self._engine is None or self._closed:
            return
        try:
            self._reap()
            # For a waiting consumer, a few reads first, then its head looked
            # at: reads of cached data complete as they start, and a fill of a
            # whole read-ahead window (tens of reads, each opening its shard)
            # took ms. Reads from the device then go on to the full depth.
            most = None if until is None else _WAITED_READS
            while self._fill(most):
                self._reap()
                if until is not None and until.queue and until.queue[0].done:
                    break
                most = None
        except Exception as error:
            self._failure = error
        for stream in self._streams:
            waiter = stream.waiter
            if waiter is not None and not waiter.done():
                queue = stream.queue
                if not queue or queue[0].done or self._failure is not None:
                    waiter.set_result(None)

    def _reap(self) -> None:
        engine = self._engine
        assert engine is not None
        completions: Sequence[tuple[int, int | BaseException]] = engine.reap()
        if self._remote_done or self._mapped_done:
            completions = [*completions, *self._remote_done, *self._mapped_done]
            self._remote_done, self._mapped_done = [], []
        if not completions:
            return
        now = time.perf_counter_ns()
        inflight, latency, files = self._inflight, self._latency, self._files
        for tag, result in completions:
            piece = inflight.pop(tag)
            latency[latency_bucket(now - piece.submitted_ns)] += 1
            if piece.file is not None:
                self._cached_inflight -= piece.file.cached
                files.release(piece.file)
            if isinstance(result, BaseException):  # a remote read's final error
                piece.done, piece.error = True, result
                self._errors += 1
                self._remotes.forget(piece.path)
            else:
                if result > 0:
                    self._bytes_read += result
                if piece.finish(result) is not None:
                    self._errors += 1
            if piece.stream.closed:
                self._drop(piece)
        self._requests += len(completions)

    def _fill(self, most: int | None = None) -> int:
        """Start reads while slots, budget and planned pieces allow (at most
        ``most``); returns how many."""
        engine = self._engine
        assert engine is not None
        settings = self._settings
        limit = self._request_limit
        budget = settings.memory_budget
        # Remote reads wait a round trip each: they may hold more.
        remote_budget = max(budget, settings.remote_memory_budget)
        inflight, pool = self._inflight, self._pool
        # Buffers already released but still viewed by the consumer hold
        # memory too: counted, the budget bounds every buffer alive.
        held = self._held + max(0, pool.lent_bytes() - self._consumer_window)
        submitted = 0
        throttled = False
        cached_limit = min(limit, CACHED_REQUESTS)
        for stream in self._streams:
            queue = stream.queue
            piece_size = max(settings.read_size, stream.largest)
            window = max(limit * piece_size * READ_AHEAD_FACTOR, READ_AHEAD_MIN_BYTES)
            cached_window = max(cached_limit * piece_size * READ_AHEAD_FACTOR, READ_AHEAD_MIN_BYTES)
            # A stream whose consumer has left starts nothing more: opening a
            # shard may be a round trip (a network filesystem), and leaving
            # waits until this fill ends.
            while (
                len(inflight) < limit
                and (most is None or submitted < most)
                and stream.queued_bytes < window
                and len(queue) < _MAX_QUEUED_PIECES
                and not stream.abandoned
            ):
                # Planning the next piece may open its shard (or the one after).
                if (not stream.started and len(queue) >= _FIRST_PIECES
                        and not is_remote(queue[-1].path)):  # fmt: skip
                    break
                piece = stream.next_piece()
                if piece is None:
                    break
                if piece.done:  # nothing to read: an empty range or a planning failure
                    stream.lookahead = None
                    queue.append(piece)
                    continue
                cached = piece.file is not None and piece.file.cached
                if cached and (self._cached_inflight >= cached_limit
                               or stream.queued_bytes >= cached_window):  # fmt: skip
                    break  # kept as the stream's lookahead
                size = bucket_size(piece.length)
                # A stream with nothing queued takes one piece over the budget:
                # the budget may be held by another stream whose consumer waits
                # for this one (an index read while a shard streams).
                assert piece.file is not None
                remote = is_remote_file(piece.file)
                if held and held + size > (remote_budget if remote else budget) and queue:
                    throttled = True
                    break
                # Until its first batch is out, a stream starts only its first
                # piece (locally the loop's check above stops it before the
                # next is planned; a download followed goes one piece first),
                # except for the small first pieces of a remote climb.
                climbing = climbs(piece.file)
                if queue and not stream.started and not climbing:
                    break
                # Remotely, the small first pieces of the climb go together
                # (what a first sample needs), and the rest once they are in:
                # started with them, on fresh connections, larger pieces take
                # the link's bandwidth (and a rate limiter's drops, recovered
                # only by a retransmission timeout) from the first sample.
                # Those pieces, not whatever is queued when one is asked:
                # reads of many small objects, the consumer taking them as
                # they come, keep some in flight, never all in at once.
                if (climbing and queue and not stream.warm
                        and stream.queued_bytes + size > REMOTE_START_BYTES):  # fmt: skip
                    if stream.first_pieces is None:
                        stream.first_pieces = list(queue)
                    if not all(p.done for p in stream.first_pieces):
                        break
                    stream.warm, stream.first_pieces = True, None
                stream.lookahead = None
                # Huge pages for O_DIRECT (one device segment a read) only. A
                # page-cache copy gains little from them, and a remote receive
                # lost: faulting in the buffers a first epoch maps (about 150
                # MB under the remote budget) cleared huge pages at 0.7 GB/s,
                # 13% of the process's CPU, where ordinary pages cost 0.3%;
                # 8 x 260 MB over a 20 ms link, uncapped, then ran at 954 MB/s
                # against 908 (medians of 9 alternated pairs).
                huge = bool(piece.direct)
                tag = self._next_tag
                self._next_tag = tag + 1
                # What the page cache holds is mapped, not copied into a
                # buffer: the consumer's copy (a sample's bytes, a batch's
                # column) is then the only one, and no reader thread spends
                # a core on the other (110 KB tar samples: a quarter more a
                # second, and less CPU).
                least = stream.map_least
                mapping = (_map_resident(piece) if cached and least is not None
                           and piece.length >= least else None)  # fmt: skip
                if mapping is not None:
                    buffer = mapping
                    self._mapped_done.append((tag, len(mapping)))
                else:
                    buffer = pool.take(piece.length, populate=not remote, huge=huge)
                    if remote:
                        self._start_remote(piece, buffer, tag)
                    else:
                        engine.submit(piece.file.fd, memoryview(buffer)[: piece.length],
                                      piece.offset, tag, piece.direct)  # fmt: skip
                size = len(buffer)  # may be a larger free one: count what is held
                piece.buffer = buffer
                piece.tag = tag
                piece.submitted_ns = time.perf_counter_ns()
                inflight[tag] = piece
                self._inflight_peak = max(self._inflight_peak, len(inflight))
                self._cached_inflight += cached
                self._held += size
                held += size
                queue.append(piece)
                stream.queued_bytes += size
                stream.largest = max(stream.largest, size)
                submitted += 1
        if submitted:
            engine.flush()
        if throttled:
            if self._throttled_since is None:
                self._throttled_since = time.perf_counter()
        elif submitted:
            self._end_throttle()
        return submitted

    def _start_remote(self, piece: Request, buffer: Any, tag: int) -> None:
        """A remote read as a task on this loop; it completes like an engine read."""
        assert self._loop is not None
        self._pool.raise_limit(self._settings.remote_memory_budget)
        followed = piece.file if isinstance(piece.file, FollowedFile) else None
        task = self._loop.create_task(self._remote_read(piece.path, piece.offset, piece.length,
                                                        buffer, tag, followed))  # fmt: skip
        self._remote_tasks.add(task)
        task.add_done_callback(self._remote_tasks.discard)

    async def _remote_read(
        self, url: str, offset: int, length: int, buffer: Any, tag: int,
        followed: FollowedFile | None,
    ) -> None:  # fmt: skip
        result: int | BaseException
        try:
            if followed is not None:
                try:
                    result = await followed.reader.read_into(offset, length, buffer)
                except Exception as error:  # the download failed: from the store itself
                    log.debug("fastio: %s; reading %s remotely", error, url)
                    result = await self._remotes.read_into(url, offset, length, buffer)
            else:
                result = await self._remotes.read_into(url, offset, length, buffer)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # delivered in order, like an engine error
            result = error
        self._remote_done.append((tag, result))
        self._pump()

    def _cancel_remote(self) -> None:
        """Cancel remote reads in flight (their buffers were never handed out)."""
        for task in list(self._remote_tasks):
            task.cancel()
        self._remote_tasks.clear()
        for tag in [t for t, p in self._inflight.items() if p.file is not None and p.file.fd < 0]:
            piece = self._inflight.pop(tag)
            piece.done, piece.error = True, ReaderClosedError("remote read cancelled")
            self._drop(piece)
        self._remote_done.clear()

    def _end_throttle(self) -> None:
        if self._throttled_since is not None:
            self._backpressure_seconds += time.perf_counter() - self._throttled_since
            self._throttled_since = None

    # ---- what happened ---------------------------------------------------------------

    def stats(self) -> ReaderStats:
        """Counters since the reader was made (see :class:`ReaderStats`)."""
        now = time.perf_counter()
        throttled = self._throttled_since
        settings = self._settings
        engine = self._engine
        remotes = self._made_remotes
        fastest, recent = remotes.answer_seconds if remotes is not None else (0.0, 0.0)
        return ReaderStats(
            engine=engine.kind if engine is not None else settings.engine,
            outstanding_requests=self._request_limit,
            read_size=settings.read_size,
            bytes_read=self._bytes_read + self._head_bytes,
            bytes_delivered=self._bytes_delivered + self._head_bytes,
            requests=self._requests + self._head_reads,
            chunks_delivered=self._chunks_delivered + self._head_reads,
            errors=self._errors,
            wait_seconds=self._wait_seconds,
            backpressure_seconds=self._backpressure_seconds
            + (now - throttled if throttled is not None else 0.0),
            elapsed_seconds=now - self._started,
            inflight_requests=len(self._inflight),
            inflight_bytes=sum(len(p.buffer) for p in list(self._inflight.values()) if p.buffer),
            buffered_bytes=self._held,
            latency_histogram=tuple(map(sum, zip(self._latency, self._head_latency, strict=True))),
            peak_inflight_requests=self._inflight_peak,
            bytes_arrived=remotes.bytes_arrived if remotes is not None else 0,
            answer_seconds_fastest=fastest,
            answer_seconds_recent=recent,
        )


def _read_cached(fd: int, buffer: bytearray, offset: int) -> int:
    """Read into ``buffer`` from ``offset`` of the local file ``fd`` where
    the page cache holds most of that range (as much as ``direct="auto"``
    asks of a file it reads through the cache): the bytes read, else 0 (a
    cold range, or a failure the stream reports). The pages are asked about
    first: a read of a cold range would wait for the device on the
    consumer's thread, and start the kernel's read-ahead of the file, which
    would leave a cold file cached that ``direct="auto"`` reads around the
    page cache. A warm range that lacks a few pages (a machine reclaims some
    of a file's cached pages now and then) reads them from the device here:
    a fraction of a millisecond, where the reader's loop takes several to
    start in a fresh process."""
    if not buffer:
        return 0
    try:
        if resident_fraction(fd, offset, len(buffer), 1, len(buffer)) < RESIDENT_ENOUGH:
            return 0
        return os.preadv(fd, [buffer], offset)  # partial: past the file's end
    except OSError:  # a failure the stream reports
        return 0


class _Head:
    """A stream's first bytes, where they were read on the consumer's thread
    (see :func:`_read_head`), and what the stream reads through the loop:
    ``rest``, where a whole first range read so is left out (the stream then
    numbers the first shard's ranges, or the shards, one lower than its
    caller does: ``ranges_before``, ``shards_before``). (A plain class: a
    NamedTuple compiles code, and each of its annotations, as it is made.)"""

    __slots__ = ("chunk", "complete", "nanoseconds", "ranges_before", "rest", "shards_before")

    def __init__(self, chunk: Chunk | None, nanoseconds: int, rest: Iterable[ShardLike],
                 shards_before: int = 0, ranges_before: int = 0,
                 complete: bool = False) -> None:  # fmt: skip
        self.chunk = chunk
        self.nanoseconds = nanoseconds  # the read took
        self.rest = rest
        self.shards_before = shards_before
        self.ranges_before = ranges_before
        self.complete = complete  # the chunk is all the stream holds: nothing is left for the loop


def _renumbered(chunk: Chunk, shards_before: int, ranges_before: int) -> Chunk:
    """A chunk of a stream's ``rest`` (see :class:`_Head`) numbered as the caller's shards."""
    if shards_before:
        return chunk._replace(shard=chunk.shard + shards_before)
    if chunk.shard == 0:
        return chunk._replace(range=chunk.range + ranges_before)
    return chunk


# What a fresh process's stream reads on the consumer's thread before its loop
# starts, at most: after its first bytes, this many shards, whole and of one
# range each, and this many bytes in all (see Reader.stream).
_HEAD_SHARDS = 16
_HEAD_BYTES = 1 << 20
_HEAD_SLOW = 0.001  # seconds: a shard whose open and read took longer is the last read so


def _read_head(shards: Iterable[ShardLike], direct: Any, limit: int, whole_only: bool = False,
               maps: bool = False) -> _Head:  # fmt: skip
    """The first bytes of the first shard, read on the caller's thread where
    they are a local file's and the page cache holds them (most of their
    pages, see :func:`_read_cached`; at most ``limit``, of its first range),
    and the shards left to stream. A stream's first chunk then waits neither
    for the reader's loop to start nor for a trip through it (about 1 ms in a
    fresh process, most of a local dataset's time to its first sample). With
    ``whole_only``, only a first shard of one range is read, and only whole.
    With ``maps``, bytes the page cache wholly holds are mapped, not read: a
    fresh process's read faulted in each page of the fresh memory it copied
    into (0.2 ms for 256 KiB on the test machine, where mapping them takes
    0.03), and a shuffled epoch reads the heads of 8 shards so."""
    listed = iter(shards)
    try:
        given = next(listed)
    except StopIteration:
        return _Head(None, 0, ())
    except Exception as error:  # bad input: raised when the stream asks for the shard
        return _Head(None, 0, (_raise(failure) for failure in (error,)))
    unread = _Head(None, 0, itertools.chain((given,), listed))
    try:
        shard = as_shard(given)
    except Exception:  # the stream reports it
        return unread
    head = shard.ranges[0]
    if (shard.direct if shard.direct is not None else direct) is True or is_remote(head.path):
        return unread
    if whole_only and len(shard.ranges) > 1:
        return unread
    try:
        fd, stat_of = open_for_reading(local_path(head.path), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # the stream reports what is wrong with it
        return unread
    try:
        if not stat.S_ISREG(stat_of.st_mode):
            return unread  # the stream says what it is
        size = stat_of.st_size
        length = size - head.offset if head.length is None else head.length
        if length <= 0 or head.offset + length > size:
            return unread  # nothing to read, or past the file's end: the stream says so
        want = min(limit, length)
        if (shard.whole or whole_only) and want < length:
            return unread  # the range comes as one chunk
        began = time.perf_counter_ns()
        data = _mapped_head(fd, head.offset, want) if maps else None
        if data is None:
            buffer = bytearray(want)
            data = memoryview(buffer)[: _read_cached(fd, buffer, head.offset)]
        count = len(data)
        took = time.perf_counter_ns() - began
    except OSError:  # the stream reports it
        return unread
    finally:
        os.close(fd)
    whole = count == length
    if count <= 0 or (shard.whole and not whole):
        return unread
    last = len(shard.ranges) == 1
    chunk = Chunk(0, 0, head.path, head.offset, data, whole, whole and last)
    if not whole:
        after = ByteRange(head.path, head.offset + count, length - count)  # as long as it was
        rest = dataclasses.replace(shard, ranges=(after, *shard.ranges[1:]))
        return _Head(chunk, took, itertools.chain((rest,), listed))
    if last:
        # Nothing after this shard: the stream was all read here, and its
        # loop is neither started nor asked.
        try:
            following = next(listed)
        except StopIteration:
            return _Head(chunk, took, (), shards_before=1, complete=True)
        except Exception as error:  # raised when the stream asks for the shard
            return _Head(chunk, took, (_raise(failure) for failure in (error,)), shards_before=1)
        return _Head(chunk, took, itertools.chain((following,), listed), shards_before=1)
    rest = dataclasses.replace(shard, ranges=shard.ranges[1:])
    return _Head(chunk, took, itertools.chain((rest,), listed), ranges_before=1)


def _map_least(settings: ReaderSettings, mapped: bool) -> int | None:
    """The smallest piece a stream maps where the page cache holds it (None:
    it maps none): with ``map_cached="auto"``, pieces from
    :data:`MAPPED_PIECE_BYTES` where the consumer asks for mapped ranges
    (``mapped``)."""
    if settings.map_cached == "auto":
        return MAPPED_PIECE_BYTES if mapped else None
    return 0 if settings.map_cached else None


def _mapped_head(fd: int, offset: int, length: int) -> memoryview | None:
    """:func:`_mapped`, as a stream's first chunk holds it (None where empty)."""
    mapping = _mapped(fd, offset, length)
    return None if mapping is None or not len(mapping) else memoryview(mapping)


def _map_resident(piece: Request) -> Any:
    assert piece.file is not None
    return _mapped(piece.file.fd, piece.offset, piece.length)


def _mapped(fd: int, offset: int, length: int) -> Any:
    """Bytes ``offset..offset + length`` of ``fd`` mapped from the page cache,
    where it holds them all (else None: read them). The mapping ends where
    the file ends now: a file cut short since it was opened reads as it would."""
    try:
        return _native.map_resident(fd, offset, length)
    except OSError:
        return None  # the read reports it, with the path


def _raise(error: Exception) -> NoReturn:
    raise error


def _limit(base: int, share: float) -> int:
    return min(max(int(base * share), 1), MAX_OUTSTANDING_REQUESTS)


def local_stamps(urls: list[str]) -> tuple[bytes, bytes]:
    """:meth:`Reader.local_stamps`, asked before a reader is made (a dataset's
    open, as soon as it knows its shards)."""
    return _native.stat_stamps(urls)


def listed_stamps(packed: tuple[bytes, bytes], urls: Sequence[str]
                  ) -> list[tuple[int, int, int] | OSError]:  # fmt: skip
    """:meth:`Reader.local_stamps`' answer about ``urls`` as :meth:`Reader.stamps`
    gives it: a tuple a file, or the OSError that statting it alone raises."""
    found, errors = packed
    numbers = memoryview(found).cast("q")
    listed: list[tuple[int, int, int] | OSError] = list(
        zip(numbers[0::3].tolist(), numbers[1::3].tolist(), numbers[2::3].tolist(), strict=True)
    )
    if errors.count(0) < len(errors):  # a byte not zero: some stat failed
        for at, code in enumerate(memoryview(errors).cast("i")):
            if code:  # OSError(errno, ...) is the errno's subclass, as os.stat raises it
                listed[at] = OSError(code, os.strerror(code), local_path(urls[at]))
    return listed


def _change_stamp(status: os.stat_result) -> int:
    return (status.st_ino * 1_000_003 + status.st_ctime_ns) & ((1 << 63) - 1)
