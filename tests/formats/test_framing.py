"""Native record framing against reference implementations and a peer's writer,
and the native collectors' batches."""

from __future__ import annotations

import io
import random
import subprocess
import tarfile

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tfrecord.writer import TFRecordWriter

from fastio import Chunk, DecodeError
from fastio._native import (
    RecordColumns,
    TarBatch,
    TarColumns,
    TarMember,
    check_tfrecords,
    crc32c,
    crc32c_kernels,
    scan_tar,
    scan_tfrecords,
    split_lines,
)
from fastio.formats import TFRecordWriter as FastioTFRecordWriter
from tests.formats.chunks import chunk_of, chunked
from tests.formats.test_tfrecord import KINDS, encode_values, wire_field


def test_crc32c_check_value() -> None:
    # The standard check value of CRC-32C.
    assert crc32c(b"123456789") == 0xE3069283
    for kernel in crc32c_kernels():
        assert crc32c(b"123456789", kernel=kernel) == 0xE3069283
        assert crc32c(b"", kernel=kernel) == 0
    assert {"auto", "portable"} <= set(crc32c_kernels())
    with pytest.raises(ValueError, match="not one of"):
        crc32c(b"", kernel="abacus")


@given(data=st.binary(max_size=5000), cut=st.integers(0, 5000), offset=st.integers(0, 7))
@settings(max_examples=300, deadline=None)
def test_crc32c_matches_google_crc32c(data: bytes, cut: int, offset: int) -> None:
    view = memoryview(b"\0" * offset + data)[offset:]  # unaligned starts too
    expected = google_crc32c.value(data)
    cut = min(cut, len(data))
    for kernel in crc32c_kernels():
        assert crc32c(view, kernel=kernel) == expected
        assert crc32c(data[cut:], crc32c(data[:cut], kernel=kernel), kernel=kernel) == expected


@pytest.mark.parametrize("kernel", ["sse42", "fold"])
@pytest.mark.parametrize(
    "size", [255, 256, 257, 271, 511, 512, 12_287, 12_288, 12_289, 24_583, 110_000, (1 << 20) + 5]
)
def test_crc32c_of_long_buffers_matches_google_crc32c(kernel: str, size: int) -> None:
    # Past three 4 KiB blocks the crc32 instruction runs three streams and joins
    # them; from 256 bytes the fold kernel runs four 64-byte accumulators, then
    # 16-byte lanes, then single bytes.
    if kernel not in crc32c_kernels():
        pytest.skip(f"this CPU has no {kernel} CRC-32C kernel")
    data = random.Random(size).randbytes(size)
    for offset in (0, 3):
        view = memoryview(data)[offset:]
        expected = google_crc32c.value(bytes(view))
        assert crc32c(view, kernel=kernel) == expected
        assert crc32c(view[200:], crc32c(view[:200], kernel=kernel), kernel=kernel) == expected


def write_tfrecords(path, payloads: list[bytes]) -> bytes:
    writer = TFRecordWriter(str(path))
    for payload in payloads:
        writer.write({"payload": (payload, "byte")})
    writer.close()
    return path.read_bytes()


def record_payloads(data: bytes, offsets, lengths) -> list[bytes]:
    return [data[o : o + n] for o, n in zip(offsets, lengths, strict=True)]


def regular_files(data: bytes, members: list[TarMember]) -> dict[str, bytes]:
    return {
        m.name: data[m.data_offset : m.data_offset + m.size] for m in members if m.typeflag == "0"
    }


def test_scan_records_written_by_the_tfrecord_package(tmp_path) -> None:
    payloads = [b"", b"x", bytes(range(256)) * 40, b"y" * 100_000]
    data = write_tfrecords(tmp_path / "a.tfrecord", payloads)
    scan = scan_tfrecords(data)
    assert scan.error is None
    assert scan.consumed == len(data)
    assert (scan.needed, scan.at_end) == (0, False)
    records = record_payloads(data, scan.offsets, scan.lengths)
    assert len(records) == len(payloads)
    # Each record is a serialized tf.train.Example holding the payload.
    for record, payload in zip(records, payloads, strict=True):
        assert payload in record
    assert crc32c(b"".join(records)) == google_crc32c.value(b"".join(records))


