"""The shard cache: whole local copies of remote shards, under a byte limit.

::

    cache = ShardCache("/scratch/fastio", max_bytes=200 << 30, policy="plan")
    cache.plan(urls_in_the_order_they_will_be_read)       # the epoch plan, epochs ahead
    with cache.use(url, size, fetch, etag=etag) as path:  # a complete, verified copy
        read(path)                                        # pinned: never evicted meanwhile
    for url in cache.prefetch(2):                          # what the plan needs next
        cache.fetch_ahead(url, size_of(url), fetch)        # on a background task

**The limit holds at every instant.** Space is reserved (evicting as the policy
says) before a download starts, in the same transaction that checks it fits,
and a download is refused the bytes past the size it reserved; the index (see
:mod:`fastio.cache._database`) is shared on disk by every process on the machine.

**No torn files.** A download goes to a temporary file in the cache folder,
is checked (its size, and a checksum where one is given), flushed to disk and
published with ``os.replace``. A process killed mid-download leaves its
temporary file and its reservation behind; the next cache opened on the folder
(or one waiting for room or for that shard) sees the owner's lock free, removes
them and reclaims the space (see :mod:`fastio.cache._files`).

**Each shard is downloaded once.** A process asking for a shard another is
downloading waits for it (up to ``wait_timeout``) and takes over if that
process dies.

**Eviction** (``policy="plan"``): of the shards not in use, the one whose next
use in the plans is furthest away goes first (Belady's rule), which keeps a
stable part of the dataset across epochs read in stored order where LRU keeps
nothing. ``policy="lru"`` evicts the shard used longest ago.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from fastio._errors import (
    CacheError,
    CacheFullError,
    CacheTimeoutError,
    TierFullError,
)
from fastio.cache._database import FETCHING, READY, WAL_PEAK, CacheIndex, Entry, EvictionPolicy
from fastio.cache._files import (
    META_FOLDER,
    Download,
    OwnerLock,
    data_name,
    etag_checksum,
    first_with_room,
    owner_alive,
    parse_checksum,
    publish_download,
    remove_quietly,
    shard_key,
    temp_name,
)
from fastio.cache._filling import Filling
from fastio.cache._recovery import bury, discard, reap, remove_strays, trim

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    Fetch = Callable[[str, Download], object]
    """Downloads the URL's whole object into the file object given (``write``)."""
    Placement = Callable[[str, int, str, float], str]
    """``(key, size, kind, reuse) -> directory``: where a cache file of ``kind``
    goes; ``reuse`` is how many reads of it the plans hold (at least 1)."""

__all__ = [
    "INDEX_ROOM",
    "Download",
    "ShardCache",
    "etag_checksum",
]

log = logging.getLogger("fastio.cache")

INDEX_ROOM = 512 << 10
"""Bytes of ``max_bytes`` kept for the cache's own files (about 200 KiB for
a few shards), so that the room left for copies is the same from one step to
the next; more where they take more (plans of many thousand shards)."""
SHARD = "shard"
"""The ``kind`` the placement hook is asked about for shard copies."""
_INDEX_NAME = "index.sqlite"
# errnos of a write that found no room: a full filesystem, a quota reached
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})
_BUSY_TIMEOUT = 60.0  # seconds one transaction may wait for another (they take microseconds)
_REAP_INTERVAL = 1.0  # seconds between looks for dead processes while waiting for room
# Index connections inherited across fork: SQLite forbids using them in the child, closing
# included, so they are kept here unused (a descriptor each) rather than collected.
_INHERITED: list[CacheIndex] = []


@dataclass
class _Process:
    """What a cache object holds in one process (made anew after ``fork``)."""

    pid: int
    index: CacheIndex
    lock: OwnerLock
    downloading: set[str] = field(default_factory=set)  # keys this process is downloading
    fillings: dict[str, Filling] = field(default_factory=dict)  # of those, readable as they grow
    counters: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("hits", "misses", "waits", "bytes_downloaded", "evictions", "prefetched"), 0
        )
    )


@dataclass(frozen=True)
class _Step:
    """What one look at the index decided: a path to serve, a reservation to
    download into, or a reason to wait (``"fetching"``, ``"full"``) or give up."""

    outcome: Literal["hit", "fetch", "fetching", "full", "skip"]
    entry: Entry | None = None


