"""Columnar decoders against the per-sample decoders, on shards written by the peers' writers.

Small read sizes and odd byte ranges make samples straddle chunks, so the carry
path is exercised as much as the zero-copy one; every batch is checked with
Arrow's full validation.
"""

from __future__ import annotations

import io
import itertools
import random
import tarfile
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tfrecord.writer import TFRecordWriter

import fastio
from fastio._native import RecordColumns, TarColumns, TarMember, scan_tar
from fastio.formats import (
    _columnar,
    columns_lines,
    columns_tfrecord,
    columns_webdataset,
    decode_lines,
    decode_tfrecord,
    decode_webdataset,
    parse_example,
)
from fastio.formats._webdataset import locate_webdataset

READ_SIZES = [4096, 65_536, 1 << 20]
TAR_FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}


def stream(path: str, read_size: int, ranges: list[fastio.ByteRange] | None = None):
    shard = fastio.Shard(tuple(ranges)) if ranges else path
    with fastio.Reader(read_size=read_size, outstanding_requests=4) as reader:
        yield from reader.stream([shard])


def chunk_of(data: bytes, offset: int = 0) -> fastio.Chunk:
    return fastio.Chunk(0, 0, "<memory>", offset, memoryview(data), True, True)


def chunked(data: bytes, cuts: list[int]) -> list[fastio.Chunk]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [chunk_of(data[a:b], a) for a, b in itertools.pairwise(points)]


def rows(batches) -> list[dict]:
    """The samples of record batches as dicts, without the nulls of missing extensions."""
    found = []
    for batch in batches:
        assert isinstance(batch, pa.RecordBatch)
        batch.validate(full=True)
        assert batch.num_rows > 0
        found += [{k: v for k, v in row.items() if v is not None} for row in batch.to_pylist()]
    return found


def plain(samples) -> list[dict]:
    return [
        {k: bytes(v) if isinstance(v, memoryview) else v for k, v in sample.items()}
        for sample in samples
    ]


def column(batches, name: str) -> list[bytes]:
    values = []
    for batch in batches:
        batch.validate(full=True)
        assert batch.schema.names == [name]
        assert batch.schema.field(name).type == pa.binary()
        values += batch.column(name).to_pylist()
    return values


# ---- WebDataset tar -------------------------------------------------------------------


