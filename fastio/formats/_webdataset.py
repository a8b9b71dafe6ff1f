"""WebDataset tar shards: members grouped into samples by key, as webdataset does.

Read as samples (dicts of views) or as Arrow batches gathered natively, located
for the index, and written (plain ustar headers, written directly: ``tarfile``
spends ~40 us per member, a minute for a million samples).
"""

from __future__ import annotations

import contextlib
import functools
import re
import tarfile
from typing import TYPE_CHECKING, Any

from fastio._errors import CorruptRecordError, DecodeError, TruncatedShardError
from fastio._native import TarColumns, group_tar, scan_tar
from fastio.formats._compression import codec_for, decompress
from fastio.formats._index import Locator
from fastio.formats._layout import MAPPED_SAMPLE_BYTES, batch_of
from fastio.formats._reassemble import MAX_BATCH_BYTES, Framing, arrow, batched, framed, too_large
from fastio.formats._records import RecordFormat, RecordWriter, owned, owned_kind
from fastio.reader._ranges import ByteRange

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Iterator, Mapping

    from typing_extensions import Buffer

    from fastio._native import FrameError, TarMember, TarSamples
    from fastio.formats._layout import Layout
    from fastio.reader._ranges import Chunk
    from fastio.reader._reader import Reader

__all__ = [
    "WebDatasetFormat",
    "WebDatasetWriter",
    "columns_webdataset",
    "decode_webdataset",
    "header_key",
    "locate_webdataset",
    "resync_webdataset",
    "sample_key",
    "tar_header",
]

# webdataset's rule: the key is the path up to the first dot of its last
# component, the extension is the rest ("a/b.seg.png" -> "a/b", "seg.png").
_BLOCK = 512
_ASCII_LOWER = {upper: upper + 32 for upper in range(65, 91)}  # str.translate: A-Z to a-z
_REGULAR = frozenset("07")
# Extensions keep their columns across a shard's batches (missing ones are null),
# so that batches share a schema; a shard with more distinct extensions than
# this starts afresh at its next batch, which then has only its own.
_MAX_STABLE_COLUMNS = 64


@functools.cache
def _key_and_extension() -> re.Pattern[str]:
    # Compiled at first use: the native scan splits ASCII names itself.
    return re.compile(r"^((?:.*/|)[^./]+)[.]([^/]*)$")


