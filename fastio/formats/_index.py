"""Per-shard index: where every sample starts and ends, built by one scan.

With it, a dataset knows its sample counts without reading (for the epoch
plan), reads any one sample by its byte range (random access), and resumes
mid-shard. An index is kept beside its shard (``<shard>.fastio-index.npz``) or,
where that is not possible (a remote shard, a folder not writable), in
``index_dir``, else where a placement (:class:`fastio.tiering.Tiering`) puts
it among its tiers, else in a cache folder; it is reused while the shard's
size and modification time are those it was built from.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fastio._errors import DecodeError, IndexFileError
from fastio.formats._compression import codec_for, decompress
from fastio.reader._ranges import ByteRange, Chunk
from fastio.sources._remote import is_remote, local_path

if TYPE_CHECKING:
    from fastio.reader._reader import Reader

__all__ = [
    "INDEX_SUFFIX",
    "Locator",
    "ShardIndex",
    "build_index",
    "index_shard",
    "load_or_scan",
    "scan_shard",
]

log = logging.getLogger("fastio")

INDEX_SUFFIX = ".fastio-index.npz"
INDEX_KIND = "index"
"""The ``kind`` a placement is asked about for an index."""
PLACED_PREFIX = "index-"
"""Placed indexes are ``index-<digest>.fastio-index.npz``: never a shard
cache's file name (a shard cache may share the tiers' directories)."""
_META_BYTES = 2048  # the npz container and its metadata (about 1,200 bytes and the URL)
_VERSION = 1


@dataclass(frozen=True)
class ShardIndex:
    """Sample ``i`` of shard ``url`` is bytes ``starts[i]`` to ``ends[i]``."""

    url: str
    format: str
    size: int
    mtime_ns: int
    starts: np.ndarray
    ends: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically: a crash never leaves a torn index that is later read."""
        path = Path(path)
        meta = {"version": _VERSION, "url": self.url, "format": self.format,
                "size": self.size, "mtime_ns": self.mtime_ns}  # fmt: skip
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                np.savez(out, starts=self.starts, ends=self.ends, meta=np.array(json.dumps(meta)))
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ShardIndex:
        """Raises FileNotFoundError where there is none, :class:`OtherVersion`
        for an index of another version, else what reading a damaged file
        raises (see :func:`_stored`)."""
        # Opened here, so that it is closed whatever np.load makes of a damaged file.
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as stored:
            meta = json.loads(str(stored["meta"]))
            if meta.get("version") != _VERSION:
                raise OtherVersion(f"{path}: index version {meta.get('version')}, not {_VERSION}")
            return cls(meta["url"], meta["format"], meta["size"], meta["mtime_ns"],
                       stored["starts"], stored["ends"])  # fmt: skip


class OtherVersion(ValueError):
    """A stored index of another version: not damaged, only not reusable."""


# What reading a file that is not a whole index raises: an empty file, a cut
# or damaged zip, other contents (a pickle, a bare array), missing entries.
_DAMAGED = (OSError, EOFError, zipfile.BadZipFile, zlib.error, ValueError, KeyError, TypeError,
            AttributeError)  # fmt: skip


def _stored(path: Path, url: str) -> ShardIndex | None:
    """The index stored at ``path``; None where there is none to reuse (no
    file, one we may not read, another version). Raises IndexFileError for a
    file that is not a whole index."""
    try:
        return ShardIndex.load(path)
    except (FileNotFoundError, NotADirectoryError, PermissionError, OtherVersion):
        return None
    except _DAMAGED as error:
        raise IndexFileError(url, str(path), f"{type(error).__name__}: {error}") from None


Locate = Callable[[Iterable[Chunk], str], Iterator[tuple[int, int, Any]]]
"""``locate(chunks, url)``: each sample of a shard's chunks as ``(start, end,
sample)``, its byte range in the shard and the sample; raises the format's
DecodeError at damage, or gives it in place of the sample where it can step
over the damaged record."""

Resync = Callable[["Reader", str, DecodeError], "int | None"]
"""``resync(reader, url, error)``: where a scan may go on after ``error``, or None."""


@dataclass(frozen=True)
class Locator:
    """How a format finds the samples of its shards, handed to the index.

    ``name`` is stored with the index a scan builds; a stored index is reused
    if it has that name or one of ``reuses`` (scans that serve this one too).
    ``resync`` says where a tolerant scan may go on after damage (by default
    nowhere: the index stops there).
    """

    name: str
    locate: Locate
    resync: Resync | None = None
    reuses: tuple[str, ...] = ()

    def reusable(self, stored: str) -> bool:
        return stored == self.name or stored in self.reuses


def build_index(reader: Reader, url: str, locator: Locator) -> ShardIndex:
    """Scan ``url`` once through ``reader`` and record every sample's byte range.
    Raises the format's DecodeError for a damaged shard (the index would lie)."""
    index, problems = scan_shard(reader, url, locator, tolerate=False)
    assert not problems  # raised instead
    return index


