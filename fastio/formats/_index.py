"""Shard indexes: where every sample of a shard starts and ends.

With them a dataset knows its sample counts without reading (for the epoch
plan), reads any one sample by its byte range, and resumes mid-shard. An
index comes from one of three places, first found first:

* a **dataset index**, one file (``dataset.fastio-index.npz``) holding every
  shard's index, made once by ``fastio-bench index`` (or :func:`build_dataset_index`)
  beside the data or at a URL the user names, and read by every process with
  one request;
* the **index folder**: an index per shard that a scan (or a first epoch that
  streamed the shard) left in ``index_dir``, where a placement (tiering) puts
  it, or ``$XDG_CACHE_HOME/fastio/index``; never beside the shard, so a
  dataset's folder is never written to and its globs never change;
* a **scan** of the shard, whose index then goes to the index folder.

Where every shard of a dataset has its index in the index folder, the folder
also keeps them all in one file (``dataset-<digest>.fastio-dataset.npz``,
named after the list of shards), so the next dataset over the same shards
opens with one read instead of one per shard. Each entry is checked like a
shard's own index; the per-shard files stay the ones that decide.

An index is tied to the content it describes: its shard's size and version
(the modification time, or the ETag of a remote object), and for local files
the inode change stamp (which ``cp -p`` and ``rsync -t`` cannot keep) or else,
where that moved, a fingerprint of the shard's first and last bytes (so a
dataset copied with its times kept keeps its index). One that no longer
matches is not used.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import itertools
import json
import mmap
import os
import posixpath
import struct
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, overload

import numpy as np

from fastio._errors import DecodeError, IndexFileError, TruncatedFileError
from fastio._native import ascii_only, joined_alike, map_file, normal_paths, repeated_unit
from fastio.formats._compression import codec_for, decompress
from fastio.reader._ranges import ByteRange, Chunk
from fastio.sources._objects import absolute_path, is_remote, local_path
from fastio.spec._records import record

if TYPE_CHECKING:
    from fastio.reader._reader import Reader
    from fastio.spec._reader import ReaderSettings

__all__ = [
    "DATASET_INDEX",
    "INDEX_SUFFIX",
    "SET_SUFFIX",
    "UNREADABLE",
    "DatasetIndex",
    "IndexColumns",
    "IndexStore",
    "Locator",
    "ShardIndex",
    "build_index",
    "dataset_index_location",
    "fingerprint",
    "index_columns",
    "index_key",
    "index_keys",
    "indexes_of_columns",
    "scan_shard",
    "stamped",
]

INDEX_SUFFIX = ".fastio-index.npz"
DATASET_INDEX = "dataset" + INDEX_SUFFIX
"""The dataset index's name where no other is given: in the shards' folder."""
INDEX_KIND = "index"
"""The ``kind`` a placement is asked about for an index."""
PLACED_PREFIX = "index-"
"""Indexes in a folder are ``index-<digest>.fastio-index.npz``: never a shard
cache's file name (a shard cache may share the tiers' directories)."""
SET_PREFIX = "dataset-"
SET_SUFFIX = ".fastio-dataset.npz"
"""The index folder's file of a whole dataset's indexes: never a shard's
index name, nor a shard cache's file name."""
SCHEMA_SUFFIX = ".fastio-schema.arrow"
"""Beside it, the columns the dataset's Arrow batches have had."""
_LOOKUPS = 256
"""Up to this many URLs, which of them have a stored index is looked up file
by file rather than by listing the folder."""
_META_BYTES = 2048  # the npz container and its metadata (about 1,200 bytes and the URL)
_FINGERPRINT_BYTES = 4096
_VERSION = 3
_READ_VERSIONS = (2, 3)
# A shard's fields in an index file (each a list, one entry per shard), with
# what a version 2 file's entry means where it lacks one.
_FIELDS: dict[str, Any] = {"url": None, "format": None, "size": None, "version": None,
                           "change": 0, "fingerprint": "", "count": None}  # fmt: skip
# A version 3 file of many shards written now holds its fields twice: in the
# JSON, which every reader of version 3 takes, and as arrays, which this one
# takes without parsing the JSON (most of the read of an index of thousands of
# shards). ``fields``: the version, the number of shards, then each of
# _NUMBERS in turn (int64); ``urls``: the shards' names, and ``names``: their
# formats, then their fingerprints, each array strings joined by NULs
# (UTF-8). A file of fewer than _ARRAYS_FROM shards (where three members more
# cost more than the JSON they spare), one whose integers do not all fit in
# int64 (an ETag of many digits), or whose strings hold a NUL, holds the JSON
# alone.
_ARRAYS_FROM = 256
_NUMBERS = ("size", "version", "change", "count")

UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
"""What reading a damaged, truncated or foreign index file raises."""


