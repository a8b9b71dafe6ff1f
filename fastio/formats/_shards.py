"""Shard formats as the dataset uses them: how many samples a shard holds,
which bytes hold any run of its samples, and how those bytes decode.

A :class:`Layout` answers the first two without reading samples: from the
per-shard index (TFRecord, WebDataset, JSONL, lines), from arithmetic (fixed
records, ``.npy``), or from metadata the reader fetches (Parquet footers, Arrow
IPC footers). A :class:`ShardFormat` decodes the chunks of a layout's ranges
into samples the caller owns (no views of reader buffers survive, so samples
pickle and buffers recycle) or into columnar batches.

Samples can be read in runs as small as a layout's *unit*: one sample for
indexed and fixed formats, one row group or record batch for Parquet and
Arrow, the whole shard for compressed ones (decompression starts at byte 0).
"""

from __future__ import annotations

import io
import itertools
import math
import os
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio._errors import DecodeError, TruncatedShardError
from fastio._ranges import ByteRange, Chunk

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    import pyarrow as pa

    from fastio._reader import Reader

__all__ = ["FORMATS", "Layout", "ShardFormat", "format_for_url", "make_format"]


@dataclass
class Layout:
    """Where the samples of one shard are.

    ``bounds`` are the sample numbers where readable units start, followed by
    ``count``; ``unit_ranges[u]`` are the byte ranges unit ``u`` decodes from.
    ``starts``/``ends`` (when every sample is its own unit) give each sample's
    bytes. ``meta`` holds what the format needs to decode (a dtype, a schema).
    """

    url: str
    count: int
    size: int
    bounds: np.ndarray  # int64, len = units + 1
    unit_bytes: np.ndarray  # int64, bytes of each unit (for window sizing)
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    whole: bool = False  # the only unit is the whole (compressed) file

    @property
    def per_sample(self) -> bool:
        return self.starts is not None and not self.whole

    def nbytes(self, start: int, stop: int) -> int:
        """Encoded bytes of samples ``start`` to ``stop`` (for budgets; exact
        where samples have their own ranges, proportional inside a unit)."""
        if stop <= start:
            return 0
        if self.per_sample:
            assert self.starts is not None
            assert self.ends is not None
            return int(self.ends[stop - 1]) - int(self.starts[start])
        total = int(self.unit_bytes.sum())
        return max(1, total * (stop - start) // max(self.count, 1))

    def next_cut(self, start: int, stop: int, budget: int) -> int:
        """Where a run of about ``budget`` bytes from sample ``start`` ends (at
        most ``stop``, at least one unit, at a unit boundary)."""
        if self.per_sample:
            assert self.starts is not None
            target = int(self.starts[start]) + budget
            cut = int(np.searchsorted(self.starts, target, side="left"))
            return min(max(cut, start + 1), stop)
        unit = int(np.searchsorted(self.bounds, start, side="right")) - 1
        total = 0
        while unit < len(self.unit_bytes) and total < budget:
            total += int(self.unit_bytes[unit])
            unit += 1
        return min(int(self.bounds[unit]), stop)

    def ranges(self, start: int, stop: int) -> tuple[list[ByteRange], int]:
        """Byte ranges that decode to samples ``first..`` covering ``start..stop``,
        and ``first`` (the sample the decoded stream starts at)."""
        if self.per_sample:
            assert self.starts is not None
            assert self.ends is not None
            # One range per run of adjacent samples: a damaged record that the
            # index left out (a gap) is not read.
            gaps = np.flatnonzero(self.starts[start + 1 : stop] != self.ends[start : stop - 1])
            edges = [start, *(start + 1 + gaps).tolist(), stop]
            return [ByteRange(self.url, int(self.starts[a]), int(self.ends[b - 1] - self.starts[a]))
                    for a, b in itertools.pairwise(edges)], start  # fmt: skip
        if self.whole:
            return [ByteRange(self.url)], 0
        first_unit = int(np.searchsorted(self.bounds, start, side="right")) - 1
        last_unit = int(np.searchsorted(self.bounds, stop, side="left"))
        units = range(first_unit, last_unit)
        return [r for u in units for r in self.meta["unit_ranges"](u)], int(self.bounds[first_unit])


def _layout_from_index(url: str, index: Any, whole: bool, size: int) -> Layout:
    starts = index.starts.astype(np.int64)
    ends = index.ends.astype(np.int64)
    count = len(starts)
    if whole:
        return Layout(url, count, size, np.array([0, count], np.int64),
                      np.array([size], np.int64), starts, ends, whole=True)  # fmt: skip
    return Layout(url, count, size, np.arange(count + 1, dtype=np.int64), ends - starts,
                  starts, ends)  # fmt: skip


def _owned(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def _gather(chunks: Iterable[Chunk]) -> dict[int, bytes]:
    """The bytes of each range of a piece, keyed by file offset."""
    parts: dict[int, list[memoryview]] = {}
    starts: dict[int, int] = {}
    for chunk in chunks:
        if chunk.range not in starts:
            starts[chunk.range] = chunk.offset
        parts.setdefault(chunk.range, []).append(chunk.data)
    return {starts[r]: b"".join(parts[r]) for r in parts}


class ShardFormat:
    """A format as the dataset drives it. Subclasses set ``name`` and implement
    :meth:`layout`, :meth:`samples` and :meth:`batches`."""

    name = ""
    batch_kind = "arrow"  # "arrow": pyarrow RecordBatch; "numpy": ndarray

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        raise NotImplementedError  # every concrete format overrides it

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        raise NotImplementedError  # every concrete format overrides it

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        """Columnar batches of the same samples (any sizes), in order."""
        import pyarrow as pa

        rows = [_plain(sample) for sample in self.samples(chunks, layout)]
        if rows:
            yield pa.RecordBatch.from_pylist(rows)

    def options(self) -> dict[str, Any]:
        return {}


def _plain(sample: Any) -> dict[str, Any]:
    if isinstance(sample, dict):
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in sample.items()}
    return {"value": sample}


# ---- indexed formats -----------------------------------------------------------


class _Indexed(ShardFormat):
    def __init__(self, index_dir: str | os.PathLike[str] | None = None) -> None:
        self.index_dir = index_dir

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        from fastio._index import load_or_scan
        from fastio.formats._compression import codec_for

        index, problems = load_or_scan(reader, url, self.name, self.index_dir, tolerate=tolerate,
                                       verify=getattr(self, "verify", True))  # fmt: skip
        return _layout_from_index(url, index, codec_for(url) is not None, index.size), problems

    def _chunks(self, chunks: Iterable[Chunk], layout: Layout) -> Iterable[Chunk]:
        if layout.whole:
            from fastio.formats._compression import decompress

            return decompress(chunks, layout.url)
        return chunks


class WebDatasetFormat(_Indexed):
    name = "webdataset"

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[dict[str, Any]]:
        from fastio.formats._webdataset import decode_webdataset

        for sample in decode_webdataset(self._chunks(chunks, layout), layout.url):
            yield {key: _owned(value) for key, value in sample.items()}

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        columnar = _columnar("columns_webdataset")
        if columnar is None:
            yield from super().batches(chunks, layout)
            return
        yield from columnar(self._chunks(chunks, layout), layout.url)


class TFRecordFormat(_Indexed):
    name = "tfrecord"

    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None = None,
        verify: bool = True,
        example: bool = True,
    ) -> None:
        super().__init__(index_dir)
        self.verify = verify
        self.example = example

    def options(self) -> dict[str, Any]:
        return {"verify": self.verify, "example": self.example}

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        from fastio.formats._tfrecord import locate_tfrecords, parse_example

        records = locate_tfrecords(self._chunks(chunks, layout), layout.url, self.verify)
        if not self.example:
            for _, _, record in records:
                yield bytes(record)
            return
        for start, _, record in records:
            try:
                yield parse_example(record)
            except DecodeError as error:
                message = str(error).split(": ", 1)[1]
                raise DecodeError(message, layout.url, start) from None

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        columnar = _columnar("columns_tfrecord")
        if self.example or columnar is None:
            yield from super().batches(chunks, layout)
            return
        yield from columnar(self._chunks(chunks, layout), layout.url, self.verify)


