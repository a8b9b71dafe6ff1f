"""TFRecord shards, and tf.train.Example records decoded without TensorFlow.

Read as records (views), parsed examples or Arrow batches of one binary column,
located for the index, and written (the record framing and ``tf.train.Example``
encoded here, with no TensorFlow or protobuf either).
"""

from __future__ import annotations

import functools
import itertools
import struct
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import numpy as np

from fastio._errors import CorruptRecordError, DecodeError, TruncatedShardError
from fastio._native import (
    ExampleBatch,
    RecordColumns,
    check_tfrecords,
    crc32c,
    gather_examples,
    scan_tfrecords,
)
from fastio._native import parse_example as _parse_example
from fastio.formats._index import Locator
from fastio.formats._layout import MAPPED_SAMPLE_BYTES, batch_of
from fastio.formats._parts import Part, PartBuilder
from fastio.formats._reassemble import MAX_BATCH_BYTES, Framing, arrow, batched, framed, too_large
from fastio.formats._records import RecordFormat, RecordWriter
from fastio.reader._ranges import ByteRange

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable, Iterator, Mapping

    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    from typing_extensions import Buffer

    from fastio._native import Collected, FrameError
    from fastio.formats._index import IndexPlacement
    from fastio.formats._layout import Layout
    from fastio.reader._ranges import Chunk
    from fastio.reader._reader import Reader

__all__ = [
    "TFRecordFormat",
    "TFRecordWriter",
    "ExamplePart",
    "columns_examples",
    "columns_tfrecord",
    "decode_tfrecord",
    "example_parts",
    "locate_tfrecords",
    "parse_example",
    "resync_tfrecord",
]

_HEADER = 12  # uint64 length + uint32 masked CRC of the length


Located = tuple[int, int, memoryview]  # (start, end) of the framed record in the shard, data


def decode_tfrecord(chunks: Iterable[Chunk], url: str, verify: bool = True) -> Iterator[memoryview]:
    """The records of one TFRecord shard, as views. With ``verify`` (the default)
    both checksums of every record are checked; a mismatch raises
    :class:`CorruptRecordError` naming the URL, byte offset and record index."""
    return (data for _, _, data in locate_tfrecords(chunks, url, verify))


@overload
def locate_tfrecords(
    chunks: Iterable[Chunk], url: str, verify: bool = True, *, step_over: Literal[False] = False
) -> Iterator[Located]: ...


@overload
def locate_tfrecords(
    chunks: Iterable[Chunk], url: str, verify: bool = True, *, step_over: bool
) -> Iterator[tuple[int, int, memoryview | CorruptRecordError]]: ...


def locate_tfrecords(
    chunks: Iterable[Chunk], url: str, verify: bool = True, *, step_over: bool = False
) -> Iterator[tuple[int, int, memoryview | CorruptRecordError]]:
    """Like :func:`decode_tfrecord`, with each record's byte range in the shard
    (header to trailing checksum), for the index. With ``step_over`` a record
    whose data checksum fails (its length is sound, so the next record is
    known) comes as its :class:`CorruptRecordError` in place of its data, and
    the records after it follow."""

    def located(view: memoryview, base: int, offsets: Any, lengths: Any) -> list[Any]:
        return [(base + o - _HEADER, base + o + n + 4, view[o : o + n])
                for o, n in zip(offsets, lengths, strict=True)]  # fmt: skip

    return _framed_tfrecords(chunks, url, verify, step_over, located, _with_range)


def _with_range(start: int, end: int, problem: CorruptRecordError) -> Any:
    return start, end, problem


