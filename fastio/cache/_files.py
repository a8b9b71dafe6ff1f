"""The shard cache's files: names, owner locks, and downloads that check themselves.

A cache directory holds, at its top level, only shard copies and downloads in
progress; the index and the owner locks live in ``.fastio-cache/`` of the first
directory, so the sizes of the top-level files are exactly the cached bytes.

* ``<key><suffix>``: a complete, verified shard (key: a hash of its URL; suffix:
  the URL's extensions, so tools can tell the format).
* ``.tmp-<owner>-<key>``: a download in progress by ``owner``.
* ``.fastio-cache/owners/<owner>.lock``: held (``flock``) by the live cache
  object ``owner`` (``<pid>-<random>``) for as long as it is open. A lock that
  can be taken belongs to a process that died: its downloads are removed and
  their reserved space reclaimed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import os
import re
import secrets
import shutil
import weakref
from typing import TYPE_CHECKING

from fastio._errors import CacheIntegrityError, CacheUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import BinaryIO

    from _typeshed import ReadableBuffer

__all__ = [
    "Download",
    "META_FOLDER",
    "OwnerLock",
    "data_name",
    "data_key",
    "etag_checksum",
    "first_with_room",
    "owner_alive",
    "parse_checksum",
    "publish_download",
    "remove_quietly",
    "shard_key",
    "temp_name",
    "temp_owner",
]

META_FOLDER = ".fastio-cache"
_KEY_LENGTH = 40
_DATA_NAME = re.compile(rf"^[0-9a-f]{{{_KEY_LENGTH}}}(\.[A-Za-z0-9]{{1,12}}){{0,3}}$")
_TEMP_NAME = re.compile(rf"^\.tmp-(\d+-[0-9a-f]+)-[0-9a-f]{{{_KEY_LENGTH}}}$")
_SUFFIX = re.compile(r"(\.[A-Za-z0-9]{1,12}){1,3}$")
_HEX = re.compile(r"^[0-9a-f]+$")


def shard_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:_KEY_LENGTH]


def data_name(url: str) -> str:
    """``<key><suffix>``: ``.tar`` or ``.tfrecord.gz`` kept from the URL's last part."""
    last = url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
    suffix = _SUFFIX.search(last)
    return shard_key(url) + (suffix[0] if suffix and suffix.start() > 0 else "")


def temp_name(owner: str, key: str) -> str:
    return f".tmp-{owner}-{key}"


def data_key(name: str) -> str | None:
    """The key of the shard copy ``name``, or None if it is not one."""
    return name[:_KEY_LENGTH] if _DATA_NAME.match(name) else None


def temp_owner(name: str) -> str | None:
    """The owner of the download ``name``, or None if it is not a download."""
    match = _TEMP_NAME.match(name)
    return match[1] if match else None


def first_with_room(directories: Sequence[str], size: int) -> str:
    """The default placement: the first directory whose filesystem has ``size``
    bytes free (else the first, where the download then fails with ENOSPC).
    A directory removed since (a cleaner of temporary files, a hand freeing
    the disk) is made again; one that cannot be is passed over."""
    for folder in directories:
        try:
            try:
                free = shutil.disk_usage(folder).free
            except FileNotFoundError:
                os.makedirs(folder, exist_ok=True)
                free = shutil.disk_usage(folder).free
        except OSError:
            continue
        if free >= size:
            return folder
    return directories[0]


def remove_quietly(path: str) -> None:
    """Remove ``path`` where it can be: a file gone already, or on a
    filesystem that refuses (read-only now), is left as it is."""
    with contextlib.suppress(OSError):
        os.remove(path)


# ---- owners ------------------------------------------------------------------------------


class OwnerLock:
    """This process's claim on its downloads: a lock file held until closed.

    After ``fork`` the child must not keep the parent's claim alive, so it
    calls :meth:`abandon` (closing its copy without unlocking the parent's).
    """

    def __init__(self, folder: str) -> None:
        self.owner = f"{os.getpid()}-{secrets.token_hex(6)}"
        self.path = os.path.join(folder, f"{self.owner}.lock")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._held = [fd]  # shared with the finalizer, which lets go of a lock never closed
        self._finalizer = weakref.finalize(self, _let_go, self.path, self._held, os.getpid())

    def close(self) -> None:
        _let_go(self.path, self._held, os.getpid())

    def abandon(self) -> None:
        _let_go(self.path, self._held, None)  # the parent's descriptor still holds the lock


def _let_go(path: str, held: list[int], owner: int | None) -> None:
    """Close the lock's descriptor, once; in process ``owner`` (None: none)
    also remove its file. A lock collected unclosed goes so too (a forked
    child's copy is only closed)."""
    if held[0] < 0:
        return
    if owner == os.getpid():
        remove_quietly(path)
    os.close(held[0])
    held[0] = -1


