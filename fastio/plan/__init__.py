"""fastio.plan: which samples each rank and DataLoader worker reads in an
epoch (the assignment), in which order (shuffle windows), and where an
iteration stands (the epoch cursor). Pure functions of the plan's inputs:
no I/O."""

from __future__ import annotations

from fastio.plan._assignment import Span, assign_samples, shard_order
from fastio.plan._cursor import EpochCursor, Start
from fastio.plan._part import Part, make_part
from fastio.plan._participant import Participant, current_rank, current_worker
from fastio.plan._windows import Run, Window, make_windows, permutation, shuffle_quality

__all__ = [
    "EpochCursor",
    "Part",
    "Participant",
    "Run",
    "Span",
    "Start",
    "Window",
    "assign_samples",
    "current_rank",
    "current_worker",
    "make_part",
    "make_windows",
    "permutation",
    "shard_order",
    "shuffle_quality",
]