@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=30),
    cut=st.integers(0, 200_000),
)
@settings(max_examples=60, deadline=None)
def test_records_cut_at_any_byte_resume_in_the_next_scan(tmp_path_factory, sizes, cut) -> None:
    path = tmp_path_factory.mktemp("tf") / "cut.tfrecord"
    payloads = [bytes([index % 251]) * size for index, size in enumerate(sizes)]
    data = write_tfrecords(path, payloads)
    cut = min(cut, len(data))
    first = scan_tfrecords(data[:cut])
    assert first.error is None
    assert first.consumed <= cut
    rest = data[first.consumed :]
    more = scan_tfrecords(rest)
    assert more.error is None
    assert first.consumed + more.consumed == len(data)
    whole = scan_tfrecords(data)
    assert record_payloads(data[:cut], first.offsets, first.lengths) + record_payloads(
        rest, more.offsets, more.lengths
    ) == record_payloads(data, whole.offsets, whole.lengths)


def test_corrupt_data_checksum_is_reported_after_the_good_records(tmp_path) -> None:
    data = bytearray(write_tfrecords(tmp_path / "c.tfrecord", [b"a" * 50, b"b" * 50, b"c" * 50]))
    offsets = scan_tfrecords(data).offsets
    second_header = offsets[1] - 12
    data[offsets[1] + 5] ^= 0xFF
    scan = scan_tfrecords(data)
    assert scan.error is not None
    assert (scan.error.kind, scan.error.offset, scan.error.index) == ("data_crc", second_header, 1)
    assert len(scan.offsets) == 1
    assert scan.consumed == second_header
    # Unverified, the damaged record is framed all the same.
    scan = scan_tfrecords(data, verify=False)
    assert scan.error is None
    assert (len(scan.offsets), scan.consumed) == (3, len(data))
    # With the data's checksums left for later, the lengths' are still checked,
    # and check_tfrecords finds the damaged record among any of them.
    scan = scan_tfrecords(data, data_checks=False)
    assert scan.error is None
    assert (len(scan.offsets), scan.consumed) == (3, len(data))
    # (start, at most so many records, no more once they hold so many bytes)
    first = scan.lengths[0]
    windows = [(0, 3, 1000), (0, 1, 1000), (0, 3, first), (0, 3, first + 1), (1, 5, 1000),
               (2, 3, 0)]  # fmt: skip
    found = [check_tfrecords(data, scan.offsets, scan.lengths, *window) for window in windows]
    assert found == [(3, 1), (1, 1), (1, 1), (2, 1), (3, 1), (3, 3)]
    with pytest.raises(IndexError):
        check_tfrecords(data[:-1], scan.offsets, scan.lengths, 2, 1, 1000)  # past the data's end
    with pytest.raises(IndexError):
        check_tfrecords(data, scan.offsets, scan.lengths, 3, 1, 1000)
    data[9] ^= 0xFF  # the first record's length checksum
    assert scan_tfrecords(data, data_checks=False).error.kind == "length_crc"


def test_corrupt_length_checksum(tmp_path) -> None:
    data = bytearray(write_tfrecords(tmp_path / "l.tfrecord", [b"a" * 10, b"b" * 10]))
    offsets = scan_tfrecords(data).offsets
    data[offsets[1] - 12] ^= 0x01  # the second record's length field
    scan = scan_tfrecords(data)
    assert scan.error is not None
    assert (scan.error.kind, scan.error.offset) == ("length_crc", offsets[1] - 12)
    assert len(scan.offsets) == 1


def test_many_records_span_internal_batches(tmp_path) -> None:
    payloads = [bytes([i % 256]) for i in range(10_000)]  # more than one native batch
    data = write_tfrecords(tmp_path / "m.tfrecord", payloads)
    scan = scan_tfrecords(data)
    offsets, lengths = scan.offsets, scan.lengths
    assert (len(offsets), scan.consumed, scan.error) == (10_000, len(data), None)
    assert list(offsets) == sorted(offsets)
    assert len(set(lengths)) == 1  # every record is an Example of one 1-byte payload
    assert record_payloads(data, offsets, lengths)[-1].endswith(bytes([9_999 % 256]))


@given(st.binary(max_size=3000).map(lambda b: b.replace(b"\r", b"")))
@settings(max_examples=200, deadline=None)
def test_split_lines_matches_python(data: bytes) -> None:
    scan = split_lines(data)
    ends = scan.ends
    starts = [0, *(end + 1 for end in ends)][: len(ends)]
    assert [data[s:e] for s, e in zip(starts, ends, strict=True)] == data.split(b"\n")[:-1]
    assert scan.consumed == (data.rfind(b"\n") + 1)