class ShardCache:
    """Local copies of remote shards in ``directories``, at most ``max_bytes`` of them.

    ``placement(key, size, kind, reuse)`` picks the directory of each new file
    (the tiering hook; ``reuse``: the reads of it the epoch plans hold); by
    default the first directory with room on its filesystem.
    The first directory also holds the shared index (``.fastio-cache/``); every
    process sharing the cache must name the same first directory and the same
    ``max_bytes`` (a different limit while others are open raises ValueError).
    ``max_bytes`` bounds the folders as a whole: the copies, downloads in
    progress and the index's own files (:data:`INDEX_ROOM` of it, more for
    plans of many thousand shards). A filesystem that fills before the limit
    makes downloads fail with :class:`CacheFullError` naming the shard (a
    dataset's reader then reads that shard remotely).
    A cache object survives pickling and ``fork`` (each process registers on
    its own); ``close`` it, or use it as a context manager. A reader using the
    cache keeps ``prefetch`` downloads of the plan's next shards running ahead
    of it (0: download on demand only).
    """

    def __init__(
        self,
        directories: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        max_bytes: int,
        policy: EvictionPolicy = "plan",
        placement: Placement | None = None,
        *,
        wait_timeout: float = 600.0,
        prefetch: int = 2,
    ) -> None:
        if isinstance(directories, (str, os.PathLike)):
            directories = [directories]
        self.directories = [os.path.abspath(os.fspath(folder)) for folder in directories]
        if not self.directories:
            raise ValueError("directories must name at least one folder")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"max_bytes must be a positive integer, not {max_bytes!r}")
        if policy not in ("plan", "lru"):
            raise ValueError(f"policy must be 'plan' or 'lru', not {policy!r}")
        if wait_timeout <= 0:
            raise ValueError(f"wait_timeout must be positive, not {wait_timeout!r}")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be a shard count >= 0, not {prefetch!r}")
        self.max_bytes = max_bytes
        self.policy: EvictionPolicy = policy
        self.placement = placement
        self.wait_timeout = wait_timeout
        self.prefetch_count = prefetch
        self._owners = os.path.join(self.directories[0], META_FOLDER, "owners")
        self._guard = threading.Lock()
        self._process: _Process | None = None
        for folder in self.directories:
            os.makedirs(folder, exist_ok=True)
        os.makedirs(self._owners, exist_ok=True)
        self._state()

    def __repr__(self) -> str:
        return (f"ShardCache({self.directories!r}, max_bytes={self.max_bytes}, "
                f"policy={self.policy!r})")  # fmt: skip

    # ---- reading -----------------------------------------------------------------------------

    def get(
        self, url: str, size: int, fetch: Fetch, etag: str | None = None, *,
        checksum: str | None = None, wait: bool | Literal["download"] = True,
    ) -> str:  # fmt: skip
        """The local path of a complete, verified copy of ``url`` (``size`` bytes).

        On a miss, space is reserved (evicting as the policy says) and
        ``fetch(url, file)`` writes the object into ``file``; the copy is
        checked against ``size`` and ``checksum`` (``"md5:<hex>"``,
        ``"sha256:<hex>"``, ...; :func:`etag_checksum` makes one of an S3 ETag)
        before it is published. ``etag`` identifies the object's version: a
        copy of another version is replaced. The copy is pinned (never evicted)
        until :meth:`release`; :meth:`use` does both.

        Raises what ``fetch`` raises, :class:`CacheIntegrityError` (nothing
        cached) for a download of another size or checksum,
        :class:`CacheFullError` for a shard larger than ``max_bytes`` or no room
        left by pinned shards within ``wait_timeout``, and
        :class:`CacheTimeoutError` when another process downloading the shard
        does not finish within ``wait_timeout``. With ``wait=False`` both are
        raised at once instead of waiting; with ``wait="download"`` only
        CacheFullError is (for a reader, whose own pins may hold the room, but
        who would rather wait for a download than fetch the shard twice).
        """
        path = self._obtain(url, size, fetch, etag, checksum, demand=True, wait=wait)
        assert isinstance(path, str)  # a demand either gets its path or raises
        return path

    def get_filling(
        self, url: str, size: int, fetch: Fetch, etag: str | None = None, *,
        checksum: str | None = None, spawn: Callable[[Callable[[], object]], None],
    ) -> str | Filling:  # fmt: skip
        """:meth:`get` with ``wait="download"``, except that a copy this process
        is downloading (a miss, downloaded by ``spawn(download)`` in the
        background, or a running prefetch) is not waited for: its
        :class:`Filling` is returned, which reads bytes as soon as they are
        written. The copy is pinned either way, until :meth:`release`."""
        got = self._obtain(url, size, fetch, etag, checksum, demand=True, wait="download",
                           spawn=spawn)  # fmt: skip
        assert got is not None  # a demand either gets its copy or raises
        return got

    def release(self, url: str) -> None:
        """Unpins the copy of ``url`` that :meth:`get` returned (once per get).
        Raises ValueError if this cache object holds no pin on it."""
        state = self._state()
        with state.index.transaction(url):
            released = state.index.unpin(state.lock.owner, shard_key(url))
        if not released:
            raise ValueError(f"{url} is not pinned by this cache (release without get)")

    @contextlib.contextmanager
    def use(
        self, url: str, size: int, fetch: Fetch, etag: str | None = None, *,
        checksum: str | None = None,
    ) -> Iterator[str]:  # fmt: skip
        """:meth:`get`, then :meth:`release` when the block ends."""
        path = self.get(url, size, fetch, etag, checksum=checksum)
        try:
            yield path
        finally:
            self.release(url)

    def settle(self) -> None:
        """Wait until this process's downloads whose bytes have all arrived are
        published (checked, flushed, renamed: milliseconds), so that a pass
        that read them to their end as they arrived leaves them cached."""
        process = self._process
        if process is None or process.pid != os.getpid():
            return
        for filling in list(process.fillings.values()):
            if filling.written == filling.size:
                filling.wait_ended()

    # ---- the plan ----------------------------------------------------------------------------

    def plan(self, urls: Iterable[str]) -> None:
        """The URLs this cache object will :meth:`get`, in order, from now on: the
        epoch plan, as many epochs ahead as known (a URL once per use). Each get
        moves past the URL's next planned use. Replaces the previous plan.
        A plan the index cannot record (a full disk) is logged and dropped:
        eviction then knows less, and reads go on."""
        try:
            state = self._state()
            with state.index.transaction():
                state.index.set_plan(state.lock.owner, ((shard_key(url), url) for url in urls))
        except CacheError as error:
            log.warning("fastio: the shard cache could not record the plan: %s", error)

    def prefetch(self, count: int) -> list[str]:
        """The next ``count`` URLs of the plan that are neither cached nor being
        downloaded: what to :meth:`fetch_ahead` now (none while the index
        cannot be written: a full disk)."""
        try:
            state = self._state()
            with state.index.transaction():
                return state.index.upcoming(state.lock.owner, count)
        except CacheError as error:
            log.info("fastio: no prefetch: %s", error)
            return []

    def fetch_ahead(
        self, url: str, size: int, fetch: Fetch, etag: str | None = None, *,
        checksum: str | None = None,
    ) -> bool:  # fmt: skip
        """Downloads ``url`` into the cache ahead of its use, without pinning it
        or moving the plan. Under ``policy="plan"`` it only evicts shards needed
        later than this one, and does nothing for a URL no plan uses. True if
        the shard is now cached; False if it was skipped (no room, or another
        download of it is running). Raises what :meth:`get` raises."""
        return self._obtain(url, size, fetch, etag, checksum, demand=False) is not None

    # ---- state -------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """This object's counts since it was made in this process (``hits``,
        ``misses``, ``waits``: hits that waited for another's download,
        ``bytes_downloaded``, ``evictions``, ``prefetched``), and the cache's
        now, over all processes (``bytes_used`` by complete shards,
        ``bytes_reserved`` by downloads, ``bytes_pinned``, ``shards_cached``,
        ``downloads``, ``max_bytes``)."""
        state = self._state()
        with state.index.transaction():
            totals = state.index.totals()
        return {**state.counters, **totals, "max_bytes": self.max_bytes}

    def close(self) -> None:
        """Unpins this object's shards, forgets its plan and closes its index
        connection. Downloads still running on other threads must have
        finished. Using the object again opens it anew (as a dataset's reader
        is made anew after ``Dataset.close``)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.pid != os.getpid():  # a copy inherited across fork: the parent's to close
            process.lock.abandon()
            _INHERITED.append(process.index)
            return
        try:
            with process.index.transaction():
                self._drop_ended(process)  # none runs now: ended while the disk was full
                process.index.unregister(process.lock.owner)
        except CacheError as error:  # a full disk: the owner's lock going lets others clean up
            log.warning("fastio: closing the shard cache: %s", error)
        process.index.close()
        process.lock.close()

    def __enter__(self) -> ShardCache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"directories": self.directories, "max_bytes": self.max_bytes,
                "policy": self.policy, "placement": self.placement,
                "wait_timeout": self.wait_timeout,
                "prefetch": self.prefetch_count}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        options = {name: state.pop(name) for name in ("wait_timeout", "prefetch")}
        self.__init__(**state, **options)  # type: ignore[misc]

    def _state(self) -> _Process:
        process = self._process
        if process is not None and process.pid == os.getpid():
            return process
        if process is not None:  # inherited across fork: the parent's lock stays the parent's
            process.lock.abandon()
            _INHERITED.append(process.index)
            self._guard = threading.Lock()
            self._process = None
        with self._guard:
            if self._process is None:
                self._process = self._open()
            return self._process

    def _open(self) -> _Process:
        index = CacheIndex(
            os.path.join(self.directories[0], META_FOLDER, _INDEX_NAME), _BUSY_TIMEOUT
        )
        lock = OwnerLock(self._owners)
        try:
            with index.transaction():
                reap(index, self._owners, lock.owner)
                others = {limit for owner, limit in index.owners() if owner != lock.owner}
                if others - {self.max_bytes}:
                    raise ValueError(
                        f"{self.directories[0]}: the cache is open elsewhere with max_bytes "
                        f"{min(others - {self.max_bytes})}, not {self.max_bytes}"
                    )
                index.register(lock.owner, os.getpid(), self.max_bytes)
                remove_strays(index, self.directories, self._owners, lock.owner)
                # The limit may be lower than last run's.
                trim(index, self.max_bytes - self._own_bytes(), self.policy)
        except BaseException:
            index.close()
            lock.close()
            raise
        return _Process(os.getpid(), index, lock)

    # ---- how a shard is served ---------------------------------------------------------------

    def _obtain(
        self, url: str, size: int, fetch: Fetch, etag: str | None, checksum: str | None,
        demand: bool, wait: bool | Literal["download"] = True,
        spawn: Callable[[Callable[[], object]], None] | None = None,
    ) -> str | Filling | None:  # fmt: skip
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be a byte count, not {size!r}")
        if checksum is not None:
            parse_checksum(checksum)
        room = self._room()
        if size > room:
            raise CacheFullError(url, f"the shard's {size} bytes are more than the cache's "
                                      f"max_bytes ({self.max_bytes}) leaves for shards "
                                      f"besides its index ({room})")  # fmt: skip
        state, key = self._state(), shard_key(url)
        owner = state.lock.owner
        started = time.monotonic()
        reaped, delay, waited = started, 0.001, False
        if demand:
            # The pin comes first: while this waits for a download (a prefetch's,
            # another process's), the plan has moved past the shard, and only
            # the pin keeps a prefetch from evicting it as if it were used.
            with state.index.transaction(url):
                self._drop_ended(state)  # their room first, should this not commit
                state.index.advance(owner, key)
                state.index.pin(owner, key)
        try:
            while True:
                step = None
                try:
                    with state.index.transaction(url):  # which also guards the counters
                        step = self._step(state, key, url, size, etag, demand)
                        if step.outcome == "hit" and demand:
                            state.counters["hits"] += 1
                            state.counters["waits"] += waited
                        if step.outcome == "fetch":
                            # Marked before the commit: this process's other
                            # threads must not take the reservation for one
                            # whose download ended (see _step).
                            state.downloading.add(key)
                except BaseException:
                    if step is not None and step.outcome == "fetch":
                        state.downloading.discard(key)
                    raise
                if step.outcome == "hit":
                    assert step.entry is not None
                    return step.entry.path
                if step.outcome == "fetch":
                    assert step.entry is not None
                    if spawn is None:
                        return self._download(state, step.entry, fetch, checksum, demand)
                    filling = self._fill(state, step.entry)
                    spawn(functools.partial(self._download, state, step.entry, fetch, checksum,
                                            demand, filling))  # fmt: skip
                    return filling
                if step.outcome == "skip":
                    return None
                if step.outcome == "fetching" and spawn is not None:
                    running = state.fillings.get(key)
                    if running is not None:  # this process's download: read it as it grows
                        return running
                elapsed = time.monotonic() - started
                if (elapsed > self.wait_timeout or not wait
                        or (wait == "download" and step.outcome == "full")):  # fmt: skip
                    raise self._timeout(state, url, size, step, elapsed)
                if step.outcome == "full" and time.monotonic() - reaped > _REAP_INTERVAL:
                    with state.index.transaction(url):  # dead processes' pins may hold the room
                        reap(state.index, self._owners, owner)
                    reaped = time.monotonic()
                waited = True
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        except BaseException:
            if demand:
                with contextlib.suppress(CacheError), state.index.transaction(url):
                    state.index.unpin(owner, key)
            raise

    @staticmethod
    def _drop_ended(state: _Process) -> None:
        """Removes this process's downloads that ended while the index could
        not record it (a full disk): their files first, which frees the room
        even should the transaction fail again."""
        for stale in state.index.downloads(state.lock.owner):
            if stale.key not in state.downloading:
                discard(state.index, stale)

    def _step(
        self, state: _Process, key: str, url: str, size: int, etag: str | None, demand: bool
    ) -> _Step:
        index, owner = state.index, state.lock.owner
        self._drop_ended(state)
        entry = index.entry(key)
        if entry is not None and entry.state == READY:
            current = entry.size == size and (etag is None or entry.etag in (None, etag))
            # A copy cut short on disk since (a full disk, a hand) is no copy:
            # fetched again, not served as a hit that fails (or is skipped) each run.
            if current and _size_on_disk(entry.path) == entry.size:
                if demand:  # pinned already, by _obtain
                    index.touch(key)
                    record_use = getattr(self.placement, "record_use", None)
                    if record_use is not None:  # a hit is a whole read of the copy
                        record_use(entry.path, entry.size)
                return _Step("hit", entry)
            if index.pin_count(key) > demand and os.path.exists(entry.path):  # besides ours
                return _Step("fetching" if demand else "skip", entry)  # another version in use
            index.remove(key)
            remove_quietly(entry.path)
            entry = None
        if entry is not None:  # being downloaded
            if entry.owner == owner or owner_alive(self._owners, entry.owner):
                return _Step("fetching" if demand else "skip", entry)
            bury(index, self._owners, entry.owner)
        sooner_than = None
        if not demand and self.policy == "plan":
            sooner_than = index.next_use(key)
            if sooner_than is None:
                return _Step("skip")
        totals = index.totals()
        excess = totals["bytes_used"] + totals["bytes_reserved"] + size + self._own_bytes() - (
            self.max_bytes)  # fmt: skip
        victims = index.victims(excess, self.policy, sooner_than) if excess > 0 else []
        if victims is None:
            return _Step("full" if demand else "skip")
        # The reads the copy will serve: those planned, and this one (a demand
        # get has moved its plan past it already).
        uses = index.planned_uses(key) + int(demand)
        path = os.path.join(self._place(key, url, size, uses), data_name(url))
        for victim in victims:
            index.remove(victim.key)
            remove_quietly(victim.path)
        state.counters["evictions"] += len(victims)
        reserved = Entry(key, url, path, size, etag, FETCHING, owner)
        index.reserve(reserved)
        return _Step("fetch", reserved)

    @staticmethod
    def _fill(state: _Process, entry: Entry) -> Filling:
        temp = os.path.join(os.path.dirname(entry.path), temp_name(state.lock.owner, entry.key))
        filling = state.fillings[entry.key] = Filling(entry.url, temp, entry.size)
        return filling

    def _download(
        self, state: _Process, entry: Entry, fetch: Fetch, checksum: str | None, demand: bool,
        filling: Filling | None = None,
    ) -> str:  # fmt: skip
        """Downloads ``entry`` and publishes it; with a ``filling`` (made by
        :meth:`_fill`), which follows the download and hears how it ended."""
        if filling is None:
            filling = self._fill(state, entry)
        try:
            path = self._publish(state, entry, fetch, checksum, demand, filling)
        except BaseException as error:
            filling.ended(None, error)
            raise
        else:
            filling.ended(path, None)
        finally:
            state.fillings.pop(entry.key, None)
        return path

    def _publish(
        self, state: _Process, entry: Entry, fetch: Fetch, checksum: str | None, demand: bool,
        filling: Filling,
    ) -> str:  # fmt: skip
        index, owner = state.index, state.lock.owner
        temp = filling.temp
        try:  # the mark stays until the index says how the download ended
            try:
                publish_download(temp, entry.path, entry.url, entry.size, fetch, checksum,
                                  filling.wrote)  # fmt: skip
            except BaseException as error:
                remove_quietly(temp)
                # Should the index refuse (a full disk), the reservation is ours
                # and not running: the next look at the shard removes it.
                with contextlib.suppress(CacheError), index.transaction(entry.url):
                    index.remove(entry.key)
                if isinstance(error, OSError) and error.errno in _NO_ROOM:
                    message = (f"the cache's filesystem has no room for its {entry.size} "
                               f"bytes ({error})")  # fmt: skip
                    raise CacheFullError(entry.url, message) from error
                raise
            with index.transaction(entry.url):
                if not index.publish(entry.key, owner):
                    message = ("the cache index lost this download's reservation "
                               "(was the cache folder removed?)")  # fmt: skip
                    raise CacheError(entry.url, message)
                state.counters["misses" if demand else "prefetched"] += 1
                state.counters["bytes_downloaded"] += entry.size
        finally:
            state.downloading.discard(entry.key)
        return entry.path

    def _room(self) -> int:
        """Bytes of ``max_bytes`` left for shards besides the cache's own
        files. Where those are past their reserve because the index's
        write-ahead log outgrew its peak (checkpoints that met other
        processes' reads, on a loaded machine), the log is cut back first,
        as the next commit would: a shard that fits the cache is not refused
        for a log that a checkpoint empties."""
        room = self.max_bytes - self._own_bytes()
        if room < self.max_bytes - INDEX_ROOM:
            self._state().index.cut_log(at_least=WAL_PEAK)
            room = self.max_bytes - self._own_bytes()
        return room

    def _own_bytes(self) -> int:
        """Bytes of ``max_bytes`` the cache's own files (its index, owner
        locks) take: :data:`INDEX_ROOM`, or what they take if more, with room
        for the index's write-ahead log to grow as far as it does before a
        checkpoint cuts it back."""
        total = 0
        meta = os.path.join(self.directories[0], META_FOLDER)
        for folder in (meta, self._owners):
            with contextlib.suppress(FileNotFoundError), os.scandir(folder) as listing:
                for item in listing:
                    if item.is_file(follow_symlinks=False):
                        with contextlib.suppress(FileNotFoundError):
                            total += item.stat(follow_symlinks=False).st_size
        wal = os.path.join(meta, _INDEX_NAME + "-wal")
        try:
            grown = os.path.getsize(wal)
        except FileNotFoundError:
            grown = 0
        return max(INDEX_ROOM, total + max(WAL_PEAK - grown, 0))

    def _place(self, key: str, url: str, size: int, uses: int) -> str:
        if self.placement is None:
            return first_with_room(self.directories, size)
        try:
            folder = os.path.abspath(self.placement(key, size, SHARD, float(max(uses, 1))))
        except TierFullError as error:
            # No tier has room for it now (the cache evicts by its own bytes,
            # not by each tier's): as a full cache, and the shard read remotely.
            raise CacheFullError(url, f"no tier has room for its copy ({error})") from error
        if folder not in self.directories:
            raise ValueError(f"placement chose {folder!r}, which is not one of the cache's "
                             f"directories {self.directories}")  # fmt: skip
        return folder

    def _timeout(
        self, state: _Process, url: str, size: int, step: _Step, elapsed: float
    ) -> CacheError:
        if step.outcome == "fetching" and step.entry is not None:
            holder = step.entry.owner.split("-")[0]
            return CacheTimeoutError(
                url, f"waited {elapsed:.1f} s (wait_timeout) for process {holder} to finish "
                "downloading it, or to stop using its older version"
            )  # fmt: skip
        with state.index.transaction():
            pinned = state.index.totals()["bytes_pinned"]
        return CacheFullError(
            url, f"no room for its {size} bytes after {elapsed:.1f} s (wait_timeout): "
            f"{pinned} of the cache's {self.max_bytes} bytes are shards in use (pinned)"
        )  # fmt: skip


def _size_on_disk(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None
