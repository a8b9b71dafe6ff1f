"""From shards to read requests ("pieces").

A piece is one read of at most ``read_size`` bytes at one offset of one file, and
the chunks it will deliver. Neighbouring small ranges of a file share a piece
(coalescing: thousands of small records cost a few reads, not thousands); a range
larger than ``read_size`` is split over several pieces. For O_DIRECT files a piece
starts and ends on 4 KiB boundaries and delivers only the bytes asked for.

Remote objects are read in larger pieces: every piece is an HTTP request, and
over a wide-area link each one costs a round trip before its first byte and
restarts TCP's climb, so pieces of 1 MiB leave a 20 ms link idle much of the
time (and short flows lose their tails to a rate limiter's drops, recovered
only by a retransmission timeout). A stream's first remote piece is small
(``read_size``, at most ``REMOTE_FIRST_BYTES``), so that the first sample does
not wait for TCP to climb to a full piece; each further one may be twice the
last, up to ``REMOTE_REQUEST_BYTES`` (or ``read_size``, if larger than 4 MiB),
whether it is part of a long range or neighbouring short ranges coalesced.
The pieces of the climb go out together, each on a connection of its own, so
the first bytes of a stream arrive as fast as TCP's first round trips carry
them.

A stream's first local piece is small too (at most ``LOCAL_FIRST_BYTES``): its
buffer is the first the reader maps, and faulting in 1 MiB of fresh memory
(a page fault and a zeroing per 4 KiB) took longer than reading it from the
page cache; the first sample waits for neither beyond what it needs.

Problems found while planning (missing file, range past the end of a file)
become failed pieces at their place in the order, so the consumer receives
every chunk before the failure and then the error.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from fastio._errors import TruncatedFileError
from fastio._native import DIRECT_ALIGNMENT
from fastio.reader._buffers import bucket_size
from fastio.reader._files import FollowedFile
from fastio.reader._ranges import ShardLike, as_shard
from fastio.sources._objects import (
    DOWNLOAD_FIRST_BYTES,
    REMOTE_REQUEST_BYTES,
    remote_piece_limit,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from fastio.reader._files import Direct, FileTable, OpenFile

__all__ = [
    "REMOTE_FIRST_BYTES",
    "REMOTE_REQUEST_BYTES",
    "REMOTE_START_BYTES",
    "REMOTE_UNSPLIT_BYTES",
    "Delivery",
    "Request",
    "climbs",
    "plan_requests",
]

# Remote pieces grow to REMOTE_REQUEST_BYTES (unless read_size is larger than 4 MiB):
# measured over a 20 ms link (benchmarks/bench_remote_link.py), requests of
# about 4 MiB with 8 or more in flight reach the link's rate where 1 MiB ones
# reach half of it; larger ones gained nothing and hold more memory per request.
# The first piece of a long remote range: on a fresh or idle connection TCP
# starts at 10 packets (about 14 KiB) and doubles per round trip, so 256 KiB
# takes 5 round trips. Pieces of 16, 32 and 64 KiB, sent together on three
# connections, carry a 110 KB sample in 3 (over a 20 ms link the first sample
# came 15 ms sooner: the rest of its wait is not TCP's climb).
REMOTE_FIRST_BYTES = 16 << 10
LOCAL_FIRST_BYTES = 256 << 10  # a 4 KiB multiple: O_DIRECT pieces end on such boundaries
# A remote range no longer than this is one request even where the ramp would
# split it: split, it would arrive at most one round trip sooner, at three
# requests for one sample (object stores bill, and throttle, by request).
REMOTE_UNSPLIT_BYTES = 128 << 10
# What a remote stream asks for before its first bytes are in: the first
# pieces of the climb (16 + 32 + 64 + 128 KiB), sent together; the rest wait
# until they have arrived.
REMOTE_START_BYTES = 256 << 10

# (shard, range, path, file offset, start in the piece's buffer, length,
#  end of range, end of shard)
Delivery = tuple[int, int, str, int, int, int, bool, bool]


def align_down(value: int) -> int:
    return value & ~(DIRECT_ALIGNMENT - 1)


def align_up(value: int) -> int:
    return (value + DIRECT_ALIGNMENT - 1) & ~(DIRECT_ALIGNMENT - 1)


def is_remote_file(file: OpenFile) -> bool:
    # Remote objects have no descriptor; shard cache copies are local files.
    return file.fd < 0


def climbs(file: OpenFile) -> bool:
    """Whether ``file``'s pieces climb from REMOTE_FIRST_BYTES, the first ones
    together: a remote object read with requests of its own (not a download
    the reader follows)."""
    return is_remote_file(file) and not isinstance(file, FollowedFile)


def read_limit(file: OpenFile, read_size: int) -> int:
    return align_up(read_size) if file.direct else read_size


class _Ramp:
    """The growing size of one stream's pieces (see the module)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = 0

    def limit(self, file: OpenFile, read_size: int) -> int:
        """The largest next piece of ``file``."""
        if not is_remote_file(file):
            limit = read_limit(file, read_size)
            return limit if self.last else min(limit, LOCAL_FIRST_BYTES)
        climbing = climbs(file)
        if not self.last:
            # A shard the cache downloads is read as its download's ranges
            # arrive: the download meets TCP's climb, and the reader's pieces
            # of it start at the download's first range, the first alone.
            return min(read_size, REMOTE_FIRST_BYTES if climbing else DOWNLOAD_FIRST_BYTES)
        grown = self.last * 2 if climbing else max(self.last * 2, read_size)
        return min(grown, remote_piece_limit(read_size))

    def took(self, piece: Request) -> Request:
        if piece.file is not None:
            self.last = max(self.last, piece.length)  # remote connections stay warm
        return piece


