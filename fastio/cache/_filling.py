"""A shard copy being downloaded, readable up to where the download has come.

A download writes its shard in order. While it runs, the reader that asked
for the shard need not wait for the whole copy: :meth:`Filling.read_into`
waits only until the bytes it wants are written, then reads them from the
download's file. The first sample of a shard that is not cached yet comes
after the download's first range, and every byte still comes over the network
once (the download's); the copy is published as before once it is complete
and verified.

The download's thread calls :meth:`Filling.wrote` after each write, and
:meth:`Filling.ended` once (with the published path, or the error); readers
(:class:`FillingReader`, a descriptor each) wait on their own event loops.
A read past what a failed download wrote gets the download's error; the
caller reads those bytes remotely instead.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

__all__ = ["Filling", "FillingReader"]


class Filling:
    """The progress of one download of ``size`` bytes into ``temp``."""

    def __init__(self, url: str, temp: str, size: int) -> None:
        self.url = url
        self.temp = temp
        self.size = size
        self.written = 0
        self.path: str | None = None  # the published copy, once complete
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._ended = threading.Event()
        # (end, loop, future): readers waiting for bytes up to ``end``
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def finished(self) -> bool:
        return self.path is not None or self.error is not None

    # ---- the download's side ------------------------------------------------------------------

    def wrote(self, written: int) -> None:
        """``written`` bytes of the shard are in the file (in order, flushed)."""
        with self._lock:
            self.written = written
            ready = [w for w in self._waiters if w[0] <= written]
            self._waiters = [w for w in self._waiters if w[0] > written]
        for _, loop, future in ready:
            _wake(loop, future)

    def ended(self, path: str | None, error: BaseException | None) -> None:
        """The download ended: published at ``path``, or failed with ``error``."""
        with self._lock:
            self.path, self.error = path, error
            waiting, self._waiters = self._waiters, []
        self._ended.set()
        for _, loop, future in waiting:
            _wake(loop, future)

    def wait_ended(self) -> None:
        """Block until the download ended (from a thread with no event loop)."""
        self._ended.wait()

    # ---- the reader's side --------------------------------------------------------------------

    async def until(self, end: int) -> None:
        """Until ``end`` bytes are written or the download ended (an ``end``
        past the size: until it ended)."""
        with self._lock:
            if (self.written >= end and end <= self.size) or self.finished:
                return
            future = asyncio.get_running_loop().create_future()
            self._waiters.append((end, asyncio.get_running_loop(), future))
        await future

    def reader(self) -> FillingReader:
        """A reader of this download with a descriptor of its own."""
        return FillingReader(self)


class FillingReader:
    """Reads a :class:`Filling`'s file as it grows; :meth:`close` when done."""

    def __init__(self, filling: Filling) -> None:
        self.filling = filling
        self._fd = -1

    async def read_into(self, offset: int, length: int, buffer: Any) -> int:
        """``length`` bytes from ``offset`` into ``buffer`` once the download
        has written them; returns how many (fewer only at the shard's end).
        Raises the download's error if it failed before writing them."""
        filling = self.filling
        end = min(offset + length, filling.size)
        await filling.until(end)
        if filling.written < end:
            assert filling.error is not None
            raise filling.error
        if end <= offset:
            return 0
        view = memoryview(buffer)[: end - offset]
        fd = await self._descriptor()
        done = 0
        while done < len(view):  # page-cache bytes just written: short reads are rare
            count = os.preadv(fd, [view[done:]], offset + done)
            if count == 0:
                raise OSError(f"{filling.url}: the cache's download ended at {offset + done}")
            done += count
        return done

    async def _descriptor(self) -> int:
        """The download's file, open: the temporary file, or the published copy
        it was renamed to (a descriptor opened before the rename stays valid)."""
        if self._fd < 0:
            filling = self.filling
            try:
                self._fd = os.open(filling.path or filling.temp, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:  # renamed (or removed) just now
                await filling.until(filling.size + 1)
                if filling.path is None:
                    assert filling.error is not None
                    raise filling.error from None
                self._fd = os.open(filling.path, os.O_RDONLY | os.O_CLOEXEC)
        return self._fd

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _wake(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    def wake() -> None:
        if not future.done():
            future.set_result(None)

    if not loop.is_closed():
        loop.call_soon_threadsafe(wake)