def _framed_tfrecords(
    chunks: Iterable[Chunk],
    url: str,
    verify: bool,
    step_over: bool,
    records_of: Callable[[memoryview, int, Any, Any], list[Any]],
    damaged: Callable[[int, int, CorruptRecordError], Any],
) -> Iterator[Any]:
    """The items ``records_of(view, base, offsets, lengths)`` makes of each
    scan's records (data offsets and lengths in ``view``, which lies at shard
    offset ``base``), a few records at a time. With ``step_over`` a record
    whose data checksum fails comes as ``damaged(start, end, error)``."""
    count = 0

    def scan(view: memoryview, base: int) -> Framing[Any]:
        nonlocal count
        found = scan_tfrecords(view, verify, data_checks=False)
        records: Iterable[Any]
        if verify:
            records = _checked(records_of, view, base, found.offsets, found.lengths, url, count,
                               step_over, damaged)  # fmt: skip
        else:
            records = _made_in_slices(records_of, view, base, found.offsets, found.lengths)
        count += len(found.offsets)
        # A length checksum that fails ends the scan: where its record ends is not known.
        problem = _checksum_problem(found.error, url, base, count)
        return Framing(records, found.consumed, found.needed, False, problem)

    return framed(chunks, url, scan)


# Records made into Python objects at once, at most: a scan's records all
# made first would be alive together for as long as the consumer takes them
# (a 4 MiB read holds 4,000 examples of 1 KB), long enough for the garbage
# collector's young generations to pass them on to the oldest, whose
# collections walk every object of the process (torch's included: about
# 80 ms each). 256 at a time, they are gone before that.
_MADE_AT_ONCE = 256


def _made_in_slices(
    records_of: Callable[[memoryview, int, Any, Any], list[Any]],
    view: memoryview, base: int, offsets: Any, lengths: Any,
) -> Iterable[Any]:  # fmt: skip
    """``records_of`` over the scan's records, ``_MADE_AT_ONCE`` at a time, as
    they are taken."""
    if len(offsets) <= _MADE_AT_ONCE:
        return records_of(view, base, offsets, lengths)
    return itertools.chain.from_iterable(
        records_of(view, base, offsets[i : i + _MADE_AT_ONCE], lengths[i : i + _MADE_AT_ONCE])
        for i in range(0, len(offsets), _MADE_AT_ONCE)
    )


# Bytes of records whose data checksums are checked at once, right before
# they are made into Python objects: small enough that the data is still in
# the core's cache when it is copied out, so it comes from memory once for
# both (110 KB records: 3.7 GB/s checked and copied record by record, 3.3
# GB/s with a 4 MiB read's records all checked first).
_CHECKED_AT_ONCE = 256 << 10


def _checked(
    records_of: Callable[[memoryview, int, Any, Any], list[Any]],
    view: memoryview, base: int, offsets: Any, lengths: Any, url: str, count: int,
    step_over: bool, damaged: Callable[[int, int, CorruptRecordError], Any],
) -> Iterator[Any]:  # fmt: skip
    """``records_of`` over a scan's records (found with the lengths' checksums
    checked, ``count`` records of the shard before them), their data
    checksums checked a few at a time as they are taken. A record whose
    checksum fails raises its :class:`CorruptRecordError` after the records
    before it, or with ``step_over`` comes as ``damaged(start, end, error)``
    in its place, and the records after it follow."""
    total, first = len(offsets), 0
    while first < total:
        last, bad = check_tfrecords(view, offsets, lengths, first, _MADE_AT_ONCE,
                                    _CHECKED_AT_ONCE)  # fmt: skip
        if bad > first:
            yield from records_of(view, base, offsets[first:bad], lengths[first:bad])
        if bad == last:
            first = last
            continue
        start = base + offsets[bad] - _HEADER
        problem = CorruptRecordError("data checksum mismatch", url, start, count + bad)
        if not step_over:
            raise problem
        yield damaged(start, base + offsets[bad] + lengths[bad] + 4, problem)
        first = bad + 1