@record(slots=True)
class ShardIndex:
    """Sample ``i`` of shard ``url`` is bytes ``starts[i]`` to ``ends[i]``.

    ``size`` and ``version`` are the shard's when it was indexed (the version
    is the modification time in ns, or a number from a remote object's ETag);
    ``change`` its inode change stamp (local files; 0 where unknown) and
    ``fingerprint`` a digest of its first and last bytes (local files)."""

    url: str
    format: str
    size: int
    version: int
    starts: np.ndarray
    ends: np.ndarray
    change: int = 0
    fingerprint: str = ""

    def __init__(self, url: str, format: str, size: int, version: int,
                 starts: np.ndarray, ends: np.ndarray, change: int = 0,
                 fingerprint: str = "") -> None:  # fmt: skip
        # Written out: a dataset reads one per shard, thousands before its
        # first sample (see record).
        self.url, self.format, self.size, self.version = url, format, size, version
        self.starts, self.ends, self.change, self.fingerprint = starts, ends, change, fingerprint

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def stamp(self) -> tuple[int, int, int]:
        """``(size, version, change)``, as :meth:`Reader.stamp` answers for the
        shard when it is as this index found it."""
        return self.size, self.version, self.change

    @property
    def of_an_object(self) -> bool:
        """Whether it was made from a remote object (its version from the
        ETag), not from a local file (a change stamp and a fingerprint)."""
        return not self.change and not self.fingerprint

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically: a crash never leaves a torn index that is later read."""
        path = os.fspath(path)
        # Version 2, which every fastio reads: the index folder is shared by
        # the versions installed on a machine, and one file per shard gains
        # nothing from version 3.
        _write_atomically(path, _index_file([self], [_relative(self.url, path)], version=2))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ShardIndex:
        """Raises OSError, ValueError, KeyError, EOFError or BadZipFile for a
        file that is missing, damaged or not an index of this version."""
        with open(path, "rb") as file:  # not pathlib: a dataset asks once per shard
            data = file.read()
        [index] = DatasetIndex.read(data, os.fspath(path)).shards
        return index

    def fresh(self, reader: Reader, url: str, stamp: tuple[int, int, int] | None = None) -> bool:
        """Whether ``url`` still holds what this index describes (see the
        module); ``stamp``: what :meth:`Reader.stamp` answered for it just now."""
        size, version, change = stamp if stamp is not None else reader.stamp(url)
        if (size, version) != (self.size, self.version):
            return False
        if is_remote(url) or (self.change and change == self.change):
            return True
        # Rewritten in place with the times kept, or copied with them (cp -p,
        # rsync -a): the content decides.
        return bool(self.fingerprint) and fingerprint(reader, url, size) == self.fingerprint


def fingerprint(reader: Reader, url: str, size: int) -> str:
    """A digest of the size and the first and last 4 KiB of ``url``.

    A local file's 8 KiB are read with two plain preads, not through
    ``reader``: a streamed epoch stamps each shard's index as it reaches the
    shard's end, while its own stream (reading ahead into the next shards)
    may hold all of the reader's memory budget, which a second stream of the
    same reader would wait for, for ever."""
    ranges = [(0, min(size, _FINGERPRINT_BYTES))]
    if size > _FINGERPRINT_BYTES:
        tail = max(size - _FINGERPRINT_BYTES, _FINGERPRINT_BYTES)
        ranges.append((tail, size - tail))
    digest = hashlib.sha256(str(size).encode())
    if is_remote(url):
        for chunk in reader.stream([ByteRange(url, offset, length) for offset, length in ranges]):
            digest.update(chunk.data)
        return digest.hexdigest()[:32]
    fd = os.open(local_path(url), os.O_RDONLY | os.O_CLOEXEC)
    try:
        for offset, length in ranges:
            data = os.pread(fd, length, offset)
            if len(data) != length:
                raise TruncatedFileError(url, offset + len(data), offset + length)
            digest.update(data)
    finally:
        os.close(fd)
    return digest.hexdigest()[:32]


Locate = Callable[[Iterable[Chunk], str], Iterator[tuple[int, int, Any]]]
"""``locate(chunks, url)``: each sample of a shard's chunks as ``(start, end,
sample)``, its byte range in the shard and the sample; raises the format's
DecodeError at damage, or gives it in place of the sample where it can step
over the damaged record."""

Resync = Callable[["Reader", str, DecodeError], "int | None"]
"""``resync(reader, url, error)``: where a scan may go on after ``error``, or None."""


@record(frozen=True)
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


def stamped(reader: Reader, url: str, name: str, starts: Sequence[int] | np.ndarray,
            ends: Sequence[int] | np.ndarray) -> ShardIndex:  # fmt: skip
    """The index of ``url`` with these sample ranges, stamped with what the
    shard is now (size, version, change stamp, fingerprint)."""
    size, version, change = reader.stamp(url)
    local = not is_remote(url)
    return ShardIndex(url, name, size, version, np.asarray(starts, np.uint64),
                      np.asarray(ends, np.uint64), change,
                      fingerprint(reader, url, size) if local else "")  # fmt: skip


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
    size, _ = reader.describe(url)
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
            if skip_to is not None and error.offset < skip_to < size:  # only forward: no loop
                begin = skip_to
                continue
        break
    return stamped(reader, url, locator.name, starts, ends), problems


# The header np.save writes for a one-dimensional or scalar array of a plain
# dtype (what every index holds), around the dtype and the count: see
# :func:`_plain_npy_header`. Others go to numpy's reader.
_NPY_OPEN = b"{'descr': '"
_NPY_SHAPE = b"', 'fortran_order': False, 'shape': ("
_NPY_CLOSE = b"), }"
_NPY_MAGIC = {b"\x93NUMPY\x01\x00": 2, b"\x93NUMPY\x02\x00": 4, b"\x93NUMPY\x03\x00": 4}


def _npz_arrays(data: bytes | mmap.mmap | memoryview, passed_by: dict[str, str] | None = None
                ) -> dict[str, np.ndarray]:  # fmt: skip
    """The arrays of an index file (an .npz that ``np.savez`` wrote), by name.
    A dataset opens one per shard, or one for them all, before its first
    sample, and ``np.load`` spends most of that time on each array's header
    (a Python literal evaluated): headers as ``np.save`` writes them are
    matched instead. An array whose data is aligned in ``data`` (as fastio
    writes them) is a read-only view of it; one that is not (as ``np.savez``
    writes them) is copied once, from ``data`` (not from a copy of its
    member: a dataset index of 36k samples took half a millisecond more,
    mostly in faulting in the copy's fresh pages). ``passed_by`` maps a
    member to leave out (neither checked nor read) to the member whose
    presence lets it be left out: an index's JSON where the index holds its
    fields as arrays too (2.3 MB of an index of 20,000 shards). An archive
    the zip module has to read is read whole. Raises what ``np.load`` does
    for a damaged file."""
    members = _stored_members(data, passed_by)
    if members is None:  # not as np.savez writes: the zip module reads it
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = {name: archive.read(name) for name in archive.namelist()}
    return {name.removesuffix(".npy"): _npy(raw) for name, raw in members.items()}


_END = struct.Struct("<4s4H2IH")  # end of central directory
_ENTRY = struct.Struct("<4s4B4HI2I5H2I")  # central directory file header
_LOCAL = struct.Struct("<4s2B4HI2I2H")  # local file header
_ZIP64_LIMIT = 0xFFFFFFFF


def _stored_entries(data: bytes | mmap.mmap | memoryview, after: int = 0
                    ) -> list[tuple[bytes, int, int, int]] | None:  # fmt: skip
    """Each member of a zip archive as its central directory (at ``after``
    or later in ``data``, which ends where the archive does) lists it: its
    name, CRC, size and where its local header is; None unless every one is
    stored (not compressed, not encrypted) and the archive has no comment."""
    if len(data) - after < _END.size:
        return None
    magic, _, _, _, count, directory_size, directory, comment = _END.unpack_from(
        data, len(data) - _END.size
    )
    if magic != b"PK\x05\x06" or comment or directory < after \
            or directory + directory_size > len(data):  # fmt: skip
        return None
    entries = []
    at = directory
    for _ in range(count):
        if at + _ENTRY.size > len(data):
            return None
        (magic, _, _, _, _, flags, method, _, _, crc, stored, size, name_length, extra_length,
         comment_length, _, _, _, local) = _ENTRY.unpack_from(data, at)  # fmt: skip
        name_at = at + _ENTRY.size
        if magic != b"PK\x01\x02" or method != 0 or flags & 1:
            return None
        extra = bytes(data[name_at + name_length : name_at + name_length + extra_length])
        widened = _zip64_sizes(extra, [size, stored, local])
        if widened is None or widened[0] != widened[1]:
            return None
        size, _, local = widened
        entries.append((bytes(data[name_at : name_at + name_length]), crc, size, local))
        at = name_at + name_length + extra_length + comment_length
    return entries


def _stored_members(data: bytes | mmap.mmap | memoryview, passed_by: dict[str, str] | None = None
                    ) -> dict[str, bytes | memoryview] | None:  # fmt: skip
    """The members of a zip archive whose every member is stored (not
    compressed), as ``np.savez`` writes, read straight from its central
    directory: the zip module's reading of it (and the first decoding of
    its names) took most of a small index's load. None for an archive laid
    out otherwise (a comment, a zip64 directory, compressed members); raises
    BadZipFile for a member whose bytes are cut or whose CRC does not match.
    Members named in ``passed_by`` are left out where the member each names
    is there (see :func:`_npz_arrays`)."""
    entries = _stored_entries(data)
    if entries is None:
        return None
    found: dict[str, tuple[int, int, int]] = {}  # name: where, size, CRC
    for named, crc, size, local in entries:
        if local + _LOCAL.size > len(data):
            return None
        local_magic, *_, local_name, local_extra = _LOCAL.unpack_from(data, local)
        if local_magic != b"PK\x03\x04":
            return None
        found[named.decode()] = (local + _LOCAL.size + local_name + local_extra, size, crc)
    members: dict[str, bytes | memoryview] = {}
    view = memoryview(data).toreadonly()  # (arrays viewing it read-only, bytes or not)
    for name, (begin, size, crc) in found.items():
        beside = (passed_by or {}).get(name.removesuffix(".npy"))
        if beside is not None and f"{beside}.npy" in found:
            continue
        member = view[begin : begin + size]
        if len(member) != size or zlib.crc32(member) != crc:
            raise zipfile.BadZipFile(f"index member at {begin} is cut or damaged")
        members[name] = member
    return members


# The index file's tail read first: its central directory (a few members).
_TAIL_BYTES = 1 << 16
_HEADER_BYTES = 1024  # a member's name and extra field, read with its local header


def _dataset_index_bytes(path: str, mapped: bool = True
                         ) -> tuple[bytes | mmap.mmap | memoryview, bool]:  # fmt: skip
    """The bytes of the dataset index file at ``path``, and whether they are
    all there. A file of one tail's bytes or fewer is read whole at once. A
    larger one is ``mapped`` (read-only, shared with the page cache): only
    the pages its reader touches are entered, none copied (an index of
    20,000 shards read into fresh memory spent 4 ms faulting in 4.4 MB of
    it); the JSON that its arrays hold too (2.3 MB there) is never touched.
    Not mapped (or on a filesystem that maps nothing), it is read, but where
    its JSON is stored beside the arrays that hold the same (as fastio
    writes it), the JSON's bytes are left out (zeros): what
    :func:`_npz_arrays` reads passes the JSON by there; anything else reads
    the file whole."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size <= _TAIL_BYTES:
            whole = os.pread(fd, size, 0)
            while len(whole) < size and (more := os.pread(fd, size - len(whole), len(whole))):
                whole += more
            return whole, True
        if mapped:
            with contextlib.suppress(OSError):
                return memoryview(map_file(fd, size)), True
        # Fresh pages, faulted in as they are read into: those left out are
        # never touched (a zeroed bytearray took longer than the whole read).
        data = mmap.mmap(-1, size)
        view = memoryview(data)
        tail = size - _TAIL_BYTES
        _read_into(fd, view, tail, size)
        left_out = _passed_member(data, tail, "meta.npy", "fields.npy")
        if left_out is None:
            _read_into(fd, view, 0, tail)
            return data, True
        local, length = left_out
        # Up to the member and its own header (whose length it tells), then
        # what follows its bytes.
        header_end = min(local + _LOCAL.size + _HEADER_BYTES, tail)
        _read_into(fd, view, 0, header_end)
        _, *_, local_name, local_extra = _LOCAL.unpack_from(data, local)
        begin = local + _LOCAL.size + local_name + local_extra
        _read_into(fd, view, header_end, min(begin, tail))
        _read_into(fd, view, max(begin + length, header_end), tail)
        return data, False
    finally:
        os.close(fd)


