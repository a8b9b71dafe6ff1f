"""Errors of the shard cache. Each is a :class:`fastio.FastIOError` and also the
built-in ``OSError`` it refines, with the shard's URL as ``filename``."""

from __future__ import annotations

import errno
from typing import Any

from fastio._errors import FastIOError

__all__ = ["CacheError", "CacheFullError", "CacheIntegrityError", "CacheTimeoutError"]


class CacheError(FastIOError, OSError):
    """Root of the shard cache's errors. ``filename`` is the shard's URL."""

    code = errno.EIO

    def __init__(self, url: str, message: str) -> None:
        super().__init__(self.code, message, url)

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError pickles (errno, strerror); ours take (url, message), and
        # DataLoader workers send errors to their parent by pickle.
        return (type(self), (self.filename, self.strerror))


class CacheIntegrityError(CacheError):
    """A download delivered other bytes than the store promised: a different
    size, or a checksum or ETag that does not match. Nothing was cached. The
    object may have changed while it was read (read it again), or the store or a
    proxy in between truncates or alters it."""


class CacheFullError(CacheError):
    """A shard does not fit in the cache: it is larger than ``max_bytes``, or the
    shards in use (pinned by readers, here or in other processes) left no room
    until the wait timed out. Raise ``max_bytes``, release shards sooner
    (``release`` or the ``use`` context manager), or read fewer shards at once."""

    code = errno.ENOSPC


class CacheTimeoutError(CacheError, TimeoutError):
    """Another process was still downloading the shard when the wait timed out.
    Raise ``wait_timeout`` for very large shards or slow stores."""

    code = errno.ETIMEDOUT