class JsonLinesFormat(_Indexed):
    name = "jsonl"

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        from fastio.formats._lines import decode_jsonl

        return decode_jsonl(self._chunks(chunks, layout), layout.url)

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.json as pa_json

        data = b"".join(bytes(c.data) for c in self._chunks(chunks, layout))
        if not data.strip():
            return
        try:
            table = pa_json.read_json(io.BytesIO(data))
        except pa.ArrowInvalid as error:
            raise DecodeError(f"JSON lines do not parse: {error}", layout.url, -1) from None
        yield from table.to_batches()


class LinesFormat(_Indexed):
    name = "lines"

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[str]:
        from fastio.formats._lines import locate_lines

        for offset, _, line in locate_lines(self._chunks(chunks, layout), layout.url):
            try:
                yield str(line, "utf-8")
            except UnicodeDecodeError as error:
                raise DecodeError(f"line is not UTF-8: {error}", layout.url, offset) from None

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        columnar = _columnar("columns_lines")
        if columnar is None:
            import pyarrow as pa

            lines = list(self.samples(chunks, layout))
            if lines:
                yield pa.RecordBatch.from_pydict({"line": pa.array(lines, pa.string())})
            return
        import pyarrow as pa

        for batch in columnar(self._chunks(chunks, layout), layout.url):
            try:  # text, as samples are (validated as UTF-8 by the cast)
                yield batch.cast(pa.schema([("line", pa.string())]))
            except pa.ArrowInvalid as error:
                raise DecodeError(f"a line is not UTF-8: {error}", layout.url, -1) from None