def _read_into(fd: int, view: memoryview, start: int, stop: int) -> None:
    """Bytes ``start..stop`` of the file into ``view`` there (fewer where the
    file ends sooner: what is missing stays zero, and fails its check)."""
    while start < stop:
        got = os.preadv(fd, [view[start:stop]], start)
        if not got:
            return
        start += got


def _passed_member(data: mmap.mmap, tail: int, name: str, beside: str
                   ) -> tuple[int, int] | None:  # fmt: skip
    """Where the member ``name`` of the zip archive whose central directory
    is in ``data[tail:]`` begins (its local header) and its length, where the
    member ``beside`` is there too and every member is stored as fastio
    writes them; else None."""
    entries = _stored_entries(data, tail)
    if entries is None:
        return None
    found = {entry_name: (local, size) for entry_name, _, size, local in entries}
    member = found.get(name.encode())
    if member is None or beside.encode() not in found or member[0] + _LOCAL.size > tail:
        return None
    return member


def _zip64_sizes(extra: bytes, values: list[int]) -> list[int] | None:
    """``values`` (size, stored size, local header offset) with those the
    central directory gave as 0xFFFFFFFF taken from its zip64 extra field,
    in that order; None where the field is missing or short."""
    wide = [i for i, value in enumerate(values) if value == _ZIP64_LIMIT]
    if not wide:
        return values
    at = 0
    while at + 4 <= len(extra):
        tag, length = struct.unpack_from("<2H", extra, at)
        if tag == 1:
            if length < 8 * len(wide):
                return None
            for k, i in enumerate(wide):
                values[i] = struct.unpack_from("<Q", extra, at + 4 + 8 * k)[0]
            return values
        at += 4 + length
    return None


def _npy(raw: bytes | memoryview) -> np.ndarray:
    width = _NPY_MAGIC.get(bytes(raw[:8]))
    if width is not None:
        start = 8 + width
        end = start + int.from_bytes(raw[8:start], "little")
        found = _plain_npy_header(bytes(raw[start:end])) if end <= len(raw) else None
        if found is not None:
            descr, shape = found
            dtype = np.dtype(descr.decode())
            count = int(shape) if shape else 1
            body = end
            if not dtype.hasobject and len(raw) - body == count * dtype.itemsize:
                array: np.ndarray = np.frombuffer(raw, dtype, count, body)
                if not array.flags.aligned:  # as np.savez writes: one copy, aligned
                    array = array.copy()
                return array if shape else array.reshape(())
    read: np.ndarray = np.lib.format.read_array(io.BytesIO(raw), allow_pickle=False)
    return read


