"""Which samples each rank and DataLoader worker reads in an epoch.

The epoch's shard order comes from ``(seed, epoch)``. Its samples, shard after
shard, form one sequence; each rank takes a contiguous part of it, and each
worker a contiguous part of its rank's. Contiguous parts keep reads sequential
within shards: at most one shard is shared between neighbouring consumers.

Every sample goes to exactly one (rank, worker). With ``remainder="exact"``
ranks differ by at most one sample; ``"drop"`` leaves out the last
``total % world_size`` samples of the order and ``"pad"`` repeats samples from
its start, so that every rank gets the same count and synchronous training
never waits at the end of an epoch for a rank that has nothing left.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING

from fastio._native import Span, whole_spans  # native: a plan makes thousands

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from fastio.spec._dataset import Remainder

__all__ = ["Span", "assign_samples", "drawn_order", "part_bounds", "shard_order"]


def shard_order(shard_count: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The order shards are read in this epoch: a permutation drawn from
    ``(seed, epoch)`` (the same on every rank and worker), or stored order."""
    if not shuffle:
        return list(range(shard_count))
    return [int(shard) for shard in drawn_order(shard_count, (seed, epoch))]


def drawn_order(count: int, key: tuple[int, ...]) -> np.ndarray:
    """A permutation of ``0 .. count - 1`` drawn from ``key`` alone (see
    ``permute`` in the extension): the same in every process."""
    import numpy as np

    from fastio import _native

    order = np.empty(count, np.int64)
    _native.permute(order, key)
    return order


def _split(total: int, parts: int, index: int) -> tuple[int, int]:
    return total * index // parts, total * (index + 1) // parts


def part_bounds(
    length: int,
    *,
    rank: int = 0,
    world_size: int = 1,
    worker: int = 0,
    num_workers: int = 1,
    remainder: Remainder = "exact",
    batch_size: int | None = None,
) -> tuple[int, int]:
    """Positions ``[lo, hi)`` of a sequence of ``length`` samples that
    ``(rank, worker)`` reads (past ``length`` they wrap around: padding).

    With ``batch_size``, workers' parts are whole batches but for the last
    batch of the rank, so that a DataLoader over the workers yields
    ``ceil(part / batch_size)`` batches, as ``len(loader)`` says. Raises
    ValueError for a rank or worker outside its range, or an unknown remainder.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, not {rank}")
    workers = max(num_workers, 1)
    if not 0 <= worker < workers:
        raise ValueError(f"worker must be in 0..{workers - 1}, not {worker}")
    if remainder not in ("exact", "drop", "pad"):
        raise ValueError(f"remainder must be exact, drop or pad, not {remainder!r}")
    if remainder == "exact":
        start, stop = _split(length, world_size, rank)
    else:
        per_rank = length // world_size if remainder == "drop" else -(-length // world_size)
        start, stop = rank * per_rank, (rank + 1) * per_rank
    count = stop - start
    if batch_size:
        first, last = _split(-(-count // batch_size), workers, worker)
        return start + min(count, first * batch_size), start + min(count, last * batch_size)
    lo, hi = _split(count, workers, worker)
    return start + lo, start + hi


def assign_samples(
    counts: Sequence[int],
    *,
    rank: int = 0,
    world_size: int = 1,
    worker: int = 0,
    num_workers: int = 1,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    remainder: Remainder = "exact",
    batch_size: int | None = None,
    remaining: np.ndarray | None = None,
) -> list[Span]:
    """The spans of samples that ``(rank, worker)`` reads this epoch, in order.

    ``counts`` are the shards' sample counts (from the index). The epoch's
    sequence is every sample, shard after shard in the epoch's shard order;
    or, resuming with another layout, the global sample numbers ``remaining``
    (in that order). See :func:`part_bounds` for the split. Raises ValueError
    for a rank or worker outside its range, or an unknown remainder.
    """
    total = sum(counts)
    length = total if remaining is None else len(remaining)
    lo, hi = part_bounds(length, rank=rank, world_size=world_size, worker=worker,
                         num_workers=num_workers, remainder=remainder,
                         batch_size=batch_size)  # fmt: skip
    if remaining is not None:
        return _spans_of_ids(counts, remaining, lo, hi)
    return _spans(counts, shard_order(len(counts), seed, epoch, shuffle), lo, hi, total)


def _spans(
    counts: Sequence[int], order: list[int], start: int, stop: int, total: int
) -> list[Span]:
    """The spans of positions ``start``..``stop`` of the sequence of every
    sample, shard after shard in ``order`` (past ``total`` it starts again:
    padding). Each lap's first and last shards are found by bisection and
    those between them are whole: a dataset of thousands of shards plans
    them before its first sample."""
    spans: list[Span] = []
    if total == 0:
        return spans
    ordered = [counts[shard] for shard in order]
    ends = list(accumulate(ordered))  # where each shard of the order ends in a lap
    position = start
    while position < stop:
        base = position - position % total  # the lap of the sequence this position is in
        lo, hi = position - base, min(stop - base, total)  # the positions of this lap
        first = bisect_right(ends, lo)  # the shard holding position lo (none is empty)
        last = bisect_left(ends, hi)  # the shard holding position hi - 1
        begin = ends[first] - ordered[first]
        if first == last:
            spans.append(Span(order[first], lo - begin, hi - begin))
        else:
            spans.append(Span(order[first], lo - begin, ordered[first]))
            spans.extend(whole_spans(order[first + 1 : last], ordered[first + 1 : last]))
            spans.append(Span(order[last], 0, hi - (ends[last] - ordered[last])))
        position = base + total
    return spans


def _spans_of_ids(counts: Sequence[int], ids: np.ndarray, lo: int, hi: int) -> list[Span]:
    """Spans of the global sample numbers ``ids[lo:hi]`` (wrapping past the end),
    a span per run of consecutive samples of one shard."""
    import numpy as np

    if not len(ids):
        return []
    chosen = ids[np.arange(lo, hi) % len(ids)]
    bases = np.concatenate([[0], np.cumsum(counts)])
    shards = np.searchsorted(bases, chosen, side="right") - 1
    breaks = np.flatnonzero((np.diff(chosen) != 1) | (np.diff(shards) != 0)) + 1
    spans = []
    for run in np.split(np.arange(len(chosen)), breaks):
        if len(run):
            shard = int(shards[run[0]])
            first = int(chosen[run[0]]) - int(bases[shard])
            spans.append(Span(shard, first, first + len(run)))
    return spans
