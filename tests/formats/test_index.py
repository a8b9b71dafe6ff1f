"""Per-shard index: byte ranges of every sample, cached and checked for staleness."""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import os
import random
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

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
from fastio.formats._index import INDEX_SUFFIX, Locator, ShardIndex, build_index, index_shard
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


@pytest.mark.parametrize("format_name", list(DECODERS))
def test_each_sample_reads_alone_from_its_range(tmp_path, format_name: str) -> None:
    url = make_shard(tmp_path, format_name)
    decode = DECODERS[format_name]
    with fastio.Reader(read_size=8192) as reader:
        index = index_shard(reader, url, locator(format_name))
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


def test_index_is_stored_beside_the_shard_and_reused(tmp_path) -> None:
    url = make_shard(tmp_path, "tfrecord")
    with fastio.Reader() as reader:
        first = index_shard(reader, url, locator("tfrecord"))
        assert os.path.exists(url + INDEX_SUFFIX)
        requests = reader.stats().requests
        again = index_shard(reader, url, locator("tfrecord"))
        assert reader.stats().requests == requests  # loaded, not rescanned
    assert (again.starts == first.starts).all()
    assert ShardIndex.load(url + INDEX_SUFFIX).format == "tfrecord"


def test_a_changed_shard_is_indexed_again(tmp_path) -> None:
    url = make_shard(tmp_path, "jsonl")
    with fastio.Reader() as reader:
        assert len(index_shard(reader, url, locator("jsonl"))) == 40
        with open(url, "a") as handle:
            handle.write('{"late": true}\n')
        assert len(index_shard(reader, url, locator("jsonl"))) == 41


@pytest.mark.parametrize("damage", ["empty", "truncated", "not an index"])
def test_a_damaged_index_file_is_named_and_rebuilt_under_skip(tmp_path, caplog, damage) -> None:
    url = make_shard(tmp_path, "jsonl")
    stored = url + INDEX_SUFFIX
    fastio.Dataset(url)  # indexed, and the index kept beside the shard
    contents = {"empty": b"", "truncated": Path(stored).read_bytes()[:300],
                "not an index": b"\x93NUMPY not an index at all"}[damage]  # fmt: skip
    with open(stored, "wb") as out:
        out.write(contents)
    with pytest.raises(fastio.IndexFileError) as caught:
        fastio.Dataset(url)
    error = caught.value
    assert isinstance(error, OSError)
    assert (error.url, error.filename) == (url, stored)
    assert url in str(error)
    # skip (and warn) rebuild it, say so in the log, and lose no sample.
    with caplog.at_level(logging.WARNING, logger="fastio"):
        dataset = fastio.Dataset(url, on_error="skip", shuffle=False)
    assert [sample["i"] for sample in dataset] == list(range(40))
    assert dataset.stats()["skipped"] == 0
    assert any(url in r.getMessage() and "built anew" in r.getMessage() for r in caplog.records)
    assert len(ShardIndex.load(stored)) == 40  # the rebuilt index replaced the damaged one
    assert fastio.Dataset(url).total == 40


@contextlib.contextmanager
def read_only_folder(folder):
    """A folder nobody can add files to: chmod for ordinary users; root ignores
    modes, so as root the folder is made immutable (ext4's chattr +i)."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(folder)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
    else:
        os.chmod(folder, 0o555)
        try:
            yield
        finally:
            os.chmod(folder, 0o755)


def test_index_goes_to_the_cache_folder_when_the_shard_folder_is_read_only(tmp_path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    url = make_shard(data, "tfrecord")
    cache = tmp_path / "cache"
    with fastio.Reader() as reader, read_only_folder(data):
        index = index_shard(reader, url, locator("tfrecord"), cache_dir=cache)
        again = index_shard(reader, url, locator("tfrecord"), cache_dir=cache)  # found in the cache
    assert not os.path.exists(url + INDEX_SUFFIX)
    [stored] = list(cache.glob(f"*{INDEX_SUFFIX}"))
    assert len(ShardIndex.load(stored)) == len(index) == len(again) == 30


def test_damaged_shard_is_not_indexed(tmp_path) -> None:
    url = make_shard(tmp_path, "tfrecord")
    with open(url, "rb") as handle:
        data = bytearray(handle.read())
    data[200] ^= 0xFF
    with open(url, "wb") as handle:
        handle.write(data)
    with fastio.Reader() as reader, pytest.raises(fastio.CorruptRecordError):
        index_shard(reader, url, locator("tfrecord"))
    assert not os.path.exists(url + INDEX_SUFFIX)


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
    noted = writer.index(url, size, version)
    assert len(noted) == len(writer) == len(scanned) == 60
    assert (noted.format, noted.size, noted.mtime_ns) == (scanned.format, size, version)
    np.testing.assert_array_equal(noted.starts, scanned.starts)
    np.testing.assert_array_equal(noted.ends, scanned.ends)