def _plain_npy_header(header: bytes) -> tuple[bytes, bytes] | None:
    """The dtype (``<u8``: a byte order, a letter, a size) and the count
    (empty for a scalar) of a header as np.save writes it for a plain one-
    or zero-dimensional array, else None. Told with bytes methods: a
    regular expression is compiled in each fresh process, a tenth of a
    millisecond before its first sample."""
    if not header.startswith(_NPY_OPEN):
        return None
    descr, shaped, rest = header[len(_NPY_OPEN) :].partition(_NPY_SHAPE)
    shape, closed, padding = rest.partition(_NPY_CLOSE)
    if not (shaped and closed and padding.endswith(b"\n")) or padding[:-1].strip(b" "):
        return None
    if len(descr) < 3 or descr[:1] not in b"<>|" or not descr[1:2].isalpha() \
            or not descr[2:].isdigit():  # fmt: skip
        return None
    count = shape.removesuffix(b",")
    return (descr, count) if not count or count.isdigit() else None


def _problem(error: BaseException) -> str:
    """What is wrong with an index file, in words."""
    if isinstance(error, (EOFError, zipfile.BadZipFile)):
        return f"truncated or not an index ({error or type(error).__name__})"
    return str(error) or type(error).__name__


def default_index_dir() -> Path:
    """Where shard indexes go unless told: ``$XDG_CACHE_HOME/fastio/index``."""
    return _index_dir_for(os.environ.get("XDG_CACHE_HOME"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def _index_dir_for(cache_home: str | None, home: str | None) -> Path:
    # Made once per environment: a never-seen dataset asks for each shard's
    # index before its first sample, and making the path took longer than
    # looking for the file.
    base = cache_home or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fastio" / "index"


class IndexPlacement(Protocol):
    """Where indexes go when no index folder is named: a
    :class:`fastio.tiering.Tiering`, asked as it is for shard cache files."""

    @property
    def directories(self) -> list[str]: ...

    def __call__(self, key: str, size: int, kind: str, reuse: float = 1.0) -> str: ...


class IndexStore:
    """The index folder: ``index_dir``, else where ``placement`` puts indexes,
    else :func:`default_index_dir`. An index is named after its shard's URL."""

    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None = None,
        placement: IndexPlacement | None = None,
    ) -> None:
        self.index_dir = None if index_dir is None else Path(index_dir)
        self.placement = None if index_dir is not None else placement
        self._made: Path | None = None  # the folder made (or found) last

    @staticmethod
    def name(url: str) -> str:
        key = index_key(url)
        return f"{PLACED_PREFIX}{hashlib.sha256(key.encode()).hexdigest()[:32]}"

    def _folders(self) -> list[Path]:
        if self.index_dir is not None:
            return [self.index_dir]
        if self.placement is not None:
            return [Path(folder) for folder in self.placement.directories]
        return [default_index_dir()]

    def holding(self, urls: Iterable[str]) -> set[str]:
        """Those of ``urls`` whose index is stored here, fresh or not: a few
        are looked up one by one, many by listing each folder once (a
        folder that has kept the indexes of many datasets takes about 0.5 us
        an entry to list, a lookup 2-5 us)."""
        urls = list(urls)
        if len(urls) <= _LOOKUPS:
            return {url for url in urls
                    if any(os.path.exists(os.path.join(folder, self.name(url) + INDEX_SUFFIX))
                           for folder in self._folders())}  # fmt: skip
        names: set[str] = set()
        for folder in self._folders():
            with contextlib.suppress(OSError):  # no such folder yet: nothing stored
                names.update(name for name in os.listdir(folder) if name.endswith(INDEX_SUFFIX))
        if not names:  # a first run: no shard's name is worked out (a digest each)
            return set()
        return {url for url in urls if self.name(url) + INDEX_SUFFIX in names}

    def load(self, reader: Reader, url: str, locator: Locator, unanswered: bool = False
             ) -> ShardIndex | None:  # fmt: skip
        """The stored index of ``url`` if one is there and still matches it.
        Raises :class:`fastio.IndexFileError` for a damaged one, and the
        OSError of asking about ``url`` (gone, or its store not answering),
        unless ``unanswered``: the index as kept then (its reads will meet
        the error, and count the samples it holds)."""
        name = self.name(url) + INDEX_SUFFIX
        for folder in self._folders():
            path = os.path.join(folder, name)
            try:
                index = ShardIndex.load(path)
            except FileNotFoundError:
                continue
            except UNREADABLE as error:
                raise IndexFileError(path, url, _problem(error)) from None
            if not locator.reusable(index.format):
                continue
            try:
                fresh = index.fresh(reader, url)
            except OSError:
                if not unanswered:
                    raise
                fresh = True
            if fresh:
                return index
        return None

    def save(self, index: ShardIndex) -> None:
        """Keep ``index`` for later datasets; a folder that takes no file is
        passed over (the index still serves this dataset)."""
        name = self.name(index.url)
        nbytes = index.starts.nbytes + index.ends.nbytes + _META_BYTES + len(index.url)
        self._keep(
            name, nbytes, lambda folder: index.save(os.path.join(folder, name + INDEX_SUFFIX))
        )

    def _keep(self, name: str, nbytes: int, write: Callable[[Path], None]) -> None:
        """``write`` the file ``name`` of ``nbytes`` into the folder it goes to,
        where one takes it (again, once, where the folder was removed since
        it was made)."""
        for _ in range(2):
            folder = self._folder_for(name, nbytes)
            if folder is None:
                return
            try:
                write(folder)
            except FileNotFoundError:
                self._made = None
            except OSError:
                return
            else:
                return

    def forget(self, url: str, urls: Sequence[str]) -> None:
        """Remove what is kept of ``url`` (found changed: its objects replaced
        at the same URL) and the indexes kept together for ``urls``, the
        dataset it is a shard of: a later dataset indexes it anew rather
        than trust them again."""
        for folder in self._folders():
            for name in (self.name(url) + INDEX_SUFFIX, self.set_name(urls) + SET_SUFFIX):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))

    def _folder_for(self, name: str, nbytes: int) -> Path | None:
        """The folder a new file of ``nbytes`` goes to, None where none takes it."""
        try:
            if self.placement is not None:  # TierFullError is an OSError too
                return Path(self.placement(name, nbytes, INDEX_KIND, 1.0))
            [folder] = self._folders()
            if folder != self._made:  # asked once, not for each file a first epoch writes
                folder.mkdir(parents=True, exist_ok=True)
                self._made = folder
        except OSError:
            return None
        return folder

    @staticmethod
    def set_name(urls: Sequence[str], keys: Sequence[str] | None = None) -> str:
        """The name of the file of the indexes of ``urls`` kept together
        (``keys``: their :func:`index_keys`, where known)."""
        key = "\n".join(index_keys(urls) if keys is None else keys)
        return f"{SET_PREFIX}{hashlib.sha256(key.encode()).hexdigest()[:32]}"

    def load_set(self, urls: Sequence[str], keys: Sequence[str] | None = None
                 ) -> dict[str, ShardIndex]:  # fmt: skip
        """The indexes kept together for the dataset of ``urls``, by URL (as
        :meth:`DatasetIndex.lookup`); empty where there are none. A damaged
        file counts as none: the shards' own index files decide, and the
        file is written anew once they are read."""
        name = self.set_name(urls, keys) + SET_SUFFIX
        for folder in self._folders():
            path = folder / name
            try:
                return DatasetIndex.read(path.read_bytes(), str(path)).lookup()
            except FileNotFoundError:
                continue
            except UNREADABLE:
                return {}
        return {}

    def load_schema(self, urls: Sequence[str]) -> bytes | None:
        """The batch columns kept for the dataset of ``urls`` (an Arrow schema
        as pyarrow serializes it), None where none is kept."""
        name = self.set_name(urls) + SCHEMA_SUFFIX
        for folder in self._folders():
            try:
                with open(os.path.join(folder, name), "rb") as file:
                    return file.read()
            except FileNotFoundError:
                continue
            except OSError:
                return None
        return None

    def save_schema(self, urls: Sequence[str], data: bytes) -> None:
        """Keep the batch columns of the dataset of ``urls``, as :meth:`save`."""
        name = self.set_name(urls)
        self._keep(name, len(data), lambda folder: _write_atomically(
            os.path.join(folder, name + SCHEMA_SUFFIX), data))  # fmt: skip

    def save_set(self, urls: Sequence[str], index: DatasetIndex) -> None:
        """Keep ``index`` (every shard of ``urls``) in one file, as :meth:`save`."""
        name = self.set_name(urls)
        nbytes = sum(shard.starts.nbytes * 2 + _META_BYTES for shard in index.shards)

        def write(folder: Path) -> None:
            path = str(folder / f"{name}{SET_SUFFIX}")
            _write_atomically(path, index.to_bytes(path))

        self._keep(name, nbytes, write)


