"""Fixed-size binary records and ``.npy`` arrays (rows along the first axis).

Laid out by arithmetic (no index: sample ``i`` is at ``data_offset + i *
row_size``), read as views or as numpy batches, and written.
"""

from __future__ import annotations

import ast
import io
import math
import struct
from tokenize import TokenError
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from fastio._errors import DecodeError, TruncatedShardError
from fastio.formats._compression import codec_for, decompress
from fastio.formats._layout import MAPPED_SAMPLE_BYTES, Layout, ShardFormat
from fastio.formats._reassemble import Framing, framed
from fastio.formats._records import RecordWriter
from fastio.reader._ranges import ByteRange

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from typing_extensions import Buffer

    from fastio.formats._compression import Writable
    from fastio.reader._ranges import Chunk
    from fastio.reader._reader import Reader

__all__ = ["FixedFormat", "FixedWriter", "NpyFormat", "NpyWriter", "decode_fixed", "decode_npy"]

_NPY_MAGIC = b"\x93NUMPY"
_MAX_NPY_HEADER = 1 << 20  # decompressed bytes kept to read an .npy header from


def decode_fixed(chunks: Iterable[Chunk], url: str, record_size: int) -> Iterator[memoryview]:
    """Records of ``record_size`` bytes each, as views. A shard whose size is not
    a multiple of ``record_size`` raises :class:`TruncatedShardError`."""
    if record_size <= 0:
        raise ValueError(f"record_size must be positive, not {record_size}")

    def scan(view: memoryview, base: int) -> Framing[memoryview]:
        count = len(view) // record_size
        records = [view[i * record_size : (i + 1) * record_size] for i in range(count)]
        return Framing(records, count * record_size, record_size)

    return framed(chunks, url, scan)


class _NpyHeader(NamedTuple):
    length: int  # bytes of the magic, version, length field and header: where rows start
    dtype: np.dtype[Any]
    row_shape: tuple[int, ...]
    rows: int

    @property
    def row_size(self) -> int:
        return self.dtype.itemsize * math.prod(self.row_shape)


def _npy_header_length(prefix: bytes, url: str) -> int | None:
    """Bytes of the magic, version, length field and header, once ``prefix``
    shows them (None until it does)."""
    if prefix[:6] != _NPY_MAGIC[: len(prefix)]:
        raise DecodeError("not an .npy file (bad magic)", url, 0)
    if len(prefix) < 10:
        return None
    if prefix[6] == 1:
        return 10 + int.from_bytes(prefix[8:10], "little")
    if len(prefix) < 12:
        return None
    return 12 + int.from_bytes(prefix[8:12], "little")


# What numpy's header reader raises for damaged bytes: it tokenizes and
# evaluates the header's dict literal (SyntaxError, tokenize's TokenError),
# then checks its keys and values.
_NPY_HEADER_ERRORS = (ValueError, SyntaxError, TokenError, TypeError, KeyError, OverflowError,
                      RecursionError, struct.error)  # fmt: skip