def resync_tfrecord(reader: Reader, url: str, error: DecodeError) -> int | None:
    """Where a scan goes on after a record whose length checksum fails: the
    first offset after it where a whole record's length and data checksums
    both hold. The damaged length cannot say where its record ends, so the
    search goes byte by byte (a place is ruled out by its length checksum,
    or a length past the shard's end). None after a cut, after a data
    checksum (the scan steps over that record itself), or where no record
    follows.

    A record whose data holds a TFRecord of its own can pass for the next
    record there."""
    if isinstance(error, TruncatedShardError) or "length checksum" not in str(error):
        return None
    size, _ = reader.describe(url)
    position = error.offset + 1  # the shard offset of pending[0]
    pending = bytearray()
    stream = reader.stream([ByteRange(url, position)])
    try:
        for chunk in stream:
            pending += chunk.data
            candidate = 0
            with memoryview(pending) as view:  # released before pending grows
                while candidate + _HEADER <= len(view):
                    header = scan_tfrecords(view[candidate : candidate + _HEADER])
                    length = int.from_bytes(view[candidate : candidate + 8], "little")
                    end = candidate + _HEADER + length + 4
                    if header.error is not None or position + end > size:
                        candidate += 1
                        continue
                    if end > len(view):
                        break  # a header that holds: its record's data decides
                    whole = scan_tfrecords(view[candidate:end])
                    if whole.error is None and len(whole.offsets) == 1:
                        return position + candidate
                    candidate += 1
            del pending[:candidate]
            position += candidate
    finally:
        stream.close()  # type: ignore[attr-defined]
    return None


def _checksum_problem(
    error: FrameError | None, url: str, base: int, count: int
) -> CorruptRecordError | None:
    """The error to raise for a checksum mismatch a scan at shard offset ``base``
    stopped at, where ``count`` records of the shard come before it."""
    if error is None:
        return None
    what = "length" if error.kind == "length_crc" else "data"
    return CorruptRecordError(f"{what} checksum mismatch", url, base + error.offset, count)


def _collecting(
    collector: RecordColumns, url: str, verify: bool, max_batch_bytes: int
) -> Callable[[Any, int, bool], tuple[Collected, Exception | None]]:
    """The scan :func:`batched` calls: TFRecords framed and checked into
    ``collector``, with the error to raise after them."""
    count = 0  # records before the current scan, for record indices

    def scan(data: Any, base: int, final: bool) -> tuple[Collected, Exception | None]:
        nonlocal count
        found = collector.tfrecord(data, verify, max_batch_bytes, base)
        count += found.records
        problem: Exception | None = _checksum_problem(found.error, url, base, count)
        if problem is None and found.full and not collector.rows:
            problem = too_large(url, base, max_batch_bytes)
        return found, problem

    return scan


