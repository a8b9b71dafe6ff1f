"""What each process publishes to its slot of the board, and the loop that
times what it delivers.

:func:`deliver` is the outermost loop of a dataset's iteration (monitoring on
or off), so that monitoring adds no generator layer: on page-cached 4 KiB
records a sample costs about 3 us in all, and one more layer alone would cost
1-2% of that (``benchmarks/bench_fairness.py``, part ``overhead``).
"""

from __future__ import annotations

import os
import random
import time
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio.fairness import _board as b
from fastio.spec._reader import MAX_OUTSTANDING_REQUESTS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from fastio.reader._reader import Reader

__all__ = ["Publisher", "deliver"]

# Items that come faster than this are timed one in `stride` (up to
# _MAX_STRIDE), at random.
_FAST_ITEM_SECONDS = 20e-6
_MAX_STRIDE = 256
_END = object()


class Publisher:
    """One process's iteration: moves its counters into its slot every
    ``interval`` seconds, then lets ``judge`` close the window if it is due,
    and applies the share of outstanding requests the monitor gave it."""

    def __init__(
        self,
        slot: np.ndarray,
        reader: Reader,
        delivered: Callable[[], int],
        judge: Callable[[], None],
        interval: float,
        seed: int,
    ) -> None:
        self.slot = slot
        self.reader = reader
        self.delivered = delivered
        self.judge = judge
        self.interval = interval
        self.seed = seed
        self.pending_busy = 0.0  # measured after the last publish; finish() adds it
        stats = reader.stats()
        self.seen_delivered = delivered()
        self.seen_wait = stats.wait_seconds
        self.seen_requests = stats.requests
        self.seen_bytes = stats.bytes_delivered
        self.seen_latency = np.array(stats.latency_histogram, np.float64)
        self.base = reader.outstanding_requests
        self.applied: int | None = None
        slot[b.PID] = os.getpid()
        slot[b.ACTIVE] = 1.0

    def publish(self, busy: float) -> None:
        slot, stats = self.slot, self.reader.stats()
        delivered = self.delivered()
        slot[b.SAMPLES] += delivered - self.seen_delivered
        slot[b.BUSY] += busy
        slot[b.WAIT] += _grown(stats.wait_seconds, self.seen_wait)
        slot[b.REQUESTS] += _grown(stats.requests, self.seen_requests)
        slot[b.BYTES] += _grown(stats.bytes_delivered, self.seen_bytes)
        latency = np.array(stats.latency_histogram, np.float64)
        fresh = latency.sum() < self.seen_latency.sum()
        slot[b.LATENCY : b.SLOT] += latency if fresh else latency - self.seen_latency
        self.seen_delivered, self.seen_wait = delivered, stats.wait_seconds
        self.seen_requests, self.seen_bytes, self.seen_latency = (
            stats.requests, stats.bytes_delivered, latency)  # fmt: skip
        slot[b.INFLIGHT_BYTES] = stats.inflight_bytes
        slot[b.UPDATED] = time.monotonic()
        self.apply_share()

    def apply_share(self) -> None:
        """Set the reader's outstanding requests to this worker's share of the
        node's total. A value someone else set meanwhile (the tuner) is the new
        base the share applies to."""
        reader, slot = self.reader, self.slot
        current = reader.outstanding_requests
        if self.applied is not None and current != self.applied:
            self.base = current
        slot[b.BASE_OUTSTANDING] = self.base
        weight = float(slot[b.WEIGHT]) or 1.0
        # Rounded down, so that the workers' requests never add up to more than
        # the node's total (shares average 1, each at least 1 / max_share).
        target = min(max(int(self.base * weight), 1), MAX_OUTSTANDING_REQUESTS)
        if target != current:
            reader.outstanding_requests = target
        self.applied = target
        slot[b.OUTSTANDING] = target

    def finish(self) -> None:
        """The iteration ended (the board is still mapped): the last counters."""
        self.publish(self.pending_busy)
        self.pending_busy = 0.0
        self.slot[b.ACTIVE] = 0.0


def deliver(
    begin: Callable[[], tuple[Iterator[Any], Publisher | None]], end: Callable[[], None]
) -> Iterator[Any]:
    """Yields the items ``begin()`` gives at the first item (begun there, as a
    generator would); with a publisher, the time between handing one out and
    being asked for the next is the consumer's (idle), the rest is busy, and
    both are published. ``end()`` runs when the iteration ends, however."""
    try:
        items, publisher = begin()
        if publisher is None:
            yield from items
            return
        clock = time.perf_counter
        interval = publisher.interval
        mark = last_timed = clock()
        idle = 0.0
        next_publish = mark + interval
        # Items that come every few microseconds (page-cached samples) are timed
        # about one in `stride`, at random (a fixed stride would line up with a
        # loader's batches and always time the same place in them), and the
        # consumer's share extrapolated, an unbiased estimate: two clock reads
        # per item would cost several percent of the delivery rate.
        stride = countdown = 1
        draw = random.Random(publisher.seed).random
        items = iter(items)  # the untimed runs below continue the same iterator
        try:
            for item in items:
                if countdown > 1:  # the untimed run, delegated: no bytecode per item here
                    yield item
                    yield from islice(items, countdown - 2)
                    item = next(items, _END)
                    if item is _END:
                        break
                handed = clock()
                yield item
                back = clock()
                idle += (back - handed) * stride
                per_item = (back - last_timed) / stride
                last_timed = back
                if per_item < _FAST_ITEM_SECONDS and stride < _MAX_STRIDE:
                    stride *= 2
                elif per_item > 4 * _FAST_ITEM_SECONDS and stride > 1:
                    stride //= 2
                countdown = 1 + int(draw() * (2 * stride - 1))  # stride on average
                if back >= next_publish:
                    publisher.publish(max(back - mark - idle, 0.0))
                    publisher.judge()
                    mark, idle = back, 0.0
                    next_publish = back + interval
        finally:
            publisher.pending_busy = max(clock() - mark - idle, 0.0)
    finally:
        end()


def _grown(now: float, seen: float) -> float:
    """How much a reader counter grew; a reader made before a fork counts
    afresh in the child from its first use (its counters restart at zero)."""
    return now - seen if now >= seen else now
