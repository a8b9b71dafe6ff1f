"""How remote ranges become HTTP requests, counted by a Range server: a
stream's first request is small, later ones grow to REMOTE_REQUEST_BYTES
along a long range or over short neighbouring ranges, every byte is asked for
once, and local files keep ``read_size`` reads."""

from __future__ import annotations

import itertools
import random
import threading
import time

import pytest

import fastio
from fastio.reader._requests import (
    REMOTE_FIRST_BYTES,
    REMOTE_REQUEST_BYTES,
    REMOTE_START_BYTES,
    REMOTE_UNSPLIT_BYTES,
)
from tests.servers import RangeServer, wait_for

READ_SIZE = 64 << 10


@pytest.fixture
def blob(tmp_path):
    data = random.Random(3).randbytes(3 * REMOTE_REQUEST_BYTES + 12345)
    (tmp_path / "blob.bin").write_bytes(data)
    server = RangeServer(tmp_path).start()
    yield server, data, tmp_path / "blob.bin"
    server.stop()


def read(url: str, ranges: list[tuple[int, int | None]]) -> tuple[bytes, int]:
    with fastio.Reader(read_size=READ_SIZE, outstanding_requests=4) as reader:
        got = b"".join(bytes(c.data) for c in reader.stream(
            [fastio.ByteRange(url, offset, length) for offset, length in ranges]))  # fmt: skip
        return got, reader.stats().requests


def growing(size: int, first: int = min(READ_SIZE, REMOTE_FIRST_BYTES)) -> list[int]:
    """The request sizes of a remote range of ``size`` bytes."""
    sizes, step = [], first
    while sum(sizes) < size:
        sizes.append(min(step, size - sum(sizes)))
        step = min(step * 2, REMOTE_REQUEST_BYTES)
    return sizes


def test_a_long_range_grows_from_a_small_first_request_and_is_asked_for_once(blob) -> None:
    server, data, _ = blob
    got, requests = read(server.url("blob.bin"), [(0, None)])
    assert got == data
    assert server.faults.served["blob.bin"] == len(data)  # nothing twice
    assert requests == server.faults.gets["blob.bin"] == len(growing(len(data)))
    assert len(growing(len(data))) < len(data) // READ_SIZE // 10


@pytest.mark.parametrize("read_size", [READ_SIZE, 4 * REMOTE_FIRST_BYTES])
def test_the_first_request_of_a_range_is_small(blob, read_size) -> None:
    server, data, _ = blob
    with fastio.Reader(read_size=read_size, outstanding_requests=4) as reader:
        got = b"".join(bytes(c.data) for c in reader.stream(
            [fastio.ByteRange(server.url("blob.bin"), 100)]))  # fmt: skip
    assert got == data[100:]
    first = [length for _, offset, length in server.faults.asked if offset == 100]
    assert first == [min(read_size, REMOTE_FIRST_BYTES)]


def test_a_sample_read_alone_is_one_request_and_a_longer_range_climbs(blob) -> None:
    """Random access reads one sample per stream: it goes as one request
    (three small ones would bring it at most one round trip sooner, at three
    times the requests an object store bills). A longer range climbs from a
    small first request, so its first bytes do not wait for TCP's climb."""
    server, data, _ = blob
    url = server.url("blob.bin")
    with fastio.Reader(read_size=1 << 20, outstanding_requests=4) as reader:
        got = b"".join(bytes(c.data) for c in reader.stream(
            [fastio.ByteRange(url, 5000, REMOTE_UNSPLIT_BYTES)]))  # fmt: skip
        assert got == data[5000 : 5000 + REMOTE_UNSPLIT_BYTES]
        assert server.faults.gets["blob.bin"] == 1
        length = 4 * REMOTE_UNSPLIT_BYTES
        got = b"".join(bytes(c.data) for c in reader.stream([fastio.ByteRange(url, 0, length)]))
        assert got == data[:length]
    climb = growing(length, REMOTE_FIRST_BYTES)
    assert climb[0] == REMOTE_FIRST_BYTES
    assert len(climb) > 3
    assert server.faults.gets["blob.bin"] == 1 + len(climb)
    assert server.faults.served["blob.bin"] == REMOTE_UNSPLIT_BYTES + length


