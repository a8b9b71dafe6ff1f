"""The per-rank board in shared memory: one slot per DataLoader worker.

A fixed layout of float64 counters in a shared file (:mod:`fastio.shared`),
mapped by every process of the rank. Worker processes add to their own slot
and read the shares the monitor wrote for them; whichever process closes a
window does so under the file's exclusive lock, so judging never runs twice at
once. Only the process that made the monitor removes it. Counters are written
by one process each and read without locks: a reader may see one counter a
publish newer than the next, which a window of many publishes does not notice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fastio.shared._mapped import SharedArray

if TYPE_CHECKING:
    import contextlib

__all__ = ["KIND", "Board"]

KIND = "fairness"
"""The board's kind of shared file (see :mod:`fastio.shared`)."""
MAX_WORKERS = 64
TIMELINE = 128  # windows kept for the report
LATENCY_BUCKETS = 32

# Header fields.
WINDOW_START, WINDOW_INDEX, JAIN, RANK, WORLD_SIZE, RANK_JAIN = range(6)
HEADER = 16

# Slot fields: counters the worker adds to, gauges it sets, then the monitor's state.
(PID, ACTIVE, SAMPLES, BYTES, BUSY, WAIT, ASKED, REQUESTS, INFLIGHT_BYTES, OUTSTANDING, WEIGHT,
 LAST_SAMPLES, LAST_BUSY, LAST_WAIT, STARVED_STREAK, GOOD_STREAK, FLAGGED, RATE, RELATIVE_RATE,
 READINESS, JUDGED) = range(21)  # fmt: skip
# balance="steal": units this worker took from others, their samples, and the
# samples others took from this worker's part (written by the thieves).
UNITS_STOLEN, SAMPLES_STOLEN, SAMPLES_GIVEN = range(21, 24)
LATENCY = 32  # LATENCY_BUCKETS counters from here
SLOT = LATENCY + LATENCY_BUCKETS

# Rank table: what this rank last saw of each rank (from the exchange).
(R_WINDOW, R_SAMPLES, R_RATE, R_READINESS, R_STARVED_STREAK, R_GOOD_STREAK, R_FLAGGED,
 R_RELATIVE_RATE) = range(8)  # fmt: skip
RANK_FIELDS = 8

# Timeline rows: the window's end time and Jain's index, then per worker these fields.
T_TIME, T_JAIN = 0, 1
T_RATE, T_READINESS, T_FLAGGED, T_OUTSTANDING = range(4)
T_PER_WORKER = 4
TIMELINE_ROW = 2 + MAX_WORKERS * T_PER_WORKER

_SIZES = (HEADER, MAX_WORKERS * SLOT, TIMELINE * TIMELINE_ROW)
_FIXED = sum(_SIZES)  # then the rank table, a row per rank


class Board:
    """The mapped board file at ``path`` (made if missing). The rank table
    grows with the world size it is asked for (:meth:`ranks_for`): a board
    holds every rank's last summary at any world size."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._array = SharedArray(path, np.float64, _FIXED + RANK_FIELDS)
        self._map_views()

    def _map_views(self) -> None:
        values = self._array.values
        bounds = np.cumsum((0, *_SIZES))
        self.header = values[bounds[0] : bounds[1]]
        self.slots = values[bounds[1] : bounds[2]].reshape(MAX_WORKERS, SLOT)
        self.timeline = values[bounds[2] : bounds[3]].reshape(TIMELINE, TIMELINE_ROW)
        rows = (len(values) - _FIXED) // RANK_FIELDS
        self.ranks = values[_FIXED : _FIXED + rows * RANK_FIELDS].reshape(rows, RANK_FIELDS)

    def ranks_for(self, world_size: int) -> np.ndarray:
        """The rank table, with a row for each of ``world_size`` ranks at least."""
        if world_size > len(self.ranks):
            self._array.ensure(_FIXED + RANK_FIELDS * world_size)
            self._map_views()  # views held elsewhere (a slot) still see the same file
        return self.ranks

    def exclusive(self) -> contextlib.AbstractContextManager[bool]:
        """Hold the board's lock if no other process does; yields whether it got it."""
        return self._array.locked(wait=False)

    def close(self) -> None:
        # The views hold the mapping's buffer: drop them before closing it. An
        # iteration still running holds its slot: the mapping then goes when
        # that iteration does (the owner removes the file).
        del self.header, self.slots, self.ranks, self.timeline
        self._array.close()
