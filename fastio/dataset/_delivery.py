"""The outermost loop of a dataset's iteration, and the hook observers get.

:func:`deliver` hands out the iteration's items. With an :class:`Observer`
(the fairness monitor's publisher) it measures, without adding a generator
layer of its own, how long the consumer kept each item (idle) and how long
the dataset took to produce it (busy), and every ``observer.interval`` seconds
tells the observer. On page-cached 4 KiB records a sample costs about 3 us in
all, and one more layer alone would cost 1-2% of that
(``benchmarks/bench_fairness.py``, part ``overhead``), so the observer is
called from here rather than wrapping the items.

An iteration still open when the process exits (a loop left with ``break``,
an iterator kept) is closed by an exit hook, while every module is whole:
the interpreter would close it only as it empties the modules, where its
cleanup (its reads stopped, its counters told) finds their names gone.
"""

from __future__ import annotations

import atexit
import contextlib
import random
import sys
import time
import weakref
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator

__all__ = ["Observer", "deliver"]

# Items that come faster than this are timed one in `stride` (up to
# _MAX_STRIDE), at random.
_FAST_ITEM_SECONDS = 20e-6
_MAX_STRIDE = 256
_END = object()

# Iterations not finished yet: closed at exit, before the interpreter's teardown.
_open: weakref.WeakSet[Generator[Any, None, None]] = weakref.WeakSet()


@atexit.register
def _close_open_iterations() -> None:
    for iteration in list(_open):
        with contextlib.suppress(ValueError):  # running on another thread: it ends with it
            iteration.close()


class Observer(Protocol):
    """What watches one iteration: told the busy time every ``interval``
    seconds, and once more when the iteration ends."""

    interval: float
    seed: int

    def tick(self, busy_seconds: float) -> None:
        """``busy_seconds`` of producing items since the last call."""

    def finish(self, busy_seconds: float) -> None:
        """The iteration ended, ``busy_seconds`` after the last tick."""


def deliver(
    begin: Callable[[], tuple[Iterator[Any], Observer | None]], end: Callable[[bool], None]
) -> Iterator[Any]:
    """Yields the items ``begin()`` gives at the first item (begun there, as a
    generator would); with an observer, the time between handing one out and
    being asked for the next is the consumer's (idle), the rest is busy.
    ``end(finished)`` runs when the iteration ends, however it ends:
    ``finished`` where every item was taken (at the latest as the process
    exits, see the module)."""
    iteration = _delivered(begin, end)
    _open.add(iteration)
    return iteration


def _delivered(
    begin: Callable[[], tuple[Iterator[Any], Observer | None]], end: Callable[[bool], None]
) -> Generator[Any, None, None]:
    finished = False
    # Kept here: one the exit hook could not close (running on another
    # thread then) is closed only after the interpreter has emptied this
    # module's globals (``sys`` among them).
    finalizing = sys.is_finalizing
    try:
        items, observer = begin()
        if observer is None:
            yield from items
            finished = True
            return
        clock = time.perf_counter
        interval = observer.interval
        mark = last_timed = clock()
        idle = 0.0
        next_tick = mark + interval
        # Items that come every few microseconds (page-cached samples) are timed
        # about one in `stride`, at random (a fixed stride would line up with a
        # loader's batches and always time the same place in them), and the
        # consumer's share extrapolated, an unbiased estimate: two clock reads
        # per item would cost several percent of the delivery rate.
        stride = countdown = 1
        draw: Callable[[], float] | None = None  # made once the stride grows
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
                if stride > 1:
                    if draw is None:
                        draw = random.Random(observer.seed).random
                    countdown = 1 + int(draw() * (2 * stride - 1))  # stride on average
                else:
                    countdown = 1
                if back >= next_tick:
                    observer.tick(max(back - mark - idle, 0.0))
                    mark, idle = back, 0.0
                    next_tick = back + interval
            finished = True
        finally:
            # Closed as the interpreter tears its modules down (see above):
            # its last counters have no reader then.
            if not finalizing():
                observer.finish(max(clock() - mark - idle, 0.0))
    finally:
        end(finished)
