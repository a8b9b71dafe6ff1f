"""The per-rank board in shared memory: one slot per DataLoader worker.

A fixed layout of float64 counters in a file under ``/dev/shm`` (a RAM-backed
tmpfs; the temporary folder where it is missing), mapped by every process of
the rank. Worker processes add to their own slot and read the shares the monitor
wrote for them; whichever process closes a window does so under an exclusive
``flock`` of the file, so judging never runs twice at once. Nothing is pickled
or queued: a forked worker inherits the mapping's name, a spawned one gets it
with the pickled dataset and maps the file by name.

Zeros are a valid empty board, so the file needs no initialisation and any
process may create it (``O_CREAT`` without ``O_EXCL``). Only the process that
made the monitor removes it; files of owners that died without cleaning up
(killed by SIGKILL) are removed by the next board made on the machine. Not
``multiprocessing.shared_memory``: its resource tracker would count every
worker's attach as a leak. Counters are written by one process each and read
without locks: a reader may see one counter a publish newer than the next,
which a window of many publishes does not notice.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import tempfile
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Board", "board_folder", "remove_board", "sweep_stale_boards"]

PREFIX = "fastio-fairness-"
MAX_WORKERS = 64
MAX_RANKS = 256
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

_SIZES = (HEADER, MAX_WORKERS * SLOT, MAX_RANKS * RANK_FIELDS, TIMELINE * TIMELINE_ROW)
_BYTES = 8 * sum(_SIZES)


def board_folder() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class Board:
    """The mapped board file at ``path`` (made if missing)."""

    def __init__(self, path: str) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size < _BYTES:
                os.ftruncate(fd, _BYTES)
            self._map = mmap.mmap(fd, _BYTES)
        finally:
            os.close(fd)
        values = np.frombuffer(self._map, np.float64)
        bounds = np.cumsum((0, *_SIZES))
        self.header = values[bounds[0] : bounds[1]]
        self.slots = values[bounds[1] : bounds[2]].reshape(MAX_WORKERS, SLOT)
        self.ranks = values[bounds[2] : bounds[3]].reshape(MAX_RANKS, RANK_FIELDS)
        self.timeline = values[bounds[3] : bounds[4]].reshape(TIMELINE, TIMELINE_ROW)
        del values

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[bool]:
        """Hold the board's lock if no other process does; yields whether it got it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def close(self) -> None:
        # The views hold the mapping's buffer: drop them before closing it.
        del self.header, self.slots, self.ranks, self.timeline
        # An iteration still running holds its slot: the mapping then goes when
        # that iteration does (no descriptor is held, the owner removes the file).
        with contextlib.suppress(BufferError):
            self._map.close()


def remove_board(path: str, owner: int) -> None:
    """Remove the board file, in its owner process only (a forked child that
    collects its copy of the monitor must not remove the parent's board)."""
    if os.getpid() == owner:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def sweep_stale_boards(folder: str) -> None:
    """Remove boards whose owner process is gone (it was killed before cleaning up)."""
    try:
        names = [name for name in os.listdir(folder) if name.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        owner = name[len(PREFIX) :].split("-", 1)[0]
        if not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
        except PermissionError:  # alive, another user's
            continue