def columns_tfrecord(
    chunks: Iterable[Chunk],
    url: str,
    verify: bool = True,
    *,
    max_batch_bytes: int = MAX_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """The records :func:`decode_tfrecord` yields, as record batches of one
    binary column ``record`` (of at most ``max_batch_bytes``), in order; the
    same errors."""
    pyarrow = arrow()
    collector = RecordColumns("record")
    scan = _collecting(collector, url, verify, max_batch_bytes)

    def take() -> Any:
        batch = collector.take()
        return None if batch is None else pyarrow.record_batch(batch)

    return batched(chunks, url, scan, take)


def columns_examples(
    chunks: Iterable[Chunk],
    url: str,
    verify: bool = True,
    *,
    parts: bool = False,
    max_batch_bytes: int = MAX_BATCH_BYTES,
) -> Iterator[Any]:
    """The examples that :func:`decode_tfrecord` parses, as record batches of a
    list column per feature, made natively from the records where they lie
    (each value copied once): typed as ``RecordBatch.from_pylist`` types the
    parsed examples, except that a feature keeps its kind's type where all its
    lists are empty (from_pylist: ``list<null>``), and that a feature the
    first record lacks is a column too. With ``parts``, :class:`ExamplePart`
    instead, gathered into a batch once the dataset has cut it. A record that
    is not an example comes as its DecodeError in its place; framing errors as
    :func:`columns_tfrecord` raises them."""
    collector = RecordColumns("record")
    scan = _collecting(collector, url, verify, max_batch_bytes)

    def take() -> list[Any]:
        rows = collector.detach_examples()
        if rows is None:
            return []
        items: list[Any] = []
        start = 0
        for row, offset, why in rows.check():
            if row > start:
                items.append(ExamplePart([(rows, start, row - start, url)]))
            items.append(DecodeError(f"not a tf.train.Example: {why}", url, offset))
            start = row + 1
        if start < rows.num_rows:
            items.append(ExamplePart([(rows, start, rows.num_rows - start, url)]))
        if not parts:
            return [item.batch() if isinstance(item, ExamplePart) else item for item in items]
        return items

    return batched(chunks, url, scan, take)


# ---- tf.train.Example (protobuf wire format) ------------------------------------

_T = TypeVar("_T")
_INT64 = np.dtype(np.int64)
_FLOAT32 = np.dtype("<f4")  # the wire's float32s, copied as they are


def parse_example(record: bytes | memoryview) -> dict[str, np.ndarray | list[bytes]]:
    """A serialized ``tf.train.Example`` as ``{name: values}``: int64 and float
    features as numpy arrays, bytes features as lists of bytes (a name given
    twice keeps its last value). Parsed in native code, without TensorFlow or
    protobuf. Raises :class:`DecodeError` (with offset 0 and no URL) for
    malformed bytes, a field of the wrong wire type included."""
    return _parsed(record, "<record>", 0)


def _copies(url: str, view: memoryview, base: int, offsets: Any, lengths: Any) -> list[bytes]:
    return [bytes(view[o : o + n]) for o, n in zip(offsets, lengths, strict=True)]


# Records up to this size are held encoded in a shuffle window; larger ones
# are parsed as they are read. A window of small examples is thousands of
# dicts of lists for the garbage collector to scan at each full collection
# (1 KB examples shuffled: 115k samples/s parsed as read, 380k held encoded);
# a large example costs a second copy of its bytes when parsed later from
# memory the window has left the caches for (110 KB: 81k as read, 50k held).
_ENCODED_MAX = 16 << 10


def _held(record: bytes | memoryview, url: str, offset: int) -> Any:
    """An example as a shuffle window holds it: (header offset, a copy of the
    record) up to ``_ENCODED_MAX`` bytes, else parsed. Raises DecodeError."""
    if len(record) <= _ENCODED_MAX:
        return offset, bytes(record)
    return _parsed(record, url, offset)


def _encoded_examples(url: str, view: memoryview, base: int, offsets: Any, lengths: Any
                      ) -> list[Any]:  # fmt: skip
    """Each record as :func:`_held` holds it, or its DecodeError in its place."""
    return [_or_error(_held, view[o : o + n], url, base + o - _HEADER)
            for o, n in zip(offsets, lengths, strict=True)]  # fmt: skip


def _problem_only(start: int, end: int, problem: CorruptRecordError) -> CorruptRecordError:
    return problem


def _parsed_or_error(record: memoryview, url: str, offset: int) -> dict[str, Any] | DecodeError:
    return _or_error(_parsed, record, url, offset)


def _or_error(make: Callable[[memoryview, str, int], _T], record: memoryview, url: str,
              offset: int) -> _T | DecodeError:  # fmt: skip
    """What ``make`` makes of a record, or the DecodeError it raises, in its place."""
    try:
        return make(record, url, offset)
    except DecodeError as error:
        return error


def _parsed(record: bytes | memoryview, url: str, offset: int) -> dict[str, Any]:
    try:
        result: dict[str, Any] = _parse_example(record, np.frombuffer, _INT64, _FLOAT32)
    except ValueError as error:  # UnicodeDecodeError too: a name that is not UTF-8
        raise DecodeError(f"not a tf.train.Example: {error}", url, offset) from None
    return result


class ExamplePart(Part):
    """Rows of tf.train.Example records, each checked to be one: spans of
    (records, first row, rows, shard URL)."""

    __slots__ = ()

    def batch(self) -> Any:
        """The rows as one ``pyarrow.RecordBatch``, a list column per feature
        (each value copied once); where the features cannot be typed natively
        (a feature of two kinds and the like), as ``batch_of`` types the
        parsed records."""
        pa = arrow()
        gathered = gather_examples([span[:3] for span in self.spans])
        if gathered is not None:
            return pa.record_batch(gathered)
        return batch_of([parse_example(record) for records, first, rows, _ in self.spans
                         for _, record in records.records(first, rows)])  # fmt: skip

    @classmethod
    def building(cls, rows: int) -> PartBuilder | None:
        return _ExampleBuilder(rows)


class _ExampleBuilder(PartBuilder):
    """Examples parsed into the batch's columns as they are added, while
    their bytes are in the CPU's caches; nothing of a part is kept once it
    is added, so its read buffers go back to the reader. Where a part's
    features cannot be typed natively (a feature of two kinds and the like),
    the batch is made from then on as :meth:`ExamplePart.batch` makes it:
    the rows built so far as they parse, and the rest parsed as they come."""

    kind = ExamplePart

    def __init__(self, rows: int) -> None:
        self._batch = ExampleBatch(rows)
        self._parsed: list[dict[str, Any]] | None = None  # once untyped

    @property
    def num_rows(self) -> int:
        return self._batch.num_rows + (len(self._parsed) if self._parsed is not None else 0)

    def add(self, part: Part) -> Part | None:
        for records, first, rows, _ in part.spans:
            if self._parsed is None:
                if self._batch.add(records, first, rows):
                    continue
                self._parsed = _as_parsed(arrow().record_batch(self._batch.take()))
            self._parsed += [parse_example(record) for _, record in records.records(first, rows)]
        return None

    def take(self) -> Any:
        if self._parsed is None:
            return arrow().record_batch(self._batch.take())
        parsed, self._parsed = self._parsed, None
        return batch_of(parsed)


def _as_parsed(batch: Any) -> list[dict[str, Any]]:
    """The rows of a batch of examples made natively, as :func:`parse_example`
    gives them: bytes features as lists of bytes, int64 and float features
    as numpy arrays (the floats back in float32, which they were), a feature
    a row lacks left out; in column order, which is the order features were
    first met in, so that :func:`batch_of` names them in the same order."""
    pa = arrow()
    rows: list[dict[str, Any]] = [{} for _ in range(batch.num_rows)]
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        item = column.type.value_type
        dtype = (None if pa.types.is_binary(item)
                 else np.int64 if pa.types.is_integer(item) else np.float32)  # fmt: skip
        for row, values in zip(rows, column.to_pylist(), strict=True):
            if values is not None:
                row[name] = values if dtype is None else np.array(values, dtype)
    return rows


class TFRecordFormat(RecordFormat):
    name = "tfrecord"

    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None = None,
        verify: bool = True,
        example: bool = True,
        index_placement: IndexPlacement | None = None,
    ) -> None:
        super().__init__(index_dir, index_placement)
        self.verify = verify
        self.example = example

    def options(self) -> dict[str, Any]:
        return {"verify": self.verify, "example": self.example}

    def maps_cached(self, columnar: bool, sample_bytes: float | None) -> bool:
        # Batches of large records: mapped, each record's copy into the batch's
        # column is the only one (110 KB records in .batches(256): 51k/s mapped
        # against 42-43k read in a process's first epoch, 61k against 49-51k
        # in its second). Samples are read: the Example parse after the
        # checksum gains from bytes a read left in the CPU's caches (80k
        # samples/s read, 67k mapped).
        return columnar and sample_bytes is not None and sample_bytes >= MAPPED_SAMPLE_BYTES

    def locator(self) -> Locator:
        if self.verify:
            return Locator(
                self.name, functools.partial(locate_tfrecords, step_over=True), resync_tfrecord
            )
        # A scan that skipped checksums is kept under its own name: it serves
        # unverified reads, never a dataset that asked for verification.
        unverified = functools.partial(locate_tfrecords, verify=False)
        return Locator(f"{self.name}/unverified", unverified, reuses=(self.name,))

    def own(self, record: Any, url: str, offset: int) -> Any:
        return _parsed(record, url, offset) if self.example else bytes(record)

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        """Records (or parsed examples); a record whose checksum fails, or that
        is not an example, comes as its DecodeError in its place. Each scan's
        records are owned in one pass over them (no per-record generator
        steps, tuples or frames of Python code between them)."""
        url = layout.url
        owned = self._examples if self.example else _copies
        return _framed_tfrecords(self._decompressed(chunks, layout), url, self.verify, True,
                                 functools.partial(owned, url), _problem_only)  # fmt: skip

    @property
    def encodes(self) -> bool:
        return self.example  # records themselves are held as they are

    def encoded(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        """Small examples as (header offset, a copy of the record), parsed by
        :meth:`finish`; large ones parsed (see ``_ENCODED_MAX``)."""
        url = layout.url
        return _framed_tfrecords(self._decompressed(chunks, layout), url, self.verify, True,
                                 functools.partial(_encoded_examples, url),
                                 _problem_only)  # fmt: skip

    def hold(self, record: Any, url: str, offset: int) -> Any:
        return _held(record, url, offset) if self.example else self.own(record, url, offset)

    def finish(self, encoded: Any, url: str) -> Any:
        if not isinstance(encoded, tuple):
            return encoded  # parsed as read
        offset, record = encoded
        return _parsed(record, url, offset)

    @staticmethod
    def _examples(url: str, view: memoryview, base: int, offsets: Any, lengths: Any
                  ) -> list[Any]:  # fmt: skip
        try:
            return [_parse_example(view[o : o + n], np.frombuffer, _INT64, _FLOAT32)
                    for o, n in zip(offsets, lengths, strict=True)]  # fmt: skip
        except ValueError:  # one is not an example: it alone comes as its error
            return [_parsed_or_error(view[o : o + n], url, base + o - _HEADER)
                    for o, n in zip(offsets, lengths, strict=True)]  # fmt: skip

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        decompressed = self._decompressed(chunks, layout)
        if self.example:
            return columns_examples(decompressed, layout.url, self.verify)
        return columns_tfrecord(decompressed, layout.url, self.verify)

    def parts(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        if self.example:
            return columns_examples(self._decompressed(chunks, layout), layout.url, self.verify,
                                    parts=True)  # fmt: skip
        return self.batches(chunks, layout)


# ---- writing ------------------------------------------------------------------------


_OWN_PIECE = 256  # bytes of a value that is written as it is rather than copied


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class TFRecordWriter(RecordWriter):
    """Writes TFRecord records (length, data and their masked CRC-32C)."""

    format = "tfrecord"

    def write(self, *parts: Buffer) -> None:
        """Write one record whose data is ``parts`` one after another (so that
        a large payload is never copied to join it to its head)."""
        write, start = self.file.write, self.position
        size = crc = 0
        for part in parts:
            size += memoryview(part).nbytes
            crc = crc32c(part, crc)
        length = size.to_bytes(8, "little")
        write(length + _masked(crc32c(length)).to_bytes(4, "little"))
        for part in parts:
            write(part)
        write(_masked(crc).to_bytes(4, "little"))
        self.position += _HEADER + size + 4
        self._noted(start)


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]  # most tags and lengths


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    value &= (1 << 64) - 1  # negative int64s as ten-byte two's complement, as protobuf does
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field_head(number: int, length: int) -> bytes:
    """Tag and length of a length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(length)


def _field(number: int, payload: bytes) -> bytes:
    return _field_head(number, len(payload)) + payload


def example_parts(features: Mapping[str, Buffer | int | float]) -> list[Buffer]:
    """A serialized ``tf.train.Example`` of ``features`` as pieces to write one
    after another (see :meth:`TFRecordWriter.write`): a bytes-like value is a
    ``bytes_list`` of one (from 256 bytes on a piece of its own, never copied),
    an int an ``int64_list`` of one, a float a ``float_list`` of one."""
    parts: list[Buffer] = []
    head = bytearray()  # encoded since the last piece of its own
    for name, value in features.items():
        # Features.feature is map<string, Feature>: entries {1: name, 2: Feature}.
        key = _field(1, name.encode())
        if isinstance(value, (int, float)):
            numbers = _varint(value) if isinstance(value, int) else struct.pack("<f", value)
            feature = _field(3 if isinstance(value, int) else 2, _field(1, numbers))
            head += _field(1, key + _field(2, feature))
            continue
        size = memoryview(value).nbytes
        values_head = _field_head(1, size)  # BytesList.value
        feature_head = _field_head(1, len(values_head) + size) + values_head  # Feature.bytes_list
        entry_head = key + _field_head(2, len(feature_head) + size) + feature_head
        head += _field_head(1, len(entry_head) + size) + entry_head
        if size < _OWN_PIECE:
            head += value
        else:
            parts += [bytes(head), value]
            head.clear()
    if head or not parts:
        parts.append(bytes(head))
    length = sum(memoryview(part).nbytes for part in parts)
    return [_field_head(1, length) + bytes(parts[0]), *parts[1:]]  # Example.features