def test_split_lines_over_many_batches() -> None:
    data = b"line\n" * 20_000
    scan = split_lines(data)
    assert len(scan.ends) == 20_000
    assert scan.consumed == len(data)


def test_framing_rejects_non_buffers() -> None:
    with pytest.raises(TypeError):
        scan_tfrecords("text")  # type: ignore[arg-type]


# ---- tar --------------------------------------------------------------------------

TAR_FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}


def tar_members(files: dict[str, bytes], tar_format: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format) as archive:
        directory = tarfile.TarInfo("shard")
        directory.type = tarfile.DIRTYPE
        archive.addfile(directory)
        for name, payload in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def sample_files() -> dict[str, bytes]:
    return {
        "shard/000001.jpg": b"\xff\xd8" + bytes(range(256)) * 9,
        "shard/000001.cls": b"7",
        "shard/" + "deep/" * 30 + "000002.json": b'{"long": "name"}',  # > 100 bytes
        "shard/" + "n" * 150 + ".txt": b"a single long component",
        "shard/empty.bin": b"",
    }


@pytest.mark.parametrize("tar_format", list(TAR_FORMATS))
def test_scan_tar_matches_tarfile(tar_format: str) -> None:
    files = sample_files()
    if tar_format != "ustar":  # ustar cannot store a 150-byte component or non-ASCII
        files["shard/ünïcödé-名前.txt"] = b"non-ascii"
    else:
        del files["shard/" + "n" * 150 + ".txt"]
    data = tar_members(files, TAR_FORMATS[tar_format])
    scan = scan_tar(data)
    assert scan.error is None
    assert scan.at_end
    assert data[scan.consumed :].strip(b"\0") == b""  # stopped at the end-of-archive marker
    assert regular_files(data, scan.members) == files
    assert [m.typeflag for m in scan.members].count("5") == 1  # the directory
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        # tarfile drops a directory's trailing slash; the scanner keeps the stored name.
        expected = [(m.name, m.offset, m.offset_data) for m in archive.getmembers()]
    found = [(m.name.rstrip("/"), m.header_offset, m.data_offset) for m in scan.members]
    assert expected == found


def test_scan_tar_written_by_gnu_tar(tmp_path) -> None:
    source = tmp_path / "src"
    (source / ("d" * 120)).mkdir(parents=True)
    files = {"a.txt": b"alpha", ("d" * 120) + "/b.bin": bytes(range(200)) * 30}
    for name, payload in files.items():
        (source / name).write_bytes(payload)
    archive = tmp_path / "gnu.tar"
    subprocess.run(["tar", "-C", str(source), "-cf", str(archive), *files], check=True)
    data = archive.read_bytes()
    scan = scan_tar(data)
    assert (scan.at_end, scan.error) == (True, None)
    assert regular_files(data, scan.members) == files


@given(cut=st.integers(0, 20_000))
@settings(max_examples=80, deadline=None)
def test_tar_members_cut_at_any_byte_resume_in_the_next_scan(cut: int) -> None:
    data = tar_members(sample_files(), tarfile.PAX_FORMAT)
    cut = min(cut, len(data))
    first = scan_tar(data[:cut])
    assert first.error is None
    assert first.consumed <= cut
    assert first.consumed % 512 == 0
    rest = scan_tar(data[first.consumed :])
    assert rest.error is None
    assert rest.at_end
    names = [m.name for m in first.members] + [m.name for m in rest.members]
    assert names == [m.name for m in scan_tar(data).members]


def test_damaged_tar_header_is_reported_with_its_offset() -> None:
    data = bytearray(tar_members(sample_files(), tarfile.GNU_FORMAT))
    third_header = scan_tar(data).members[2].header_offset
    data[third_header + 10] ^= 0x20  # inside the name: the checksum no longer matches
    scan = scan_tar(data)
    assert scan.error is not None
    assert (scan.error.kind, scan.error.offset, scan.error.index) == (
        "header_checksum", third_header, 2,
    )  # fmt: skip
    assert len(scan.members) == 2
    assert scan.consumed == third_header
    assert not scan.at_end


