"""What a dataset does before its first sample: one index read, a small first read."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
import threading
from collections import Counter

import pytest

import fastio
from fastio._native import HUGE_PAGE
from fastio.formats._index import INDEX_SUFFIX, SET_SUFFIX, build_index, index_keys
from fastio.plan import make_windows
from fastio.plan._assignment import Span
from fastio.reader import _reader
from tests.shards import key_of, write


@pytest.fixture
def never_seen(tmp_path):
    return write("webdataset", tmp_path / "data", shards=5, per_shard=12, index=False)


def keys(dataset) -> list[int]:
    return [key_of("webdataset", sample) for sample in dataset]


def test_a_reopened_dataset_reads_its_indexes_from_one_file(never_seen, tmp_path) -> None:
    index_dir = tmp_path / "index"
    first = fastio.Dataset(never_seen.urls, index_dir=index_dir, shuffle=False)
    first.index()
    first.close()
    [kept] = index_dir.glob(f"*{SET_SUFFIX}")
    for shard_index in index_dir.glob(f"*{INDEX_SUFFIX}"):
        shard_index.unlink()  # only the file of them all is left to find
    again = fastio.Dataset(never_seen.urls, index_dir=index_dir, shuffle=True)
    assert len(again) == len(never_seen.samples)  # known at open
    assert again.reader.stats().requests == 0  # no shard was scanned
    assert Counter(keys(again)) == Counter(row["key"] for row in never_seen.samples)
    assert not list(index_dir.glob(f"*{INDEX_SUFFIX}"))
    assert kept.exists()
    again.close()


def test_a_damaged_file_of_indexes_falls_back_to_the_shards_own(never_seen, tmp_path) -> None:
    index_dir = tmp_path / "index"
    fastio.Dataset(never_seen.urls, index_dir=index_dir).index()
    [kept] = index_dir.glob(f"*{SET_SUFFIX}")
    kept.write_bytes(kept.read_bytes()[:100])  # truncated
    again = fastio.Dataset(never_seen.urls, index_dir=index_dir, shuffle=False)
    assert again.reader.stats().requests == 0  # the shards' index files, not a scan
    assert keys(again) == [row["key"] for row in never_seen.samples]
    assert fastio.Dataset(never_seen.urls, index_dir=index_dir).total == len(never_seen.samples)
    assert len(kept.read_bytes()) > 100  # written anew


def test_a_shard_changed_since_its_indexes_were_kept_is_indexed_again(never_seen, tmp_path) -> None:
    index_dir = tmp_path / "index"
    fastio.Dataset(never_seen.urls, index_dir=index_dir).index()
    other = write("webdataset", tmp_path / "other", shards=1, per_shard=3, seed=1, index=False)
    before = _count(never_seen.urls[2], tmp_path / "before")
    after = _count(other.urls[0], tmp_path / "after")
    changed = never_seen.urls[2]
    with open(other.urls[0], "rb") as source, open(changed, "wb") as out:
        out.write(source.read())
    again = fastio.Dataset(never_seen.urls, index_dir=index_dir, shuffle=False)
    delivered = keys(again)
    assert len(delivered) == again.total == len(never_seen.samples) - before + after


def _count(url: str, index_dir) -> int:
    dataset = fastio.Dataset(url, index_dir=index_dir)
    dataset.index()
    return dataset.total


@pytest.mark.parametrize("mix", [1, 3])
def test_the_first_windows_ramp_up_from_one_sample_per_span(never_seen, tmp_path, mix) -> None:
    dataset = fastio.Dataset(never_seen.urls, index_dir=tmp_path / "index", shuffle=False)
    dataset.index()
    layouts = dataset.layouts
    spans = [Span(shard, 0, layout.count) for shard, layout in enumerate(layouts)]
    windows = make_windows(spans, layouts, 1 << 30, mix)
    assert [len(run) for run in windows[0].runs] == [1] * mix
    assert sum(window.count for window in windows) == len(never_seen.samples)
    # Each sample in exactly one window, in stored order within its shard.
    taken = [(run.shard, sample) for window in windows for run in window.runs
             for sample in range(run.start, run.stop)]  # fmt: skip
    assert sorted(taken) == [
        (s, i) for s, layout in enumerate(layouts) for i in range(layout.count)
    ]


def test_a_streams_first_chunk_waits_for_no_read_ahead(tmp_path) -> None:
    path = tmp_path / "big"
    path.write_bytes(bytes(range(256)) * (64 << 12))  # 16 MiB
    read_size = 1 << 20

    async def first_chunk() -> int:
        async with fastio.Reader(read_size=read_size, outstanding_requests=16) as reader:
            async for _ in reader.astream([str(path)]):
                # The loop has not run since this chunk was handed over.
                return reader.stats().bytes_read
        raise AssertionError("no chunk")

    assert asyncio.run(first_chunk()) <= max(HUGE_PAGE, read_size)


def test_a_streams_first_chunk_of_many_small_files_waits_for_no_read_ahead(tmp_path) -> None:
    """A window of small shards is hundreds of reads, each done as it starts
    where the page cache holds the file: the first chunk is handed over once
    it is in, and the read-ahead follows."""
    size, limit = 8192, 4
    paths = []
    for number in range(64):
        path = tmp_path / f"small-{number}"
        path.write_bytes(bytes([number]) * size)
        paths.append(str(path))

    async def first_chunk() -> tuple[bytes, int]:
        async with fastio.Reader(read_size=1 << 20, outstanding_requests=limit) as reader:
            async for chunk in reader.astream(paths):
                # The loop has not run since this chunk was handed over.
                return bytes(chunk.data), reader.stats().bytes_read
        raise AssertionError("no chunk")

    data, read = asyncio.run(first_chunk())
    assert data == bytes([0]) * size
    assert read <= limit * size


def test_a_shuffled_epoch_s_first_sample_needs_no_reader_loop(tmp_path, monkeypatch) -> None:
    """A shuffled epoch's first window is a sample from each of 8 shards: where
    the page cache holds them, they are read on the consumer's thread, so the
    first sample does not wait for the reader's loop to start, nor for the
    reads after its own. The epoch then goes on through the loop, in the
    order the plan gives."""
    monkeypatch.setattr(_reader, "_HEAD_SLOW", 3600.0)  # however busy the machine
    written = write("webdataset", tmp_path / "data", shards=10, per_shard=12, large=True)
    dataset = fastio.Dataset(written.urls, index_dir=tmp_path / "index", seed=3)

    def loops() -> int:
        return sum(thread.name == "fastio-loop" for thread in threading.enumerate())

    before = loops()
    samples = iter(dataset)
    first = next(samples)
    assert loops() == before
    assert 1 <= dataset.reader.stats().requests <= 8
    delivered = [key_of("webdataset", first)] + [key_of("webdataset", s) for s in samples]
    assert dataset.reader.stats().requests > 8  # the rest came through the loop
    assert delivered == [written.samples[i]["key"] for i in dataset.order(0)]
    dataset.close()


def test_a_shuffled_window_s_first_sample_waits_only_for_the_read_that_holds_it(
    tmp_path, monkeypatch
) -> None:
    """A window's order is known before its reads: each sample is delivered
    as soon as the read holding it is in, and the first window's reads go in
    the order its samples are delivered. The first window reads one sample
    from each of 8 shards; its first sample, wherever the seed puts it, waits
    for its own read alone. The order is the plan's all the same."""
    monkeypatch.setattr(_reader, "_HEAD_SLOW", 3600.0)  # however busy the machine
    written = write("webdataset", tmp_path / "data", shards=10, per_shard=12, large=True)
    asked = []
    for seed in range(4):
        with fastio.Dataset(written.urls, index_dir=tmp_path / "index", seed=seed) as dataset:
            samples = iter(dataset)
            delivered = [key_of("webdataset", next(samples))]
            asked.append(dataset.reader.stats().requests)
            delivered += [key_of("webdataset", sample) for sample in samples]
            assert delivered == [written.samples[i]["key"] for i in dataset.order(0)]
    assert asked == [1, 1, 1, 1]


