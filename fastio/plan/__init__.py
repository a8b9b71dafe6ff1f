"""fastio.plan: which samples each rank and DataLoader worker reads in an
epoch (the assignment), in which order (shuffle windows), and where an
iteration stands (the epoch cursor). Pure functions of the plan's inputs:
no I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastio._lazy import exports

if TYPE_CHECKING:
    from fastio.plan._assignment import Span, assign_samples, shard_order
    from fastio.plan._cursor import EpochCursor, Start
    from fastio.plan._part import Part, make_part
    from fastio.plan._participant import Participant, current_rank, current_worker
    from fastio.plan._windows import Run, Window, make_windows, permutation, shuffle_quality

# Imported at first use: an unshuffled epoch needs no windows.
__getattr__ = exports(__name__, {
    "._assignment": ("Span", "assign_samples", "shard_order"),
    "._cursor": ("EpochCursor", "Start"),
    "._part": ("Part", "make_part"),
    "._participant": ("Participant", "current_rank", "current_worker"),
    "._windows": ("Run", "Window", "make_windows", "permutation", "shuffle_quality"),
})  # fmt: skip

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
