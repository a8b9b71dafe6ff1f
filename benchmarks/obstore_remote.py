"""A prototype of fastio's remote source on obstore (Rust object_store) instead of fsspec.

Not part of fastio: a measurement aid. ``install()`` makes every reader made
afterwards in this process use :class:`ObstoreRemotes` in place of
``fastio.sources._remote.Remotes``; bench_remote_link.py's "fastio obstore"
methods do that in their child process.

What changes against the fsspec source, and why it matters for throughput:

* reads run on the reader's own event loop: obstore's futures complete on any
  asyncio loop (the HTTP work runs on tokio's threads), so there is no hop to
  fsspec's loop thread and back per request, and no HTTP parsing in Python
  (aiohttp parses headers and joins body chunks under the GIL, which the
  reader's decode also needs);
* a read returns obstore's ``Bytes`` (a buffer owned by Rust), copied once into
  the reader's buffer; the fsspec source's ``bytes(...)`` check copies nothing
  only because aiohttp already made a ``bytes`` by joining its chunks;
* HEAD (size and ETag) through ``obstore.head_async``.

The shard cache's whole-shard downloads keep the base class's code: it awaits
``_read_async`` on fsspec's loop, which this class also serves through obstore.
Protocols obstore has no store for (``memory://``, chained ``simplecache::``,
``hf://`` ...) stay with fsspec.
"""

from __future__ import annotations

import asyncio
import errno
from typing import Any
from urllib.parse import urlsplit

from fastio.sources._objects import RemoteFile
from fastio.sources._remote import Remotes, _final, _transient

# What obstore's from_url knows; everything else stays on fsspec.
OBSTORE_SCHEMES = frozenset({"http", "https", "s3", "s3a", "gs", "az", "abfs", "abfss"})


class ObstoreRemotes(Remotes):
    """``Remotes`` with HTTP(S), S3, GCS and Azure served by obstore."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stores: dict[str, Any] = {}

    def _store(self, url: str) -> tuple[Any, str] | None:
        """(obstore store, path in it) for ``url``; None for protocols left to fsspec."""
        parts = urlsplit(url)
        if parts.scheme not in OBSTORE_SCHEMES:
            return None
        root = f"{parts.scheme}://{parts.netloc}"
        with self._lock:
            store = self._stores.get(root)
            if store is None:
                from obstore.store import from_url

                # Requests as long as fastio's own timeout allows (obstore's
                # default of 30 s is short for a 16 MiB read on a slow link);
                # plain http only when the user's URL says so.
                options = {"timeout": f"{self.settings.request_timeout:.0f}s",
                           "allow_http": parts.scheme == "http"}  # fmt: skip
                store = from_url(root, client_options=options,
                                 **self.storage_options.get("obstore", {}))  # fmt: skip
                self._stores[root] = store
        return store, parts.path.lstrip("/")

    def stat(self, url: str) -> RemoteFile:
        cached = self._info.get(url)
        if cached is not None:
            return cached
        found = self._store(url)
        if found is None:
            return super().stat(url)
        import obstore
        from obstore.exceptions import NotFoundError

        store, path = found
        try:
            meta = obstore.head(store, path)
        except NotFoundError:
            raise FileNotFoundError(errno.ENOENT, "no such object", url) from None
        except Exception as error:
            raise OSError(errno.EIO, f"cannot stat: {error}", url) from None
        version = str(meta.get("e_tag") or meta.get("version") or meta["last_modified"])
        remote = RemoteFile(url, int(meta["size"]), version)
        self._info[url] = remote
        return remote

    async def read(self, url: str, offset: int, length: int) -> Any:
        """``length`` bytes of ``url`` from ``offset``, awaited on the caller's loop."""
        if self._store(url) is None:
            return await super().read(url, offset, length)
        data, error = await self._read_async(None, "", url, offset, length)
        if error is not None:
            raise error
        return data

    async def _read_async(
        self, fs: Any, path: str, url: str, offset: int, length: int
    ) -> tuple[Any, OSError | None]:
        """Like the base class's: the data, or the error (never raised)."""
        found = self._store(url)
        if found is None:
            return await super()._read_async(fs, path, url, offset, length)
        import obstore
        from obstore.exceptions import NotFoundError, PermissionDeniedError
        from tenacity import AsyncRetrying

        store, key = found
        attempts = 0
        try:
            async for attempt in AsyncRetrying(**self._policy()):
                with attempt:
                    attempts += 1
                    try:
                        data = await asyncio.wait_for(
                            obstore.get_range_async(store, key, start=offset, length=length),
                            self.settings.request_timeout,
                        )
                    except NotFoundError:
                        raise FileNotFoundError(errno.ENOENT, "no such object", url) from None
                    except PermissionDeniedError:
                        raise PermissionError(errno.EACCES, "access denied", url) from None
        except Exception as error:
            return b"", _final(error, url, offset, length, attempts)
        if len(data) != length:  # obstore checks Content-Range; this is the reader's contract
            return b"", OSError(errno.EIO, f"{len(data)} bytes at {offset}, not {length}", url)
        return data, None

    def _policy(self) -> dict[str, Any]:
        from tenacity import retry_if_exception

        # obstore's errors carry no status: a generic one is a dropped connection,
        # a timeout or a 5xx after object_store's own retries; retry those too.
        def transient(error: BaseException) -> bool:
            from obstore.exceptions import GenericError

            return isinstance(error, GenericError) or _transient(error)

        return super()._policy() | {"retry": retry_if_exception(transient)}


def install() -> None:
    """Make readers created from now on, in this process, use ObstoreRemotes."""
    import importlib

    import fastio.reader._reader as reader_module

    importlib.import_module("obstore.store")  # loaded now, not on the first read
    reader_module.Remotes = ObstoreRemotes  # type: ignore[misc]