def test_scanners_say_how_many_bytes_a_cut_record_needs(tmp_path) -> None:
    data = write_tfrecords(tmp_path / "n.tfrecord", [b"a" * 1000, b"b" * 2000])
    whole = scan_tfrecords(data)
    second = whole.offsets[1] - 12
    scan = scan_tfrecords(data[: second + 5])  # inside the header
    assert (scan.consumed, scan.error, scan.needed) == (second, None, 12)
    scan = scan_tfrecords(data[: second + 100])  # inside the data
    assert (scan.consumed, scan.needed) == (second, 16 + whole.lengths[1])
    assert whole.needed == 0
    tar = tar_members({"long/" * 40 + "x.bin": b"z" * 3000}, tarfile.GNU_FORMAT)
    # The directory member, then a GNU long name: the needed size grows as blocks arrive.
    head = scan_tar(tar[:1024])
    assert [m.typeflag for m in head.members] == ["5"]
    start = head.consumed
    needs = [scan_tar(tar[start : start + cut]).needed for cut in (100, 512, 1024, 1536)]
    assert needs[0] == 512  # a header block first
    assert needs[-1] == 512 + 512 + 512 + 3072  # long-name header, its data, header, data
    assert scan_tar(tar).needed == 0


# ---- columns ------------------------------------------------------------------------


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


def _tar_shard(rng: random.Random, url: str, samples: int) -> bytes:
    """A shard webdataset's TarWriter wrote: each sample with some of four
    extensions, of 0 bytes to 40 KB (copies past 16 KiB go with non-temporal
    stores)."""
    import webdataset

    buffer = io.BytesIO()
    with webdataset.TarWriter(buffer) as sink:
        for number in range(samples):
            sample = {"__key__": f"{url.split('.')[0]}-{number:04d}"}
            for extension in rng.sample(["bin", "cls", "jpg", "txt"], rng.randint(1, 4)):
                sample[extension] = rng.randbytes(rng.choice([0, 3, 900, 17_000, 40_000]))
            sink.write(sample)
    return buffer.getvalue()


def _tar_parts(rng: random.Random, url: str, samples: int, cuts: int) -> list:
    """Tar parts (samples not copied yet) of a :func:`_tar_shard`, cut into reads."""
    from fastio.formats._webdataset import columns_webdataset

    shard = _tar_shard(rng, url, samples)
    points = [rng.randrange(len(shard)) for _ in range(cuts)]
    return list(columns_webdataset(chunked(shard, points), url, parts=True))


@given(seed=st.integers(0, 2**32 - 1), batch=st.integers(1, 40))
@settings(max_examples=30, deadline=None)
def test_a_batch_built_span_by_span_is_the_batch_gathered_at_once(seed: int, batch: int) -> None:
    """Rows of two shards added a span at a time, an extension first met in a
    later span null in the rows before it, and a batch built again after each
    take: every batch is what one gather of the same rows makes, schema,
    nulls and bytes."""
    from fastio.formats._parts import TarPart

    rng = random.Random(seed)
    parts = _tar_parts(rng, "a.tar", 30, 4) + _tar_parts(rng, "b.tar", 25, 3)
    builder = TarPart.building(batch)
    assert builder is not None
    _built_as_gathered(builder, TarPart.join(parts), batch, lambda: rng.randint(1, 9))


def _built_as_gathered(builder, joined, batch: int, piece) -> None:
    """Batches of ``batch`` rows of ``joined`` built by ``builder`` in pieces
    of ``piece()`` rows each equal the batch gathered at once."""
    for first in range(0, joined.num_rows, batch):
        rows = joined.slice(first, min(batch, joined.num_rows - first))
        lo = 0
        while lo < rows.num_rows:
            hi = min(rows.num_rows, lo + piece())
            assert builder.add(rows.slice(lo, hi - lo)) is None
            lo = hi
        assert builder.num_rows == rows.num_rows
        built = builder.take()
        assert builder.num_rows == 0
        built.validate(full=True)
        expected = rows.batch()
        assert built.schema == expected.schema
        assert built.equals(expected)


def test_a_span_past_a_batch_s_rows_adds_nothing() -> None:
    from fastio.formats._parts import TarPart

    collector = TarColumns()
    assert collector.scan(_tar_shard(random.Random(3), "a.tar", 12), True).rows == 12
    samples, first, url = collector.detach(), 0, "a.tar"
    joined = TarPart.of(samples, url)
    builder = TarBatch(5)
    builder.add(samples, first, 3, url)
    with pytest.raises(OverflowError):
        builder.add(samples, first + 3, 3, "b.tar")  # a url, and columns, it never kept
    with pytest.raises(IndexError):
        builder.add(samples, samples.num_rows - 1, 2, url)
    assert builder.num_rows == 3
    built = pa.record_batch(builder.take())
    assert built.equals(joined.slice(0, 3).batch())
    empty = pa.record_batch(builder.take())
    assert (empty.num_rows, empty.schema.names) == (0, ["__key__", "__url__"])


