"""Payloads handed from DataLoader workers to the main process through shared memory.

A DataLoader worker's batches reach the main process pickled onto one pipe:
every payload byte is copied into the pickle, pushed through the pipe 64 KiB
at a time, read back and copied out of the pickle again, and the main process
(one core, which also trains) does half of that work. torch tensors skip it
(their storage moves to shared memory), samples of bytes and Arrow batches do
not. So each worker owns a *ring*: a file in /dev/shm it maps whole. When the
worker's queue pickles a payload of at least :data:`MIN_HANDED` bytes (in
multiprocessing's ``ForkingPickler`` only: ``pickle.dumps`` is unchanged),
the payload is copied into the ring and only ``(file, position, length)``
travels; the main process reads it back with one ``pread`` into the object the
in-process path gives (``bytes``, a ``pyarrow.RecordBatch``) and advances the
ring's read mark, which frees the space. The main process reads a worker's
payloads in the order the worker pickled them (one queue, in order), so the
ring needs no more bookkeeping than that mark. A payload of at least
:data:`MIN_APART` bytes that does not fit (larger than the ring, or the main
process behind by a whole ring: a DataLoader prefetches several batches of
tens of MiB) goes in a file of its own, which the main process maps and
unlinks: an Arrow batch is read from that mapping in place, with no copy on
the main process's side. A smaller one is pickled as before: nothing ever
waits.

Release, on every path: the main process unlinks the file when it first reads
from it (both keep it open; the memory goes when both have closed it), a worker
empties its ring as it exits (unless a payload is still being written into it:
then the memory goes with the process), the main process closes rings whose worker is gone
when it meets a new one, and files of workers killed before the main process
read from them are swept by the next process that names a ring, and by the
main process as it exits (:func:`fastio.shared.shared_path`): its exit stops
the workers of a loader still iterating with SIGTERM, before their own
clean-up. A payload's own file is unlinked by the
main process as it maps it (the memory goes with the batch read from it), or,
never read (the loader dropped), by its worker as it exits.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import threading
from multiprocessing import util
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio.shared._heap import keep_heap
from fastio.shared._mapped import owner_of, remove_owned, shared_path

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MIN_HANDED", "HandedBytes", "hand_off"]

MIN_HANDED = 16 << 10  # smaller payloads pickle faster than a ring write and a pread
# A file of its own costs a few system calls on each side: worth it for a
# payload that would otherwise cross the pipe 64 KiB at a time.
MIN_APART = 1 << 20
# How long a worker's exit waits for a payload's file being written (seconds).
_EXIT_WAIT = 10.0
_HEADER = 4096  # the read mark (int64) in the first page; payloads after it
_ALIGN = 64  # payload starts, so Arrow buffers read back are aligned
_MARK = struct.Struct("=q")  # the read mark as the worker's int64 view of it reads it
KIND = "handoff"


class HandedBytes(bytes):
    """``bytes`` that a DataLoader worker's queue hands to the main process
    through the worker's ring (which gets plain ``bytes``). Everything else
    sees plain bytes: it adds no behaviour but its pickling there."""

    __slots__ = ()


class _Ring:
    """A worker's ring: ``capacity`` bytes after a header page, written at
    ``head`` (a position that only grows; the file offset is it modulo the
    capacity), read by the main process up to the mark in the header."""

    def __init__(self, capacity: int) -> None:
        self.owner = os.getpid()
        self.path = shared_path(KIND)
        self.capacity = capacity
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, _HEADER + capacity)
            self.map = mmap.mmap(fd, _HEADER + capacity)
        except BaseException:
            os.close(fd)
            remove_owned(self.path, self.owner)
            raise
        self.fd = fd
        self.read_mark = np.frombuffer(self.map, np.int64, 1)
        self.head = 0
        self.floor = 0  # where the ring last went back to its start: all before it read
        util.Finalize(self, self.close, exitpriority=10)

    def reserve(self, length: int) -> int | None:
        """The position of ``length`` free bytes (taken), or None if the main
        process has not read enough yet.

        Back to the ring's start whenever the main process has read all of
        it, rather than on to its end: where the main process keeps up, the
        pages written are then those one batch needs, not the whole capacity.
        Else on round the ring. (Going back as soon as the main process had
        read the start's first bytes left room only for what it had read by
        then, ahead of what it had not: the ring was full at once, and most
        payloads were pickled.)"""
        read_mark = max(int(self.read_mark[0]), self.floor)
        if read_mark >= self.head:  # all read: the ring is empty
            lap = -(-self.head // self.capacity) * self.capacity
            # What the jump skips counts as read: the main process marks
            # nothing until it reads this payload.
            self.floor = lap
            self.head = lap + length
            return lap
        start = -(-self.head // _ALIGN) * _ALIGN
        offset = start % self.capacity
        if offset + length > self.capacity:  # no room before the end: wrap around
            start += self.capacity - offset
        if start + length - read_mark > self.capacity:
            return None
        self.head = start + length
        return start

    def view(self, start: int, length: int) -> memoryview:
        offset = _HEADER + start % self.capacity
        return memoryview(self.map)[offset : offset + length]

    def close(self) -> None:
        """Free the pages (the main process may still hold the file open), and
        remove the file if the main process never read from it."""
        if self.fd < 0:
            return
        self.read_mark = np.zeros(1, np.int64)
        try:
            self.map.close()
        except BufferError:
            # A view is still held: a batch being pickled on the result
            # queue's feeder thread while the worker exits. Cutting the file
            # now would kill that write with SIGBUS; its pages go with the
            # process instead.
            pass
        else:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
        os.close(self.fd)
        self.fd = -1
        remove_owned(self.path, self.owner)


class _Apart:
    """Files of this worker's payloads that did not fit its ring, each written
    whole (by ``write``, not through a mapping: an exit cannot cut a write
    short into a SIGBUS) and unlinked by the main process as it reads it.
    The ones still there when the worker exits were never read: removed then,
    and payloads pickled from then on (a queue's feeder thread may still be
    pickling)."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.paths: set[str] = set()
        self.closed = threading.Event()  # set by the exit, seen by the feeder thread
        # Held while a file is made and written: the exit waits for it, because
        # a DataLoader worker does not join its queue's feeder thread, which
        # would otherwise leave a file half written, and there, behind it.
        self.writing = threading.Lock()
        util.Finalize(self, self.close, exitpriority=10)

    def write(self, fill: Callable[[int], None]) -> str | None:
        """The path of a new file that ``fill`` wrote (given a descriptor open
        for writing), or None: the worker is exiting, or the file could not be
        made or written (/dev/shm full), and the payload is pickled instead.
        A failed pickle would lose the batch, and the main process would wait
        for it for ever."""
        with self.writing:
            if self.closed.is_set():
                return None
            # The main process unlinked the ones it read: what is left is in flight.
            self.paths = {path for path in self.paths if os.path.exists(path)}
            path = shared_path(KIND)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except OSError:
                return None
            self.paths.add(path)
            try:
                fill(fd)
            except OSError:
                remove_owned(path, self.owner)
                return None
            finally:
                os.close(fd)
            if self.closed.is_set():  # the exit is waiting to clean up: pickle it
                remove_owned(path, self.owner)
                self.paths.discard(path)
                return None
            return path

    def close(self) -> None:
        self.closed.set()
        # A write under way ends first (bounded: a stuck one must not hold the exit).
        acquired = self.writing.acquire(timeout=_EXIT_WAIT)
        try:
            for path in list(self.paths):
                remove_owned(path, self.owner)
            self.paths.clear()
        finally:
            if acquired:
                self.writing.release()


