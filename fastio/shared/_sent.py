"""A dataset's state sent to a spawned process through a shared file.

multiprocessing's ``spawn`` and ``forkserver`` start methods (a DataLoader's
``multiprocessing_context``; ``forkserver`` is Linux's default from Python
3.14) write each worker's pickled arguments, the dataset among them, into a
pipe, and the parent waits until the whole pickle is written. The child reads
it only after it has imported its main module (torch, about a second), so a
pickle larger than the pipe's buffer (64 KiB) makes the parent wait for each
worker in turn: two workers gave their first batch after 2.2 s where one
with a smaller pickle took 1.1 s. A dataset of a few hundred shards is past
that (each shard's URL, stamps and offsets).

So while a process is being spawned, a large state goes into a file of the
shared folder (``/dev/shm``) and the pickle holds its name. Processes started
any other way (``fork``), and pickles made for anything else (a Ray task on
another machine, a user's own), hold the state itself. A file holds one state
(named by its digest, written once however many workers take it); the
dataset removes its files when it is closed or collected, and at exit, and
files whose owner died are swept like the package's others.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import weakref
from multiprocessing import context, reduction
from typing import TYPE_CHECKING, Any

from fastio.shared._mapped import shared_path

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["SENT", "SentStates", "received"]

KIND = "state"
SENT = "_fastio_state_file"
"""The key of a state that was sent through a file: the file's path."""
_THROUGH_FILE = 32 << 10  # smaller states go in the pickle itself
_KEPT = 4  # files a dataset keeps (the latest states), for workers still starting


class SentStates:
    """The files one dataset's states were sent through."""

    def __init__(self) -> None:
        self._paths: dict[str, str] = {}  # digest -> file, oldest first
        self._owner = os.getpid()  # a forked child's copy removes none of them
        weakref.finalize(self, _remove, self._paths.values(), self._owner)

    def state(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state``, or where a process is being spawned and its pickle is
        large, ``{SENT: path}`` of the file that holds that pickle (the state
        itself where the file cannot be written: a full ``/dev/shm``)."""
        if context.get_spawning_popen() is None:
            return state
        # The pickler the child's arguments go through (file descriptors and
        # locks are handed over as they would be in the pipe).
        data = bytes(reduction.ForkingPickler.dumps(state))
        if len(data) < _THROUGH_FILE:
            return state
        digest = hashlib.blake2b(data, digest_size=16).hexdigest()
        path = self._paths.get(digest)
        if path is None or not os.path.exists(path):
            path = shared_path(KIND)
            try:
                _write(path, data)
            except OSError:
                return state
            self._paths[digest] = path
            while len(self._paths) > _KEPT:
                _remove([self._paths.pop(next(iter(self._paths)))], self._owner)
        return {SENT: path}

    def close(self) -> None:
        _remove(self._paths.values(), self._owner)
        if os.getpid() == self._owner:
            self._paths.clear()


def received(state: dict[str, Any]) -> dict[str, Any]:
    """The state a process was sent (see :meth:`SentStates.state`). Raises
    FileNotFoundError naming the file where the sender removed it first
    (its dataset closed before this process started)."""
    path = state.get(SENT)
    if path is None:
        return state
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        raise FileNotFoundError(
            errno.ENOENT, "the dataset state sent to this process is gone: its dataset was "
            "closed (or collected) before the process started", path,
        ) from None  # fmt: skip
    loaded: dict[str, Any] = reduction.ForkingPickler.loads(data)
    return loaded


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb", closefd=False) as file:
            file.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        os.close(fd)


def _remove(paths: Iterable[str], owner: int) -> None:
    if os.getpid() != owner:
        return
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
