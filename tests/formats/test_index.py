"""Per-shard index: byte ranges of every sample, cached and checked for staleness."""

from __future__ import annotations

import ast
import io
import itertools
import json
import os
import random
import shutil
import tarfile
import threading
import unittest.mock
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastio
import fastio.formats._index
from fastio.formats import (
    JsonLinesWriter,
    LinesWriter,
    TFRecordWriter,
    WebDatasetWriter,
    compressing,
    decode_jsonl,
    decode_tfrecord,
    decode_webdataset,
    example_parts,
)
from fastio.formats._index import (
    DATASET_INDEX,
    INDEX_SUFFIX,
    UNREADABLE,
    DatasetIndex,
    IndexColumns,
    IndexStore,
    Locator,
    ShardIndex,
    _aligned_npz,
    _index_file,
    _npz_arrays,
    _relative,
    _stored_members,
    build_index,
    dataset_index_location,
    index_key,
    index_keys,
)
from fastio.formats._layout import Layout, sample_bounds
from fastio.formats._records import RecordFormat, RecordWriter
from fastio.formats._shards import FORMATS, make_format
from tests.formats.test_tfrecord import write_examples
from tests.formats.test_webdataset import write_webdataset

DECODERS = {"tfrecord": decode_tfrecord, "webdataset": decode_webdataset, "jsonl": decode_jsonl}


def locator(format_name: str) -> Locator:
    format = make_format(format_name)
    assert isinstance(format, RecordFormat)
    return format.locator()


def make_shard(tmp_path, format_name: str) -> str:
    if format_name == "tfrecord":
        path = tmp_path / "s.tfrecord"
        write_examples(path, 30)
    elif format_name == "webdataset":
        path = tmp_path / "s.tar"
        write_webdataset(path, 25, tarfile.PAX_FORMAT)
    else:
        path = tmp_path / "s.jsonl"
        path.write_text(
            "".join(json.dumps({"i": i, "pad": "x" * (i * 41)}) + "\n" for i in range(40))
        )
    return str(path)


def comparable(sample):
    if isinstance(sample, dict):
        return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in sample.items()}
    return bytes(sample) if isinstance(sample, memoryview) else sample


def index_of(reader, url: str, format_name: str, folder) -> ShardIndex:
    """The index a dataset would use: the stored one, else a scan, kept in ``folder``."""
    records = make_format(format_name, index_dir=folder)
    assert isinstance(records, RecordFormat)
    stored = records.known_index(reader, url)
    return stored if stored is not None else records.scan(reader, url, False)[0]


