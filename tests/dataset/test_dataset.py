"""fastio.Dataset on files written by the peers' own writers: every format,
stored and shuffled order, batches, random access, exactly-once splits."""

from __future__ import annotations

import collections
import dataclasses
import gc
import os
import pickle
import subprocess
import sys
import tarfile
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import fastio
from tests.pagecache import cached, drop_pages, mapped
from tests.shards import FORMATS, batch_keys, check_sample, gnu_tar, key_of, write


@pytest.fixture(scope="module", params=FORMATS)
def written(request, tmp_path_factory):
    return write(request.param, tmp_path_factory.mktemp(request.param))


def keys(written, dataset) -> list[int]:
    return [key_of(written.options["format"], sample) for sample in dataset]


@pytest.mark.parametrize("map_cached", [True, False], ids=["mapped", "read"])
def test_stored_order_yields_every_sample_as_written(written, map_cached) -> None:
    dataset = fastio.Dataset(written.pattern, shuffle=False, read_size=4096,
                             map_cached=map_cached, **written.options)  # fmt: skip
    assert dataset.total == len(written.samples) == len(dataset)
    got = list(dataset)
    assert len(got) == len(written.samples)
    for sample, row in zip(got, written.samples, strict=True):
        assert key_of(written.options["format"], sample) == row["key"]
        check_sample(written.options["format"], sample, row)
    # Samples are owned: they pickle (DataLoader workers send them) and outlive the reader.
    dataset.close()
    assert pickle.loads(pickle.dumps(got[-1])) is not None
    # Arrays come writable, as numpy makes them, whether their bytes were mapped or read.
    arrays = [s for s in got if isinstance(s, np.ndarray)]
    assert all(array.flags.writeable for array in arrays)
    del got, arrays
    gc.collect()
    assert not mapped(written.urls)


@pytest.mark.parametrize("large", [False, True], ids=["8 KB rows read", "60 KB rows mapped"])
def test_cached_arrow_files_are_mapped_by_default_where_rows_are_large(tmp_path, large) -> None:
    """A batch of small rows that spans two record batches is joined from a
    read buffer, which the CPU's caches still hold; large rows are copied
    once, straight from the page cache's pages."""
    written = write("arrow", tmp_path, shards=2, per_shard=30 if large else 100, large=large)
    assert all(os.path.getsize(url) > 512 << 10 for url in written.urls)  # pieces that may map
    dataset = fastio.Dataset(written.pattern, shuffle=False, **written.options)
    items = iter(dataset.batches(8))
    first = next(items)
    # Written just now, the files are in the page cache.
    assert bool(mapped(written.urls)) is large
    assert first.column("data").to_pylist() == [row["data"] for row in written.samples[:8]]
    rest = [row for batch in items for row in batch.column("key").to_pylist()]
    assert rest == [row["key"] for row in written.samples[8:]]
    dataset.close()


@pytest.mark.parametrize("batches", [False, True], ids=["samples", "batches"])
def test_an_epoch_left_early_leaves_no_file_mapped(tmp_path, batches) -> None:
    written = write("webdataset", tmp_path, shards=4, per_shard=30)
    dataset = fastio.Dataset(written.pattern, read_size=4096, map_cached=True, **written.options)
    items = iter(dataset.batches(8) if batches else dataset)
    for _ in range(10):
        next(items)
    # Written just now, the shards are in the page cache: read mapped.
    assert mapped(written.urls)
    del items
    dataset.close()
    gc.collect()
    assert not mapped(written.urls)


@pytest.mark.parametrize(
    ("format_name", "large", "batches", "maps"),
    [("arrow", True, False, True), ("arrow", True, True, True),
     ("webdataset", True, False, True), ("webdataset", True, True, True),
     ("webdataset", False, False, False), ("webdataset", False, True, False),
     ("tfrecord", True, False, False), ("tfrecord", True, True, True),
     ("tfrecord", False, True, False)],
)  # fmt: skip
def test_by_default_cached_shards_are_mapped_where_the_format_gains(
    tmp_path, format_name, large, batches, maps
) -> None:
    # Arrow IPC always; tar where samples are large; TFRecord in batches of
    # large records, never per sample. Shards
    # of about 2 MB, read in pieces large enough to be mapped (not the first
    # ones: a fresh process reads its first MiB on the consumer's thread).
    written = write(format_name, tmp_path, shards=4, per_shard=30, large=large)
    with fastio.Dataset(written.pattern, shuffle=False, **written.options) as dataset:
        got, seen = [], False
        for item in dataset.batches(8) if batches else dataset:
            got.append(item)
            seen = seen or bool(mapped(written.urls))
        assert seen is maps
    keys = [k for item in got for k in (batch_keys(format_name, item) if batches
                                        else [key_of(format_name, item)])]  # fmt: skip
    assert keys == [row["key"] for row in written.samples]


