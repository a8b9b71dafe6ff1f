"""Parquet and Arrow IPC files, read by row group or record batch through
fastio's reader: footers and the selected columns' byte ranges are fetched
first, and pyarrow decodes them from memory (it never opens the file). Written
by pyarrow, a row group or record batch at a time.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio import _native
from fastio._errors import DecodeError, TruncatedShardError, import_extra
from fastio.formats._layout import MAPPED_SAMPLE_BYTES, Layout, ShardFormat, ShardWriter
from fastio.formats._records import owned_kind
from fastio.reader._ranges import ByteRange
from fastio.sources._objects import is_remote, local_path

if TYPE_CHECKING:
    from collections.abc import Container, Iterable, Iterator, Sequence

    import pyarrow as pa

    from fastio.formats._compression import Writable
    from fastio.reader._ranges import Chunk
    from fastio.reader._reader import Reader

__all__ = ["ArrowFormat", "ParquetFormat", "TableWriter"]


class _RangeFile:
    """A read-only file of ``size`` bytes of which only some ranges are known:
    what pyarrow reads of a Parquet or Arrow file is fetched by fastio's reader
    first and served from here, as views of the fetched bytes (a reader's
    buffer, or one copy of the chunks of a range that came in several;
    pyarrow wraps a view without another copy). pyarrow reads a column chunk
    or a record batch message in one read, the very range fetched for it; a
    read across neighbouring ranges is joined for that read alone. A read
    outside the known ranges is a bug in the range planning, reported as such
    rather than silently re-read."""

    mode = "rb"

    def __init__(self, url: str, size: int, pieces: dict[int, Any]) -> None:
        self.url = url
        self.size = size
        self.position = 0
        self.closed = False
        self.hold(pieces)

    def hold(self, pieces: dict[int, Any]) -> None:
        """Serve ``pieces`` (bytes by file offset) from now on, instead of
        those before: a read decodes one unit at a time, and lets each go."""
        self.starts = sorted(pieces)
        self.pieces = [memoryview(pieces[start]) for start in self.starts]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.size}[whence]
        self.position = base + offset
        return self.position

    def read(self, size: int | None = -1) -> bytes | memoryview:
        end = self.size if size is None or size < 0 else min(self.size, self.position + size)
        position = self.position
        parts = []
        while position < end:
            index = bisect.bisect_right(self.starts, position) - 1
            # Pieces overlap (a small file's head and tail hold its batches too):
            # the nearest start before the position may end before it.
            while index >= 0 and position - self.starts[index] >= len(self.pieces[index]):
                index -= 1
            begin = position - self.starts[index] if index >= 0 else -1
            if index < 0 or begin >= len(self.pieces[index]):
                raise OSError(f"{self.url}: bytes {position}..{end} were not fetched")
            take = min(end - position, len(self.pieces[index]) - begin)
            parts.append(self.pieces[index][begin : begin + take])
            position += take
        self.position = max(end, self.position)
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)


def _rows(tables: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """The rows of ``tables`` (record batches or tables) as dicts. In a
    DataLoader worker, the values of binary columns, and of the binary fields
    of struct columns (a Hugging Face image's ``bytes``), are of the kind its
    queue hands to the main process through shared memory, not pickled (see
    :func:`fastio.formats._records.owned_kind`)."""
    kind = owned_kind()
    for table in tables:
        rows = table.to_pylist()
        paths = [] if kind is bytes else _binary_paths(table.schema)
        for row in rows if paths else ():
            for name, child in paths:
                holder = row if child is None else row[name]
                key = name if child is None else child
                if holder is not None and holder[key] is not None:
                    holder[key] = kind(holder[key])
        yield from rows


def _binary_paths(schema: Any) -> list[tuple[str, str | None]]:
    """The binary columns of ``schema`` (name, None), and the binary fields of
    its struct columns (name, field)."""
    import pyarrow as pa

    def binary(kind: Any) -> bool:
        return bool(pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
                    or pa.types.is_fixed_size_binary(kind))  # fmt: skip

    paths: list[tuple[str, str | None]] = []
    for field in schema:
        if binary(field.type):
            paths.append((field.name, None))
        elif pa.types.is_struct(field.type):
            paths += [(field.name, child.name) for child in field.type if binary(child.type)]
    return paths


def _unit_pieces(
    chunks: Iterable[Chunk], lengths: dict[int, int], unit_of: dict[int, int],
    ends: Container[int] = (), views: bool = False,
) -> Iterator[tuple[int, dict[int, Any]]]:  # fmt: skip
    """The bytes of a read's units, one unit at a time as soon as its ranges
    are in: (unit, its ranges' bytes keyed by file offset). Each range is in
    one buffer of pyarrow's memory pool that chunks are copied into as they
    come (``lengths``: the ranges the layout planned, by offset), the one
    copy of the fetched bytes. The pool reuses what earlier units freed:
    fresh memory for every unit would cost a page fault and a zeroing per
    4 KiB, as much as the copy itself. With ``views``, a range that came in
    one chunk is that chunk, uncopied: the reader's buffer is lent for as long
    as what is decoded from it lives (briefly where the decoder copies, as
    pyarrow's Parquet reader does; an Arrow batch decoded in place holds it
    until the batch goes, and the reader reuses it then). A range of unknown
    length is joined at its end. ``unit_of`` names the unit of a range by
    its offset; a range of no unit alone (an Arrow dictionary, read with
    every batch) belongs to the unit it is read with. ``ends``: the offsets
    of the ranges that end a unit (each unit's last), whose last byte in
    completes it; without, a unit is complete once the next one's begins."""
    import pyarrow as pa

    pieces: dict[int, Any] = {}
    unit = -1
    unplanned: list[bytes] | None = None
    target: memoryview | None = None
    start = missing = 0  # missing: bytes of the current planned range still to come
    whole = True  # every range of the unit so far arrived to its end
    current = -1
    for chunk in chunks:
        if chunk.range != current:
            whole = whole and missing == 0
            if unplanned is not None:
                pieces[start] = b"".join(unplanned)
            current, start = chunk.range, chunk.offset
            owner = unit_of.get(start, unit)
            if owner != unit:
                if pieces and whole:
                    yield unit, pieces
                unit, pieces, whole = owner, {}, True
            length = lengths.get(start)
            target = unplanned = None
            missing = 0
            if length is None:
                unplanned = []
            elif views and len(chunk.data) == length:
                pieces[start] = pa.py_buffer(chunk.data)
            else:
                buffer = pa.allocate_buffer(length)
                pieces[start], target, missing = buffer, memoryview(buffer).cast("B"), length
        if unplanned is not None:
            unplanned.append(bytes(chunk.data))
        elif target is not None:
            at = chunk.offset - start
            target[at : at + len(chunk.data)] = chunk.data
            missing -= len(chunk.data)
        if start in ends and chunk.end_of_range and unplanned is None and not missing:
            # The unit's last range is in: decoded now, not when the next one starts.
            if whole:
                yield unit, pieces
            pieces = {}
    # A stream cut short (a failed read) leaves its last unit partly filled:
    # that one is not decoded from bytes that never came.
    whole = whole and missing == 0
    if unplanned is not None:
        pieces[start] = b"".join(unplanned)
    if pieces and whole:
        yield unit, pieces


def _unit_ends(spans: Sequence[Sequence[ByteRange]]) -> frozenset[int]:
    return frozenset(ranges[-1].offset for ranges in spans if ranges)


def _planned_lengths(spans: Sequence[Sequence[ByteRange]]) -> dict[int, int]:
    return {r.offset: r.length for ranges in spans for r in ranges if r.length is not None}


def _bounds(rows: list[int]) -> np.ndarray:
    """Each unit's first row, then the rows of them all: from ``rows`` per unit."""
    return np.array([0, *itertools.accumulate(rows)], np.int64)


def _joined(url: str, pieces: list[tuple[int, int]]) -> list[ByteRange]:
    """``pieces`` (offset, length) in order, each run of adjoining ones as one
    range (a row group's column chunks follow each other: one range, one
    buffer)."""
    joined: list[list[int]] = []
    for offset, length in sorted(pieces):
        if offset < 0 or length < 0:  # a damaged footer's: refused as a range is
            ByteRange(url, offset, length)
        if joined and joined[-1][0] + joined[-1][1] == offset:
            joined[-1][1] += length
        else:
            joined.append([offset, length])
    return [ByteRange(url, offset, length) for offset, length in joined]


def _units_by_offset(spans: Sequence[Sequence[ByteRange]], shared: int = 0) -> dict[int, int]:
    """Each unit's ranges by offset, but the last ``shared`` of each unit's
    (ranges every unit reads)."""
    return {r.offset: unit for unit, ranges in enumerate(spans)
            for r in ranges[: len(ranges) - shared]}  # fmt: skip


# A file's tail read for its footer, or its head for its schema: remotely,
# where a second read costs a round trip, enough that most footers fit; a
# local file's second read costs microseconds, and every byte read ahead
# of need is memory allocated and copied (64 files: 8 MiB at 64 KiB each).
_REMOTE_FIRST_BYTES = 64 << 10
_LOCAL_FIRST_BYTES = 8 << 10


def _first_bytes(url: str) -> int:
    return _REMOTE_FIRST_BYTES if is_remote(url) else _LOCAL_FIRST_BYTES


def _tail_range(url: str, size: int, at_least: int = 0) -> ByteRange:
    length = min(size, max(at_least, _first_bytes(url)))
    return ByteRange(url, size - length, length)


def _tail(reader: Reader, url: str, size: int, at_least: int) -> tuple[int, bytes]:
    tail = _tail_range(url, size, at_least)
    return tail.offset, reader.read_ranges([tail])[0]


def _tails(reader: Reader, urls: Sequence[str], magic: bytes
           ) -> dict[str, tuple[int, int, bytes]]:  # fmt: skip
    """The tails of ``urls`` (size, tail start, tail), read together: one
    wait for them all, not one per file; a tail shorter than the footer it
    ends with (a little-endian int32 length, then ``magic``) is read again
    whole, again all such together. Files that fail here are left out:
    their own layouts read them again and report what is wrong."""
    sizes: dict[str, int] = {}
    for url in urls:
        try:
            sizes[url] = reader.describe(url)[0]
        except OSError:
            continue
    trailer = 4 + len(magic)
    tails: dict[str, tuple[int, int, bytes]] = {}
    ranges = [_tail_range(url, size) for url, size in sizes.items()]
    while ranges:
        try:
            datas = reader.read_ranges(ranges)
        except OSError:
            return {}  # the files are read one by one, each reporting its own failure
        longer = []
        for piece, data in zip(ranges, datas, strict=True):
            size = sizes[piece.path]
            tails[piece.path] = (size, piece.offset, data)
            footer = _footer_length(data, magic)
            if footer is None:
                continue  # not such a file: its layout says so
            if len(data) < footer + trailer <= size and len(data) == piece.length:
                longer.append(_tail_range(piece.path, size, footer + trailer))
        ranges = longer
    return tails


def _leaf_columns(metadata: Any, columns: Sequence[str] | None) -> list[int]:
    schema = metadata.schema
    leaves = range(metadata.num_columns)
    if columns is None:
        return list(leaves)
    chosen = [i for i in leaves
              if schema.column(i).path.split(".")[0] in columns]  # fmt: skip
    return chosen


def _footer_length(tail: bytes, magic: bytes) -> int | None:
    """The length of the footer ``tail`` ends with (a little-endian int32,
    then ``magic``), or None where it does not end with ``magic``."""
    if len(tail) < 4 + len(magic) or tail[-len(magic) :] != magic:
        return None
    return int.from_bytes(tail[-4 - len(magic) : -len(magic)], "little")


def _footer(
    reader: Reader,
    url: str,
    kind: str,
    magic: bytes,
    head_bytes: int,
    known: tuple[int, int, bytes] | None = None,
) -> tuple[int, int, bytes, int]:
    """Fetch a file's tail holding its footer, which ends in a little-endian
    int32 footer length and ``magic``; ``head_bytes`` are the bytes a valid
    file has besides the footer at least; ``known``: the file's size and tail,
    read already. Returns (size, tail start, tail, footer length)."""
    trailer = 4 + len(magic)
    if known is None:
        size, _ = reader.describe(url)
        start, tail = _tail(reader, url, size, trailer)
    else:
        size, start, tail = known
    footer_length = _footer_length(tail, magic)
    if size < trailer + head_bytes or footer_length is None:
        raise DecodeError(
            f"not {kind} file (no {magic.decode()} footer magic)", url, max(size - len(magic), 0)
        )
    if footer_length + trailer + head_bytes > size:
        raise TruncatedShardError(
            f"{kind} footer of {footer_length} bytes does not fit the file", url, size - trailer
        )
    if footer_length + trailer > len(tail):
        start, tail = _tail(reader, url, size, footer_length + trailer)
    return size, start, tail, footer_length


def _arrow_heads(
    reader: Reader, files: Sequence[tuple[str, int, list[tuple[int, int, int]]]]
) -> dict[str, tuple[bytes, dict[int, bytes]]]:
    """Each Arrow file's head (its schema message, served to pyarrow from
    here) and its record batches' headers by offset, for ``files`` of (url,
    size, record batch blocks), read together: one wait, not one per file.
    Raises what the reads raise."""
    ranges: list[ByteRange] = []
    for url, size, batches in files:
        ranges.append(ByteRange(url, 0, min(size, _first_bytes(url))))
        ranges += [ByteRange(url, offset, meta) for offset, meta, _ in batches]
    datas = iter(reader.read_ranges(ranges))
    heads: dict[str, tuple[bytes, dict[int, bytes]]] = {}
    for url, _, batches in files:
        head = next(datas)
        heads[url] = (head, {offset: next(datas) for offset, _, _ in batches})
    # A schema message longer than the head read: read again, all such together
    # (a length past any schema's is a damaged file's, which decoding reports).
    longer = [(url, min(size, _schema_end(heads[url][0]))) for url, size, _ in files]
    longer = [(url, end) for url, end in longer if len(heads[url][0]) < end <= _SCHEMA_MAX]
    if longer:
        again = reader.read_ranges([ByteRange(url, 0, end) for url, end in longer])
        for (url, _), head in zip(longer, again, strict=True):
            heads[url] = (head, heads[url][1])
    return heads


_SCHEMA_MAX = 16 << 20  # bytes of a schema message read again at most


def _schema_end(head: bytes, at: int = 8) -> int:
    """Where an Arrow IPC file's schema message ends, from its head (the
    file's first bytes: magic, padding, then the message's length; a
    stream's message begins at ``at`` 0), or 0 where the head is too short
    to say."""
    if len(head) < at + 8:
        return 0
    if head[at : at + 4] == b"\xff\xff\xff\xff":  # the continuation marker, then the length
        return at + 8 + int.from_bytes(head[at + 4 : at + 8], "little")
    return at + 4 + int.from_bytes(head[at : at + 4], "little")  # before format 1.0: the length


class _ColumnFile(ShardFormat):
    """A file format of columns, with column selection."""

    magic: bytes  # what a file ends with, after its footer's length

    def __init__(self, columns: Sequence[str] | None = None) -> None:
        # pyarrow decodes these files: without it a dataset fails when made, not mid-epoch.
        import_extra("pyarrow", f"{self.name.capitalize()} shards")
        self.columns = list(columns) if columns is not None else None
        self._prefetched: dict[str, tuple[int, int, bytes]] = {}

    def options(self) -> dict[str, Any]:
        return {"columns": self.columns}

    def prefetch(self, reader: Reader, urls: Sequence[str]) -> None:
        # Each tail is used once, by its file's layout; what a layout did
        # not use goes with the next call.
        self._prefetched = _tails(reader, urls, self.magic) if urls else {}

    def _known_tail(self, url: str) -> tuple[int, int, bytes] | None:
        return self._prefetched.pop(url, None)


def _in_place(pieces: dict[int, Any], ranges: list[ByteRange]) -> pa.NativeFile | None:
    """A row group's bytes, fetched as one range, as a file pyarrow reads
    natively (no Python call, so no wait for the GIL, per column chunk): a
    buffer whose byte ``offset`` is the range's first and that ends with it.
    pyarrow reads no byte of it before the range: given the footer, it reads
    the column chunks of the row group, at the offsets the range was planned
    from (the same metadata), and checks that they end inside the buffer.
    Only for a read of every column (a selection is resolved by pyarrow, so
    the chunks it reads are not checked here); else None."""
    import pyarrow as pa

    if len(ranges) != 1:
        return None
    offset = ranges[0].offset
    buffer = pieces[offset]
    if not isinstance(buffer, pa.Buffer) or buffer.address < offset:
        return None
    return pa.BufferReader(pa.foreign_buffer(buffer.address - offset, offset + buffer.size, buffer))


def _parquet_metadata(pa: Any, pq: Any, tail: bytes) -> Any:
    """The footer that ``tail`` (a Parquet file's last bytes) ends with. Through
    pyarrow's reader class itself where it is there (pyarrow.parquet's
    ``ParquetFile`` wraps it, and making one costs more than the parse:
    100 against 60 us a file, and a dataset opens every file's footer)."""
    try:
        from pyarrow._parquet import ParquetReader
    except ImportError:  # pragma: no cover - every pyarrow this supports has it
        return pq.read_metadata(pa.BufferReader(tail))
    reader = ParquetReader()
    reader.open(pa.BufferReader(tail))
    return reader.metadata


class ParquetFormat(_ColumnFile):
    """Parquet files read by row group through fastio's reader, with column selection."""

    name = "parquet"
    magic = b"PAR1"

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        size, start, tail, footer_length = _footer(
            reader, url, "a Parquet", self.magic, 4, self._known_tail(url)
        )
        try:
            # The tail holds the whole footer: parsed from memory, no Python reads.
            metadata = _parquet_metadata(pa, pq, tail)
        except (pa.ArrowException, OSError) as error:
            raise DecodeError(
                f"Parquet footer is damaged: {error}", url, size - 8 - footer_length
            ) from None
        leaves = _leaf_columns(metadata, self.columns)
        if self.columns is not None:
            names = set(metadata.schema.to_arrow_schema().names)
            missing = [c for c in self.columns if c not in names]
            if missing:
                raise ValueError(f"{url}: no column {missing[0]!r}; columns are {sorted(names)}")
        groups = metadata.num_row_groups
        rows = [metadata.row_group(g).num_rows for g in range(groups)]
        spans: list[list[ByteRange]] = []
        for g in range(groups):
            group = metadata.row_group(g)
            pieces = []
            for leaf in leaves:
                column = group.column(leaf)
                begin = column.data_page_offset
                if column.has_dictionary_page and column.dictionary_page_offset:
                    begin = min(begin, column.dictionary_page_offset)
                pieces.append((begin, column.total_compressed_size))
            spans.append(_joined(url, pieces))
        bounds = _bounds(rows)
        unit_bytes = np.array([sum(r.length or 0 for r in s) for s in spans], np.int64)
        # A row group's range read in one piece (``whole``) is decoded from the
        # reader's buffer: no copy of the column chunks before pyarrow's own.
        meta = {"unit_ranges": spans.__getitem__, "metadata": metadata, "tail": (start, tail),
                "lengths": _planned_lengths(spans), "unit_of": _units_by_offset(spans),
                "unit_ends": _unit_ends(spans), "whole": True}  # fmt: skip
        return Layout(url, int(bounds[-1]), size, bounds, unit_bytes, meta=meta), []

    def _tables(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[pa.Table]:
        """Each row group of the read, decoded as soon as its column chunks
        are in (the first batch does not wait for the read's last group)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        start, tail = layout.meta["tail"]
        metadata = layout.meta["metadata"]
        # Decoded on this thread (use_threads=False): pyarrow's pool splits a
        # row group by column, and with one large column it only adds a hand-off
        # per group (more CPU per row, measured); DataLoader workers are the
        # parallelism. The Python file is made for the first selected read.
        file: _RangeFile | None = None
        handle: Any = None
        planned = layout.meta["lengths"], layout.meta["unit_of"], layout.meta["unit_ends"]
        for g, pieces in _unit_pieces(chunks, *planned, views=True):
            ranges = layout.meta["unit_ranges"](g)
            if g < 0 or ranges[0].offset not in pieces:
                continue  # bytes of no row group the read planned
            try:
                source = _in_place(pieces, ranges) if self.columns is None else None
                if source is not None:
                    whole = pq.ParquetFile(source, metadata=metadata, pre_buffer=False)
                    yield whole.read_row_group(g, use_threads=False)
                    continue
                pieces.setdefault(start, tail)
                if file is None:
                    file = _RangeFile(layout.url, layout.size, pieces)
                    handle = pq.ParquetFile(pa.PythonFile(file), metadata=metadata,
                                            pre_buffer=False)  # fmt: skip
                else:
                    file.hold(pieces)
                yield handle.read_row_group(g, columns=self.columns, use_threads=False)
            except (pa.ArrowException, OSError) as error:
                raise DecodeError(
                    f"row group {g} does not decode: {error}", layout.url, ranges[0].offset,
                    int(layout.bounds[g]),
                ) from None  # fmt: skip

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[dict[str, Any]]:
        return _rows(self._tables(chunks, layout))

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        for table in self._tables(chunks, layout):
            yield from table.to_batches()


# Arrow IPC file: "ARROW1" + padding, a stream of messages, a flatbuffer footer
# naming each record batch's block, its length (int32) and "ARROW1" again.
_ARROW_MAGIC = b"ARROW1"


def _check_names(fields: Iterable[pa.Field]) -> None:
    """Raises UnicodeDecodeError where a name of ``fields`` or of a field
    nested in them is not UTF-8 (a damaged schema, which pyarrow decodes
    without looking at its names: its rows would fail in the consumer), and
    ArrowInvalid where two of one level have the same name (a row, a dict,
    would silently hold one of them; and such a schema joins no other)."""
    names = set()
    for field in fields:
        name = field.name  # decoded here: raises where it is not UTF-8
        if name in names:
            import pyarrow as pa

            raise pa.ArrowInvalid(f"the schema has two fields named {name!r}")
        names.add(name)
        kind = field.type
        _check_names(kind.field(i) for i in range(kind.num_fields))


# An Arrow file's unit (what a read plans and a shuffle window holds) is a
# run of neighbouring record batches of this many bytes or more (or one
# larger batch): a file's own batches may be small (Hugging Face datasets
# writes 100 rows a batch where rows are binary), and each unit costs the
# dataset Python steps to plan, read and hand over. The same wherever the
# file is, so that a seed gives the same order from local disk and from
# remote storage.
_UNIT_BYTES = 1 << 20
# Where a unit's record batches average fewer bytes than this, its batches are
# joined into one as they are decoded for .batches().
_JOINED_BYTES = 256 << 10


def _grouped(offsets: list[int], sizes: list[int], least: int = _UNIT_BYTES) -> list[int]:
    """The first record batch of each unit, then the number of batches: runs
    of batches that follow one another in the file, each run closed once it
    holds ``least`` bytes."""
    groups = [0] if offsets else []
    held = 0
    for k in range(len(offsets)):
        if k and (held >= least or offsets[k] != offsets[k - 1] + sizes[k - 1]):
            groups.append(k)
            held = 0
        held += sizes[k]
    return [*groups, len(offsets)]


def _joined_batches(pa: Any, batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """A unit's small record batches as one: one copy of their rows, where
    batches cut across each of them would each be a join (a copy too) and a
    part more to hand over. As they are where pyarrow does not join them
    (dictionaries that differ)."""
    try:
        return [pa.concat_batches(batches)]
    except pa.ArrowException:
        return batches


def _stream_at(head: bytes) -> int:
    """Where the schema message of an Arrow IPC file's head begins: after
    the magic and its padding, or (a stream's) at its start."""
    return 8 if head.startswith(_ARROW_MAGIC) else 0


def _batch_ranges(url: str, offsets: list[int], sizes: list[int], shared: list[ByteRange],
                  unit: int) -> list[ByteRange]:  # fmt: skip
    """The ranges unit ``unit`` decodes from: its messages, then ``shared``."""
    return [ByteRange(url, offsets[unit], sizes[unit]), *shared]


def _run_ranges(url: str, offsets: list[int], sizes: list[int], groups: list[int],
                shared: list[ByteRange], unit: int) -> list[ByteRange]:  # fmt: skip
    """The ranges unit ``unit`` decodes from: each of its record batches'
    messages, then ``shared``."""
    own = range(groups[unit], groups[unit + 1])
    return [*(ByteRange(url, offsets[k], sizes[k]) for k in own), *shared]


def _batch_rows(url: str, batches: list[tuple[int, int, int]], headers: dict[int, bytes]
                ) -> list[int]:  # fmt: skip
    """The rows of each record batch of ``batches``, from ``headers`` (their
    metadata by offset). Raises DecodeError for a damaged one."""
    rows = []
    for offset, _, _ in batches:
        rows.append(_native.arrow_message_rows(headers.get(offset, b"")))
        if rows[-1] < 0:
            raise DecodeError("Arrow record batch header is damaged", url, offset)
    return rows


_ArrowBlocks = tuple[int, int, bytes, list[tuple[int, int, int]], list[tuple[int, int, int]]]
_ArrowHead = tuple[_ArrowBlocks, bytes, list[int]]  # blocks, schema message, rows of each batch

# The types of an Arrow IPC message's header.
_SCHEMA, _DICTIONARY, _RECORD_BATCH = 1, 2, 3


class _StreamWalk:
    """One Arrow IPC stream's layout, as a file's footer would give it: the
    stream (no footer; Hugging Face ``datasets`` writes its ``.arrow`` files
    so) walked message by message, each message's metadata read where the
    last read's window does not hold it: :meth:`needed` names the bytes to
    read next, :meth:`take` takes them, so that the streams of a group are
    walked together (one wait a step for them all; a step a message, as a
    message's place follows from the last one's lengths). Done when
    :meth:`needed` is None: :attr:`found` is then the layout's head (its
    tail empty, its head its schema message) and the problems met, or None
    where the file does not begin with a schema message (not a stream). A
    damaged or cut message stops the walk: it is laid out to there, and the
    error (which counts the rows it costs, where its header says) is in the
    problems."""

    def __init__(self, url: str, size: int) -> None:
        self.url, self.size = url, size
        self.window_at, self.window = 0, memoryview(b"")
        self.head: bytes | None = None
        self.batches: list[tuple[int, int, int]] = []
        self.dictionaries: list[tuple[int, int, int]] = []
        self.rows: list[int] = []
        self.problems: list[DecodeError] = []
        self.at = self.before = 0  # before: the rows of the record batches walked
        self.done = False
        self.found: tuple[_ArrowHead, list[DecodeError]] | None = None

    def take(self, data: bytes) -> None:
        """The bytes :meth:`needed` named."""
        self.window_at, self.window = self.at, memoryview(data)

    def needed(self) -> ByteRange | None:
        """Walks the messages the window holds; the bytes to read next, or None when done."""
        while not self.done:
            want = self._step()
            if want:
                size, at = self.size, self.at
                return ByteRange(self.url, at, min(size - at, max(want, _first_bytes(self.url))))
        return None

    def _held(self, length: int) -> memoryview | None:
        at = self.at - self.window_at
        return self.window[at : at + length] if at + length <= len(self.window) else None

    def _step(self) -> int:
        """Walks one message: 0, or the bytes from :attr:`at` it needs read first."""
        size, at = self.size, self.at
        if at >= size:
            return self._finish()
        prefix = self._held(min(8, size - at))
        if prefix is None:
            return 8
        marker = int.from_bytes(prefix[:4], "little")
        skip = 8 if marker == 0xFFFFFFFF else 4  # before format 1.0: the length alone
        length = int.from_bytes(prefix[4:8], "little") if skip == 8 else marker
        fits = len(prefix) >= skip and length <= size - at - skip
        metadata = self._held(skip + length) if fits else None
        if fits and metadata is None:
            return skip + length
        info = _native.arrow_message(metadata) if metadata is not None and length else None
        if self.head is None:
            if info is None or info[0] != _SCHEMA:
                self.done = True  # not a stream
                return 0
            self.head = bytes(metadata or b"")
            self.at += skip + length + info[1]
            return 0
        if fits and length == 0:
            return self._finish()  # the end-of-stream marker
        try:
            _check_message(self.url, at, info, fits, size - at - skip - length,
                           bool(self.batches), self.before)  # fmt: skip
        except DecodeError as error:
            self.problems.append(error)
            return self._finish()
        assert info is not None
        if info[0] == _RECORD_BATCH:
            self.batches.append((at, skip + length, info[1]))
            self.rows.append(info[2])
            self.before += info[2]
        else:
            self.dictionaries.append((at, skip + length, info[1]))
        self.at += skip + length + info[1]
        return 0

    def _finish(self) -> int:
        self.done = True
        if self.head is not None:  # else empty: not a stream
            blocks = (self.size, self.size, b"", self.batches, self.dictionaries)
            self.found = (blocks, self.head, self.rows), self.problems
        return 0


def _walk_streams(reader: Reader, urls: Sequence[str]
                  ) -> dict[str, tuple[_ArrowHead, list[DecodeError]] | None]:  # fmt: skip
    """The layouts of the Arrow IPC streams ``urls`` (see :class:`_StreamWalk`),
    walked together. Raises what the reads raise."""
    walks = [_StreamWalk(url, reader.describe(url)[0]) for url in urls]
    while needs := [(walk, want) for walk in walks if (want := walk.needed()) is not None]:
        for (walk, _), data in zip(needs, reader.read_ranges([w for _, w in needs]), strict=True):
            walk.take(data)
    return {walk.url: walk.found for walk in walks}


def _check_message(url: str, at: int, info: tuple[int, int, int] | None, fits: bool, room: int,
                   after_batches: bool, record: int) -> None:  # fmt: skip
    """Raises DecodeError where the stream's message at ``at`` (after its
    schema; ``info`` as :func:`fastio._native.arrow_message` gives it) is
    cut (``fits``: its metadata fits the file; ``room``: the bytes after
    it), damaged, or not a record batch or (before any, ``after_batches``)
    a dictionary. ``record``: the rows before it."""
    if not fits:
        raise TruncatedShardError("Arrow IPC stream ends inside a message's metadata", url, at,
                                  record)  # fmt: skip
    if info is None:
        raise DecodeError("Arrow message header is damaged", url, at, record)
    kind, body, rows = info
    if kind == _DICTIONARY and after_batches:
        raise DecodeError(
            "Arrow IPC stream replaces or extends a dictionary after its first record "
            "batch, which is not read (written as an Arrow IPC file, it is)", url, at, record,
        )  # fmt: skip
    if kind not in (_RECORD_BATCH, _DICTIONARY):
        raise DecodeError(f"Arrow IPC stream has a message of type {kind} after its schema",
                          url, at, record)  # fmt: skip
    if body > room:
        raise TruncatedShardError("Arrow IPC stream ends inside a message's body", url, at,
                                  record, lost=rows if kind == _RECORD_BATCH else 1)  # fmt: skip


def _scanned(urls: Sequence[str]) -> dict[str, _ArrowHead]:
    """What laying out those of ``urls`` that are local files the page cache
    holds needs, read and parsed natively (see :func:`fastio._native.arrow_scan`);
    the others are left out."""
    local = [url for url in urls if not is_remote(url)]
    if not local:
        return {}
    found = _native.arrow_scan([os.fsencode(local_path(url)) for url in local],
                               _LOCAL_FIRST_BYTES, _SCHEMA_MAX)  # fmt: skip
    scanned: dict[str, _ArrowHead] = {}
    for url, scan in zip(local, found, strict=True):
        if scan is not None:
            size, start, tail, head, batches, dictionaries, rows = scan
            scanned[url] = ((size, start, tail, batches, dictionaries), head, rows)
    return scanned


class ArrowFormat(_ColumnFile):
    """Arrow IPC files read by record batch through fastio's reader, with column selection."""

    name = "arrow"
    magic = _ARROW_MAGIC

    def __init__(self, columns: Sequence[str] | None = None) -> None:
        super().__init__(columns)
        # By file: its footer's blocks, schema message and record batches' rows.
        self._heads: dict[str, _ArrowHead] = {}
        # By file without a footer: its walk as an IPC stream (see _walk_streams).
        self._streams: dict[str, tuple[_ArrowHead, list[DecodeError]] | None] = {}
        self._schemas: dict[bytes, pa.Schema | None] = {}  # by schema message

    def maps_cached(self, columnar: bool, sample_bytes: float | None) -> bool:
        # A record batch is decoded in place (its buffers are views of the
        # bytes) and copied once, into a batch or a sample: 110 KB rows in
        # .batches(256), 36k rows/s read and 49k mapped. Small rows are read:
        # a batch of them that spans two record batches is joined in one copy,
        # which runs from a read buffer the CPU's caches still hold, but from
        # a mapping's pages in memory (1 KB rows in 1,024-row record batches,
        # fresh processes: 4.95M rows/s read and 4.31M mapped in batches of
        # 256, 4.14M and 3.20M in batches of 1,024).
        return sample_bytes is None or sample_bytes >= MAPPED_SAMPLE_BYTES

    def prefetch(self, reader: Reader, urls: Sequence[str]) -> None:
        # Local files the page cache holds are read and parsed natively, a
        # few microseconds each. For the others, after the footers, each
        # file's schema and record batch headers, again read together for
        # the group: one wait, not one per file; and files without a footer
        # walked as IPC streams together, a wait a message for them all.
        self._heads = _scanned(urls)
        rest = [url for url in urls if url not in self._heads]
        super().prefetch(reader, rest)
        planned: dict[str, _ArrowBlocks] = {}
        streams = []  # files without a footer: IPC streams, perhaps
        for url in rest:
            known = self._prefetched.get(url)
            if known is None:
                continue
            try:
                blocks = self._blocks(reader, url, known)
            except (DecodeError, OSError):
                if _footer_length(known[2], self.magic) is None:
                    streams.append(url)
                continue  # its layout reads it again and reports what is wrong
            size, start, tail, _, _ = blocks
            self._prefetched[url] = (size, start, tail)
            planned[url] = blocks
        if streams:
            try:
                self._streams = _walk_streams(reader, streams)
            except OSError:
                self._streams = {}  # each walked on its own, reporting its own failure
        if not planned:
            return
        try:
            heads = _arrow_heads(reader, [(url, b[0], b[3]) for url, b in planned.items()])
        except OSError:
            return  # the files are read one by one, each reporting its own failure
        for url, blocks in planned.items():
            head, pieces = heads[url]
            try:
                self._heads[url] = (blocks, head, _batch_rows(url, blocks[3], pieces))
            except DecodeError:
                continue  # as above

    def _blocks(
        self, reader: Reader, url: str, known: tuple[int, int, bytes] | None
    ) -> _ArrowBlocks:
        """(size, tail start, tail, record batch blocks, dictionary blocks)."""
        size, start, tail, footer_length = _footer(reader, url, "an Arrow IPC", self.magic, 8,
                                                   known)  # fmt: skip
        blocks = _native.arrow_footer(tail[len(tail) - 10 - footer_length : len(tail) - 10])
        # A block of a negative offset or length is damaged too.
        if blocks is None or any(min(block) < 0 for block in (*blocks[0], *blocks[1])):
            raise DecodeError("Arrow footer is damaged", url, size - 10 - footer_length)
        return size, start, tail, *blocks

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        known = self._known_tail(url)
        problems: list[DecodeError] = []
        fetched = self._heads.pop(url, None)
        if fetched is not None:  # read ahead with the group's
            (size, start, tail, batches, dictionaries), schema_head, rows = fetched
        else:
            try:
                size, start, tail, batches, dictionaries = self._blocks(reader, url, known)
            except DecodeError:
                # No footer: an IPC stream, perhaps (walked already with the group's).
                walked = (self._streams.pop(url) if url in self._streams
                          else _walk_streams(reader, [url])[url])  # fmt: skip
                if walked is None:
                    raise
                ((size, start, tail, batches, dictionaries), schema_head, rows), problems = walked
                if problems and not tolerate:
                    raise problems[0] from None
            else:
                schema_head, pieces = _arrow_heads(reader, [(url, size, batches)])[url]
                rows = _batch_rows(url, batches, pieces)
        extra = [ByteRange(url, o, m + b) for o, m, b in dictionaries]
        offsets = [o for o, _, _ in batches]
        sizes = [m + b for _, m, b in batches]
        # A unit is a run of neighbouring record batches (see _UNIT_BYTES).
        # Its ranges: its own, then the dictionaries every batch reads. Made
        # as each is read, where a dataset lays out every file before its
        # first sample.
        groups = _grouped(offsets, sizes)
        unit_of = {offsets[k]: u for u, (a, b) in enumerate(itertools.pairwise(groups))
                   for k in range(a, b)}  # fmt: skip
        spans = [offsets[b - 1] + sizes[b - 1] - offsets[a] for a, b in itertools.pairwise(groups)]
        if is_remote(url):
            # A range per record batch, each decoded as soon as it is in (a
            # batch should not wait for a megabyte over the network).
            ranges = functools.partial(_run_ranges, url, offsets, sizes, groups, extra)
            lengths = dict(zip(offsets, sizes, strict=True))
            ends = offsets
        else:  # one range a unit: its batches decoded together
            starts = [offsets[g] for g in groups[:-1]]
            ranges = functools.partial(_batch_ranges, url, starts, spans, extra)
            lengths = dict(zip(starts, spans, strict=True))
            ends = starts
        if batches:
            lengths.update((o, m + b) for o, m, b in dictionaries)
        meta = {"unit_ranges": ranges, "tail": (start, tail), "batch_offsets": offsets,
                "batch_sizes": sizes, "unit_batches": groups, "lengths": lengths,
                "unit_of": unit_of,
                "unit_ends": frozenset((extra[-1].offset,) if extra and batches else ends),
                "whole": True}  # fmt: skip
        meta["head"] = schema_head
        meta["stream"] = _stream_at(schema_head) == 0
        meta["dictionaries"] = [o for o, _, _ in dictionaries]
        import pyarrow as pa

        schema = self._schema(pa, schema_head)
        # Without dictionaries a batch decodes from its own bytes and the schema.
        meta["schema"] = None if dictionaries else schema
        if self.columns is not None:
            names = schema.names if schema is not None else None
            missing = [c for c in self.columns if names is not None and c not in names]
            if missing:
                raise ValueError(
                    f"{url}: no column {missing[0]!r}; columns are {sorted(names or [])}"
                )
        bounds = _bounds([sum(rows[a:b]) for a, b in itertools.pairwise(groups)])
        unit_bytes = np.array(spans, np.int64)
        return Layout(url, int(bounds[-1]), size, bounds, unit_bytes, meta=meta), problems

    def _schema(self, pa: Any, head: bytes) -> pa.Schema | None:
        """The schema message ``head`` (a file's first bytes) begins with,
        parsed once for all the files whose schema messages are the same
        bytes; None where it is longer than ``head`` (checked when batches
        decode)."""
        at = _stream_at(head)
        message = head[at : _schema_end(head, at)]
        if message in self._schemas:
            return self._schemas[message]
        try:
            schema = pa.ipc.read_schema(pa.py_buffer(head[at:]))
            _check_names(schema)
        except (pa.ArrowException, OSError, UnicodeDecodeError):
            schema = None
        self._schemas[message] = schema
        return schema

    def _batches(self, chunks: Iterable[Chunk], layout: Layout, joined: bool = False
                 ) -> Iterator[pa.RecordBatch]:  # fmt: skip
        """Each record batch of the read, decoded as soon as its bytes are in.
        Where the layout knows the schema (a file without dictionaries), a
        batch is decoded from its own bytes: its arrays are views of the
        buffer they were fetched into, no further copy (a local batch is read
        whole, into one reader buffer: the read is the one copy); else
        pyarrow's file reader serves it, dictionaries and all."""
        import pyarrow as pa

        schema = layout.meta["schema"]
        offsets, sizes = layout.meta["batch_offsets"], layout.meta["batch_sizes"]
        groups = layout.meta["unit_batches"]
        start, tail = layout.meta["tail"]
        known = {start: tail, 0: layout.meta["head"]}
        at, record = start, None  # the footer is read first, then each batch
        try:
            handle = None
            if schema is None and not layout.meta["stream"]:
                file = _RangeFile(layout.url, layout.size, known)
                handle = pa.ipc.open_file(pa.PythonFile(file))
                _check_names(handle.schema)
            planned = layout.meta["lengths"], layout.meta["unit_of"], layout.meta["unit_ends"]
            for i, pieces in _unit_pieces(chunks, *planned, views=True):
                if i < 0:
                    continue  # bytes of no unit the read planned
                if handle is not None:
                    file.hold(known | pieces)
                decoded: list[pa.RecordBatch] = []
                held = 0  # their messages' bytes
                damage: Exception | None = None
                try:
                    for record in range(groups[i], groups[i + 1]):
                        # A local unit is one range (at its first batch); a
                        # remote one a range per batch, each handed over as
                        # it is in.
                        at = offsets[record]
                        base = at if at in pieces else offsets[groups[i]]
                        piece = pieces.get(base)
                        if piece is None or at - base >= len(piece):
                            continue  # bytes of another part of the unit
                        message = pa.py_buffer(piece).slice(at - base, sizes[record])
                        decoded.append(self._decoded(pa, layout, message, record, handle, pieces))
                        held += sizes[record]
                except (pa.ArrowException, OSError, UnicodeDecodeError) as error:
                    damage = error  # raised once the batches before it are out
                if joined and len(decoded) > 1 and held < _JOINED_BYTES * len(decoded):
                    decoded = _joined_batches(pa, decoded)
                yield from decoded
                if damage is not None:
                    raise damage
        except (pa.ArrowException, OSError, UnicodeDecodeError) as error:
            what = "footer" if record is None else f"record batch {record}"
            raise DecodeError(f"Arrow {what} does not decode: {error}", layout.url, at) from None

    def _decoded(self, pa: Any, layout: Layout, message: pa.Buffer, record: int, handle: Any,
                 pieces: dict[int, Any]) -> pa.RecordBatch:  # fmt: skip
        """Record batch ``record`` of the file, checked: from its ``message``
        and the schema; with dictionaries, from a stream's dictionaries (in
        the unit's ``pieces``) or through pyarrow's file reader ``handle``."""
        schema = layout.meta["schema"]
        if schema is None and layout.meta["stream"]:
            # Dictionaries: the batch as a stream of its own, after the
            # schema and every dictionary (one copy of its bytes).
            parts = [layout.meta["head"], *map(pieces.__getitem__,
                     layout.meta["dictionaries"]), message]  # fmt: skip
            stream_reader = pa.ipc.open_stream(pa.py_buffer(b"".join(parts)))
            _check_names(stream_reader.schema)
            batch = stream_reader.read_next_batch()
        elif schema is None:
            batch = handle.get_batch(record)
        else:
            batch = pa.ipc.read_record_batch(pa.ipc.read_message(message), schema)
        # Decoding checks the buffers' sizes, not their contents: a damaged
        # offset would send a reader of the rows outside them. Checked whole:
        # 5 us a batch of 1,024 rows of 1 KB.
        batch.validate(full=True)
        return batch.select(self.columns) if self.columns is not None else batch

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[dict[str, Any]]:
        return _rows(self._batches(chunks, layout))

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        return self._batches(chunks, layout, joined=True)


# ---- writing ------------------------------------------------------------------------


class TableWriter(ShardWriter):
    """Writes a Parquet (``format="parquet"``) or Arrow IPC (``"arrow"``) file of
    ``schema`` to ``file``, one row group or record batch a :meth:`write`;
    ``compression`` (a codec pyarrow knows, or None) applies inside the file,
    to column chunks or IPC buffers. Raises ValueError for another format."""

    def __init__(
        self, file: Writable, format: str, schema: pa.Schema, compression: str | None = None
    ) -> None:
        pa = import_extra("pyarrow", f"writing {format.capitalize()} files")

        if format == "parquet":
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(file, schema, compression=compression or "none")
        elif format == "arrow":
            options = pa.ipc.IpcWriteOptions(compression=compression)
            self._writer = pa.ipc.new_file(file, schema, options=options)
        else:
            raise ValueError(f"a table is written as parquet or arrow, not {format!r}")
        self.format = format

    def write(self, batch: pa.RecordBatch) -> None:
        """Write ``batch`` as one row group (Parquet) or record batch (Arrow)."""
        if self.format == "parquet":
            self._writer.write_batch(batch, row_group_size=len(batch))
        else:
            self._writer.write_batch(batch)

    def close(self) -> None:
        """Write the footer; ``file`` stays open."""
        self._writer.close()

    def abandon(self) -> None:
        # pyarrow's writer would otherwise close itself when collected, into a
        # file that may be closed by then.
        self._writer.close()