def _index_file(shards: Sequence[ShardIndex], names: Sequence[str], version: int = _VERSION
                ) -> bytes:  # fmt: skip
    """The bytes of an index file of ``shards``, named ``names`` in it: their
    offsets concatenated, and their fields in JSON, a list each (version 3),
    or an object per shard (version 2, whose keys took most of a dataset
    index's bytes and of the time to read it)."""
    fields, starts, ends = index_columns(shards)
    fields["url"] = list(names)
    listed: Any = fields
    if version == 2:
        listed = [dict(zip(fields, entry, strict=True))
                  for entry in zip(*fields.values(), strict=True)]  # fmt: skip
    meta = json.dumps({"version": version, "shards": listed}, separators=(",", ":"))
    # Version 3 keeps the JSON as UTF-8 bytes, where numpy's str takes four
    # bytes a character (20,000 shards: 12 MB of them, 7 MB more to read and
    # check at each open); every reader of version 3 takes either. Version 2,
    # as earlier releases read it.
    text = np.array(meta) if version == 2 else np.array(meta.encode())
    arrays = {"starts": starts, "ends": ends, "meta": text}
    if version == _VERSION:
        arrays.update(_field_arrays(fields))
    return _aligned_npz(arrays)


def _field_arrays(fields: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    """The ``fields`` and ``names`` arrays of an index file's fields (see
    _NUMBERS), or none where they cannot hold them."""
    count = len(fields["url"])
    if count < _ARRAYS_FROM:
        return {}
    numbers = [_VERSION, count, *itertools.chain.from_iterable(fields[name] for name in _NUMBERS)]
    try:
        packed = np.array(numbers, np.int64)
    except OverflowError:  # past 64 bits: the JSON alone holds them
        return {}
    urls = fields["url"]
    names = [*fields["format"], *fields["fingerprint"]]
    if any("\0" in name for name in (*urls, *names)):
        return {}
    return {"fields": packed, "urls": _strings(urls), "names": _strings(names)}


def _strings(strings: list[str]) -> np.ndarray:
    """``strings`` joined by NULs, as the bytes of an array. Surrogates pass
    as they are: a path's undecodable bytes, as os.fsdecode gives them."""
    return np.frombuffer("\0".join(strings).encode("utf-8", "surrogatepass"), np.uint8)


def _fields_of_arrays(
    stored: dict[str, np.ndarray], location: str
) -> tuple[_ArrayFields, str, list[int], np.ndarray] | None:
    """An index file's fields as its arrays hold them (see _NUMBERS), as the
    JSON holds them (each made into its list when first asked for, see
    :class:`_ArrayFields`), but the URLs: their names joined by NULs (see
    :func:`_resolved_joined`); where each shard's samples start (see
    :func:`_sample_bounds`); and the integers, a row each field. None where
    it has no such arrays (written by an earlier release) or they are of
    another version. Raises ValueError (naming ``location``) where they do
    not hold what they say."""
    numbers, urls, names = stored.get("fields"), stored.get("urls"), stored.get("names")
    if numbers is None or urls is None or names is None or numbers.dtype != np.int64 \
            or numbers.ndim != 1 or len(numbers) < 2 or int(numbers[0]) != _VERSION:  # fmt: skip
        return None
    count = int(numbers[1])
    texts = _strings_of(names, location)  # decoded when first asked for (see _ArrayFields)
    decoded = None if ascii_only(texts) else _decoded(texts)  # else checked now, as the rest
    named = _decoded(_strings_of(urls, location))
    # (UTF-8 holds a NUL byte only as the NUL character.)
    nuls = len(texts) - np.count_nonzero(texts)
    if count < 1 or len(numbers) != 2 + len(_NUMBERS) * count \
            or nuls != 2 * count - 1 or named.count("\0") != count - 1:  # fmt: skip
        raise ValueError(f"{location}: the index's fields differ in length")
    columns = numbers[2:].reshape(-1, count)
    counts = columns[_NUMBERS.index("count")]
    if counts.min() < 0:
        raise ValueError(f"{location}: the index counts fewer than no samples")
    fields = _ArrayFields(columns, named, texts, count, decoded)
    return fields, named, [0, *np.cumsum(counts).tolist()], columns


class _ArrayFields(Mapping[str, list[Any]]):
    """An index file's fields as its arrays hold them (``rows`` of _NUMBERS,
    the shards' names joined by NULs, their formats then fingerprints joined
    by NULs), each made into the list its JSON holds when first asked for:
    the open of a dataset whose shards are as indexed asks for none (see
    :meth:`formats`), and a list of thousands of numbers or strings costs
    more than the rest of the read. The formats and fingerprints, where
    they are ASCII (``decoded`` None), are decoded when first asked for too
    (880 KB of text at 20,000 shards)."""

    def __init__(self, rows: np.ndarray, names: str, texts: np.ndarray, count: int,
                 decoded: str | None = None) -> None:  # fmt: skip
        self._rows, self._names, self._count = rows, names, count
        self._text_bytes, self._text = texts, decoded
        self._made: dict[str, list[Any]] = {}

    @property
    def _texts(self) -> str:
        if self._text is None:
            self._text = _decoded(self._text_bytes)
        return self._text

    def __getitem__(self, field: str) -> list[Any]:
        made = self._made.get(field)
        if made is not None:
            return made
        if field in _NUMBERS:
            made = self._rows[_NUMBERS.index(field)].tolist()
        elif field == "url":
            made = self._names.split("\0")
        elif field == "format":  # the first of the texts: the rest is not split
            made = self._texts.split("\0", self._count)[: self._count]
        elif field == "fingerprint":
            made = self._texts.split("\0")[self._count :]
        else:
            raise KeyError(field)
        self._made[field] = made
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(_FIELDS)

    def __len__(self) -> int:
        return len(_FIELDS)

    def formats(self) -> set[str]:
        """The formats the shards were indexed as, without listing them where
        they are all one (as a dataset's mostly are: told by one comparison)."""
        unit = repeated_unit(self._text_bytes, self._count)
        if unit >= 0:
            return {_decoded(self._text_bytes[:unit])}
        return set(self["format"])


def _strings_of(array: np.ndarray, location: str) -> np.ndarray:
    """An index file's array of strings (see _field_arrays), checked to be one."""
    if array.dtype != np.uint8 or array.ndim != 1:
        raise ValueError(f"{location}: the index's strings are held as {array.dtype}, not bytes")
    return array


def _decoded(array: np.ndarray) -> str:
    """The strings an index file's array holds, as one (see _field_arrays)."""
    return str(array.data, "utf-8", "surrogatepass")  # decoded where it is: no copy


def index_columns(shards: Sequence[ShardIndex]) -> tuple[dict[str, list[Any]], np.ndarray,
                                                         np.ndarray]:  # fmt: skip
    """The fields of ``shards``, a list each (as an index file keeps them,
    their URLs as the indexes name them), and their sample offsets
    concatenated: see :func:`indexes_of_columns`."""
    fields: dict[str, list[Any]] = {
        "url": [index.url for index in shards],
        "format": [index.format for index in shards],
        "size": [index.size for index in shards],
        "version": [index.version for index in shards],
        "change": [index.change for index in shards],
        "fingerprint": [index.fingerprint for index in shards],
        "count": [len(index) for index in shards],
    }
    empty = [np.zeros(0, np.uint64)]
    starts = np.concatenate([index.starts for index in shards] or empty)
    ends = np.concatenate([index.ends for index in shards] or empty)
    return fields, starts, ends


def indexes_of_columns(fields: dict[str, list[Any]], starts: np.ndarray, ends: np.ndarray,
                       urls: Sequence[str], where: str) -> list[ShardIndex]:  # fmt: skip
    """The shards' indexes that :func:`index_columns` gave the fields and
    offsets of, named ``urls``; their offsets are views of ``starts`` and
    ``ends``. Field by field, not shard by shard: a dataset may have tens of
    thousands. Raises ValueError (naming ``where``) where the counts do not
    add up to the offsets."""
    return _indexes_at(fields, urls, _sample_bounds(fields, starts, ends, where), starts, ends)


def _indexes_at(fields: Mapping[str, list[Any]], urls: Sequence[str], bounds: list[int],
                starts: np.ndarray, ends: np.ndarray) -> list[ShardIndex]:  # fmt: skip
    columns = zip(urls, fields["format"], map(int, fields["size"]), map(int, fields["version"]),
                  map(int, fields["change"]), fields["fingerprint"], bounds[:-1], bounds[1:],
                  strict=True)  # fmt: skip
    return [ShardIndex(url, kind, size, version, starts[a:b], ends[a:b], change, print_)
            for url, kind, size, version, change, print_, a, b in columns]  # fmt: skip


def _sample_bounds(fields: Mapping[str, list[Any]], starts: np.ndarray, ends: np.ndarray,
                   where: str) -> list[int]:  # fmt: skip
    """Where each shard's samples start in ``starts`` and ``ends``, and their
    end. Raises ValueError (naming ``where``) where the counts do not add up
    to the offsets."""
    bounds = list(itertools.accumulate(map(int, fields["count"]), initial=0))
    if bounds[-1] != len(starts) or len(ends) != len(starts):
        raise ValueError(f"{where}: the index counts {bounds[-1]} samples, holds {len(starts)}")
    return bounds


@record(frozen=True)
class IndexColumns:
    """A dataset index as its file holds it (see :func:`index_columns`): each
    shard's fields in lists, its URL resolved, its samples' offsets at
    ``bounds[i]`` to ``bounds[i + 1]`` of ``starts`` and ``ends``. A dataset
    whose every shard is as its index holds it is laid out from these, with
    no index object a shard until one is asked for (see :meth:`indexes`)."""

    fields: Mapping[str, list[Any]]
    urls: Sequence[str]  # a list, or :class:`JoinedNames` (listed when first indexed)
    bounds: list[int]
    starts: np.ndarray
    ends: np.ndarray
    numbers: np.ndarray | None = None  # _NUMBERS, a row each, where the file held them so

    @classmethod
    def read(cls, data: bytes | mmap.mmap | memoryview, location: str) -> IndexColumns:
        """The index in ``data`` (the file at ``location``). Raises ValueError,
        KeyError, EOFError or BadZipFile for one that is damaged or not an
        index of this version."""
        stored = _npz_arrays(data, {"meta": "fields"})  # the JSON, where the arrays hold it
        folder = posixpath.dirname(index_key(location))
        starts, ends = stored["starts"], stored["ends"]
        found = _fields_of_arrays(stored, location)
        if found is not None:
            arrayed, named, bounds, numbers = found
            if bounds[-1] != len(starts) or len(ends) != len(starts):
                raise ValueError(f"{location}: the index counts {bounds[-1]} samples, holds "
                                 f"{len(starts)}")  # fmt: skip
            return cls(arrayed, _resolved_joined(named, folder), bounds, starts, ends, numbers)
        if "meta" not in stored:  # passed by, beside arrays of another version
            stored = _npz_arrays(data)
        meta = json.loads(stored["meta"].item())  # not str(): numpy would format it first
        made = meta.get("version")
        if made not in _READ_VERSIONS:
            raise ValueError(f"{location}: index version {made}, not {_VERSION}")
        shards = meta["shards"]
        if made == 2:
            shards = {field: [entry.get(field, default) for entry in shards]
                      for field, default in _FIELDS.items()}  # fmt: skip
        if len({len(shards[field]) for field in _FIELDS}) > 1:
            raise ValueError(f"{location}: the index's fields differ in length")
        urls = _resolved_all(shards["url"], folder)
        return cls(shards, urls, _sample_bounds(shards, starts, ends, location), starts, ends)

    def formats(self) -> set[str]:
        """The formats the shards were indexed as."""
        if isinstance(self.fields, _ArrayFields):
            return self.fields.formats()
        return set(self.fields["format"])

    def indexes(self) -> list[ShardIndex]:
        """Each shard's index; their offsets are views of the columns'."""
        return _indexes_at(self.fields, self.urls, self.bounds, self.starts, self.ends)

    def counts(self) -> list[int]:
        """Each shard's samples (from the row of counts where the file holds
        the fields as arrays: no field is listed for them)."""
        if self.numbers is not None:
            counts: list[int] = self.numbers[_NUMBERS.index("count")].tolist()
            return counts
        return list(map(int, self.fields["count"]))

    def stamp_rows(self) -> np.ndarray | None:
        """:meth:`stamps` as three rows of int64 (sizes, versions, changes);
        None where one does not fit."""
        if self.numbers is not None:
            return self.numbers[:3]
        fields = self.fields
        try:
            return np.array([fields["size"], fields["version"], fields["change"]], np.int64)
        except (OverflowError, TypeError, ValueError):
            return None

    def stamps(self) -> list[tuple[int, int, int]]:
        """Each shard's ``(size, version, change)`` as it was indexed."""
        fields = self.fields
        return list(zip(map(int, fields["size"]), map(int, fields["version"]),
                        map(int, fields["change"]), strict=True))  # fmt: skip


# The zip extra field that pads a member's local header (as Android's
# zipalign pads one): readers skip fields they do not know.
_PADDING_FIELD = 0xD935
_ALIGNMENT = 64


# How zipfile dates and marks a member written from bytes: 1980-01-01 00:00,
# made on Unix by zip 2.0, read and write for its owner.
_DOS_DATE = 1 << 5 | 1
_MADE_ON_UNIX = 3
_ZIP_VERSION = 20
_OWNER_READS_AND_WRITES = 0o600 << 16


def _aligned_npz(arrays: dict[str, np.ndarray]) -> bytes:
    """What ``np.savez`` writes (``np.load`` reads it), with each array's data
    at a multiple of 64 bytes in the file: :func:`_npz_arrays` then takes
    them as views of the file's bytes (a dataset index of 36k samples spent
    a tenth of its open copying its arrays, most of it faulting in the
    copies' fresh pages). Each member's local header is padded to get there.
    The archive is laid out here, byte for byte as the zip module lays it
    out (stored members): a first epoch writes an index file for each
    shard it streams, and the zip module took 70 us of each."""
    out = bytearray()
    directory = bytearray()
    for name, array in arrays.items():
        data = _npy_member(array)
        filename = f"{name}.npy".encode("ascii")
        offset = len(out)
        body = offset + _LOCAL.size + len(filename) + 4  # the padding field's own 4 bytes
        body += len(data) - array.nbytes  # past the array's npy header
        padding = -body % _ALIGNMENT
        extra = struct.pack("<2H", _PADDING_FIELD, padding) + bytes(padding)
        crc, size = zlib.crc32(data), len(data)
        out += _LOCAL.pack(b"PK\x03\x04", _ZIP_VERSION, 0, 0, 0, 0, _DOS_DATE, crc, size,
                           size, len(filename), len(extra))  # fmt: skip
        out += filename + extra
        out += data
        directory += _ENTRY.pack(b"PK\x01\x02", _ZIP_VERSION, _MADE_ON_UNIX, _ZIP_VERSION, 0,
                                 0, 0, 0, _DOS_DATE, crc, size, size, len(filename),
                                 len(extra), 0, 0, 0, _OWNER_READS_AND_WRITES, offset)  # fmt: skip
        directory += filename + extra
    start, count = len(out), len(arrays)
    out += directory
    out += _END.pack(b"PK\x05\x06", 0, 0, count, count, len(directory), start, 0)
    return bytes(out)


def _npy_member(array: np.ndarray) -> bytes | memoryview:
    """What ``np.lib.format.write_array`` writes of ``array``: its header (the
    same for arrays of one dtype and shape, worked out once: numpy's own
    formatting took 27 us an array) and its bytes."""
    dtype = array.dtype
    if array.flags.c_contiguous and dtype.names is None and not dtype.hasobject \
            and dtype.subdtype is None and dtype.metadata is None:  # fmt: skip
        return _npy_header(dtype.str, array.shape) + array.tobytes()
    member = io.BytesIO()
    np.lib.format.write_array(member, array, allow_pickle=False)
    return member.getbuffer()


@functools.lru_cache(maxsize=256)
def _npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False,
                                                  "shape": shape})  # fmt: skip
    return header.getvalue()


