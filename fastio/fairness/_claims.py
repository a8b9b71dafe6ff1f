"""The claim table of ``balance="steal"``: which worker took which unit of work.

A unit is one window (see :mod:`fastio.plan._windows`) of one DataLoader worker's
part of the rank's epoch. The table is a file of int64 next to the board
(``<board>.claims`` under ``/dev/shm``), mapped by the rank's workers: a
header, then one entry per unit, 0 while unclaimed and ``1 + worker`` once
claimed. Every change happens under an exclusive ``flock`` of the file, so a
claim is a compare-and-swap: each unit goes to exactly one worker. A lock per
window (megabytes of samples) costs nothing next to reading it.

One table serves one iteration of a DataLoader (a *generation*), named by the
loader's base seed (the same in all of its workers, new for every iterator)
and how many iterations this worker process ran (persistent workers keep their
seed). The first worker of a generation to arrive resets the table; a worker
that finds its own place already taken by another process with the same name
(a loader that restored its base seed from a saved state) resets it too. A
worker whose place another process took since it joined belongs to an older
iteration (one whose loader is still alive: its workers go on with the batches
they were asked for): it must not change the newer iteration's table, so its
next use of the table raises instead.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING

import numpy as np

from fastio.shared._mapped import SharedArray

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

__all__ = ["ClaimTable"]

MAX_WORKERS = 64
# Header fields, then one pid per worker (who joined this generation).
SEED, ITERATION, EPOCH, NUM_WORKERS, REGISTERED, UNITS = range(6)
PIDS = 8
HEADER = PIDS + MAX_WORKERS
# How long resumed workers wait for their peers to say what they delivered.
BARRIER_SECONDS = 120.0


class ClaimTable:
    """The table at ``path`` for one iteration of worker ``worker``, whose
    workers' parts have ``windows[w]`` units each (opened with :meth:`join`)."""

    def __init__(self, path: str, windows: Sequence[int], worker: int) -> None:
        self.path = path
        self.worker = worker
        self.offsets = np.concatenate([[HEADER], HEADER + np.cumsum(windows)]).astype(np.int64)
        self._array = SharedArray(path, np.int64, HEADER)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[np.ndarray]:
        with self._array.locked():
            self._array.ensure(int(self.offsets[-1]))
            yield self._array.values

    def join(self, seed: int, iteration: int, epoch: int, num_workers: int) -> None:
        """Take this worker's place in the generation ``(seed, iteration)``,
        resetting the table if it holds another one."""
        with self._locked() as values:
            pids = values[PIDS : PIDS + MAX_WORKERS]
            same = (values[SEED], values[ITERATION]) == (seed, iteration)
            taken = pids[self.worker] not in (0, os.getpid())
            if not same or taken or values[UNITS] != self.offsets[-1] - HEADER:
                values[:] = 0
                values[SEED], values[ITERATION], values[EPOCH] = seed, iteration, epoch
                values[NUM_WORKERS], values[UNITS] = num_workers, self.offsets[-1] - HEADER
            elif values[EPOCH] != epoch or values[NUM_WORKERS] != num_workers:
                raise ValueError(
                    f"DataLoader workers of one iteration disagree: epoch {values[EPOCH]} with "
                    f"{values[NUM_WORKERS]} workers, and epoch {epoch} with {num_workers} (call "
                    "set_epoch in the main process, before iterating)"
                )
            pids[self.worker] = os.getpid()

    def _check_place(self, values: np.ndarray) -> None:
        """Raise RuntimeError when another process took this worker's place
        since it joined (see the module)."""
        if values[PIDS + self.worker] != os.getpid():
            raise RuntimeError(
                f"balance='steal': another iteration over this dataset took DataLoader worker "
                f"{self.worker}'s place in the claim table (a loader started, or resumed from a "
                "saved state, while this one was still running): this iteration stops here"
            )

    def register(self, units: Iterable[tuple[int, int]]) -> None:
        """Mark ``units`` (owner, window) as this worker's (delivered before a
        resume), and count this worker as registered."""
        with self._locked() as values:
            self._check_place(values)
            for owner, window in units:
                values[self.offsets[owner] + window] = 1 + self.worker
            values[REGISTERED] += 1

    def wait_for_peers(self, num_workers: int) -> None:
        """Block until all ``num_workers`` registered (a resumed iteration must
        know every unit delivered before it claims any). Raises RuntimeError
        after :data:`BARRIER_SECONDS`."""
        deadline = time.monotonic() + BARRIER_SECONDS
        while True:
            with self._locked() as values:
                self._check_place(values)
                if values[REGISTERED] >= num_workers:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"balance='steal': resumed DataLoader worker {self.worker} waited "
                    f"{BARRIER_SECONDS:.0f} s for its {num_workers - 1} peers to load their state "
                    "(resume every worker from one StatefulDataLoader state)"
                )
            time.sleep(0.002)

    def claim(self, first: int, limit: int) -> int:
        """Claim this worker's own units ``first``.. up to ``limit`` of them,
        stopping at one another worker has; returns how many it claimed."""
        with self._locked() as values:
            self._check_place(values)
            entries = values[self.offsets[self.worker] : self.offsets[self.worker + 1]]
            count = 0
            while count < limit and first + count < len(entries) and not entries[first + count]:
                entries[first + count] = 1 + self.worker
                count += 1
            return count

    def steal(self, account: Callable[[int, int, int], None]) -> tuple[int, int, int] | None:
        """Claim unstarted units of the worker with the most of them left (the
        slowest): the last half of them (those of it that are
        consecutive), at the end of its part, so that its own next units stay
        its own and the rest is split between the two. Calls ``account(owner,
        first, last)`` under the lock and returns the same; None when none is
        left."""
        with self._locked() as values:
            self._check_place(values)
            best, left = -1, 0
            for owner in range(len(self.offsets) - 1):
                if owner == self.worker:
                    continue
                entries = values[self.offsets[owner] : self.offsets[owner + 1]]
                unclaimed = int(np.count_nonzero(entries == 0))
                if unclaimed > left:
                    best, left = owner, unclaimed
            if best < 0:
                return None
            entries = values[self.offsets[best] : self.offsets[best + 1]]
            last = first = int(np.flatnonzero(entries == 0)[-1])
            limit = -(-left // 2)
            while first > 0 and last - first + 1 < limit and not entries[first - 1]:
                first -= 1
            entries[first : last + 1] = 1 + self.worker
            account(best, first, last)
            return best, first, last

    def close(self) -> None:
        self._array.close()
