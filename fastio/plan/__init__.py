"""fastio.plan: which samples each rank and DataLoader worker reads in an
epoch, in which order (shuffle windows), and where an iteration stands."""

from __future__ import annotations

from fastio.plan._assignment import Span, assign_samples, current_rank, current_worker, shard_order
from fastio.plan._windows import Window, make_windows, permutation, shuffle_quality

__all__ = [
    "Span",
    "Window",
    "assign_samples",
    "current_rank",
    "current_worker",
    "make_windows",
    "permutation",
    "shard_order",
    "shuffle_quality",
]
