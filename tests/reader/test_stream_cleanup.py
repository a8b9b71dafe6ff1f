"""A stream's cleanup never waits for its own loop.

A ``Reader.stream`` generator left suspended in a reference cycle (a caught
error's traceback holds its frame) is closed by whichever thread the cyclic
garbage collector happens to run on, the reader's loop thread included. There
its cleanup must not wait for the loop to cancel the feeder: the loop cannot
run while it waits, and the epoch would never end.

Each case runs in a subprocess with a time limit, so that a regression fails
the test instead of hanging the suite (a hung loop thread would also hang the
interpreter's exit, which closes readers).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

import fastio
from fastio.reader import _files
from tests.servers import wait_for

PRELUDE = """
import gc, os, sys, threading
import fastio

path = sys.argv[1]
data = os.urandom(8 << 20)
with open(path, "wb") as out:
    out.write(data)
reader = fastio.Reader(read_size=64 << 10, memory_budget=1 << 20)


def on_loop_thread(function):
    done = threading.Event()

    def run():
        function()
        done.set()

    reader._background.loop.call_soon_threadsafe(run)
    if not done.wait(60):
        print("HANG: the stream's cleanup waited for its own loop", flush=True)
        os._exit(3)


def suspended_stream():
    stream = reader.stream([path])
    # The first chunk is read on this thread (the file is cached): the
    # second is the feeder's, which runs on, batches waiting in the hand-off.
    assert len(next(stream).data) > 0
    assert len(next(stream).data) > 0
    return stream
"""

CHECK_AFTER = """
# The feeder was cancelled and cleaned up: every buffer is back, and the reader
# reads on (a whole file, byte for byte).
assert b"".join(bytes(c.data) for c in reader.stream([path])) == data
for _ in range(1000):
    if reader.stats().buffered_bytes == 0:
        break
    threading.Event().wait(0.01)
assert reader.stats().buffered_bytes == 0, reader.stats().buffered_bytes
reader.close()
print("OK", flush=True)
"""

CASES = {
    # What the garbage collector does: the generator, held only by a cycle,
    # is finalized on the thread that runs the collection.
    "collected": """
gc.disable()  # so that no automatic collection on this thread gets there first
cycle = [suspended_stream()]
cycle.append(cycle)
del cycle
on_loop_thread(gc.collect)
gc.enable()
""",
    # The same cleanup, called directly.
    "closed": """
stream = suspended_stream()
on_loop_thread(stream.close)
""",
}


def _run(script: str, tmp_path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter (its file's path as argv[1]): exit 0 or fail."""
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "data.bin")],
                            capture_output=True, text=True, timeout=timeout)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.parametrize("case", sorted(CASES))
def test_stream_cleanup_on_the_loop_thread_does_not_wait_for_the_loop(tmp_path, case) -> None:
    result = _run(textwrap.dedent(PRELUDE) + CASES[case] + CHECK_AFTER, tmp_path, 240)
    assert result.stdout.strip() == "OK"


# A reader whose loop thread runs, over a file of 1 MiB.
RUNNING_READER = """
import gc, os, sys, threading
import fastio

path = sys.argv[1]
with open(path, "wb") as out:
    out.write(os.urandom(1 << 20))
reader = fastio.Reader(read_size=64 << 10)
assert sum(len(c.data) for c in reader.stream([path])) == 1 << 20  # its loop thread runs
"""


STOPPED_LOOP = (
    RUNNING_READER
    + """
loop, busy = reader._background.loop, threading.Event()
loop.call_soon_threadsafe(busy.wait)  # the loop is busy, then stops (as on an interpreter
loop.call_soon_threadsafe(loop.stop)  # shutting down) before it runs the next stream's reading
threading.Timer(0.2, busy.set).start()
try:
    next(reader.stream([path]))
    print("DELIVERED", flush=True)  # the reading ran while the loop wound down
except fastio.ReaderClosedError as error:
    print("RAISED", error, flush=True)
"""
)


def test_a_stream_whose_loop_stopped_before_its_reading_ran_does_not_hang(tmp_path) -> None:
    """The loop may or may not run the stream's reading as it winds down
    (a race); when it does not, the consumer hears so instead of waiting."""
    result = _run(STOPPED_LOOP, tmp_path, 60)
    assert result.stdout.split(" ", 1)[0].strip() in ("RAISED", "DELIVERED"), result.stdout