@record(frozen=True)
class DatasetIndex:
    """Every shard's index in one file (see the module). ``shards`` hold their
    URLs as given; :meth:`save` stores local ones relative to the file, so the
    dataset may move with it."""

    shards: list[ShardIndex]

    def to_bytes(self, location: str) -> bytes:
        return _index_file(self.shards, [_relative(index.url, location) for index in self.shards])

    @classmethod
    def read(cls, data: bytes, location: str) -> DatasetIndex:
        """The index in ``data`` (the file at ``location``). Raises ValueError,
        KeyError, EOFError or BadZipFile for one that is damaged or not an
        index of this version."""
        return cls(IndexColumns.read(data, location).indexes())

    def lookup(self) -> dict[str, ShardIndex]:
        """The shards' indexes by URL (local paths made absolute)."""
        return dict(zip(index_keys([index.url for index in self.shards]), self.shards,
                        strict=True))  # fmt: skip

    def save(self, location: str, storage_options: dict[str, Any] | None = None) -> None:
        """Write the index to ``location`` (a path or URL), atomically where local."""
        data = self.to_bytes(location)
        if is_remote(location):
            import fsspec

            with fsspec.open(location, "wb", **(storage_options or {})) as out:
                out.write(data)
            return
        _write_atomically(Path(local_path(location)), data)

    @classmethod
    def fetch(cls, location: str, storage_options: dict[str, Any] | None = None,
              settings: ReaderSettings | None = None) -> DatasetIndex | None:  # fmt: skip
        """The dataset index at ``location``, read with one request (retried
        as ``settings`` say); None where there is none. Raises
        :class:`fastio.IndexFileError` for a damaged one."""
        columns = cls.fetch_columns(location, storage_options, settings)
        return None if columns is None else cls(columns.indexes())

    @staticmethod
    def fetch_columns(location: str, storage_options: dict[str, Any] | None = None,
                      settings: ReaderSettings | None = None) -> IndexColumns | None:  # fmt: skip
        """:meth:`fetch`'s index as its file holds it (see :class:`IndexColumns`)."""
        data: bytes | mmap.mmap | memoryview
        try:
            if is_remote(location):
                from fastio.sources._remote import read_object

                data = bytes(read_object(location, storage_options or {}, settings))
            else:
                # Mapped unless the reader maps nothing (``map_cached=False``).
                mapped = settings is None or settings.map_cached is not False
                data, whole = _dataset_index_bytes(local_path(location), mapped)
                if not whole:  # its JSON left out: read whole where what was read will not do
                    with contextlib.suppress(*UNREADABLE):
                        return IndexColumns.read(data, location)
                    data = Path(local_path(location)).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        try:
            return IndexColumns.read(data, location)
        except UNREADABLE as error:
            raise IndexFileError(location, "the dataset", _problem(error)) from None