def _columnar(name: str) -> Any:
    """A native columnar decoder where the build has it."""
    try:
        from fastio.formats import _columnar as module
    except ImportError:
        return None
    return getattr(module, name, None)


# ---- fixed-size records and .npy -----------------------------------------------


def _fixed_layout(url: str, size: int, data_offset: int, row_size: int, tolerate: bool,
                  meta: dict[str, Any]) -> tuple[Layout, list[DecodeError]]:  # fmt: skip
    body = size - data_offset
    count, extra = divmod(body, row_size) if row_size else (meta.get("rows", 0), 0)
    problems: list[DecodeError] = []
    expected = meta.get("rows")
    if expected is not None and row_size and count != expected:
        problem = TruncatedShardError(
            f".npy array says {expected} rows but the file holds {count}",
            url, data_offset + min(count, expected) * row_size,
        )  # fmt: skip
        if not tolerate:
            raise problem
        problems.append(problem)
        count = min(count, expected)
    elif extra:
        problem = TruncatedShardError(
            f"{body} bytes are not a whole number of {row_size}-byte records", url, size - extra
        )
        if not tolerate:
            raise problem
        problems.append(problem)
    starts = data_offset + np.arange(count, dtype=np.int64) * row_size
    meta = {**meta, "data_offset": data_offset, "row_size": row_size}
    bounds = np.arange(count + 1, dtype=np.int64)
    unit_bytes = np.full(count, row_size, np.int64)
    return Layout(url, count, size, bounds, unit_bytes, starts, starts + row_size, meta), problems


def _fill(chunks: Iterable[Chunk], out: np.ndarray) -> int:
    """Copy the chunks' bytes into ``out`` (flat uint8 view); returns bytes copied."""
    flat = out.reshape(-1).view(np.uint8)
    position = 0
    for chunk in chunks:
        n = chunk.data.nbytes
        flat[position : position + n] = np.frombuffer(chunk.data, np.uint8)
        position += n
    return position