class _Handoff:
    """This worker process's ring, made at its first payload, and the files of
    payloads that do not fit it."""

    capacity = 0
    ring: _Ring | None = None
    apart: _Apart | None = None

    def reserve(self, length: int) -> tuple[_Ring, int] | None:
        if length < MIN_HANDED or length > self.capacity:
            return None
        ring = self.ring
        if ring is None or ring.owner != os.getpid() or ring.capacity != self.capacity:
            try:
                ring = self.ring = _Ring(self.capacity)  # the first, or after a fork
            except OSError:  # no shared memory to be had: pickle, rather than lose the batch
                self.capacity = 0
                return None
        start = ring.reserve(length)
        return None if start is None else (ring, start)

    def file_of_its_own(self, length: int, fill: Callable[[int], None]) -> str | None:
        """A file that ``fill`` wrote a payload the ring did not take into
        (None: pickle it)."""
        if length < MIN_APART or not self.capacity:
            return None
        apart = self.apart
        if apart is None or apart.owner != os.getpid():
            apart = self.apart = _Apart()  # the first, or after a fork
        return apart.write(fill)


_handoff = _Handoff()


def hand_off(capacity: int, arrow: bool = False) -> None:
    """In a DataLoader worker: hand payloads (:class:`HandedBytes`; with
    ``arrow``, Arrow record batches too) to the main process through a ring of
    ``capacity`` bytes (0: pickle them as torch does)."""
    _handoff.capacity = capacity
    ForkingPickler.register(HandedBytes, _reduce_bytes)
    if arrow:
        import pyarrow as pa

        ForkingPickler.register(pa.RecordBatch, _reduce_record_batch)


def _reduce_bytes(payload: HandedBytes) -> tuple[Any, ...]:
    taken = _handoff.reserve(len(payload))
    if taken is not None:
        ring, start = taken
        ring.view(start, len(payload))[:] = payload
        return _bytes_from_ring, (ring.path, start, len(payload))

    def fill(fd: int) -> None:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]

    path = _handoff.file_of_its_own(len(payload), fill)
    if path is None:
        return bytes, (bytes(payload),)
    return _bytes_apart, (path, len(payload))


