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
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio.shared._mapped import OwnedFile, SharedArray, remove_owned

if TYPE_CHECKING:
    from collections.abc import Iterator

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

    def __init__(self) -> None:
        super().__init__()
        self._private = True
        _private.add(self)

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
        self._array: SharedArray | _InMemory | None = None
        self._private = False  # whether the fields are to live in this process only
        self._passes = 0  # begun in this process
        self._kept: np.ndarray | None = None  # the fields, kept by close() for reuse
        super()._made()

    def __getstate__(self) -> dict[str, Any]:
        self.share()  # the process that unpickles it maps the file
        return {**super().__getstate__(), "_passes": self._passes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        passes = state.pop("_passes", 0)
        super().__setstate__(state)
        self._passes = passes

    def _values(self) -> SharedArray | _InMemory:
        if self._array is None:
            made = _InMemory() if self._private else SharedArray(self._path, np.int64, LENGTH)
            kept, self._kept = self._kept, None
            if kept is not None and not made.values[STARTED]:
                made.values[: len(kept)] = kept  # made again after close(), or shared: go on
            self._array = made
        return self._array

    @contextlib.contextmanager
    def _locked(self) -> Iterator[np.ndarray]:
        """The fields, held alone: under the file's lock, or in memory under
        a thread lock, moved to the file meanwhile by a fork (then they are
        taken again, from the file)."""
        while True:
            fields = self._values()
            with fields.locked():
                if fields is self._array:
                    yield fields.values
                    return

    def share(self) -> None:
        """Move the fields from this process's memory to the shared file,
        where other processes find them (a pickled ledger, a fork's child).
        Raises OSError where the file cannot be made; the next use asks again."""
        if not self._private:
            return
        memory = self._array
        with memory.lock if isinstance(memory, _InMemory) else contextlib.nullcontext():
            self._private = False
            _private.discard(self)
            if isinstance(memory, _InMemory):
                self._array, self._kept = None, memory.values.copy()
                self._values()  # the file, with what was kept

    def set_next(self, epoch: int) -> None:
        """The next pass (in any process of the rank) reads ``epoch``; an
        announced resume no longer applies."""
        with self._locked() as values:
            values[NEXT] = epoch
            values[RESUME_TOKEN] = 0

    def announce_resume(self, token: int) -> None:
        """A state was loaded here (token ``token``): the next generation resumes it."""
        with self._locked() as values:
            values[RESUME_TOKEN] = token
            values[RESUME_TAKEN] = 0

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
        pid = os.getpid()
        with self._locked() as values:
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


class _InMemory:
    """The ledger's fields while no other process shares them, with what
    :class:`SharedArray` offers of them: ``values`` and ``locked()``."""

    def __init__(self) -> None:
        self.values = np.zeros(LENGTH, np.int64)
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def locked(self) -> Iterator[bool]:
        with self.lock:
            yield True

    def close(self) -> None:
        pass


# Ledgers whose fields live in this process's memory: moved to their files
# before it forks, so that the child shares them.
_private: weakref.WeakSet[EpochLedger] = weakref.WeakSet()


def _share_before_fork() -> None:
    for ledger in list(_private):
        # A file that cannot be made is asked for again at the ledger's next
        # use, in the parent and the child, which raise its error then.
        with contextlib.suppress(OSError):
            ledger.share()


os.register_at_fork(before=_share_before_fork)


def _base_seed() -> int:
    """The DataLoader iterator's base seed in a worker (the same in all of
    its workers); in a process without workers, a number of its own."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    if info is None:
        return -os.getpid()
    return int(info.seed) - int(info.id)