# ---- tf.train.Example columns -------------------------------------------------------

# Each name keeps one kind across records (a name of two kinds cannot be typed
# by pyarrow either), and some records lack some names.
FEATURE_KINDS = {"image": "bytes", "label": "int64", "weights": "float", "名前": "bytes"}
FEATURE_VALUES = {
    "bytes": st.lists(st.binary(max_size=40_000) | st.binary(max_size=3), max_size=3),
    "int64": st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
    "float": st.lists(st.floats(width=32, allow_nan=False), max_size=4),
}


@st.composite
def example_records(draw) -> bytes:
    """A tf.train.Example of some of FEATURE_KINDS's names, in any order, values
    packed or not; or (now and then) a record that is not an example."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([b"\xff\xff\xff", b"\x0a\x05\x0a\x03\x0a\x01\x80"]))
    names = draw(st.permutations(list(FEATURE_KINDS)))[: draw(st.integers(0, 4))]
    entries = []
    for name in names:
        kind = FEATURE_KINDS[name]
        values = encode_values(kind, draw(FEATURE_VALUES[kind]), draw(st.booleans()))
        feature = wire_field(KINDS[kind], 2, values)
        entry = wire_field(1, 2, name.encode()) + wire_field(2, 2, feature)
        entries.append(wire_field(1, 2, entry))
    return wire_field(1, 2, b"".join(entries))


def _expected_row(record: bytes) -> dict | None:
    from fastio.formats import parse_example

    try:
        parsed = parse_example(record)
    except DecodeError:
        return None
    return {name: value if isinstance(value, list) else value.tolist()
            for name, value in parsed.items()}  # fmt: skip


def _tfrecord_shard(records: list[bytes]) -> bytes:
    buffer = io.BytesIO()
    with FastioTFRecordWriter(buffer) as writer:
        for record in records:
            writer.write(record)
    return buffer.getvalue()


@given(records=st.lists(example_records(), max_size=12), data=st.data())
@settings(max_examples=150, deadline=None)
def test_example_columns_hold_what_each_record_parses_to(records, data) -> None:
    from fastio.formats._tfrecord import columns_examples

    shard = _tfrecord_shard(records)
    cuts = data.draw(st.lists(st.integers(0, len(shard)), max_size=4))
    parts = data.draw(st.booleans())
    found = list(columns_examples(chunked(shard, cuts), "<memory>", parts=parts))
    got: list[dict | None] = []
    for item in found:
        if isinstance(item, DecodeError):
            got.append(None)
            continue
        batch = item.batch() if parts else item
        batch.validate(full=True)
        for name in batch.schema.names:
            kind = FEATURE_KINDS[name]
            item_type = {"bytes": pa.binary(), "int64": pa.int64(), "float": pa.float64()}[kind]
            assert batch.schema.field(name).type == pa.list_(item_type)
        got += [{k: v for k, v in row.items() if v is not None} for row in batch.to_pylist()]
    assert got == [_expected_row(record) for record in records]
    offsets, at = [], 0
    for record in records:
        offsets.append(at)
        at += 16 + len(record)
    errors = [item.offset for item in found if isinstance(item, DecodeError)]
    assert errors == [o for o, r in zip(offsets, records, strict=True) if _expected_row(r) is None]


# A Feature without a value list: typed by pyarrow, not natively.
_NO_VALUES = wire_field(1, 2, b"empty") + wire_field(2, 2, b"")
NO_VALUE_LIST = wire_field(1, 2, wire_field(1, 2, _NO_VALUES))


@given(records=st.lists(example_records(), min_size=1, max_size=30), batch=st.integers(1, 12),
       untyped=st.booleans(), data=st.data())  # fmt: skip
@settings(max_examples=60, deadline=None)
def test_examples_built_span_by_span_are_the_batch_parsed_at_once(records, batch, untyped,
                                                                  data) -> None:  # fmt: skip
    """Examples of several reads added to a batch a span at a time, a feature
    first met in a later span null in the rows before it, and a batch built
    again after each take: each batch is what parsing its rows at once makes.
    A batch with a feature that cannot be typed natively is made from its
    spans as ExamplePart.batch makes it."""
    from fastio.formats._tfrecord import ExamplePart, columns_examples

    if untyped:
        records.insert(data.draw(st.integers(0, len(records))), NO_VALUE_LIST)
    shard = _tfrecord_shard(records)
    cuts = data.draw(st.lists(st.integers(0, len(shard)), max_size=6))
    parts = [item for item in columns_examples(chunked(shard, cuts), "<memory>", parts=True)
             if isinstance(item, ExamplePart)]  # fmt: skip
    if not parts:
        return
    builder = ExamplePart.building(batch)
    assert builder is not None
    _built_as_gathered(builder, ExamplePart.join(parts), batch,
                       lambda: data.draw(st.integers(1, 5)))  # fmt: skip


def test_a_batch_being_built_lets_each_read_s_buffer_go_once_its_rows_are_in() -> None:
    """The builder copies what it needs of a part as the part is added (a
    feature's name included): the read buffer the part lies in is no longer
    exported, so the reader may reuse it while the batch is still filling.
    A batch that becomes untyped midway still holds every row."""
    from fastio.formats._tfrecord import ExamplePart, columns_examples, example_parts

    def shard(features: list[dict]) -> bytearray:
        buffer = io.BytesIO()
        with FastioTFRecordWriter(buffer) as writer:
            for feature in features:
                writer.write(*example_parts(feature))
        return bytearray(buffer.getvalue())

    reads = [
        shard([{"label": n, "data": bytes([n]) * 5_000} for n in range(3)]),
        shard([{"label": 3, "data": b"x"}, {"extra": 1.5}]),
        bytearray(_tfrecord_shard([NO_VALUE_LIST])),
        shard([{"label": 9}]),
    ]
    builder = ExamplePart.building(16)
    assert builder is not None
    for number, read in enumerate(reads):
        url = f"{number}.tfrecord"
        chunk = Chunk(0, 0, url, 0, memoryview(read), True, True)
        [part] = list(columns_examples([chunk], url, parts=True))
        with pytest.raises(BufferError):  # the part's records lie in the read
            read.append(0)
        assert builder.add(part) is None
        del part, chunk
        read.append(0)  # the builder kept none of it
    batch = builder.take()
    assert builder.num_rows == 0
    assert batch.num_rows == 7
    assert batch.schema.names == ["label", "data", "extra", "empty"]
    assert batch.column("label").to_pylist() == [[0], [1], [2], [3], None, None, [9]]
    data = [[bytes([n]) * 5_000] for n in range(3)]
    assert batch.column("data").to_pylist() == [*data, [b"x"], None, None, None]
    assert batch.column("extra").to_pylist() == [None] * 4 + [[1.5], None, None]
    assert batch.column("empty").to_pylist() == [None] * 5 + [[], None]


def test_example_columns_of_parts_join_across_collections() -> None:
    from fastio.formats._tfrecord import ExamplePart, columns_examples, example_parts

    buffer = io.BytesIO()
    with FastioTFRecordWriter(buffer) as writer:
        for number in range(10):
            features = {"label": number} if number % 3 else {"data": bytes([number]) * 20_000}
            writer.write(*example_parts(features))
    shard = buffer.getvalue()
    parts = list(columns_examples(chunked(shard, [len(shard) // 3, 2 * len(shard) // 3]),
                                  "<memory>", parts=True))  # fmt: skip
    assert len(parts) == 3
    assert all(isinstance(p, ExamplePart) for p in parts)
    joined = ExamplePart.join(parts)
    assert joined.num_rows == 10
    assert joined.slice(4, 0).batch().num_rows == 0
    batch = joined.slice(2, 6).batch()
    assert batch.schema.names == ["label", "data"]  # the first record has no label
    assert batch.column("label").to_pylist() == [[2], None, [4], [5], None, [7]]
    assert batch.column("data").to_pylist() == [None, [bytes([3]) * 20_000], None, None,
                                               [bytes([6]) * 20_000], None]  # fmt: skip
    # Rows picked in any order (a shuffled batch) are gathered from the
    # collections as they are, neighbours in one span.
    order = np.array([9, 0, 4, 5, 6, 3, 1])
    picked = joined.pick(order)
    collections = [part.spans[0][0] for part in parts]  # rows 0-2, 3-5, 6-9
    assert [(collections.index(span[0]), span[1], span[2]) for span in picked.spans] == [
        (2, 3, 1), (0, 0, 1), (1, 1, 2), (2, 0, 1), (1, 0, 1), (0, 1, 1)]  # fmt: skip
    assert picked.batch().to_pylist() == joined.batch().take(order).to_pylist()
    assert joined.take(order).to_pylist() == joined.batch().take(order).to_pylist()
    assert joined.pick(np.array([], np.int64)).batch().num_rows == 0
    for outside in ([10], [-1]):
        with pytest.raises(IndexError):
            joined.pick(np.array(outside))


def test_example_features_pyarrow_cannot_type_natively_are_typed_as_it_would() -> None:
    from fastio.formats._layout import batch_of
    from fastio.formats._tfrecord import columns_examples, parse_example

    def entry(name: bytes, feature: bytes) -> bytes:
        return wire_field(1, 2, wire_field(1, 2, name) + wire_field(2, 2, feature))

    bytes_feature = wire_field(1, 2, wire_field(1, 2, b"abc"))
    records = [
        wire_field(1, 2, entry(b"x", bytes_feature)),
        wire_field(1, 2, entry(b"x", b"")),  # a Feature without a value list: []
        wire_field(1, 2, entry(b"x", bytes_feature) + entry(b"x", bytes_feature)),  # twice
    ]
    buffer = io.BytesIO()
    with FastioTFRecordWriter(buffer) as writer:
        for record in records:
            writer.write(record)
    [batch] = list(columns_examples([chunk_of(buffer.getvalue())], "<memory>"))
    assert batch.equals(batch_of([parse_example(record) for record in records]))
    assert batch.column("x").to_pylist() == [[b"abc"], [], [b"abc"]]


def test_a_layout_names_the_sample_its_ranges_decode_from_without_working_them_out() -> None:
    from fastio.formats._layout import Layout
    from fastio.reader._ranges import ByteRange

    def unit_ranges(unit: int) -> list[ByteRange]:
        return [ByteRange("u", 100 * unit, 100)]

    bounds = np.array([0, 4, 9, 10])
    units = Layout("u", 10, 300, bounds, np.full(3, 100), meta={"unit_ranges": unit_ranges})
    starts = np.arange(0, 1000, 100)
    samples = Layout("s", 10, 1000, np.arange(11), np.full(10, 100), starts, starts + 100)
    whole = Layout("w", 10, 1000, np.array([0, 10]), np.array([1000]), starts, starts + 100,
                   whole=True)  # fmt: skip
    for layout in (units, samples, whole):
        for start in range(10):
            assert layout.decoded_from(start) == layout.ranges(start, 10)[1]
    assert [units.decoded_from(s) for s in (0, 3, 4, 8, 9)] == [0, 0, 4, 4, 9]


@pytest.mark.parametrize("piece", [1, 150, 260, 450, 10_000])
def test_a_layouts_ranges_are_cut_into_pieces_of_whole_samples(piece: int) -> None:
    """With a piece size, the ranges of a run of samples are cut at sample
    boundaries, each of at most that many bytes unless one sample is larger;
    they cover the same bytes, and no range spans the gap a damaged record
    left out of the index."""
    from fastio.formats._layout import Layout

    sizes = [100, 40, 300, 60, 60, 60, 500, 10, 90, 90]
    starts = np.cumsum([0, *sizes[:-1]])
    starts[5:] += 1000  # samples 0..4 and 5..9 around a gap
    ends = starts + np.array(sizes)
    layout = Layout("s", 10, int(ends[-1]), np.arange(11), np.array(sizes), starts, ends)
    for start, stop in ((0, 10), (2, 8), (4, 5), (6, 10)):
        whole, first = layout.ranges(start, stop)
        cut, cut_first = layout.ranges(start, stop, piece)
        assert first == cut_first == start
        covered = [(r.offset, r.offset + r.length) for r in cut]
        assert sum(e - s for s, e in covered) == sum(r.length for r in whole)
        for begin, end in covered:
            assert begin in starts.tolist()
            assert end in ends.tolist()
            samples = int(np.searchsorted(ends, end)) - int(np.searchsorted(starts, begin)) + 1
            assert end - begin <= piece or samples == 1
            assert not (begin < 1460 < end)  # the gap (after sample 4) is never read
        merged = []
        for begin, end in covered:
            if merged and merged[-1][1] == begin:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((begin, end))
        assert merged == [(r.offset, r.offset + r.length) for r in whole]
