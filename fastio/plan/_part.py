"""One participant's part of an epoch: its samples (see :mod:`fastio.plan._assignment`)
cut into windows (see :mod:`fastio.plan._windows`), each delivered in its order.

A part is a pure function of the plan's inputs (shard counts and layouts, the
shuffle settings, the split, the epoch and the participant), which is what
makes a position in it a complete resume state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fastio._native import run_shards, window_starts
from fastio.formats._layout import counts_of
from fastio.plan._assignment import assign_samples
from fastio.plan._windows import make_windows, permutation
from fastio.spec._records import record

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastio.formats._layout import Layout
    from fastio.plan._participant import Participant
    from fastio.plan._windows import Window
    from fastio.spec._dataset import Remainder, ShuffleSettings

__all__ = ["Part", "make_part"]


@record(frozen=True)
class Part:
    """``participant``'s samples of ``epoch``, as windows; ``starts[i]`` is the
    position (in the part) of window ``i``'s first sample, ``starts[-1]`` the count."""

    epoch: int
    participant: Participant
    windows: list[Window]
    starts: np.ndarray
    shuffle: ShuffleSettings

    @property
    def count(self) -> int:
        return int(self.starts[-1])

    def order(self, index: int) -> np.ndarray | None:
        """Window ``index``'s delivery order (positions in it); None: stored order."""
        if not self.shuffle.enabled:
            return None
        who = self.participant
        return permutation(self.windows[index].count, self.shuffle.seed, self.epoch, who.rank,
                           who.worker, index)  # fmt: skip

    def locate(self, position: int) -> tuple[int, int]:
        """The window ``position`` falls in, and how many of its samples come before it."""
        index = int(np.searchsorted(self.starts, position, side="right")) - 1
        return index, position - int(self.starts[min(index, len(self.windows))])

    def window_ids(self, index: int, bases: np.ndarray) -> np.ndarray:
        """Global sample numbers of window ``index`` in delivery order (``bases``
        are the shards' first numbers)."""
        window = self.windows[index]
        if not window.runs:
            return np.zeros(0, np.int64)
        ids = np.concatenate([bases[r.shard] + np.arange(r.start, r.stop) for r in window.runs])
        order = self.order(index)
        return ids if order is None else ids[order]

    def sample_ids(self, bases: np.ndarray) -> np.ndarray:
        """Global sample numbers (positions in URL order) in delivery order."""
        parts = [self.window_ids(index, bases) for index in range(len(self.windows))]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def shards(self) -> list[int]:
        """The shards the part reads, in reading order (repeats merged)."""
        return run_shards(self.windows)


def make_part(
    layouts: Sequence[Layout],
    shuffle: ShuffleSettings,
    remainder: Remainder,
    epoch: int,
    participant: Participant,
    batch_size: int | None = None,
    remaining: np.ndarray | None = None,
) -> Part:
    """The part of ``participant`` in ``epoch`` (see the module): whole
    batches of ``batch_size`` per worker, of the ``remaining`` samples only
    (global numbers in the epoch's order) when given."""
    who = participant
    spans = assign_samples(
        counts_of(layouts), rank=who.rank, world_size=who.world_size,
        worker=who.worker, num_workers=who.num_workers, seed=shuffle.seed, epoch=epoch,
        shuffle=shuffle.enabled, remainder=remainder, batch_size=batch_size,
        remaining=remaining,
    )  # fmt: skip
    mix = shuffle.shards if shuffle.enabled else 1
    windows = make_windows(spans, layouts, shuffle.buffer, mix)
    starts = np.frombuffer(window_starts(windows), np.int64)
    return Part(epoch, participant, windows, starts, shuffle)