def sample_key(name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a member name, or None for names without an
    extension (webdataset skips those). The extension's ASCII letters are
    lowered, as webdataset lowers extensions (``img.JPG`` is ``jpg``)."""
    match = _key_and_extension().match(name)
    return (match.group(1), match.group(2).translate(_ASCII_LOWER)) if match else None


def _padded(size: int) -> int:
    return (size + _BLOCK - 1) // _BLOCK * _BLOCK


class _TarScan:
    """Frames a tar's members for :func:`framed`, grouped natively into
    samples (one :class:`~fastio._native.TarSamples` per scan), and remembers
    the sample key of the member where its last scan stopped (cut off, or
    with a damaged header), where the header shows it: the sample a cut or
    damage costs. ``own`` makes the samples' values (None: views)."""

    def __init__(self, url: str, own: Any = None) -> None:
        self.url = url
        self.own = own
        self.members = 0  # members framed so far, for record indices
        self.stopped_key: str | None = None
        self.stopped_whole = False  # whether that member's header block is wholly in view

    def __call__(self, view: memoryview, base: int) -> Framing[tuple[TarSamples, int]]:
        found = group_tar(view, self.url, sample_key, self.own)
        self.members += found.members
        problem = None
        stop = found.consumed
        if found.error is not None:
            stop = found.error.offset
            problem = CorruptRecordError(f"damaged tar header ({found.error.kind})", self.url,
                                         base + stop, self.members)  # fmt: skip
        self.stopped_key = None if found.at_end else header_key(view[stop:])
        self.stopped_whole = len(view) - stop >= _BLOCK
        return Framing([(found, base)], found.consumed, found.needed, found.at_end, problem)


def _members(view: memoryview, base: int) -> Framing[tuple[TarMember, int]]:
    """A tar's members one by one, for :func:`framed` (a resync looks at names
    alone; what it stops at, it leaves to the scan that goes on)."""
    found = scan_tar(view)
    problem = None if found.error is None else DecodeError("damaged tar header", "", base)
    return Framing([(member, base) for member in found.members], found.consumed, found.needed,
                   found.at_end, problem)  # fmt: skip


def header_key(block: memoryview | bytes) -> str | None:
    """The sample key a regular member's header block names (the block may
    be cut short, or fail its checksum), where its name and type are there
    to read. An extended header (pax, GNU long name) before it is followed
    where ``block`` holds it whole (its path is the member's); cut inside
    it, the key is not known (None)."""
    view = memoryview(block).cast("B") if not isinstance(block, memoryview) else block
    at, path = 0, None
    while True:
        head = view[at : at + _BLOCK]
        kind = bytes(head[156:157])
        if kind in (b"x", b"L") and len(head) == _BLOCK:  # of the member after it
            size = _extended_size(head)
            if size is None:
                return None
            data = bytes(view[at + _BLOCK : at + _BLOCK + size])
            if len(data) < size:
                return None
            path = data.split(b"\0", 1)[0] if kind == b"L" else (_pax_path(data) or path)
            at += _BLOCK + -(-size // _BLOCK) * _BLOCK
            continue
        if len(head) < 157 or kind not in (b"0", b"\0", b"7"):
            if path is not None and len(head) < 157:  # the header after it is cut short
                break
            return None
        break
    if path is not None:
        name = path
    else:
        head = view[at : at + _BLOCK]
        name = bytes(head[:100]).split(b"\0", 1)[0]
        if bytes(head[257:263]) == b"ustar\0":  # POSIX: a prefix of the path
            prefix = bytes(head[345:500]).split(b"\0", 1)[0]
            if prefix:
                name = prefix + b"/" + name
    parts = sample_key(name.decode("utf-8", "surrogateescape"))
    return parts[0] if parts else None


def _pax_path(data: bytes) -> bytes | None:
    """The ``path`` a pax extended header's records give, if any."""
    at, path = 0, None
    while at < len(data):
        length_text, space, _ = data[at : at + 20].partition(b" ")
        if not space or not length_text.isdigit() or int(length_text) <= 0:
            break
        record = data[at : at + int(length_text)]
        key, equals, value = record[len(length_text) + 1 :].partition(b"=")
        if equals and key == b"path":
            path = value.rstrip(b"\n")
        at += int(length_text)
    return path


def decode_webdataset(
    chunks: Iterable[Chunk], url: str, *, whole: bool = False
) -> Iterator[dict[str, Any]]:
    """Samples of one WebDataset tar shard: ``{"__key__", "__url__", ext: view}``
    for consecutive members sharing a key. Directories and names without an
    extension are skipped, as webdataset does; a repeated extension within one
    sample raises :class:`DecodeError`. With ``whole`` the chunks are a whole
    archive, which ends in its end-of-archive marker: one cut short exactly
    between members raises :class:`TruncatedShardError` (``lost`` 0) after
    its last sample.

    Before a damaged or cut header, the sample in progress is delivered
    unless the header names that sample's key (the sample is then the one
    lost); a header too damaged or too short to name one counts as the next
    sample's."""
    return (sample for _, _, sample in locate_webdataset(chunks, url, whole=whole))


def locate_webdataset(
    chunks: Iterable[Chunk], url: str, *, whole: bool = False, own: Any = None,
    range_ends: bool = False,
) -> Iterator[tuple[int, int, dict[str, Any]]]:  # fmt: skip
    """Like :func:`decode_webdataset`, with each sample's byte range in the shard
    (its first member's header to its last member's padded data), for the index.
    A sample's range read on its own decodes to the same sample. Values are
    views of the chunks, or ``own(view)`` (``bytes``: copied straight).
    ``range_ends``: each range read ends a sample (ranges of whole samples,
    as an index gives them), so a sample that ends where a range does comes
    at once. Otherwise a sample comes once the next member's whole header
    shows another key."""
    sample: dict[str, Any] | None = None
    start = end = 0
    ended = [-1]  # where the range of the chunk last taken ends, if that chunk ends it
    if range_ends:
        chunks = _noting_range_ends(chunks, ended)
    scan = _TarScan(url, own)
    groups = framed(chunks, url, scan, require_end=whole)
    while True:
        try:
            found, base = next(groups)
        except StopIteration:
            break
        except DecodeError as error:
            if sample is None:
                raise
            if not (error.lost and scan.stopped_key == sample["__key__"]):
                yield start, end, sample
            raise
        samples = found.samples
        if not samples:
            if sample is not None and _ended_by(scan, sample):
                yield start, end, sample
                sample = None
            continue
        starts, ends = found.starts, found.ends
        first = 0
        if sample is not None:
            if samples[0]["__key__"] == sample["__key__"]:  # it goes on from the last buffer
                _merge(sample, samples[0], found.first_offsets, base, url)
                end = base + ends[0]
                first = 1
            if first < len(samples):
                yield start, end, sample
        last = len(samples) - 1
        for index in range(first, last):
            yield base + starts[index], base + ends[index], samples[index]
        if first <= last:
            sample, start, end = samples[last], base + starts[last], base + ends[last]
        if found.repeat is not None:  # the sample it stopped in is lost
            offset, name = found.repeat
            key, extension = sample_key(name) or (name, "")
            raise DecodeError(f"{name!r} repeats extension {extension!r} of sample {key!r}",
                              url, base + offset)  # fmt: skip
        if sample is not None and (end == ended[0] or _ended_by(scan, sample)):
            yield start, end, sample
            sample = None
    if sample is not None:
        yield start, end, sample


def _ended_by(scan: _TarScan, sample: dict[str, Any]) -> bool:
    """Whether the member ``scan`` stopped at (cut off by the buffer's end)
    names another sample in its header: the sample in progress then has all
    its members, and need not wait for the next buffer to show that (the
    first sample of a remote shard waited a round trip for it). Only a
    whole header block settles it: one cut short may show part of a ustar
    prefix, and so a key the member does not have."""
    return (scan.stopped_whole and scan.stopped_key is not None
            and scan.stopped_key != sample["__key__"])  # fmt: skip


def _noting_range_ends(chunks: Iterable[Chunk], ended: list[int]) -> Iterator[Chunk]:
    """``chunks``, with ``ended[0]`` set, as each is taken, to where its range
    ends if it is the range's last chunk (else -1)."""
    for chunk in chunks:
        ended[0] = chunk.offset + len(chunk.data) if chunk.end_of_range else -1
        yield chunk


def _merge(
    sample: dict[str, Any], more: dict[str, Any], offsets: Iterable[int], base: int, url: str
) -> None:
    """Members of ``sample`` that the next buffer held added to it (``offsets``:
    their header offsets there)."""
    extensions = list(more)[2:]  # after "__key__" and "__url__"
    for extension, offset in zip(extensions, offsets, strict=True):
        if extension in sample:
            key = sample["__key__"]
            raise DecodeError(f"{key + '.' + extension!r} repeats extension {extension!r} of "
                              f"sample {key!r}", url, base + offset)  # fmt: skip
        sample[extension] = more[extension]


def resync_webdataset(reader: Reader, url: str, error: DecodeError) -> int | None:
    """Where a scan of an uncompressed tar goes on after ``error``: at the next
    header block that checks out (after a damaged one: where its size says,
    if it still reads, else the next block that passes the checksum), past
    the members that share the lost sample's key. None after a cut, or where
    no header follows.

    A member's data that holds a tar header of its own (a tar inside the
    sample) can pass for the next header there."""
    size, _ = reader.describe(url)
    if isinstance(error, TruncatedShardError) or not 0 <= error.offset <= size - _BLOCK:
        return None
    head = _read(reader, url, error.offset, _BLOCK)
    lost_key = header_key(head)
    at = error.offset
    if scan_tar(memoryview(head)).error is not None:
        following = _next_header(reader, url, error.offset, head, size)
        if following is None:
            return None
        at = following
        if lost_key is None and head[156:157] in (b"x", b"L", b"K"):
            # A damaged extended header: the member it belongs to is the next.
            lost_key = header_key(_read(reader, url, at, _BLOCK))
    after = at
    with contextlib.closing(_members_at(reader, url, at)) as members:
        for member, base in members:
            parts = sample_key(member.name)
            if member.typeflag in _REGULAR and parts is not None and parts[0] != lost_key:
                after = base + member.header_offset
                break
            after = base + member.data_offset + _padded(member.size)
    if after <= error.offset:
        # The header block checks out, yet what it starts does not decode (an
        # extended header's damaged records), or it is zeros, which end no
        # archive that goes on after them: going on there would meet the same
        # error again, forever. The next header after the block instead.
        following = _next_header(reader, url, error.offset, head, size)
        if following is None:
            return None
        after = following
    if lost_key is None:
        # Damage that names no key (a block of zeros over a header): the
        # members after it may be the rest of the sample it hit.
        return _past_a_remnant(reader, url, after)
    return after


def _past_a_remnant(reader: Reader, url: str, at: int) -> int:
    """Where the samples after unnamed damage start: at ``at``, unless the
    sample there has fewer members than the one after it, each of that one's
    extensions (what is left of the damaged sample, whose first members the
    damage took: delivered, it would lack them); then past it. Samples of a
    shard mostly hold the same members."""
    extensions: list[set[str]] = []  # of the sample at ``at``, then the next
    keys: list[str] = []
    second = at
    with contextlib.closing(_members_at(reader, url, at)) as members:
        for member, base in members:
            parts = sample_key(member.name)
            if member.typeflag not in _REGULAR or parts is None:
                continue
            key, extension = parts
            if not keys or keys[-1] != key:
                if len(keys) == 2:
                    break
                keys.append(key)
                extensions.append(set())
                if len(keys) == 2:
                    second = base + member.header_offset
            extensions[-1].add(extension)
    if len(extensions) == 2 and extensions[0] < extensions[1]:
        return second
    return at


def _members_at(reader: Reader, url: str, at: int) -> Generator[tuple[TarMember, int]]:
    """The tar's members from byte ``at`` on, with their buffers' offsets, as
    far as they frame: damage further on ends them, for the scan that goes on
    to meet again (close it to end the read early)."""
    stream = reader.stream([ByteRange(url, at)])
    try:
        yield from framed(stream, url, _members)
    except DecodeError:
        return
    finally:
        stream.close()  # type: ignore[attr-defined]


def _read(reader: Reader, url: str, offset: int, length: int) -> bytes:
    return b"".join(bytes(c.data) for c in reader.stream([ByteRange(url, offset, length)]))


def _is_header(block: memoryview | bytes | bytearray) -> bool:
    return len(block) == _BLOCK and any(block) and scan_tar(memoryview(block)).error is None


def _next_header(reader: Reader, url: str, damaged: int, head: bytes, size: int) -> int | None:
    """The offset of the first header block after the damaged one at
    ``damaged`` that passes its checksum; None where none does."""
    try:  # the damage may have spared the size field: the next header is then right there
        candidate = damaged + _BLOCK + _padded(int(head[124:136].strip(b" \0"), 8))
    except ValueError:
        candidate = size
    if candidate <= size - _BLOCK and _is_header(_read(reader, url, candidate, _BLOCK)):
        return candidate
    position = damaged + _BLOCK
    pending = bytearray()
    stream = reader.stream([ByteRange(url, position)])
    try:
        for chunk in stream:
            pending += chunk.data
            whole = len(pending) - len(pending) % _BLOCK
            for block in range(0, whole, _BLOCK):
                if _is_header(pending[block : block + _BLOCK]):
                    return position + block
            del pending[:whole]
            position += whole
    finally:
        stream.close()  # type: ignore[attr-defined]
    return None


def columns_webdataset(
    chunks: Iterable[Chunk], url: str, *, max_batch_bytes: int = MAX_BATCH_BYTES,
    whole: bool = False, parts: bool = False, range_ends: bool = False,
) -> Iterator[Any]:  # fmt: skip
    """The samples :func:`decode_webdataset` yields, as record batches in order
    (of at most ``max_batch_bytes`` in any column).

    Columns: ``__key__`` (string), ``__url__`` (dictionary-encoded string) and
    one binary column per extension, sorted by name; a sample without an
    extension that the shard had so far has a null there. Errors, and the
    samples delivered before them, are those of :func:`decode_webdataset`,
    except that keys and extensions must be UTF-8 (Arrow strings cannot hold
    other bytes), else :class:`DecodeError`. ``whole`` as there;
    ``range_ends``: each range read ends a sample (see
    :func:`~fastio.formats._reassemble.batched`). With
    ``parts``, :class:`~fastio.formats._parts.TarPart` objects instead of
    batches: the samples not copied yet.
    """
    pyarrow = arrow()
    collector = TarColumns()
    members = 0  # tar members before the current scan, for record indices

    def scan(data: Any, base: int, final: bool) -> tuple[Any, Exception | None]:
        nonlocal members
        if not collector.rows and collector.columns > _MAX_STABLE_COLUMNS:
            collector.reset()
        found = collector.scan(data, final, max_batch_bytes)
        problem: Exception | None = None
        if found.error is not None and not final:
            # Damage at an extended header whose path is not in view yet: the
            # sample it belongs to is told once it is (as samples are decoded,
            # whatever the chunks).
            damaged = memoryview(data)[found.error.offset :]
            needed = _extended_end(damaged)
            if needed is not None and len(damaged) < needed:
                members += found.records
                return _Waiting(found.consumed, found.error.offset - found.consumed + needed), None
        if found.error is not None:
            problem = _tar_problem(found.error, data, url, base, members)
            if found.error.kind not in ("repeated_extension", "bad_name"):
                pending = memoryview(data)[found.consumed : found.error.offset]
                if _before_damage(pending, memoryview(data)[found.error.offset :]):
                    collector.scan(pending, True, max_batch_bytes)
        elif found.full and not collector.rows:
            problem = too_large(url, base, max_batch_bytes)
        members += found.records
        return found, problem

    def take() -> Any:
        if parts:
            from fastio.formats._parts import TarPart  # batches' only

            samples = collector.detach()
            return None if samples is None else TarPart.of(samples, url)
        batch = collector.take(url)
        return None if batch is None else pyarrow.record_batch(batch)

    return batched(chunks, url, scan, take, require_end=whole, range_ends=range_ends)


class _Waiting:
    """A scan that needs more bytes before it can tell what damage costs:
    ``needed`` of them after ``consumed`` (as :class:`Collected` says)."""

    __slots__ = ("consumed", "needed")

    at_end = full = False

    def __init__(self, consumed: int, needed: int) -> None:
        self.consumed, self.needed = consumed, needed


def _before_damage(pending: memoryview, damaged: memoryview) -> bool:
    """Whether the sample whose members are ``pending`` is complete, as
    :func:`locate_webdataset` decides, before the member cut off or damaged
    at ``damaged``: unless that member's header names its key."""
    keys = (sample_key(m.name) for m in scan_tar(pending).members if m.typeflag in _REGULAR)
    parts = next((parts for parts in keys if parts is not None), None)
    return parts is not None and parts[0] != header_key(damaged)


def _extended_end(block: memoryview | bytes) -> int | None:
    """Where the header after the extended header (pax, GNU long name) that
    ``block`` starts with ends, if it starts with one whose size reads (and
    is not past :data:`_EXTENDED_LIMIT`): what :func:`header_key` needs in
    view to name the member's key."""
    if len(block) < _BLOCK or bytes(block[156:157]) not in (b"x", b"L"):
        return None
    size = _extended_size(block)
    if size is None or size > _EXTENDED_LIMIT:
        return None
    return 2 * _BLOCK + -(-size // _BLOCK) * _BLOCK


def _extended_size(head: memoryview | bytes) -> int | None:
    """The size an extended header block gives its records, where it reads (octal)."""
    field = bytes(head[124:136]).strip(b" \0")
    if not field or not all(48 <= c <= 55 for c in field):  # "0".."7"
        return None
    return int(field, 8)


# An extended header's records are a few hundred bytes (a path, times): one
# that says more is damage, not waited for.
_EXTENDED_LIMIT = 1 << 20


def _tar_problem(error: FrameError, data: Any, url: str, base: int, members: int) -> Exception:
    kind, offset, index = error.kind, base + error.offset, members + error.index
    if kind == "truncated":
        present = len(data) - error.offset
        message = f"shard ends inside a record ({present} bytes of it present)"
        return TruncatedShardError(message, url, offset)
    if kind == "repeated_extension":
        name = scan_tar(memoryview(data)[error.offset :]).members[0].name
        key, extension = sample_key(name) or (name, "")
        message = f"{name!r} repeats extension {extension!r} of sample {key!r}"
        return DecodeError(message, url, offset)
    if kind == "bad_name":
        message = "a member's key or extension is not UTF-8 (Arrow strings cannot hold it)"
        return DecodeError(message, url, offset, index)
    return CorruptRecordError(f"damaged tar header ({kind})", url, offset, index)


_OWN_COLUMNS = ("__key__", "__url__")


class WebDatasetFormat(RecordFormat):
    name = "webdataset"

    def maps_cached(self, columnar: bool, sample_bytes: float | None) -> bool:
        # Large members are copied once, into a sample's bytes or a batch's
        # column, past the headers (110 KB samples: 44k/s read, 55k mapped;
        # .batches(256) 40k and 46k). Small ones are a header each: the scan
        # passes over nearly every byte before the copy (1 KB samples in
        # .batches(256): 1.17M/s read, 1.11M mapped).
        if sample_bytes is None:
            return not columnar
        return sample_bytes >= MAPPED_SAMPLE_BYTES

    def locator(self) -> Locator:
        # The index scans whole archives, which end in their end marker.
        return Locator(self.name, functools.partial(locate_webdataset, whole=True),
                       resync_webdataset)  # fmt: skip

    def own(self, record: Any, url: str, offset: int) -> dict[str, Any]:
        return {key: owned(value) for key, value in record.items()}

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[dict[str, Any]]:
        located = locate_webdataset(self._decompressed(chunks, layout), layout.url,
                                    whole=layout.whole, own=owned_kind(),
                                    range_ends=layout.per_sample)  # fmt: skip
        return (sample for _, _, sample in located)

    def scanned(
        self, chunks: Iterable[Chunk], url: str, encoded: bool = False
    ) -> Iterator[tuple[int, int, Any]]:
        # A sample is its members' bytes: held as read (``encoded`` changes nothing).
        whole = decompress(chunks, url) if codec_for(url) is not None else chunks
        return locate_webdataset(whole, url, whole=True, own=owned_kind())

    def batch_of(self, samples: list[Any]) -> Any:
        # As columns_webdataset makes them: __key__, __url__ (dictionary-encoded), then
        # the extensions by name, binary.
        pyarrow = arrow()
        batch = batch_of(samples)
        names = sorted(batch.schema.names, key=lambda name: (name not in _OWN_COLUMNS, name))
        columns = []
        for name in names:
            column = batch.column(name)
            if name == "__url__":
                column = column.dictionary_encode()
            elif name not in _OWN_COLUMNS and pyarrow.types.is_null(column.type):
                column = column.cast(pyarrow.binary())
            columns.append(column)
        return pyarrow.record_batch(columns, names)

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        # An index's ranges hold whole samples.
        return columns_webdataset(self._decompressed(chunks, layout), layout.url,
                                  whole=layout.whole, range_ends=layout.per_sample)  # fmt: skip

    def parts(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        return columns_webdataset(self._decompressed(chunks, layout), layout.url,
                                  whole=layout.whole, parts=True,
                                  range_ends=layout.per_sample)  # fmt: skip


# ---- writing ------------------------------------------------------------------------


def _ustar_template() -> bytearray:
    """A ustar header without name, size and checksum."""
    header = bytearray(512)
    for offset, value in (
        (100, b"0000644\0"),  # mode
        (108, b"0000000\0"),  # uid
        (116, b"0000000\0"),  # gid
        (136, b"00000000000\0"),  # mtime
        (148, b" " * 8),  # the checksum field counts as spaces
        (156, b"0"),  # a regular file
        (257, b"ustar\x0000"),  # magic and version; device numbers stay empty
    ):
        header[offset : offset + len(value)] = value
    return header


_USTAR_TEMPLATE = _ustar_template()
_USTAR_SUM = sum(_USTAR_TEMPLATE)


def tar_header(name: str, size: int) -> bytes:
    """The ustar header of a regular file, as ``tarfile`` writes it (mode 644,
    owner 0, time 0); names over 100 bytes go through ``tarfile`` (pax)."""
    encoded = name.encode()
    if len(encoded) > 100 or size >= 8**11:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime, info.uname, info.gname = size, 0o644, 0, "", ""
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    size_field = b"%011o\0" % size
    header = _USTAR_TEMPLATE.copy()
    header[: len(encoded)] = encoded
    header[124:136] = size_field
    header[148:155] = b"%06o\0" % (_USTAR_SUM + sum(encoded) + sum(size_field))
    return bytes(header)


class WebDatasetWriter(RecordWriter):
    """Writes WebDataset samples as tar members ``<key>.<extension>``, one
    sample's members together; :meth:`close` writes the end-of-archive marker,
    padded to whole 10 KiB tar records as ``tar`` does."""

    format = "webdataset"

    def write(self, key: str, members: Mapping[str, Buffer]) -> None:
        """Write a sample: ``members`` maps extensions to their bytes. Raises
        ValueError for no members, or a key or extension that would not read
        back as such."""
        if not members:
            raise ValueError(f"sample {key!r} has no members")
        if sample_key(f"{key}.x") != (key, "x"):
            raise ValueError(f"{key!r} cannot be a sample key (a dot in its last component?)")
        for extension in members:
            if not extension or "/" in extension:
                raise ValueError(f"{extension!r} cannot be an extension")
        write, start = self.file.write, self.position
        for extension, data in members.items():
            size = memoryview(data).nbytes
            header = tar_header(f"{key}.{extension}", size)
            padding = -size % _BLOCK
            write(header)
            write(data)
            write(bytes(padding))
            self.position += len(header) + size + padding
        self._noted(start)

    def close(self) -> None:
        end = 2 * _BLOCK + (-(self.position + 2 * _BLOCK) % tarfile.RECORDSIZE)
        self._put(bytes(end))