def _npy_header_3(stream: io.BytesIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """A version 3.0 header, past its magic: 2.0's, in UTF-8 (numpy writes it
    where a field's name is not Latin-1, and reads 2.0's as Latin-1)."""
    (size,) = struct.unpack("<I", stream.read(4))
    header = ast.literal_eval(stream.read(size).decode("utf-8"))
    shape, fortran_order = header["shape"], header["fortran_order"]
    if not isinstance(shape, tuple) or not all(type(n) is int for n in shape):
        raise ValueError(f"shape is not a tuple of integers: {shape!r}")
    if type(fortran_order) is not bool:
        raise ValueError(f"fortran_order is not a bool: {fortran_order!r}")
    return shape, fortran_order, np.lib.format.descr_to_dtype(header["descr"])


def _npy_header(head: bytes, length: int, url: str) -> _NpyHeader:
    """The header at the start of ``head`` (``length`` bytes of it). Raises
    :class:`DecodeError` for an array whose rows are not contiguous
    fixed-size bytes (Fortran order, objects) or a damaged header."""
    stream = io.BytesIO(head[:length])
    try:
        version = np.lib.format.read_magic(stream)
        if version == (3, 0):
            shape, fortran_order, dtype = _npy_header_3(stream)
        else:
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)  # fmt: skip
            shape, fortran_order, dtype = read(stream)
    except _NPY_HEADER_ERRORS as error:
        raise DecodeError(f"bad .npy header: {error}", url, 0) from None
    if dtype.hasobject:
        raise DecodeError("object arrays hold pickles, not fixed-size rows", url, 0)
    if any(n < 0 for n in shape):
        raise DecodeError(f"bad .npy header: a negative dimension in shape {shape}", url, 0)
    if dtype.subdtype is not None:  # '3f4': numpy writes such axes into the shape
        raise DecodeError(f"bad .npy header: a subarray dtype {dtype} (numpy cannot read the "
                          "array either)", url, 0)  # fmt: skip
    if fortran_order and len(shape) > 1:
        raise DecodeError("a Fortran-order array's rows are not contiguous", url, 0)
    if not shape:  # a 0-d array is one "row"
        return _NpyHeader(length, dtype, (), 1)
    return _NpyHeader(length, dtype, tuple(shape[1:]), shape[0])


def decode_npy(chunks: Iterable[Chunk], url: str) -> Iterator[np.ndarray]:
    """The rows of an ``.npy`` array (its first axis), each a numpy view of the
    reader's buffer (copied only where a row straddles two chunks). Fortran-order
    and object arrays cannot be split in place and raise :class:`DecodeError`."""
    stream = iter(chunks)
    prefix = bytearray()
    length: int | None = None
    chunk: Chunk | None = None
    for chunk in stream:
        prefix += chunk.data
        length = _npy_header_length(bytes(prefix[:12]), url)
        if length is not None and len(prefix) >= length:
            break
    if length is None or len(prefix) < length or chunk is None:
        raise TruncatedShardError(".npy header is incomplete", url, 0)
    header = _npy_header(bytes(prefix), length, url)
    # The rest of the chunk where the header ended, then the remaining chunks.
    start = length - (len(prefix) - len(chunk.data))
    first = chunk._replace(data=chunk.data[start:], offset=chunk.offset + start)

    def body() -> Iterator[Chunk]:
        yield first
        yield from stream

    count = 0
    if header.row_size:
        for record in decode_fixed(body(), url, header.row_size):
            yield np.frombuffer(record, header.dtype).reshape(header.row_shape)
            count += 1
    else:  # zero-size rows: nothing to read, but the rows exist
        for _ in range(header.rows):
            yield np.empty(header.row_shape, header.dtype)
            count += 1
    if count != header.rows:
        raise TruncatedShardError(
            f".npy array says {header.rows} rows but holds {count}",
            url,
            length + count * header.row_size,
            count,
        )


def _fixed_layout(url: str, size: int, data_offset: int, row_size: int, tolerate: bool,
                  meta: dict[str, Any]) -> tuple[Layout, list[DecodeError]]:  # fmt: skip
    body = size - data_offset
    count, extra = divmod(body, row_size) if row_size else (meta.get("rows", 0), 0)
    problems: list[DecodeError] = []
    expected = meta.get("rows")
    if expected is not None and row_size and count != expected:
        # The header says how many rows there are: those missing are lost.
        problem = TruncatedShardError(
            f".npy array says {expected} rows but the file holds {count}",
            url, data_offset + min(count, expected) * row_size, min(count, expected),
            lost=max(expected - count, 0),
        )  # fmt: skip
        if not tolerate:
            raise problem
        problems.append(problem)
        count = min(count, expected)
    elif extra:
        problem = TruncatedShardError(
            f"{body} bytes are not a whole number of {row_size}-byte records",
            url,
            size - extra,
            count,
        )
        if not tolerate:
            raise problem
        problems.append(problem)
    starts = data_offset + np.arange(count, dtype=np.int64) * row_size
    meta = {**meta, "data_offset": data_offset, "row_size": row_size}
    bounds = np.arange(count + 1, dtype=np.int64)
    unit_bytes = np.full(count, row_size, np.int64)
    return Layout(url, count, size, bounds, unit_bytes, starts, starts + row_size, meta), problems


