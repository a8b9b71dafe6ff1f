"""From a shard's chunks to framed records, copying only records cut by a chunk boundary."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

from fastio._errors import TruncatedShardError

if TYPE_CHECKING:
    from fastio.reader._ranges import Chunk

T = TypeVar("T")

# scan(view, base) -> (records, consumed, done, error, needed): the complete
# records at the start of `view`, which lies at byte `base` of the shard;
# `done` once the format's end marker is seen; an error to raise after the
# records before it; and how many bytes from `consumed` on the next record
# needs, as far as its header tells (the native scanners report this).
Scan = Callable[[memoryview, int], "tuple[list[T], int, bool, Exception | None, int]"]


def framed(chunks: Iterable[Chunk], url: str, scan: Scan[T]) -> Iterator[T]:
    """Records of one shard's chunks, in order.

    Records inside a chunk are views of it. A record cut by a chunk boundary is
    completed in a carry buffer, gathering the bytes the scan says it needs
    (that record alone is copied). Bytes left over at the end of the shard raise
    :class:`TruncatedShardError`.
    """
    carry = bytearray()
    current_range = -1
    carry_base: int | None = None  # shard offset of carry[0] (the first chunk's offset at first)
    needed = 0  # bytes the record at the start of carry needs, as far as known
    done = False
    for chunk in chunks:
        view = chunk.data
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
            records, consumed, done, error, needed = scan(whole, base)
            yield from records
            if error is not None:
                raise error
            if not done and consumed < len(whole):
                if not consumed and needed <= len(whole):
                    raise TruncatedShardError("record does not frame as its header says", url, base)
                carry += whole[consumed:]
            carry_base = base + consumed
    if carry and not done and carry_base is not None:
        raise TruncatedShardError(
            f"shard ends inside a record ({len(carry)} bytes of it present)", url, carry_base
        )