@pytest.mark.parametrize("format_name", list(DECODERS))
def test_each_sample_reads_alone_from_its_range(tmp_path, format_name: str) -> None:
    url = make_shard(tmp_path, format_name)
    decode = DECODERS[format_name]
    with fastio.Reader(read_size=8192) as reader:
        index = index_of(reader, url, format_name, tmp_path / "index")
        everything = [comparable(s) for s in decode(reader.stream([url]), url)]
        assert len(index) == len(everything)
        assert index.ends[-1] <= os.path.getsize(url)
        for i in (0, len(index) // 2, len(index) - 1):
            span = fastio.ByteRange(url, int(index.starts[i]), int(index.ends[i] - index.starts[i]))
            alone = [comparable(s) for s in decode(reader.stream([fastio.Shard((span,))]), url)]
            if format_name == "webdataset":
                assert alone[0] == everything[i]
            else:
                assert alone == [everything[i]]


def test_index_is_kept_in_the_index_folder_never_beside_the_shard(tmp_path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    url = make_shard(data, "tfrecord")
    folder = tmp_path / "index"
    with fastio.Reader() as reader:
        first = index_of(reader, url, "tfrecord", folder)
        requests = reader.stats().requests
        again = index_of(reader, url, "tfrecord", folder)
        assert reader.stats().requests - requests <= 2  # the fingerprint's reads, no scan
    assert (again.starts == first.starts).all()
    assert os.listdir(data) == ["s.tfrecord"]  # the dataset's folder is never written to
    [stored] = list(folder.glob(f"*{INDEX_SUFFIX}"))
    assert ShardIndex.load(stored).format == "tfrecord"


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["umask 022", "umask 027"])
def test_index_files_get_the_mode_of_any_file_the_process_writes(tmp_path, umask: int) -> None:
    """Not 0600: a dataset index beside the shards is read by every rank, node
    and user that reads the shards, and by a web server that serves them."""
    data = tmp_path / "data"
    data.mkdir()
    url = make_shard(data, "webdataset")
    folder = tmp_path / "index"
    before = os.umask(umask)
    try:
        with fastio.Reader() as reader:
            index_of(reader, url, "webdataset", folder)
        with fastio.Dataset(url, format="webdataset", index_dir=str(folder)) as dataset:
            location = dataset.save_index()
    finally:
        os.umask(before)
    [kept] = list(folder.glob(f"*{INDEX_SUFFIX}"))
    for path in (Path(location), kept):
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path
    assert sorted(os.listdir(data)) == ["dataset.fastio-index.npz", "s.tar"]  # no temporary left


def test_an_index_folder_removed_while_a_dataset_runs_is_made_again(tmp_path) -> None:
    """The folder is made once per store, not for each file a first epoch
    writes: removed meanwhile (a cache cleaned under a running job), the next
    index made there makes it again."""
    folder = tmp_path / "index"
    urls = []
    for number in range(2):
        (tmp_path / str(number)).mkdir()
        urls.append(make_shard(tmp_path / str(number), "jsonl"))
    store = IndexStore(folder)
    with fastio.Reader() as reader:
        first, second = (build_index(reader, url, make_format("jsonl").locator()) for url in urls)
    store.save(first)
    assert store.holding(urls) == {urls[0]}
    shutil.rmtree(folder)
    store.save(second)
    assert store.holding(urls) == {urls[1]}
    store.save_set(urls, DatasetIndex([first, second]))
    assert set(store.load_set(urls)) == {index_key(url) for url in urls}


def test_an_index_is_written_where_its_temporary_name_is_taken(tmp_path, monkeypatch) -> None:
    """A temporary file left under the name this process would take next
    (by a process that had its pid, in another container sharing the
    folder) is neither used nor removed: the index is written anyway."""
    monkeypatch.setattr(fastio.formats._index, "_TEMPORARIES", itertools.count(7))
    path = tmp_path / "dataset.fastio-index.npz"
    taken = Path(f"{path}.{os.getpid()}-{threading.get_ident()}-7.tmp")
    taken.write_bytes(b"another process's")
    fastio.formats._index._write_atomically(path, b"the index")
    assert path.read_bytes() == b"the index"
    assert taken.read_bytes() == b"another process's"
    assert sorted(os.listdir(tmp_path)) == sorted([path.name, taken.name])


@pytest.mark.parametrize("asked", [3, 300])  # looked up one by one; the folder listed
def test_the_store_knows_which_shards_it_holds_an_index_of(tmp_path, asked: int) -> None:
    data, folder = tmp_path / "data", tmp_path / "index"
    data.mkdir()
    url = make_shard(data, "tfrecord")
    with fastio.Reader() as reader:
        index_of(reader, url, "tfrecord", folder)
    others = [f"https://example.com/shard-{i}.tfrecord" for i in range(asked - 1)]
    (folder / "unrelated.npz").write_bytes(b"")
    (folder / IndexStore.name(others[0])).write_bytes(b"")  # the name without the suffix
    assert IndexStore(folder).holding([*others, url]) == {url}
    assert IndexStore(folder).holding(others) == set()
    assert IndexStore(tmp_path / "no such folder").holding([url, *others]) == set()


def test_a_changed_shard_is_indexed_again(tmp_path) -> None:
    url = make_shard(tmp_path, "jsonl")
    with fastio.Reader() as reader:
        assert len(index_of(reader, url, "jsonl", tmp_path / "index")) == 40
        with open(url, "a") as handle:
            handle.write('{"late": true}\n')
        assert len(index_of(reader, url, "jsonl", tmp_path / "index")) == 41


def test_a_rewrite_that_keeps_size_and_mtime_is_told_apart(tmp_path) -> None:
    # cp -p and rsync -t keep the modification time; a shard rewritten with
    # other samples of the same total size must not be read with the old index.
    url = tmp_path / "s.jsonl"
    url.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(30)))  # 30 short lines
    times = os.stat(url)
    with fastio.Reader() as reader:
        assert len(index_of(reader, str(url), "jsonl", tmp_path / "index")) == 30
        size = os.path.getsize(url)
        rewritten = json.dumps({"i": "x" * (size - 13)}) + "\n" + "{}\n"  # two lines
        assert len(rewritten) == size
        url.write_text(rewritten)
        os.utime(url, ns=(times.st_atime_ns, times.st_mtime_ns))
        assert (os.path.getsize(url), os.stat(url).st_mtime_ns) == (size, times.st_mtime_ns)
        assert len(index_of(reader, str(url), "jsonl", tmp_path / "index")) == 2


def test_a_copied_dataset_keeps_its_index_by_content(tmp_path) -> None:
    """A copy with its times kept (cp -p) has a new change time: the
    fingerprint of its first and last bytes says it holds what the index
    describes."""
    (tmp_path / "a").mkdir()
    url = make_shard(tmp_path / "a", "tfrecord")
    copy = tmp_path / "b"
    copy.mkdir()
    with fastio.Reader() as reader:
        index = index_of(reader, url, "tfrecord", tmp_path / "index")
        (copy / "s.tfrecord").write_bytes(Path(url).read_bytes())
        times = os.stat(url)
        os.utime(copy / "s.tfrecord", ns=(times.st_atime_ns, times.st_mtime_ns))  # cp -p
        assert index.fresh(reader, url)
        moved = ShardIndex(str(copy / "s.tfrecord"), index.format, index.size,
                           index.version, index.starts, index.ends, index.change,
                           index.fingerprint)  # fmt: skip
        assert moved.fresh(reader, str(copy / "s.tfrecord"))
        with open(copy / "s.tfrecord", "r+b") as handle:
            handle.write(b"\0")  # its first byte: another shard
        assert not moved.fresh(reader, str(copy / "s.tfrecord"))


