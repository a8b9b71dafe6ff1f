"""fastio.sources: where bytes come from. URL expansion, remote objects
through fsspec with retries, and a throttled filesystem for drills."""

from __future__ import annotations

from fastio.sources._urls import expand_urls

__all__ = ["expand_urls"]
