"""Exceptions and warnings. One root, ``FastIOError``; each leaf also inherits the
built-in it refines, so ``except OSError`` and ``except FileNotFoundError`` work."""

from __future__ import annotations

import errno
from typing import Any

__all__ = [
    "DirectIOFallbackWarning",
    "EngineFallbackWarning",
    "FastIOError",
    "ReaderClosedError",
    "TruncatedFileError",
]


class FastIOError(Exception):
    """Root of every error fastio raises on its own account."""


class TruncatedFileError(FastIOError, OSError):
    """A file ended before the bytes a read asked for.

    Raised when a range reaches past the end of its file, and when a file
    shrinks while it is being read. ``filename`` is the path, ``offset`` the
    file offset where data ran out, ``expected_end`` the offset the read needed.
    Check that the file is complete (an interrupted copy, a writer still
    running); the reader itself stays usable.
    """

    def __init__(self, path: str, offset: int, expected_end: int) -> None:
        message = (
            f"file ended at offset {offset} but the read needed bytes up to "
            f"offset {expected_end} (file truncated or still being written)"
        )
        super().__init__(errno.EIO, message, path)
        self.offset = offset
        self.expected_end = expected_end

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError pickles its args; ours differ, so DataLoader workers need this.
        return (type(self), (self.filename, self.offset, self.expected_end))


class ReaderClosedError(FastIOError, ValueError):
    """The reader was closed (or closed while this stream was running)."""


class EngineFallbackWarning(RuntimeWarning):
    """io_uring was unavailable or refused, so the pread thread pool serves reads.

    Throughput on fast storage may be lower. Force an engine with
    ``engine="threads"`` to silence this, or allow io_uring (seccomp profile,
    ``/proc/sys/kernel/io_uring_disabled``).
    """


class DirectIOFallbackWarning(RuntimeWarning):
    """The filesystem refused O_DIRECT (tmpfs, some FUSE and network filesystems),
    so the file is read through the page cache instead."""