def _reduce_record_batch(batch: Any) -> tuple[Any, ...]:
    import pyarrow as pa

    measure = pa.MockOutputStream()
    _write_stream(measure, batch)
    length = measure.size()
    taken = _handoff.reserve(length)
    if taken is not None:
        ring, start = taken
        _write_stream(pa.FixedSizeBufferWriter(pa.py_buffer(ring.view(start, length))), batch)
        return _record_batch_from_ring, (ring.path, start, length)

    def fill(fd: int) -> None:
        with open(fd, "wb", buffering=0, closefd=False) as sink:
            _write_stream(pa.PythonFile(sink, mode="w"), batch)

    path = _handoff.file_of_its_own(length, fill)
    if path is None:
        return batch.__reduce__()  # type: ignore[no-any-return]
    return _record_batch_apart, (path, length)


def _write_stream(sink: Any, batch: Any) -> None:
    import pyarrow as pa

    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)


# ---- the main process ----------------------------------------------------------------


class _Attached:
    """A worker's ring as the main process reads it: the descriptor, and the
    header page mapped for the read mark."""

    def __init__(self, path: str) -> None:
        self.owner = owner_of(path)
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        self.capacity = os.fstat(self.fd).st_size - _HEADER
        # From now on the open descriptors keep it: no path left to leak.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def close(self) -> None:
        os.close(self.fd)

    def read(self, start: int, length: int) -> bytes:
        """The payload at ``start`` (one copy, into the bytes), marked read."""
        offset = _HEADER + start % self.capacity
        payload = os.pread(self.fd, length, offset)
        self._check(len(payload), length, offset)
        self._mark(start + length)
        return payload

    def read_into(self, target: Any, start: int, length: int) -> None:
        """Copy the payload at ``start`` into ``target``, marked read."""
        offset = _HEADER + start % self.capacity
        self._check(os.preadv(self.fd, [target], offset), length, offset)
        self._mark(start + length)

    def _mark(self, position: int) -> None:
        # Written, not stored through a mapping: an exiting worker empties
        # its file, and a store into a mapped page past the end is SIGBUS.
        os.pwrite(self.fd, _MARK.pack(position), 0)

    def _check(self, got: int, length: int, offset: int) -> None:
        if got != length:  # its worker emptied it: it was killed or told to exit
            raise BrokenPipeError(
                f"a DataLoader worker's hand-off ring ended early: {got} of {length} bytes "
                f"at offset {offset} (its worker, pid {self.owner}, exited)"
            )


_attached: dict[str, _Attached] = {}


def _ring(path: str) -> _Attached:
    ring = _attached.get(path)
    if ring is None:
        keep_heap()  # payloads are read into this process's heap from now on
        _close_gone()
        ring = _attached[path] = _Attached(path)
    return ring


def _close_gone() -> None:
    """Close the rings of workers that have exited (a new one is starting)."""
    for path, ring in list(_attached.items()):
        try:
            if ring.owner is not None:
                os.kill(ring.owner, 0)
        except ProcessLookupError:
            del _attached[path]
            ring.close()
        except PermissionError:
            continue


def _forget_in_child() -> None:
    """A forked child reads no rings: it must not keep its parent's open."""
    for ring in _attached.values():
        ring.close()
    _attached.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _bytes_from_ring(path: str, start: int, length: int) -> bytes:
    return _ring(path).read(start, length)


def _record_batch_from_ring(path: str, start: int, length: int) -> Any:
    import pyarrow as pa

    buffer = pa.allocate_buffer(length)
    _ring(path).read_into(buffer, start, length)
    return pa.ipc.open_stream(buffer).read_next_batch()


def _opened_apart(path: str, length: int) -> int:
    """A payload's own file, opened and unlinked (the descriptor keeps it)."""
    keep_heap()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BrokenPipeError(
            f"a DataLoader worker's payload of {length} bytes is gone ({path}: its worker, "
            f"pid {owner_of(path)}, exited before it was read)"
        ) from None
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    size = os.fstat(fd).st_size
    if size != length:
        os.close(fd)
        raise BrokenPipeError(
            f"a DataLoader worker's payload file {path} holds {size} of {length} bytes"
        )
    return fd


def _bytes_apart(path: str, length: int) -> bytes:
    fd = _opened_apart(path, length)
    try:
        payload = bytearray(length)
        view, at = memoryview(payload), 0
        while at < length:
            got = os.preadv(fd, [view[at:]], at)
            if not got:
                raise BrokenPipeError(f"{path}: {at} of {length} bytes")
            at += got
        return bytes(payload)
    finally:
        os.close(fd)


def _record_batch_apart(path: str, length: int) -> Any:
    """The batch read in place from its file's mapping: its buffers keep the
    mapping (and the file's memory) alive, and let it go with the batch."""
    import pyarrow as pa

    fd = _opened_apart(path, length)
    try:
        mapped = mmap.mmap(fd, length, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    return pa.ipc.open_stream(pa.py_buffer(mapped)).read_next_batch()
