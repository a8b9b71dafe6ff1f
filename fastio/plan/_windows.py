"""The order one (rank, worker) delivers its samples in: windows over its spans.

A shuffled epoch reads its spans (see :mod:`fastio.plan._assignment`) a window at a
time. A window takes a run of about ``budget / mix`` bytes from each of ``mix``
spans at once (so several shards are mixed in every window), holds their
encoded samples (the shuffle buffer, bounded by ``budget`` bytes plus one unit
per span), and delivers them in a permutation drawn from
``(seed, epoch, rank, worker, window)``. Runs end at unit boundaries, so each
unit (a sample, a row group, a compressed shard) is read once.

Because the order is a pure function of the plan, a position in the epoch is
the whole resume state: the window it falls in is rebuilt and only its samples
not yet delivered are read again. Unshuffled epochs deliver spans in stored
order in runs of about ``budget`` bytes.

The first windows ramp up (:func:`window_budget`): the first holds one unit
per span, the next about 64 KiB, doubling up to ``budget``. So the first
sample leaves as soon as its own bytes (and, shuffled, its window's few
others) arrive rather than after a whole shuffle buffer is read, while what
is held stays bounded by ``budget`` as before.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from fastio import _native
from fastio._native import Run, Window  # native: a plan makes thousands
from fastio.formats._layout import ColumnLayouts
from fastio.plan._assignment import drawn_order

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastio.formats._shards import Layout
    from fastio.plan._assignment import Span

__all__ = [
    "FIRST_WINDOW",
    "Run",
    "Window",
    "make_windows",
    "permutation",
    "shuffle_quality",
    "window_budget",
]

FIRST_WINDOW = 64 << 10
"""Bytes of the second window; each one after holds twice its predecessor's."""


def window_budget(index: int, buffer: int) -> int:
    """Bytes of samples in window ``index``: the first window is a single unit
    (per span), then 64 KiB doubling up to ``buffer``."""
    if index == 0:
        return 1
    return min(buffer, FIRST_WINDOW << min(index - 1, 40))


def make_windows(
    spans: Sequence[Span], layouts: Sequence[Layout], budget: int, mix: int
) -> list[Window]:
    """Cut ``spans`` into windows of about ``budget`` bytes (the first ones
    fewer, see :func:`window_budget`), each mixing runs of up to ``mix`` spans
    (``mix=1``: stored order, one run per window)."""
    budget, mix = max(1, budget), max(1, mix)
    arrays = _per_sample(spans, layouts) if mix <= _native.CUT_MAX_MIX else None
    if arrays is not None:  # the same cuts, in native code
        starts, ends, firsts = arrays
        try:
            return _native.cut_windows(list(spans), starts, ends, budget, mix, FIRST_WINDOW,
                                       firsts)  # fmt: skip
        except ValueError:  # an array not of contiguous int64 (a format's own layout)
            pass
    if mix == 1:
        return _stored_windows(spans, layouts, budget)
    return _mixed_windows(spans, layouts, budget, mix)


def _per_sample(spans: Sequence[Span], layouts: Sequence[Layout]) -> tuple[
    list[np.ndarray | None], list[np.ndarray | None], list[int] | None
] | None:  # fmt: skip
    """Every shard's sample starts and ends (from where in those arrays, None:
    their first) where each span's shard is laid out per sample, else None.
    The native cut takes them where they are contiguous int64 arrays, and
    raises ValueError where not (checked once there, not for each of a
    dataset's thousands of shards here). Layouts still to be made from a
    dataset index's columns are not made: the columns are the arrays."""
    if isinstance(layouts, ColumnLayouts):
        return layouts.per_sample()  # type: ignore[return-value]  # of non-None arrays
    starts: list[np.ndarray | None] = [None] * len(layouts)
    ends: list[np.ndarray | None] = [None] * len(layouts)
    for span in spans:
        shard = span.shard
        if starts[shard] is not None or span.stop <= span.start:
            continue
        layout = layouts[shard]
        first, last = layout.starts, layout.ends
        if first is None or last is None or layout.whole:  # not :attr:`Layout.per_sample`
            return None
        starts[shard], ends[shard] = first, last
    return starts, ends, None


def _stored_windows(spans: Sequence[Span], layouts: Sequence[Layout], budget: int
                    ) -> list[Window]:  # fmt: skip
    """:func:`make_windows` with ``mix=1``: the spans one after another, each
    cut in turn (a dataset of thousands of shards cuts them before its first
    sample)."""
    windows: list[Window] = []
    for span in spans:
        shard, cursor, stop = span.shard, span.start, span.stop
        layout = layouts[shard]
        while cursor < stop:
            cut, nbytes = layout.cut(cursor, stop, window_budget(len(windows), budget))
            windows.append(Window((Run(shard, cursor, cut, 0),), cut - cursor, nbytes))
            cursor = cut
    return windows


def _mixed_windows(spans: Sequence[Span], layouts: Sequence[Layout], budget: int, mix: int
                   ) -> list[Window]:  # fmt: skip
    pending = deque(spans)
    active: list[list[int]] = []  # [shard, cursor, stop]
    windows: list[Window] = []
    while pending or active:
        while len(active) < mix and pending:
            span = pending.popleft()
            if span.stop > span.start:
                active.append([span.shard, span.start, span.stop])
        if not active:
            break
        runs: list[Run] = []
        count = nbytes = 0
        per_span = max(1, window_budget(len(windows), budget) // mix)
        for entry in active:
            shard, cursor, stop = entry
            layout = layouts[shard]
            cut, run_bytes = layout.cut(cursor, stop, per_span)
            runs.append(Run(shard, cursor, cut, count))
            count += cut - cursor
            nbytes += run_bytes
            entry[1] = cut
        active = [entry for entry in active if entry[1] < entry[2]]
        windows.append(Window(tuple(runs), count, nbytes))
    return windows


def permutation(
    count: int, seed: int, epoch: int, rank: int, worker: int, window: int
) -> np.ndarray:
    """The delivery order of a window's ``count`` samples (positions in it)."""
    return drawn_order(count, (seed, epoch, rank, worker, window, 0x5EED))


def shuffle_quality(order: np.ndarray, bases: np.ndarray, window: int = 1000) -> dict[str, float]:
    """How well ``order`` (global sample numbers in delivery order) is mixed.

    ``rank_correlation``: Spearman's rho between stored and delivered position
    (1 = stored order, near 0 = well mixed). ``longest_shard_run``: the most
    consecutive samples from one shard. ``shards_per_window``: distinct
    shards among ``window`` consecutive samples, on average. ``bases`` are the
    shards' first sample numbers followed by the total.
    """
    count = len(order)
    if count < 2:
        return {
            "samples": float(count),
            "rank_correlation": 1.0,
            "longest_shard_run": float(count),
            "shards_per_window": float(min(count, 1)),
        }
    stored_rank = np.empty(count, np.float64)
    stored_rank[np.argsort(order, kind="stable")] = np.arange(count)
    delivered = np.arange(count, dtype=np.float64)
    rho = float(np.corrcoef(delivered, stored_rank)[0, 1])
    shards = np.searchsorted(bases, order, side="right") - 1
    changes = np.flatnonzero(np.diff(shards) != 0)
    edges = np.concatenate([[-1], changes, [count - 1]])
    longest = int(np.diff(edges).max())
    per_window = [len(np.unique(shards[i : i + window])) for i in range(0, count, window)]
    return {
        "samples": float(count),
        "rank_correlation": rho,
        "longest_shard_run": float(longest),
        "shards_per_window": float(np.mean(per_window)),
    }