def _array_batches(chunks: Iterable[Chunk], layout: Layout) -> Iterator[np.ndarray]:
    """The rows of the chunks of ``layout.ranges(...)`` as one array: for a
    compressed shard, its decompressed bytes from the start (header included)
    and at most its ``count`` rows."""
    row_size = layout.meta["row_size"]
    dtype, shape = layout.meta["dtype"], layout.meta["shape"]
    skip = 0
    if layout.whole:
        chunks = decompress(chunks, layout.url)
        skip = layout.meta["data_offset"]  # an .npy header before the rows
    pieces: list[memoryview] = []
    stopped: DecodeError | None = None
    try:
        for chunk in chunks:
            data = chunk.data
            if skip:
                cut = min(skip, len(data))
                data, skip = data[cut:], skip - cut
            pieces.append(data)
    except DecodeError as error:  # a compressed stream's: the whole rows before it come first
        stopped = error
    total = sum(piece.nbytes for piece in pieces)
    rows = total // row_size if row_size else 0
    if layout.whole:
        rows = min(rows, layout.count)
    out = np.empty((rows, *shape), dtype)
    flat = out.reshape(-1).view(np.uint8)
    position = 0
    for piece in pieces:
        take = min(piece.nbytes, flat.size - position)
        flat[position : position + take] = np.frombuffer(piece, np.uint8, take)
        position += take
    if stopped is not None:
        if rows:
            yield out
        raise stopped
    if not layout.whole and total != rows * row_size:
        raise TruncatedShardError("a run of records ends inside a record", layout.url, -1)
    yield out


def _whole_rows(chunks: Iterable[Chunk], layout: Layout) -> Iterator[np.ndarray]:
    """The rows of :func:`_array_batches`, one at a time."""
    for batch in _array_batches(chunks, layout):
        yield from batch


def _compressed_layout(
    reader: Reader, url: str, tolerate: bool, record_size: int | None, meta: dict[str, Any]
) -> tuple[Layout, list[DecodeError]]:
    """The layout of a compressed ``fixed`` (``record_size``) or ``.npy`` shard,
    from one pass over its decompressed bytes: its rows are read by
    decompressing from the start, so it is one unit."""
    size, _ = reader.describe(url)
    head = bytearray()
    total = 0
    stopped: DecodeError | None = None
    try:
        for chunk in decompress(reader.stream([ByteRange(url)]), url):
            if len(head) < _MAX_NPY_HEADER:
                head += chunk.data[: _MAX_NPY_HEADER - len(head)]
            total += chunk.data.nbytes
    except DecodeError as error:
        if not tolerate:
            raise
        stopped = error
    if record_size is None:
        length = _npy_header_length(bytes(head[:12]), url)
        if length is None or length > len(head):
            raise TruncatedShardError(".npy header is incomplete", url, 0)
        header = _npy_header(bytes(head), length, url)
        meta = {**meta, "dtype": header.dtype, "shape": header.row_shape, "rows": header.rows}
        data_offset, row_size = length, header.row_size
    else:
        data_offset, row_size = 0, record_size
    layout, problems = _fixed_layout(url, total, data_offset, row_size, True, meta)
    if stopped is not None:
        # A row count in the header already counts what the cut lost; else it
        # is the row cut off (unknowable, past it).
        stopped.lost = 0 if "rows" in meta else max(stopped.lost, int(bool(problems)))
        problems = [stopped] + (problems if "rows" in meta else [])
    elif problems and not tolerate:
        raise problems[0]
    whole = np.array([size], np.int64)
    bounds = np.array([0, layout.count], np.int64)
    return Layout(url, layout.count, size, bounds, whole, layout.starts, layout.ends,
                  layout.meta, whole=True), problems  # fmt: skip


