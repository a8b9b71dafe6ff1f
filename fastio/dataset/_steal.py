"""Running the segments a worker claims with ``balance="steal"``.

The fairness monitor decides which units (windows) of which worker's part
this worker reads (:class:`~fastio.fairness._steal.StealClaims`); this module
reads them, delivering each segment exactly as its owner would have (the
owner's windows and permutation), and keeps what it finished for the state:
the units done, and the unit it is in with the samples of it passed. Resume
is per unit: nothing delivered before the state was saved is delivered again,
nothing else is skipped, and the units nobody finished are claimed anew.
``batches()`` end a batch at each segment's end (a batch never mixes two
parts, whose positions differ), hence ``drop_last`` is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from fastio.plan._cursor import EpochCursor

__all__ = ["StealingRun", "check_steal_state"]


def check_steal_state(state: object) -> dict[str, Any]:
    """The ``"steal"`` part of a saved state, checked. Raises ValueError."""
    if not isinstance(state, dict) or not isinstance(state.get("done"), list):
        raise ValueError(f"the state's 'steal' part is malformed: {state!r}")
    current = state.get("current")
    if current is not None and (not isinstance(current, list) or len(current) != 3):
        raise ValueError(f"the state's 'steal' current unit is malformed: {current!r}")
    return {"done": [(int(o), int(w)) for o, w in state["done"]],
            "current": None if current is None else tuple(int(v) for v in current)}  # fmt: skip


class StealingRun:
    """One worker's iteration with stealing: ``unit_samples[w]`` are the sample
    counts of worker ``w``'s units, ``resume`` the checked steal state it
    continues (or None)."""

    def __init__(self, unit_samples: Sequence[Sequence[int]], resume: dict[str, Any] | None,
                 cursor: EpochCursor) -> None:  # fmt: skip
        self.starts = [np.cumsum([0, *counts]) for counts in unit_samples]
        self.done: list[tuple[int, int]] = list(resume["done"]) if resume else []
        self.resumed_unit: tuple[int, int, int] | None = resume["current"] if resume else None
        self.segment: tuple[int, int, int] | None = None  # owner, first and last unit read now
        self.cursor = cursor

    def state(self) -> dict[str, Any]:
        """Units finished, and the current one with the samples of it passed."""
        done = [list(unit) for unit in self.done]
        if self.segment is None:
            resumed = self.resumed_unit
            return {"done": done, "current": None if resumed is None else list(resumed)}
        owner, first, last = self.segment
        position = self.cursor.position
        unit = max(int(np.searchsorted(self.starts[owner], position, side="right")) - 1, first)
        done += [[owner, u] for u in range(first, min(unit, last + 1))]
        if unit > last:
            return {"done": done, "current": None}
        offset = position - int(self.starts[owner][unit])
        return {"done": done, "current": [owner, unit, offset]}

    def run(
        self,
        segments: Iterable[tuple[int, int, int, int]],
        read: Callable[[int, int, int], Iterator[Any]],
    ) -> Iterator[Any]:
        """The items of every segment: ``read(owner, position, stop)`` gives
        those of ``owner``'s part from ``position`` up to unit ``stop``."""
        for owner, first, last, offset in segments:
            self.resumed_unit = None
            self.segment = (owner, first, last)
            position = int(self.starts[owner][first]) + offset
            self.cursor.move_to(position)
            yield from read(owner, position, last + 1)
            self.done.extend((owner, unit) for unit in range(first, last + 1))
            self.segment = None
