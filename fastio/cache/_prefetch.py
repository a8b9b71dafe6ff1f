"""Downloads into the shard cache ahead of the reader, in the order the plan needs.

The reader tells the cache its epoch plan (the shards it will read, in order);
each time it takes up a remote shard, :class:`Prefetcher` tops up background
downloads of the next shards the plan needs that are neither cached nor being
downloaded, ``count`` at a time. By the time the reader reaches a shard, its
copy is usually local and read by the native engine; a shard still being
downloaded is waited for (in any process) instead of being read a second time
over the network.

Each download asks for several ranges at once (``outstanding_requests`` shared
between the downloads), so one download is not one request's latency after
another. A prefetch that would evict a shard needed sooner is skipped by the
cache (``fetch_ahead``): prefetching never makes the plan's hit rate worse. A
failed prefetch is only logged: the read that needs the shard fetches it
again and reports the error with its URL and offset.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from fastio._errors import DownloadCancelled

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastio.cache._cache import ShardCache

__all__ = ["Prefetcher"]

log = logging.getLogger("fastio.cache")


class Prefetcher:
    """Keeps up to ``count`` downloads of ``cache``'s upcoming shards running:
    ``fetch_ahead(url)`` downloads one (the source's), and says whether it did."""

    def __init__(self, cache: ShardCache | None, fetch_ahead: Callable[[str], bool],
                 count: int) -> None:  # fmt: skip
        self._cache = cache
        self._fetch_ahead = fetch_ahead
        self.count = count
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[str, Future[None]] = {}
        self._pool: ThreadPoolExecutor | None = None

    def kick(self) -> None:
        """Start downloads of the plan's next uncached shards, up to ``count`` running."""
        cache = self._cache
        if cache is None or self.count <= 0 or self.stopping.is_set():
            return
        with self._lock:
            room = self.count - len(self._running)
            if room <= 0:
                return
            for url in cache.prefetch(room):
                if url in self._running:
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        self.count, thread_name_prefix="fastio-prefetch"
                    )
                future = self._pool.submit(self._fetch, url)
                self._running[url] = future

    def _fetch(self, url: str) -> None:
        fetched = False
        try:
            fetched = self._fetch_ahead(url)
        except DownloadCancelled:
            return
        except Exception as error:  # the demand read retries it and reports the error
            log.info("prefetch of %s failed (%s); it is fetched again when read", url, error)
        finally:
            with self._lock:
                self._running.pop(url, None)
        if fetched:  # room for the next one; a skipped prefetch waits for the reader's progress
            self.kick()

    @property
    def running(self) -> list[str]:
        with self._lock:
            return list(self._running)

    def close(self) -> None:
        """Stop: running downloads end at their next range (their files are
        removed), queued ones never start; returns when the threads are gone."""
        self.stopping.set()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