def write_tar(path, samples: int, tar_format: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    with tarfile.open(path, "w", format=tar_format) as archive:
        directory = tarfile.TarInfo("nested")
        directory.type = tarfile.DIRTYPE
        archive.addfile(directory)
        for index in range(samples):
            key = f"{'nested/' * (index % 3)}sample{index:06d}"
            if index % 5 == 0:  # > 100 bytes: a GNU long name, a pax path, a ustar prefix
                key = f"{'long-directory-name/' * 6}{index:06d}"
                if tar_format != tarfile.USTAR_FORMAT:
                    key = f"{'long-directory-name/' * 8}ünï-{index:06d}"
            members = {
                "jpg": rng.randbytes(rng.choice([0, 700, 5000, 20_000])),
                "cls": str(index % 10).encode(),
                "meta.json": b'{"i": %d}' % index,
            }
            if index % 4 == 1:
                del members["cls"]  # a missing extension: null in its column
            if index % 7 == 3:
                members["extra.txt"] = b"x" * index
            for extension, payload in members.items():
                info = tarfile.TarInfo(f"{key}.{extension}")
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
            if index % 6 == 2:  # skipped, as webdataset skips them: no extension, a dot file
                for name in (f"{key}-README", f"nested/.hidden{index}"):
                    info = tarfile.TarInfo(name)
                    info.size = 3
                    archive.addfile(info, io.BytesIO(b"abc"))


@pytest.fixture(scope="module", params=list(TAR_FORMATS))
def tar_shard(request, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tar") / f"shard-{request.param}.tar"
    write_tar(path, 60, TAR_FORMATS[request.param])
    return str(path)


@pytest.mark.parametrize("read_size", READ_SIZES)
def test_webdataset_columns_equal_the_samples(tar_shard: str, read_size: int) -> None:
    expected = plain(decode_webdataset(stream(tar_shard, 1 << 20), tar_shard))
    assert len(expected) == 60
    batches = list(columns_webdataset(stream(tar_shard, read_size), tar_shard))
    assert rows(batches) == expected
    if read_size == 4096:
        assert len(batches) > 10  # many chunks, many batches
    schema = batches[0].schema
    assert schema.field("__key__").type == pa.string()
    assert schema.field("__url__").type == pa.dictionary(pa.int32(), pa.string())
    # Columns only grow over a shard (an extension first seen adds one), in name order.
    for before, after in itertools.pairwise(batches):
        assert set(before.schema.names) <= set(after.schema.names)
    schema = batches[-1].schema
    assert {name for name in schema.names if not name.startswith("__")} <= {
        "cls",
        "jpg",
        "meta.json",
        "extra.txt",
    }
    data_columns = schema.names[2:]
    assert data_columns == sorted(data_columns)
    assert all(schema.field(name).type == pa.binary() for name in data_columns)


def test_webdataset_columns_of_odd_byte_ranges(tar_shard: str) -> None:
    located = list(locate_webdataset(stream(tar_shard, 1 << 20), tar_shard))
    rng = random.Random(3)
    for _ in range(6):
        first = rng.randrange(len(located))
        last = rng.randrange(first, len(located))
        start, end = located[first][0], located[last][1]
        ranges = [fastio.ByteRange(tar_shard, start, end - start)]
        expected = plain(decode_webdataset(stream(tar_shard, 4096, ranges), tar_shard))
        assert len(expected) == last - first + 1
        for read_size in (4096, 8192 * 3):
            got = rows(columns_webdataset(stream(tar_shard, read_size, ranges), tar_shard))
            assert got == expected


def test_webdataset_columns_of_webdataset_tarwriter(tmp_path) -> None:
    import webdataset

    path = str(tmp_path / "written-by-webdataset.tar")
    rng = random.Random(7)
    written = []
    with webdataset.TarWriter(path) as writer:
        for index in range(200):
            sample = {
                "__key__": f"{index:05d}",
                "png": rng.randbytes(rng.randrange(0, 3000)),
                "cls": str(index % 3).encode(),
            }
            writer.write(sample)
            written.append(sample)
    for read_size in (4096, 65_536):
        got = rows(columns_webdataset(stream(path, read_size), path))
        assert got == [{**sample, "__url__": path} for sample in written]
        assert got == plain(decode_webdataset(stream(path, read_size), path))
    # webdataset's own tar reader finds the same samples.
    from webdataset.tariterators import group_by_keys, tar_file_expander

    with open(path, "rb") as handle:
        own = [
            {k: v for k, v in sample.items() if not k.startswith("__")}
            for sample in group_by_keys(tar_file_expander([{"url": path, "stream": handle}]))
        ]
    assert own == [{k: v for k, v in r.items() if not k.startswith("__")} for r in got]


@given(
    cuts=st.lists(st.integers(0, 200_000), max_size=30),
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=12),
    tar_format=st.sampled_from(list(TAR_FORMATS.values())),
)
@settings(max_examples=80, deadline=None)
def test_webdataset_columns_are_indifferent_to_chunk_boundaries(cuts, sizes, tar_format) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format) as archive:
        for index, size in enumerate(sizes):
            directory = "x" * 120  # a ustar prefix, a GNU long name or a pax path
            for extension in ("bin", "cls")[: 1 + index % 2]:
                info = tarfile.TarInfo(f"{directory}/s{index:03d}.{extension}")
                payload = bytes([index]) * size
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
    data = buffer.getvalue()
    cuts = [c % (len(data) + 1) for c in cuts]
    expected = plain(decode_webdataset([chunk_of(data)], "u"))
    assert rows(columns_webdataset(chunked(data, cuts), "u")) == expected
    # Byte by byte, once in a while: every boundary at once.
    if len(cuts) == 1:
        assert rows(columns_webdataset(chunked(data, list(range(len(data)))), "u")) == expected


