"""TFRecord shards, and tf.train.Example records decoded without TensorFlow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fastio._errors import CorruptRecordError, DecodeError
from fastio._native import scan_tfrecords
from fastio.formats._reassemble import framed

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from fastio._ranges import Chunk

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
        offsets, lengths, consumed, error, needed = scan_tfrecords(view, verify)
        records = [
            (base + o - _HEADER, base + o + n + 4, view[o : o + n])
            for o, n in zip(offsets, lengths, strict=True)
        ]
        count += len(records)
        problem = None
        if error is not None:
            kind, offset = error
            what = "length" if kind == "length_crc" else "data"
            problem = CorruptRecordError(f"{what} checksum mismatch", url, base + offset, count)
        return records, consumed, False, problem, needed

    return framed(chunks, url, scan)


# ---- tf.train.Example (protobuf wire format) ------------------------------------


def _varint(data: memoryview, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 64 bits")


def _fields(data: memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message; length-delimited
    values are views."""
    position, end = 0, len(data)
    while position < end:
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, position = _varint(data, position)
        elif wire == 2:
            length, position = _varint(data, position)
            if position + length > end:
                raise ValueError("field runs past the end of its message")
            value, position = data[position : position + length], position + length
        elif wire == 5:
            value, position = data[position : position + 4], position + 4
        elif wire == 1:
            value, position = data[position : position + 8], position + 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _feature(data: memoryview) -> np.ndarray | list[bytes]:
    for kind, _, payload in _fields(data):  # oneof: bytes_list=1, float_list=2, int64_list=3
        if kind == 1:
            return [bytes(value) for number, _, value in _fields(payload) if number == 1]
        if kind == 2:
            # Packed (one length-delimited run) or not (one fixed32 each): either
            # way the bytes are little-endian float32 values.
            parts = [
                np.frombuffer(value, "<f4") for number, _, value in _fields(payload) if number == 1
            ]
            return np.concatenate(parts) if parts else np.empty(0, np.float32)
        if kind == 3:
            values: list[int] = []
            for number, wire, value in _fields(payload):
                if number != 1:
                    continue
                if wire == 0:
                    values.append(value)
                else:  # packed
                    position = 0
                    while position < len(value):
                        item, position = _varint(value, position)
                        values.append(item)
            return np.array(values, dtype=np.uint64).astype(np.int64)
    return []


def parse_example(record: bytes | memoryview) -> dict[str, np.ndarray | list[bytes]]:
    """A serialized ``tf.train.Example`` as ``{name: values}``: int64 and float
    features as numpy arrays, bytes features as lists of bytes. Raises
    :class:`DecodeError` (with offset 0 and no URL) for malformed bytes."""
    data = memoryview(record).cast("B")
    result: dict[str, np.ndarray | list[bytes]] = {}
    try:
        for number, _, features in _fields(data):
            if number != 1:
                continue
            for entry_number, _, entry in _fields(features):
                if entry_number != 1:
                    continue
                name, feature = "", memoryview(b"")
                for part, _, value in _fields(entry):
                    if part == 1:
                        name = bytes(value).decode()
                    elif part == 2:
                        feature = value
                result[name] = _feature(feature)
    except (ValueError, IndexError, UnicodeDecodeError) as error:
        raise DecodeError(f"not a tf.train.Example: {error}", "<record>", 0) from None
    return result
