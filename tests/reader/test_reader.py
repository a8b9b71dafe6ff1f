"""The asyncio reader: one contract, run against the io_uring engine and the thread pool."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import errno
import os
import pickle
import random
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastio
from fastio import ByteRange, Chunk, Reader, Shard
from fastio._native import resident_fraction, stat_stamps
from fastio.reader import _reader
from fastio.reader._reader import (
    CACHED_REQUESTS,
    MAPPED_PIECE_BYTES,
    _change_stamp,
    listed_stamps,
)
from fastio.reader._requests import LOCAL_FIRST_BYTES
from fastio.reader._sync import Handoff, LoopThread
from tests.conftest import ResourceSnapshot
from tests.pagecache import cached, drop_pages, mapped, resident
from tests.servers import RangeServer

_CACHE_ATTEMPTS = 5


def evict(path: str) -> None:
    """Drop ``path``'s pages from the page cache (written back first)."""
    assert drop_pages(path) == 0.0


def expected_bytes(corpus: dict[str, bytes], shards: Sequence[Shard]) -> list[bytes]:
    out = []
    for shard in shards:
        parts = []
        for rng in shard.ranges:
            data = corpus[rng.path]
            end = len(data) if rng.length is None else rng.offset + rng.length
            parts.append(data[rng.offset : end])
        out.append(b"".join(parts))
    return out


def settled_read_ahead(reader: Reader, expected: int | None = None) -> int:
    """Bytes read ahead of the consumer once the reader has no read in flight
    and starts none (polled until steady, for at most a minute), or as soon as
    they reach ``expected``: a loop thread held off the CPU between two reads
    looks steady for a while."""
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stats = reader.stats()
        seen.append((stats.inflight_requests, stats.buffered_bytes))
        if stats.buffered_bytes == expected:
            return expected
        if expected is None and len(seen) >= 3 and seen[-3:] == [(0, seen[-1][1])] * 3:
            return seen[-1][1]
        time.sleep(0.02)
    raise AssertionError(f"the reader never settled: {seen[-5:]}")


def join_by_shard(chunks: Iterable[Chunk], shard_count: int) -> list[bytes]:
    parts: list[list[bytes]] = [[] for _ in range(shard_count)]
    for chunk in chunks:
        parts[chunk.shard].append(bytes(chunk.data))
    return [b"".join(p) for p in parts]


async def collect_async(reader: Reader, shards: Sequence[fastio.ShardLike]) -> list[Chunk]:
    return [chunk async for chunk in reader.astream(shards)]


def byte_ranges(corpus: dict[str, bytes]) -> st.SearchStrategy[Shard]:
    """A shard of 1..6 valid ranges over the corpus files."""
    paths = sorted(corpus)

    @st.composite
    def one_range(draw: st.DrawFn) -> ByteRange:
        path = draw(st.sampled_from(paths))
        size = len(corpus[path])
        offset = draw(st.integers(0, size))
        if draw(st.booleans()):
            return ByteRange(path, offset)  # to the end of the file
        return ByteRange(path, offset, draw(st.integers(0, size - offset)))

    return st.lists(one_range(), min_size=1, max_size=6).map(lambda r: Shard(tuple(r)))


KNOBS = st.fixed_dictionaries(
    {
        "outstanding_requests": st.integers(1, 64),
        "read_size": st.sampled_from([4096, 16_384, 65_536, 1 << 20]),
        "direct": st.sampled_from([False, True, "auto"]),
        "coalesce_gap": st.sampled_from([0, 4096, 65_536]),
        "map_cached": st.sampled_from([False, True, "auto"]),
    }
)


