"""A file of numbers mapped by the processes of one rank (see the package).

Zeros are a valid empty array, so the file needs no initialisation and any
process may create it (``O_CREAT`` without ``O_EXCL``). Only the process that
named it (its *owner*, whose pid is in the name) removes it; files of owners
that died without cleaning up (killed by SIGKILL, or stopped by SIGTERM) are
removed by the next process that names one on the machine, and by a process
that named one as it exits (its DataLoader workers', stopped as it exits). Not
``multiprocessing.shared_memory``: its resource tracker would count every
worker's attach as a leak. Changes that must not interleave are made under an
exclusive ``flock`` of the file, and the file grows under it too: a process
that read the size before another one grew the file and wrote past the old
end would otherwise set the old size again, zeroing what was written there.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import mmap
import os
import tempfile
import threading
import weakref
from multiprocessing import util
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterator

    from typing_extensions import Self

__all__ = [
    "OwnedFile",
    "SharedArray",
    "mark",
    "marked",
    "remove_owned",
    "shared_folder",
    "shared_path",
]

PREFIX = "fastio-"
_HEX = frozenset("0123456789abcdef")
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")
_named_here: set[int] = set()  # processes that named a shared file (see shared_path)
_swept: set[int] = set()  # processes that removed stale files already


def shared_folder() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def shared_path(kind: str) -> str:
    """A new name for a shared file of ``kind`` owned by this process. The
    first file such a process makes sweeps away the files of every kind whose
    owner is gone (one listing of the folder, see :func:`_sweep_once`)."""
    if os.getpid() not in _named_here:
        _named_here.add(os.getpid())
        # And again as it exits, once multiprocessing has stopped and joined
        # its daemonic children (a negative priority runs after that): DataLoader
        # workers, which it stops with SIGTERM, before their own clean-up runs,
        # when the main process exits mid-epoch (an exception in training).
        util.Finalize(None, _sweep, args=(shared_folder(),), exitpriority=-100)
    return _named(kind, os.getpid(), os.urandom(6).hex())


def _sweep_once() -> None:
    """Where this process named shared files, sweep the stale ones as it
    makes its first: not as it names them, which a dataset does as it is
    made (a first sample read without workers makes none, nor waits for
    the listing)."""
    pid = os.getpid()
    if pid in _named_here and pid not in _swept:
        _swept.add(pid)
        _sweep(shared_folder())


def _named(kind: str, owner: int, token: str) -> str:
    """The shared file of ``kind`` that process ``owner`` owns, told apart by
    ``token`` (12 hex digits): as :func:`owner_of` reads the owner back."""
    return os.path.join(shared_folder(), f"{PREFIX}{kind}-{owner}-{token[:12]}")


class OwnedFile:
    """A shared file of ``kind`` (see :func:`shared_path`), named by the
    process that made the object and removed when that process's object
    goes; pickled as its name and owner, for the processes that share it."""

    kind = "shared"

    def __init__(self) -> None:
        self._path = shared_path(self.kind)
        self._owner = os.getpid()
        self._made()

    def _made(self) -> None:
        self._finalizer = weakref.finalize(self, remove_owned, self._path, self._owner)

    def __getstate__(self) -> dict[str, Any]:
        return {"_path": self._path, "_owner": self._owner}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._made()

    def regrouped(self, group: int) -> Self:
        """A copy with a file of its own for the processes of ``group`` (a
        pid, the file's owner): named from this file's name and the pid, so
        that every process of the group, asking on its own, gets the same."""
        token = hashlib.sha256(os.path.basename(self._path).encode()).hexdigest()[:12]
        state = self.__getstate__()
        state.update(_path=_named(self.kind, group, token), _owner=group)
        made = type(self).__new__(type(self))
        made.__setstate__(state)
        return made


def owner_of(path: str) -> int | None:
    """The pid in the name of a shared file :func:`shared_path` named (None
    for a name it does not make): ``fastio-<kind>-<pid>-<token>``, a kind of
    lowercase letters and a token of 12 hex digits. Read with string methods:
    a pattern compiled at the sweep before a first sample cost a fresh
    process a fifth of a millisecond."""
    name = os.path.basename(path)
    if not name.startswith(PREFIX):
        return None
    kind, _, rest = name[len(PREFIX) :].partition("-")
    owner, _, token = rest.partition("-")
    named = (kind and _LOWER.issuperset(kind) and owner.isdecimal()
             and len(token) == 12 and _HEX.issuperset(token))  # fmt: skip
    return int(owner) if named else None


class SharedArray:
    """``length`` numbers of ``dtype`` in the file at ``path`` (made, or grown,
    as needed), as :attr:`values`. No descriptor stays open: the lock opens
    the file anew each time, so a forked child never shares its parent's lock."""

    def __init__(self, path: str, dtype: type[np.number], length: int) -> None:
        _sweep_once()
        self.path = path
        self.dtype = np.dtype(dtype)
        self._map: mmap.mmap | None = None
        self._holder: int | None = None  # the thread in :meth:`locked`, if any
        self.values = np.zeros(0, self.dtype)
        self.ensure(length)

    def ensure(self, length: int) -> None:
        """Map at least ``length`` numbers, growing the file if it is shorter:
        under the file's lock (taken here unless this thread holds it), with
        the size read again under it, so that a file grown meanwhile by
        another process is never shortened."""
        nbytes = self.dtype.itemsize * length
        if self._map is not None and len(self._map) >= nbytes:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size < nbytes:
                lock = self._holder != threading.get_ident()
                if lock:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    size = os.fstat(fd).st_size
                    if size < nbytes:
                        os.ftruncate(fd, nbytes)
                finally:
                    if lock:
                        fcntl.flock(fd, fcntl.LOCK_UN)
            mapped = mmap.mmap(fd, max(size, nbytes))
        finally:
            os.close(fd)
        self.values = np.zeros(0, self.dtype)
        if self._map is not None:
            with contextlib.suppress(BufferError):  # views elsewhere keep the old map alive
                self._map.close()
        self._map = mapped
        self.values = np.frombuffer(mapped, self.dtype)

    @contextlib.contextmanager
    def locked(self, wait: bool = True) -> Iterator[bool]:
        """Hold the file's exclusive lock; with ``wait=False`` only if no other
        process does. Yields whether it holds it. Raises FileNotFoundError once
        the owner removed the file."""
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            self._holder = threading.get_ident()
            try:
                yield True
            finally:
                self._holder = None
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Unmap. A view still held elsewhere keeps the mapping until it goes."""
        self.values = np.zeros(0, self.dtype)
        if self._map is not None:
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None


# The kinds of :func:`mark`: their files go as their owner process exits.
MARKS = ("firstpass",)


def mark(kind: str, key: str, owner: int) -> None:
    """Leave an empty file saying that process ``owner`` holds ``key`` (the
    first 12 hex digits of a digest), for :func:`marked` to find while it
    lives. It goes as ``owner`` exits (``owner`` may be the parent of the
    process that marks: a DataLoader worker marks for its main process),
    or, where that does not run (killed), with the files of owners that are
    gone."""
    if kind not in MARKS:
        raise ValueError(f"{kind!r} is not a kind of mark ({', '.join(MARKS)})")
    path = _named(kind, owner, key)
    with contextlib.suppress(OSError):  # a folder that takes no file: nothing is shared
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))


@atexit.register
def _remove_own_marks() -> None:
    """This process's marks, as it exits (a forked child that ends with
    ``os._exit``, a DataLoader worker, leaves its parent's alone)."""
    folder, own = shared_folder(), [f"{PREFIX}{kind}-{os.getpid()}-" for kind in MARKS]
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if name.startswith(tuple(own)):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))


def marked(kind: str, key: str) -> bool:
    """Whether a live process of this machine left a :func:`mark` of ``key``."""
    suffix = f"-{key[:12]}"
    try:
        names = [name for name in os.listdir(shared_folder())
                 if name.startswith(f"{PREFIX}{kind}-") and name.endswith(suffix)]  # fmt: skip
    except OSError:
        return False
    return any(_alive(owner) for owner in map(owner_of, names) if owner is not None)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def remove_owned(path: str, owner: int) -> None:
    """Remove the file, in its owner process only (a forked child that collects
    its copy of an object must not remove the parent's file)."""
    if os.getpid() == owner:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _sweep(folder: str) -> None:
    """Remove the files :func:`shared_path` named whose owner process is gone."""
    try:
        names = [name for name in os.listdir(folder) if name.startswith(PREFIX)]
    except OSError:
        return
    alive: dict[int, bool] = {}  # asked once an owner (a process has files of several kinds)
    for name in names:
        owner = owner_of(name)
        if owner is None:
            continue
        if owner not in alive:
            alive[owner] = _alive(owner)
        if not alive[owner]:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
