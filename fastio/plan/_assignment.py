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

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastio.spec._dataset import Remainder

__all__ = ["Span", "assign_samples", "shard_order"]


@dataclass(frozen=True, slots=True)
class Span:
    """Samples ``start`` to ``stop`` (exclusive) of shard ``shard``."""

    shard: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


def shard_order(shard_count: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The order shards are read in this epoch: a permutation drawn from
    ``(seed, epoch)`` (the same on every rank and worker), or stored order."""
    if not shuffle:
        return list(range(shard_count))
    import numpy as np

    generator = np.random.default_rng([seed & 0xFFFFFFFF, seed >> 32, epoch])
    return [int(i) for i in generator.permutation(shard_count)]


def _split(total: int, parts: int, index: int) -> tuple[int, int]:
    return total * index // parts, total * (index + 1) // parts


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
) -> list[Span]:
    """The spans of samples that ``(rank, worker)`` reads this epoch, in order.

    ``counts`` are the shards' sample counts (from the index). Raises
    ValueError for a rank or worker outside its range, or an unknown remainder.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, not {rank}")
    if not 0 <= worker < max(num_workers, 1):
        raise ValueError(f"worker must be in 0..{max(num_workers, 1) - 1}, not {worker}")
    if remainder not in ("exact", "drop", "pad"):
        raise ValueError(f"remainder must be exact, drop or pad, not {remainder!r}")
    order = shard_order(len(counts), seed, epoch, shuffle)
    total = sum(counts)
    if remainder == "exact":
        start, stop = _split(total, world_size, rank)
    else:
        per_rank = total // world_size if remainder == "drop" else -(-total // world_size)
        start, stop = rank * per_rank, (rank + 1) * per_rank
    # The worker's part of the rank's part, as positions in the epoch's sequence
    # (positions past `total` wrap around: that is the padding).
    lo, hi = _split(stop - start, max(num_workers, 1), worker)
    return _spans(counts, order, start + lo, start + hi, total)


def _spans(
    counts: Sequence[int], order: list[int], start: int, stop: int, total: int
) -> list[Span]:
    spans: list[Span] = []
    if total == 0:
        return spans
    position = start
    while position < stop:
        base = position - position % total  # the lap of the sequence this position is in
        offset = base
        for shard in order:
            count = counts[shard]
            lo, hi = max(position, offset), min(stop, offset + count)
            if lo < hi:
                spans.append(Span(shard, lo - offset, hi - offset))
            offset += count
            if offset >= stop:
                break
        position = base + total
    return spans
