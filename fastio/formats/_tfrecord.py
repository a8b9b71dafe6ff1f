"""TFRecord shards, and tf.train.Example records decoded without TensorFlow."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fastio._errors import CorruptRecordError, DecodeError
from fastio._native import parse_example as _parse_example
from fastio._native import scan_tfrecords
from fastio.formats._reassemble import framed

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from fastio._native import FrameError
    from fastio.reader._ranges import Chunk

_HEADER = 12  # uint64 length + uint32 masked CRC of the length


Located = tuple[int, int, memoryview]  # (start, end) of the framed record in the shard, data


def decode_tfrecord(chunks: Iterable[Chunk], url: str, verify: bool = True) -> Iterator[memoryview]:
    """The records of one TFRecord shard, as views. With ``verify`` (the default)
    both checksums of every record are checked; a mismatch raises
    :class:`CorruptRecordError` naming the URL, byte offset and record index."""
    return (data for _, _, data in locate_tfrecords(chunks, url, verify))


def locate_tfrecords(chunks: Iterable[Chunk], url: str, verify: bool = True) -> Iterator[Located]:
    """Like :func:`decode_tfrecord`, with each record's byte range in the shard
    (header to trailing checksum), for the index."""
    count = 0

    def scan(view: memoryview, base: int) -> tuple[list[Located], int, bool, Exception | None, int]:
        nonlocal count
        found = scan_tfrecords(view, verify)
        records = [
            (base + o - _HEADER, base + o + n + 4, view[o : o + n])
            for o, n in zip(found.offsets, found.lengths, strict=True)
        ]
        count += len(records)
        problem = _checksum_problem(found.error, url, base, count)
        return records, found.consumed, False, problem, found.needed

    return framed(chunks, url, scan)


def _checksum_problem(
    error: FrameError | None, url: str, base: int, count: int
) -> CorruptRecordError | None:
    """The error to raise for a checksum mismatch a scan at shard offset ``base``
    stopped at, where ``count`` records of the shard come before it."""
    if error is None:
        return None
    what = "length" if error.kind == "length_crc" else "data"
    return CorruptRecordError(f"{what} checksum mismatch", url, base + error.offset, count)


# ---- tf.train.Example (protobuf wire format) ------------------------------------

_INT64 = np.dtype(np.int64)
_FLOAT32 = np.dtype("<f4")  # the wire's float32s, copied as they are


def parse_example(record: bytes | memoryview) -> dict[str, np.ndarray | list[bytes]]:
    """A serialized ``tf.train.Example`` as ``{name: values}``: int64 and float
    features as numpy arrays, bytes features as lists of bytes (a name given
    twice keeps its last value). Parsed in native code, without TensorFlow or
    protobuf. Raises :class:`DecodeError` (with offset 0 and no URL) for
    malformed bytes, a field of the wrong wire type included."""
    try:
        result: dict[str, np.ndarray | list[bytes]] = _parse_example(
            record, np.frombuffer, _INT64, _FLOAT32
        )
    except ValueError as error:  # UnicodeDecodeError too: a name that is not UTF-8
        raise DecodeError(f"not a tf.train.Example: {error}", "<record>", 0) from None
    return result