def scan_shard(
    reader: Reader, url: str, locator: Locator, *, tolerate: bool
) -> tuple[ShardIndex, list[DecodeError]]:
    """Scan ``url`` and index its samples. A compressed shard (``.gz``, ``.zst``)
    is indexed in decompressed offsets (its samples are read by decompressing
    from the start). With ``tolerate``, a damaged shard is indexed up to the
    damage (and on from where the locator's ``resync`` says, in an
    uncompressed shard), and the errors are returned instead of raised."""
    size, version = reader.describe(url)
    codec = codec_for(url)
    starts: list[int] = []
    ends: list[int] = []
    problems: list[DecodeError] = []
    begin = 0
    while True:
        chunks: Iterable[Chunk] = reader.stream([ByteRange(url, begin)])
        if codec is not None:
            chunks = decompress(chunks, url, codec)
        try:
            for start, end, sample in locator.locate(chunks, url):
                if isinstance(sample, DecodeError):  # a damaged record the scan stepped over
                    if not tolerate:
                        raise sample
                    problems.append(sample)
                    continue
                starts.append(start)
                ends.append(end)
        except DecodeError as error:
            if not tolerate:
                raise
            problems.append(error)
            resync = locator.resync if codec is None else None
            skip_to = None if resync is None else resync(reader, url, error)
            if skip_to is not None and skip_to < size:
                begin = skip_to
                continue
        break
    index = ShardIndex(url, locator.name, size, version,
                       np.array(starts, np.uint64), np.array(ends, np.uint64))  # fmt: skip
    return index, problems


def default_cache_dir() -> Path:
    """Where indexes of remote shards go unless told: $XDG_CACHE_HOME/fastio/index."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fastio" / "index"


def _index_paths(
    url: str, cache_dir: str | os.PathLike[str] | None, placed: bool
) -> tuple[list[Path], str]:
    """Where the index of ``url`` is written, in order of preference, and the
    name it has in a cache folder (``placed``: a placement has the last word,
    so no default cache folder)."""
    if is_remote(url):  # nothing is written beside a remote object
        paths = []
        if cache_dir is None and not placed:
            cache_dir = default_cache_dir()
        key = url
    else:
        url = local_path(url)
        paths = [Path(url + INDEX_SUFFIX)]
        key = os.path.abspath(url)
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    if cache_dir is not None:
        paths.append(Path(cache_dir) / f"{digest}{INDEX_SUFFIX}")
    return paths, digest


def index_shard(
    reader: Reader, url: str, locator: Locator, cache_dir: str | os.PathLike[str] | None = None
) -> ShardIndex:
    """The index of ``url`` (see :func:`load_or_scan`); a damaged shard raises
    the format's DecodeError."""
    index, _ = load_or_scan(reader, url, locator, cache_dir, tolerate=False)
    return index


class IndexPlacement(Protocol):
    """Where indexes go that cannot go beside their shard: a
    :class:`fastio.tiering.Tiering`, asked as it is for shard cache files."""

    @property
    def directories(self) -> list[str]: ...

    def __call__(self, key: str, size: int, kind: str, reuse: float = 1.0) -> str: ...


def load_or_scan(
    reader: Reader,
    url: str,
    locator: Locator,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    tolerate: bool = False,
    placement: IndexPlacement | None = None,
) -> tuple[ShardIndex, list[DecodeError]]:
    """The index of ``url``: a stored one that still matches the shard, else a
    new scan, stored beside the shard, or in ``cache_dir`` where that folder is
    not writable, or where ``placement`` puts it (an index that cannot be
    stored anywhere is still returned). A damaged stored index raises
    :class:`~fastio.IndexFileError`, or with ``tolerate`` is built anew."""
    size, version = reader.describe(url)
    writable, digest = _index_paths(url, cache_dir, placement is not None)
    placed_name = f"{PLACED_PREFIX}{digest}"
    candidates = list(writable)
    if placement is not None:
        candidates += [Path(d) / f"{placed_name}{INDEX_SUFFIX}" for d in placement.directories]
    for path in candidates:
        try:
            index = _stored(path, url)
        except IndexFileError as error:
            if not tolerate:
                raise
            log.warning("fastio: %s; it is built anew", error)  # and replaces the damaged file
            continue
        if index is None:
            continue
        if (index.size, index.mtime_ns) == (size, version) and locator.reusable(index.format):
            return index, []
    index, problems = scan_shard(reader, url, locator, tolerate=tolerate)
    if problems:  # an index of a damaged shard is not kept: a repaired shard gets a new scan
        return index, problems
    for path in writable:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            index.save(path)
        except OSError:
            continue
        return index, []
    if placement is not None:
        try:  # TierFullError is an OSError too
            nbytes = index.starts.nbytes + index.ends.nbytes + _META_BYTES + len(url)
            folder = placement(placed_name, nbytes, INDEX_KIND, 1.0)
            index.save(Path(folder) / f"{placed_name}{INDEX_SUFFIX}")
        except OSError:
            pass
    return index, []