def test_a_damaged_index_file_is_named_or_rebuilt(tmp_path) -> None:
    url = make_shard(tmp_path, "tfrecord")
    folder = tmp_path / "index"
    with fastio.Reader() as reader:
        index_of(reader, url, "tfrecord", folder)
    [stored] = list(folder.glob(f"*{INDEX_SUFFIX}"))
    stored.write_bytes(stored.read_bytes()[:100])  # truncated
    with pytest.raises(fastio.IndexFileError) as caught:
        fastio.Dataset(url, index_dir=folder)
    assert (caught.value.path, caught.value.url) == (str(stored), url)
    assert "truncated" in str(caught.value)
    with pytest.warns(fastio.SkippedSamplesWarning, match="indexed anew"):
        dataset = fastio.Dataset(url, index_dir=folder, on_error="warn", shuffle=False)
    assert len(list(dataset)) == 30
    # The epoch left the shard's index beside it in the file of the dataset's
    # indexes, which a later open reads first: gone, the shard's own is read.
    [kept] = folder.glob("dataset-*")
    kept.unlink()
    stored.write_bytes(b"")  # empty
    with pytest.raises(fastio.IndexFileError):
        fastio.Dataset(url, index_dir=folder)


def test_damaged_shard_is_not_indexed(tmp_path) -> None:
    url = make_shard(tmp_path, "tfrecord")
    with open(url, "rb") as handle:
        data = bytearray(handle.read())
    data[200] ^= 0xFF
    with open(url, "wb") as handle:
        handle.write(data)
    with fastio.Reader() as reader, pytest.raises(fastio.CorruptRecordError):
        index_of(reader, url, "tfrecord", tmp_path / "index")
    assert not (tmp_path / "index").exists()


def test_only_record_formats_are_indexed() -> None:
    indexed = {name for name, cls in FORMATS.items() if issubclass(cls, RecordFormat)}
    assert indexed == {"webdataset", "tfrecord", "jsonl", "lines"}