def test_webdataset_end_marker_cut_by_a_chunk_boundary(tmp_path) -> None:
    path = tmp_path / "end.tar"
    write_tar(path, 5, tarfile.GNU_FORMAT)
    data = path.read_bytes()
    scan = scan_tar(data)
    marker = scan.consumed
    assert scan.at_end
    expected = plain(decode_webdataset([chunk_of(data)], "u"))
    for cut in (marker - 512, marker, marker + 1, marker + 511, marker + 513):
        assert rows(columns_webdataset(chunked(data, [cut]), "u")) == expected
    # No sample open where the marker is cut (only members webdataset skips before it).
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        info = tarfile.TarInfo("README")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    skipped = buffer.getvalue()
    for cut in range(0, len(skipped), 100):
        assert list(columns_webdataset(chunked(skipped, [cut]), "u")) == []
    # A range that ends with the last sample (no end marker) completes it at the end.
    assert rows(columns_webdataset(chunked(data[:marker], [marker - 700]), "u")) == expected


def damaged_tar(tmp_path) -> tuple[str, bytearray, list[TarMember]]:
    path = tmp_path / "bad.tar"
    write_tar(path, 12, tarfile.GNU_FORMAT)
    data = bytearray(path.read_bytes())
    return str(path), data, scan_tar(bytes(data)).members


def decode_until_error(decoder, chunks, url):
    found: list = []
    with pytest.raises(fastio.DecodeError) as caught:
        found.extend(decoder(chunks, url))  # what came before the error stays
    return found, caught.value


@pytest.mark.parametrize("read_size", [4096, 1 << 20])
@pytest.mark.parametrize("member", [3, 8, 20])
def test_webdataset_damaged_header(tmp_path, read_size: int, member: int) -> None:
    path, data, members = damaged_tar(tmp_path)
    header = members[member].header_offset
    data[header + 3] ^= 0x40
    with open(path, "wb") as handle:
        handle.write(data)
    samples, expected = decode_until_error(decode_webdataset, stream(path, read_size), path)
    batches, error = decode_until_error(columns_webdataset, stream(path, read_size), path)
    assert type(error) is type(expected) is fastio.CorruptRecordError
    assert (error.url, error.offset, error.record) == (expected.url, expected.offset, member)
    assert str(error) == str(expected)
    assert rows(batches) == plain(samples)  # the samples before it


@pytest.mark.parametrize("read_size", [4096, 1 << 20])
def test_webdataset_truncated_shard(tmp_path, read_size: int) -> None:
    path, data, members = damaged_tar(tmp_path)
    last = members[-1]
    with open(path, "wb") as handle:
        handle.write(data[: last.data_offset + 10])  # inside the last member's data
    samples, expected = decode_until_error(decode_webdataset, stream(path, read_size), path)
    batches, error = decode_until_error(columns_webdataset, stream(path, read_size), path)
    assert type(error) is type(expected) is fastio.TruncatedShardError
    assert (error.url, error.offset) == (expected.url, last.header_offset)
    assert str(error) == str(expected)
    assert rows(batches) == plain(samples)


def test_webdataset_truncated_in_the_next_samples_first_member(tmp_path) -> None:
    path, data, members = damaged_tar(tmp_path)
    first_of_last_sample = next(m for m in members if m.name.endswith("000011.jpg"))
    with open(path, "wb") as handle:
        handle.write(data[: first_of_last_sample.data_offset + 10])
    samples, expected = decode_until_error(decode_webdataset, stream(path, 4096), path)
    batches, error = decode_until_error(columns_webdataset, stream(path, 4096), path)
    assert (type(error), error.offset) == (type(expected), expected.offset)
    # The documented difference: the sample before is complete once the next
    # member's header shows another key, so it comes before the error.
    assert rows(batches)[: len(samples)] == plain(samples)
    assert len(rows(batches)) in (len(samples), len(samples) + 1)


def test_webdataset_repeated_extension(tmp_path) -> None:
    path = str(tmp_path / "twice.tar")
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for name in ("a.jpg", "b.jpg", "b.cls", "b.jpg"):
            info = tarfile.TarInfo(name)
            info.size = 1
            archive.addfile(info, io.BytesIO(b"z"))
    samples, expected = decode_until_error(decode_webdataset, stream(path, 4096), path)
    batches, error = decode_until_error(columns_webdataset, stream(path, 4096), path)
    assert type(error) is type(expected) is fastio.DecodeError
    assert (error.offset, str(error)) == (expected.offset, str(expected))
    assert rows(batches) == plain(samples)