_TEMPORARIES = itertools.count()


def _write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash never leaves a torn file.
    The file gets the mode any file the process writes gets (0666 less its
    umask), not ``mkstemp``'s 0600: a dataset index beside the shards is read
    by every rank, node and user that reads them, and by a web server that
    serves them. The temporary file is named after the process, the thread
    and a count (a first epoch writes a file a shard: a random name asked
    the kernel for randomness each time), randomly where that is taken."""
    path = os.fspath(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    temporary = f"{path}.{os.getpid()}-{threading.get_ident()}-{next(_TEMPORARIES)}.tmp"
    try:
        try:
            handle = os.open(temporary, flags, 0o666)
        except FileExistsError:  # left by a process that had this pid (another container's)
            temporary = f"{path}.{os.getpid()}-{os.urandom(8).hex()}.tmp"
            handle = os.open(temporary, flags, 0o666)
    except OSError as error:  # said of the file asked for (a missing folder), not the temporary
        raise type(error)(error.errno, error.strerror, path) from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(handle, view) :]
        finally:
            os.close(handle)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def dataset_index_location(urls: Sequence[str], *, keyed: bool = False) -> str:
    """Where a dataset's index is looked for unless named: ``dataset.fastio-index.npz``
    in the folder that holds every shard. ``keyed``: ``urls`` are the shards'
    :func:`index_keys` already."""
    keys = urls if keyed else index_keys(urls)
    # A shard is in a folder or below it where its key starts with the folder
    # and a slash. Every key starts with a text where the first and the last
    # of them in sorted order do: two passes in C over thousands of shards'
    # keys, not a prefix test of each for each folder tried.
    shared = posixpath.commonprefix([min(keys), max(keys)])
    common = posixpath.dirname(keys[0])
    while not shared.startswith(common.rstrip("/") + "/"):
        parent = posixpath.dirname(common)
        if parent == common:  # no folder holds them all (local paths and URLs together)
            common = ""
            break
        common = parent
    return posixpath.join(common, DATASET_INDEX) if common else DATASET_INDEX


def index_key(url: str) -> str:
    """How indexes name ``url``: as given where remote, else its absolute path."""
    return url if is_remote(url) else absolute_path(local_path(url))


def index_keys(urls: Iterable[str]) -> list[str]:
    """:func:`index_key` of each of ``urls``. A path that is absolute and
    normal already (no ``.``, ``..`` or empty part: no ``//``, so no protocol
    either) is its own key, told without a call: a dataset may have tens of
    thousands of shards, keyed before its first sample. Where all of them
    are, that is told in one native pass."""
    urls = list(urls)
    if normal_paths(urls):
        return urls
    return [index_key(url) for url in urls]


def _relative(url: str, location: str) -> str:
    """``url`` as an index file at ``location`` names it: relative to the file's
    folder where it is below it, else whole (a local path made absolute, so
    that a shard given relative to the working folder is not read back
    relative to the index folder)."""
    key = index_key(url)
    if is_remote(url) != is_remote(location):
        return key
    base = posixpath.dirname(index_key(location))
    return key[len(base) + 1 :] if key.startswith(base + "/") else key


def _resolved_all(names: Sequence[str], folder: str) -> list[str]:
    """``names`` as an index file in ``folder`` names them: the URLs or paths
    they mean."""
    if not folder or folder.endswith("/"):
        return [_resolved(name, folder) for name in names]
    within = folder + "/"  # posixpath.join's result, told without a call
    return [name if "://" in name or name[:1] == "/" else within + name for name in names]


def holds(text: str, part: str) -> bool:
    """``part in text``, its first character looked for first: Python finds a
    character alone at memchr's speed and more at about a tenth of it, and
    the text is many shards' names joined."""
    return part[0] in text and part in text