class FixedFormat(ShardFormat):
    """Raw records of ``record_size`` bytes each."""

    name = "fixed"
    batch_kind = "numpy"

    def __init__(self, record_size: int) -> None:
        if not isinstance(record_size, int) or record_size <= 0:
            raise ValueError(f"format 'fixed' needs record_size > 0, not {record_size!r}")
        self.record_size = record_size

    def options(self) -> dict[str, Any]:
        return {"record_size": self.record_size}

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        size = os.stat(url).st_size
        meta = {"dtype": np.dtype(np.uint8), "shape": (self.record_size,)}
        return _fixed_layout(url, size, 0, self.record_size, tolerate, meta)

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        from fastio.formats._arrays import decode_fixed

        for record in decode_fixed(chunks, layout.url, self.record_size):
            yield bytes(record)

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        yield from _array_batches(chunks, layout)


def _array_batches(chunks: Iterable[Chunk], layout: Layout) -> Iterator[np.ndarray]:
    chunks = list(chunks)
    total = sum(c.data.nbytes for c in chunks)
    row_size = layout.meta["row_size"]
    dtype, shape = layout.meta["dtype"], layout.meta["shape"]
    rows = total // row_size if row_size else 0
    out = np.empty((rows, *shape), dtype)
    if _fill(chunks, out) != rows * row_size:
        raise TruncatedShardError("a run of records ends inside a record", layout.url, -1)
    yield out


class NpyFormat(ShardFormat):
    """An ``.npy`` array per shard, its rows (first axis) the samples."""

    name = "npy"
    batch_kind = "numpy"

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        size = os.stat(url).st_size
        head = b"".join(bytes(c.data) for c in reader.stream([ByteRange(url, 0, min(size, 4096))]))
        header_length = _npy_header_length(head, url)
        if header_length > len(head):
            head = b"".join(
                bytes(c.data) for c in reader.stream([ByteRange(url, 0, header_length)])
            )
        stream = io.BytesIO(head[:header_length])
        try:
            version = np.lib.format.read_magic(stream)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)  # fmt: skip
            shape, fortran_order, dtype = read(stream)
        except ValueError as error:
            raise DecodeError(f"bad .npy header: {error}", url, 0) from None
        if dtype.hasobject:
            raise DecodeError("object arrays hold pickles, not fixed-size rows", url, 0)
        if fortran_order and len(shape) > 1:
            raise DecodeError("a Fortran-order array's rows are not contiguous", url, 0)
        row_shape = tuple(shape[1:]) if shape else ()
        rows = shape[0] if shape else 1
        row_size = dtype.itemsize * math.prod(row_shape)
        meta = {"dtype": dtype, "shape": row_shape, "rows": rows}
        return _fixed_layout(url, size, header_length, row_size, tolerate, meta)

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[np.ndarray]:
        for batch in _array_batches(chunks, layout):
            yield from batch

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        yield from _array_batches(chunks, layout)


def _npy_header_length(head: bytes, url: str) -> int:
    if len(head) < 10 or head[:6] != b"\x93NUMPY":
        raise DecodeError("not an .npy file (bad magic)", url, 0)
    if head[6] == 1:
        return 10 + int.from_bytes(head[8:10], "little")
    if len(head) < 12:
        raise TruncatedShardError(".npy header is incomplete", url, 0)
    return 12 + int.from_bytes(head[8:12], "little")


# ---- Parquet and Arrow IPC ------------------------------------------------------