def test_the_first_requests_go_together_and_the_rest_once_they_are_in(blob) -> None:
    """A stream's first sample may span several of the climb's first (small)
    requests: they go out together. Larger ones wait until those have
    arrived: started with them, they would share the link with the first
    sample's bytes."""
    server, data, _ = blob
    server.faults.hold_after = 0  # every request waits until released
    climb = growing(len(data), REMOTE_FIRST_BYTES)
    start = [n for n in itertools.accumulate(climb) if n <= REMOTE_START_BYTES]
    assert len(start) >= 3  # a 110 KB sample's worth
    with fastio.Reader(read_size=1 << 20, outstanding_requests=16) as reader:
        stream = iter(reader.stream([fastio.ByteRange(server.url("blob.bin"), 0)]))
        first: list[bytes] = []
        taker = threading.Thread(target=lambda: first.append(bytes(next(stream).data)))
        taker.start()
        wait_for(lambda: server.faults.requests == len(start))
        time.sleep(0.3)  # time enough for more requests to go, if they would
        assert server.faults.requests == len(start)
        server.faults.hold_after = None
        taker.join(10)
        rest = b"".join(bytes(c.data) for c in stream)
    assert first[0] + rest == data
    assert server.faults.gets["blob.bin"] == len(climb)


def test_once_the_first_pieces_are_in_small_objects_keep_every_request_in_flight(
    tmp_path,
) -> None:
    """Reads of many small objects, a request each, keep every request in
    flight once the stream's first pieces are in, though a later object is
    slow to answer: only those first pieces wait for each other (the pieces
    queued at any later time, some always in flight, are never all in)."""
    rng = random.Random(5)
    blobs = [rng.randbytes(40_000) for _ in range(40)]  # each read into a 64 KiB buffer
    assert REMOTE_START_BYTES // (64 << 10) < 8  # o08 is not among the first pieces
    for number, data in enumerate(blobs):
        (tmp_path / f"o{number:02d}").write_bytes(data)
    server = RangeServer(tmp_path).start()
    asked = lambda: len(server.faults.gets)  # noqa: E731  (objects asked for)
    server.faults.hold = lambda name, start: name == "o08" and asked() < 24
    try:
        with fastio.Reader(read_size=1 << 20, outstanding_requests=16) as reader:
            ranges = [fastio.ByteRange(server.url(f"o{n:02d}"), 0) for n in range(len(blobs))]
            stream = iter(reader.stream(ranges))
            got = [bytes(next(stream).data)]
            wait_for(lambda: asked() >= 24, timeout=20)  # o08 is held until then
            got += [bytes(chunk.data) for chunk in stream]
    finally:
        server.faults.hold = None
        server.stop()
    assert b"".join(got) == b"".join(blobs)