def test_webdataset_keys_must_be_utf8(tmp_path) -> None:
    path = str(tmp_path / "latin1.tar")
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as archive:
        for name in ("ok.jpg", "caf\xe9.jpg"):
            info = tarfile.TarInfo(name)
            info.size = 1
            archive.addfile(info, io.BytesIO(b"z"))
    assert len(list(decode_webdataset(stream(path, 4096), path))) == 2  # surrogate-escaped
    batches, error = decode_until_error(columns_webdataset, stream(path, 4096), path)
    assert "UTF-8" in str(error)
    assert [r["__key__"] for r in rows(batches)] == ["ok"]


def test_tar_checksums_summed_as_signed_chars_are_accepted() -> None:
    """Old writers summed the header as signed chars; GNU tar accepts both sums."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        info = tarfile.TarInfo("caf\u00e9-\u00fc.bin")  # bytes >= 0x80 in the name
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    data = bytearray(buffer.getvalue())
    header = data[:512]
    header[148:156] = b" " * 8
    signed = sum(byte - 256 if byte >= 0x80 else byte for byte in header)
    assert signed != sum(header)
    data[148:156] = b"%06o\0 " % signed
    assert scan_tar(bytes(data)).error is None
    assert [r["bin"] for r in rows(columns_webdataset([chunk_of(bytes(data))], "u"))] == [b"abc"]
    data[148:156] = b"%06o\0 " % (signed + 1)
    error = scan_tar(bytes(data)).error
    assert error is not None
    assert (error.kind, error.offset) == ("header_checksum", 0)


def test_webdataset_many_extensions_start_columns_afresh(monkeypatch) -> None:
    monkeypatch.setattr(_columnar, "_MAX_STABLE_COLUMNS", 4)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for index in range(40):
            for extension in (f"e{index}", "cls"):
                info = tarfile.TarInfo(f"s{index:03d}.{extension}")
                info.size = 2
                archive.addfile(info, io.BytesIO(b"%02d" % index))
    data = buffer.getvalue()
    chunks = chunked(data, list(range(0, len(data), 4096)))
    batches = list(columns_webdataset(chunks, "u"))
    assert rows(batches) == plain(decode_webdataset(chunks, "u"))
    assert max(len(batch.schema) for batch in batches) <= 2 + 4 + 4  # reset once past 4


def test_webdataset_full_batches_split(monkeypatch, tar_shard: str) -> None:
    expected = plain(decode_webdataset(stream(tar_shard, 1 << 20), tar_shard))
    monkeypatch.setattr(_columnar, "_MAX_BATCH_BYTES", 30_000)
    batches = list(columns_webdataset(stream(tar_shard, 1 << 20), tar_shard))
    assert rows(batches) == expected
    assert len(batches) > 5
    for batch in batches:
        for name in batch.schema.names[2:]:
            assert sum(len(value or b"") for value in batch.column(name).to_pylist()) <= 30_000
    monkeypatch.setattr(_columnar, "_MAX_BATCH_BYTES", 10_000)  # a 20 kB jpg does not fit
    batches, error = decode_until_error(columns_webdataset, stream(tar_shard, 4096), tar_shard)
    assert "does not fit" in str(error)


def test_batches_outlive_the_reader(tar_shard: str) -> None:
    expected = plain(decode_webdataset(stream(tar_shard, 1 << 20), tar_shard))
    with fastio.Reader(read_size=4096, outstanding_requests=2) as reader:
        batches = list(columns_webdataset(reader.stream([tar_shard]), tar_shard))
    assert rows(batches) == expected  # copies: the reader's buffers are gone


def test_native_batch_is_handed_over_once() -> None:
    collector = RecordColumns("line")
    assert collector.take() is None
    found = collector.lines(b"a\nbb\n")
    assert (found.rows, found.records, found.consumed, found.full) == (2, 2, 5, False)
    batch = collector.take()
    assert batch is not None
    assert batch.num_rows == 2
    assert pa.record_batch(batch).column(0).to_pylist() == [b"a", b"bb"]
    with pytest.raises(ValueError, match="handed over"):
        pa.record_batch(batch)
    unused = RecordColumns()
    unused.tfrecord(b"")
    tar = TarColumns()
    assert tar.scan(b"\0" * 1024).at_end
    assert tar.take("u") is None


# ---- TFRecord -------------------------------------------------------------------------


def write_tfrecords(path, count: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    writer = TFRecordWriter(str(path))
    for index in range(count):
        writer.write({
            "image": (rng.randbytes(rng.choice([0, 10, 3000, 50_000])), "byte"),
            "label": ([rng.randrange(-(2**40), 2**40) for _ in range(3)], "int"),
            "index": (index, "int"),
        })  # fmt: skip
    writer.close()


@pytest.fixture(scope="module")
def tfrecord_shard(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tfrecord") / "train.tfrecord"
    write_tfrecords(path, 80)
    return str(path)


@pytest.mark.parametrize("read_size", READ_SIZES)
def test_tfrecord_columns_equal_the_records(tfrecord_shard: str, read_size: int) -> None:
    expected = [bytes(r) for r in decode_tfrecord(stream(tfrecord_shard, 1 << 20), tfrecord_shard)]
    assert len(expected) == 80
    batches = list(columns_tfrecord(stream(tfrecord_shard, read_size), tfrecord_shard))
    assert column(batches, "record") == expected
    unverified = columns_tfrecord(stream(tfrecord_shard, read_size), tfrecord_shard, False)
    assert column(unverified, "record") == expected


def test_tfrecord_columns_of_odd_byte_ranges(tfrecord_shard: str) -> None:
    from fastio.formats._tfrecord import locate_tfrecords

    located = list(locate_tfrecords(stream(tfrecord_shard, 1 << 20), tfrecord_shard))
    for first, last in ((0, 0), (3, 40), (41, 79), (10, 11)):
        start, end = located[first][0], located[last][1]
        ranges = [fastio.ByteRange(tfrecord_shard, start, end - start)]
        got = column(
            columns_tfrecord(stream(tfrecord_shard, 4096, ranges), tfrecord_shard), "record"
        )
        assert got == [bytes(r[2]) for r in located[first : last + 1]]


@given(cuts=st.lists(st.integers(0, 1_000_000), max_size=30))
@settings(max_examples=40, deadline=None)
def test_tfrecord_columns_are_indifferent_to_chunk_boundaries(tfrecord_shard: str, cuts) -> None:
    with open(tfrecord_shard, "rb") as handle:
        data = handle.read()
    cuts = [c % (len(data) + 1) for c in cuts]
    expected = [bytes(r) for r in decode_tfrecord([chunk_of(data)], "u")]
    assert column(columns_tfrecord(chunked(data, cuts), "u"), "record") == expected


@pytest.mark.parametrize("what", ["data", "length"])
def test_tfrecord_damaged_record(tmp_path, tfrecord_shard: str, what: str) -> None:
    with open(tfrecord_shard, "rb") as handle:
        data = bytearray(handle.read())
    from fastio.formats._tfrecord import locate_tfrecords

    located = list(locate_tfrecords([chunk_of(bytes(data))], "u"))
    start = located[30][0]
    data[start + (14 if what == "data" else 1)] ^= 0xFF
    path = str(tmp_path / "bad.tfrecord")
    with open(path, "wb") as handle:
        handle.write(data)
    for read_size in (4096, 1 << 20):
        records, expected = decode_until_error(decode_tfrecord, stream(path, read_size), path)
        batches, error = decode_until_error(columns_tfrecord, stream(path, read_size), path)
        assert type(error) is type(expected) is fastio.CorruptRecordError
        assert (error.offset, error.record, str(error)) == (start, 30, str(expected))
        assert column(batches, "record") == [bytes(r) for r in records]


def test_tfrecord_truncated(tmp_path, tfrecord_shard: str) -> None:
    with open(tfrecord_shard, "rb") as handle:
        data = handle.read()
    path = str(tmp_path / "cut.tfrecord")
    for cut in (len(data) - 100, len(data) - 3, 5):
        with open(path, "wb") as handle:
            handle.write(data[:cut])
        records, expected = decode_until_error(decode_tfrecord, stream(path, 4096), path)
        batches, error = decode_until_error(columns_tfrecord, stream(path, 4096), path)
        assert type(error) is type(expected) is fastio.TruncatedShardError
        assert (error.offset, str(error)) == (expected.offset, str(expected))
        assert column(batches, "record") == [bytes(r) for r in records]


def test_tfrecord_full_batches_split(monkeypatch, tfrecord_shard: str) -> None:
    expected = [bytes(r) for r in decode_tfrecord(stream(tfrecord_shard, 1 << 20), tfrecord_shard)]
    monkeypatch.setattr(_columnar, "_MAX_BATCH_BYTES", 60_000)
    batches = list(columns_tfrecord(stream(tfrecord_shard, 1 << 20), tfrecord_shard))
    assert column(batches, "record") == expected
    assert all(batch.nbytes < 60_000 + 8 * batch.num_rows + 64 for batch in batches)
    monkeypatch.setattr(_columnar, "_MAX_BATCH_BYTES", 1000)
    _, error = decode_until_error(columns_tfrecord, stream(tfrecord_shard, 4096), tfrecord_shard)
    assert "does not fit" in str(error)


# ---- lines ------------------------------------------------------------------------------


@pytest.mark.parametrize("ending", [b"", b"\n", b"\n\n"])
@pytest.mark.parametrize("read_size", [4096, 65_536])
def test_lines_columns_equal_the_lines(tmp_path, read_size: int, ending: bytes) -> None:
    rng = random.Random(11)
    text = b"\n".join(b"%d %s" % (i, b"y" * rng.choice([0, 1, 80, 9000])) for i in range(400))
    path = tmp_path / "lines.txt"
    path.write_bytes(text + ending)
    expected = [bytes(line) for line in decode_lines(stream(str(path), read_size), str(path))]
    got = column(columns_lines(stream(str(path), read_size), str(path)), "line")
    assert got == expected
    assert got[:3] == text.split(b"\n")[:3]


@given(
    text=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=50),
    cuts=st.lists(st.integers(0, 3000), max_size=20),
    ending=st.sampled_from([b"", b"\n"]),
)
@settings(max_examples=150, deadline=None)
def test_lines_columns_are_indifferent_to_chunk_boundaries(text, cuts, ending) -> None:
    data = b"\n".join(text) + ending
    expected = [bytes(line) for line in decode_lines([chunk_of(data)], "u")]
    assert column(columns_lines(chunked(data, cuts), "u"), "line") == expected


def test_lines_full_batches_split(monkeypatch) -> None:
    data = b"".join(b"%05d\n" % i for i in range(5000))
    monkeypatch.setattr(_columnar, "_MAX_BATCH_BYTES", 1000)
    batches = list(columns_lines(chunked(data, [7, 20_000]), "u"))
    assert column(batches, "line") == data.split(b"\n")[:-1]
    assert len(batches) >= 25
    _, error = decode_until_error(columns_lines, chunked(b"x" * 3000 + b"\nshort\n", [5]), "u")
    assert "does not fit" in str(error)


# ---- tf.train.Example ------------------------------------------------------------------
# The native parser against the pure-Python one it replaced, against records the
# tfrecord package writes and reads (with protobuf), and against hand-made wire
# bytes (unpacked values, repeated names, unknown fields).


def _varint(data: memoryview, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 64 bits")


def _fields(data: memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message; length-delimited
    values are views."""
    position, end = 0, len(data)
    while position < end:
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, position = _varint(data, position)
        elif wire == 2:
            length, position = _varint(data, position)
            if position + length > end:
                raise ValueError("field runs past the end of its message")
            value, position = data[position : position + length], position + length
        elif wire == 5:
            value, position = data[position : position + 4], position + 4
        elif wire == 1:
            value, position = data[position : position + 8], position + 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _feature(data: memoryview) -> np.ndarray | list[bytes]:
    for kind, _, payload in _fields(data):  # oneof: bytes_list=1, float_list=2, int64_list=3
        if kind == 1:
            return [bytes(value) for number, _, value in _fields(payload) if number == 1]
        if kind == 2:
            # Packed (one length-delimited run) or not (one fixed32 each): either
            # way the bytes are little-endian float32 values.
            parts = [
                np.frombuffer(value, "<f4") for number, _, value in _fields(payload) if number == 1
            ]
            return np.concatenate(parts) if parts else np.empty(0, np.float32)
        if kind == 3:
            values: list[int] = []
            for number, wire, value in _fields(payload):
                if number != 1:
                    continue
                if wire == 0:
                    values.append(value)
                else:  # packed
                    position = 0
                    while position < len(value):
                        item, position = _varint(value, position)
                        values.append(item)
            return np.array(values, dtype=np.uint64).astype(np.int64)
    return []


