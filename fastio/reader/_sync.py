"""Serving synchronous callers: an event loop on a background thread, and a
bounded hand-off of chunk batches from that loop to the consuming thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar

from fastio._errors import ReaderClosedError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Handoff", "LoopThread", "new_event_loop"]

T = TypeVar("T")
_LOOP_CHECK = 1.0  # seconds between looks at the loop while the consumer waits


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop when uvloop is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """An event loop running on its own daemon thread."""

    def __init__(self, name: str = "fastio-loop") -> None:
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # As asyncio.run does: let every task see its cancellation and clean up.
            tasks = asyncio.all_tasks(self.loop)
            for task in tasks:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def on_loop_thread(self) -> bool:
        """Whether the caller runs on the loop's thread (where waiting for the
        loop would wait forever)."""
        return threading.current_thread() is self.thread

    def call(self, function: Callable[[], T]) -> T:
        """Run ``function`` on the loop thread and return its result here
        (directly, if the loop is not running: nothing else can touch it then;
        and so if the loop closes, winding down, without running it)."""
        if self.on_loop_thread() or not self.loop.is_running():
            return function()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return  # the caller ran it itself
            try:
                future.set_result(function())
            except BaseException as error:
                future.set_exception(error)

        try:
            self.loop.call_soon_threadsafe(run)
        except RuntimeError:  # closed meanwhile
            return function()
        while not concurrent.futures.wait([future], timeout=_LOOP_CHECK).done:
            # A loop stopping for good runs what is queued before its last
            # turn ends; a call queued after that is dropped when it closes.
            if (self.loop.is_closed() or not self.thread.is_alive()) and future.cancel():
                return function()
        return future.result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Handoff:
    """Batches passed from the loop thread (``put``) to one consumer thread
    (``get``), holding at most ``max_bytes`` (always at least one batch)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        max_bytes: int,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        self._loop = loop
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._batches: deque[tuple[list[Any], int]] = deque()
        self._bytes = 0
        self._space: asyncio.Future[None] | None = None
        self._finished = False
        self._error: BaseException | None = None
        self._on_wait = on_wait  # told how long the consumer waited for each batch
        self._abandoned = False

    async def put(self, batch: list[Any], nbytes: int) -> None:
        """Raises CancelledError once the consumer has :meth:`abandoned <abandon>`
        the hand-off."""
        while True:
            if self._abandoned:
                # A producer whose batches are ready never waits, so a cancellation
                # queued on the loop would reach it only once the hand-off is full.
                raise asyncio.CancelledError("the consumer stopped")
            with self._lock:
                if not self._batches or self._bytes + nbytes <= self._max_bytes:
                    self._batches.append((batch, nbytes))
                    self._bytes += nbytes
                    self._ready.notify()
                    return
                space = self._space = self._loop.create_future()
            await space

    def abandon(self) -> None:
        """The consumer takes no more batches: the producer's next :meth:`put`
        raises CancelledError. Called from the consumer's thread."""
        self._abandoned = True

    @property
    def abandoned(self) -> bool:
        """Whether the consumer has :meth:`abandoned <abandon>` the hand-off."""
        return self._abandoned

    def finish(self, error: BaseException | None = None, *, discard: bool = False) -> None:
        """No more batches; ``get`` raises ``error`` (if given) once the queue is
        empty, or at once with ``discard``. The first call wins."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            self._error = error
            if discard:
                self._batches.clear()
                self._bytes = 0
            self._ready.notify()
            space, self._space = self._space, None
        if space is not None:
            _resolve(space)

    def watch(self, producer: concurrent.futures.Future[Any]) -> None:
        """Ends the hand-off when ``producer`` (the loop's task feeding it)
        ends without having ended it: cancelled, or never run. The consumer
        then gets an error saying so, with the producer's own as its cause,
        instead of waiting for batches that cannot come."""
        producer.add_done_callback(self._producer_done)

    def _producer_done(self, producer: concurrent.futures.Future[Any]) -> None:
        cause = None if producer.cancelled() else producer.exception()
        error = ReaderClosedError("the stream's reading ended before the stream did")
        error.__cause__ = cause
        self.finish(error)

    def get(self) -> list[Any] | None:
        """The next batch, or None at the end. Blocks while the producer is
        behind; raises the producer's error after the batches before it."""
        with self._lock:
            if not self._batches and not self._finished:
                started = time.perf_counter()
                while not self._batches and not self._finished:
                    # A loop closed before it ran the producer resolves nothing.
                    if not self._ready.wait(_LOOP_CHECK) and self._loop.is_closed():
                        self._finished = True
                        self._error = ReaderClosedError(
                            "the reader's event loop closed before the stream ended"
                        )
                if self._on_wait is not None:
                    self._on_wait(time.perf_counter() - started)
            if not self._batches:
                if self._error is not None:
                    raise self._error
                return None
            batch, nbytes = self._batches.popleft()
            self._bytes -= nbytes
            space, self._space = self._space, None
        if space is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: the producer is gone
                self._loop.call_soon_threadsafe(_resolve, space)
        return batch
