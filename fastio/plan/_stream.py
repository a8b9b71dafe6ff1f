"""The first epoch of a dataset not yet indexed: whole shards, streamed.

Without its shards' sample counts a dataset cannot split samples, so the
epoch's shards (in the epoch's shard order) are split instead: each
participant (rank x DataLoader worker) takes a contiguous run of them
balanced by bytes (local files), or by number (remote objects, whose sizes
are not asked before their reads: a bucket never seen does not wait for an
answer about each object), and reads each whole, from its first byte, once,
building its index on the way. Every sample is still delivered exactly once
across ranks and workers; how many each participant delivers depends on its
shards.

Shuffling uses windows over the stream: consecutive samples, about
``window_budget(k)`` bytes for the ``k``-th window
(:func:`fastio.plan._windows.window_budget`), delivered in a permutation of
``(seed, epoch, rank, worker, k)``. The first window is the first sample
alone (it leaves as soon as its bytes arrive); then the budgets start at 64
KiB and double up to the shuffle buffer, which bounds what is held. Window
boundaries depend only on the samples' sizes, so the order is reproducible
and a position in it resumable (see :mod:`fastio.dataset._stream`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fastio.plan._assignment import shard_order

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastio.plan._participant import Participant
    from fastio.spec._dataset import ShuffleSettings

__all__ = ["stream_shards"]


def stream_shards(
    shards: int, sizes: Sequence[int] | None, shuffle: ShuffleSettings, epoch: int,
    participant: Participant,
) -> list[int]:  # fmt: skip
    """The ``shards`` shards ``participant`` streams in ``epoch``, in order: of
    the epoch's shard order, those whose middle byte falls in the
    participant's equal share of all the bytes (participants numbered rank by
    rank, then worker); without ``sizes``, an equal share of the shards."""
    who = participant
    order = shard_order(shards, shuffle.seed, epoch, shuffle.enabled)
    shares = who.world_size * max(who.num_workers, 1)
    if shares == 1:  # one participant: every shard is its own
        return order
    me = who.rank * max(who.num_workers, 1) + who.worker
    numbers = np.asarray(order, np.int64)
    ordered = (np.zeros(len(order)) if sizes is None else
               np.asarray(sizes, np.float64)[numbers])  # fmt: skip
    total = float(ordered.sum())
    if total == 0:  # no sizes, or empty shards: by position
        owners = np.arange(len(order)) * shares // max(len(order), 1)
    else:
        middles = np.cumsum(ordered) - ordered / 2
        owners = np.minimum((middles * shares / total).astype(np.int64), shares - 1)
    mine: list[int] = numbers[owners == me].tolist()
    return mine
