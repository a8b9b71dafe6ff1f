"""``balance="steal"``: DataLoader workers that are ahead take units of work
(windows) that a slower worker of the same rank has not started.

Each worker walks its own windows in order, claiming them in the
:class:`~fastio.fairness._claims.ClaimTable` before reading them, a run at a
time (guided self-scheduling: ``1/num_workers`` of what is left of its part,
read as one pipelined stream); when its own are done it claims the last half
of the unstarted windows of the worker with the most left, and delivers them
exactly as their owner would have (the owner's permutation). Windows partition
the rank's samples, and each is claimed once, so every sample is still
delivered exactly once per epoch; only which worker delivers it (and how many
each delivers) changes.

Resume is per unit: a worker's state lists the units it finished, and the unit
it is in with the samples of it already delivered. A resumed worker marks
these in a fresh table and waits until all its peers did the same before it
claims anything; then it finishes its current unit from where it stopped, and
the units nobody finished are claimed anew. Nothing delivered before the state
was saved is delivered again, nothing else is skipped. ``batches()`` end a
batch at the end of each run (its last batch may be short: a batch never mixes
two workers' parts, whose positions differ), hence ``drop_last`` is refused.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio.fairness import _board as b
from fastio.fairness._claims import ClaimTable

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fastio.dataset._dataset import Dataset, _Who

__all__ = ["Stealer", "check_steal_state"]


def check_steal_state(state: object) -> dict[str, Any]:
    """The ``"steal"`` part of a saved state, checked. Raises ValueError."""
    if not isinstance(state, dict) or not isinstance(state.get("done"), list):
        raise ValueError(f"the state's 'steal' part is malformed: {state!r}")
    current = state.get("current")
    if current is not None and (not isinstance(current, list) or len(current) != 3):
        raise ValueError(f"the state's 'steal' current unit is malformed: {current!r}")
    return {"done": [(int(o), int(w)) for o, w in state["done"]],
            "current": None if current is None else tuple(int(v) for v in current)}  # fmt: skip


class Stealer:
    """One worker's iteration of one epoch with stealing (see the module)."""

    def __init__(
        self,
        path: str,
        dataset: Dataset,
        epoch: int,
        who: _Who,
        resume: dict[str, Any] | None,
        iteration: int,
        slots: np.ndarray | None,
    ) -> None:
        self.path = path
        self.dataset = dataset
        self.epoch = epoch
        self.who = who
        self.resume = resume
        self.iteration = iteration
        self.slots = slots
        self.owners = [dataclasses.replace(who, worker=w) for w in range(who.num_workers)]
        self.windows = [dataset._windows(epoch, owner) for owner in self.owners]
        self.starts = [np.cumsum([0] + [w.count for w in ws]) for ws in self.windows]
        self.done: list[tuple[int, int]] = list(resume["done"]) if resume else []
        current = resume["current"] if resume else None
        self.resumed_unit: tuple[int, int, int] | None = current
        self.segment: tuple[int, int, int] | None = None  # owner, first and last unit read now
        self.units_stolen = 0

    def state(self) -> dict[str, Any]:
        """Units finished, and the current one with the samples of it passed."""
        done = [list(unit) for unit in self.done]
        if self.segment is None:
            resumed = self.resumed_unit
            return {"done": done, "current": None if resumed is None else list(resumed)}
        owner, first, last = self.segment
        position = self.dataset._position
        window = max(int(np.searchsorted(self.starts[owner], position, side="right")) - 1, first)
        done += [[owner, w] for w in range(first, min(window, last + 1))]
        if window > last:
            return {"done": done, "current": None}
        offset = position - int(self.starts[owner][window])
        return {"done": done, "current": [owner, window, offset]}

    def run(self, columnar: bool, batch_size: int, drop_last: bool) -> Iterator[Any]:
        if columnar and drop_last:
            raise ValueError(
                "batches(drop_last=True) with balance='steal' would drop rows at every unit's "
                "end: use drop_last=False, or balance='budget'"
            )
        me = self.who.worker
        table = ClaimTable(self.path, [len(ws) for ws in self.windows], me)
        try:
            table.join(_base_seed(), self.iteration, self.epoch, self.who.num_workers)
            resumed = self.resumed_unit
            table.register([*self.done, *([resumed[:2]] if resumed else [])])
            if self.resume is not None:
                table.wait_for_peers(self.who.num_workers)
            if resumed is not None:
                yield from self._segment(resumed[0], resumed[1], resumed[1], resumed[2],
                                         columnar, batch_size)  # fmt: skip
            window, own = 0, len(self.windows[me])
            while window < own:
                # Guided self-scheduling: units claimed together are read as one
                # stream (pipelined across windows; a stream per window would wait
                # one latency at each window's end): long runs while much is left,
                # short ones toward the end, when the others may need to take some.
                count = table.claim(window, -(-(own - window) // self.who.num_workers))
                if count:
                    yield from self._segment(me, window, window + count - 1, 0, columnar,
                                             batch_size)  # fmt: skip
                window += max(count, 1)
            while (segment := table.steal(self._account)) is not None:
                owner, first, last = segment
                self.units_stolen += last - first + 1
                yield from self._segment(owner, first, last, 0, columnar, batch_size)
        finally:
            table.close()

    def _segment(
        self, owner: int, first: int, last: int, offset: int, columnar: bool, batch_size: int
    ) -> Iterator[Any]:
        """Units ``first``..``last`` of ``owner``'s part, from sample ``offset`` of
        the first on; a batch never spans two segments (their positions are in
        different parts)."""
        from fastio.dataset._batching import rebatch

        dataset = self.dataset
        self.resumed_unit = None
        self.segment = (owner, first, last)
        position = int(self.starts[owner][first]) + offset
        dataset._position = position
        units = dataset._units(self.epoch, position, self.owners[owner], columnar, stop=last + 1)
        yield from rebatch(units, batch_size, False, dataset) if columnar else units
        self.done.extend((owner, window) for window in range(first, last + 1))
        self.segment = None

    def _account(self, owner: int, first: int, last: int) -> None:
        """Move the units' samples from their owner's share to this worker's on
        the board (under the table's lock: thieves of one owner take turns)."""
        if self.slots is None:
            return
        count = sum(window.count for window in self.windows[owner][first : last + 1])
        thief = self.slots[self.who.worker]
        thief[b.UNITS_STOLEN] += last - first + 1
        thief[b.SAMPLES_STOLEN] += count
        self.slots[owner, b.SAMPLES_GIVEN] += count


def _base_seed() -> int:
    """The DataLoader iterator's base seed: the same in all of its workers."""
    data = sys.modules["torch.utils.data"]
    info = data.get_worker_info()
    return int(info.seed) - int(info.id)
