"""EpochLedger: which epoch a pass over the dataset is, agreed by every process of a rank.

Each new pass over the dataset (a new ``iter()``) is the next epoch, without
the user's help: in the main process, in DataLoader workers (which get a fresh
copy of the dataset each pass, so they cannot count passes themselves), and in
persistent workers (which never see the main process's ``set_epoch``). The
ledger is a small shared file (:mod:`fastio.shared`) the dataset names when it
is made; every process of the rank maps it.

A pass is named by a *generation key*: the DataLoader iterator's base seed
(the same in all its workers, new for each iterator) and how many passes this
process has begun (persistent workers keep their seed); in a process without
workers, its pid. The first process of a generation takes the ledger's next
epoch (or the epoch of a state it resumes) and moves the next on by one; the
others of the generation read the same epoch. ``set_epoch`` sets the next
epoch; a worker that finds its own place in a generation taken by another
process (an iterator that restored its base seed from a saved state) starts a
new generation, as the claim table does.

Every rank counts its passes the same way, so the epochs agree across ranks.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio.shared._mapped import OwnedFile, SharedArray, remove_owned

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["EpochLedger"]

KIND = "epochs"
MAX_WORKERS = 1024
# Fields: the next epoch, the running generation (key, epoch, whether it
# resumes a state), the last resume announced and whether a generation took it.
(NEXT, GEN_SEED, GEN_ITERATION, GEN_EPOCH, GEN_RESUMED, RESUME_TOKEN, RESUME_TAKEN, STARTED,
 FIRST) = range(9)  # fmt: skip
PIDS = 16  # one pid per worker of the running generation from here
LENGTH = PIDS + MAX_WORKERS


class EpochLedger(OwnedFile):
    """The epochs of one dataset's passes (see the module)."""

    kind = KIND

    def regrouped(self, group: int) -> Self:
        """The ledger of the processes of ``group`` (see
        :meth:`OwnedFile.regrouped`), whose next pass begins at this one's
        next epoch."""
        made = super().regrouped(group)
        if self._array is not None or os.path.exists(self._path):
            with contextlib.suppress(OSError):
                made._kept = np.array(self._values().values[:PIDS])
        made._passes = 0
        return made

    def _made(self) -> None:
        self._array: SharedArray | None = None
        self._passes = 0  # begun in this process
        self._kept: np.ndarray | None = None  # the fields, kept by close() for reuse
        super()._made()

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_passes": self._passes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        passes = state.pop("_passes", 0)
        super().__setstate__(state)
        self._passes = passes

    def _values(self) -> SharedArray:
        if self._array is None:
            self._array = SharedArray(self._path, np.int64, LENGTH)
            kept, self._kept = self._kept, None
            if kept is not None and not self._array.values[STARTED]:
                self._array.values[:PIDS] = kept  # made again after close(): go on counting
        return self._array

    def set_next(self, epoch: int) -> None:
        """The next pass (in any process of the rank) reads ``epoch``; an
        announced resume no longer applies."""
        shared = self._values()
        with shared.locked():
            shared.values[NEXT] = epoch
            shared.values[RESUME_TOKEN] = 0

    def announce_resume(self, token: int) -> None:
        """A state was loaded here (token ``token``): the next generation resumes it."""
        shared = self._values()
        with shared.locked():
            shared.values[RESUME_TOKEN] = token
            shared.values[RESUME_TAKEN] = 0

    def current(self) -> int | None:
        """The epoch of the running (or last) pass, None before any."""
        values = self._values().values
        return int(values[GEN_EPOCH]) if values[STARTED] else None

    def next_epoch(self) -> int:
        return int(self._values().values[NEXT])

    def first_epoch(self) -> int:
        """The epoch of the first pass any process of the rank began (or will
        begin, before any): where a never-indexed dataset streams."""
        values = self._values().values
        return int(values[FIRST]) if values[STARTED] else int(values[NEXT])

    def begin(self, worker: int, resume: tuple[int, int, bool] | None) -> tuple[int, bool]:
        """Begin a pass in this process as DataLoader worker ``worker`` (0 without
        workers): its epoch, and whether it resumes. ``resume`` is a pending
        ``(token, epoch, loaded_here)``: a state loaded in this process applies
        to its next pass; one inherited from the process that loaded it
        applies to the first generation after the load only."""
        self._passes += 1
        key = (_base_seed(), self._passes)
        shared = self._values()
        pid = os.getpid()
        with shared.locked():
            values = shared.values
            pids = values[PIDS : PIDS + MAX_WORKERS]
            same = (int(values[GEN_SEED]), int(values[GEN_ITERATION])) == key and bool(
                values[STARTED])  # fmt: skip
            if same and pids[worker] not in (0, pid):
                same = False  # a new iterator that restored the old one's seed
            applies = False
            if resume is not None:
                token, _, loaded_here = resume
                announced = token == int(values[RESUME_TOKEN])
                if loaded_here:
                    applies = True
                elif same:
                    applies = announced and bool(values[GEN_RESUMED])
                else:
                    applies = announced and not values[RESUME_TAKEN]
            if not same:
                pids[:] = 0
                values[GEN_SEED], values[GEN_ITERATION] = key
                first = not values[STARTED]
                values[STARTED] = 1
                if applies:
                    assert resume is not None
                    values[GEN_EPOCH], values[GEN_RESUMED] = resume[1], 1
                    values[RESUME_TAKEN] = 1
                    values[NEXT] = resume[1] + 1
                else:
                    values[GEN_EPOCH], values[GEN_RESUMED] = values[NEXT], 0
                    values[NEXT] += 1
                if first:
                    values[FIRST] = values[GEN_EPOCH]
            elif applies and resume is not None and resume[1] != values[GEN_EPOCH]:
                raise ValueError(
                    f"DataLoader workers of one pass resume different epochs: {resume[1]} and "
                    f"{int(values[GEN_EPOCH])} (load every worker's state from one save)"
                )
            pids[worker] = pid
            return int(values[GEN_EPOCH]), applies

    def close(self) -> None:
        """Unmap; the owner also removes the file (made again, with the same
        next epoch, if the dataset is used again)."""
        if self._array is not None:
            self._kept = self._array.values[:PIDS].copy()
            self._array.close()
            self._array = None
        remove_owned(self._path, self._owner)


def _base_seed() -> int:
    """The DataLoader iterator's base seed in a worker (the same in all of
    its workers); in a process without workers, a number of its own."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    if info is None:
        return -os.getpid()
    return int(info.seed) - int(info.id)