def test_the_index_imports_no_format() -> None:
    """Formats hand the index their locate function: it knows none of them."""
    source = Path(fastio.formats._index.__file__).read_text()
    imported = {
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    formats = {name for name in imported if name.startswith("fastio.formats")}
    assert formats <= {"fastio.formats._compression"}


def write_records(format_name: str, file) -> RecordWriter:
    """About 60 samples of ``format_name``, of sizes from none to many blocks."""
    rng = random.Random(6)
    sizes = [rng.choice([0, 1, 500, 20_000]) for _ in range(60)]
    if format_name == "webdataset":
        with WebDatasetWriter(file) as tar:
            for index, size in enumerate(sizes):
                tar.write(f"s{index:03d}", {"bin": rng.randbytes(size), "cls": b"%d" % index})
        return tar
    if format_name == "tfrecord":
        with TFRecordWriter(file) as records:
            for index, size in enumerate(sizes):
                records.write(*example_parts({"index": index, "data": rng.randbytes(size)}))
        return records
    if format_name == "jsonl":
        with JsonLinesWriter(file) as values:
            for index, size in enumerate(sizes):
                values.write({"index": index, "text": "t" * size})
        return values
    with LinesWriter(file) as lines:
        for size in sizes:
            lines.write("l" * size)
    return lines


@pytest.mark.parametrize("codec", [None, "gzip"])
@pytest.mark.parametrize("format_name", ["webdataset", "tfrecord", "jsonl", "lines"])
def test_writers_note_the_index_a_scan_builds(tmp_path, format_name: str, codec) -> None:
    url = str(tmp_path / ("shard" + (".gz" if codec else "")))
    with open(url, "wb") as file, compressing(file, codec) as sink:
        writer = write_records(format_name, sink)
    with fastio.Reader() as reader:
        size, version = reader.describe(url)
        scanned = build_index(reader, url, locator(format_name))
        noted = writer.index(reader, url)
    assert len(noted) == len(writer) == len(scanned) == 60
    assert (noted.format, noted.size, noted.version) == (scanned.format, size, version)
    assert (noted.change, noted.fingerprint) == (scanned.change, scanned.fingerprint)
    np.testing.assert_array_equal(noted.starts, scanned.starts)
    np.testing.assert_array_equal(noted.ends, scanned.ends)


def test_shards_named_relative_to_the_working_folder_find_their_kept_indexes(
    tmp_path, monkeypatch
) -> None:
    from tests.shards import write

    written = write("jsonl", tmp_path / "work" / "data", shards=3, per_shard=10, index=False)
    monkeypatch.chdir(tmp_path / "work")
    relative = [os.path.relpath(url, tmp_path / "work") for url in written.urls]
    index_dir = tmp_path / "elsewhere"
    first = fastio.Dataset(relative, index_dir=index_dir, shuffle=False)
    assert [sample["key"] for sample in first] == [row["key"] for row in written.samples]
    assert len(list(index_dir.glob("*.fastio-index.npz"))) == 3  # kept, away from the shards
    again = fastio.Dataset(relative, index_dir=index_dir, shuffle=False)
    assert len(again) == len(written.samples)  # the kept indexes, found and valid
    assert [sample["key"] for sample in again] == [row["key"] for row in written.samples]


def _savez(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@pytest.mark.parametrize("write", [_savez, lambda **arrays: _aligned_npz(arrays)],
                         ids=["np.savez", "fastio"])  # fmt: skip
def test_index_arrays_read_as_numpy_reads_them(write: Callable[..., bytes]) -> None:
    arrays = {
        "starts": np.arange(5, dtype=np.uint64),
        "empty": np.zeros(0, np.uint64),
        "meta": np.array('{"version": 1}'),
        "wide": np.arange(6, dtype=">i4").reshape(2, 3),  # numpy's own reader
        "values": np.array([1.5, -2.0], np.float32),
        "scalar": np.array(7, np.int64),
        "flags": np.array([True, False]),
        "big": np.arange(3, dtype=">u2"),
        "times": np.array([1, 2], "datetime64[ns]"),  # a unit in its dtype: numpy's own reader
        "text": np.array(["ab", "c"]),
    }
    data = write(**arrays)
    got = _npz_arrays(data)
    with np.load(io.BytesIO(data), allow_pickle=False) as expected:
        assert sorted(got) == sorted(expected.files) == sorted(arrays)
        for name in expected.files:
            assert got[name].dtype == expected[name].dtype
            assert got[name].shape == expected[name].shape
            assert got[name].flags.aligned
            # A view of the file's bytes is read-only; a copy is the caller's own.
            shared = np.shares_memory(got[name], np.frombuffer(data, np.uint8))
            assert got[name].flags.writeable != shared or got[name].size == 0
            np.testing.assert_array_equal(got[name], expected[name])
            np.testing.assert_array_equal(got[name], arrays[name])
    with pytest.raises(UNREADABLE):
        _npz_arrays(data[: len(data) // 2])


def test_fastio_writes_index_arrays_where_they_are_read_in_place(tmp_path) -> None:
    """An index file as fastio writes it holds each array's data at a multiple
    of 64 bytes: read, its offsets are views of the file's bytes, not copies
    (np.savez's unaligned ones are copied, as the test above reads them)."""
    shards = [ShardIndex(f"/data/s{i}.tar", "webdataset", 10_000, 1, np.arange(n, dtype=np.uint64)
                         * 512, np.arange(1, n + 1, dtype=np.uint64) * 512) for i, n in
              enumerate([3, 0, 1000])]  # fmt: skip
    data = DatasetIndex(shards).to_bytes(str(tmp_path / "dataset.fastio-index.npz"))
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            with archive.open(info) as member:
                header = len(member.read()) - np.load(archive.open(info)).nbytes
            body = info.header_offset + 30 + len(info.filename) + len(info.extra) + header
            assert body % 64 == 0, info.filename
    stored = _npz_arrays(data)
    assert np.shares_memory(stored["starts"], np.frombuffer(data, np.uint8))
    read = DatasetIndex.read(data, str(tmp_path / "dataset.fastio-index.npz"))
    for before, after in zip(shards, read.shards, strict=True):
        np.testing.assert_array_equal(after.starts, before.starts)
        np.testing.assert_array_equal(after.ends, before.ends)


def _zip_module_npz(arrays: dict[str, np.ndarray]) -> bytes:
    """The aligned archive as the zip module writes it, padding field and all."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, array, allow_pickle=False)
            data = member.getvalue()
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            body = buffer.tell() + 30 + len(info.filename) + 4 + len(data) - array.nbytes
            padding = -body % 64
            info.extra = (0xD935).to_bytes(2, "little") + padding.to_bytes(2, "little")
            info.extra += bytes(padding)
            archive.writestr(info, data)
    return buffer.getvalue()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**63 - 1), max_size=40), st.text(max_size=200),
       st.booleans())  # fmt: skip
def test_index_files_are_laid_out_as_the_zip_module_lays_them_out(offsets, meta, text) -> None:
    """Index files are zip archives written without the zip module (a first
    epoch writes one a shard): byte for byte what the module writes, so any
    zip reader (np.load among them) reads them as it reads its own."""
    arrays = {"starts": np.array(sorted(offsets), np.uint64),
              "ends": np.array(offsets, np.uint64),
              "meta": np.array(meta) if text else np.array(meta.encode())}  # fmt: skip
    data = _aligned_npz(arrays)
    assert data == _zip_module_npz(arrays)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
    with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
        for name, array in arrays.items():
            np.testing.assert_array_equal(loaded[name], array)


def _npz(writer: Any, **arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    writer(buffer, **arrays)
    return buffer.getvalue()


def test_an_index_as_np_savez_writes_it_is_read_from_its_directory() -> None:
    """np.savez's archives (stored members, zip64 local headers) are read
    from the central directory, member for member what the zip module
    reads; any other archive (compressed members, a comment) is left to the
    zip module, with the same arrays."""
    arrays = {"starts": np.arange(100_000, dtype=np.uint64), "meta": np.array('{"version": 2}')}
    data = _npz(np.savez, **arrays)
    members = _stored_members(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert members == {name: archive.read(name) for name in archive.namelist()}
    compressed = _npz(np.savez_compressed, **arrays)
    commented = io.BytesIO()
    with zipfile.ZipFile(commented, "w") as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w") as out:
                np.lib.format.write_array(out, array)
        archive.comment = b"written by hand"
    for other in (compressed, commented.getvalue()):
        assert _stored_members(other) is None
        got = _npz_arrays(other)
        np.testing.assert_array_equal(got["starts"], arrays["starts"])
        assert str(got["meta"]) == str(arrays["meta"])


def test_a_damaged_member_of_an_index_is_refused() -> None:
    """A byte changed inside an array's data fails its CRC: the index is
    damaged, not read with wrong sample ranges."""
    data = bytearray(_npz(np.savez, starts=np.arange(1000, dtype=np.uint64)))
    data[len(data) // 2] ^= 0xFF  # inside the array's bytes
    with pytest.raises(zipfile.BadZipFile, match="damaged"):
        _npz_arrays(bytes(data))
    assert isinstance(zipfile.BadZipFile(), UNREADABLE)


def _check_cut(sizes: list[int], start: int, stop: int, budget: int) -> None:
    """``next_cut`` ends a run at the first sample that starts ``budget`` bytes
    or more past the run's first (at least one sample, at most ``stop``)."""
    ends = np.cumsum(sizes, dtype=np.int64)
    starts = ends - np.asarray(sizes, np.int64)
    count = len(sizes)
    layout = Layout("mem://shard", count, int(ends[-1]), sample_bounds(count), ends - starts,
                    starts, ends)  # fmt: skip
    first_past = next((i for i in range(count) if starts[i] >= starts[start] + budget), count)
    cut = min(max(first_past, start + 1), stop)
    assert layout.next_cut(start, stop, budget) == cut
    # What a plan's windows take: the cut and the run's bytes, in one call.
    assert layout.cut(start, stop, budget) == (cut, int(ends[cut - 1] - starts[start]))


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 50), min_size=1, max_size=30), cut=st.data())
def test_a_layout_cuts_runs_where_its_starts_pass_the_budget(sizes, cut) -> None:
    start = cut.draw(st.integers(0, len(sizes) - 1))
    stop = cut.draw(st.integers(start + 1, len(sizes)))
    _check_cut(sizes, start, stop, cut.draw(st.integers(1, 400)))


@pytest.mark.parametrize(("sizes", "start", "stop", "budget"), [
    ([10, 0], 0, 2, 10),  # an empty last sample exactly at the budget: the next run's
    ([10, 0, 0], 0, 3, 10),
    ([5, 5, 0], 1, 3, 5),
    ([10, 0], 0, 2, 11),  # past it: in this run
])  # fmt: skip
def test_an_empty_sample_at_the_budget_starts_the_next_run(sizes, start, stop, budget) -> None:
    _check_cut(sizes, start, stop, budget)


def test_sample_bounds_are_one_shared_read_only_range() -> None:
    for count in (0, 3, 1000, 5, 70_000):
        bounds = sample_bounds(count)
        assert bounds.dtype == np.int64
        assert np.array_equal(bounds, np.arange(count + 1))
        with pytest.raises(ValueError, match="read-only"):
            bounds[0] = 1


_SEGMENTS = st.sampled_from(["a", "b", "data", "x.tar"])


@given(st.sampled_from(["/", "/srv/", "s3://bucket/", "memory://"]),
       st.lists(st.lists(_SEGMENTS, min_size=1, max_size=4), min_size=1, max_size=6))  # fmt: skip
def test_a_dataset_index_is_looked_for_in_the_folder_that_holds_every_shard(
    root: str, paths: list[list[str]]
) -> None:
    """The folder that holds every shard, by definition: the deepest folder of
    the first shard's that each shard's folder is or is below."""
    import posixpath

    urls = [root + "/".join(parts) for parts in paths]
    keys = [url if "://" in url else os.path.abspath(url) for url in urls]
    folders = [posixpath.dirname(key) for key in keys]
    common = folders[0]
    while not all(f == common or f.startswith(common.rstrip("/") + "/") for f in folders):
        common = posixpath.dirname(common)
    expected = posixpath.join(common, DATASET_INDEX) if common else DATASET_INDEX
    assert dataset_index_location(urls) == expected


@given(st.lists(st.lists(st.sampled_from(["", "/", "//", ".", "..", "a", ".b", "x.tar", "s3:",
                                          "file:", "~"]), max_size=6).map("".join),
                max_size=8))  # fmt: skip
def test_shards_are_keyed_in_bulk_as_one_by_one(urls: list[str]) -> None:
    """A dataset's keys, taken without a call for paths absolute and normal
    already, are what each shard's own key is: relative paths, ``.`` and
    ``..`` parts, doubled and trailing slashes, ``file://`` and URLs alike."""
    urls = [url for url in urls if url]  # a shard is named by something
    assert index_keys(urls) == [index_key(url) for url in urls]


@given(st.lists(st.lists(st.sampled_from(["", "/", "//", ".", "..", "a", ".b", "\u00e9", "/\u00e9.",
                                          "\U0001f600", "x.tar", "s3:", "\u2215"]),
                         max_size=6).map("".join), max_size=8))  # fmt: skip
def test_paths_absolute_and_normal_are_told_at_once_as_one_by_one(paths: list[str]) -> None:
    """What keys many shards at once (natively) says of paths of any
    characters (one, two and four bytes each) what each says alone: it
    begins with a slash, has no "." or ".." or empty part, does not end
    with a slash. Anything not a str is not such a path."""
    from fastio._native import normal_paths

    expected = all(path[:1] == "/" and "/." not in path and "//" not in path
                   and path[-1:] != "/" for path in paths)  # fmt: skip
    assert normal_paths(paths) is expected
    assert normal_paths([*paths, b"/bytes"]) is False
    assert index_keys(paths) == ([index_key(path) for path in paths] if expected else
                                 index_keys(list(paths)))  # fmt: skip


def test_shards_no_folder_holds_all_look_for_the_dataset_index_by_its_name() -> None:
    """Local paths and URLs together share no folder: the name alone is
    looked for, as for shards named without one."""
    assert dataset_index_location(["/data/a.tar", "s3://bucket/b.tar"]) == DATASET_INDEX
    assert dataset_index_location(["s3://one/a.tar", "gs://two/b.tar"]) == DATASET_INDEX


_SHARD_INDEXES = st.lists(
    st.tuples(
        st.sampled_from(["a.tar", "sub/b.tar", "/elsewhere/c.tar", "s3://bucket/d.tar"]),
        st.sampled_from(["tar", "tfrecord", "jsonl"]),
        st.integers(0, 2**40),  # size
        st.integers(0, 2**70),  # version: an ETag of digits may pass 64 bits
        st.integers(0, 2**63 - 1),  # change stamp
        st.sampled_from(["", "0f" * 16, "\u00e9\U0001f600"]),  # (no UTF-8 of its own in fact)
        st.lists(st.integers(0, 2**20), max_size=5),
    ),
    max_size=6,
)


def _indexes(entries: list[Any]) -> list[ShardIndex]:
    indexes = []
    for url, kind, size, version, change, fingerprint, lengths in entries:
        ends = np.cumsum(np.asarray(lengths, np.uint64), dtype=np.uint64)
        starts = ends - np.asarray(lengths, np.uint64)
        full = url if "://" in url or url.startswith("/") else f"/data/{url}"
        indexes.append(ShardIndex(full, kind, size, version, starts, ends, change, fingerprint))
    return indexes


@settings(max_examples=60, deadline=None)
@given(_SHARD_INDEXES, st.sampled_from([2, 3]))
def test_a_dataset_index_reads_back_as_written_in_either_version(entries, version) -> None:
    """Version 3 (what is written) keeps each field as one list; version 2
    (what earlier releases wrote) an object per shard: both read back to the
    same shards, each named as given, samples and stamps alike."""
    location = "/data/dataset.fastio-index.npz"
    indexes = _indexes(entries)
    names = [_relative(index.url, location) for index in indexes]
    data = _index_file(indexes, names, version=version)
    stored = _npz_arrays(data)
    # Version 3's fields as UTF-8 bytes; version 2's as numpy's str, which
    # every release reads.
    assert stored["meta"].dtype.kind == ("S" if version == 3 else "U")
    written = [data]
    if version == 3:
        assert data == DatasetIndex(indexes).to_bytes(location)
        # As the first release of version 3 wrote it: the fields as str.
        buffer = io.BytesIO()
        np.savez(buffer, starts=stored["starts"], ends=stored["ends"],
                 meta=np.array(stored["meta"].item().decode()))  # fmt: skip
        written.append(buffer.getvalue())
    for each in written:
        got = DatasetIndex.read(each, location).shards
        assert len(got) == len(indexes)
        for back, index in zip(got, indexes, strict=True):
            fields = ("url", "format", "size", "version", "change", "fingerprint")
            assert [getattr(back, f) for f in fields] == [getattr(index, f) for f in fields]
            np.testing.assert_array_equal(back.starts, index.starts)
            np.testing.assert_array_equal(back.ends, index.ends)


def _json_only(data: bytes) -> bytes:
    """The index file ``data`` as an earlier release wrote it: no field arrays."""
    stored = _npz_arrays(data)
    return _aligned_npz({name: stored[name] for name in ("starts", "ends", "meta")})


# Names of any characters: text() never draws a surrogate, these lists do.
_NAMED = st.lists(st.characters(blacklist_categories=["Cc"]) | st.sampled_from("\udcff\n "),
                  min_size=1, max_size=12).map("".join)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(_SHARD_INDEXES, st.lists(st.tuples(_NAMED, st.booleans()), min_size=6, max_size=6),
       st.sampled_from(["/data/dataset.fastio-index.npz", "s3://bucket/x/dataset.fastio-index.npz",
                        "dataset.fastio-index.npz"]), st.integers(1, 4))  # fmt: skip
def test_a_dataset_index_reads_the_same_from_its_arrays_as_from_its_json(
    entries, names, location, arrays_from
) -> None:
    """An index of many shards written now holds its fields as arrays beside
    the JSON (read without parsing it); both give the same columns, for
    names of any characters (a path's undecodable bytes, newlines, relative
    and absolute names), and an index whose integers pass 64 bits holds the
    JSON alone. (How many shards are many is lowered here, to draw them.)"""
    indexes = _indexes(entries)
    folder = "/data/" if location.startswith("/") else ""
    chosen = [folder + name if absolute else name for name, absolute in names]
    with unittest.mock.patch.object(fastio.formats._index, "_ARRAYS_FROM", arrays_from):
        data = _index_file(indexes, chosen[: len(indexes)])
    stored = _npz_arrays(data)
    wide = any(index.version >= 2**63 for index in indexes)
    assert ("fields" in stored) == (len(indexes) >= arrays_from and not wide)
    from_arrays = IndexColumns.read(data, location)
    from_json = IndexColumns.read(_json_only(data), location)
    assert from_arrays.fields == from_json.fields
    assert from_arrays.formats() == from_json.formats() == {index.format for index in indexes}
    assert from_arrays.urls == from_json.urls
    assert from_arrays.bounds == from_json.bounds
    assert from_arrays.stamps() == from_json.stamps() == [index.stamp for index in indexes]


@pytest.mark.parametrize("formats", [["webdataset"] * 3, ["webdataset", "tfrecord", "webdataset"],
                                     ["tfrecord", "tfrecord", "webdataset"], ["a", "a", "ab"],
                                     ["ab", "a", "a"]])  # fmt: skip
def test_the_formats_of_an_index_read_from_its_arrays_are_told_as_listed(formats) -> None:
    """A dataset asks which formats its shards were indexed as; read from the
    index's arrays, the answer for shards all of one format comes without
    listing them, and is what the listed formats say either way."""
    from fastio.formats._index import _ArrayFields

    texts = np.frombuffer("\0".join([*formats, "f0", "f1", "f2"]).encode(), np.uint8)
    fields = _ArrayFields(np.zeros((4, 3), np.int64), "a\0b\0c", texts, 3)
    assert fields.formats() == set(formats)
    assert fields["format"] == formats
    assert fields["fingerprint"] == ["f0", "f1", "f2"]


def test_an_index_of_many_shards_holds_its_fields_as_arrays_and_one_of_few_as_json() -> None:
    """From 256 shards on an index holds its fields as arrays too (read
    without its JSON); below, three members more would cost more than the
    JSON they spare, and it holds the JSON alone."""
    location = "/data/dataset.fastio-index.npz"
    for count in (255, 256):
        indexes = _indexes([(f"s{i}.tar", "tar", 10, 1, 2, "", [3]) for i in range(count)])
        stored = _npz_arrays(DatasetIndex(indexes).to_bytes(location))
        assert ("fields" in stored) == (count == 256)
        read = DatasetIndex.read(DatasetIndex(indexes).to_bytes(location), location).shards
        assert [index.url for index in read] == [f"/data/s{i}.tar" for i in range(count)]


def test_the_json_of_an_index_read_from_its_arrays_is_passed_by(monkeypatch) -> None:
    """Where an index holds its fields as arrays its JSON is neither read
    nor checked (most of its bytes): damage there goes unnoticed by this
    release, and is refused wherever the JSON is read."""
    monkeypatch.setattr(fastio.formats._index, "_ARRAYS_FROM", 1)
    indexes = _indexes([("a.tar", "tar", 10, 1, 2, "", [3, 4]), ("b.tar", "tar", 9, 1, 2, "", [5])])
    location = "/data/dataset.fastio-index.npz"
    data = bytearray(DatasetIndex(indexes).to_bytes(location))
    at = data.index(b'{"version":3')
    data[at + 1] ^= 0xFF  # the JSON damaged: its CRC no longer matches
    damaged = bytes(data)
    assert [i.url for i in DatasetIndex.read(damaged, location).shards] == [
        "/data/a.tar",
        "/data/b.tar",
    ]
    with pytest.raises(zipfile.BadZipFile):
        _npz_arrays(damaged)
    without = damaged.replace(b"fields.npy", b"fieldz.npy")  # no field arrays: the JSON is read
    with pytest.raises(zipfile.BadZipFile):
        DatasetIndex.read(without, location)
    # Arrays of a later version, beside a JSON whose bytes are as their CRC
    # says but not JSON: the JSON is read, and refused.
    stored = _npz_arrays(bytes(DatasetIndex(indexes).to_bytes(location)))
    later = _aligned_npz({**stored, "fields": np.concatenate([[4], stored["fields"][1:]]),
                          "meta": np.array(b"{not json")})  # fmt: skip
    with pytest.raises(ValueError, match="Expecting property name"):
        DatasetIndex.read(later, location)


def test_an_index_whose_arrays_disagree_is_refused_and_one_of_another_version_is_read_by_its_json(
    monkeypatch,
) -> None:
    """Field arrays that do not hold what they say (a count that is not the
    shards', fewer names, a negative count) make a damaged index: refused,
    naming it. Arrays of a version this release does not know are passed by,
    as an earlier release passes by all of them: the JSON is read."""
    monkeypatch.setattr(fastio.formats._index, "_ARRAYS_FROM", 1)
    indexes = _indexes([("a.tar", "tar", 10, 1, 2, "", [3, 4]), ("b.tar", "tar", 9, 1, 2, "", [5])])
    location = "/data/dataset.fastio-index.npz"
    stored = _npz_arrays(DatasetIndex(indexes).to_bytes(location))
    fields = stored["fields"]
    assert fields.tolist() == [3, 2, 10, 9, 1, 1, 2, 2, 2, 1]
    damaged = [
        {"fields": np.concatenate([fields[:1], [3], fields[2:]])},  # three shards said
        {"names": stored["names"][:-1]},  # a format, no fingerprints
        {"urls": np.frombuffer(b"a.tar", np.uint8)},  # one URL
        {"fields": np.concatenate([fields[:-2], [5, -2]])},  # a count below none
        {"names": stored["names"].astype(np.uint16)},
    ]
    for change in damaged:
        with pytest.raises(ValueError, match=r"dataset\.fastio-index\.npz"):
            IndexColumns.read(_aligned_npz({**stored, **change}), location)
    later = _aligned_npz({**stored, "fields": np.concatenate([[4, 7], fields[2:]])})
    assert DatasetIndex.read(later, location).shards[1].url == "/data/b.tar"


def test_a_dataset_index_whose_fields_disagree_is_refused() -> None:
    """Counts that do not add up to the offsets held, or fields of different
    lengths, make a damaged index: refused, not read with samples shifted."""
    indexes = _indexes([("a.tar", "tar", 10, 1, 2, "", [3, 4]), ("b.tar", "tar", 9, 1, 2, "", [5])])
    location = "/data/dataset.fastio-index.npz"
    data = DatasetIndex(indexes).to_bytes(location)
    stored = _npz_arrays(data)
    meta = json.loads(stored["meta"].item())
    assert meta["version"] == 3
    assert meta["shards"]["count"] == [2, 1]
    for change in ({"count": [2, 2]}, {"size": [10]}):
        bad = {**meta, "shards": {**meta["shards"], **change}}
        buffer = io.BytesIO()
        np.savez(buffer, starts=stored["starts"], ends=stored["ends"],
                 meta=np.array(json.dumps(bad)))  # fmt: skip
        with pytest.raises(ValueError, match="index"):
            DatasetIndex.read(buffer.getvalue(), location)


def test_a_shard_s_own_index_file_stays_in_the_version_every_release_reads(tmp_path) -> None:
    """The index folder is shared by whatever fastio versions a machine has:
    a shard's own file is written in version 2, one object for the shard."""
    [index] = _indexes([("a.tar", "tar", 10, 1, 2, "ab" * 16, [3, 4])])
    path = tmp_path / ("shard" + INDEX_SUFFIX)
    index.save(path)
    meta = json.loads(str(_npz_arrays(path.read_bytes())["meta"]))
    assert meta["version"] == 2
    assert meta["shards"][0]["count"] == 2
    assert meta["shards"][0]["fingerprint"] == "ab" * 16
    back = ShardIndex.load(path)
    assert (back.url, back.size, back.change) == (index.url, 10, 2)
    np.testing.assert_array_equal(back.ends, index.ends)


def test_the_default_index_folder_follows_the_environment(monkeypatch, tmp_path) -> None:
    """Made once per environment, yet a changed XDG_CACHE_HOME or HOME moves it."""
    from fastio.formats._index import default_index_dir

    for name in ("a", "b", "a"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / name))
        assert default_index_dir() == tmp_path / name / "fastio" / "index"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_index_dir() == tmp_path / "home" / ".cache" / "fastio" / "index"
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # empty: as unset
    assert default_index_dir() == tmp_path / "home" / ".cache" / "fastio" / "index"


