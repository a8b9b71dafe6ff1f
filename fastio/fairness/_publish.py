"""What each process publishes to its slot of the board.

A :class:`Publisher` is the fairness monitor's observer of one iteration (see
:class:`fastio.dataset._delivery.Observer`): every ``interval`` seconds the
dataset's loop tells it how long it was busy producing items; it moves this
process's counters (samples delivered, the reader's requests, bytes, waits and
latencies) into its slot, lets the monitor close the window if it is due, and
gives the reader the share of outstanding requests the monitor decided.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from fastio.fairness import _board as b

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastio.reader._reader import Reader

__all__ = ["Publisher"]


class Publisher:
    """One process's iteration, publishing to the slot ``take()`` gives with
    the judge that closes the window when it is due: taken at the first
    publish (the board is mapped, and its slot written, a tenth of a window
    into the iteration, not before its first item). Where ``take()`` gives
    None (the board is gone), it publishes to a slot of its own, unjudged."""

    def __init__(
        self,
        take: Callable[[], tuple[np.ndarray, Callable[[], None]] | None],
        reader: Reader,
        delivered: Callable[[], int],
        interval: float,
        seed: int,
    ) -> None:
        self._take: Callable[[], tuple[np.ndarray, Callable[[], None]] | None] | None = take
        self.slot = np.zeros(b.SLOT)
        self.judge: Callable[[], None] = _nothing
        self.reader = reader
        self.delivered = delivered
        self.interval = interval
        self.seed = seed
        stats = reader.stats()
        self.seen_delivered = delivered()
        self.seen_wait = stats.wait_seconds
        self.seen_requests = stats.requests
        self.seen_bytes = stats.bytes_delivered
        self.seen_latency = np.array(stats.latency_histogram, np.float64)

    def tick(self, busy_seconds: float) -> None:
        self._publish(busy_seconds)
        self.judge()

    def finish(self, busy_seconds: float) -> None:
        """The iteration ended: the last counters, and the window if it is due."""
        self._publish(busy_seconds)
        self.slot[b.ACTIVE] = 0.0
        self.judge()
        # The board's mapping goes when the monitor closes it, even where this
        # iteration's frames live on (in the traceback of the error that ended it).
        self.slot = np.zeros_like(self.slot)

    def _publish(self, busy_seconds: float) -> None:
        if self._take is not None:
            taken, self._take = self._take(), None
            if taken is not None:
                self.slot, self.judge = taken
            self.slot[b.PID] = os.getpid()
            self.slot[b.ACTIVE] = 1.0
        slot, stats = self.slot, self.reader.stats()
        delivered = self.delivered()
        slot[b.SAMPLES] += delivered - self.seen_delivered
        slot[b.BUSY] += busy_seconds
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
        self.apply_share()

    def apply_share(self) -> None:
        """Give the reader this worker's share of the node's outstanding
        requests (the reader combines it with the base the tuner sets)."""
        share = float(self.slot[b.WEIGHT]) or 1.0
        if share != self.reader.share:
            self.reader.share = share
        self.slot[b.OUTSTANDING] = self.reader.request_limit


def _nothing() -> None:
    pass


def _grown(now: float, seen: float) -> float:
    """How much a reader counter grew; a reader made before a fork counts
    afresh in the child from its first use (its counters restart at zero)."""
    return now - seen if now >= seen else now