class Request:
    """One read (or, for empty ranges and planning failures, none) and what it delivers."""

    __slots__ = (
        "buffer",
        "deliveries",
        "direct",
        "done",
        "error",
        "file",
        "length",
        "needed",
        "offset",
        "path",
        "stream",
        "submitted_ns",
        "tag",
    )

    def __init__(
        self,
        stream: Any,
        file: OpenFile | None,
        path: str,
        offset: int,
        length: int,
        deliveries: list[Delivery],
        needed: int,
    ) -> None:
        self.stream = stream
        self.file = file
        self.path = path
        self.offset = offset
        self.length = length
        self.direct = file.direct if file is not None else False
        self.deliveries = deliveries
        self.needed = needed  # bytes from `offset` the deliveries need
        self.buffer: Any = None
        self.done = file is None
        self.error: BaseException | None = None
        self.tag = -1
        self.submitted_ns = 0

    @classmethod
    def failed(cls, stream: Any, path: str, error: BaseException) -> Request:
        piece = cls(stream, None, path, 0, 0, [], 0)
        piece.error = error
        return piece

    def finish(self, result: int) -> BaseException | None:
        """Record the engine's result (bytes or -errno); returns the error, if any."""
        self.done = True
        if result < 0:
            self.error = read_error(-result, self.path, self.offset, self.length)
        elif result < self.needed:
            self.error = TruncatedFileError(
                self.path, self.offset + result, self.offset + self.needed
            )
        return self.error


def read_error(errno_value: int, path: str, offset: int, length: int) -> OSError:
    # OSError picks the subclass from errno: FileNotFoundError, PermissionError, ...
    message = f"{os.strerror(errno_value)} (reading {length} bytes at offset {offset})"
    error = OSError(errno_value, message, path)
    error.offset = offset  # type: ignore[attr-defined]  # (where: see fastio.dataset._policy)
    return error


