"""The simple baselines the learned policy is measured against: what caches
do today. Everything on HDD; SSD first come, first served until full; SSD for
files under a size threshold (tuned on the training period by replaying it);
everything to SSD, demoting the least recently used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastio.tiering._policies import Policy
from fastio.tiering._simulate import replay

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastio.tiering._policies import FastTier
    from fastio.tiering._trace import TraceFile

__all__ = ["AllSlow", "FirstCome", "Lru", "SizeThreshold"]


class AllSlow(Policy):
    name = "all-hdd"

    def place(self, file: TraceFile, now: float, fast: FastTier) -> bool:
        return False


class FirstCome(Policy):
    name = "first-come"

    def place(self, file: TraceFile, now: float, fast: FastTier) -> bool:
        return fast.used + file.size <= fast.budget


class SizeThreshold(Policy):
    """Files under a size go first-come to the fast tier. The threshold is the
    one of a few quantiles of sizes that served most I/O on the training period."""

    name = "size-threshold"

    def __init__(self) -> None:
        self.threshold = 0

    def fit(self, history: Sequence[TraceFile], budget: int, seconds: float) -> None:
        sizes = sorted(file.size for file in history)
        best = -1.0
        for quantile in (0.1, 0.25, 0.5, 0.75, 0.9):
            self.threshold = sizes[int(quantile * (len(sizes) - 1))]
            trial = SizeThreshold()
            trial.threshold = self.threshold
            served = replay(list(history), budget, trial).ssd_fraction
            if served > best:
                best, chosen = served, self.threshold
        self.threshold = chosen

    def place(self, file: TraceFile, now: float, fast: FastTier) -> bool:
        return file.size <= self.threshold and fast.used + file.size <= fast.budget


class Lru(Policy):
    """Every file to the fast tier; the least recently used make room."""

    name = "lru"

    def place(self, file: TraceFile, now: float, fast: FastTier) -> bool:
        if file.size > fast.budget:
            return False
        if fast.used + file.size > fast.budget:
            order = sorted(fast.residents, key=lambda n: fast.last_access[n])
            for number in order:
                fast.demote(number)
                if fast.used + file.size <= fast.budget:
                    break
        return True