def reference_parse_example(record: bytes | memoryview) -> dict[str, np.ndarray | list[bytes]]:
    """The pure-Python parser that the native one replaced (fastio 0.1.0)."""
    data = memoryview(record).cast("B")
    result: dict[str, np.ndarray | list[bytes]] = {}
    try:
        for number, _, features in _fields(data):
            if number != 1:
                continue
            for entry_number, _, entry in _fields(features):
                if entry_number != 1:
                    continue
                name, feature = "", memoryview(b"")
                for part, _, value in _fields(entry):
                    if part == 1:
                        name = bytes(value).decode()
                    elif part == 2:
                        feature = value
                result[name] = _feature(feature)
    except (ValueError, IndexError, UnicodeDecodeError) as error:
        raise fastio.DecodeError(f"not a tf.train.Example: {error}", "<record>", 0) from None
    return result


def same_example(got: dict, expected: dict) -> bool:
    if list(got) != list(expected):
        return False
    for name, value in expected.items():
        if isinstance(value, list):
            if got[name] != value:
                return False
        elif not (
            isinstance(got[name], np.ndarray)
            and got[name].dtype == value.dtype
            and got[name].shape == value.shape
            and got[name].tobytes() == value.tobytes()  # bit for bit: NaNs and -0.0 too
        ):
            return False
    return True


