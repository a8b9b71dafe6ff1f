"""From a shard's chunks to framed records or Arrow batches, copying only what a
chunk boundary cuts.

Every format scans the bytes the reader filled in place (natively, without the
GIL); the two drivers here take care of chunk boundaries for all of them.
:func:`framed` yields single records, views of the chunks; :func:`batched`
yields ``pyarrow.RecordBatch`` objects that native collectors gathered (each
record's bytes copied once, into one data buffer per column; the batch reaches
pyarrow through the Arrow C data interface, so Python makes one object per
batch instead of one per sample).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fastio._errors import CorruptRecordError, DecodeError, TruncatedShardError, import_extra
from fastio.spec._records import record

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    from fastio._native import Collected
    from fastio.reader._ranges import Chunk

T = TypeVar("T")

MAX_BATCH_BYTES = (1 << 31) - 1
"""Arrow's binary columns count bytes with int32 offsets: a batch stops short of this."""


@record(frozen=True)
class Framing(Generic[T]):
    """What a scan found at the start of a view: the complete ``records``;
    where the next scan starts (``consumed``); how many bytes from there the
    next record needs, as far as its header tells; whether the format's end
    marker was seen (``done``); and an error to raise after the records."""

    records: Iterable[T]
    consumed: int
    needed: int = 0
    done: bool = False
    error: Exception | None = None


def framed(
    chunks: Iterable[Chunk],
    url: str,
    scan: Callable[[memoryview, int], Framing[T]],
    *,
    require_end: bool = False,
) -> Iterator[T]:
    """Records of one shard's chunks, in order; ``scan(view, base)`` frames the
    records at the start of ``view``, which lies at byte ``base`` of the shard.

    Records inside a chunk are views of it. A record cut by a chunk boundary is
    completed in a carry buffer, gathering the bytes the scan says it needs
    (that record alone is copied). Bytes left over at the end of the shard raise
    :class:`TruncatedShardError` (once ``scan`` has seen them all); with
    ``require_end`` so does a shard that ends, however cleanly, before its
    format's end marker (``lost`` 0: every record there was framed). An error
    the chunks themselves raise (a compressed stream's) passes through, with
    ``lost`` at least 1 where a record was cut off by it.
    """
    carry = bytearray()
    current_range = -1
    carry_base: int | None = None  # shard offset of carry[0] (the first chunk's offset at first)
    needed = 0  # bytes the record at the start of carry needs, as far as known
    done = False
    end = 0  # where the end marker is, once seen
    stream = iter(chunks)
    while True:
        try:
            chunk = next(stream)
        except StopIteration:
            break
        except DecodeError as error:
            if carry and not done:  # the record in progress is lost with the stream
                scan(memoryview(bytes(carry)), carry_base or 0)  # (see below)
                error.lost = max(error.lost, 1)
            raise
        view = chunk.data
        if done:
            _check_past_end(view, url, end)
            continue
        if carry_base is None or (chunk.range != current_range and not carry):
            # A stream may start mid-file, and skip bytes between ranges (runs
            # of samples): offsets follow the file.
            carry_base = chunk.offset
        current_range = chunk.range
        while not done:
            if carry and len(carry) < needed:
                if not len(view):
                    break  # the rest of the record comes with the next chunk
                take = min(len(view), needed - len(carry))
                carry += view[:take]
                view = view[take:]
                continue
            if carry:
                # Complete as far as known (scanned at once, even when this chunk
                # ends exactly here); a header may reveal that more is needed.
                whole = memoryview(bytes(carry))
                carry.clear()
                base = carry_base
            elif len(view):
                whole, view, base = view, view[len(view) :], carry_base
            else:
                break
            found = scan(whole, base)
            yield from found.records
            if found.error is not None:
                raise found.error
            done, needed = found.done, found.needed
            if done:
                end = base + found.consumed
                _check_past_end(whole[found.consumed :], url, end)
            if not done and found.consumed < len(whole):
                if not found.consumed and needed <= len(whole):
                    raise TruncatedShardError("record does not frame as its header says", url, base)
                carry += whole[found.consumed :]
            carry_base = base + found.consumed
    if done:
        return
    if carry and carry_base is not None:
        # One more look at what arrived since the last scan, so that the scan
        # has seen all there is of the record the shard ends in (it cannot
        # complete: fewer bytes are there than it needs).
        found = scan(memoryview(bytes(carry)), carry_base)
        if found.error is not None:
            raise found.error
        raise TruncatedShardError(
            f"shard ends inside a record ({len(carry)} bytes of it present)", url, carry_base
        )
    if require_end:
        raise TruncatedShardError(
            "shard ends without its end marker (cut short between records?)",
            url, carry_base or 0, lost=0,
        )  # fmt: skip


