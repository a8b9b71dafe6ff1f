"""Open file descriptors shared by the reads of one reader, reference counted.

A descriptor stays open while any read uses it (closing it earlier would let the
number be reused for another file under a running read) and is then kept, up to
a limit, for the next range of the same file. A kept descriptor is checked
against the path before reuse, so a file replaced on disk is reopened.

With ``direct="auto"`` the page cache decides, per file as it is opened: a
file it mostly holds is read through it (memory speed, no device I/O); any
other with O_DIRECT, which reads a cold file at the device's speed without
spending the CPU a page-cache copy costs (on a small machine that CPU is the
decoder's), and leaves the cache to what is warm. A file reopened later (the
next epoch, once idle descriptors are closed) is judged again.

Where the data a reader serves fits in the page cache with room to spare
(``FileTable.cold_through_cache``: a Dataset gives its local shards' bytes as
``data_bytes``, weighed against :func:`page_cache_room` when a cold file is
first opened), cold files are read through the cache too: the first epoch
reads them a little slower than O_DIRECT would, and every later one finds
them there. Read with O_DIRECT, they would stay cold for good, each epoch at
the device's speed.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING, Literal

from fastio._errors import DirectIOFallbackWarning
from fastio._native import resident_fraction
from fastio.sources._objects import RemoteFile, is_remote, local_path

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastio.cache._filling import Filling, FillingReader
    from fastio.sources._remote import Remotes

__all__ = [
    "CACHED_ENOUGH",
    "RESIDENT_ENOUGH",
    "FileTable",
    "FollowedFile",
    "OpenFile",
    "fits_in_page_cache",
    "page_cache_room",
]

RESIDENT_ENOUGH = 0.5
"""With ``direct="auto"``: the share of a file's sampled pages the page cache
must hold for the file to be read through it."""

CACHED_ENOUGH = 0.9
"""The share of a file's sampled pages the page cache must hold for the
file's reads to count as memory copies (``OpenFile.cached``): a file read
through the cache with more missing waits for the device on those pages,
which reads in flight together hide."""

Direct = bool | Literal["auto"]

CACHE_SHARE = 0.5
"""With ``direct="auto"``: data of at most this share of :func:`page_cache_room`
is read through the page cache even where cold (see the module)."""

log = logging.getLogger("fastio")


class OpenFile:
    __slots__ = ("cached", "direct", "fd", "identity", "key", "path", "pinned_url", "refs", "size")

    def __init__(
        self,
        key: tuple[str, Direct],
        path: str,
        fd: int,
        direct: bool,
        st: os.stat_result,
        cached: bool = False,
    ) -> None:
        self.key = key
        self.path = path
        self.fd = fd
        self.direct = direct
        # Read through a page cache that held nearly all of it when opened
        # (CACHED_ENOUGH): its reads are memory copies, done as soon as started.
        self.cached = cached
        self.refs = 1
        self.pinned_url: str | None = None  # a shard cache copy held for this remote URL
        self.identity = _identity(st)
        self.size = st.st_size if stat.S_ISREG(st.st_mode) else _device_size(fd)


class FollowedFile(RemoteFile):
    """A remote object the shard cache is downloading in this process: read
    from the download's file as its bytes arrive (no descriptor for the
    engine: the reader awaits :attr:`reader`). Its pin is held until the last
    reference goes."""

    __slots__ = ("filling", "reader")

    def __init__(self, url: str, filling: Filling) -> None:
        super().__init__(url, filling.size, "")
        self.filling = filling
        self.reader: FillingReader = filling.reader()
        self.pinned_url = url


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _device_size(fd: int) -> int:
    return os.lseek(fd, 0, os.SEEK_END)


def _residency(fd: int, st: os.stat_result) -> float | None:
    """The share of the regular file ``fd``'s sampled pages the page cache
    holds; None for an empty file or one that cannot be mapped (read through
    the cache, but not known to be in it)."""
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return None
    try:
        # 32 windows of 64 KiB: a fraction of a millisecond, where whole
        # megabytes cost about one per file opened.
        return resident_fraction(fd, 0, st.st_size, 32, 64 << 10)
    except OSError:
        return None


def page_cache_room() -> int | None:
    """Bytes the page cache may hold for this process: the kernel's estimate
    of memory available without swapping (``MemAvailable``, which counts the
    page cache that could be reclaimed), bounded by this process's cgroup
    memory limit (v1 or v2) less the memory its processes hold otherwise
    (page cache counts against a container's limit). None where the kernel
    does not say."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            fields = dict(line.split(b":", 1) for line in meminfo if b":" in line)
        room = int(fields[b"MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
    limited = _cgroup_room()
    return room if limited is None else min(room, limited)


def _cgroup_room() -> int | None:
    """This process's cgroup memory limit less what its processes hold
    beyond the page cache (anonymous memory, kernel memory), or None without
    a limit. Both cgroup versions: v2 (``memory.max``) and v1 (the ``memory``
    controller's ``memory.limit_in_bytes``, unlimited as a huge number)."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as listing:
            lines = [line.rstrip("\n").split(":", 2) for line in listing]
    except OSError:
        return None
    for _, controllers, path in (line for line in lines if len(line) == 3):
        if "memory" in controllers.split(","):  # v1
            folder = os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
            room = _room(folder, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_cache")
            if room is not None:
                return room
        elif controllers == "":  # v2: the unified hierarchy, alone or beside v1's
            for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                folder = os.path.join(mount, path.lstrip("/"))
                room = _room(folder, "memory.max", "memory.current", "file")
                if room is not None:
                    return room
    return None


def _room(folder: str, limit_name: str, usage_name: str, cache_field: str) -> int | None:
    """``limit_name`` less (``usage_name`` less the page cache, the
    ``cache_field`` of ``memory.stat``) in the cgroup ``folder``; None where
    those files are not there or there is no limit."""
    try:
        with open(os.path.join(folder, limit_name), encoding="utf-8") as limit_file:
            limit = limit_file.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(folder, usage_name), encoding="utf-8") as usage_file:
            usage = int(usage_file.read())
        with open(os.path.join(folder, "memory.stat"), encoding="utf-8") as stat_file:
            cached = next(int(line.split()[1]) for line in stat_file
                          if line.startswith(cache_field + " "))  # fmt: skip
        return max(0, int(limit) - (usage - cached))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def fits_in_page_cache(nbytes: int, room: int | None) -> bool:
    """Whether ``nbytes`` of data fit in the page cache with room to spare
    (``CACHE_SHARE`` of ``room``, see :func:`page_cache_room`); False where
    the room is not known."""
    return room is not None and nbytes <= room * CACHE_SHARE


def open_for_reading(path: str, flags: int) -> tuple[int, os.stat_result]:
    """``path`` opened with ``flags``, and its stat. Not blocking until it is
    known to be a file: a FIFO without a writer would wait in open() for
    ever. A regular file or block device is made blocking again (io_uring
    refuses a read that must wait on a file left non-blocking); anything
    else is left as it is, for the caller to refuse."""
    fd = os.open(path, flags | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) or stat.S_ISBLK(st.st_mode):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _set_direct(fd: int) -> bool:
    """Switch ``fd`` to O_DIRECT; False where its filesystem refuses (tmpfs on
    older kernels, some FUSE and network filesystems): the reads then go
    through the page cache, silently, as ``"auto"`` promises nothing more."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
        return False
    return True


class FileTable:
    def __init__(self, max_idle: int, remotes: Callable[[], Remotes] | None = None) -> None:
        # At most a quarter of the descriptors the process may open are kept
        # idle (a low `ulimit -n`): the rest are for the files still to open.
        soft = os.sysconf("SC_OPEN_MAX")  # RLIMIT_NOFILE's soft limit; -1 where unlimited
        if soft > 0:
            max_idle = min(max_idle, max(1, soft // 4))
        self._max_idle = max_idle
        self._remotes = remotes  # the reader's remote clients, made when first asked for
        self._files: dict[tuple[str, Direct], OpenFile] = {}
        self._idle: OrderedDict[tuple[str, Direct], OpenFile] = OrderedDict()
        self._direct_refused: set[int] = set()  # st_dev of filesystems that refused O_DIRECT
        # The bytes of the local files this table's reader serves (a Dataset's
        # shards), where known, and whether cold ones are read through the
        # page cache with direct="auto" (see the module): decided when a cold
        # file is first opened, unless set.
        self._data_bytes: int | None = None
        self._cold_through_cache: bool | None = False
        self._followed: dict[str, FollowedFile] = {}  # downloads read as they arrive, by URL
        # The cache copy released last, still pinned while idle: the reads of
        # one file come one after another (a Parquet file's row groups, a
        # tar's ranges), and each would otherwise pin and unpin it anew, two
        # transactions of the cache's index per read.
        self._kept_pin: OpenFile | None = None
        self._pinned: dict[str, OpenFile] = {}  # by URL, the open copies that hold a pin

    @property
    def data_bytes(self) -> int | None:
        return self._data_bytes

    @data_bytes.setter
    def data_bytes(self, value: int | None) -> None:
        self._data_bytes = value
        self._cold_through_cache = None if value else False

    @property
    def cold_through_cache(self) -> bool:
        if self._cold_through_cache is None:
            assert self._data_bytes is not None
            self._cold_through_cache = fits_in_page_cache(self._data_bytes, page_cache_room())
        return self._cold_through_cache

    @cold_through_cache.setter
    def cold_through_cache(self, value: bool) -> None:
        self._cold_through_cache = value

    def take_choices(self, other: FileTable) -> None:
        """Read cold files as ``other`` does (a forked child's table, its parent's)."""
        self._data_bytes, self._cold_through_cache = other._data_bytes, other._cold_through_cache

    def acquire(self, path: str, direct: Direct) -> OpenFile:
        """An open file for ``path`` with one more reference (read with O_DIRECT
        as ``direct`` says; ``"auto"``: as the page cache holds it, see the
        module's doc). Raises the OSError
        subclass of the failure (FileNotFoundError, PermissionError,
        IsADirectoryError, ...) with ``filename`` set."""
        if self._remotes is not None and is_remote(path):
            remotes = self._remotes()
            if remotes.cache is None:
                return remotes.opening(path)  # type: ignore[return-value]  # same shape
            return self._acquire_cached(path, direct)
        path = local_path(path)
        key = (path, direct)
        file = self._files.get(key)
        if file is not None:
            if file.refs == 0:
                del self._idle[key]
                if self._is_stale(file):
                    self._close(file)
                    return self._open(key, path, direct)
            file.refs += 1
            return file
        return self._open(key, path, direct)

    def _acquire_cached(self, url: str, direct: Direct) -> OpenFile:
        """The shard cache's local copy of a remote object, read by the native
        engine. The copy stays pinned (never evicted) while referenced."""
        assert self._remotes is not None
        remotes = self._remotes()
        assert remotes.cache is not None
        from fastio._errors import CacheFullError, CacheTimeoutError, CacheUnavailableError

        held = self._pinned.get(url)
        if held is not None and held.fd >= 0:  # its pin held already: no transaction
            if not held.refs:
                self._idle.pop(held.key, None)
            if held is self._kept_pin:
                self._kept_pin = None
            held.refs += 1
            return held
        try:
            try:
                local = remotes.local_copy(url)  # pins once
            except CacheFullError:
                if self._kept_pin is None:
                    raise
                self._let_go_of_kept_pin()  # the room it holds may be what this needs
                local = remotes.local_copy(url)
        except (CacheFullError, CacheTimeoutError) as error:
            # No room now (shards in use hold it, or the cache's filesystem is
            # full) or another process is downloading it: read this one
            # remotely rather than wait.
            log.debug("fastio: %s; reading it remotely", error)
            return remotes.opened(url)  # type: ignore[return-value]
        except CacheUnavailableError as error:  # the cache's folder refuses copies
            remotes.refused(error)
            return remotes.opened(url)  # type: ignore[return-value]
        if not isinstance(local, str):  # being downloaded here: read as it arrives
            followed = self._followed.get(url)
            if followed is not None and followed.filling is local:
                followed.refs += 1
                self._unpin(url)  # already pinned for an earlier reference
                return followed  # type: ignore[return-value]  # same shape
            followed = self._followed[url] = FollowedFile(url, local)
            return followed  # type: ignore[return-value]
        try:
            file = self.acquire(local, direct)
        except BaseException:
            self._unpin(url)
            raise
        if file.pinned_url is None:
            file.pinned_url = url  # this pin is held until the last reference goes
            self._pinned[url] = file
        else:
            self._unpin(url)  # already pinned for an earlier reference
        return file

    def _unpin(self, url: str) -> None:
        """Let the cache's copy of ``url`` go. A cache that cannot record it
        (a full disk) keeps the pin until it is closed: the read goes on."""
        assert self._remotes is not None
        cache = self._remotes().cache
        assert cache is not None
        from fastio._errors import CacheError

        try:
            cache.release(url)
        except CacheError as error:
            log.warning("fastio: %s", error)

    def release(self, file: OpenFile | RemoteFile) -> None:
        if isinstance(file, FollowedFile):
            file.refs -= 1
            if not file.refs:
                file.reader.close()
                if self._followed.get(file.path) is file:
                    del self._followed[file.path]
                self._unpin(file.path)
            return
        if isinstance(file, RemoteFile):
            return  # nothing is held open for a remote object
        file.refs -= 1
        if not file.refs and file.pinned_url is not None:
            if file.fd < 0:
                self._unpin_file(file)
            elif self._kept_pin is not file:  # kept pinned while it is the last released
                self._let_go_of_kept_pin()
                self._kept_pin = file
        if file.refs or file.fd < 0:
            return
        self._idle[file.key] = file
        while len(self._idle) > self._max_idle:
            _, oldest = self._idle.popitem(last=False)
            self._close(oldest)

    def close_all(self, unpin: bool = True) -> None:
        """Close every descriptor, also those still referenced: for shutdown once
        no read is in flight, and in a forked child (the copies are its own;
        ``unpin=False``: the pins are its parent's)."""
        if unpin:
            self._let_go_of_kept_pin()
        self._kept_pin = None
        self._pinned.clear()
        for file in list(self._files.values()):
            self._close(file)
        for followed in self._followed.values():
            followed.reader.close()
        self._followed.clear()

    def _let_go_of_kept_pin(self) -> None:
        kept, self._kept_pin = self._kept_pin, None
        if kept is not None and not kept.refs:
            self._unpin_file(kept)

    def _unpin_file(self, file: OpenFile) -> None:
        url, file.pinned_url = file.pinned_url, None
        if url is None:
            return
        if self._pinned.get(url) is file:
            del self._pinned[url]
        if self._remotes is not None and self._remotes().cache is not None:
            self._unpin(url)

    def _close(self, file: OpenFile) -> None:
        if file is self._kept_pin:
            self._let_go_of_kept_pin()
        del self._files[file.key]
        self._idle.pop(file.key, None)
        os.close(file.fd)
        file.fd = -1

    def _is_stale(self, file: OpenFile) -> bool:
        try:
            return _identity(os.stat(file.path)) != file.identity
        except OSError:
            return True  # reopening raises the real error with the path

    def _open(self, key: tuple[str, Direct], path: str, direct: Direct) -> OpenFile:
        try:
            return self._open_once(key, path, direct)
        except OSError as error:
            if error.errno not in (errno.EMFILE, errno.ENFILE) or not self._idle:
                raise
        # The process's descriptors ran out (a low `ulimit -n`): the idle ones
        # kept for reuse go first, and are kept no more than half as many after.
        while self._idle:
            self._close(self._idle.popitem(last=False)[1])
        self._max_idle = max(1, self._max_idle // 2)
        log.warning("fastio: too many open files: idle file descriptors kept for reuse "
                    "closed, and at most %d kept from now on (raise `ulimit -n`, or set "
                    "max_idle_files)", self._max_idle)  # fmt: skip
        return self._open_once(key, path, direct)

    def _open_once(self, key: tuple[str, Direct], path: str, direct: Direct) -> OpenFile:
        flags = os.O_RDONLY | os.O_CLOEXEC
        opened_direct = False
        if direct is True:
            try:
                fd, st = open_for_reading(path, flags | os.O_DIRECT)
                opened_direct = True
            except OSError as error:
                if error.errno != errno.EINVAL:
                    raise
                fd, st = open_for_reading(path, flags)
                self._warn_direct_refused(path, st)
        else:
            fd, st = open_for_reading(path, flags)
        file: OpenFile | None = None
        try:
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(
                    errno.EISDIR,
                    f"{os.strerror(errno.EISDIR)} (for the shards in a folder, name it with "
                    "a trailing /)",
                    path,
                )
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISBLK(st.st_mode)):
                raise OSError(errno.EINVAL, "not a regular file or block device", path)
            # Through the page cache by choice ("auto" or False): how much it holds.
            residency = None if direct is True else _residency(fd, st)
            if (direct == "auto" and residency is not None and residency < RESIDENT_ENOUGH
                    and not self.cold_through_cache):  # fmt: skip
                opened_direct = _set_direct(fd)
            cached = not opened_direct and residency is not None and residency >= CACHED_ENOUGH
            file = OpenFile(key, path, fd, opened_direct, st, cached=cached)
        finally:
            if file is None:
                os.close(fd)
        self._files[key] = file
        return file

    def _warn_direct_refused(self, path: str, st: os.stat_result) -> None:
        dev = st.st_dev
        if dev in self._direct_refused or not stat.S_ISREG(st.st_mode):
            return  # (a folder, a FIFO: refused for what they are, just below)
        self._direct_refused.add(dev)
        warnings.warn(
            DirectIOFallbackWarning(
                f"{path}: the filesystem refuses O_DIRECT; reading it through the page cache"
            ),
            stacklevel=2,
        )
