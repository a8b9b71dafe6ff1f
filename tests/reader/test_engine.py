"""The native engine, one contract run against both backends."""

from __future__ import annotations

import errno
import multiprocessing
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from fastio._native import DIRECT_ALIGNMENT, AlignedBuffer, Engine
from tests.conftest import ResourceSnapshot, write_random_file


def drain(engine: Engine, count: int) -> dict[int, int]:
    results: dict[int, int] = {}
    while len(results) < count:
        assert engine.wait(5.0), "no completion within 5 s"
        results.update(engine.reap())
    return results


@pytest.fixture
def data_file(tmp_path: Path) -> tuple[str, bytes]:
    path = tmp_path / "data.bin"
    return str(path), write_random_file(path, 5_000_003, seed=7)


class EngineContract:
    kind: str

    @pytest.fixture
    def engine(self) -> Engine:
        engine = Engine(self.kind, 64)
        yield engine
        engine.close()

    def test_kind_is_the_one_asked_for(self, engine: Engine) -> None:
        assert engine.kind == self.kind

    def test_reads_into_any_writable_buffer(self, engine: Engine, data_file) -> None:
        path, data = data_file
        fd = os.open(path, os.O_RDONLY)
        try:
            targets = [bytearray(1000), np.zeros(4096, np.uint8), AlignedBuffer(70_000)]
            offsets = [0, 12_345, 4_999_000]
            for tag, (target, offset) in enumerate(zip(targets, offsets, strict=True)):
                engine.submit(fd, target, offset, tag)
            assert engine.flush() == 3
            results = drain(engine, 3)
        finally:
            os.close(fd)
        for tag, (target, offset) in enumerate(zip(targets, offsets, strict=True)):
            expected = data[offset : offset + len(memoryview(target))]
            assert results[tag] == len(expected)
            assert bytes(memoryview(target)[: results[tag]]) == expected
        assert engine.inflight == 0

    def test_short_read_at_end_of_file_returns_the_count(self, engine, data_file) -> None:
        path, data = data_file
        fd = os.open(path, os.O_RDONLY)
        buffer = bytearray(10_000)
        engine.submit(fd, buffer, len(data) - 100, 1)
        engine.flush()
        assert drain(engine, 1) == {1: 100}
        os.close(fd)
        assert bytes(buffer[:100]) == data[-100:]

    def test_zero_length_read(self, engine, data_file) -> None:
        fd = os.open(data_file[0], os.O_RDONLY)
        engine.submit(fd, bytearray(0), 0, 5)
        engine.flush()
        assert drain(engine, 1) == {5: 0}
        os.close(fd)

    def test_errors_come_back_per_request_as_negative_errno(self, engine, tmp_path) -> None:
        directory_fd = os.open(tmp_path, os.O_RDONLY)
        engine.submit(directory_fd, bytearray(10), 0, 1)
        engine.submit(987_654, bytearray(10), 0, 2)  # not an open descriptor
        engine.flush()
        assert drain(engine, 2) == {1: -errno.EISDIR, 2: -errno.EBADF}
        os.close(directory_fd)

    def test_direct_read_of_an_unaligned_tail(self, engine, data_file) -> None:
        path, data = data_file
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buffer = AlignedBuffer(1 << 20)
        offset = (len(data) // DIRECT_ALIGNMENT - 10) * DIRECT_ALIGNMENT
        engine.submit(fd, buffer, offset, 1, direct=True)
        engine.flush()
        result = drain(engine, 1)[1]
        os.close(fd)
        assert result == len(data) - offset
        assert bytes(memoryview(buffer)[:result]) == data[offset:]

    def test_direct_rejects_unaligned_buffers(self, engine, data_file) -> None:
        fd = os.open(data_file[0], os.O_RDONLY | os.O_DIRECT)
        buffer = AlignedBuffer(8192)
        with pytest.raises(ValueError, match="aligned"):
            engine.submit(fd, memoryview(buffer)[1:4097], 0, 1, direct=True)
        with pytest.raises(ValueError, match="aligned"):
            engine.submit(fd, buffer, 100, 1, direct=True)
        os.close(fd)
        assert buffer.exports == 0, "a refused submit must release the buffer"

    def test_read_only_buffer_is_refused(self, engine, data_file) -> None:
        fd = os.open(data_file[0], os.O_RDONLY)
        with pytest.raises(BufferError):
            engine.submit(fd, b"immutable", 0, 1)
        os.close(fd)

    def test_buffer_is_held_while_in_flight(self, engine, data_file) -> None:
        fd = os.open(data_file[0], os.O_RDONLY)
        buffer = AlignedBuffer(4096)
        engine.submit(fd, buffer, 0, 1)
        assert buffer.exports == 1
        engine.flush()
        drain(engine, 1)
        assert buffer.exports == 0
        os.close(fd)

    def test_capacity_is_enforced(self, data_file) -> None:
        fd = os.open(data_file[0], os.O_RDONLY)
        with Engine(self.kind, 4) as engine:
            buffers = [bytearray(16) for _ in range(5)]
            for tag in range(4):
                engine.submit(fd, buffers[tag], 0, tag)
            with pytest.raises(BlockingIOError):
                engine.submit(fd, buffers[4], 0, 4)
            engine.flush()
            assert len(drain(engine, 4)) == 4
            engine.submit(fd, buffers[4], 0, 4)  # a slot is free again
            engine.flush()
            assert drain(engine, 1) == {4: 16}
        os.close(fd)

    def test_close_with_reads_in_flight_releases_everything(self, data_file) -> None:
        before = ResourceSnapshot()
        fd = os.open(data_file[0], os.O_RDONLY)
        buffers = [AlignedBuffer(1 << 20) for _ in range(32)]
        engine = Engine(self.kind, 32)
        for tag, buffer in enumerate(buffers):
            engine.submit(fd, buffer, tag * 100_000, tag)
        engine.flush()
        engine.close()
        engine.close()  # idempotent
        os.close(fd)
        assert all(buffer.exports == 0 for buffer in buffers)
        assert engine.closed
        with pytest.raises(ValueError, match="closed"):
            engine.flush()
        before.assert_released()

    def test_unusable_after_fork(self, engine, data_file) -> None:
        context = multiprocessing.get_context("fork")
        queue = context.SimpleQueue()

        def child() -> None:
            try:
                engine.flush()
            except RuntimeError as error:
                queue.put(str(error))
            else:
                queue.put("no error")

        process = context.Process(target=child)
        process.start()
        process.join(30)
        assert process.exitcode == 0
        assert "after fork" in queue.get()
        engine.flush()  # the parent's engine still works


class TestUringEngine(EngineContract):
    kind = "io_uring"

    def test_uses_no_threads_of_its_own(self, engine) -> None:
        assert engine.threads == 0


class TestThreadsEngine(EngineContract):
    kind = "threads"

    def test_pool_grows_on_demand_up_to_the_limit(self, data_file) -> None:
        fd = os.open(data_file[0], os.O_RDONLY)
        with Engine("threads", 64, max_threads=8) as engine:
            assert engine.threads == 0
            buffers = [bytearray(4096) for _ in range(40)]
            for tag, buffer in enumerate(buffers):
                engine.submit(fd, buffer, tag * 4096, tag)
            engine.flush()
            assert 1 <= engine.threads <= 8
            assert len(drain(engine, 40)) == 40
        os.close(fd)


def test_unknown_engine_kind() -> None:
    with pytest.raises(ValueError, match="io_uring"):
        Engine("spdk")


def test_aligned_buffer_counts_exports() -> None:
    buffer = AlignedBuffer(10_000, 4096)
    assert buffer.address % 4096 == 0
    assert len(buffer) == 10_000
    view = memoryview(buffer)
    part = view[10:20]
    array = np.frombuffer(buffer, np.uint8)
    assert buffer.exports == 2  # the memoryview (shared by its slice) and numpy's
    del view, part
    assert buffer.exports == 1
    del array
    assert buffer.exports == 0


def test_buffers_carved_from_one_huge_page_region() -> None:
    from fastio._native import HUGE_PAGE, allocate_buffers

    buffers = allocate_buffers(1 << 20, 4)
    addresses = [buffer.address for buffer in buffers]
    assert addresses[0] % HUGE_PAGE == 0  # the region starts on a huge page
    assert addresses == [addresses[0] + i * (1 << 20) for i in range(4)]
    memoryview(buffers[3])[:] = b"\x07" * (1 << 20)
    survivor = buffers[3]
    del buffers
    import gc

    gc.collect()
    # The region stays mapped while any buffer carved from it is alive.
    assert bytes(memoryview(survivor)[:4]) == b"\x07" * 4
    with pytest.raises(ValueError, match="multiple of 4096"):
        allocate_buffers(1000, 1)


def test_views_in_garbage_cycles_are_collected_safely() -> None:
    import gc

    from fastio._native import allocate_buffers

    for _ in range(50):
        buffers = allocate_buffers(65_536, 32)
        cycle: list[object] = [memoryview(buffer) for buffer in buffers]
        cycle.append(cycle)
        del buffers, cycle
        gc.collect()


def _resident_bytes(address: int, length: int) -> int:
    """Bytes of the ``length`` from ``address`` that are in memory, page by page
    (the present bit of each in /proc/self/pagemap): what the rest of the
    process maps beside them does not count (the kernel may merge a fresh
    mapping with a neighbour's, whose resident pages a mapping's Rss counts)."""
    page = os.sysconf("SC_PAGE_SIZE")
    first, last = address // page, (address + length - 1) // page
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = pagemap.read((last - first + 1) * 8)
    present = sum(1 for (entry,) in struct.iter_unpack("<Q", entries) if entry >> 63)
    return present * page


def test_buffers_mapped_without_faulting_are_faulted_in_by_prefault() -> None:
    """Remote reads take buffers whose pages are faulted in by the thread
    that receives into them (prefault), not by the reader's loop when it maps
    them: the memory is the same, only who pays for it moves."""
    from fastio._native import allocate_buffers, prefault

    size = 32 << 20
    [buffer] = allocate_buffers(size, 1, populate=False)
    view = memoryview(buffer)
    view[:5] = b"first"  # one page touched
    before = _resident_bytes(buffer.address, size)
    assert before < size // 2
    prefault(view)
    assert _resident_bytes(buffer.address, size) - before >= size // 2  # the rest is resident now
    assert bytes(view[:5]) == b"first"  # and nothing written was changed
    view[-5:] = b"lasts"
    assert bytes(view[-5:]) == b"lasts"
    with pytest.raises(BufferError):
        prefault(b"read-only bytes")


def test_prefault_faults_in_every_page_it_was_not_seen_to_fault_in_before() -> None:
    """A buffer remembers how much of it prefault faulted in, so that a
    remote read into a reused buffer does not ask the kernel for its pages
    again; pieces asked for out of order, or past what is known, are still
    faulted in whole."""
    from fastio._native import allocate_buffers, prefault

    mib = 1 << 20
    [buffer] = allocate_buffers(8 * mib, 1, huge=False, populate=False)
    view = memoryview(buffer)

    def resident(start: int, end: int) -> int:
        return _resident_bytes(buffer.address + start * mib, (end - start) * mib)

    prefault(view[: 2 * mib])
    assert resident(0, 2) == 2 * mib
    assert resident(2, 8) == 0
    prefault(view[4 * mib : 6 * mib])  # past what is known to be in
    assert resident(4, 6) == 2 * mib
    assert resident(2, 4) == resident(6, 8) == 0
    prefault(view[: 4 * mib])  # the 2 MiB between are still to be faulted in
    assert resident(0, 6) == 6 * mib
    prefault(view[: 1 * mib])  # known to be in: nothing to do, nothing lost
    assert resident(0, 6) == 6 * mib
    assert resident(6, 8) == 0
    prefault(buffer)  # the whole buffer, by the buffer itself
    assert resident(0, 8) == 8 * mib
    view[-5:] = b"lasts"
    assert bytes(view[-5:]) == b"lasts"


def test_a_pool_faults_in_the_buffer_it_hands_out_and_the_spares_as_they_are_taken() -> None:
    """The first read of a stream waits for its own buffer's pages only: the
    spares carved from the same region are faulted in as they are taken (or
    by their first write, when taken without ``populate``)."""
    from fastio.reader._buffers import BufferPool

    size = 64 << 10
    pool = BufferPool(64 << 20)
    first = pool.take(size)  # maps a region of 32 such buffers (ordinary pages)
    region = 32 * size
    resident = _resident_bytes(first.address, region)
    assert size <= resident < 4 * size
    spares = [pool.take(size) for _ in range(30)]
    assert _resident_bytes(first.address, region) >= 31 * size  # each faulted in as taken
    last = pool.take(size, populate=False)
    addresses = [b.address for b in [first, *spares, last]]
    assert max(addresses) - min(addresses) == 31 * size  # one region's 32 buffers
    assert _resident_bytes(first.address, region) < 32 * size  # the last one is not yet
    memoryview(last)[:] = bytes(size)
    assert _resident_bytes(first.address, region) >= 32 * size


def test_a_read_past_a_huge_page_takes_whole_huge_pages_not_the_next_power_of_two() -> None:
    """A 12 MB record batch read whole takes a 12 MiB buffer (16 MiB faulted
    in for it before); reads up to a huge page keep power-of-two classes.
    A larger free buffer still serves a smaller read, and the buffer's pages
    are what the pool counts as mapped."""
    from fastio._native import HUGE_PAGE
    from fastio.reader._buffers import BufferPool, bucket_size

    assert [bucket_size(n) for n in (1, 4097, 65_537, HUGE_PAGE)] == [
        4096, 8192, 128 << 10, HUGE_PAGE]  # fmt: skip
    assert bucket_size(HUGE_PAGE + 1) == 2 * HUGE_PAGE
    assert bucket_size(12_400_000) == 6 * HUGE_PAGE
    pool = BufferPool(64 << 20)
    batch = pool.take(12_400_000, populate=False)
    assert len(batch) == 6 * HUGE_PAGE
    assert pool.mapped_bytes == 6 * HUGE_PAGE
    pool.give_back(batch)
    smaller = pool.take(9_000_000, populate=False)  # the free 12 MiB one, nothing mapped
    assert smaller.address == batch.address
    assert pool.mapped_bytes == 6 * HUGE_PAGE


@pytest.mark.parametrize(("probes", "window"), [(32, 64 << 10), (4, 1 << 20), (1, 8 << 20)])
def test_what_the_page_cache_holds_is_the_same_asked_either_way(tmp_path: Path, probes, window):
    """cachestat(2) and mincore(2) over a mapping count the same pages: a file
    evicted, then its first quarter read back (with no read-ahead, which
    cachestat counts while it is still being read and mincore only once it
    is in), holds none and then that share, whichever is asked."""
    from fastio._native import resident_fraction

    size = 8 << 20
    path = tmp_path / "data"
    write_random_file(path, size, 5)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        cold = [resident_fraction(fd, 0, size, probes, window, mapped=m) for m in (False, True)]
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        os.pread(fd, size // 4, 0)
        warm = [resident_fraction(fd, 0, size, probes, window, mapped=m) for m in (False, True)]
    finally:
        os.close(fd)
    assert cold == [0.0, 0.0]
    assert warm[0] == warm[1]
    assert 0.2 <= warm[0] < 0.5
