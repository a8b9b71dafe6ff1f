"""Shared fixtures: real files with random contents, and resource counters."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ENGINES = ("io_uring", "threads")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def native_threads() -> int:
    """Every thread of this process, including the engine's pthreads."""
    return len(os.listdir("/proc/self/task"))


def thread_ids() -> set[int]:
    """The kernel ids of this process's threads (Python's and native ones)."""
    return {int(name) for name in os.listdir("/proc/self/task")}


class ResourceSnapshot:
    """Counts descriptors and threads now, to compare with later."""

    def __init__(self) -> None:
        self.fds = open_fds()
        self.tasks = thread_ids()
        self.python_threads = set(threading.enumerate())

    def assert_released(self, timeout: float = 5.0, sockets: bool = True) -> None:
        # A joined thread can stay listed in /proc for a moment while the kernel
        # finishes its exit, and io_uring's kernel workers exit asynchronously:
        # wait for the new threads to go rather than race them. Threads are
        # compared by id: threads of earlier tests (pools, servers) that end
        # meanwhile are not this test's business, threads it started are.
        deadline = time.monotonic() + timeout
        while thread_ids() - self.tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        # At most as many: an HTTP client's idle connections (an earlier
        # test's, or this one's) may close meanwhile.
        if sockets:  # else the caller checks the descriptors it cares about itself
            assert open_fds() <= self.fds, "file descriptors leaked"
        assert not thread_ids() - self.tasks, "native threads leaked"
        assert not set(threading.enumerate()) - self.python_threads, "Python threads leaked"


@pytest.fixture(scope="session", autouse=True)
def event_loop_process_state() -> None:
    """libuv (under uvloop) opens a signal pipe with the first loop a process
    makes and keeps it for the life of the process: make it before any test
    counts descriptors, or whichever test comes first sees it as a leak."""
    import fastio

    fastio.new_event_loop().close()


@pytest.fixture(scope="session", autouse=True)
def index_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shard indexes go to a folder of this run's (never the user's cache)."""
    folder = tmp_path_factory.mktemp("xdg-cache")
    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(folder)
    yield folder
    if previous is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture
def resources() -> ResourceSnapshot:
    return ResourceSnapshot()


def write_random_file(path: Path, size: int, seed: int) -> bytes:
    data = random.Random(seed).randbytes(size)
    path.write_bytes(data)
    return data


# Sizes that exercise O_DIRECT tails: empty, sub-sector, unaligned, aligned, multi-MiB.
FILE_SIZES = (0, 1, 511, 4095, 4096, 4097, 65_537, 1_048_576, 3_000_001)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Files of awkward sizes on a real filesystem (one that takes O_DIRECT)."""
    folder = tmp_path_factory.mktemp("corpus")
    files = {}
    for index, size in enumerate(FILE_SIZES):
        path = folder / f"file-{index:02d}-{size}.bin"
        files[str(path)] = write_random_file(path, size, seed=index)
    return files


@pytest.fixture
def make_file(tmp_path: Path) -> Callable[[int], tuple[str, bytes]]:
    counter = iter(range(1_000_000))

    def make(size: int) -> tuple[str, bytes]:
        index = next(counter)
        path = tmp_path / f"made-{index}.bin"
        return str(path), write_random_file(path, size, seed=1000 + index)

    return make


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 1 MiB: a real filesystem that fills up long before any
    byte limit the tests give."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; CI runs as root")
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], check=True)
    yield mount_point
    subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def fill(folder: Path) -> None:
    """Takes every byte left on ``folder``'s filesystem."""
    descriptor = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(descriptor, bytes(4096))
        with pytest.raises(OSError, match="No space left on device"):
            os.write(descriptor, b"x")
    finally:
        os.close(descriptor)
