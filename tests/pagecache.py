"""A file's pages in the page cache: dropped, and counted."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from fastio._native import resident_fraction
from fastio.reader._files import CACHED_ENOUGH


def drop_pages(path: str) -> float:
    """Drop ``path``'s pages from the page cache (written back first); returns
    the share still resident (above 0 on filesystems that keep files in the
    page cache itself, as tmpfs does)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return resident(path)


def mapped(paths: Iterable[str]) -> list[str]:
    """Those of ``paths`` this process has mapped right now (``/proc/self/maps``)."""
    maps = Path("/proc/self/maps").read_text()
    return [path for path in paths if path in maps]


def resident(path: str) -> float:
    """The share of ``path``'s pages the page cache holds."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return float(resident_fraction(fd, 0, os.fstat(fd).st_size, 1 << 20))
    finally:
        os.close(fd)


def cached(path: str) -> bool:
    """Whether the page cache holds ``path`` as the reader counts a file found
    there (``CACHED_ENOUGH`` of its pages). Not all of them: on a machine whose
    memory (or memory cgroup) is near its limit, the kernel may reclaim a page
    read once in the moment between a read and this check."""
    return resident(path) >= CACHED_ENOUGH