def _resolved_joined(joined: str, folder: str) -> list[str] | JoinedNames:
    """:func:`_resolved_all` of the names ``joined`` by NULs: where every one
    is relative (a dataset index beside its shards), the folder is put
    before each in one pass over the joined string, and they stay joined."""
    if folder and not folder.endswith("/") and joined[:1] != "/" \
            and not holds(joined, "\0/") and not holds(joined, "://"):  # fmt: skip
        return JoinedNames(joined, folder + "/")
    return _resolved_all(joined.split("\0"), folder)


class JoinedNames(Sequence[str]):
    """Names (none holding a NUL) joined by NULs, each after ``prefix``
    (a folder), listed when first indexed or iterated: a dataset of
    thousands of shards checks that its index names every one of them, in
    order, by one native pass over their own names (:meth:`__eq__`), before
    its first sample, with no string made (the names with their folder,
    joined, were 1.2 MB at 20,000 shards, and the dataset's own joined as
    much again)."""

    __slots__ = ("_count", "_listed", "_prefix", "_relative")

    def __init__(self, joined: str, prefix: str = "") -> None:
        self._relative, self._prefix = joined, prefix
        self._count = joined.count("\0") + 1
        self._listed: list[str] | None = None

    @property
    def _joined(self) -> str:
        """The names, each after the prefix, joined."""
        prefix = self._prefix
        return prefix + self._relative.replace("\0", "\0" + prefix) if prefix else self._relative

    def _list(self) -> list[str]:
        if self._listed is None:
            self._listed = self._joined.split("\0")
        return self._listed

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        return self._list()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        """Equal to names listed alike: as many, joined alike (a name of
        ``other`` holding a NUL would add one to its joined names)."""
        if isinstance(other, JoinedNames):
            if self._prefix == other._prefix:  # (the names with their folder not made)
                return self._relative == other._relative
            return self._joined == other._joined
        if isinstance(other, (list, tuple)):
            if len(other) != self._count:
                return False
            return joined_alike(
                self._relative, self._prefix, other if isinstance(other, list) else list(other)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def __repr__(self) -> str:
        return repr(self._list())


def _resolved(name: str, folder: str) -> str:
    """``name`` as an index file in ``folder`` names it: the URL or path it means."""
    if "://" in name or name.startswith("/"):
        return name
    return posixpath.join(folder, name)
