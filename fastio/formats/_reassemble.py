"""From a shard's chunks to framed records, copying only records cut by a chunk boundary."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

from fastio._errors import TruncatedShardError

if TYPE_CHECKING:
    from fastio._ranges import Chunk

T = TypeVar("T")

# scan(view, base) -> (records, consumed, done, error): the complete records at
# the start of `view`, which lies at byte `base` of the shard; `done` once the
# format's end marker is seen; an error to raise after the records before it.
Scan = Callable[[memoryview, int], "tuple[list[T], int, bool, Exception | None]"]
# extent(partial) -> how many bytes the record at the start of `partial` needs,
# as far as its headers present tell (it may grow as more headers arrive).
Extent = Callable[[bytearray, int], int]


def framed(chunks: Iterable[Chunk], url: str, scan: Scan[T], extent: Extent) -> Iterator[T]:
    """Records of one shard's chunks, in order.

    Records inside a chunk are views of it. A record cut by a chunk boundary is
    completed in a carry buffer (that record alone is copied). Bytes left over
    at the end of the shard raise :class:`TruncatedShardError`.
    """
    carry = bytearray()
    carry_base = 0  # shard offset of carry[0]
    position = 0  # shard offset of the next unconsumed byte
    done = False
    for chunk in chunks:
        view = chunk.data
        while not done:
            if carry:
                need = extent(carry, carry_base)
                if need > len(carry):
                    if not len(view):
                        break  # the rest of the record comes with the next chunk
                    take = min(len(view), need - len(carry))
                    carry += view[:take]
                    view = view[take:]
                    continue  # re-measure: a completed header may reveal more to gather
                # Complete (scanned at once, even when this chunk ends exactly here).
                whole = memoryview(bytes(carry))
                carry.clear()
                records, consumed, done, error = scan(whole, carry_base)
                yield from records
                if error is not None:
                    raise error
                if consumed != len(whole) and not done:  # an end marker is not consumed
                    raise TruncatedShardError(
                        "record does not frame as its header says", url, carry_base
                    )
                position = carry_base + consumed
                continue
            if not len(view):
                break
            records, consumed, done, error = scan(view, position)
            yield from records
            if error is not None:
                raise error
            position += consumed
            if not done and consumed < len(view):
                carry_base = position
                carry += view[consumed:]
            view = view[len(view) :]
    if carry and not done:
        raise TruncatedShardError(
            f"shard ends inside a record ({len(carry)} bytes of it present)", url, carry_base
        )