def test_parse_example_reads_what_the_tfrecord_package_writes(tmp_path) -> None:
    from tfrecord.reader import tfrecord_loader

    path = str(tmp_path / "examples.tfrecord")
    rng = random.Random(5)
    writer = TFRecordWriter(path)
    written = []
    for index in range(300):
        example = {
            "image": (rng.randbytes(rng.choice([0, 1, 500])), "byte"),
            "label": ([rng.randrange(-(2**63), 2**63) for _ in range(rng.randrange(0, 5))], "int"),
            "weights": ([rng.uniform(-1e6, 1e6) for _ in range(rng.randrange(0, 6))], "float"),
            "index": (index, "int"),
        }
        writer.write(example)
        written.append(example)
    writer.close()
    description = {"image": "byte", "label": "int", "weights": "float", "index": "int"}
    loaded = list(tfrecord_loader(path, None, description))  # protobuf's own parser
    records = [bytes(r) for r in decode_tfrecord(stream(path, 4096), path)]
    assert len(records) == len(loaded) == 300
    for record, theirs, example in zip(records, loaded, written, strict=True):
        ours = parse_example(record)
        assert same_example(ours, reference_parse_example(record))
        assert ours["image"] == [example["image"][0]]
        assert ours["label"].dtype == np.int64
        assert ours["label"].tolist() == example["label"][0] == theirs["label"].tolist()
        assert ours["weights"].dtype == np.float32
        np.testing.assert_array_equal(ours["weights"], theirs["weights"])
        assert ours["index"].tolist() == [example["index"][0]]
        assert ours["label"].flags.writeable


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def wire_field(number: int, wire: int, payload: bytes | int) -> bytes:
    key = varint(number << 3 | wire)
    if wire == 0:
        assert isinstance(payload, int)
        return key + varint(payload)
    assert isinstance(payload, bytes)
    return key + (varint(len(payload)) + payload if wire == 2 else payload)