@pytest.mark.parametrize(
    ("format_name", "row_bytes", "maps"),
    [("npy", 20_000, True), ("npy", 64, False), ("fixed", 20_000, True), ("fixed", 64, False)],
)
def test_by_default_array_shards_are_mapped_where_rows_are_large(
    tmp_path, format_name, row_bytes, maps
) -> None:
    rng = np.random.default_rng(1)
    arrays = [rng.integers(0, 256, (100 if maps else 30_000, row_bytes), dtype=np.uint8)
              for _ in range(3)]  # fmt: skip
    urls = []
    for index, array in enumerate(arrays):
        path = tmp_path / f"part-{index}.{format_name}"
        if format_name == "npy":
            np.save(path, array)
        else:
            path.write_bytes(array.tobytes())
        urls.append(str(path))
    options = {"record_size": row_bytes} if format_name == "fixed" else {}
    with fastio.Dataset(urls, format=format_name, shuffle=False, **options) as dataset:
        got, seen = [], False
        for item in dataset:
            got.append(item)
            seen = seen or (len(got) % 25 == 0 and bool(mapped(urls)))
        assert seen is maps
    rows = [bytes(row) for array in arrays for row in array]
    assert [bytes(memoryview(item).cast("B")) for item in got] == rows


def test_shuffled_epoch_is_a_permutation_reproducible_by_seed_and_epoch(written) -> None:
    options = dict(shuffle_buffer=40_000, shuffle_shards=3, **written.options)
    first = keys(written, fastio.Dataset(written.pattern, seed=7, **options))
    again = keys(written, fastio.Dataset(written.pattern, seed=7, **options))
    assert sorted(first) == [row["key"] for row in written.samples]
    assert first == again
    assert first != sorted(first)
    other_seed = keys(written, fastio.Dataset(written.pattern, seed=8, **options))
    epoch_one = fastio.Dataset(written.pattern, seed=7, **options)
    epoch_one.set_epoch(1)
    assert other_seed != first
    assert keys(written, epoch_one) != first
    # The plan predicts the delivered order exactly.
    dataset = fastio.Dataset(written.pattern, seed=7, **options)
    assert [written.samples[i]["key"] for i in dataset.order()] == first


@pytest.mark.parametrize("shuffle", [False, True], ids=["stored", "shuffled"])
@pytest.mark.parametrize("format_name", FORMATS)
def test_batches_keep_their_schema_from_the_streamed_first_epoch_on(
    tmp_path, format_name, shuffle
) -> None:
    """A never-seen dataset's first epoch streams its shards, later ones read
    by their indexes: the batches' columns keep one schema throughout (Ray
    Data, for one, refuses to join blocks of two)."""
    written = write(format_name, tmp_path / "data", shards=3, per_shard=12, index=False)
    dataset = fastio.Dataset(written.pattern, shuffle=shuffle, index_dir=tmp_path / "index",
                             **written.options)  # fmt: skip

    def kinds(epoch: int) -> set[str]:
        dataset.set_epoch(epoch)
        return {str(batch.dtype if isinstance(batch, np.ndarray) else batch.schema)
                for batch in dataset.batches(5)}  # fmt: skip

    first = kinds(0)
    assert len(first) == 1
    assert kinds(1) == first
    dataset.close()


def test_batches_deliver_the_same_order_in_one_object_per_batch(written) -> None:
    format_name = written.options["format"]
    dataset = fastio.Dataset(written.pattern, seed=3, shuffle_buffer=30_000, **written.options)
    expected = keys(written, dataset)
    dataset.set_epoch(0)  # the same epoch again (each pass is the next epoch by itself)
    got: list[int] = []
    sizes = []
    for batch in dataset.batches(16):
        assert isinstance(batch, (np.ndarray, pa.RecordBatch))
        sizes.append(len(batch) if isinstance(batch, np.ndarray) else batch.num_rows)
        got.extend(batch_keys(format_name, batch))
    assert got == expected
    assert all(size == 16 for size in sizes[:-1])
    assert 0 < sizes[-1] <= 16
    dropped = list(dataset.batches(16, drop_last=True))
    assert sum(len(b) if isinstance(b, np.ndarray) else b.num_rows for b in dropped) == (
        len(expected) // 16 * 16
    )