def _check_past_end(data: memoryview | bytearray, url: str, end: int) -> None:
    """What follows a format's end marker (at ``end``) is its padding: zeros
    to the end of the shard. Anything else means the marker is damage inside
    the shard (a block of zeros written over a record's header), not its end:
    raises :class:`CorruptRecordError` there, so that the records after it are
    not dropped without a word."""
    if len(data) and (data[0] or bytes(data) != bytes(len(data))):
        raise CorruptRecordError(
            "zeros where a record's header belongs: the end marker is followed by data, "
            "so it is damage inside the shard, not its end", url, end,
        )  # fmt: skip


# scan(data, base, final) collects the complete records at the start of `data`
# (at shard offset `base`; `final`: nothing follows) and answers what it took,
# with an error to raise after the records before it. take() -> the records
# collected so far as a batch, or None, or a list of batches and errors (each in
# the place of a record).
CollectScan = Callable[[Any, int, bool], "tuple[Collected, Exception | None]"]
Take = Callable[[], Any]


def arrow() -> Any:
    """pyarrow, imported on first use so that importing the formats stays light.
    Raises :class:`~fastio.MissingExtraError` without it (the ``arrow`` extra)."""
    return import_extra("pyarrow", "columnar batches (Arrow record batches)")


def too_large(url: str, base: int, max_bytes: int) -> DecodeError:
    return DecodeError(
        f"a record of more than {max_bytes} bytes does not fit an Arrow binary column", url, base
    )


def _taken(take: Take) -> Iterator[pa.RecordBatch]:
    batch = take()
    if type(batch) is list:  # batches, and errors in the places of records
        yield from batch
    elif batch is not None:
        yield batch


def batched(
    chunks: Iterable[Chunk], url: str, scan: CollectScan, take: Take, *,
    require_end: bool = False, range_ends: bool = False,
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """Batches of one shard's chunks, in order: one per chunk (more when full).
    With ``require_end``, a shard that ends before its format's end marker
    raises :class:`TruncatedShardError` after its last batch. With
    ``range_ends``, the end of each range read is a record's end (ranges of
    whole samples, as an index gives them): the scan of a range's last chunk
    completes the record there rather than look for the next one's start.

    As :func:`framed` does for single records, a record cut by a chunk boundary
    is completed in a carry buffer, gathering the bytes the scan says it needs.
    A scan may look past the records it collects (a tar sample ends where the
    next member's header shows another key): what it looked at past them goes
    back to the chunk, so that the carry empties and scanning returns to the
    chunk itself. The collector keeps the buffers it collected from until the
    batch is taken, so a carry it scanned is replaced, never changed.
    """
    carry = bytearray()
    carry_base = 0  # stream offset of carry[0]
    offset: int | None = None  # stream offset of the current chunk's first byte
    needed = 0  # bytes the record at the start of carry needs, as far as known
    done = False
    end: int | None = None  # where the end marker is, once seen
    stream = iter(chunks)
    while True:
        try:
            chunk = next(stream)
        except StopIteration:
            break
        except DecodeError as failure:
            if carry and not done:  # what is complete of the carry comes first
                found, _ = scan(carry, carry_base, True)
                failure.lost = max(failure.lost, int(found.consumed < len(carry)))
            yield from _taken(take)
            raise
        view = chunk.data
        ends = range_ends and chunk.end_of_range
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
                found, error = scan(carry, carry_base, ends and position == len(view))
                if error is not None:
                    yield from _taken(take)
                    raise error
                consumed, done, needed = found.consumed, found.at_end, found.needed
                if found.full:
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
                found, error = scan(view[position:], base, ends)
                if error is not None:
                    yield from _taken(take)
                    raise error
                consumed, done, needed = found.consumed, found.at_end, found.needed
                position += consumed
                if found.full:
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
        # What followed the end marker in this chunk, and where it is (see framed).
        past: tuple[Any, int] | None = None
        if done and end is None:  # met in this chunk, or in the carry
            end = carry_base if carry else offset + position
            past = bytes(carry) + bytes(view[position:]), end
        elif done and end is not None:
            past = view, end
        offset += len(view)
        yield from _taken(take)
        if past is not None:
            _check_past_end(past[0], url, past[1])
    while carry and not done:
        found, error = scan(carry, carry_base, True)
        done = found.at_end
        if error is None and not found.full and not done and found.consumed < len(carry):
            present = len(carry) - found.consumed
            error = TruncatedShardError(
                f"shard ends inside a record ({present} bytes of it present)",
                url,
                carry_base + found.consumed,
            )
        yield from _taken(take)
        if error is not None:
            raise error
        carry = carry[found.consumed :]
        carry_base += found.consumed
        if done:
            _check_past_end(carry, url, carry_base)
    if require_end and not done:
        end = carry_base if offset is None else offset
        raise TruncatedShardError(
            "shard ends without its end marker (cut short between records?)", url, end, lost=0
        )