class ReaderContract:
    engine: str

    def reader(self, **knobs: object) -> Reader:
        return Reader(engine=self.engine, **knobs)

    @given(data=st.data(), knobs=KNOBS)
    # One body runs for each engine class (differing executors); replaying an
    # example that failed on one engine against the other is what we want.
    # The corpus fixture is session-scoped data, read-only, so sharing it is safe.
    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    def test_random_ranges_match_python_reads(self, corpus, data, knobs) -> None:
        shards = data.draw(st.lists(byte_ranges(corpus), min_size=1, max_size=8))
        with self.reader(**knobs) as reader:
            chunks = list(reader.stream(shards))
        assert join_by_shard(chunks, len(shards)) == expected_bytes(corpus, shards)
        # Chunks come in order: shard by shard, range by range, ascending offsets.
        positions = [(c.shard, c.range, c.offset) for c in chunks]
        assert positions == sorted(positions)
        for chunk in chunks:
            assert len(chunk.data) <= knobs["read_size"] + 4096

    def test_async_and_sync_deliver_the_same_chunks(self, corpus) -> None:
        shards = [Shard.file(path) for path in sorted(corpus)]
        with self.reader(read_size=65_536) as reader:
            sync = [(c.shard, c.range, c.offset, bytes(c.data)) for c in reader.stream(shards)]
        with self.reader(read_size=65_536) as reader:
            chunks = asyncio.run(collect_async(reader, shards))
            asynchronous = [(c.shard, c.range, c.offset, bytes(c.data)) for c in chunks]
        assert sync == asynchronous
        assert join_by_shard(chunks, len(shards)) == [corpus[p] for p in sorted(corpus)]

    def test_end_markers(self, corpus) -> None:
        path = max(corpus, key=lambda p: len(corpus[p]))
        shards = [Shard((ByteRange(path, 0, 10_000), ByteRange(path, 50_000))), path]
        with self.reader(read_size=65_536, coalesce_gap=0) as reader:
            chunks = list(reader.stream(shards))
        shard_ends = [c for c in chunks if c.end_of_shard]
        assert [c.shard for c in shard_ends] == [0, 1]
        assert all(c.end_of_range for c in shard_ends)
        assert [(c.shard, c.range) for c in chunks if c.end_of_range] == [(0, 0), (0, 1), (1, 0)]

    @pytest.mark.parametrize("covers", ["part of a range", "a whole range", "a whole shard"])
    def test_a_cached_first_range_is_read_where_it_is_consumed(self, make_file, covers) -> None:
        """A stream's first bytes, where the page cache holds them, are read on
        the consumer's thread, without a trip through the reader's loop; the
        chunks that follow are numbered, cut and marked as a stream read all
        through the loop numbers them (one read with O_DIRECT here), whatever
        of the first shard those bytes were."""
        path, data = make_file(3 << 20)
        small, small_data = make_file(10_000)
        shards, expected = {
            "part of a range": (
                [Shard((ByteRange(path, 100, 2 << 20), ByteRange(path, 0, 5000))), small],
                [data[100 : 100 + (2 << 20)], data[:5000], small_data],
            ),
            "a whole range": (
                [Shard((ByteRange(path, 100, 5000), ByteRange(path, 1 << 20))), small],
                [data[100:5100], data[1 << 20 :], small_data],
            ),
            "a whole shard": (
                [small, Shard((ByteRange(path, 7, 1000), ByteRange(path, 2 << 20)))],
                [small_data, data[7:1007], data[2 << 20 :]],
            ),
        }[covers]

        def ranges_of(reader: Reader) -> list[tuple[int, int, bytes, bool, bool]]:
            joined: list[tuple[int, int, bytes, bool, bool]] = []
            for chunk in reader.stream(shards):
                if joined and joined[-1][:2] == (chunk.shard, chunk.range):
                    assert not joined[-1][3], "a chunk after its range's end"
                    joined[-1] = (chunk.shard, chunk.range, joined[-1][2] + bytes(chunk.data),
                                  chunk.end_of_range, chunk.end_of_shard)  # fmt: skip
                else:
                    joined.append((chunk.shard, chunk.range, bytes(chunk.data),
                                   chunk.end_of_range, chunk.end_of_shard))  # fmt: skip
            return joined

        with self.reader(read_size=65_536) as reader:
            got = ranges_of(reader)
            heads = reader._head_reads
            stats = reader.stats()
        with self.reader(read_size=65_536, direct=True) as reader:
            through_the_loop = ranges_of(reader)
            assert reader._head_reads == 0
        assert heads == 1
        assert got == through_the_loop
        assert [joined for _, _, joined, _, _ in got] == expected
        assert stats.bytes_delivered == sum(len(r[2]) for r in got)
        assert sum(stats.latency_histogram) == stats.requests

    def test_a_cached_first_chunk_starts_no_thread(self, make_file) -> None:
        """A fresh reader hands over a cached first chunk before it starts its
        loop: a thread started meanwhile would take the GIL from the consumer
        taking that chunk. The loop starts at the consumer's next request."""
        path, data = make_file(3 << 20)
        before = {thread.ident for thread in threading.enumerate()}
        with self.reader(read_size=65_536) as reader:
            stream = reader.stream([path])
            first = next(stream)
            started = {thread.name for thread in threading.enumerate()
                       if thread.ident not in before}  # fmt: skip
            assert (started, reader._head_reads) == (set(), 1)
            rest = b"".join(bytes(chunk.data) for chunk in stream)
            assert reader._background is not None
        assert bytes(first.data) + rest == data

    @pytest.mark.parametrize(
        "on_the_consumers_thread",
        [True, False],
        ids=["all but one page cached", "only the first page cached"],
    )
    def test_a_first_range_the_page_cache_holds_most_of_is_read_where_it_is_consumed(
        self, make_file, on_the_consumers_thread: bool
    ) -> None:
        """A first range of which the page cache lacks a page (a machine
        reclaims some of a warm file's pages now and then) is still read on
        the consumer's thread, the missing page from the device, with no
        thread started; one it holds only a page of is cold: the stream reads
        it through the loop, where ``direct="auto"`` decides how."""
        path, data = make_file(1 << 20)
        first, page = LOCAL_FIRST_BYTES, 4096
        pages = range(first // page)
        wanted = [number for number in pages if number != 2] if on_the_consumers_thread else [0]
        for _ in range(_CACHE_ATTEMPTS):  # the machine may reclaim a page meanwhile
            fd = os.open(path, os.O_RDONLY)
            try:
                # Page by page, with no read-ahead: a whole read caches large
                # folios, of which dropping a page drops nothing.
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                for number in wanted:
                    os.pread(fd, page, number * page)
                held = resident_fraction(fd, 0, first, 1, first)
            finally:
                os.close(fd)
            if held == len(wanted) / len(pages):
                break
        assert 0 < held < 1
        before = {thread.ident for thread in threading.enumerate()}
        with self.reader() as reader:
            stream = reader.stream([path])
            head = next(stream)
            started = {thread.name for thread in threading.enumerate()
                       if thread.ident not in before}  # fmt: skip
            assert (started == set()) is on_the_consumers_thread
            assert reader._head_reads == int(on_the_consumers_thread)
            rest = b"".join(bytes(chunk.data) for chunk in stream)
        assert bytes(head.data) + rest == data
        if on_the_consumers_thread:
            assert bytes(head.data) == data[:first]

    @pytest.mark.parametrize("count", [5, 40])
    def test_cached_shards_of_one_range_come_before_the_loop_starts(
        self, make_file, monkeypatch, count: int
    ) -> None:
        """A fresh reader also reads the next shards of one range each on the
        consumer's thread, where the page cache holds them whole, up to 17
        shards and 1 MiB in all (a shuffled epoch's first window is a sample
        from each of 8 shards): a stream of 5 such shards never starts the
        loop; one of 40 starts it for the rest, which come numbered and
        marked as a stream read all through the loop gives them. (A shard
        that takes long to open and read stops it: never here.)"""
        monkeypatch.setattr(_reader, "_HEAD_SLOW", 3600.0)
        files = [make_file(10_000 + 1000 * number) for number in range(count)]
        shards = [path for path, _ in files]
        before = {thread.ident for thread in threading.enumerate()}
        with self.reader(read_size=65_536) as reader:
            stream = reader.stream(shards)
            chunks = [next(stream) for _ in range(min(count, 17))]
            started = {thread.name for thread in threading.enumerate()
                       if thread.ident not in before}  # fmt: skip
            assert (started, reader._head_reads) == (set(), min(count, 17))
            chunks += list(stream)
            assert (reader._background is None) == (count <= 17)
            assert reader.stats().bytes_delivered == sum(len(data) for _, data in files)
        with self.reader(read_size=65_536, direct=True) as reader:
            through_the_loop = list(reader.stream(shards))
            assert reader._head_reads == 0

        def marked(chunks: list[Chunk]) -> list[tuple[int, int, bytes, bool, bool]]:
            return [(c.shard, c.range, bytes(c.data), c.end_of_range, c.end_of_shard)
                    for c in chunks]  # fmt: skip

        assert marked(chunks) == marked(through_the_loop)
        assert [bytes(chunk.data) for chunk in chunks] == [data for _, data in files]
        assert [chunk.shard for chunk in chunks] == list(range(count))

    @pytest.mark.parametrize(("slow", "size", "heads"), [(3600.0, 200_000, 5), (0.0, 10_000, 2)],
                             ids=["1 MiB in all", "a slow shard"])  # fmt: skip
    def test_what_is_read_before_the_loop_starts_is_bounded(
        self, make_file, monkeypatch, slow: float, size: int, heads: int
    ) -> None:
        """Shards of 200 KB: the first and four more are read on the consumer's
        thread (1 MiB at most), the sixth through the loop. Where a shard's
        open and read took long (a network filesystem, where the loop's
        read-ahead opens several at once), the shards after it are not read
        there: with every one counted as slow, the first shard and the next
        are, and the rest go through the loop."""
        monkeypatch.setattr(_reader, "_HEAD_SLOW", slow)
        files = [make_file(size) for _ in range(8)]
        with self.reader(read_size=1 << 20) as reader:
            stream = reader.stream([path for path, _ in files])
            got = [bytes(next(stream).data) for _ in range(heads)]
            assert (reader._background, reader._head_reads) == (None, heads)
            got += [bytes(chunk.data) for chunk in stream]
            assert (reader._background is not None, reader._head_reads) == (True, heads)
        assert got == [data for _, data in files]

    @pytest.mark.parametrize("fails_at", [0, 1])
    def test_shards_that_cannot_be_listed_raise_after_the_bytes_before(
        self, make_file, fails_at: int
    ) -> None:
        """The shards come from an iterable that fails: the stream delivers
        every shard before the failure, then raises its error."""
        path, data = make_file(100_000)

        def listed():
            for index in range(2):
                if index == fails_at:
                    raise ValueError("no such shard list")
                yield path

        received = bytearray()
        with self.reader() as reader, pytest.raises(ValueError, match="no such shard list"):
            for chunk in reader.stream(listed()):
                received += chunk.data
        assert bytes(received) == data[: len(data) * fails_at]

    def test_direct_io_on_unaligned_file_sizes(self, corpus) -> None:
        paths = [p for p in sorted(corpus) if len(corpus[p]) % 4096]
        assert len(paths) >= 4
        with self.reader(direct=True, read_size=65_536, outstanding_requests=8) as reader:
            chunks = list(reader.stream(paths))
        assert join_by_shard(chunks, len(paths)) == [corpus[p] for p in paths]
        # O_DIRECT reads whole sectors: storage delivered at least what we asked for.
        stats = reader.stats()
        assert stats.bytes_read >= stats.bytes_delivered == sum(len(corpus[p]) for p in paths)

    @pytest.mark.parametrize("direct", [False, True])
    def test_whole_ranges_arrive_as_one_chunk_within_half_of_the_budget(
        self, make_file, direct
    ) -> None:
        path, data = make_file(5 << 20)
        fits = ByteRange(path, 1001, 1_900_000)  # its buffer: 2 MiB, half of 4 MiB
        too_large = ByteRange(path, 2 << 20, (2 << 20) + 4096)  # a 4 MiB buffer
        shards = [Shard((fits, too_large), whole=True, direct=direct), Shard((fits,))]
        with self.reader(read_size=65_536, memory_budget=4 << 20) as reader:
            chunks = list(reader.stream(shards))
        assert join_by_shard(chunks, 2) == [data[1001:1_901_001] + data[2 << 20 : (4 << 20) + 4096],
                                            data[1001:1_901_001]]  # fmt: skip
        whole_one = [c for c in chunks if (c.shard, c.range) == (0, 0)]
        assert [len(c.data) for c in whole_one] == [1_900_000]
        assert all(len(c.data) <= 65_536 for c in chunks if (c.shard, c.range) != (0, 0))

    def test_auto_direct_reads_cold_files_with_o_direct_and_warm_ones_cached(
        self, make_file
    ) -> None:
        files = [make_file(size) for size in (1, 4097, 65_537, 1_048_576 + 4095, 3_000_001)]
        paths, contents = [path for path, _ in files], [data for _, data in files]
        for path in paths:
            evict(path)
        # Cold: O_DIRECT, which leaves the page cache as it was; a buffered read
        # fills it; then "auto" reads them through the page cache.
        for direct, cached_after in (("auto", False), (False, True), ("auto", True)):
            with self.reader(direct=direct, read_size=65_536, outstanding_requests=8) as reader:
                chunks = list(reader.stream(paths))
            assert join_by_shard(chunks, len(paths)) == contents
            if cached_after:
                assert all(cached(path) for path in paths)
            else:
                assert [resident(path) for path in paths] == [0.0] * len(paths)

    @pytest.mark.parametrize(
        ("direct", "held", "few"),
        [("auto", 1.0, True), (False, 1.0, True), ("auto", 0.0, False), (False, 0.0, False),
         (True, 1.0, False), ("auto", 0.75, False), (False, 0.75, False)],
    )  # fmt: skip
    def test_reads_of_a_file_the_page_cache_holds_are_few_at_once(
        self, make_file, direct, held, few
    ) -> None:
        # A cached read is a memory copy: more of them in flight only spread
        # the read-ahead past the CPU's caches. Device reads keep the depth,
        # and so does a file of which a quarter would come from the device.
        # How deep device reads then go depends on how quickly they complete
        # (this VM's disk answers from the host's cache in microseconds, and
        # for a consumer that waits the reader starts two reads, then looks
        # whether its piece is in): what is checked is the judgement, and
        # that reads of a cached file never exceed their limit.
        from fastio.reader._files import FileTable

        path, data = make_file(8 << 20)
        evict(path)
        if held:
            # The machine may reclaim a page between the read and the check
            # (seen under a loaded suite): read again until the cache holds
            # exactly the share asked for.
            for _ in range(_CACHE_ATTEMPTS):
                Path(path).read_bytes()
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, int(len(data) * held), 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
                if resident(path) == held:
                    break
            assert resident(path) == held
        table = FileTable(4)
        try:
            assert table.acquire(path, direct).cached is few
        finally:
            table.close_all()
        with self.reader(direct=direct, read_size=65_536, outstanding_requests=8) as reader:
            chunks = list(reader.stream([path]))
            stats = reader.stats()
        assert join_by_shard(chunks, 1) == [data]
        assert 1 <= stats.peak_inflight_requests <= (CACHED_REQUESTS if few else 8)

    @pytest.mark.parametrize("window", [0, 4 << 20])
    def test_views_the_consumer_holds_as_its_window_leave_the_budget_to_read_ahead(
        self, make_file, window
    ) -> None:
        # A shuffle window of samples gathered only when their batch is made
        # holds views of the reader's buffers: the shuffle buffer's memory.
        path, data = make_file(8 << 20)
        budget, piece = 1 << 20, 65_536
        with self.reader(direct=True, read_size=piece, outstanding_requests=8,
                         memory_budget=budget) as reader:  # fmt: skip
            reader.consumer_window = window
            stream = iter(reader.stream([path]))
            held: list[Chunk] = []
            while sum(chunk.data.nbytes for chunk in held) < 2 * budget:
                held.append(next(stream))
            ahead = settled_read_ahead(reader, budget if window else None)
            chunks = held + list(stream)
        assert join_by_shard(chunks, 1) == [data]
        if window:
            assert ahead == budget  # the views held beyond it are the window's
        else:
            assert ahead <= 2 * piece  # held views count: a piece at a time

    def test_auto_direct_reads_cold_files_through_the_cache_where_asked(self, make_file) -> None:
        # Data that fits in the page cache (a Dataset says so): a cold file is
        # read through it, so that the next epoch finds it there; the same
        # file with the reader's default is read with O_DIRECT and stays cold.
        files = [make_file(size) for size in (4097, 1_048_576 + 4095, 3_000_001)]
        paths, contents = [path for path, _ in files], [data for _, data in files]
        for through_cache in (False, True):
            for path in paths:
                evict(path)
            with self.reader(read_size=65_536, outstanding_requests=8) as reader:
                assert reader.cold_through_cache is False
                reader.cold_through_cache = through_cache
                chunks = list(reader.stream(paths))
            assert join_by_shard(chunks, len(paths)) == contents
            if through_cache:
                assert all(cached(path) for path in paths)
            else:
                assert [resident(path) for path in paths] == [0.0] * len(paths)

    def test_auto_direct_decides_per_file(self, make_file) -> None:
        (cold_path, cold_data), (warm_path, warm_data) = make_file(100_001), make_file(100_001)
        evict(cold_path)
        Path(warm_path).read_bytes()
        with self.reader() as reader:
            assert reader.settings.direct == "auto"
            chunks = list(reader.stream([cold_path, warm_path]))
        assert join_by_shard(chunks, 2) == [cold_data, warm_data]
        assert resident(cold_path) == 0.0
        assert cached(warm_path)

    def test_zero_byte_files_yield_one_empty_chunk(self, make_file) -> None:
        empty_a, _ = make_file(0)
        full, data = make_file(10_000)
        empty_b, _ = make_file(0)
        with self.reader() as reader:
            chunks = list(reader.stream([empty_a, full, empty_b]))
        assert [(c.shard, len(c.data), c.end_of_shard) for c in chunks] == [
            (0, 0, True),
            (1, 10_000, True),
            (2, 0, True),
        ]
        assert bytes(chunks[1].data) == data

    def test_knobs_change_while_streaming(self, make_file) -> None:
        path, data = make_file(16 << 20)
        received = []
        budget = 4 << 20  # so that little is read ahead at the first settings
        with self.reader(read_size=1 << 20, outstanding_requests=2, memory_budget=budget) as reader:
            stream = reader.stream([path])
            for index, chunk in enumerate(stream):
                received.append(chunk)
                if index == 2:
                    reader.read_size = 16_384
                    reader.outstanding_requests = 32
            stats = reader.stats()
        assert b"".join(bytes(c.data) for c in received) == data
        # A stream's first pieces are small (the first sample waits for no
        # more): the one read on the consumer's thread where the page cache
        # holds it, and the read-ahead's first; then pieces are read_size long.
        sizes = [chunk.data.nbytes for chunk in received]
        first_full = sizes.index(1 << 20)
        assert 1 <= first_full <= 2
        assert set(sizes[:first_full]) == {LOCAL_FIRST_BYTES}
        # Read ahead at the old size finishes, then every request is small.
        assert received[-1].data.nbytes == 16_384
        assert stats.read_size == 16_384
        assert stats.outstanding_requests == 32
        assert stats.requests > 400

    def test_knobs_are_validated(self) -> None:
        with self.reader() as reader:
            with pytest.raises(ValueError, match="outstanding_requests"):
                reader.outstanding_requests = 0
            with pytest.raises(ValueError, match="read_size"):
                reader.read_size = 100
            with pytest.raises(TypeError, match="read_size"):
                reader.read_size = 1.5  # type: ignore[assignment]
        with pytest.raises(TypeError):
            Reader(no_such_knob=1)

    def test_thousands_of_small_ranges(self, make_file) -> None:
        rng = random.Random(3)
        files = [make_file(200_000) for _ in range(4)]
        contents = dict(files)
        shards = []
        expected = []
        for _ in range(500):
            ranges = []
            for _ in range(8):
                path = rng.choice(list(contents))
                offset = rng.randrange(0, 199_000)
                length = rng.randrange(0, 1000)
                ranges.append(ByteRange(path, offset, length))
            shards.append(Shard(tuple(ranges)))
            expected.append(
                b"".join(contents[r.path][r.offset : r.offset + r.length] for r in ranges)
            )
        # And one file read as 4000 contiguous records: coalesced into few requests.
        record_path, record_data = make_file(400_000)
        records = Shard(tuple(ByteRange(record_path, i * 100, 100) for i in range(4000)))
        with self.reader(outstanding_requests=32, read_size=65_536) as reader:
            chunks = list(reader.stream([*shards, records]))
            stats = reader.stats()
        assert join_by_shard(chunks, len(shards) + 1) == [*expected, record_data]
        assert sum(1 for c in chunks if c.shard == len(shards)) == 4000
        assert stats.requests < 4000 + 8 * 500 - 3000, "contiguous records were not coalesced"

    def test_memory_budget_bounds_read_ahead(self, make_file) -> None:
        path, _ = make_file(32 << 20)

        async def slow_consumer(reader: Reader) -> list[int]:
            held = []
            async for _ in reader.astream([path]):
                held.append(reader.stats().buffered_bytes)
                await asyncio.sleep(0.002)
            return held

        budget = 4 << 20
        with self.reader(read_size=1 << 20, outstanding_requests=16, memory_budget=budget) as r:
            held = asyncio.run(slow_consumer(r))
            stats = r.stats()
        assert max(held) <= budget
        assert stats.backpressure_seconds > 0  # the full budget held reads back (how long: timing)
        assert stats.bytes_delivered == 32 << 20

    def test_a_stream_progresses_while_another_holds_the_budget(self, make_file) -> None:
        # A dataset indexing a shard it streams reads the shard's ends through
        # a second stream while the first one's chunks are still held.
        path, data = make_file(8 << 20)
        other, other_data = make_file(64 << 10)
        with self.reader(read_size=1 << 20, outstanding_requests=4, memory_budget=2 << 20) as r:
            first = iter(r.stream([path]))
            held = [next(first)]
            nested: list[bytes] = []
            worker = threading.Thread(target=lambda: nested.append(
                b"".join(bytes(c.data) for c in r.stream([other]))))  # fmt: skip
            worker.start()
            worker.join(60)
            assert nested == [other_data], "the second stream waited for the first's budget"
            rest = b"".join(bytes(c.data) for c in first)
        assert bytes(held[0].data) + rest == data

    def test_stats_describe_the_work(self, make_file) -> None:
        path, data = make_file(5 << 20)
        with self.reader(read_size=1 << 20) as reader:
            before = reader.stats()
            assert sum(len(c.data) for c in reader.stream([path])) == len(data)
            after = reader.stats()
        window = after.since(before)
        assert window.bytes_delivered == window.bytes_read == len(data)
        # The first pieces are small (the file is cached: one read on this
        # thread, then the read-ahead's first), then read_size pieces:
        # 2 x 256 KiB + 4 x 1 MiB + 512 KiB.
        assert window.requests == 2 + -(-(len(data) - 2 * LOCAL_FIRST_BYTES) // (1 << 20)) == 7
        assert sum(window.latency_histogram) == 7
        assert 0 < window.latency_percentile(0.5) < 5.0
        assert window.engine == self.engine
        numbers = window.as_dict()
        assert numbers["throughput_bytes_per_second"] > 0
        assert numbers["latency_p99_seconds"] is not None

    # ---- failures ---------------------------------------------------------------

    def test_missing_file_names_the_path_after_earlier_data(self, make_file, tmp_path) -> None:
        good, data = make_file(100_000)
        missing = str(tmp_path / "missing.bin")
        received = []
        with self.reader() as reader:
            with pytest.raises(FileNotFoundError) as caught:
                for chunk in reader.stream([good, missing, good]):
                    received.append(bytes(chunk.data))
            assert caught.value.filename == missing
            assert b"".join(received) == data
            # The reader stays usable.
            assert b"".join(bytes(c.data) for c in reader.stream([good])) == data

    def test_directory_is_refused_with_its_path(self, tmp_path) -> None:
        with self.reader() as reader, pytest.raises(IsADirectoryError) as caught:
            list(reader.stream([str(tmp_path)]))
        assert caught.value.filename == str(tmp_path)

    def test_permission_denied_names_the_path(self, make_file) -> None:
        path, data = make_file(1000)
        os.chmod(path, 0)
        with self.reader() as reader:
            with as_unprivileged_user(), pytest.raises(PermissionError) as caught:
                list(reader.stream([path]))
            assert caught.value.filename == path
            os.chmod(path, 0o644)
            assert b"".join(bytes(c.data) for c in reader.stream([path])) == data

    def test_range_past_the_end_of_the_file(self, make_file) -> None:
        path, _ = make_file(1000)
        with self.reader() as reader, pytest.raises(fastio.TruncatedFileError) as caught:
            list(reader.stream([Shard((ByteRange(path, 900, 500),))]))
        error = caught.value
        assert isinstance(error, OSError)
        assert error.filename == path
        assert (error.offset, error.expected_end) == (1000, 1400)
        assert "offset 1000" in str(error)

    def test_file_truncated_while_being_read(self, make_file) -> None:
        path, data = make_file(16 << 20)
        received = bytearray()
        with self.reader(read_size=65_536, outstanding_requests=1, memory_budget=65_536) as r:
            with pytest.raises(fastio.TruncatedFileError) as caught:
                for chunk in r.stream([path]):
                    received += chunk.data
                    if len(received) == 65_536:
                        os.truncate(path, 1 << 20)
            error = caught.value
            assert error.filename == path
            assert error.offset == 1 << 20
            assert bytes(received) == data[: len(received)]
            assert len(received) <= 1 << 20
            # Usable afterwards, and the truncated file reads as what is left.
            assert b"".join(bytes(c.data) for c in r.stream([path])) == data[: 1 << 20]

    @pytest.mark.parametrize("map_cached", [True, False])
    def test_a_file_the_page_cache_holds_is_mapped_not_copied(self, make_file, map_cached) -> None:
        # Mapped, the consumer's views are of the page cache itself (read-only),
        # with the bytes a read copies; ranges at offsets and ends that are not
        # page-aligned, and a file whose size is not a multiple of a page.
        path, data = make_file(3_000_001)
        Path(path).read_bytes()
        shards = [Shard((ByteRange(path, 4097, 1_000_000), ByteRange(path, 2_999_000))), path]
        with self.reader(read_size=65_536, direct=False, map_cached=map_cached) as reader:
            chunks = list(reader.stream(shards))
        assert join_by_shard(chunks, 2) == [data[4097:1_004_097] + data[2_999_000:], data]
        # The machine may reclaim a page meanwhile: that range is then read.
        assert any(chunk.data.readonly for chunk in chunks) is map_cached
        del chunks
        assert not mapped([path])

    @pytest.mark.parametrize("read_size", [MAPPED_PIECE_BYTES, MAPPED_PIECE_BYTES // 2])
    def test_by_default_a_stream_maps_only_where_its_consumer_asks(self, make_file, read_size
                                                                   ) -> None:  # fmt: skip
        # map_cached="auto": a plain stream's chunks are writable buffers; a
        # consumer that copies each byte once asks for mapped ranges, which
        # are mapped where a piece is large enough to gain; the first bytes,
        # read on the consumer's thread into fresh memory otherwise, are
        # mapped whatever their size.
        path, data = make_file(4 << 20)
        Path(path).read_bytes()
        with self.reader(read_size=read_size, direct=False) as reader:
            read = list(reader.stream([path]))
            asked = list(reader.stream([path], mapped=True))
        assert join_by_shard(read, 1) == join_by_shard(asked, 1) == [data]
        assert not any(chunk.data.readonly for chunk in read)
        # The machine may reclaim a page meanwhile: that range is then read.
        head, *rest = asked
        assert head.offset == 0
        assert len(head.data) == min(read_size, LOCAL_FIRST_BYTES)
        assert head.data.readonly or resident(path) < 1
        assert any(chunk.data.readonly for chunk in rest) is (read_size >= MAPPED_PIECE_BYTES)

    def test_a_stream_s_first_bytes_are_mapped_where_the_page_cache_holds_them(
        self, make_file
    ) -> None:
        # Read on the consumer's thread before the loop starts: mapped where
        # every page is cached, read where not; the same bytes either way, a
        # size that is no multiple of a page, and nothing left mapped.
        path, data = make_file(LOCAL_FIRST_BYTES + 12_345)
        Path(path).read_bytes()
        with self.reader(direct=False) as reader:
            warm = list(reader.stream([path], mapped=True))
            assert join_by_shard(warm, 1) == [data]
            assert len(warm[0].data) == LOCAL_FIRST_BYTES
            assert warm[0].data.readonly or resident(path) < 1
            del warm  # a mapped page is not dropped
            if drop_pages(path) > 0:
                pytest.skip("this filesystem keeps every page cached (tmpfs)")
            cold = list(reader.stream([path], mapped=True))
            assert join_by_shard(cold, 1) == [data]
            assert not cold[0].data.readonly
            del cold
        assert not mapped([path])

    def test_ranges_the_page_cache_lacks_are_read_the_rest_mapped(self, make_file) -> None:
        mib = 1 << 20
        path, data = make_file(8 * mib)
        evict(path)  # written back: what is dropped then leaves the cache
        for _ in range(_CACHE_ATTEMPTS):  # all but the last half MiB cached
            Path(path).read_bytes()
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 8 * mib - mib // 2, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            if resident(path) == 15 / 16:
                break
        assert resident(path) == 15 / 16
        with self.reader(read_size=mib, direct=False, map_cached=True) as reader:
            chunks = list(reader.stream([path]))
        assert join_by_shard(chunks, 1) == [data]
        mapped = {chunk.offset // mib for chunk in chunks if chunk.data.readonly}
        assert mapped
        assert 7 not in mapped  # the last MiB: half of it from the device

    @pytest.mark.parametrize("map_cached", [True, False])
    def test_a_file_cut_short_after_it_was_opened_reads_as_cut(self, make_file, map_cached
                                                               ) -> None:  # fmt: skip
        # Mapped or read, the reader sees the file as it is when it reads it.
        path, data = make_file(4 << 20)
        with self.reader(read_size=1 << 20, memory_budget=1 << 20, outstanding_requests=1,
                         direct=False, map_cached=map_cached) as reader:  # fmt: skip
            stream = iter(reader.stream([path]))
            received = bytearray(next(stream).data)
            os.truncate(path, 2 << 20)
            with pytest.raises(fastio.TruncatedFileError) as caught:
                for chunk in stream:
                    received += chunk.data
        assert caught.value.offset == 2 << 20
        assert bytes(received) == data[: len(received)]
        assert len(received) <= 2 << 20

    def test_error_in_async_stream(self, tmp_path) -> None:
        async def run() -> None:
            async with self.reader() as reader:
                with pytest.raises(FileNotFoundError) as caught:
                    await collect_async(reader, [str(tmp_path / "nope")])
                assert caught.value.filename == str(tmp_path / "nope")

        asyncio.run(run())

    def test_bad_shard_input_is_reported_in_order(self, make_file) -> None:
        path, data = make_file(1000)
        with self.reader() as reader:
            received = []
            with pytest.raises(TypeError, match="Shard"):
                for chunk in reader.stream([path, 42]):  # type: ignore[list-item]
                    received.append(bytes(chunk.data))
        assert received == [data]

    # ---- closing and cancelling ---------------------------------------------------------

    def test_breaking_out_and_closing_releases_everything(self, make_file) -> None:
        path, _ = make_file(32 << 20)
        before = ResourceSnapshot()
        reader = self.reader(read_size=65_536, outstanding_requests=64)
        for index, _chunk in enumerate(reader.stream([path, path])):
            if index == 3:
                break
        reader.close()
        before.assert_released()
        with pytest.raises(fastio.ReaderClosedError):
            list(reader.stream([path]))

    def test_cancelling_mid_flight_releases_everything(self, make_file) -> None:
        paths = [make_file(8 << 20)[0] for _ in range(4)]
        before = ResourceSnapshot()

        async def run() -> None:
            reader = self.reader(read_size=65_536, outstanding_requests=64)
            started = asyncio.Event()

            async def consume() -> None:
                async for _ in reader.astream(paths):
                    started.set()
                    await asyncio.sleep(0)

            task = asyncio.create_task(consume())
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await reader.aclose()

        asyncio.run(run())
        before.assert_released()

    def test_closing_while_a_consumer_waits(self, make_file) -> None:
        path, _ = make_file(16 << 20)
        before = ResourceSnapshot()
        reader = self.reader(read_size=65_536, outstanding_requests=4)
        stream = reader.stream([path])
        next(stream)
        reader.close()
        with pytest.raises(fastio.ReaderClosedError):
            for _ in stream:
                pass
        before.assert_released()

    def test_an_abandoned_reader_is_closed_by_the_collector(self, make_file) -> None:
        path, _ = make_file(4 << 20)
        before = ResourceSnapshot()
        reader = self.reader()
        stream = reader.stream([path])
        next(stream)
        stream.close()
        del stream, reader
        import gc

        gc.collect()
        before.assert_released()

    # ---- processes ------------------------------------------------------------------

    def test_pickling_keeps_the_settings(self) -> None:
        with self.reader(outstanding_requests=7, read_size=1 << 16) as reader:
            clone = pickle.loads(pickle.dumps(reader))
        assert clone.settings == reader.settings
        clone.close()

    def test_a_forked_child_reads_with_its_own_engine(self, make_file) -> None:
        import multiprocessing

        path, data = make_file(3 << 20)
        reader = self.reader(read_size=65_536)
        assert b"".join(bytes(c.data) for c in reader.stream([path])) == data
        context = multiprocessing.get_context("fork")
        queue = context.SimpleQueue()

        def child() -> None:
            queue.put(b"".join(bytes(c.data) for c in reader.stream([path])) == data)
            reader.close()

        process = context.Process(target=child)
        process.start()
        process.join(60)
        assert process.exitcode == 0
        assert queue.get() is True
        assert b"".join(bytes(c.data) for c in reader.stream([path])) == data
        reader.close()


@contextlib.contextmanager
def as_unprivileged_user():
    """Root ignores file modes: drop the effective uid while opening."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


class TestReaderOnUring(ReaderContract):
    engine = "io_uring"


class TestReaderOnThreads(ReaderContract):
    engine = "threads"


@pytest.fixture
def ramfs(tmp_path: Path) -> Path:
    """A ramfs mount: a real filesystem that refuses O_DIRECT (tmpfs takes it since Linux 6.6)."""
    if os.geteuid() != 0:
        pytest.skip("mounting ramfs needs root; CI runs as root")
    mount_point = tmp_path / "ramfs"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "ramfs", "ramfs", str(mount_point)], check=True)
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def test_auto_direct_on_a_filesystem_that_refuses_o_direct_reads_quietly(ramfs: Path) -> None:
    path = ramfs / "data.bin"
    path.write_bytes(b"y" * 10_001)
    with Reader(direct="auto") as reader:  # warnings are errors in this suite
        chunks = list(reader.stream([str(path)]))
    assert b"".join(bytes(c.data) for c in chunks) == b"y" * 10_001


def test_direct_io_falls_back_on_filesystems_that_refuse_it(ramfs: Path) -> None:
    path = ramfs / "data.bin"
    path.write_bytes(b"x" * 10_000)
    with Reader(direct=True) as reader, pytest.warns(fastio.DirectIOFallbackWarning):
        chunks = list(reader.stream([str(path)]))
    assert b"".join(bytes(c.data) for c in chunks) == b"x" * 10_000


def _mapped_while_holding(tmp_path: Path, monkeypatch, hold: int, declared: int = 0) -> int:
    """Bytes of regions a reader maps over 48 MiB (budget 4 MiB) while its
    consumer keeps views of the last ``hold`` bytes, having said it keeps
    ``declared``."""
    import fastio.reader._buffers as buffers

    mapped: list[int] = []
    allocate = buffers.allocate_buffers

    def counted(size: int, count: int, **options: bool):  # the real allocation, counted
        mapped.append(size * count)
        return allocate(size, count, **options)

    monkeypatch.setattr(buffers, "allocate_buffers", counted)
    path = tmp_path / "data"
    data = random.Random(3).randbytes(48 << 20)
    path.write_bytes(data)
    budget, read_size = 4 << 20, 256 << 10
    with Reader(memory_budget=budget, read_size=read_size, outstanding_requests=4) as reader:
        reader.consumer_holds = declared
        held: list[Chunk] = []
        got = bytearray()
        for chunk in reader.stream([Shard((ByteRange(str(path)),))]):
            got += chunk.data
            held.append(chunk)
            while sum(len(c.data) for c in held) > hold - read_size:
                held.pop(0)
        held.clear()
    assert bytes(got) == data
    return sum(mapped)


def test_a_consumer_holding_views_keeps_the_buffers_reused(tmp_path: Path, monkeypatch) -> None:
    """A consumer slower than the reader holds views of about a budget of
    buffers (the reader stops taking more there). Those buffers come back to
    the pool when the views go, and are reused: an epoch of many budgets maps
    regions for about one, not a fresh region for every buffer let go."""
    assert _mapped_while_holding(tmp_path, monkeypatch, 4 << 20) <= 12 << 20  # 12 budgets read


def test_views_a_consumer_says_it_holds_come_back_for_reuse(tmp_path: Path, monkeypatch) -> None:
    """A consumer that keeps several budgets of views (a shuffle window of
    batches decoded in place) and says so gets the buffers under them back
    when it lets go: the reader maps about what is held, not the epoch."""
    hold = 12 << 20
    assert _mapped_while_holding(tmp_path, monkeypatch, hold, declared=hold) <= 24 << 20


def _advised_huge(address: int) -> bool:
    """Whether the mapping holding ``address`` is advised for huge pages."""
    start = end = 0
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
            elif head == "VmFlags:" and start <= address < end:
                return "hg" in line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.parametrize("direct", [False, True])
def test_buffers_are_huge_pages_for_direct_reads_only(tmp_path: Path, direct: bool) -> None:
    """O_DIRECT reads get buffers advised for huge pages (one device segment
    a read); reads through the page cache get ordinary pages, which map
    quickly whatever the page cache has done to free memory."""
    import numpy as np

    path = tmp_path / "data"
    data = random.Random(5).randbytes(24 << 20)
    path.write_bytes(data)
    if direct:
        evict(str(path))
    advised = []
    with Reader(direct=direct, read_size=1 << 20, outstanding_requests=8) as reader:
        got = bytearray()
        for chunk in reader.stream([str(path)]):
            got += chunk.data
            if isinstance(chunk.data.obj, bytearray):
                continue  # the first bytes, cached, read on this thread into memory of their own
            address = np.frombuffer(chunk.data, np.uint8).ctypes.data
            advised.append(_advised_huge(address))
    assert bytes(got) == data
    assert advised
    # The pool's first region is ordinary pages either way (see BufferPool.take).
    assert any(advised) if direct else not any(advised)


def test_remote_reads_receive_into_ordinary_pages(tmp_path: Path) -> None:
    """Remote reads get ordinary pages too: faulting in huge ones, as the
    data arrives, cost more than the receives gained from them."""
    import numpy as np

    (tmp_path / "data").write_bytes(data := random.Random(6).randbytes(24 << 20))
    server = RangeServer(tmp_path).start()
    advised = []
    try:
        with Reader(read_size=1 << 20, outstanding_requests=8) as reader:
            got = bytearray()
            for chunk in reader.stream([server.url("data")]):
                got += chunk.data
                if isinstance(chunk.data.obj, bytearray):
                    continue  # not a pool buffer
                advised.append(_advised_huge(np.frombuffer(chunk.data, np.uint8).ctypes.data))
    finally:
        server.stop()
    assert bytes(got) == data
    assert len(advised) > 2  # beyond the pool's first region, which is ordinary pages anyway
    assert not any(advised)


def test_a_failure_to_map_buffers_reaches_the_consumer(tmp_path: Path, monkeypatch) -> None:
    """Mapping memory for read buffers can fail (no memory left): the stream
    raises that error to its consumer instead of waiting for reads that never
    started."""
    import fastio.reader._buffers as buffers

    def refused(size: int, count: int, **options: bool):
        raise MemoryError(f"cannot map {size * count} bytes")

    monkeypatch.setattr(buffers, "allocate_buffers", refused)
    path = tmp_path / "data"
    path.write_bytes(b"x" * (1 << 20))
    with (
        Reader(read_size=256 << 10, map_cached=False) as reader,
        pytest.raises(MemoryError, match="cannot map"),
    ):
        for _ in reader.stream([Shard((ByteRange(str(path)),))]):
            pass


def test_small_ranges_of_cached_files_are_read_inline_the_rest_streamed(tmp_path: Path) -> None:
    rng = random.Random(5)
    cached, evicted = tmp_path / "cached.bin", tmp_path / "evicted.bin"
    data = {str(cached): rng.randbytes(300_000), str(evicted): rng.randbytes(300_000)}
    for path, content in data.items():
        Path(path).write_bytes(content)
    evict(str(evicted))
    assert Path(cached).read_bytes() == data[str(cached)]  # in the page cache now
    ranges = [
        ByteRange(str(cached), 0, 10), ByteRange(str(evicted), 5000, 70_000),
        ByteRange(str(cached), 299_990, 10), ByteRange(str(cached), 65_536, 70_000),
        ByteRange(str(evicted), 0, 1),
    ]  # fmt: skip
    with Reader() as reader:
        got = reader.read_ranges(ranges)
        assert got == [data[r.path][r.offset : r.offset + (r.length or 0)] for r in ranges]
        # The cached file's ranges came inline; the evicted file's went
        # through the reader, one request each, unless the readahead that the
        # kernel starts on a non-blocking read of uncached pages brought them
        # in before they were tried.
        assert reader.stats().requests <= 2
        assert reader.read_ranges([]) == []
        # Failures are the stream's: named, with the file and the offset.
        with pytest.raises(fastio.TruncatedFileError, match=r"cached\.bin"):
            reader.read_ranges([ByteRange(str(cached), 299_990, 100)])
        with pytest.raises(FileNotFoundError, match=r"missing\.bin"):
            reader.read_ranges([ByteRange(str(tmp_path / "missing.bin"), 0, 10)])
        with pytest.raises(ValueError, match="length"):
            reader.read_ranges([ByteRange(str(cached))])


def test_a_producer_stops_at_its_next_batch_once_the_consumer_abandons_the_handoff() -> None:
    """A stream's producer whose batches are all ready never waits on the loop,
    so a cancellation queued there would reach it only once the hand-off is
    full: a consumer leaving early would wait for that much reading. Its next
    batch ends it instead."""
    background = LoopThread()
    handoff = Handoff(background.loop, max_bytes=1 << 40)
    abandoned = threading.Event()
    put = 0

    async def produce() -> None:
        nonlocal put
        while put < 1000:
            await handoff.put([put], 1)
            put += 1
            if put == 1:
                abandoned.wait(60)  # the loop thread holds here, as a long read would

    try:
        future = asyncio.run_coroutine_threadsafe(produce(), background.loop)
        assert handoff.get() == [0]
        handoff.abandon()
        abandoned.set()
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(timeout=60)
        assert put == 1
    finally:
        abandoned.set()
        background.stop()


def test_the_stamps_of_many_files_at_once_are_each_one_s_stamp_or_its_error(tmp_path: Path) -> None:
    """A dataset checks every shard against its index with one call: what it
    gets for each file must be what asking for that file alone gives, in the
    same place, failures included. Enough files that the native call splits
    them between two threads."""
    paths = []
    for i in range(600):
        path = tmp_path / f"f{i:04d}.bin"
        path.write_bytes(os.urandom(i % 37))
        paths.append(path)
    os.utime(paths[5], ns=(1, -1_500_000_123))  # modified before 1970
    for name in ("caf\u00e9", "undecodable-\udcff"):  # named as os.fsdecode names them
        path = tmp_path / name
        path.write_bytes(name.encode("utf-8", "surrogateescape"))
        paths.append(path)
    urls = [str(path) for path in paths]
    urls[7:7] = [str(tmp_path / "missing"), f"file://{paths[1]}", f"{paths[2]}/below",
                 str(tmp_path), "relative-missing", f"file://{paths[-1]}"]  # fmt: skip
    # Files are statted relative to their folder, kept open from one to the
    # next: folders in turn, linked, missing, at the root, named with a
    # trailing slash or with "..".
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.bin").write_bytes(b"inner")
    (tmp_path / "linked").symlink_to(tmp_path / "sub")
    (tmp_path / "sub" / "to-f0003").symlink_to(paths[3])
    (tmp_path / "off").mkdir()  # named as long as "sub"
    (tmp_path / "off" / "f0001.bin").write_bytes(b"off")
    urls[20:20] = [f"{tmp_path}/sub/inner.bin", f"{tmp_path}/off/f0001.bin", urls[20],
                   f"{tmp_path}/linked/inner.bin", f"{tmp_path}/sub/to-f0003",
                   f"{tmp_path}/sub/../f0004.bin", f"{tmp_path}/sub/", "/",
                   "/fastio-nothing-here", f"{tmp_path}/gone/f0001.bin", f"{tmp_path}/",
                   urls[21]]  # fmt: skip
    with Reader() as reader:
        stamps = reader.stamps(urls)
        # As a dataset takes them all at once: one buffer of stamps, one of errnos.
        packed = listed_stamps(reader.local_stamps(urls), urls)
        assert list(map(_described, packed)) == list(map(_described, stamps))
        assert len(stamps) == len(urls)
        for url, stamp in zip(urls, stamps, strict=True):
            if isinstance(stamp, OSError):
                with pytest.raises(type(stamp)) as raised:
                    reader.stamp(url)
                assert type(raised.value) is type(stamp), url
                assert (stamp.errno, stamp.filename) == (raised.value.errno, raised.value.filename)
            else:
                assert stamp == reader.stamp(url), url
        assert isinstance(stamps[7], FileNotFoundError)
        assert isinstance(stamps[9], NotADirectoryError)
        assert stamps[8] == stamps[1]  # the file:// URL and the path of one file
        assert isinstance(stamps[-1], tuple)
        assert stamps[12] == stamps[-1]  # a path os.fsdecode gave: as a str, as a file:// URL
        assert reader.stamps([]) == []
        with pytest.raises(ValueError, match="null byte"):  # as os.stat refuses it
            reader.stamps([urls[0], "/a\0b"])


@pytest.mark.parametrize("threads", [1, 2])
def test_stats_taken_on_a_thread_and_helped_by_the_one_that_waits_land_in_place(
    tmp_path: Path, threads: int
) -> None:
    """A dataset's open stats its shards on a thread of its own and, once it
    needs them, takes its own share of those left: each stat lands in its
    place however the two share them (the waiter helping at once, or after
    the thread has done them all), as one call gives them."""
    import threading

    from fastio import _native
    from fastio.dataset import _layouts

    urls = []
    for i in range(700):
        path = tmp_path / f"s{i:04d}.bin"
        path.write_bytes(os.urandom(i % 41))
        urls.append(str(path))
    urls[100:100] = [str(tmp_path / "missing"), f"{urls[3]}/below", str(tmp_path / "caf\u00e9")]
    expected = _native.stat_stamps(urls)
    for helped_at_once in (True, False):
        job = _native.StatsJob(urls)
        thread = threading.Thread(target=job.run, kwargs={"threads": threads})
        thread.start()
        if not helped_at_once:
            thread.join()
        job.help()
        thread.join()
        assert job.result() == expected
    assert _layouts.stats_beside(urls).result() == expected  # as the open takes them
    with pytest.raises(ValueError, match="null byte"):
        _layouts.stats_beside([*urls, "/a\0b"]).result()


def _described(stamp: tuple[int, int, int] | OSError) -> object:
    """A stamp, or what tells one OSError from another."""
    if isinstance(stamp, OSError):
        return type(stamp), stamp.errno, stamp.filename
    return stamp


@pytest.mark.parametrize("round_trip_ns", [0, 50_000, 2**63])
def test_stats_by_many_threads_or_few_land_in_place(tmp_path: Path, round_trip_ns: int) -> None:
    """Where the first stats are slow (a network filesystem) up to 32 threads
    take the rest from a shared cursor; a round trip of 0 makes every
    filesystem look slow, so the many-threads path runs here too."""
    paths = []
    for i in range(1000):
        path = tmp_path / f"f{i:04d}.bin"
        if i % 7:
            path.write_bytes(b"x" * i)
        paths.append(os.fsencode(path))
    found, errors = stat_stamps(paths, round_trip_ns)
    numbers, codes = memoryview(found).cast("q"), memoryview(errors).cast("i")
    assert (len(numbers), len(codes)) == (3 * len(paths), len(paths))
    for i, path in enumerate(paths):
        stamp = tuple(numbers[3 * i : 3 * i + 3])
        if i % 7 == 0:
            assert (codes[i], stamp) == (errno.ENOENT, (0, 0, 0))
            continue
        status = os.stat(path)
        assert codes[i] == 0
        assert stamp == (i, status.st_mtime_ns, _change_stamp(status))


def test_a_shard_of_other_things_than_ranges_is_refused_when_made(tmp_path: Path) -> None:
    path = str(tmp_path / "f")
    with pytest.raises(TypeError, match="ByteRange objects, not 'f'"):
        Shard(("f",))
    with pytest.raises(TypeError, match="ByteRange"):
        Shard((ByteRange(path, 0, 10), (path, 0, 10)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no byte ranges"):
        Shard(())


def test_a_byte_range_takes_paths_and_integers_of_any_kind_and_refuses_the_rest(
    tmp_path: Path,
) -> None:
    import numpy as np

    piece = ByteRange(tmp_path / "f", np.int64(4), length=np.uint16(9))
    assert piece == ByteRange(str(tmp_path / "f"), 4, 9)
    assert (type(piece.path), type(piece.offset), type(piece.length)) == (str, int, int)
    assert (ByteRange("f").offset, ByteRange("f").length) == (0, None)
    with pytest.raises(ValueError, match=r"offset must be >= 0, not -1 \(f\)"):
        ByteRange("f", -1)
    with pytest.raises(ValueError, match=r"length must be >= 0 or None, not -2 \(f\)"):
        ByteRange("f", 0, -2)
    with pytest.raises(TypeError):
        ByteRange("f", 1.5)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        piece.offset = 5  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(piece)) == piece


def test_a_dropped_reader_goes_at_once_without_waiting_for_the_collector(
    tmp_path: Path,
) -> None:
    """Nothing of a reader's own (its file table, its loop's callbacks) refers
    back to it: dropped, it is closed and freed at once, with its threads
    and descriptors, not at a collection that may be far off."""
    import gc
    import weakref

    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(100_000))
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for engine in ("auto", "threads"):
            reader = Reader(engine=engine)
            [data] = reader.read_ranges([ByteRange(str(path), 10, 100)])
            assert data == path.read_bytes()[10:110]
            chunks = reader.stream([str(path)])
            assert bytes(next(chunks).data[:10]) == path.read_bytes()[:10]
            chunks.close()
            del chunks
            dropped = weakref.ref(reader)
            del reader
            assert dropped() is None, engine
    finally:
        if enabled:
            gc.enable()


def test_idle_descriptors_go_when_the_process_runs_out_of_them(tmp_path: Path) -> None:
    """Under a low ``ulimit -n`` (64 here), the descriptors kept idle for reuse
    (up to ``max_idle_files``, 128 by default) leave room for the files still
    to open (at most a quarter of the limit is kept), rather than the epoch
    failing with EMFILE."""
    import sys

    from tests.shards import write

    written = write("webdataset", tmp_path / "many", shards=200, per_shard=1, index=False)
    script = (
        "import resource, sys, fastio\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit("
        "resource.RLIMIT_NOFILE)[1]))\n"
        "with fastio.Dataset(sys.argv[1], index_dir=sys.argv[2], shuffle=False) as dataset:\n"
        "    print(sum(1 for _ in dataset), dataset.total)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, written.pattern, str(tmp_path / "i")],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    delivered, total = map(int, done.stdout.split())
    assert delivered == total == len(written.samples)


@pytest.mark.parametrize("direct", [True, False, "auto"])
def test_ranges_of_numpy_integers_read_as_ints(make_file, direct) -> None:
    """Offsets and lengths taken from a numpy index (np.int64) are integers
    like any other: the bytes come, and the reader stays usable after. A
    float is no offset."""
    import numpy as np

    path, data = make_file(50_000)
    with Reader(direct=direct) as reader:
        ranges = [ByteRange(path, np.int64(4097), np.int64(9000)), ByteRange(path, np.uint32(3))]
        got = [bytes(chunk.data) for chunk in reader.stream(ranges)]
        assert b"".join(got) == data[4097:13097] + data[3:]
        assert b"".join(bytes(c.data) for c in reader.stream([ByteRange(path, 0, 10)])) == data[:10]
    assert type(ranges[0].offset) is int
    with pytest.raises(TypeError):
        ByteRange(path, 1.5)  # type: ignore[arg-type]


def test_read_ranges_says_what_stream_says_of_odd_files(tmp_path: Path) -> None:
    """read_ranges reads cached files in place, but a FIFO is never waited
    on in open() (an OSError, as the stream raises), and an empty range of a
    file that is not there, or past its end, fails as the stream's would."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 100)
    with Reader() as reader:
        with pytest.raises(OSError, match="not a regular file") as caught:
            reader.read_ranges([ByteRange(str(fifo), 0, 5)])
        assert caught.value.errno == errno.EINVAL
        with pytest.raises(FileNotFoundError):
            reader.read_ranges([ByteRange(str(tmp_path / "missing"), 0, 0)])
        with pytest.raises(fastio.TruncatedFileError):
            reader.read_ranges([ByteRange(str(small), 1000, 0)])
        assert reader.read_ranges([ByteRange(str(small), 100, 0), ByteRange(str(small), 90, 10)]) \
            == [b"", b"x" * 10]  # fmt: skip


def test_a_folder_read_with_o_direct_is_refused_for_what_it_is(tmp_path: Path) -> None:
    """O_DIRECT is refused on a folder (EINVAL): that says nothing of its
    filesystem, so no DirectIOFallbackWarning (an error in this suite) comes
    before the IsADirectoryError."""
    with Reader(direct=True) as reader:
        with pytest.raises(IsADirectoryError):
            list(reader.stream([ByteRange(str(tmp_path), 0, 10)]))
        path = tmp_path / "file.bin"
        path.write_bytes(b"y" * 5000)
        assert b"".join(bytes(c.data) for c in reader.stream([ByteRange(str(path))])) == b"y" * 5000