class FixedFormat(ShardFormat):
    """Raw records of ``record_size`` bytes each (compressed as a whole too:
    ``.bin.gz``, ``.bin.zst``)."""

    name = "fixed"
    batch_kind = "numpy"

    def __init__(self, record_size: int) -> None:
        if not isinstance(record_size, int) or record_size <= 0:
            raise ValueError(f"format 'fixed' needs record_size > 0, not {record_size!r}")
        self.record_size = record_size

    def options(self) -> dict[str, Any]:
        return {"record_size": self.record_size}

    def maps_cached(self, columnar: bool, sample_bytes: float | None) -> bool:
        # Each record is copied once (see NpyFormat.maps_cached).
        return self.record_size >= MAPPED_SAMPLE_BYTES

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        meta = {"dtype": np.dtype(np.uint8), "shape": (self.record_size,)}
        if codec_for(url) is not None:
            return _compressed_layout(reader, url, tolerate, self.record_size, meta)
        size, _ = reader.describe(url)
        return _fixed_layout(url, size, 0, self.record_size, tolerate, meta)

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        if layout.whole:  # compressed: at most the rows counted, what follows was a problem
            for row in _whole_rows(chunks, layout):
                yield row.tobytes()
            return
        for record in decode_fixed(chunks, layout.url, self.record_size):
            yield bytes(record)

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        yield from _array_batches(chunks, layout)


class NpyFormat(ShardFormat):
    """An ``.npy`` array per shard, its rows (first axis) the samples
    (compressed as a whole too: ``.npy.gz``, ``.npy.zst``)."""

    name = "npy"
    batch_kind = "numpy"

    def maps_cached(self, columnar: bool, sample_bytes: float | None) -> bool:
        # Each row is copied once, into its sample or its batch: rows of 110
        # KB ran at 57k/s read and 62k mapped (batches of 256: 31k and 33k),
        # rows of 1 KB at 1.78M read and 1.5-1.7M mapped.
        return sample_bytes is not None and sample_bytes >= MAPPED_SAMPLE_BYTES

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        if codec_for(url) is not None:
            return _compressed_layout(reader, url, tolerate, None, {})
        size, _ = reader.describe(url)
        head = b"".join(bytes(c.data) for c in reader.stream([ByteRange(url, 0, min(size, 4096))]))
        length = _npy_header_length(head, url)
        if length is None:
            raise TruncatedShardError(".npy header is incomplete", url, 0)
        if length > len(head):
            head = b"".join(bytes(c.data) for c in reader.stream([ByteRange(url, 0, length)]))
        header = _npy_header(head, length, url)
        meta = {"dtype": header.dtype, "shape": header.row_shape, "rows": header.rows}
        return _fixed_layout(url, size, length, header.row_size, tolerate, meta)

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[np.ndarray]:
        return _whole_rows(chunks, layout)

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        yield from _array_batches(chunks, layout)


# ---- writing ------------------------------------------------------------------------


class FixedWriter(RecordWriter):
    """Writes records of ``record_size`` bytes each (the ``fixed`` format)."""

    format = "fixed"

    def __init__(self, file: Writable, record_size: int) -> None:
        super().__init__(file)
        self.record_size = record_size

    def write(self, record: Buffer) -> None:
        """Write a record. Raises ValueError for one of another size."""
        size = memoryview(record).nbytes
        if size != self.record_size:
            raise ValueError(f"a record of {size} bytes, not {self.record_size}")
        self.file.write(record)
        self.position += size
        self._noted(self.position - size)


class NpyWriter(FixedWriter):
    """Writes an ``.npy`` array of ``rows`` rows of ``row_shape`` and ``dtype``,
    a row (its bytes, C order) at a time; the header goes first."""

    format = "npy"

    def __init__(
        self, file: Writable, dtype: np.dtype[Any], row_shape: tuple[int, ...], rows: int
    ) -> None:
        super().__init__(file, np.dtype(dtype).itemsize * math.prod(row_shape))
        self.rows = rows
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                  "fortran_order": False, "shape": (rows, *row_shape)}  # fmt: skip
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, header)
        self._put(head.getvalue())

    def close(self) -> None:
        """Raises ValueError unless ``rows`` rows were written."""
        if len(self) != self.rows:
            raise ValueError(f"the .npy header says {self.rows} rows, {len(self)} were written")