_OPENS_AT_OPEN = """
import json, sys
import fastio
urls, index_dir = json.loads(sys.argv[1]), sys.argv[2]
opened = set()
sys.addaudithook(lambda event, args: event == "open" and opened.add(str(args[0])))
dataset = fastio.Dataset(urls, index_dir=index_dir, shuffle=False)
known = [layout.count for layout in dataset.layouts if layout is not None]
print(json.dumps({"opened": sorted(opened & set(urls)), "known": known}))
"""


def _shards_opened_at_open(urls: list[str], index_dir) -> tuple[list[str], list[int]]:
    """The shards a dataset over ``urls`` opens before its first epoch (in a
    process of its own, which an audit hook watches), and the sample counts
    of those it knows."""
    done = subprocess.run([sys.executable, "-c", _OPENS_AT_OPEN, json.dumps(urls), str(index_dir)],
                          capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["opened"], report["known"]


def test_shards_copied_with_their_dataset_index_are_read_for_it_once(tmp_path) -> None:
    """Copies keep their content and modification times (``cp -p``, ``rsync -a``)
    but not their change time: the first open reads each shard's first and
    last bytes to find its index still true, keeps that in the index folder,
    and later opens read no shard."""
    written = write("webdataset", tmp_path / "data", shards=4, per_shard=10)
    for url in written.urls:
        os.chmod(url, 0o640)  # a new change time, as a copy has; the same bytes
    index_dir = tmp_path / "index"
    first, known = _shards_opened_at_open(written.urls, index_dir)
    assert first == sorted(written.urls)  # each one's fingerprint
    assert sum(known) == len(written.samples)
    assert len(known) == len(written.urls)
    again, known = _shards_opened_at_open(written.urls, index_dir)
    assert again == []
    assert sum(known) == len(written.samples)
    assert len(known) == len(written.urls)
    times = os.stat(written.urls[1])
    with open(written.urls[1], "r+b") as shard:  # now it holds other bytes,
        shard.write(b"x")
    os.utime(written.urls[1], ns=(times.st_atime_ns, times.st_mtime_ns))  # with its times kept
    third, known = _shards_opened_at_open(written.urls, index_dir)
    assert third == [written.urls[1]]  # its stamp changed again: its content is asked
    assert len(known) == len(written.urls) - 1  # and is not what its index describes


@pytest.mark.parametrize("shards", [12, 300])  # looked up one by one; the folder listed once
def test_only_the_shard_index_files_the_index_folder_holds_are_opened(
    tmp_path, monkeypatch, shards: int
) -> None:
    """At open, the shards no other index lays out are looked for in the
    index folder all at once: the files of the shards indexed before are
    opened, and no open is tried for the shards never seen (each failed
    open cost 8 us, a never-seen dataset of thousands of shards milliseconds)."""
    from fastio.formats._index import ShardIndex

    written = write("webdataset", tmp_path / "data", shards=shards, per_shard=2, index=False)
    index_dir = tmp_path / "index"
    with fastio.Dataset(written.urls[:5], index_dir=index_dir) as earlier:
        earlier.index()  # five shards' own index files
    stored = sorted(path.name for path in index_dir.glob(f"*{INDEX_SUFFIX}"))
    opened: list[str] = []
    load = ShardIndex.load

    def counted(path):
        opened.append(os.path.basename(path))
        return load(path)

    monkeypatch.setattr(ShardIndex, "load", staticmethod(counted))
    with fastio.Dataset(written.urls, index_dir=index_dir, shuffle=False) as dataset:
        known = [layout is not None for layout in dataset.layouts]
        got = keys(dataset)
    assert known == [True] * 5 + [False] * (shards - 5)
    assert len(stored) == 5
    assert sorted(opened) == stored  # each once, at open (the epoch streams the rest)
    assert got == [row["key"] for row in written.samples]


def test_no_collection_runs_while_a_dataset_lays_out_and_plans_its_shards(
    never_seen, tmp_path
) -> None:
    """Laying out shards and planning a pass make objects per shard, none
    garbage: no collection starts meanwhile, though here every few new
    objects would start one. The collector runs again once the first sample
    is handed out, and after an open that fails."""
    import gc

    inside: list[str] = []  # where each collection started, in the steps watched
    watched = {"_open", "_begin", "make_part", "read_part"}

    def where(phase: str, info: dict) -> None:
        if phase != "start":
            return
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name in watched and "fastio" in frame.f_code.co_filename:
                inside.append(frame.f_code.co_name)
                return
            frame = frame.f_back

    fastio.Dataset(never_seen.urls, index_dir=tmp_path / "index").index()
    thresholds = gc.get_threshold()
    gc.callbacks.append(where)
    try:
        gc.set_threshold(5)
        dataset = fastio.Dataset(never_seen.urls, index_dir=tmp_path / "index", shuffle=True)
        samples = iter(dataset)
        assert next(samples) is not None
        handed_out = gc.isenabled()
        with pytest.raises(FileNotFoundError):
            fastio.Dataset(str(tmp_path / "missing-{0..3}.tar"), format="webdataset")
        failed = gc.isenabled()
        dataset.close()
    finally:
        gc.callbacks.remove(where)
        gc.set_threshold(*thresholds)
    assert inside == []
    assert handed_out
    assert failed


def test_a_paused_collector_comes_back_as_it_was() -> None:
    import gc

    from fastio.shared._collector import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the outer block re-enables
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the block failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a process that disabled it keeps it so
    finally:
        gc.enable()


@pytest.mark.parametrize("beside", [False, True], ids=["stats in turn", "stats beside"])
def test_shards_as_their_dataset_index_holds_them_are_laid_out_as_their_scans_say(
    tmp_path, monkeypatch, beside
) -> None:
    """Every shard as the dataset index holds it: the open lays them out from
    its columns (no index object a shard until one is asked for), and each
    layout, each index asked for later, a pickled copy's layouts and the
    samples are those each shard's own scan gives. A shard changed since
    makes the open go shard by shard, and the samples are its new ones.
    The same where the shards are statted on a thread of their own (as many
    shards are) while the dataset index is read."""
    import pickle

    import numpy as np

    from fastio.dataset import _layouts

    monkeypatch.setattr(_layouts, "_STATTED_BESIDE", 1 if beside else 10**9)
    statted_on = []
    run = _layouts._Beside._run

    def spied(self) -> None:
        statted_on.append(threading.current_thread().name)
        run(self)

    monkeypatch.setattr(_layouts._Beside, "_run", spied)
    written = write("webdataset", tmp_path / "data", shards=4, per_shard=10)
    dataset = fastio.Dataset(written.pattern, shuffle=False, index_dir=tmp_path / "index")
    shards = dataset._shards
    assert shards._indexes is None  # laid out from the columns
    records = shards.record_format
    assert records is not None
    scanned = [build_index(dataset.reader, url, records.locator()) for url in written.urls]
    copy = pickle.loads(pickle.dumps(dataset))
    for made in (dataset, copy):
        for layout, scan in zip(made.layouts, scanned, strict=True):
            assert (layout.url, layout.count, layout.size) == (scan.url, len(scan), scan.size)
            assert layout.starts.dtype == layout.ends.dtype == np.int64
            assert np.array_equal(layout.starts, scan.starts)
            assert np.array_equal(layout.ends, scan.ends)
    for index, scan in zip(shards.indexes, scanned, strict=True):
        assert index is not None
        assert (index.url, index.stamp, index.fingerprint) == (scan.url, scan.stamp,
                                                                scan.fingerprint)  # fmt: skip
        assert index.starts.dtype == np.uint64
        assert np.array_equal(index.starts, scan.starts)
        assert np.array_equal(index.ends, scan.ends)
    assert len(shards.dataset_index().shards) == len(written.urls)
    assert keys(dataset) == keys(copy) == [row["key"] for row in written.samples]

    changed = write("webdataset", tmp_path / "other", shards=4, per_shard=7, index=False)
    os.replace(changed.urls[2], written.urls[2])  # another shard's samples in its place
    counts = [len(scan) for scan in scanned]
    counts[2] = len(build_index(dataset.reader, written.urls[2], records.locator()))
    assert counts[2] != len(scanned[2])
    again = fastio.Dataset(written.pattern, shuffle=False, index_dir=tmp_path / "index")
    assert again._shards._indexes is not None  # shard by shard
    known = [None if layout is None else layout.count for layout in again.layouts]
    assert known == [*counts[:2], None, counts[3]]  # the changed one streams in the first epoch
    assert len(list(again)) == sum(counts)
    assert [layout.count for layout in again.layouts if layout is not None] == counts
    # Each open (the one that wrote the dataset index too) statted so.
    assert len(statted_on) >= 2
    assert set(statted_on) == {"fastio-stat" if beside else "MainThread"}


@pytest.mark.parametrize("beside", [False, True], ids=["stats in turn", "stats beside"])
@pytest.mark.parametrize("written", ["as arrays", "as JSON"])
def test_a_dataset_index_as_arrays_or_as_json_lays_the_shards_out_alike(
    tmp_path, monkeypatch, beside, written
) -> None:
    """A dataset index of many shards holds its fields as arrays too, read
    without its JSON; one of few shards, or one an earlier release wrote,
    the JSON alone. Either way the shards are laid out from it at once (no
    index object a shard), their stamps compared with the index's, and a
    shard changed since is told apart. (How many shards are many is lowered
    here.)"""
    import pickle

    import numpy as np

    from fastio.dataset import _layouts
    from fastio.formats import _index

    monkeypatch.setattr(_layouts, "_STATTED_BESIDE", 1 if beside else 10**9)
    monkeypatch.setattr(_index, "_ARRAYS_FROM", 1)
    made = write("webdataset", tmp_path / "data", shards=3, per_shard=6)
    location = tmp_path / "data" / _index.DATASET_INDEX
    stored = _index._npz_arrays(location.read_bytes())
    assert {"fields", "urls", "names"} <= set(stored)
    if written == "as JSON":
        location.write_bytes(_index._aligned_npz({name: np.array(stored[name]) for name in
                                                  ("starts", "ends", "meta")}))  # fmt: skip
    dataset = fastio.Dataset(made.pattern, shuffle=False, index_dir=tmp_path / "index")
    assert dataset._shards._indexes is None  # laid out from the columns
    if written == "as arrays":  # the open listed no field shard by shard
        assert not dataset._shards._columns.fields._made
    assert dataset._shards.stamps == [dataset.reader.stamp(url) for url in made.urls]
    copy = pickle.loads(pickle.dumps(dataset))  # as a spawned DataLoader worker gets it
    assert keys(dataset) == keys(copy) == [row["key"] for row in made.samples]
    os.utime(made.urls[1], ns=(1, 1))  # its modification time is not the indexed one
    again = fastio.Dataset(made.pattern, shuffle=False, index_dir=tmp_path / "index")
    assert again._shards._indexes is not None  # shard by shard
    assert keys(again) == [row["key"] for row in made.samples]


def test_a_dataset_index_is_read_without_the_json_its_arrays_hold_too(
    tmp_path, monkeypatch
) -> None:
    """Where it is not mapped (``map_cached=False``), the open reads a dataset
    index's file but the JSON that its arrays hold too (a third of a large
    one): the columns are those of the whole file. A file of another layout
    (the JSON alone, as an earlier release wrote it) is read whole, and so,
    again, is one whose arrays will not do without its JSON; a file cut
    short is still told damaged."""
    import numpy as np

    from fastio.formats import _index

    monkeypatch.setattr(_index, "_ARRAYS_FROM", 1)
    # A file of a few shards is read with its tail at once: here, its directory alone.
    monkeypatch.setattr(_index, "_TAIL_BYTES", 1024)
    made = write("webdataset", tmp_path / "data", shards=40, per_shard=2)
    location = tmp_path / "data" / _index.DATASET_INDEX
    whole = location.read_bytes()
    data, complete = _index._dataset_index_bytes(str(location), mapped=False)
    assert not complete
    read = bytes(data)
    assert len(read) == len(whole)
    assert read.count(0) - whole.count(0) > 100  # the JSON's bytes were not read
    partial, full = _index.IndexColumns.read(data, str(location)), _index.IndexColumns.read(
        whole, str(location))  # fmt: skip
    assert list(partial.urls) == list(full.urls) == [str(url) for url in made.urls]
    assert dict(partial.fields) == dict(full.fields)
    assert partial.bounds == full.bounds
    assert np.array_equal(partial.starts, full.starts)
    assert np.array_equal(partial.ends, full.ends)
    assert not partial.starts.flags.writeable  # views of the file's bytes, read-only
    fetched = _index.DatasetIndex.fetch_columns(str(location))
    assert fetched is not None
    assert dict(fetched.fields) == dict(full.fields)
    # Arrays of another version: the JSON decides, read whole.
    stored = _index._npz_arrays(whole)
    stored["fields"] = np.array([_index._VERSION + 1, *stored["fields"][1:]], np.int64)
    location.write_bytes(_index._aligned_npz({name: np.array(array) for name, array in
                                              stored.items()}))  # fmt: skip
    assert not _index._dataset_index_bytes(str(location), mapped=False)[1]
    fetched = _index.DatasetIndex.fetch_columns(str(location))
    assert fetched is not None
    assert fetched.fields == dict(full.fields)
    location.write_bytes(_index._aligned_npz({name: np.array(stored[name]) for name in
                                              ("starts", "ends", "meta")}))  # fmt: skip
    assert _index._dataset_index_bytes(str(location), mapped=False)[1]  # the JSON alone: whole
    location.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(fastio.IndexFileError):
        _index.DatasetIndex.fetch_columns(str(location))


@pytest.mark.parametrize("map_cached", ["auto", False])
def test_a_dataset_index_is_mapped_unless_the_reader_maps_nothing(
    tmp_path, monkeypatch, map_cached
) -> None:
    """A dataset index beyond one tail's bytes is mapped from the page
    cache, not copied: its arrays are read-only views of the file's pages,
    and an index saved again meanwhile (written aside, then renamed over
    it, as fastio writes) leaves them as they were. With ``map_cached=False``
    it is read; where the filesystem maps nothing, too. Either way the
    samples are the same."""
    import numpy as np

    from fastio import _native
    from fastio.formats import _index

    monkeypatch.setattr(_index, "_ARRAYS_FROM", 1)
    monkeypatch.setattr(_index, "_TAIL_BYTES", 1024)
    made = write("webdataset", tmp_path / "data", shards=40, per_shard=2)
    location = tmp_path / "data" / _index.DATASET_INDEX
    whole = location.read_bytes()
    data, complete = _index._dataset_index_bytes(str(location))
    assert complete
    assert isinstance(data, memoryview)
    assert isinstance(data.obj, _native.MappedRange)
    assert data.readonly
    assert bytes(data) == whole
    columns = _index.IndexColumns.read(data, str(location))
    starts = np.array(columns.starts)
    fresh = tmp_path / "fresh"
    fresh.write_bytes(whole.replace(b"shard-", b"SHARD-"))  # another index, all its names
    fresh.replace(location)
    assert np.array_equal(columns.starts, starts)
    assert list(columns.urls) == [str(url) for url in made.urls]  # the old file's names
    location.write_bytes(whole)
    maps = []

    def spied(fd: int, length: int) -> object:
        maps.append(length)
        return _native.map_file(fd, length)

    monkeypatch.setattr(_index, "map_file", spied)
    dataset = fastio.Dataset(made.pattern, shuffle=False, map_cached=map_cached)
    assert dataset._shards._columns is not None  # laid out from the dataset index
    assert keys(dataset) == [row["key"] for row in made.samples]
    assert maps == ([len(whole)] if map_cached == "auto" else [])

    def unmappable(fd: int, length: int) -> object:
        raise OSError(errno.ENODEV, "no mapping here")

    monkeypatch.setattr(_index, "map_file", unmappable)
    dataset = fastio.Dataset(made.pattern, shuffle=False)
    assert dataset._shards._columns is not None
    assert keys(dataset) == [row["key"] for row in made.samples]


def test_a_never_seen_dataset_is_laid_out_at_once_as_shard_by_shard(tmp_path, monkeypatch) -> None:
    """Shards no index anywhere holds are told unknown all at once (not
    opened one by one): each one's size and stamp as a stat gives them, no
    layout, no index; the first epoch streams them and leaves their indexes,
    and the next open finds those, shard by shard."""
    from fastio.dataset import _layouts

    opened = []
    open_shard = _layouts.ShardLayouts._open

    def spied(self, *args, **kwargs):
        opened.append(args[1])
        return open_shard(self, *args, **kwargs)

    monkeypatch.setattr(_layouts.ShardLayouts, "_open", spied)
    made = write("webdataset", tmp_path / "data", shards=5, per_shard=4, index=False)
    dataset = fastio.Dataset(made.pattern, shuffle=False, index_dir=tmp_path / "index")
    shards = dataset._shards
    assert opened == []  # all at once
    assert shards.layouts == [None] * 5
    assert shards.indexes == [None] * 5
    assert shards.sizes == [os.path.getsize(url) for url in made.urls]
    assert shards.stamps == [dataset.reader.stamp(url) for url in made.urls]
    assert keys(dataset) == [row["key"] for row in made.samples]  # streamed, indexes left
    again = fastio.Dataset(made.pattern, shuffle=False, index_dir=tmp_path / "index")
    records = again._shards.record_format
    assert records is not None
    # Kept together too: found by the keys an open has worked out already.
    together = records.store.load_set(made.urls, index_keys(made.urls))
    assert sorted(together) == sorted(index_keys(made.urls))
    assert together.keys() == records.store.load_set(made.urls).keys()
    scanned = [len(build_index(again.reader, url, records.locator())) for url in made.urls]
    assert [layout.count for layout in again.layouts] == scanned
    assert keys(again) == [row["key"] for row in made.samples]


def test_stats_taken_beside_give_what_they_raised_where_they_are_taken() -> None:
    from fastio.dataset._layouts import _Beside

    def ask(urls: list[str]) -> list[str]:
        if urls == ["bad"]:
            raise PermissionError(13, "Permission denied", urls[0])
        return urls

    assert _Beside(ask, ["a", "b"], beside=True).result() == ["a", "b"]
    for beside in (True, False):
        stats = _Beside(ask, ["bad"], beside=beside)
        with pytest.raises(PermissionError) as raised:
            stats.result()
        assert raised.value.filename == "bad"


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_dataset_laid_out_from_its_index_makes_a_layout_only_for_a_shard_it_reads(
    tmp_path, compression
) -> None:
    """Laid out from a dataset index's columns, a shard's layout is made when a
    read needs it: the first sample of an epoch of many shards makes a few.
    The plan's counts and cuts come from the columns, the same as from the
    layouts made one by one (where the shards are compressed, each one unit
    read whole, from the layouts)."""
    from fastio.formats._layout import _UNMADE, ColumnLayouts
    from fastio.plan import assign_samples

    written = write("webdataset", tmp_path / "data", shards=40, per_shard=3,
                    compression=compression)  # fmt: skip
    dataset = fastio.Dataset(written.pattern, shuffle=False, index_dir=tmp_path / "index")
    layouts = dataset.layouts
    assert isinstance(layouts, ColumnLayouts)
    samples = iter(dataset)
    assert key_of("webdataset", next(samples)) == written.samples[0]["key"]
    made = sum(layout is not _UNMADE for layout in layouts._made)
    if compression is None:  # (a compressed shard is cut by its layout: each is made)
        assert 1 <= made < 10
    assert sum(dataset.counts) == len(written.samples)
    assert (layouts.per_sample() is None) is (compression is not None)
    for shuffle, mix in ((False, 1), (True, 4)):
        spans = assign_samples(dataset.counts, seed=5, shuffle=shuffle)
        assert make_windows(spans, layouts, 200, mix) == make_windows(spans, list(layouts),
                                                                      200, mix)  # fmt: skip
    rest = [key_of("webdataset", sample) for sample in samples]
    assert rest == [row["key"] for row in written.samples[1:]]


def test_layouts_from_columns_are_a_fixed_list_that_keeps_what_is_set_in_it(tmp_path) -> None:
    """What the dataset does with its list of layouts, done to one made from a
    dataset index's columns: a layout set in place is kept (its count counts,
    its offsets are cut), None marks a shard unknown, and no shard is added
    or removed."""
    import numpy as np

    from fastio.formats._layout import ColumnLayouts, counts_of
    from fastio.plan import assign_samples

    written = write("webdataset", tmp_path / "data", shards=5, per_shard=4)
    other = write("webdataset", tmp_path / "other", shards=1, per_shard=9)
    layouts = fastio.Dataset(written.pattern, index_dir=tmp_path / "index").layouts
    assert isinstance(layouts, ColumnLayouts)
    whole = list(layouts)
    assert len(layouts) == 5
    assert layouts[-1] is layouts[4] is whole[4]
    assert layouts[1:3] == whole[1:3]
    assert None not in layouts
    counts = counts_of(whole)
    assert layouts.counts() == counts
    assert sum(counts) == len(written.samples)
    starts, ends, firsts = layouts.per_sample()
    assert firsts == np.cumsum([0, *counts[:-1]]).tolist()
    for shard, layout in enumerate(whole):
        assert np.array_equal(starts[shard][firsts[shard] :][: layout.count], layout.starts)
        assert np.array_equal(ends[shard][firsts[shard] :][: layout.count], layout.ends)

    [replacement] = fastio.Dataset(other.pattern, index_dir=tmp_path / "index").layouts
    layouts[2] = replacement
    assert layouts[2] is replacement
    assert layouts.counts() == [*counts[:2], replacement.count, *counts[3:]]
    starts, ends, firsts = layouts.per_sample()
    assert starts[2] is replacement.starts
    assert firsts[2] == 0
    spans = assign_samples(layouts.counts(), seed=1)
    assert make_windows(spans, layouts, 100, 3) == make_windows(spans, list(layouts), 100, 3)
    layouts[3] = None
    assert None in layouts
    assert layouts.counts() == [*counts[:2], replacement.count, 0, counts[4]]
    assert layouts.per_sample() is None
    changes = [
        lambda: layouts.append(None),
        lambda: layouts.insert(0, None),
        lambda: layouts.__delitem__(0),
        lambda: layouts.__setitem__(slice(0, 1), []),
    ]
    for change in changes:
        with pytest.raises(TypeError):
            change()
    assert len(layouts) == 5


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_shard_rewritten_between_epochs_is_told_changed(tmp_path, on_error) -> None:
    """Laid out from the dataset index, the shards are checked against it again
    as the next epoch begins: one rewritten meanwhile raises naming it, or
    under skip its samples are left out and counted, the others delivered."""
    written = write("webdataset", tmp_path / "data", shards=3, per_shard=5)
    dataset = fastio.Dataset(written.pattern, shuffle=False, index_dir=tmp_path / "index",
                             on_error=on_error)  # fmt: skip
    assert dataset._shards._indexes is None  # laid out from the columns
    first = keys(dataset)
    assert first == [row["key"] for row in written.samples]
    other = write("webdataset", tmp_path / "other", shards=3, per_shard=4, index=False)
    os.replace(other.urls[1], written.urls[1])
    dataset.set_epoch(1)
    if on_error == "raise":
        with pytest.raises(fastio.ShardChangedError, match=written.urls[1]):
            keys(dataset)
        return
    counts = dataset.counts
    kept = first[: counts[0]] + first[counts[0] + counts[1] :]
    assert keys(dataset) == kept
    assert dataset.stats()["skipped"] == counts[1]