def encode_values(kind: str, values: list, packed: bool) -> bytes:
    if kind == "bytes":
        return b"".join(wire_field(1, 2, value) for value in values)
    if kind == "float":
        raw = [np.float32(value).tobytes() for value in values]
        return (
            wire_field(1, 2, b"".join(raw))
            if packed
            else b"".join(wire_field(1, 5, item) for item in raw)
        )
    if packed:
        return wire_field(1, 2, b"".join(varint(value) for value in values))
    return b"".join(wire_field(1, 0, value) for value in values)


KINDS = {"bytes": 1, "float": 2, "int64": 3}
UNKNOWN = st.sampled_from(
    [
        wire_field(9, 0, 300),
        wire_field(15, 5, b"abcd"),
        wire_field(4, 1, b"12345678"),
        wire_field(7, 2, b"skip me"),
    ]
)
values_of = {
    "bytes": st.lists(st.binary(max_size=20), max_size=4),
    "float": st.lists(st.floats(width=32), max_size=5),
    "int64": st.lists(st.integers(-(2**63), 2**64 - 1), max_size=5),
    "none": st.just([]),
}


@st.composite
def examples(draw) -> bytes:
    entries = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(list(values_of)))
        name = draw(st.sampled_from(["a", "label", "名前", ""]) | st.text(max_size=8))
        feature = b""
        if kind != "none":
            values = encode_values(kind, draw(values_of[kind]), draw(st.booleans()))
            if draw(st.booleans()):
                values += draw(UNKNOWN)  # unknown fields inside a value list
            feature = wire_field(KINDS[kind], 2, values)
        if draw(st.booleans()):
            feature = draw(UNKNOWN) + feature  # an unknown Feature field first
        entry = wire_field(1, 2, name.encode()) + wire_field(2, 2, feature)
        if draw(st.booleans()):
            entry = wire_field(2, 2, feature) + wire_field(1, 2, name.encode())  # value first
        entries.append(wire_field(1, 2, entry))
    features = b"".join(entries)
    if draw(st.booleans()):  # a Features message given in two parts merges
        cut = draw(st.integers(0, len(entries)))
        return wire_field(1, 2, b"".join(entries[:cut])) + wire_field(1, 2, b"".join(entries[cut:]))
    return (
        draw(UNKNOWN) + wire_field(1, 2, features)
        if draw(st.booleans())
        else wire_field(1, 2, features)
    )


