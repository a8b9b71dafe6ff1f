"""What the reader knows of remote objects before it asks a server anything:
which URLs are remote, how large a remote request grows, and a remote object
as the read planner sees it. Kept apart from fastio.sources._remote (the
clients, retries and downloads), which a reader of local files never loads.
"""

from __future__ import annotations

import hashlib
import os

__all__ = [
    "DOWNLOAD_FIRST_BYTES",
    "REMOTE_REQUEST_BYTES",
    "SEND_BUFFER_BYTES",
    "RemoteFile",
    "absolute_path",
    "is_remote",
    "local_path",
    "remote_piece_limit",
    "version_number",
]

# Bytes per remote request, at most, unless read_size is larger than 4 MiB: what a
# reader's pieces grow to (fastio.reader._requests) and a whole-shard
# download's step. Large enough that request overhead is small, small enough
# that several are in flight for a shard of tens of MiB; and 64 KiB short of
# 4 MiB, so that the answer, head included, fits in the largest send buffer a
# Linux server gives a connection by default (net.ipv4.tcp_wmem, 4 MiB, some
# of it kept for bookkeeping). An answer that does not fit waits for the
# client's acknowledgements before its last bytes are queued, about a round
# trip more: over a 20 ms link to nginx, pieces of exactly 4 MiB arrived at
# 1.09-1.21 GB/s, pieces of 4 MiB less 32 to 128 KiB at 1.28-1.38 GB/s (with
# the server's send buffer raised to 8 MiB, the two were alike).
SEND_BUFFER_BYTES = 4 << 20
REMOTE_REQUEST_BYTES = SEND_BUFFER_BYTES - (64 << 10)


def remote_piece_limit(read_size: int) -> int:
    """The largest remote request: ``REMOTE_REQUEST_BYTES``, or ``read_size``
    where that is larger than the send buffer that size is cut to fit (a
    ``read_size`` of 4 MiB, the default, leaves requests short of it)."""
    return read_size if read_size > SEND_BUFFER_BYTES else REMOTE_REQUEST_BYTES


# A download's first range (at most; read_size if smaller), the next ones
# doubling up to the step: a reader following the download (see
# fastio.cache._filling) gets its first sample after a small first answer,
# as from its own first remote read.
DOWNLOAD_FIRST_BYTES = 256 << 10


def is_remote(url: str) -> bool:
    """True for URLs fsspec serves (a protocol other than ``file``)."""
    if "://" not in url:
        return False
    return not url.startswith("file://")


def local_path(url: str) -> str:
    return url[len("file://") :] if url.startswith("file://") else url


def absolute_path(path: str) -> str:
    """``os.path.abspath(path)``, returned as is where it already is absolute
    and normal (no ``.``, ``..`` or empty part): a dataset may name thousands
    of shards, and each is keyed so more than once as it opens."""
    if path.startswith("/") and "/." not in path and "//" not in path and not path.endswith("/"):
        return path
    return os.path.abspath(path)


def version_number(version: str) -> int:
    """An object's version (ETag or time) as the integer an index records."""
    if version.isdigit():
        return int(version)
    return int(hashlib.sha256(version.encode()).hexdigest()[:15], 16)


class RemoteFile:
    """A remote object as the read planner sees a file (no descriptor)."""

    __slots__ = ("cached", "direct", "fd", "key", "path", "pinned_url", "refs", "size", "version")

    def __init__(self, path: str, size: int, version: str) -> None:
        self.path = path
        self.key = (path, False)
        self.fd = -1
        self.direct = False
        self.cached = False
        self.refs = 1  # the planner counts references; nothing is held open for them
        self.pinned_url: str | None = None
        self.size = size
        self.version = version

    @property
    def identity(self) -> tuple[int, int]:
        """``(size, version)`` as an index records them (the version a number)."""
        return self.size, version_number(self.version)
