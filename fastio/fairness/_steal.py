"""``balance="steal"``: which units of work (windows) each DataLoader worker
reads, decided through the claim table.

Each worker walks its own windows in order, claiming them in the
:class:`~fastio.fairness._claims.ClaimTable` before reading them, a run at a
time (guided self-scheduling: ``1/num_workers`` of what is left of its part,
read as one pipelined stream); when its own are done it claims the last half
of the unstarted windows of the worker with the most left. Windows partition
the rank's samples and each is claimed once, so every sample is still
delivered exactly once per epoch; only which worker delivers it changes. The
dataset runs the segments these claims hand out (:mod:`fastio.dataset._steal`)
and keeps what it finished in its state; a resumed worker registers that
here, and waits until its peers did too before it claims anything.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from fastio.fairness import _board as b
from fastio.fairness._claims import ClaimTable

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import numpy as np

    from fastio.plan._participant import Participant

__all__ = ["Segment", "StealClaims"]

Segment = tuple[int, int, int, int]
"""``(owner, first, last, offset)``: units ``first``..``last`` of worker
``owner``'s part, from sample ``offset`` of the first on."""


class StealClaims:
    """The segments one worker reads in one iteration (see the module).

    ``unit_samples[w]`` are the sample counts of worker ``w``'s units;
    ``done`` the units this worker finished before a resume, ``current`` the
    one it was in ``(owner, unit, samples delivered)``; ``resumed``: this
    iteration continues a saved one. ``slots`` (the board's, or None) count
    units and samples moved between workers.
    """

    def __init__(
        self,
        path: str,
        participant: Participant,
        epoch: int,
        iteration: int,
        unit_samples: Sequence[Sequence[int]],
        done: Sequence[tuple[int, int]],
        current: tuple[int, int, int] | None,
        resumed: bool,
        slots: np.ndarray | None,
    ) -> None:
        self.path = path
        self.participant = participant
        self.epoch = epoch
        self.iteration = iteration
        self.unit_samples = unit_samples
        self.done = list(done)
        self.current = current
        self.resumed = resumed
        self.slots = slots
        self.units_stolen = 0

    def segments(self) -> Iterator[Segment]:
        """The segments to read, in order, each claimed just before it is handed out."""
        me, workers = self.participant.worker, self.participant.num_workers
        table = ClaimTable(self.path, [len(units) for units in self.unit_samples], me)
        try:
            table.join(_base_seed(), self.iteration, self.epoch, workers)
            current = self.current
            table.register([*self.done, *([current[:2]] if current else [])])
            if self.resumed:
                table.wait_for_peers(workers)
            if current is not None:
                yield current[0], current[1], current[1], current[2]
            unit, own = 0, len(self.unit_samples[me])
            while unit < own:
                # Units claimed together are read as one stream (pipelined across
                # windows; a stream per window would wait one latency at each
                # window's end): long runs while much is left, short ones toward
                # the end, when the others may need to take some.
                count = table.claim(unit, -(-(own - unit) // workers))
                if count:
                    yield me, unit, unit + count - 1, 0
                unit += max(count, 1)
            while (stolen := table.steal(self._account)) is not None:
                owner, first, last = stolen
                self.units_stolen += last - first + 1
                yield owner, first, last, 0
        finally:
            table.close()

    def _account(self, owner: int, first: int, last: int) -> None:
        """Move the units' samples from their owner's share to this worker's on
        the board (under the table's lock: thieves of one owner take turns)."""
        if self.slots is None:
            return
        count = sum(self.unit_samples[owner][first : last + 1])
        thief = self.slots[self.participant.worker]
        thief[b.UNITS_STOLEN] += last - first + 1
        thief[b.SAMPLES_STOLEN] += count
        self.slots[owner, b.SAMPLES_GIVEN] += count


def _base_seed() -> int:
    """The DataLoader iterator's base seed: the same in all of its workers."""
    data = sys.modules["torch.utils.data"]
    info = data.get_worker_info()
    return int(info.seed) - int(info.id)
