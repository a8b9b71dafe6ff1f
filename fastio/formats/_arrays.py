"""Fixed-size binary records and ``.npy`` arrays split along their first axis."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

import numpy as np

from fastio._errors import DecodeError, TruncatedShardError
from fastio.formats._reassemble import framed

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from fastio.reader._ranges import Chunk


def decode_fixed(chunks: Iterable[Chunk], url: str, record_size: int) -> Iterator[memoryview]:
    """Records of ``record_size`` bytes each, as views. A shard whose size is not
    a multiple of ``record_size`` raises :class:`TruncatedShardError`."""
    if record_size <= 0:
        raise ValueError(f"record_size must be positive, not {record_size}")

    def scan(
        view: memoryview, base: int
    ) -> tuple[list[memoryview], int, bool, Exception | None, int]:
        count = len(view) // record_size
        records = [view[i * record_size : (i + 1) * record_size] for i in range(count)]
        return records, count * record_size, False, None, record_size

    return framed(chunks, url, scan)


def _npy_header_length(prefix: bytes, url: str) -> int | None:
    """Bytes of the magic, version, length field and header, once known."""
    if len(prefix) < 10:
        return None
    if prefix[:6] != b"\x93NUMPY":
        raise DecodeError("not an .npy file (bad magic)", url, 0)
    if prefix[6] == 1:
        return 10 + int.from_bytes(prefix[8:10], "little")
    if len(prefix) < 12:
        return None
    return 12 + int.from_bytes(prefix[8:12], "little")


def decode_npy(chunks: Iterable[Chunk], url: str) -> Iterator[np.ndarray]:
    """The rows of an ``.npy`` array (its first axis), each a numpy view of the
    reader's buffer (copied only where a row straddles two chunks). Fortran-order
    and object arrays cannot be split in place and raise :class:`DecodeError`."""
    stream = iter(chunks)
    prefix = bytearray()
    header_length: int | None = None
    chunk: Chunk | None = None
    for chunk in stream:
        prefix += chunk.data
        header_length = _npy_header_length(bytes(prefix[:12]), url)
        if header_length is not None and len(prefix) >= header_length:
            break
    if header_length is None or len(prefix) < header_length or chunk is None:
        raise TruncatedShardError(".npy header is incomplete", url, 0)
    header = io.BytesIO(bytes(prefix[:header_length]))
    version = np.lib.format.read_magic(header)
    read_header = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0  # 3.0 differs only in allowing UTF-8
    )
    shape, fortran_order, dtype = read_header(header)
    if dtype.hasobject:
        raise DecodeError("object arrays hold pickles, not fixed-size rows", url, 0)
    if fortran_order and len(shape) > 1:
        raise DecodeError("a Fortran-order array's rows are not contiguous", url, 0)
    row_shape = shape[1:]
    row_size = dtype.itemsize * math.prod(row_shape)
    expected = math.prod(shape[:1]) if shape else 1
    if not shape:  # a 0-d array is one "row"
        row_shape, row_size = (), dtype.itemsize
    # The rest of the chunk where the header ended, then the remaining chunks.
    consumed_before = len(prefix) - len(chunk.data)
    start = header_length - consumed_before
    first = chunk._replace(data=chunk.data[start:], offset=chunk.offset + start)

    def body() -> Iterator[Chunk]:
        yield first
        yield from stream

    count = 0
    if row_size:
        for record in decode_fixed(body(), url, row_size):
            yield np.frombuffer(record, dtype).reshape(row_shape)
            count += 1
    else:  # zero-size rows: nothing to read, but the rows exist
        for _ in range(expected):
            yield np.empty(row_shape, dtype)
            count += 1
    if count != expected:
        raise TruncatedShardError(
            f".npy array says {expected} rows but holds {count}",
            url,
            header_length + count * row_size,
        )