def test_short_neighbouring_ranges_share_requests_that_grow(blob) -> None:
    server, data, _ = blob
    sample = 50_000
    ranges = [(offset, sample) for offset in range(0, len(data) - sample, sample)]
    got, requests = read(server.url("blob.bin"), ranges)
    assert got == data[: len(ranges) * sample]
    assert server.faults.served["blob.bin"] == len(got)  # nothing twice
    # The first request holds one sample (shorter than a read, it is not
    # split), each next one up to twice the last's bytes, up to
    # REMOTE_REQUEST_BYTES.
    assert REMOTE_FIRST_BYTES < sample < READ_SIZE
    expected, largest, left = 0, 0, len(ranges)
    while left:
        limit = REMOTE_FIRST_BYTES if not largest else min(2 * largest, REMOTE_REQUEST_BYTES)
        taken = min(left, max(1, limit // sample))
        left -= taken
        largest = max(largest, taken * sample)
        expected += 1
    assert requests == server.faults.gets["blob.bin"] == expected
    assert expected < len(ranges) // 10


def test_local_files_keep_read_size_reads(blob) -> None:
    _, data, path = blob
    got, requests = read(str(path), [(0, None)])
    assert got == data
    assert requests == -(-len(data) // READ_SIZE)


def test_remote_reads_fill_the_remote_budget_and_no_more(tmp_path) -> None:
    data = random.Random(5).randbytes(40 << 20)
    (tmp_path / "big.bin").write_bytes(data)
    server = RangeServer(tmp_path).start()
    budget, remote_budget = 2 << 20, 16 << 20
    try:
        with fastio.Reader(memory_budget=budget, remote_memory_budget=remote_budget,
                           outstanding_requests=64) as reader:  # fmt: skip
            stream = iter(reader.stream([fastio.ByteRange(server.url("big.bin"), 0)]))
            first = [bytes(next(stream).data)]
            while len(first[-1]) < REMOTE_REQUEST_BYTES // 2:  # the climb's first pieces are in:
                first.append(bytes(next(stream).data))  # its read-ahead opens
            server.faults.hold_after = server.faults.requests  # answer nothing more for now
            peak = 0

            def holds_more_than_the_local_budget() -> bool:
                nonlocal peak
                stats = reader.stats()
                peak = max(peak, stats.buffered_bytes)  # in flight and read ahead
                return stats.buffered_bytes > 2 * budget

            wait_for(holds_more_than_the_local_budget)
            assert peak <= remote_budget + REMOTE_REQUEST_BYTES
            server.faults.hold_after = None
            got = b"".join(first) + b"".join(bytes(c.data) for c in stream)
    finally:
        server.stop()
    assert got == data


def test_dataloader_workers_share_the_remote_budget(tmp_path) -> None:
    torch_data = pytest.importorskip("torch.utils.data")

    class Budgets(torch_data.IterableDataset):
        def __init__(self, dataset: fastio.Dataset) -> None:
            self.dataset = dataset

        def __iter__(self):
            yield self.dataset.reader.remote_memory_budget

    (tmp_path / "a.tar").write_bytes(b"\0" * 1024)
    dataset = fastio.Dataset([str(tmp_path / "a.tar")], remote_memory_budget="128MiB",
                             memory_budget="8MiB", index_dir=str(tmp_path / "index"))  # fmt: skip
    for workers, share in ((2, 64 << 20), (32, 8 << 20)):
        loader = torch_data.DataLoader(Budgets(dataset), batch_size=None, num_workers=workers)
        assert list(loader) == [share] * workers
    assert dataset.reader.remote_memory_budget == 128 << 20  # one process: all of it
    dataset.close()


@pytest.mark.parametrize("read_size", [None, 8 << 20], ids=["default", "8 MiB"])
def test_remote_requests_fit_a_send_buffer_unless_read_size_is_larger(tmp_path, read_size) -> None:
    """A full remote request stays 64 KiB short of 4 MiB with the default
    read_size (4 MiB): an answer that fits the server's default send buffer
    leaves without waiting for the client's acknowledgements. A larger
    read_size is the user's choice, and requests grow to it."""
    data = random.Random(4).randbytes(24 << 20)
    (tmp_path / "big.bin").write_bytes(data)
    server = RangeServer(tmp_path).start()
    try:
        knobs = {} if read_size is None else {"read_size": read_size}
        with fastio.Reader(**knobs) as reader:
            got = b"".join(bytes(c.data) for c in reader.stream([server.url("big.bin")]))
    finally:
        server.stop()
    assert got == data
    lengths = [length for _, _, length in server.faults.asked]
    assert sum(lengths) == len(data)  # every byte asked for once
    assert max(lengths) == (REMOTE_REQUEST_BYTES if read_size is None else read_size)


def test_an_indexed_remote_shard_is_read_in_full_requests(tmp_path) -> None:
    """With an index, a run of samples is cut into ranges of a full remote
    request (4 MiB less 64 KiB), not of read_size (4 MiB): cut at read_size,
    most ranges went as a full request and a short one."""
    import io
    import tarfile

    rng = random.Random(6)
    payloads = [rng.randbytes(rng.randrange(100_000, 120_000)) for _ in range(220)]
    with tarfile.open(tmp_path / "big.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for index, payload in enumerate(payloads):
            member = tarfile.TarInfo(f"{index:05d}.bin")
            member.size = len(payload)
            tar.addfile(member, io.BytesIO(payload))
    server = RangeServer(tmp_path).start()
    try:
        url = server.url("big.tar")
        with fastio.Dataset(url, index_dir=tmp_path / "index", shuffle=False) as dataset:
            dataset.index()
        server.faults.asked.clear()
        with fastio.Dataset(url, index_dir=tmp_path / "index", shuffle=False) as dataset:
            got = [bytes(sample["bin"]) for sample in dataset]
        asked = sorted((offset, length) for name, offset, length in server.faults.asked
                       if name == "big.tar")  # fmt: skip
    finally:
        server.stop()
    assert got == payloads
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(asked))  # each byte once
    lengths = [length for _, length in asked]
    assert max(lengths) <= REMOTE_REQUEST_BYTES
    # Every request holds a whole sample at least: none is the tail of a
    # range that a full request cut (4 of 18 requests were, of 24 to 64 KB).
    assert min(lengths) >= min(map(len, payloads))
