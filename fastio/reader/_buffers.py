"""Reusable aligned buffers for reads, recycled once no view of them is alive."""

from __future__ import annotations

from collections import deque

from fastio._native import (
    DIRECT_ALIGNMENT,
    HUGE_PAGE,
    AlignedBuffer,
    MappedRange,
    allocate_buffers,
    prefault,
)

__all__ = ["BufferPool", "bucket_size"]


def bucket_size(nbytes: int) -> int:
    """Capacity of the pooled buffer that serves a read of ``nbytes``: the next
    power of two, at least one page, so buffers of one size class are
    interchangeable; past a huge page, the next multiple of one (a region of
    its own each: a 12 MB record batch read whole takes 12 MiB, not 16, each
    of them faulted in)."""
    if nbytes > HUGE_PAGE:
        return -(-nbytes // HUGE_PAGE) * HUGE_PAGE
    return max(DIRECT_ALIGNMENT, 1 << (max(nbytes, 1) - 1).bit_length())


def _region_bytes(size: int) -> int:
    """What one region of ``size`` buffers maps: a huge page, or one buffer."""
    return max(size, HUGE_PAGE)


def _region_of(buffer: AlignedBuffer) -> int:
    """The region ``buffer`` was carved from (its start address): buffers
    smaller than a huge page share a huge-page-aligned region."""
    address = buffer.address
    return address if len(buffer) >= HUGE_PAGE else address & ~(HUGE_PAGE - 1)


class BufferPool:
    """Free lists of :class:`AlignedBuffer` by size class, in regions that add
    up to about ``limit`` bytes.

    A buffer returned with :meth:`give_back` goes straight back to its free list
    when nothing references it; otherwise it is "lent" and becomes reusable once
    the consumer drops its last view. Reuse matters: a fresh buffer page-faults
    while the kernel copies into it, which makes io_uring hand the read to a
    worker thread and costs 3-4x the read itself on cached data. Free lists are
    LIFO so the most recently used (cache-warm) buffer is reused first.

    Memory is counted in regions, since a region is what the kernel maps and
    frees: a huge page carved into buffers of one size (native/hugemem.h says
    why reads want them contiguous), which stays mapped while any of its
    buffers lives. A read takes a free buffer of its size class, else the
    smallest larger free one, so the odd-sized tails of ranges reuse full-size
    buffers instead of each size mapping a region of its own. A new region is
    mapped only when none fits; first, regions whose buffers are all idle are
    unmapped until it fits in ``limit``. The reader's memory budget (the
    ``limit``) bounds the buffers taken, so the pool's whole footprint stays
    near the budget rather than the budget plus idle regions of every size.
    Lent buffers stay counted (their memory lives on); past twice ``limit``
    bytes of them, plus what the consumer says it holds (``held``: a shuffle
    window of batches decoded in place), the oldest are forgotten, left to
    the garbage collector. A consumer slower than the reader keeps about
    ``limit`` bytes lent (the reader stops taking buffers there), and a
    buffer forgotten then would be replaced by a freshly mapped one: the
    slack keeps them reused.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self.held = 0
        self._free: dict[int, list[AlignedBuffer]] = {}
        self._idle_members: dict[int, int] = {}  # region -> its buffers now idle
        self._mapped_bytes = 0  # regions mapped and not yet released
        self._lent: deque[AlignedBuffer | MappedRange] = deque()
        self._lent_bytes = 0
        self._cold: set[int] = set()  # ids of spare buffers not faulted in yet

    def raise_limit(self, limit: int) -> None:
        """Lets the pool keep up to ``limit`` bytes (never lowers it)."""
        self._limit = max(self._limit, limit)

    @property
    def mapped_bytes(self) -> int:
        """Bytes of the regions whose buffers the pool holds, lends or has handed out."""
        return self._mapped_bytes

    def lent_bytes(self) -> int:
        """Bytes of buffers given back while a consumer still holds views of
        them (samples not yet decoded, batches waiting in a hand-off): they
        count against the memory budget until the views are gone."""
        self._reclaim_lent()
        return self._lent_bytes

    def take(self, nbytes: int, populate: bool = True, huge: bool = True) -> AlignedBuffer:
        """A buffer of at least ``nbytes`` (its length may be larger: count
        that). A region mapped for it is faulted in now with ``populate``;
        without, by the first write (a remote read's data arrives over many
        milliseconds, on a thread of its own: faulting in tens of MiB up
        front would hold up the reader's loop before its next request). A
        region is advised for huge pages only with ``huge`` (what O_DIRECT
        reads want, see native/hugemem.h): a copy out of the page cache gains
        little from them, and with memory fragmented by a full page cache,
        mapping 16 MiB in huge pages took up to 66 ms (the first pass over a
        dataset of 12 MB record batches mapped seven such buffers)."""
        size = bucket_size(nbytes)
        buffer = self._take_free(size)
        if buffer is None and self._lent:
            self._reclaim_lent()
            buffer = self._take_free(size)
        if buffer is not None:
            if id(buffer) in self._cold:
                self._cold.discard(id(buffer))
                if populate:
                    prefault(buffer)
            return buffer
        self._release_idle(_region_bytes(size))
        # The first region in ordinary pages: faulting in a huge page may wait
        # for the kernel to reclaim 2 MiB of page cache (10-25 ms measured with
        # memory full of cached data), and the first read waits for it.
        first = not self._mapped_bytes
        fresh = allocate_buffers(size, max(1, HUGE_PAGE // size), huge=huge and not first,
                                 populate=False)  # fmt: skip
        # Only the buffer handed out is faulted in now: the read waiting for
        # it does not also wait for its region's spares, which are faulted
        # in as they are taken.
        if populate:
            prefault(fresh[0])
        self._mapped_bytes += _region_bytes(size)
        for spare in fresh[1:]:
            self._cold.add(id(spare))
            self._keep(spare)
        return fresh[0]

    def has_free(self, nbytes: int) -> bool:
        """Whether :meth:`take` of ``nbytes`` would reuse a buffer, mapping nothing."""
        size = bucket_size(nbytes)
        return any(free for s, free in self._free.items() if s >= size)

    def give_back(self, buffer: AlignedBuffer | MappedRange) -> None:
        """Returns a buffer taken from the pool, or a range mapped from the
        page cache in its place, once read: reused, or counted as lent while
        views of it live."""
        if buffer.exports:
            self._reclaim_lent()
            self._lent.append(buffer)
            self._lent_bytes += len(buffer)
            while self._lent_bytes > 2 * self._limit + self.held:
                forgotten = self._lent.popleft()
                self._lent_bytes -= len(forgotten)
                if isinstance(forgotten, MappedRange):
                    continue  # never the pool's: unmapped once the last view goes
                # Its region now never becomes wholly idle here: the pool keeps
                # its siblings for reuse and stops counting this buffer's share.
                self._mapped_bytes -= len(forgotten)
        else:
            self._keep(buffer)

    def clear(self) -> None:
        self._free.clear()
        self._idle_members.clear()
        self._lent.clear()
        self._cold.clear()
        self._lent_bytes = self._mapped_bytes = 0

    def _take_free(self, size: int) -> AlignedBuffer | None:
        free = self._free.get(size)
        if not free:
            larger = [s for s, f in self._free.items() if s > size and f]
            if not larger:
                return None
            free = self._free[min(larger)]
        buffer = free.pop()
        self._idle_members[_region_of(buffer)] -= 1
        return buffer

    def _keep(self, buffer: AlignedBuffer | MappedRange) -> None:
        if isinstance(buffer, MappedRange):
            return  # a mapped range is not reused: unmapped when dropped
        self._free.setdefault(len(buffer), []).append(buffer)
        region = _region_of(buffer)
        self._idle_members[region] = self._idle_members.get(region, 0) + 1

    def _release_idle(self, room: int) -> None:
        """Unmaps regions whose buffers are all idle (size classes with the
        fewest idle buffers first: the rarely used) until ``room`` more bytes
        fit in the limit."""
        if self._mapped_bytes + room <= self._limit:
            return
        for size in sorted(self._free, key=lambda s: len(self._free[s])):
            members = max(1, HUGE_PAGE // size)
            free = self._free[size]
            whole = [r for r, idle in self._idle_members.items() if idle == members]
            for region in whole:
                if self._mapped_bytes + room <= self._limit:
                    return
                if not any(_region_of(b) == region for b in free):
                    continue
                self._cold.difference_update(id(b) for b in free if _region_of(b) == region)
                free[:] = [b for b in free if _region_of(b) != region]
                del self._idle_members[region]
                self._mapped_bytes -= _region_bytes(size)

    def _reclaim_lent(self) -> None:
        # Consumers mostly drop views in the order they got them, but not all:
        # a view kept longer (a sample cut by a read, a batch's rows) must not
        # hold back the buffers lent after it, or the lent bytes pass the
        # limit and the pool maps fresh regions (a page-cache reclaim each,
        # when memory is full of cached data) in place of forgotten ones.
        lent = self._lent
        while lent and not lent[0].exports:
            buffer = lent.popleft()
            self._lent_bytes -= len(buffer)
            self._keep(buffer)
        if lent and any(not buffer.exports for buffer in lent):
            still: deque[AlignedBuffer | MappedRange] = deque()
            for buffer in lent:
                if buffer.exports:
                    still.append(buffer)
                else:
                    self._lent_bytes -= len(buffer)
                    self._keep(buffer)
            self._lent = still