_NAME_CHARACTERS = "ab/\0\u00e9\u0100\U0001f600"  # of one, two and four bytes a character


@given(st.lists(st.text(_NAME_CHARACTERS, max_size=3), min_size=1, max_size=5),
       st.lists(st.text(_NAME_CHARACTERS, max_size=3), min_size=1, max_size=5),
       st.text(_NAME_CHARACTERS.replace("\0", ""), max_size=4),
       st.integers(0, 20))  # fmt: skip
def test_names_kept_joined_compare_and_list_as_the_names_they_join(
    mine, other, prefix, changed
) -> None:
    """A dataset index's shard names kept joined by NULs, each after a
    folder, are, compared with a list of names (any of them holding a NUL
    too, or differing from them in one character), indexed and iterated,
    what the list of the names with their folder is."""
    from fastio.formats._index import JoinedNames

    mine = [name.replace("\0", "") for name in mine]  # an index's names hold no NUL
    joined = JoinedNames("\0".join(mine), prefix)
    resolved = [prefix + name for name in mine]
    assert len(joined) == len(mine)
    assert (joined == other) is (resolved == other)
    assert (joined != other) is (resolved != other)
    assert (joined == tuple(other)) is (resolved == other)
    assert joined == resolved
    assert joined == JoinedNames("\0".join(resolved)) == resolved
    text = "\0".join(resolved)
    if text:  # one character of them changed (a NUL's place moved, or another put in)
        at = changed % len(text)
        for character in ("a", "\0", "\U0001f600"):
            near = (text[:at] + character + text[at + 1 :]).split("\0")
            assert (joined == near) is (near == resolved)
    assert joined != [*resolved[:-1], 3]  # a name that is no str
    assert list(joined) == resolved
    assert joined[-1] == resolved[-1]
    assert joined[:2] == resolved[:2]


@given(st.lists(st.binary(max_size=4), max_size=6), st.integers(0, 7), st.binary(max_size=3))
def test_repeated_units_and_ascii_are_told_as_python_tells_them(parts, count, tail) -> None:
    """The native checks that let a dataset index's formats and fingerprints
    go undecoded: whether bytes begin with ``count`` copies of the text
    before their first NUL (each with its NUL), and whether they are ASCII."""
    import numpy as np

    from fastio._native import ascii_only, repeated_unit

    drawn = b"\0".join(parts) + tail
    alike = b"".join([parts[0] + b"\0"] * count) + tail if parts else b""  # repeated: mostly
    for made in (drawn, alike):
        array = np.frombuffer(made, np.uint8)
        first = made.find(b"\0")
        repeats = first >= 0 and count >= 1 and made.startswith((made[:first] + b"\0") * count)
        assert repeated_unit(array, count) == (first if repeats else -1)
        assert ascii_only(array) is made.isascii()