def test_random_access_by_index(written) -> None:
    dataset = fastio.Dataset(written.pattern, **written.options)
    for index in (0, 5, len(written.samples) // 2, -1):
        sample = dataset[index]
        row = written.samples[index]
        check_sample(written.options["format"], sample, row)
    with pytest.raises(IndexError):
        dataset[len(written.samples)]


def test_windows_mix_several_shards(tmp_path) -> None:
    written = write("webdataset", tmp_path, shards=8, per_shard=40)
    shard_of = {}
    for url in written.urls:
        for sample in fastio.Dataset(url, shuffle=False):
            shard_of[key_of("webdataset", sample)] = url
    dataset = fastio.Dataset(written.pattern, shuffle_buffer=200_000, shuffle_shards=4)
    got = keys(written, dataset)
    first_hundred = {shard_of[k] for k in got[:100]}
    assert len(first_hundred) >= 3  # a window holds runs of several shards
    longest = max(len(list(run)) for _, run in __import__("itertools").groupby(
        shard_of[k] for k in got))  # fmt: skip
    assert longest < 15


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("format_name", ["webdataset", "tfrecord", "jsonl"])
def test_compressed_shards(tmp_path, format_name, codec) -> None:
    written = write(format_name, tmp_path, compression=codec)
    dataset = fastio.Dataset(written.pattern, shuffle=False, **written.options)
    assert [key_of(format_name, s) for s in dataset] == [r["key"] for r in written.samples]
    shuffled = keys(written, fastio.Dataset(written.pattern, seed=1, **written.options))
    assert sorted(shuffled) == [r["key"] for r in written.samples]
    check_sample(format_name, dataset[3], written.samples[3])


@pytest.mark.parametrize("tar_format", ["gnu", "pax"])
def test_gnu_tar_with_long_names(tmp_path, tar_format) -> None:
    deep = "d" * 60 + "/" + "e" * 70  # member names longer than ustar's 100 bytes
    members = {}
    for i in range(12):
        members[f"{deep}/s{i:03d}.txt"] = f"text {i}".encode()
        members[f"{deep}/s{i:03d}.seg.png"] = bytes([i]) * (i * 100)
    path = gnu_tar(tmp_path, members, tar_format)
    samples = list(fastio.Dataset(str(path), shuffle=False))
    assert [s["__key__"] for s in samples] == [f"{deep}/s{i:03d}" for i in range(12)]
    for i, sample in enumerate(samples):
        assert sample["txt"] == f"text {i}".encode()
        assert sample["seg.png"] == bytes([i]) * (i * 100)
        assert sample["__url__"] == str(path)


def test_parquet_and_arrow_column_selection_reads_only_those_columns(tmp_path) -> None:
    for format_name in ("parquet", "arrow"):
        written = write(format_name, tmp_path / format_name, per_shard=60)
        dataset = fastio.Dataset(written.pattern, shuffle=False, columns=["key", "label"])
        got = list(dataset)
        assert got == [{"key": r["key"], "label": r["label"]} for r in written.samples]
        if format_name == "parquet":
            # Only the chosen columns' bytes are read (plus footers): far less than the files.
            read = dataset.reader.stats().bytes_read
            total = sum(__import__("os").path.getsize(u) for u in written.urls)
            assert read < total / 2
        with pytest.raises(ValueError, match="no column 'nope'"):
            fastio.Dataset(written.pattern, columns=["nope"])


def test_options_are_checked(tmp_path) -> None:
    written = write("webdataset", tmp_path)
    with pytest.raises(ValueError, match="on_error"):
        fastio.Dataset(written.pattern, on_error="ignore")
    with pytest.raises(ValueError, match="record_size"):
        fastio.Dataset(written.pattern, record_size=4)
    with pytest.raises(ValueError, match="needs record_size"):
        fastio.Dataset(written.pattern, format="fixed")
    (tmp_path / "x.unknown").write_bytes(b"x")  # there, of no format (missing: not found)
    with pytest.raises(ValueError, match="extension"):
        fastio.Dataset(str(tmp_path / "x.unknown"))
    with pytest.raises(FileNotFoundError):
        fastio.Dataset(str(tmp_path / "none-*.tar"))


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("remainder", ["exact", "drop", "pad"])
def test_ranks_split_exactly(tmp_path_factory, world_size, remainder) -> None:
    written = write("tfrecord", tmp_path_factory.mktemp("ranks"), shards=5, per_shard=13)
    per_rank = []
    for rank in range(world_size):
        dataset = fastio.Dataset(written.pattern, rank=rank, world_size=world_size,
                                 remainder=remainder, shuffle_buffer=20_000)  # fmt: skip
        got = keys(written, dataset)
        assert len(got) == len(dataset)
        per_rank.append(got)
    total = len(written.samples)
    sizes = [len(keys_) for keys_ in per_rank]
    union = collections.Counter(k for keys_ in per_rank for k in keys_)
    everything = {row["key"] for row in written.samples}
    if remainder == "exact":
        assert max(sizes) - min(sizes) <= 1
        assert set(union) == everything
        assert set(union.values()) == {1}
    elif remainder == "drop":
        assert sizes == [total // world_size] * world_size
        assert set(union.values()) == {1}
        assert len(union) == total // world_size * world_size
    else:
        assert sizes == [-(-total // world_size)] * world_size
        assert set(union) == everything
        assert sum(union.values()) - total == sum(sizes) - total < world_size


def test_parts_as_ranks_of_one_dataset_each_read_their_own_epoch(tmp_path) -> None:
    # As Ray's read tasks do: one indexed dataset, a part per task, each part
    # told the epoch; parts iterated one after another in one process must
    # not take the next epoch from each other.
    written = write("tfrecord", tmp_path, shards=4, per_shard=11)
    with fastio.Dataset(written.pattern, shuffle_buffer=20_000, fairness=False) as dataset:
        dataset.index()
        parts = [dataset.as_rank(rank, 3) for rank in range(3)]
        got = []
        for rank, part in enumerate(parts):
            part.set_epoch(5)
            delivered = keys(written, part)
            assert delivered == [written.samples[i]["key"]
                                 for i in dataset.order(5, rank=rank, world_size=3)]  # fmt: skip
            got.extend(delivered)
            part.close()
        assert sorted(got) == sorted(row["key"] for row in written.samples)
        assert dataset.epoch == 0  # the parts' passes are not the dataset's
        with pytest.raises(ValueError, match=r"rank must be in 0\.\.2, not 3"):
            dataset.as_rank(3, 3)


@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_parts_as_ranks_of_a_never_seen_dataset_have_equal_counts(tmp_path, remainder) -> None:
    """As a dataset made for a rank does: a never-seen dataset's parts with
    drop or pad index it first, so that each has the same count from the
    first epoch on (not each a stream of whole shards)."""
    written = write("tfrecord", tmp_path, shards=5, per_shard=7, index=False)
    total = len(written.samples)
    base = fastio.Dataset(written.pattern, remainder=remainder, index_dir=tmp_path / "index",
                          fairness=False)  # fmt: skip
    counts = []
    for rank in range(3):
        part = base.as_rank(rank, 3)
        counts.append(len(keys(written, part)))
        part.close()
    equal = total // 3 if remainder == "drop" else -(-total // 3)
    assert total % 3  # a remainder to drop or pad
    assert counts == [equal] * 3


@pytest.mark.parametrize(
    ("shuffle", "batch_size", "buffer", "read_size"),
    [
        (False, 32, 1_000_000, 256 << 10),
        (False, 5, 1_000_000, 64 << 10),
        (True, 32, 1_000_000, 256 << 10),
        (True, 3, 2_000_000, 256 << 10),
    ],
)
def test_tar_batches_spanning_reads_and_shards_equal_the_samples(
    tmp_path, shuffle, batch_size, buffer, read_size
) -> None:
    """Samples of about 110 KB, a dozen to a shard and read in pieces of a few
    samples: every batch of 32 gathers rows of several reads and shards, and
    each of its rows is byte for byte the sample iteration gives. Read in
    pieces smaller than a sample, each sample's range is cut and its pieces
    joined. Shuffled,
    in windows of a few samples: batches of 32 cross windows, each gathered
    in the windows' order straight from the buffers the rows were read into;
    a window that makes more than two batches of 3 is joined first, and a
    batch then holds rows of both kinds of window."""
    import webdataset

    rng = np.random.default_rng(5)
    counts = (13, 1, 20, 9)  # a shard of one sample, and uneven ends
    number = 0
    for shard, count in enumerate(counts):
        with webdataset.TarWriter(str(tmp_path / f"big-{shard}.tar")) as sink:
            for _ in range(count):
                size = 110_000 + int(rng.integers(-3000, 3000))
                sample = {"__key__": f"s{number:05d}", "bin": rng.bytes(size),
                          "cls": b"%d" % number}  # fmt: skip
                if number % 7 == 3:
                    sample["txt"] = b"only some samples have this"
                sink.write(sample)
                number += 1
    pattern = str(tmp_path / f"big-{{0..{len(counts) - 1}}}.tar")
    options = {"format": "webdataset", "shuffle": shuffle, "read_size": read_size,
               "shuffle_buffer": buffer, "seed": 11}  # fmt: skip
    with fastio.Dataset(pattern, **options) as dataset:
        dataset.index()  # the planned order (a first epoch streamed has its own)
        samples = list(dataset)
    with fastio.Dataset(pattern, **options) as dataset:
        batches = list(dataset.batches(batch_size))
    full, rest = divmod(sum(counts), batch_size)
    assert [batch.num_rows for batch in batches] == [batch_size] * full + [rest]
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert len(rows) == len(samples) == sum(counts)
    keys = [sample["__key__"] for sample in samples]
    assert (keys != sorted(keys)) == shuffle
    for row, sample in zip(rows, samples, strict=True):
        assert row["__key__"] == sample["__key__"]
        assert row["__url__"] == sample["__url__"]
        for extension in ("bin", "cls", "txt"):  # a batch without "txt" has no such column
            value = sample.get(extension)
            assert row.get(extension) == (None if value is None else bytes(value))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_cold_shards_that_fit_in_memory_are_cached_by_the_first_epoch(
    tmp_path, num_workers
) -> None:
    """A dataset far smaller than the memory the page cache may use, cold
    (its pages dropped): the first epoch reads it through the page cache
    (with the default direct="auto"), in the main process and in DataLoader
    workers alike, so the next epoch finds it there. The shards are
    webdataset's writer's."""
    import webdataset
    from torch.utils.data import DataLoader

    from fastio.reader._files import fits_in_page_cache, page_cache_room

    rng = np.random.default_rng(3)
    paths = [str(tmp_path / f"cold-{shard}.tar") for shard in range(4)]
    for shard, path in enumerate(paths):
        with webdataset.TarWriter(path) as sink:
            for number in range(12):
                sink.write({"__key__": f"s{shard}-{number:03d}", "bin": rng.bytes(50_000)})
    if any(drop_pages(path) > 0 for path in paths):
        # tmpfs and ramfs hold files in the page cache itself: nothing to drop.
        pytest.skip("this filesystem keeps the files' pages (tmpfs?)")
    assert fits_in_page_cache(sum(os.path.getsize(path) for path in paths), page_cache_room())
    expected = []
    for path in paths:
        with tarfile.open(path) as archive:
            expected += [(member.name.removesuffix(".bin"), archive.extractfile(member).read())
                         for member in archive]  # fmt: skip
    # That reading filled the cache: dropped again.
    assert [drop_pages(path) for path in paths] == [0.0] * len(paths)
    with fastio.Dataset(paths, format="webdataset", shuffle=False) as dataset:
        assert dataset.settings.direct == "auto"
        assert dataset.reader.cold_through_cache
        if num_workers:
            loader = DataLoader(dataset, batch_size=None, num_workers=num_workers)
            got = sorted((sample["__key__"], bytes(sample["bin"])) for sample in loader)
            expected.sort()
        else:
            got = [(sample["__key__"], bytes(sample["bin"])) for sample in dataset]
    assert got == expected
    assert all(cached(path) for path in paths)  # read with O_DIRECT, none would be


def test_fits_in_page_cache_leaves_room_to_spare() -> None:
    from fastio.reader._files import CACHE_SHARE, fits_in_page_cache, page_cache_room

    room = page_cache_room()
    assert room is not None
    assert 0 < room <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert fits_in_page_cache(int(room * CACHE_SHARE), room)
    assert not fits_in_page_cache(int(room * CACHE_SHARE) + 1, room)
    assert not fits_in_page_cache(1, None)  # not known: cold files keep O_DIRECT


@pytest.mark.parametrize("imported", ["", "from fastio.dataset import _delivery\n"])
@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "never seen"])
def test_a_loop_left_at_its_first_sample_ends_quietly_with_the_process(
    tmp_path, imported, indexed
) -> None:
    """Indexed, and never seen (the first epoch streams its shards); also
    where the script holds the delivery module itself. Left open, the
    iteration ends before the interpreter empties the modules its cleanup
    uses."""
    written = write("webdataset", tmp_path / "data", shards=2, per_shard=8, index=indexed)
    script = (
        "import sys, fastio\n"
        f"{imported}"
        "dataset = fastio.Dataset(sys.argv[2:], shuffle=False, index_dir=sys.argv[1])\n"
        "iterator = iter(dataset)\n"
        "print(next(iterator)['__key__'])\n"  # left open: closed as the process ends
    )
    index_dir = tmp_path / "index"  # empty: never seen is never seen
    done = subprocess.run([sys.executable, "-c", script, str(index_dir), *written.urls],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    first = {"__key__": done.stdout.strip()}
    assert key_of("webdataset", first) == written.samples[0]["key"]
    assert done.stderr == ""


def _arrays_pickled(value: object) -> int:
    import io

    class Counting(pickle.Pickler):
        arrays = 0

        def reducer_override(self, obj: object) -> object:
            if isinstance(obj, np.ndarray):
                Counting.arrays += 1
            return NotImplemented

    Counting(io.BytesIO()).dump(value)
    return Counting.arrays


def _values(layout: Any) -> dict[str, Any]:
    return {field.name: getattr(layout, field.name) for field in dataclasses.fields(layout)}


def test_a_pickled_dataset_has_its_shards_laid_out_as_they_were(tmp_path) -> None:
    """What a spawned DataLoader worker gets: each shard's index (its stamps,
    its offsets as uint64) and layout as in the parent, a damaged shard's
    layout (made by its scan, with no index to share) too, and the same
    samples in the same order. The shards' offsets travel as two arrays,
    not as arrays of each shard's own."""
    written = write("webdataset", tmp_path / "data", shards=5, per_shard=12, index=False)
    with open(written.urls[2], "r+b") as handle:
        handle.truncate(os.path.getsize(written.urls[2]) * 6 // 10)
    dataset = fastio.Dataset(written.pattern, on_error="skip", index_dir=tmp_path / "index",
                             seed=5)  # fmt: skip
    dataset.index()
    shards = dataset._shards
    assert [index is None for index in shards.indexes] == [False, False, True, False, False]
    unindexed = [layout for layout, index in zip(dataset.layouts, shards.indexes, strict=True)
                 if index is None]  # fmt: skip
    arrays = sum(isinstance(value, np.ndarray) for layout in unindexed
                 for value in _values(layout).values())  # fmt: skip
    assert _arrays_pickled(dataset) == 2 + arrays
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy.layouts is copy._shards.layouts
    assert (copy._shards.stamps, copy._shards.sizes) == (shards.stamps, shards.sizes)
    for mine, theirs in zip(shards.indexes, copy._shards.indexes, strict=True):
        if mine is None:
            assert theirs is None
            continue
        assert theirs is not None
        assert (theirs.url, theirs.format, theirs.stamp, theirs.fingerprint) == (
            mine.url, mine.format, mine.stamp, mine.fingerprint)  # fmt: skip
        assert theirs.starts.dtype == theirs.ends.dtype == np.uint64
        assert np.array_equal(theirs.starts, mine.starts)
        assert np.array_equal(theirs.ends, mine.ends)
    for mine, theirs in zip(dataset.layouts, copy.layouts, strict=True):
        fields = _values(mine)
        assert _values(theirs).keys() == fields.keys()
        for name, value in fields.items():
            if isinstance(value, np.ndarray):
                assert np.array_equal(getattr(theirs, name), value), name
            else:
                assert getattr(theirs, name) == value, name
    keys = [key_of("webdataset", sample) for sample in dataset]
    assert [key_of("webdataset", sample) for sample in copy] == keys
    assert len(keys) == dataset.total
    part = dataset.as_rank(0, 1)  # a part of the dataset in this process: the same layouts
    assert part.layouts is dataset.layouts
    assert sorted(key_of("webdataset", sample) for sample in part) == sorted(keys)
    for made in (dataset, copy, part):
        made.close()
