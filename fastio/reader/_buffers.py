"""Reusable aligned buffers for reads, recycled once no view of them is alive."""

from __future__ import annotations

from collections import deque

from fastio._native import DIRECT_ALIGNMENT, HUGE_PAGE, AlignedBuffer, allocate_buffers

__all__ = ["BufferPool", "bucket_size"]


def bucket_size(nbytes: int) -> int:
    """Capacity of the pooled buffer that serves a read of ``nbytes``: the next
    power of two, at least one page, so buffers of one size class are interchangeable."""
    return max(DIRECT_ALIGNMENT, 1 << (max(nbytes, 1) - 1).bit_length())


class BufferPool:
    """Free lists of :class:`AlignedBuffer` by size class.

    A buffer returned with :meth:`give_back` goes straight back to its free list
    when nothing references it; otherwise it is "lent" and becomes reusable once
    the consumer drops its last view. Reuse matters: a fresh buffer page-faults
    while the kernel copies into it, which makes io_uring hand the read to a
    worker thread and costs 3-4x the read itself on cached data. Free lists are
    LIFO so the most recently used (cache-warm) buffer is reused first.

    Idle and lent buffers are each bounded by ``idle_limit`` bytes; past that,
    the oldest lent buffer is left to the garbage collector.
    """

    def __init__(self, idle_limit: int) -> None:
        self._idle_limit = idle_limit
        self._idle_bytes = 0
        self._free: dict[int, list[AlignedBuffer]] = {}
        self._lent: deque[AlignedBuffer] = deque()
        self._lent_bytes = 0

    def take(self, nbytes: int) -> AlignedBuffer:
        size = bucket_size(nbytes)
        free = self._free.get(size)
        if not free:
            self._reclaim_lent()
            free = self._free.get(size)
        if not free:
            # A whole huge page's worth at once: buffers of one region are
            # physically contiguous (native/hugemem.h says why reads care).
            fresh = allocate_buffers(size, max(1, HUGE_PAGE // size))
            for buffer in fresh[1:]:
                self._keep(buffer)
            return fresh[0]
        self._idle_bytes -= size
        return free.pop()

    def give_back(self, buffer: AlignedBuffer) -> None:
        if buffer.exports:
            self._reclaim_lent()
            self._lent.append(buffer)
            self._lent_bytes += len(buffer)
            while self._lent_bytes > self._idle_limit:
                self._lent_bytes -= len(self._lent.popleft())
        else:
            self._keep(buffer)

    def clear(self) -> None:
        self._free.clear()
        self._lent.clear()
        self._idle_bytes = self._lent_bytes = 0

    def _keep(self, buffer: AlignedBuffer) -> None:
        size = len(buffer)
        if self._idle_bytes + size > self._idle_limit:
            return
        self._free.setdefault(size, []).append(buffer)
        self._idle_bytes += size

    def _reclaim_lent(self) -> None:
        # Consumers mostly drop views in the order they got them: reclaim from
        # the oldest and stop at the first buffer still in use.
        lent = self._lent
        while lent and not lent[0].exports:
            buffer = lent.popleft()
            self._lent_bytes -= len(buffer)
            self._keep(buffer)
