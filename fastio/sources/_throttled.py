"""A slow path on purpose: local files behind added latency, per path and time.

``throttled://<path>`` URLs read local files through fsspec with every request
delayed by ``delay`` seconds, plus ``slow_delay`` for paths containing one of
the ``slow`` substrings while the wall clock is within ``[slow_from,
slow_until)``. Requests of one reader overlap (up to its outstanding requests),
so a worker's rate on a slow path is what its request budget over the latency
allows, as on a congested link or a busy object store. Used by the tests and
the benchmark, and for drills: does the monitor flag the worker you slowed?

Importing this module registers the ``throttled`` protocol with fsspec;
DataLoader workers started by fork inherit it; spawned ones need the import
too (``worker_init_fn=lambda _: import_module("fastio.sources._throttled")``).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from typing import Any

import fsspec
from fsspec.asyn import AsyncFileSystem

__all__ = ["ThrottledFileSystem"]


class ThrottledFileSystem(AsyncFileSystem):  # type: ignore[misc]
    """Local files with injected latency (see the module's docstring)."""

    protocol = "throttled"
    cachable = False  # each reader gets the delays it was given

    def __init__(
        self,
        delay: float = 0.0,
        slow: list[str] | tuple[str, ...] = (),
        slow_delay: float = 0.0,
        slow_from: float = 0.0,
        slow_until: float = math.inf,
        **options: Any,
    ) -> None:
        if delay < 0 or slow_delay < 0:
            raise ValueError(f"delays must not be negative, not {delay} and {slow_delay}")
        super().__init__(**options)
        self.delay = float(delay)
        self.slow = tuple(slow)
        self.slow_delay = float(slow_delay)
        self.slow_from = float(slow_from)
        self.slow_until = float(slow_until)

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        path = path[len("throttled://") :] if path.startswith("throttled://") else path
        return path.rstrip("/") or "/"

    def latency(self, path: str) -> float:
        """The delay a request for ``path`` gets now."""
        extra = 0.0
        slowed = self.slow and any(part in path for part in self.slow)
        if slowed and self.slow_from <= time.time() < self.slow_until:
            extra = self.slow_delay
        return self.delay + extra

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        try:
            status = os.stat(path)
        except FileNotFoundError:
            raise FileNotFoundError(path) from None
        kind = "directory" if os.path.isdir(path) else "file"
        return {"name": path, "size": status.st_size, "type": kind,
                "mtime": str(status.st_mtime_ns)}  # fmt: skip

    async def _cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        path = self._strip_protocol(path)
        pause = self.latency(path)
        if pause:
            await asyncio.sleep(pause)
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            begin = 0 if start is None else (start if start >= 0 else size + start)
            stop = size if end is None else (end if end >= 0 else size + end)
            return os.pread(handle.fileno(), max(0, min(stop, size) - begin), begin)


fsspec.register_implementation("throttled", ThrottledFileSystem, clobber=True)
