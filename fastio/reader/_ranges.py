"""What a reader is asked for (byte ranges grouped into shards) and what it yields (chunks)."""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

from fastio.spec._records import record

__all__ = ["ByteRange", "Chunk", "Shard", "ShardLike", "as_shard"]


@record(frozen=True, slots=True)
class ByteRange:
    """``length`` bytes of ``path`` from ``offset``; ``length=None`` reads to the end."""

    path: str
    offset: int = 0
    length: int | None = None

    def __init__(
        self, path: str | os.PathLike[str], offset: int = 0, length: int | None = None
    ) -> None:
        # Written out, checks and all: a reader's caller may make millions (see record).
        path = os.fspath(path)  # accept PathLike too
        # Integers of any kind (numpy's from an index too) as Python ints: the
        # reader's arithmetic on them, and the native engine, take those only.
        # A float or other non-integer raises TypeError here.
        offset = operator.index(offset)
        if length is not None:
            length = operator.index(length)
            if length < 0:
                raise ValueError(f"length must be >= 0 or None, not {length} ({path})")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset} ({path})")
        set_field = object.__setattr__
        set_field(self, "path", path)
        set_field(self, "offset", offset)
        set_field(self, "length", length)


@record(frozen=True, slots=True)
class Shard:
    """An ordered list of byte ranges whose bytes are delivered in order.

    ``direct`` overrides the reader's O_DIRECT setting for this shard's files
    (True, False or ``"auto"``: see :class:`fastio.ReaderSettings`).
    ``whole``: each range of a local file is read in one piece, however much
    larger than ``read_size``, while its buffer fits in half of the memory
    budget, so that it arrives as one chunk (a decoder that needs a range
    contiguous then takes that chunk as it is, instead of copying pieces
    together); larger ranges are split as usual.
    """

    ranges: tuple[ByteRange, ...]
    name: str | None = None
    direct: bool | Literal["auto"] | None = None
    whole: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranges", tuple(self.ranges))  # accept any sequence
        if not self.ranges:
            raise ValueError(f"shard {self.name or ''} has no byte ranges".replace("  ", " "))
        strays = [item for item in self.ranges if not isinstance(item, ByteRange)]
        if strays:  # said here, not as an AttributeError when a read gets to it
            raise TypeError(f"a shard's ranges are ByteRange objects, not {strays[0]!r} "
                            "(Shard.file(path) is a whole file)")  # fmt: skip

    @classmethod
    def file(
        cls, path: str | os.PathLike[str], *, direct: bool | Literal["auto"] | None = None
    ) -> Shard:
        """The whole of one file as a shard."""
        path = os.fspath(path)
        return cls((ByteRange(path),), name=path, direct=direct)


ShardLike = Shard | str | os.PathLike[str] | ByteRange | Sequence[ByteRange]


def as_shard(value: ShardLike) -> Shard:
    """A :class:`Shard` from a shard, a path (the whole file), one range or a range list."""
    if isinstance(value, Shard):
        return value
    if isinstance(value, (str, os.PathLike)):
        return Shard.file(value)
    if isinstance(value, ByteRange):
        return Shard((value,))
    if isinstance(value, Iterable):
        return Shard(tuple(value))
    raise TypeError(f"expected a Shard, a path or byte ranges, not {type(value).__name__}")


class Chunk(NamedTuple):
    """Bytes of one range, in order. ``data`` is a zero-copy view of a reader
    buffer; keep it as long as needed (the buffer is reused only once no view
    of it is alive)."""

    shard: int
    """Position of the shard in the stream's input."""
    range: int
    """Position of the range within its shard."""
    path: str
    offset: int
    """File offset of ``data[0]``."""
    data: memoryview
    end_of_range: bool
    end_of_shard: bool