class _RangeFile(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only some ranges are known:
    what pyarrow reads of a Parquet or Arrow file is fetched by fastio's reader
    first and served from here. A read outside the known ranges is a bug in
    the range planning, reported as such rather than silently re-read."""

    def __init__(self, url: str, size: int, pieces: dict[int, bytes]) -> None:
        super().__init__()
        self.url = url
        self.size = size
        merged: list[tuple[int, bytes]] = []
        for start, data in sorted(pieces.items()):  # neighbours become one (pyarrow reads across)
            if merged and merged[-1][0] + len(merged[-1][1]) == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + data)
            else:
                merged.append((start, data))
        self.pieces = merged
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.size}[whence]
        self.position = base + offset
        return self.position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self.size - self.position)
        if want <= 0:
            return 0
        for start, data in self.pieces:
            if start <= self.position and self.position + want <= start + len(data):
                begin = self.position - start
                view[:want] = data[begin : begin + want]
                self.position += want
                return want
        raise OSError(f"{self.url}: bytes {self.position}..{self.position + want} were not fetched")


def _tail(reader: Reader, url: str, size: int, at_least: int) -> tuple[int, bytes]:
    length = min(size, max(at_least, 64 << 10))
    start = size - length
    data = b"".join(bytes(c.data) for c in reader.stream([ByteRange(url, start, length)]))
    return start, data


def _leaf_columns(metadata: Any, columns: Sequence[str] | None) -> list[int]:
    schema = metadata.schema
    leaves = range(metadata.num_columns)
    if columns is None:
        return list(leaves)
    chosen = [i for i in leaves
              if schema.column(i).path.split(".")[0] in columns]  # fmt: skip
    return chosen


class ParquetFormat(ShardFormat):
    """Parquet files read by row group through fastio's reader, with column selection."""

    name = "parquet"

    def __init__(self, columns: Sequence[str] | None = None) -> None:
        self.columns = list(columns) if columns is not None else None

    def options(self) -> dict[str, Any]:
        return {"columns": self.columns}

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        size = os.stat(url).st_size
        start, tail = _tail(reader, url, size, 8)
        if size < 12 or tail[-4:] != b"PAR1":
            raise DecodeError("not a Parquet file (no PAR1 footer magic)", url, max(size - 4, 0))
        footer_length = int.from_bytes(tail[-8:-4], "little")
        if footer_length + 12 > size:
            raise TruncatedShardError(
                f"Parquet footer of {footer_length} bytes does not fit the file", url, size - 8
            )
        if footer_length + 8 > len(tail):
            start, tail = _tail(reader, url, size, footer_length + 8)
        try:
            metadata = pq.read_metadata(pa.PythonFile(_RangeFile(url, size, {start: tail})))
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
            ranges = []
            for leaf in leaves:
                column = group.column(leaf)
                begin = column.data_page_offset
                if column.has_dictionary_page and column.dictionary_page_offset:
                    begin = min(begin, column.dictionary_page_offset)
                ranges.append(ByteRange(url, begin, column.total_compressed_size))
            spans.append(sorted(ranges, key=lambda r: r.offset))
        bounds = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        unit_bytes = np.array([sum(r.length or 0 for r in s) for s in spans], np.int64)
        meta = {"unit_ranges": spans.__getitem__, "metadata": metadata, "tail": (start, tail)}
        return Layout(url, int(bounds[-1]), size, bounds, unit_bytes, meta=meta), []

    def _tables(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[pa.Table]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pieces = _gather(chunks)
        start, tail = layout.meta["tail"]
        pieces.setdefault(start, tail)
        handle = pq.ParquetFile(pa.PythonFile(_RangeFile(layout.url, layout.size, pieces)),
                                metadata=layout.meta["metadata"], pre_buffer=False)  # fmt: skip
        offsets = {offset for offset in pieces if offset != start}
        for g in range(handle.num_row_groups):
            ranges = layout.meta["unit_ranges"](g)
            if ranges and ranges[0].offset in offsets:
                try:
                    yield handle.read_row_group(g, columns=self.columns)
                except (pa.ArrowException, OSError) as error:
                    raise DecodeError(
                        f"row group {g} does not decode: {error}", layout.url, ranges[0].offset,
                        int(layout.bounds[g]),
                    ) from None  # fmt: skip

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[dict[str, Any]]:
        for table in self._tables(chunks, layout):
            yield from table.to_pylist()

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        for table in self._tables(chunks, layout):
            yield from table.to_batches()


# Arrow IPC file: "ARROW1" + padding, a stream of messages, a flatbuffer footer
# naming each record batch's block, its length (int32) and "ARROW1" again.
_ARROW_MAGIC = b"ARROW1"


def _fb_table(buffer: bytes, position: int) -> tuple[int, list[int]]:
    """A flatbuffer table at ``position``: (position, field offsets, 0 = absent)."""
    vtable = position - struct.unpack_from("<i", buffer, position)[0]
    vtable_size = struct.unpack_from("<H", buffer, vtable)[0]
    fields = [struct.unpack_from("<H", buffer, vtable + 4 + 2 * i)[0]
              for i in range((vtable_size - 4) // 2)]  # fmt: skip
    return position, fields


def _fb_field(buffer: bytes, table: tuple[int, list[int]], index: int) -> int | None:
    position, fields = table
    if index >= len(fields) or not fields[index]:
        return None
    return position + fields[index]


def _fb_deref(buffer: bytes, at: int) -> int:
    return at + int(struct.unpack_from("<I", buffer, at)[0])


def _arrow_blocks(footer: bytes, vector_field: int) -> list[tuple[int, int, int]]:
    root = _fb_table(footer, _fb_deref(footer, 0))
    at = _fb_field(footer, root, vector_field)
    if at is None:
        return []
    vector = _fb_deref(footer, at)
    count = struct.unpack_from("<I", footer, vector)[0]
    return [struct.unpack_from("<qi4xq", footer, vector + 4 + 24 * i) for i in range(count)]


def _message_rows(data: bytes) -> int:
    """Rows of a record batch message (its header's ``length``)."""
    position = 8 if data[:4] == b"\xff\xff\xff\xff" else 4
    message = data[position:]
    root = _fb_table(message, _fb_deref(message, 0))
    header_at = _fb_field(message, root, 2)
    if header_at is None:
        raise ValueError("message without a header")
    header = _fb_table(message, _fb_deref(message, header_at))
    length_at = _fb_field(message, header, 0)
    return 0 if length_at is None else int(struct.unpack_from("<q", message, length_at)[0])


class ArrowFormat(ShardFormat):
    """Arrow IPC files read by record batch through fastio's reader, with column selection."""

    name = "arrow"

    def __init__(self, columns: Sequence[str] | None = None) -> None:
        self.columns = list(columns) if columns is not None else None

    def options(self) -> dict[str, Any]:
        return {"columns": self.columns}

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        size = os.stat(url).st_size
        start, tail = _tail(reader, url, size, 10)
        if size < 18 or tail[-6:] != _ARROW_MAGIC:
            raise DecodeError(
                "not an Arrow IPC file (no ARROW1 footer magic)", url, max(size - 6, 0)
            )
        footer_length = int.from_bytes(tail[-10:-6], "little")
        if footer_length + 18 > size:
            raise TruncatedShardError(
                f"Arrow footer of {footer_length} bytes does not fit the file", url, size - 10
            )
        if footer_length + 10 > len(tail):
            start, tail = _tail(reader, url, size, footer_length + 10)
        footer = tail[len(tail) - 10 - footer_length : len(tail) - 10]
        try:
            batches = _arrow_blocks(footer, 3)
            dictionaries = _arrow_blocks(footer, 2)
        except struct.error:
            raise DecodeError("Arrow footer is damaged", url, size - 10 - footer_length) from None
        heads = [ByteRange(url, offset, meta) for offset, meta, _ in batches]
        rows = []
        if heads:
            pieces = _gather(reader.stream([heads]))
            for offset, _, _ in batches:
                try:
                    rows.append(_message_rows(pieces[offset]))
                except (struct.error, ValueError, KeyError):
                    raise DecodeError("Arrow record batch header is damaged", url, offset) from None
        extra = [ByteRange(url, o, m + b) for o, m, b in dictionaries]
        spans = [[ByteRange(url, o, m + b), *extra] for o, m, b in batches]
        bounds = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)]).astype(np.int64)
        unit_bytes = np.array([m + b for _, m, b in batches], np.int64)
        meta = {"unit_ranges": spans.__getitem__, "tail": (start, tail),
                "batch_offsets": [o for o, _, _ in batches]}  # fmt: skip
        # The schema message at the start of the file (served to pyarrow from here).
        head = min(size, 64 << 10)
        schema_head = b"".join(bytes(c.data) for c in reader.stream([ByteRange(url, 0, head)]))
        meta["head"] = schema_head
        if self.columns is not None:
            import pyarrow as pa

            try:
                names = pa.ipc.read_schema(pa.py_buffer(schema_head[8:])).names
            except (pa.ArrowException, OSError):
                names = None  # a schema larger than the head: checked when batches decode
            missing = [c for c in self.columns if names is not None and c not in names]
            if missing:
                raise ValueError(
                    f"{url}: no column {missing[0]!r}; columns are {sorted(names or [])}"
                )
        return Layout(url, int(bounds[-1]), size, bounds, unit_bytes, meta=meta), []

    def _batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        pieces = _gather(chunks)
        wanted = [i for i, o in enumerate(layout.meta["batch_offsets"]) if o in pieces]
        start, tail = layout.meta["tail"]
        pieces.setdefault(start, tail)
        pieces.setdefault(0, layout.meta["head"])
        try:
            handle = pa.ipc.open_file(pa.PythonFile(_RangeFile(layout.url, layout.size, pieces)))
            for i in wanted:
                batch = handle.get_batch(i)
                yield batch.select(self.columns) if self.columns is not None else batch
        except (pa.ArrowException, OSError) as error:
            raise DecodeError(f"Arrow data does not decode: {error}", layout.url, -1) from None

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[dict[str, Any]]:
        for batch in self._batches(chunks, layout):
            yield from batch.to_pylist()

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        return self._batches(chunks, layout)


# ---- choosing a format ----------------------------------------------------------

FORMATS: dict[str, type[ShardFormat]] = {
    "webdataset": WebDatasetFormat,
    "tfrecord": TFRecordFormat,
    "jsonl": JsonLinesFormat,
    "lines": LinesFormat,
    "fixed": FixedFormat,
    "npy": NpyFormat,
    "parquet": ParquetFormat,
    "arrow": ArrowFormat,
}

_EXTENSIONS = {
    ".tar": "webdataset", ".tgz": "webdataset", ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord", ".jsonl": "jsonl", ".ndjson": "jsonl", ".txt": "lines",
    ".npy": "npy", ".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow",
    ".ipc": "arrow",
}  # fmt: skip


def format_for_url(url: str) -> str:
    """The format a shard's extension names (compression suffixes looked through)."""
    name = url.lower()
    for suffix in (".gz", ".zst", ".zstd"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.endswith(".tgz"):
        return "webdataset"
    _, extension = os.path.splitext(name)
    if extension not in _EXTENSIONS:
        raise ValueError(
            f"cannot tell the format of {url!r} from its extension; "
            f"pass format= (one of {', '.join(sorted(FORMATS))})"
        )
    return _EXTENSIONS[extension]


def make_format(name: str, **options: Any) -> ShardFormat:
    """A format by name with its options (unknown options raise TypeError)."""
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; one of {', '.join(sorted(FORMATS))}")
    try:
        return FORMATS[name](**options)
    except TypeError as error:
        raise TypeError(f"format {name!r}: {error}") from None
