"""Columnar decoders: a shard's chunks in, ``pyarrow.RecordBatch`` objects out.

The same records as :func:`decode_webdataset`, :func:`decode_tfrecord` and
:func:`decode_lines`, gathered by native code (without the GIL) into Arrow's
binary layout: each record's bytes are copied once, into one data buffer per
column, and the batch reaches pyarrow through the Arrow C data interface, so
Python makes one object per batch instead of one per sample. A batch holds the
records that end in one chunk; a record cut by a chunk boundary is completed in
a carry buffer first (that record alone is copied twice).

pyarrow is imported on first use, so that importing the formats stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastio._errors import CorruptRecordError, DecodeError, TruncatedShardError
from fastio._native import RecordColumns, TarColumns, scan_tar
from fastio.formats._tfrecord import _checksum_problem
from fastio.formats._webdataset import sample_key

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    from fastio._native import FrameError
    from fastio.reader._ranges import Chunk

__all__ = ["columns_lines", "columns_tfrecord", "columns_webdataset"]

# Arrow's binary columns count bytes with int32 offsets: a batch stops short of this.
_MAX_BATCH_BYTES = (1 << 31) - 1
# Extensions keep their columns across a shard's batches (missing ones are null),
# so that batches share a schema; a shard with more distinct extensions than
# this starts afresh at its next batch, which then has only its own.
_MAX_STABLE_COLUMNS = 64

# scan(data, base, final) -> (consumed, done, error, needed, full): collects the
# complete records at the start of `data` (at stream offset `base`; `final`:
# nothing follows) and says where the first record not collected starts,
# whether the format's end marker was seen, an error to raise after the records
# before it, how many bytes from `consumed` on the next record needs as far as
# known, and whether the batch is full (take it, then scan on from `consumed`).
# take() -> the records collected so far as a batch, or None.
Scan = Callable[[Any, int, bool], "tuple[int, bool, Exception | None, int, bool]"]
Take = Callable[[], Any]


def _arrow() -> Any:
    import pyarrow  # type: ignore[import-untyped,unused-ignore]

    return pyarrow


def _taken(take: Take) -> Iterator[pa.RecordBatch]:
    batch = take()
    if batch is not None:
        yield batch


def _batches(chunks: Iterable[Chunk], url: str, scan: Scan, take: Take) -> Iterator[pa.RecordBatch]:
    """Batches of one shard's chunks, in order: one per chunk (more when full).

    As :func:`fastio.formats._reassemble.framed` does for single records, a
    record cut by a chunk boundary is completed in a carry buffer, gathering
    the bytes the scan says it needs. A scan may look past the records it
    collects (a tar sample ends where the next member's header shows another
    key): what it looked at past them goes back to the chunk, so that the carry
    empties and scanning returns to the chunk itself. The collector keeps the
    buffers it collected from until the batch is taken, so a carry it scanned
    is replaced, never changed.
    """
    carry = bytearray()
    carry_base = 0  # stream offset of carry[0]
    offset: int | None = None  # stream offset of the current chunk's first byte
    needed = 0  # bytes the record at the start of carry needs, as far as known
    done = False
    for chunk in chunks:
        view = chunk.data
        if offset is None:  # a stream may start mid-file (a range of samples)
            offset = carry_base = chunk.offset
        position = 0  # in view
        borrowed = 0  # bytes at the end of carry that came from this chunk
        while not done:
            if carry:
                if len(carry) < needed:
                    if position == len(view):
                        break  # the rest of the record comes with the next chunk
                    more = min(len(view) - position, needed - len(carry))
                    carry += view[position : position + more]
                    position += more
                    borrowed += more
                    continue
                consumed, done, error, needed, full = scan(carry, carry_base, False)
                if error is not None:
                    yield from _taken(take)
                    raise error
                if full:
                    yield from _taken(take)
                    needed = 0  # scan the rest of the carry again at once
                elif not consumed and not done:
                    if needed <= len(carry):
                        raise TruncatedShardError(
                            "record does not frame as its header says", url, carry_base
                        )
                    continue
                back = min(len(carry) - consumed, borrowed)
                position -= back
                borrowed -= back
                carry = carry[consumed : len(carry) - back]
                carry_base += consumed
            elif position < len(view):
                base = offset + position
                consumed, done, error, needed, full = scan(view[position:], base, False)
                if error is not None:
                    yield from _taken(take)
                    raise error
                position += consumed
                if full:
                    yield from _taken(take)
                    continue
                if done or position == len(view):
                    continue
                if not consumed and needed <= len(view) - position:
                    raise TruncatedShardError("record does not frame as its header says", url, base)
                carry = bytearray(view[position:])
                carry_base = offset + position
                borrowed = len(view) - position
                position = len(view)
            else:
                break
        offset += len(view)
        yield from _taken(take)
    while carry and not done:
        consumed, done, error, _, full = scan(carry, carry_base, True)
        if error is None and not full and not done and consumed < len(carry):
            present = len(carry) - consumed
            error = TruncatedShardError(
                f"shard ends inside a record ({present} bytes of it present)",
                url,
                carry_base + consumed,
            )
        yield from _taken(take)
        if error is not None:
            raise error
        carry = carry[consumed:]
        carry_base += consumed


def _too_large(url: str, base: int) -> DecodeError:
    return DecodeError(
        f"a record of more than {_MAX_BATCH_BYTES} bytes does not fit an Arrow binary column",
        url,
        base,
    )


# ---- WebDataset tar -------------------------------------------------------------


def columns_webdataset(chunks: Iterable[Chunk], url: str) -> Iterator[pa.RecordBatch]:
    """The samples :func:`decode_webdataset` yields, as record batches in order.

    Columns: ``__key__`` (string), ``__url__`` (dictionary-encoded string) and
    one binary column per extension, sorted by name; a sample without an
    extension that the shard had so far has a null there. Errors are those of
    :func:`decode_webdataset`, with two differences: a sample is complete once
    the next member's header shows another key, so a shard cut inside the
    next sample's first member delivers that sample before
    :class:`TruncatedShardError`; and keys and extensions must be UTF-8 (Arrow
    strings cannot hold other bytes), else :class:`DecodeError`.
    """
    arrow = _arrow()
    collector = TarColumns()
    members = 0  # tar members before the current scan, for record indices

    def scan(data: Any, base: int, final: bool) -> tuple[int, bool, Exception | None, int, bool]:
        nonlocal members
        if not collector.rows and collector.columns > _MAX_STABLE_COLUMNS:
            collector.reset()
        found = collector.scan(data, final, _MAX_BATCH_BYTES)
        problem: Exception | None = None
        if found.error is not None:
            problem = _tar_problem(found.error, data, url, base, members)
        elif found.full and not collector.rows:
            problem = _too_large(url, base)
        members += found.records
        return found.consumed, found.at_end, problem, found.needed, found.full

    def take() -> Any:
        batch = collector.take(url)
        return None if batch is None else arrow.record_batch(batch)

    return _batches(chunks, url, scan, take)


def _tar_problem(error: FrameError, data: Any, url: str, base: int, members: int) -> Exception:
    kind, offset = error.kind, error.offset
    if kind == "truncated":
        present = len(data) - offset
        message = f"shard ends inside a record ({present} bytes of it present)"
        return TruncatedShardError(message, url, base + offset)
    if kind == "repeated_extension":
        name = scan_tar(memoryview(data)[offset:]).members[0].name
        key, extension = sample_key(name) or (name, "")
        message = f"{name!r} repeats extension {extension!r} of sample {key!r}"
        return DecodeError(message, url, base + offset)
    if kind == "bad_name":
        message = "a member's key or extension is not UTF-8 (Arrow strings cannot hold it)"
        return DecodeError(message, url, base + offset, members + error.index)
    index = members + error.index
    return CorruptRecordError(f"damaged tar header ({kind})", url, base + offset, index)


# ---- TFRecord -----------------------------------------------------------------------


def columns_tfrecord(
    chunks: Iterable[Chunk], url: str, verify: bool = True
) -> Iterator[pa.RecordBatch]:
    """The records :func:`decode_tfrecord` yields, as record batches of one
    binary column ``record``, in order; the same errors."""
    arrow = _arrow()
    collector = RecordColumns("record")
    count = 0  # records before the current scan, for record indices

    def scan(data: Any, base: int, final: bool) -> tuple[int, bool, Exception | None, int, bool]:
        nonlocal count
        found = collector.tfrecord(data, verify, _MAX_BATCH_BYTES)
        count += found.records
        problem: Exception | None = _checksum_problem(found.error, url, base, count)
        if problem is None and found.full and not collector.rows:
            problem = _too_large(url, base)
        return found.consumed, False, problem, found.needed, found.full

    def take() -> Any:
        batch = collector.take()
        return None if batch is None else arrow.record_batch(batch)

    return _batches(chunks, url, scan, take)


# ---- lines ----------------------------------------------------------------------------


def columns_lines(chunks: Iterable[Chunk], url: str) -> Iterator[pa.RecordBatch]:
    """The lines :func:`decode_lines` yields (without their newlines; a last line
    without one is a line too), as record batches of one binary column
    ``line``, in order. A line cut by chunk boundaries is joined from a carry
    buffer and the chunk where it ends, in that chunk's batch."""
    arrow = _arrow()
    collector = RecordColumns("line")
    carry = bytearray()
    carry_base = 0  # stream offset of the line that carry begins
    offset: int | None = None

    def take() -> Any:
        batch = collector.take()
        return None if batch is None else arrow.record_batch(batch)

    for chunk in chunks:
        view = chunk.data
        if offset is None:
            offset = carry_base = chunk.offset
        position = 0
        while True:
            found = collector.lines(view[position:], carry, False, _MAX_BATCH_BYTES)
            if found.rows and carry:
                carry = bytearray()  # the first line took it, and the collector keeps it
            position += found.consumed
            if not found.full:
                break
            if not collector.rows:
                raise _too_large(url, carry_base if carry else offset + position)
            yield from _taken(take)
        if position < len(view):
            if not carry:
                carry_base = offset + position
            carry += view[position:]
        offset += len(view)
        yield from _taken(take)
    if carry:  # a last line without a newline
        if collector.lines(b"", carry, True, _MAX_BATCH_BYTES).full:
            raise _too_large(url, carry_base)
        yield from _taken(take)
