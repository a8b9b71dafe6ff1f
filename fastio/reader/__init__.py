"""fastio.reader: the asyncio reader over the native engine, and what it is
made of (read requests, descriptors, buffers, the sync hand-off, statistics,
the tuner's wiring)."""

from __future__ import annotations

from fastio.reader._ranges import ByteRange, Chunk, Shard
from fastio.reader._reader import Reader
from fastio.reader._stats import ReaderStats
from fastio.reader._sync import new_event_loop

__all__ = ["ByteRange", "Chunk", "Reader", "ReaderStats", "Shard", "new_event_loop"]
