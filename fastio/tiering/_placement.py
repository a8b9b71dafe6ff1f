"""Placing real files on tiers: :class:`Tiering`, its temporaries and the cache hook.

::

    tiering = Tiering([Tier("ssd", "/nvme/tmp", 50 << 30), Tier("hdd", "/data/tmp", 2 << 40)])
    with tiering.temporary("spill", size=1 << 30, access="random") as file:
        file.write(data)                 # counted: operations, bytes, growth
        file.pread(4096, offset)
    cache = ShardCache(tiering.directories, 100 << 30, placement=tiering)

A new file goes to the fastest tier that can hold its size hint, where its
predicted density beats the residents it would displace: those colder than it
are demoted (migrated) to the next tier. Every byte is reserved before it is
written, growth included, so **no tier ever holds more than its capacity**;
a file that cannot grow where it is moves down, and a file that fits nowhere
raises :class:`TierFullError` (an OSError with ENOSPC).

**Migration is safe for readers**: the copy goes to a temporary name in the
new tier, is flushed to disk, then renamed into place, and only then does the
registry point at it and the old name go. A reader holding a descriptor keeps
reading the old inode (complete); :meth:`TieredFile.open_reader` opens under the
registry's lock, so it sees one complete copy or the other, never a torn file.
The owner's descriptor is switched with ``dup2``, so its own reads and writes
carry on. Accounting is per ``Tiering`` object (one process); processes
sharing tiers should give each its own share of the capacity.

**What a killed process leaves is removed.** Each temporary (and each copy a
migration is writing) is locked (``flock``) by its owner from before its name
exists until it is removed; a new ``Tiering`` removes the files of its naming
in its tiers that no process holds: those of a process that died without
closing them (killed, or out of memory), which would otherwise fill the tiers
past their budgets unseen. A lock on the tier's directory keeps a removal
from meeting a file between its creation and its owner's lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import re
import secrets
import stat
import threading
import time
from typing import TYPE_CHECKING, Any

from fastio._errors import TierFullError
from fastio.tiering._model import DensityModel, Features, Outcome
from fastio.tiering._policies import coldest_first

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from _typeshed import ReadableBuffer

    from fastio.tiering._model import Access
    from fastio.tiering._tiers import Tier

__all__ = ["TieredFile", "Tiering"]

_COPY_BLOCK = 1 << 20
_UNSEEN_GRACE = 600.0  # seconds a cache copy may take to appear before it counts as gone
_MIGRATING = ".migrating-"
# What :class:`TieredFile` names its files (``.fastio-<kind>-<16 hex><suffix>``),
# and a migration its copies: what a sweep may remove, once no owner holds it.
_TEMPORARY = re.compile(rf"^(?:{re.escape(_MIGRATING)})?\.fastio-.+-[0-9a-f]{{16}}")


# A filesystem without ``flock``: its files are made without locks, and a
# sweep removes none of them (it removes only what it could lock).
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}


def _lock(fd: int, operation: int) -> None:
    try:
        fcntl.flock(fd, operation)
    except OSError as error:
        if error.errno not in _NO_LOCKS:
            raise


@contextlib.contextmanager
def _tier_lock(folder: str, operation: int) -> Iterator[None]:
    """``flock`` ``operation`` on the tier's directory: shared while a file
    is made and locked by its owner, exclusive while a sweep looks."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _lock(fd, operation)
        yield
    finally:
        os.close(fd)  # the lock goes with it


def _create_owned(path: str) -> int:
    """A new file at ``path``, read-write, locked by this process (its open
    file description: forked children share it) before its name can be seen
    unlocked. Raises OSError (FileExistsError where the name is taken)."""
    with _tier_lock(os.path.dirname(path), fcntl.LOCK_SH):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            _lock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            os.remove(path)
            raise
    return fd


