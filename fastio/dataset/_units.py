"""A participant's part of an epoch read window by window: the shuffle buffer.

Each window's samples are read (only those not yet passed, when resuming in
the middle of one), held encoded until the window is complete, and delivered
in the window's order; in stored order they stream as they are decoded. A
window larger than the spill's memory bound waits in a spill file instead
(:mod:`fastio.dataset._spill`). In columnar mode each window becomes one table
and the rows to deliver; :func:`fastio.dataset._batching.rebatch` cuts those
into batches.
"""

from __future__ import annotations

from collections import deque
from itertools import islice, takewhile
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio import _native
from fastio.dataset._reads import SKIPPED
from fastio.dataset._spill import MISSING as SPILL_MISSING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fastio.dataset._reads import Read, SampleReads
    from fastio.dataset._spill import ShuffleSpill
    from fastio.plan._cursor import EpochCursor
    from fastio.plan._part import Part
    from fastio.plan._windows import Window

__all__ = ["read_part"]

_MISSING = SKIPPED  # a window position no read filled, like a damaged record's


def read_part(
    part: Part,
    position: int,
    reads: SampleReads,
    cursor: EpochCursor,
    spill: ShuffleSpill | None,
    columnar: bool,
    stop: int | None = None,
) -> Iterator[Any]:
    """Samples of ``part`` in delivery order from ``position`` on; or,
    ``columnar``, per window a table, the rows to deliver in order, each row's
    position in the part, and the position after the window. The cursor
    passes every sample, delivered or lost (samples mode; batches move it as
    they are delivered). ``stop``: windows before it only (a unit of work).
    The reads are planned here, at the call; they start at the first item."""
    windows = part.windows[:stop]
    first, skip = part.locate(position)
    if first >= len(windows):
        return iter(())
    planned = reads.plan(windows, first, skip, part.order)
    order = part.order(first)
    if order is not None and not columnar:
        # The first window's reads in the order its samples are delivered:
        # its first sample waits for the read that holds it, not for those
        # before it in stored order (a shuffled epoch's first window is a
        # sample of each of 8 shards). The windows after it are read ahead
        # while it is delivered.
        own = sum(1 for _ in takewhile(lambda read: read.window == first, planned))
        planned[:own] = _native.by_first_need(planned[:own], order[skip:], windows[first].count)
    return _delivered(part, windows, first, skip, planned, reads, cursor, spill, columnar, order)


def _delivered(
    part: Part,
    windows: list[Window],
    first: int,
    skip: int,
    planned: list[Read],
    reads: SampleReads,
    cursor: EpochCursor,
    spill: ShuffleSpill | None,
    columnar: bool,
    first_order: np.ndarray | None,
) -> Iterator[Any]:
    """:func:`read_part`'s items: ``planned`` read, windows ``first``..
    delivered (the first in ``first_order``)."""
    starts = part.starts
    per_window = _native.reads_per_window(planned, len(windows))
    # A shuffle window in memory holds samples encoded where the format can,
    # made as they are delivered.
    encoded = (not columnar and spill is None and part.shuffle.enabled
               and reads.format.encodes)  # fmt: skip
    executed = reads.execute(planned, columnar, encoded=encoded)
    for index in range(first, len(windows)):
        window = windows[index]
        order = first_order if index == first else part.order(index)
        begin = skip if index == first else 0
        its_reads = islice(executed, int(per_window[index]))
        end = int(starts[index + 1])
        if order is None and not columnar:  # stored order: stream as decoded
            expected = begin
            for read, samples in its_reads:
                cursor.pass_over(read.at - expected)  # samples a failure lost
                for sample in samples:
                    if sample is SKIPPED:  # a damaged record
                        cursor.pass_over(1)
                        continue
                    cursor.deliver_one()
                    yield sample
                expected = read.at + samples.count
            cursor.move_to(end)
            continue
        if order is None and columnar:  # stored order: a unit per part, as decoded
            from fastio.dataset._batching import rows_of  # batches' only

            for read, decoded in its_reads:
                position = int(starts[index]) + read.at
                end = position + read.stop - read.start
                for piece in decoded:
                    n = rows_of(piece)
                    if piece is SKIPPED:  # a damaged record: a place without a row
                        yield None, range(0), range(0), position + n
                    else:
                        yield piece, range(n), range(position, position + n), position + n
                    position += n
                if position < end:  # rows the read lost (cut short): passed over
                    yield None, range(0), range(0), end
            continue
        sequence = order[begin:] if order is not None else np.arange(begin, window.count)
        if spill is not None and spill.applies(window.nbytes, columnar):
            placed = ((read.at, samples) for read, samples in its_reads)
            for sample in spill.window(placed, window.count, sequence, window.nbytes):
                if sample is SPILL_MISSING:
                    cursor.pass_over(1)
                else:
                    cursor.deliver_one()
                    yield sample
            continue
        if columnar:
            yield _columnar_window(its_reads, window.count, sequence, order is None,
                                   int(starts[index]) + begin, end)  # fmt: skip
            continue
        # The window (the shuffle buffer) delivered in its order, each sample
        # as soon as the read that holds it is in: a window's order is known
        # before its reads, so its first sample waits for the reads up to its
        # own, not for the whole window (a shuffled epoch's first window is a
        # sample from each of 8 shards).
        slots: list[Any] = [_MISSING] * window.count
        origins: list[Read | None] = [None] * window.count if encoded else []
        ready = bytearray(window.count)  # 1 where the read of that place is in
        for slot in sequence:
            while not ready[slot]:
                got = next(its_reads, None)
                if got is None:  # no read holds it: a sample lost
                    break
                read, samples = got
                decoded = list(samples)
                slots[read.at : read.at + len(decoded)] = decoded
                places = read.stop - read.start  # those it lost too: no other read holds them
                ready[read.at : read.at + places] = b"\1" * places
                if encoded:
                    origins[read.at : read.at + len(decoded)] = [read] * len(decoded)
            sample = slots[slot]
            slots[slot] = None  # the buffer shrinks as it is delivered
            if encoded and sample is not _MISSING:
                origin = origins[slot]
                assert origin is not None
                sample = reads.finish(sample, origin)
            if sample is _MISSING:
                cursor.pass_over(1)
            else:
                cursor.deliver_one()
                yield sample
        # Reads that hold no place still to deliver are taken all the same:
        # the next window's reads come after them.
        for _, samples in its_reads:
            deque(samples, maxlen=0)


def _columnar_window(
    its_reads: Iterator[Any],
    count: int,
    sequence: np.ndarray,
    stored: bool,
    first_position: int,
    end: int,
    origin: int = 0,
) -> tuple[Any, Any, Any, int]:
    """A window's table, the rows to deliver, their positions, the position
    after it (of the window's samples from ``origin`` on)."""
    from fastio.dataset._batching import assemble, rows_of  # batches' only

    parts: list[tuple[int, Any]] = []
    for read, decoded in its_reads:
        at = read.at - origin
        for part in decoded:
            if part is not SKIPPED:  # a damaged record's row stays empty
                parts.append((at, part))
            at += rows_of(part)
    table, rows_at = assemble(parts, count)
    rows = rows_at[sequence]
    present = rows >= 0
    if stored and bool(present.all()) and len(rows):
        # Stored order, nothing skipped: rows and positions are runs.
        start_row = int(rows[0])
        return (table, range(start_row, start_row + len(rows)),
                range(first_position, first_position + len(rows)), end)  # fmt: skip
    return table, rows[present], first_position + np.flatnonzero(present), end
