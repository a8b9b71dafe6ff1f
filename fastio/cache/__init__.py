"""fastio.cache: whole local copies of remote shards under a byte limit,
shared by the processes of a machine, evicted by the epoch plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastio.cache._cache import ShardCache


def __getattr__(name: str) -> object:
    # sqlite3 and the cache's machinery load on first use.
    if name == "ShardCache":
        from fastio.cache._cache import ShardCache

        return ShardCache
    raise AttributeError(f"module 'fastio.cache' has no attribute {name!r}")


__all__ = ["ShardCache"]