def sweep_orphans(folder: str) -> list[str]:
    """Remove the temporaries in ``folder`` that no live process holds (see
    the module); returns their names. A file another process holds is left;
    one that cannot be looked at is left too."""
    removed: list[str] = []
    with _tier_lock(folder, fcntl.LOCK_EX):
        for name in os.listdir(folder):
            if not _TEMPORARY.match(name):
                continue
            path = os.path.join(folder, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: its owner lives
            finally:
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
                removed.append(name)
    return removed


class _Placed:
    """A file the tiering accounts for: its tier, reserved bytes and I/O so far."""

    def __init__(self, number: int, tier: Tier, features: Features, reserved: int,
                 movable: bool) -> None:  # fmt: skip
        self.number = number
        self.tier = tier
        self.features = features
        self.reserved = reserved
        self.movable = movable
        self.created = time.monotonic()
        self.operations = self.bytes_read = self.bytes_written = 0
        self.predicted = 0.0
        self.handle: TieredFile | None = None
        self.key = ""  # a shard cache copy's key
        self.seen = False


class Tiering:
    """Tiers of directories (fastest first by media kind) and the policy placing
    files on them by predicted I/O density. Callable as a :class:`ShardCache`
    placement hook. ``prior_seconds``: how much observed I/O it takes to
    overrule a prediction. Raises ValueError for no tiers or repeated names or paths."""

    def __init__(self, tiers: Sequence[Tier], model: DensityModel | None = None, *,
                 prior_seconds: float = 60.0, job: str | None = None) -> None:  # fmt: skip
        if not tiers:
            raise ValueError("tiering needs at least one tier")
        for attribute in ("name", "path"):
            values = [getattr(tier, attribute) for tier in tiers]
            if len(set(values)) != len(values):
                raise ValueError(f"tiers must have distinct {attribute}s, not {values}")
        self.tiers = sorted(tiers, key=lambda tier: tier.rank)
        self.model = model if model is not None else DensityModel()
        self.prior_seconds = prior_seconds
        self.job = job if job is not None else f"{os.getpid()}-{secrets.token_hex(3)}"
        self.outcomes: list[Outcome] = []
        self.migrations = 0
        self._lock = threading.RLock()
        self._files: dict[int, _Placed] = {}
        self._numbers = itertools.count()
        self.swept: list[str] = []
        """Paths of files left by processes that died, removed when this was made."""
        for tier in self.tiers:
            with contextlib.suppress(OSError):  # a tier it cannot sweep still works
                self.swept += [os.path.join(tier.path, name) for name in sweep_orphans(tier.path)]

    @property
    def directories(self) -> list[str]:
        """The tiers' paths, fastest first: a :class:`ShardCache`'s directories."""
        return [tier.path for tier in self.tiers]

    def usage(self) -> dict[str, int]:
        """Bytes reserved in each tier (by name); never above its capacity."""
        with self._lock:
            self._reconcile()
            return {tier.name: self._used(tier) for tier in self.tiers}

    def tier_of(self, path: str) -> Tier:
        """The tier whose directory holds ``path``. Raises ValueError for none."""
        folder = os.path.dirname(os.path.abspath(path))
        for tier in self.tiers:
            if tier.path == folder:
                return tier
        raise ValueError(f"{path} is in none of the tiers {self.directories}")

    # ---- placing -----------------------------------------------------------------------------

    def temporary(self, kind: str = "user", size: int = 0, *, format: str = "",
                  access: Access = "sequential", reuse: float = 1.0, producer: str = "",
                  suffix: str = "") -> TieredFile:  # fmt: skip
        """A new empty file, read-write, placed by the policy for ``size`` bytes
        (a hint: it may grow). Removed, and its I/O recorded, when closed (use
        it as a context manager). Raises TierFullError where nothing fits."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be a byte count, not {size!r}")
        features = Features(kind, size, format, access, reuse, producer, self.job)
        with self._lock:
            placed = self._place(features, size, movable=True)
            try:
                return TieredFile(self, placed, suffix)
            except BaseException:
                del self._files[placed.number]
                raise

    def __call__(self, key: str, size: int, kind: str, reuse: float = 1.0) -> str:
        """The :class:`ShardCache` hook: the directory for a new cache file
        that the epoch plans will read ``reuse`` times. The copy's space is held
        until the cache removes it (seen at the next call or :meth:`usage`)."""
        features = Features(kind, size, "", "sequential", reuse, "fastio.cache", self.job)
        with self._lock:
            self._reconcile()
            for placed in list(self._files.values()):
                if placed.key == key:  # a new version replaces the old copy
                    self._finish(placed)
            placed = self._place(features, size, movable=False)
            placed.key = key
            placed.operations, placed.bytes_written = 1, size  # the download
            return placed.tier.path

    def record_use(self, path: str, size: int) -> None:
        """A shard cache copy at ``path`` was read whole (the cache's hit hook)."""
        name = os.path.basename(path)
        with self._lock:
            for placed in self._files.values():
                if placed.key and name.startswith(placed.key):
                    placed.operations += 1
                    placed.bytes_read += size
                    placed.seen = True

    def _place(self, features: Features, size: int, movable: bool) -> _Placed:
        predicted = float(self.model.predict([features])[0])
        for tier in self.tiers:
            if self._make_room(tier, size, predicted):
                placed = _Placed(next(self._numbers), tier, features, size, movable)
                placed.predicted = predicted
                self._files[placed.number] = placed
                return placed
        raise TierFullError(f"no tier has room for {size} bytes: "
                            f"{self._describe()}")  # fmt: skip

    def _make_room(self, tier: Tier, size: int, density: float,
                   keep: _Placed | None = None) -> bool:  # fmt: skip
        """Whether ``tier`` can take ``size`` more bytes, after demoting its
        movable files colder than ``density`` (never ``keep``) to slower tiers."""
        need = self._used(tier) + size - tier.capacity
        if need <= 0:
            return True
        if size > tier.capacity:
            return False
        numbers = coldest_first(
            ((self.estimate(placed), placed.number, placed.reserved)
             for placed in self._files.values()
             if placed.tier is tier and placed.movable and placed is not keep),
            density, need,
        )  # fmt: skip
        if numbers is None:
            return False
        for victim in [self._files[number] for number in numbers]:
            slower = [t for t in self.tiers if t.rank >= tier.rank and t is not tier]
            target = next((t for t in slower if self._used(t) + victim.reserved <= t.capacity),
                          None)  # fmt: skip
            if target is None:
                return False
            self._migrate(victim, target)
        return self._used(tier) + size <= tier.capacity

    def estimate(self, placed: _Placed) -> float:
        """The density believed now: the prediction, blended with the I/O seen."""
        size = max(placed.reserved, 1)
        age = time.monotonic() - placed.created
        rate = placed.predicted * size * self.prior_seconds + placed.operations
        return rate / (self.prior_seconds + age) / size

    def _used(self, tier: Tier) -> int:
        return sum(placed.reserved for placed in self._files.values() if placed.tier is tier)

    def _describe(self) -> str:
        return ", ".join(f"{t.name} {self._used(t)}/{t.capacity}" for t in self.tiers)

    # ---- growing, moving, ending -------------------------------------------------------------

    def _grow(self, placed: _Placed, size: int) -> None:
        """Reserve up to ``size`` bytes for ``placed``, moving it down if need be."""
        with self._lock:
            extra = size - placed.reserved
            if extra <= 0:
                return
            density = self.estimate(placed)
            if self._make_room(placed.tier, extra, density, keep=placed):
                placed.reserved = size
                return
            for tier in self.tiers:
                if tier.rank > placed.tier.rank and self._used(tier) + size <= tier.capacity:
                    self._migrate(placed, tier)
                    placed.reserved = size
                    return
            raise TierFullError(f"no tier has room to grow a file to {size} bytes: "
                                f"{self._describe()}")  # fmt: skip

    def migrate(self, file: TieredFile, tier_name: str) -> None:
        """Move ``file`` to the tier named ``tier_name`` (see the module's notes on
        readers). Raises KeyError for an unknown tier, TierFullError for no room."""
        target = next((t for t in self.tiers if t.name == tier_name), None)
        if target is None:
            raise KeyError(f"no tier named {tier_name!r}")
        with self._lock:
            placed = file._placed
            if placed.tier is target:
                return
            if self._used(target) + placed.reserved > target.capacity:
                raise TierFullError(f"tier {target.name} has no room for {placed.reserved} "
                                    f"bytes: {self._describe()}")  # fmt: skip
            self._migrate(placed, target)

    def _migrate(self, placed: _Placed, target: Tier) -> None:
        handle = placed.handle
        assert handle is not None, "only temporaries are movable"
        with handle._io:
            new_path = os.path.join(target.path, os.path.basename(handle.path))
            temp = os.path.join(target.path, f"{_MIGRATING}{os.path.basename(handle.path)}")
            fd = _create_owned(temp)  # its lock passes to the owner's descriptor with it
            try:
                offset = 0
                while block := os.pread(handle._fd, _COPY_BLOCK, offset):
                    os.pwrite(fd, block, offset)
                    offset += len(block)
                os.fsync(fd)  # on disk before the name: a crash leaves the old copy whole
                os.rename(temp, new_path)
            except BaseException:
                os.close(fd)
                with contextlib.suppress(FileNotFoundError):
                    os.remove(temp)
                raise
            old_path = handle.path
            os.dup2(fd, handle._fd)  # the owner's descriptor now reads the new copy
            os.close(fd)
            handle.path = new_path
            placed.tier = target
            # Open readers keep the old inode until they close. Unlocked since
            # the dup2, it may have been swept already.
            with contextlib.suppress(FileNotFoundError):
                os.remove(old_path)
        self.migrations += 1

    def _finish(self, placed: _Placed, size: int | None = None) -> None:
        """Forget ``placed`` (``size`` bytes at the end) and learn its outcome."""
        del self._files[placed.number]
        size = placed.reserved if size is None else size
        outcome = Outcome(placed.features, max(size, 1), placed.operations,
                          placed.bytes_read, placed.bytes_written,
                          time.monotonic() - placed.created)  # fmt: skip
        self.outcomes.append(outcome)
        self.model.update([outcome])

    def _reconcile(self) -> None:
        """Cache copies the cache has removed since: their space is free again."""
        copies = [placed for placed in self._files.values() if placed.key]
        if not copies:
            return
        names = {tier.path: os.listdir(tier.path) for tier in self.tiers}
        for placed in copies:
            present = any(placed.key in name for name in names[placed.tier.path])
            if present:
                placed.seen = True
            elif placed.seen or time.monotonic() - placed.created > _UNSEEN_GRACE:
                self._finish(placed)

    def close(self) -> None:
        """Close every temporary still open (removing it)."""
        with self._lock:
            handles = [p.handle for p in self._files.values() if p.handle is not None]
        for handle in handles:
            handle.close()

    def __enter__(self) -> Tiering:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # Another process accounts for its own files: tiers and the model travel.
        return {"tiers": self.tiers, "model": self.model, "prior_seconds": self.prior_seconds}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["tiers"], state["model"],  # type: ignore[misc]
                      prior_seconds=state["prior_seconds"])  # fmt: skip

    def __repr__(self) -> str:
        return f"Tiering({self._describe()})"


class TieredFile:
    """A temporary file in a tier, unbuffered: each call is one counted operation.

    ``path`` is where it is now (a migration changes it). Positioned calls
    (:meth:`pread`, :meth:`pwrite`) and the stream ones (:meth:`read`,
    :meth:`write`, :meth:`seek`) both work; writes past the reserved size
    reserve more first (TierFullError where no tier has room).
    """

    def __init__(self, tiering: Tiering, placed: _Placed, suffix: str) -> None:
        self._tiering = tiering
        self._placed = placed
        self._io = threading.RLock()
        name = f".fastio-{placed.features.kind}-{secrets.token_hex(8)}{suffix}"
        self.path = os.path.join(placed.tier.path, name)
        self._fd = _create_owned(self.path)
        self._position = 0
        self._size = 0
        self.closed = False
        placed.handle = self

    @property
    def tier(self) -> Tier:
        return self._placed.tier

    @property
    def size(self) -> int:
        return self._size

    @property
    def operations(self) -> int:
        return self._placed.operations

    def fileno(self) -> int:
        return self._fd

    def _check(self) -> None:
        if self.closed:
            raise ValueError("I/O on a closed tiered file")

    def pwrite(self, data: ReadableBuffer, offset: int) -> int:
        """Write all of ``data`` at ``offset`` (a filesystem that takes part of
        it is asked again for the rest); returns its length. Raises OSError
        naming this file and its tier where the filesystem refuses (full:
        its real room may be less than the tier's declared capacity)."""
        self._check()
        view = memoryview(data).cast("B")
        end = offset + view.nbytes
        self._tiering._grow(self._placed, end)  # before the I/O lock: it may move this file
        with self._io:
            placed, done = self._placed, 0
            try:
                while done < view.nbytes:
                    written = os.pwrite(self._fd, view[done:], offset + done)
                    if written == 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    done += written
                    placed.operations += 1
                    placed.bytes_written += written
            except OSError as error:
                raise OSError(error.errno, f"{error.strerror} (tier {placed.tier.name!r}, "
                                           f"{done} of {view.nbytes} bytes written)",
                              self.path) from error  # fmt: skip
            finally:
                self._size = max(self._size, offset + done)
        return done

    def pread(self, count: int, offset: int) -> bytes:
        self._check()
        with self._io:
            data = os.pread(self._fd, count, offset)
            self._placed.operations += 1
            self._placed.bytes_read += len(data)
        return data

    def write(self, data: ReadableBuffer) -> int:
        written = self.pwrite(data, self._position)
        self._position += written
        return written

    def read(self, count: int = -1) -> bytes:
        data = self.pread(self._size - self._position if count < 0 else count, self._position)
        self._position += len(data)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def open_reader(self) -> int:
        """A read-only descriptor of the file's current complete copy (the
        caller closes it); a migration after this leaves it reading the old
        copy, which stays whole."""
        with self._tiering._lock:
            return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)

    def close(self) -> None:
        """Remove the file and record its outcome."""
        with self._tiering._lock, self._io:
            if self.closed:
                return
            self.closed = True
            os.close(self._fd)
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
            self._tiering._finish(self._placed, self._size)

    def __enter__(self) -> TieredFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