def owner_alive(folder: str, owner: str) -> bool:
    """Whether ``owner`` still holds its lock. A lock taken here is released
    at once; the caller then removes the dead owner's files."""
    path = os.path.join(folder, f"{owner}.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


# ---- downloads ---------------------------------------------------------------------------


def parse_checksum(checksum: str) -> tuple[str, str]:
    """``"sha256:<hex>"`` (any hashlib algorithm) as ``(algorithm, hex digest)``.
    Raises ValueError for another form."""
    algorithm, _, digest = checksum.partition(":")
    digest = digest.lower()
    if algorithm not in hashlib.algorithms_available or not _HEX.match(digest):
        raise ValueError(f"checksum must be '<algorithm>:<hex digest>' (md5, sha256, ...), "
                         f"not {checksum!r}")  # fmt: skip
    return algorithm, digest


def etag_checksum(etag: str) -> str | None:
    """``"md5:<hex>"`` for an S3-style ETag that is the MD5 of the object (a
    single-part upload); None for other ETags (multipart ``"<md5>-<parts>"``,
    weak ``W/"..."``, or opaque HTTP ones), which identify a version only."""
    value = etag.strip()
    if value.startswith("W/"):
        return None
    value = value.strip('"').lower()
    return f"md5:{value}" if len(value) == 32 and _HEX.match(value) else None


class Download(io.RawIOBase):
    """The file object a fetch writes a shard into.

    It refuses bytes past the shard's size (so a download never takes more
    space than was reserved for it) and hashes what it is given where a
    checksum is expected; :meth:`verify` checks both at the end.
    """

    def __init__(
        self, file: BinaryIO, url: str, size: int, checksum: str | None,
        on_write: Callable[[int], None] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self._file = file
        self._on_write = on_write
        self._url = url
        self._size = size
        self._written = 0
        self._expected: str | None = None
        self._hash: hashlib._Hash | None = None
        if checksum is not None:
            algorithm, self._expected = parse_checksum(checksum)
            self._hash = hashlib.new(algorithm, usedforsecurity=False)

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer, /) -> int:
        view = memoryview(data)
        count = view.nbytes
        if self._written + count > self._size:
            raise CacheIntegrityError(
                self._url,
                f"the download is longer than the {self._size} bytes the store gave as its "
                "size (nothing was cached)",
            )
        self._file.write(view)
        if self._hash is not None:
            self._hash.update(view)
        self._written += count
        if self._on_write is not None:  # someone reads the file as it grows
            self._file.flush()
            self._on_write(self._written)
        return count

    def tell(self) -> int:
        return self._written

    def verify(self) -> None:
        """Raises CacheIntegrityError for a short download or a wrong checksum."""
        if self._written != self._size:
            raise CacheIntegrityError(
                self._url,
                f"the download ended after {self._written} of {self._size} bytes "
                "(nothing was cached)",
            )
        if self._hash is not None and self._hash.hexdigest() != self._expected:
            raise CacheIntegrityError(
                self._url,
                f"the download's {self._hash.name} is {self._hash.hexdigest()}, not "
                f"{self._expected} (nothing was cached)",
            )


def publish_download(
    temp: str, path: str, url: str, size: int, fetch: Callable[[str, Download], object],
    checksum: str | None, on_write: Callable[[int], None] | None = None,
) -> None:  # fmt: skip
    """``fetch`` writes ``url`` into ``temp``; checked, flushed to disk and
    renamed to ``path``. ``on_write(bytes written)`` follows its progress.
    Raises what ``fetch`` raises, CacheIntegrityError, or
    CacheUnavailableError where the copy's folder cannot take a file (gone,
    read-only); the caller removes ``temp`` then."""
    try:
        file = open(temp, "wb")  # noqa: SIM115  # closed below, on every path
    except OSError as error:
        raise _unavailable(url, error) from error
    with file:
        download = Download(file, url, size, checksum, on_write)
        fetch(url, download)
        download.verify()
        file.flush()
        os.fsync(file.fileno())  # the bytes must be on disk before the name is
    try:
        os.replace(temp, path)
    except OSError as error:
        raise _unavailable(url, error) from error


def _unavailable(url: str, error: OSError) -> OSError:
    """What a failure to make a copy's file means: no room stays itself (the
    caller says so), anything else is the folder refusing copies."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return error
    return CacheUnavailableError(url, f"the cache cannot write its copy at {error.filename} "
                                      f"({error.strerror})")  # fmt: skip
