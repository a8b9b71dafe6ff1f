"""Fixed-size binary records and ``.npy`` arrays (rows along the first axis):
layouts by arithmetic, batches as numpy arrays."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio._errors import DecodeError, TruncatedShardError
from fastio.formats._layout import Layout, ShardFormat
from fastio.reader._ranges import ByteRange

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from fastio.reader._ranges import Chunk
    from fastio.reader._reader import Reader

__all__ = ["FixedFormat", "NpyFormat"]


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
        size, _ = reader.describe(url)
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
        size, _ = reader.describe(url)
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
