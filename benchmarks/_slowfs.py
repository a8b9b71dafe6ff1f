"""A network filesystem's metadata latency, emulated: a read-only FUSE
passthrough of a folder whose every lookup, stat and open first waits a given
time (an NFS, Lustre or bucket-mount round trip), served by many threads.
Reads pass through at once. Times are exact (nanoseconds) and inode numbers
are the folder's own, so a file's stamps through the mount are the ones it
has beside it.

    python benchmarks/_slowfs.py FOLDER MOUNTPOINT SECONDS   # until unmounted

Needs fusepy (``pip install fusepy``), libfuse (Debian: ``apt install fuse3
libfuse2``) and root. ``slow_mount`` runs it for a ``with`` block.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_STAT_FIELDS = ("st_gid", "st_mode", "st_nlink", "st_size", "st_uid", "st_ino")


@contextlib.contextmanager
def slow_mount(folder: Path, seconds: float) -> Iterator[Path]:
    """``folder`` mounted at a fresh mount point whose metadata operations
    each wait ``seconds``, unmounted at the end."""
    mount = Path(tempfile.mkdtemp(prefix="fastio-slowfs-"))
    server = subprocess.Popen([sys.executable, __file__, str(folder), str(mount), str(seconds)])
    try:
        deadline = time.monotonic() + 30
        while not os.path.ismount(mount):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the FUSE filesystem did not mount: is fusepy installed, libfuse there "
                    "(apt install fuse3 libfuse2), and are you root?"
                )
            time.sleep(0.05)
        yield mount
    finally:
        if os.path.ismount(mount):
            subprocess.run(["fusermount", "-u", str(mount)], check=False)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        with contextlib.suppress(OSError):
            mount.rmdir()


def serve(folder: str, mount: str, seconds: float) -> None:
    from fuse import FUSE, FuseOSError, Operations

    class Slow(Operations):  # type: ignore[misc]
        use_ns = True  # times as nanoseconds, not floats that lose them

        def _path(self, path: str) -> str:
            return os.path.join(folder, path.lstrip("/"))

        def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
            time.sleep(seconds)
            try:
                status = os.lstat(self._path(path))
            except OSError as error:
                raise FuseOSError(error.errno) from None
            found = {name: getattr(status, name) for name in _STAT_FIELDS}
            found.update(st_atime=status.st_atime_ns, st_mtime=status.st_mtime_ns,
                         st_ctime=status.st_ctime_ns)  # fmt: skip
            return found

        def readdir(self, path: str, fh: Any) -> list[str]:
            return [".", "..", *os.listdir(self._path(path))]

        def open(self, path: str, flags: int) -> int:
            time.sleep(seconds)
            return os.open(self._path(path), flags)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        def release(self, path: str, fh: int) -> None:
            os.close(fh)

    # No caching of entries or attributes in the kernel: each stat asks.
    FUSE(Slow(), mount, foreground=True, nothreads=False, ro=True, use_ino=True,
         attr_timeout=0, entry_timeout=0, negative_timeout=0)  # fmt: skip


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], float(sys.argv[3]))