def test_a_call_the_closing_loop_drops_runs_on_the_caller() -> None:
    """A loop winding down (its thread's last turn, as at interpreter exit)
    may close with a call still queued: the caller (a reader closing) does
    not wait for it forever, it runs the call itself."""
    from fastio.reader._sync import LoopThread

    background = LoopThread("test-loop")
    loop = background.loop
    queued: list[object] = []
    # Queued, never run: as a callback that comes after the loop's last turn.
    loop.call_soon_threadsafe = lambda *args: queued.append(args)  # type: ignore[method-assign]
    ran_on: list[str] = []
    outcome: list[str] = []

    def call() -> None:
        outcome.append(background.call(lambda: ran_on.append(threading.current_thread().name)
                                       or "done"))  # fmt: skip

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    wait_for(lambda: queued)  # the call is queued and its caller waits
    del loop.call_soon_threadsafe
    background.stop()  # the loop stops, its thread closes it
    caller.join(30)
    assert not caller.is_alive(), "the call waited for a loop that closed without running it"
    assert outcome == ["done"]
    assert ran_on == [caller.name]
    assert loop.is_closed()


COLLECTED_READER = (
    RUNNING_READER
    + """
background = reader._background
held = threading.Event()
# The loop thread waits for what this thread holds: as when the collector
# runs on a thread that holds a thread pool's lock (starting a worker), and
# the reader's shutdown on the loop thread needs that lock to stop its pools.
background.loop.call_soon_threadsafe(held.wait)
hang = threading.Timer(60, lambda: (print("HANG: the collected reader waited for its loop",
                                          flush=True), os._exit(3)))
hang.daemon = True
hang.start()
del reader
gc.collect()
hang.cancel()
held.set()
background.thread.join(60)
assert not background.thread.is_alive()  # the reader was shut down, its loop stopped
print("OK", flush=True)
"""
)


def test_a_collected_reader_does_not_wait_for_its_loop(tmp_path) -> None:
    """An abandoned reader is closed by the garbage collector on whatever
    thread it runs: it queues its shutdown on its loop thread and returns,
    and the loop thread shuts it down and stops once it gets there."""
    result = _run(COLLECTED_READER, tmp_path, 180)
    assert result.stdout.strip() == "OK"


def test_a_stream_left_early_opens_no_more_shards(tmp_path, monkeypatch) -> None:
    """Each piece of a new shard opens it first, on the loop thread, and on a
    network filesystem each open is a round trip: a consumer that leaves must
    not wait while the read-ahead opens the rest of its window. Here the first
    open after the first batch is out is held until the consumer has left;
    after it, no other shard may be opened."""
    paths = _small_shards(tmp_path, 300)
    reader = fastio.Reader(outstanding_requests=4)
    holding = threading.Event()
    after_leaving: list[str] = []

    def before_open(path: str) -> None:
        if holding.is_set():
            after_leaving.append(path)
        elif any(stream.started for stream in reader._streams):  # the read-ahead
            holding.set()
            wait_for(lambda: any(stream.abandoned() for stream in reader._streams), 60)

    _before_each_open(monkeypatch, before_open)
    try:
        stream = reader.stream(paths)
        # The first shards are read on this thread (they are cached), the
        # next is the read-ahead's first batch.
        got: list[bytes] = []
        while reader._background is None or len(got) <= reader._head_reads:
            got.append(bytes(next(stream).data[:1]))
        assert got == [bytes([number]) for number in range(len(got))]
        wait_for(holding.is_set, 60)
        stream.close()
        assert after_leaving == []
    finally:
        reader.close()


def test_a_stream_s_first_batch_does_not_wait_for_its_read_ahead_to_open_shards(
    tmp_path, monkeypatch
) -> None:
    """The first batch goes out after the first pieces, before the read-ahead
    opens more shards (each open a round trip on a network filesystem): here
    the third shard's open waits until the consumer holds its first bytes."""
    paths = _small_shards(tmp_path, 50)
    reader = fastio.Reader(outstanding_requests=8)
    got_first = threading.Event()
    opened: list[str] = []

    def before_open(path: str) -> None:
        opened.append(path)
        if len(opened) == 3 and not got_first.wait(30):  # a hang guard, never a timing
            raise TimeoutError("the first batch waited for the read-ahead's opens")

    _before_each_open(monkeypatch, before_open)
    try:
        chunks = reader.stream(paths)
        # The first shard is read on this thread (it is cached): the second
        # is the first the read-ahead hands over.
        first = [bytes(next(chunks).data[:1]) for _ in range(2)]
        got_first.set()
        assert first == [b"\x00", b"\x01"]
        rest = [bytes(chunk.data[:1]) for chunk in chunks]
        assert rest == [bytes([number]) for number in range(2, 50)]
    finally:
        reader.close()


def _small_shards(folder, count: int) -> list[str]:
    """``count`` files of 4 KiB, the ``n``-th filled with byte ``n % 256``."""
    paths = []
    for number in range(count):
        path = folder / f"shard-{number:03d}.bin"
        path.write_bytes(bytes([number % 256]) * 4096)
        paths.append(str(path))
    return paths


def _before_each_open(monkeypatch, hook) -> None:
    """Calls ``hook(path)`` on the loop thread before each shard is opened."""
    real_open = _files.FileTable._open

    def open_file(table, key, path, direct):
        hook(path)
        return real_open(table, key, path, direct)

    monkeypatch.setattr(_files.FileTable, "_open", open_file)