@given(record=examples())
@settings(max_examples=400, deadline=None)
def test_parse_example_matches_the_python_reference(record: bytes) -> None:
    assert same_example(parse_example(record), reference_parse_example(record))
    assert same_example(parse_example(memoryview(record)), reference_parse_example(record))


@given(record=examples(), data=st.data())
@settings(max_examples=400, deadline=None)
def test_parse_example_damaged_records(record: bytes, data) -> None:
    """Native is the stricter: what it parses, the reference parses alike; what the
    reference rejects, it rejects (both with DecodeError)."""
    damaged = bytearray(record)
    for _ in range(data.draw(st.integers(1, 3))):
        if damaged and data.draw(st.booleans()):
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
        else:
            damaged = damaged[: data.draw(st.integers(0, len(damaged)))]
    damaged = bytes(damaged)
    try:
        expected = reference_parse_example(damaged)
    except fastio.DecodeError:
        with pytest.raises(fastio.DecodeError):
            parse_example(damaged)
        return
    except (TypeError, OverflowError):
        # The reference's own failures: a value of the wrong wire type, an int64
        # past 64 bits (protobuf, and the native parser, keep its low 64 bits).
        expected = None
    try:
        got = parse_example(damaged)
    except fastio.DecodeError as error:
        rejected = error
    else:
        assert expected is None or same_example(got, expected)
        return
    assert (rejected.url, rejected.offset) == ("<record>", 0)


def test_parse_example_rejects_wrong_wire_types_and_garbage() -> None:
    for record in (
        b"\x0a\xff\xff\xff",  # a length past the end
        wire_field(1, 0, 5),  # Example.features as a varint
        wire_field(1, 2, wire_field(1, 2, wire_field(2, 2, wire_field(2, 2, b"\x0a\x03ab")))),
        wire_field(1, 2, wire_field(1, 2, wire_field(1, 2, b"\xff"))),  # a name not UTF-8
        wire_field(1, 2, wire_field(1, 2, wire_field(2, 2, wire_field(2, 2, b"\x0d\x00")))),
        wire_field(3, 3, b""),  # a group
        b"\x08" + b"\xff" * 10 + b"\x01",  # a varint longer than ten bytes
    ):
        with pytest.raises(fastio.DecodeError, match=r"not a tf\.train\.Example"):
            parse_example(record)
    assert parse_example(b"") == {}


def test_parse_example_many_features() -> None:
    from tfrecord import example_pb2

    example = example_pb2.Example()
    for index in range(100):  # more than the parser describes on its stack
        example.features.feature[f"f{index}"].int64_list.value.extend(range(index))
    record = example.SerializeToString()
    parsed = parse_example(record)
    assert same_example(parsed, reference_parse_example(record))
    assert [len(parsed[f"f{index}"]) for index in range(100)] == list(range(100))