class _Group:
    """Ranges of one file close enough together to be read as one piece."""

    __slots__ = ("deliveries", "end", "file", "start")

    def __init__(self, file: OpenFile, offset: int, delivery: Delivery) -> None:
        self.file = file
        self.start = align_down(offset) if file.direct else offset
        self.end = offset + delivery[5]
        self.deliveries = [delivery]

    def span(self, end: int) -> int:
        return (align_up(end) if self.file.direct else end) - self.start

    def accepts(self, file: OpenFile, offset: int, length: int, gap: int, read_size: int) -> bool:
        return (
            file is self.file
            and 0 <= offset - self.end <= gap
            and self.span(offset + length) <= read_size
        )

    def add(self, offset: int, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        self.end = offset + delivery[5]

    def piece(self, stream: Any) -> Request:
        shifted = [(*d[:4], d[3] - self.start, *d[5:]) for d in self.deliveries]
        return Request(
            stream, self.file, self.file.path, self.start, self.span(self.end), shifted,
            self.end - self.start,
        )  # fmt: skip


def plan_requests(
    stream: Any,
    shards: Iterable[ShardLike],
    files: FileTable,
    default_direct: Direct,
    read_size: Callable[[], int],
    coalesce_gap: int,
    whole_limit: int = 0,
) -> Iterator[Request]:
    """Pieces for ``shards`` in delivery order. Each piece with a file holds one
    reference to it; ``read_size()`` is asked per piece, so a change made while
    the stream runs applies to the next piece. A range of a ``whole`` shard
    whose buffer is at most ``whole_limit`` bytes is one piece."""
    group: _Group | None = None
    ramp = _Ramp()
    numbered = enumerate(shards)
    try:
        while True:
            try:
                shard_index, shard_like = next(numbered)
                shard = as_shard(shard_like)
            except StopIteration:
                break
            except Exception as error:  # bad input: after everything before it, then stop
                if group is not None:
                    pending, group = ramp.took(group.piece(stream)), None
                    yield pending
                yield Request.failed(stream, "<shards>", error)
                return
            direct = default_direct if shard.direct is None else shard.direct
            last = len(shard.ranges) - 1
            for range_index, byte_range in enumerate(shard.ranges):
                path, offset = byte_range.path, byte_range.offset
                end_of_shard = range_index == last
                try:
                    file = files.acquire(path, direct)
                except OSError as error:
                    if group is not None:
                        pending, group = ramp.took(group.piece(stream)), None
                        yield pending
                    yield Request.failed(stream, path, error)
                    continue
                length = file.size - offset if byte_range.length is None else byte_range.length
                if length < 0 or offset + length > file.size:
                    files.release(file)
                    if group is not None:
                        pending, group = ramp.took(group.piece(stream)), None
                        yield pending
                    short = TruncatedFileError(path, file.size, offset + max(length, 0))
                    yield Request.failed(stream, path, short)
                    continue
                delivery = (shard_index, range_index, path, offset, 0, length, True, end_of_shard)
                if length == 0:
                    files.release(file)
                    if group is not None:
                        pending, group = ramp.took(group.piece(stream)), None
                        yield pending
                    yield Request(stream, None, path, offset, 0, [delivery], 0)
                    continue
                limit = ramp.limit(file, read_size())
                if group is not None:
                    if group.accepts(file, offset, length, coalesce_gap, limit):
                        group.add(offset, delivery)
                        files.release(file)  # the group holds one reference already
                        continue
                    pending, group = ramp.took(group.piece(stream)), None
                    yield pending
                candidate = _Group(file, offset, delivery)
                # A range longer than a read is split, however large remote
                # pieces may grow, and so is a remote one longer than the ramp
                # allows, but for a short one (a sample read on its own is one
                # request); short ones may share a piece up to the limit.
                span = candidate.span(offset + length)
                unsplit = max(limit, REMOTE_UNSPLIT_BYTES) if climbs(file) else limit
                if span <= min(unsplit, read_limit(file, read_size())) or (
                    shard.whole and not is_remote_file(file) and bucket_size(span) <= whole_limit
                ):
                    group = candidate
                    continue
                yield from _split(stream, files, file, delivery, read_size, ramp)
        if group is not None:
            pending, group = ramp.took(group.piece(stream)), None
            yield pending
    finally:
        if group is not None:
            files.release(group.file)


def _split(
    stream: Any, files: FileTable, file: OpenFile, delivery: Delivery,
    read_size: Callable[[], int], ramp: _Ramp,
) -> Iterator[Request]:  # fmt: skip
    """Pieces of one range larger than a read. Consumes the caller's file
    reference for the first piece and takes one more for each further piece,
    before the piece ahead of it is handed out: that piece may be read and
    release its reference before the next is planned, and a file whose count
    reached zero is idle (or, for a download read as it arrives, let go).
    Remote pieces grow along the ``ramp`` (see the module)."""
    shard_index, range_index, path, offset, _, length, _, end_of_shard = delivery
    end = offset + length
    direct = file.direct
    position = align_down(offset) if direct else offset
    request_end_limit = align_up(end) if direct else end
    ahead = False  # whether a reference is held for a piece not yet handed out
    try:
        while position < end:
            size = ramp.limit(file, read_size())
            request_end = min(position + size, request_end_limit)
            data_start, data_end = max(position, offset), min(request_end, end)
            last = data_end == end
            if not last:
                file.refs += 1  # the next piece's
            ahead = not last
            part = (
                shard_index, range_index, path, data_start, data_start - position,
                data_end - data_start, last, last and end_of_shard,
            )  # fmt: skip
            yield ramp.took(Request(
                stream, file, path, position, request_end - position, [part], data_end - position
            ))  # fmt: skip
            ahead = False  # the next piece takes it
            position = request_end
    finally:
        if ahead:  # the stream closed with pieces left unplanned
            files.release(file)
