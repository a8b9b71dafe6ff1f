"""WebDataset tar shards: decoded and gathered into columns (against each other and
against webdataset's and tarfile's readers), and written.

Small read sizes and odd byte ranges make samples straddle chunks, so the carry
path is exercised as much as the zero-copy one; every batch is checked with
Arrow's full validation.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import random
import tarfile

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import fastio
from fastio._native import TarMember, scan_tar
from fastio.formats import (
    WebDatasetWriter,
    _webdataset,
    columns_webdataset,
    decode_webdataset,
    sample_key,
)
from fastio.formats._webdataset import locate_webdataset
from tests.formats.chunks import (
    READ_SIZES,
    TAR_FORMATS,
    chunk_of,
    chunked,
    decode_until_error,
    plain,
    rows,
    stream,
)


def add_file(archive: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    archive.addfile(info, io.BytesIO(payload))


def write_webdataset(path, count: int, tar_format: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    samples = []
    with tarfile.open(path, "w", format=tar_format) as archive:
        for index in range(count):
            key = f"{'nested/' * (index % 3)}sample{index:06d}"
            sample = {
                "jpg": rng.randbytes(rng.choice([0, 700, 5000, 110_000])),
                "cls": str(index % 10).encode(),
                "meta.json": json.dumps({"i": index}).encode(),
            }
            for extension, payload in sample.items():
                add_file(archive, f"{key}.{extension}", payload)
            samples.append({"__key__": key, **sample})
    return samples


@pytest.mark.parametrize("read_size", READ_SIZES)
@pytest.mark.parametrize("tar_format", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_webdataset_samples_round_trip(tmp_path, read_size: int, tar_format: int) -> None:
    path = tmp_path / "shard-000.tar"
    written = write_webdataset(path, 40, tar_format)
    samples = list(decode_webdataset(stream(str(path), read_size), str(path)))
    assert [s["__key__"] for s in samples] == [w["__key__"] for w in written]
    for sample, expected in zip(samples, written, strict=True):
        assert sample["__url__"] == str(path)
        assert {k: bytes(v) for k, v in sample.items() if not k.startswith("__")} == {
            k: v for k, v in expected.items() if not k.startswith("__")
        }


def test_webdataset_key_rule_matches_webdataset() -> None:
    assert sample_key("a/b.seg.png") == ("a/b", "seg.png")
    assert sample_key("dir.v1/x.jpg") == ("dir.v1/x", "jpg")
    assert sample_key("README") is None


def test_webdataset_damaged_header_names_url_and_offset(tmp_path) -> None:
    path = tmp_path / "bad.tar"
    write_webdataset(path, 5, tarfile.GNU_FORMAT)
    data = bytearray(path.read_bytes())
    members = scan_tar(bytes(data)).members
    second_member = members[4].header_offset  # the fifth member: the second sample's jpg
    data[second_member + 3] ^= 0x40
    path.write_bytes(data)
    with pytest.raises(fastio.CorruptRecordError) as caught:
        list(decode_webdataset(stream(str(path), 4096), str(path)))
    assert (caught.value.url, caught.value.offset) == (str(path), second_member)


def test_webdataset_truncated_shard_names_the_cut_member(tmp_path) -> None:
    path = tmp_path / "cut.tar"
    write_webdataset(path, 6, tarfile.GNU_FORMAT)
    data = path.read_bytes()
    members = scan_tar(data).members
    cut = members[-1].data_offset + 10  # inside the last member's data
    path.write_bytes(data[:cut])
    with pytest.raises(fastio.TruncatedShardError) as caught:
        list(decode_webdataset(stream(str(path), 4096), str(path)))
    assert caught.value.offset == members[-1].header_offset


def test_chunk_boundary_inside_the_tar_end_marker(tmp_path) -> None:
    path = tmp_path / "end.tar"
    write_webdataset(path, 3, tarfile.GNU_FORMAT)
    data = path.read_bytes()
    scan = scan_tar(data)
    marker = scan.consumed
    assert scan.at_end
    for cut in (marker + 1, marker + 511, marker + 513):
        samples = list(decode_webdataset(chunked(data, [cut]), "u"))
        assert [s["__key__"] for s in samples] == [
            s["__key__"] for s in decode_webdataset([chunk_of(data)], "u")
        ]


# ---- columns -----------------------------------------------------------------------


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
                add_file(archive, f"{key}.{extension}", payload)
            if index % 6 == 2:  # skipped, as webdataset skips them: no extension, a dot file
                for name in (f"{key}-README", f"nested/.hidden{index}"):
                    add_file(archive, name, b"abc")


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
                add_file(archive, f"{directory}/s{index:03d}.{extension}", bytes([index]) * size)
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
        add_file(archive, "README", b"abc")
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
            add_file(archive, name, b"z")
    samples, expected = decode_until_error(decode_webdataset, stream(path, 4096), path)
    batches, error = decode_until_error(columns_webdataset, stream(path, 4096), path)
    assert type(error) is type(expected) is fastio.DecodeError
    assert (error.offset, str(error)) == (expected.offset, str(expected))
    assert rows(batches) == plain(samples)


@pytest.mark.parametrize("ending", ["whole", "repeated extension", "damaged header"])
@pytest.mark.parametrize("read_size", [None, 1 << 20])
def test_owned_values_are_their_members_bytes_however_the_scan_ends(
    tmp_path, ending: str, read_size: int | None
) -> None:
    """Values a dataset owns (``bytes``) are made empty as the scan finds them
    and filled after it, many at once and with the GIL given up where a
    buffer holds many of their bytes: each is its member's payload, in a
    buffer the scan reads to its end and in one it stops in, at a repeated
    extension or a damaged header (the samples before are delivered)."""
    path = tmp_path / "large.tar"
    rng = random.Random(11)
    payloads = [rng.randbytes(rng.choice([0, 3, 90_000, 300_000])) for _ in range(14)]
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for index, payload in enumerate(payloads):
            add_file(archive, f"s{index:03d}.bin", payload)
            add_file(archive, f"s{index:03d}.cls", str(index).encode())
            if ending == "repeated extension" and index == 9:
                add_file(archive, f"s{index:03d}.bin", b"again")
    with tarfile.open(path) as archive:
        headers = [member.offset for member in archive.getmembers()]
    data = bytearray(path.read_bytes())
    delivered = len(payloads)
    if ending == "damaged header":
        delivered = 9
        data[headers[2 * delivered] + 148] ^= 0x01  # sample 9's first header's checksum
    elif ending == "repeated extension":
        delivered = 9  # sample 9 is the one lost
    path.write_bytes(bytes(data))
    chunks = [chunk_of(bytes(data))] if read_size is None else stream(str(path), read_size)
    found: list = []
    if ending == "whole":
        found.extend(locate_webdataset(chunks, str(path), whole=True, own=bytes))
    else:
        with pytest.raises(fastio.DecodeError):
            found.extend(locate_webdataset(chunks, str(path), whole=True, own=bytes))
    samples = [sample for _, _, sample in found]
    assert [sample["__key__"] for sample in samples] == [f"s{i:03d}" for i in range(delivered)]
    for index, sample in enumerate(samples):
        assert type(sample["bin"]) is bytes
        assert type(sample["cls"]) is bytes
        assert sample["bin"] == payloads[index]
        assert sample["cls"] == str(index).encode()


def test_webdataset_keys_must_be_utf8(tmp_path) -> None:
    path = str(tmp_path / "latin1.tar")
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as archive:
        for name in ("ok.jpg", "caf\xe9.jpg"):
            add_file(archive, name, b"z")
    assert len(list(decode_webdataset(stream(path, 4096), path))) == 2  # surrogate-escaped
    batches, error = decode_until_error(columns_webdataset, stream(path, 4096), path)
    assert "UTF-8" in str(error)
    assert [r["__key__"] for r in rows(batches)] == ["ok"]


def test_tar_checksums_summed_as_signed_chars_are_accepted() -> None:
    """Old writers summed the header as signed chars; GNU tar accepts both sums."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        add_file(archive, "caf\u00e9-\u00fc.bin", b"abc")  # bytes >= 0x80 in the name
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
    monkeypatch.setattr(_webdataset, "_MAX_STABLE_COLUMNS", 4)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for index in range(40):
            for extension in (f"e{index}", "cls"):
                add_file(archive, f"s{index:03d}.{extension}", b"%02d" % index)
    data = buffer.getvalue()
    chunks = chunked(data, list(range(0, len(data), 4096)))
    batches = list(columns_webdataset(chunks, "u"))
    assert rows(batches) == plain(decode_webdataset(chunks, "u"))
    assert max(len(batch.schema) for batch in batches) <= 2 + 4 + 4  # reset once past 4


def test_webdataset_full_batches_split(tar_shard: str) -> None:
    expected = plain(decode_webdataset(stream(tar_shard, 1 << 20), tar_shard))
    chunks = stream(tar_shard, 1 << 20)
    batches = list(columns_webdataset(chunks, tar_shard, max_batch_bytes=30_000))
    assert rows(batches) == expected
    assert len(batches) > 5
    for batch in batches:
        for name in batch.schema.names[2:]:
            assert sum(len(value or b"") for value in batch.column(name).to_pylist()) <= 30_000
    small = functools.partial(columns_webdataset, max_batch_bytes=10_000)  # a 20 kB jpg: no
    batches, error = decode_until_error(small, stream(tar_shard, 4096), tar_shard)
    assert "does not fit" in str(error)


def test_batches_outlive_the_reader(tar_shard: str) -> None:
    expected = plain(decode_webdataset(stream(tar_shard, 1 << 20), tar_shard))
    with fastio.Reader(read_size=4096, outstanding_requests=2) as reader:
        batches = list(columns_webdataset(reader.stream([tar_shard]), tar_shard))
    assert rows(batches) == expected  # copies: the reader's buffers are gone


# ---- writing -----------------------------------------------------------------------


def test_writer_writes_what_tarfile_and_the_decoders_read(tmp_path) -> None:
    path = tmp_path / "written.tar"
    rng = random.Random(4)
    samples = [
        {
            "__key__": f"{'deep/' * 30 if index % 4 == 0 else ''}s{index:04d}",  # pax when long
            "bin": rng.randbytes(rng.choice([0, 1, 511, 512, 5000])),
            "cls": b"%d" % index,
        }
        for index in range(50)
    ]
    with open(path, "wb") as file, WebDatasetWriter(file) as writer:
        for sample in samples:
            writer.write(sample["__key__"], {"bin": sample["bin"], "cls": sample["cls"]})
    assert len(writer) == 50
    assert path.stat().st_size % tarfile.RECORDSIZE == 0
    with tarfile.open(path) as archive:
        names = archive.getnames()
    assert names == [f"{s['__key__']}.{extension}" for s in samples for extension in ("bin", "cls")]
    got = plain(decode_webdataset(stream(str(path), 4096), str(path)))
    assert got == [{**sample, "__url__": str(path)} for sample in samples]


@pytest.mark.parametrize(
    ("key", "members", "problem"),
    [
        ("a.b", {"x": b""}, "sample key"),
        ("dir/", {"x": b""}, "sample key"),
        ("k", {}, "no members"),
        ("k", {"": b"1"}, "extension"),
        ("k", {"a/b": b"1"}, "extension"),
    ],
)
def test_writer_refuses_what_would_not_read_back(key: str, members: dict, problem: str) -> None:
    writer = WebDatasetWriter(io.BytesIO())
    with pytest.raises(ValueError, match=problem):
        writer.write(key, members)
    assert (len(writer), writer.position) == (0, 0)


def grouped_by_tarfile(data: bytes, url: str) -> tuple[list[dict], tuple[int, str] | None]:
    """webdataset's grouping of ``data``'s members, member by member through
    ``tarfile``: the samples, and where a repeated extension stops it."""
    samples: list[dict] = []
    sample: dict | None = None
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for info in archive:
            parts = sample_key(info.name) if info.isreg() else None
            if parts is None:
                continue
            key, extension = parts
            if sample is None or sample["__key__"] != key:
                if sample is not None:
                    samples.append(sample)
                sample = {"__key__": key, "__url__": url}
            if extension in sample:
                message = f"{info.name!r} repeats extension {extension!r} of sample {key!r}"
                return samples, (info.offset, message)
            sample[extension] = archive.extractfile(info).read()
    return [*samples, *([sample] if sample else [])], None


@given(
    cuts=st.lists(st.integers(0, 60_000), max_size=20),
    members=st.lists(
        st.tuples(
            st.integers(0, 7),
            st.sampled_from(["bin", "cls", "a.b", "", "/x"]),
            st.integers(0, 1500),
        ),
        min_size=1,
        max_size=24,
    ),
    tar_format=st.sampled_from(list(TAR_FORMATS.values())),
    prefix=st.sampled_from(["", "d/", "line\nbreak/", "x" * 120 + "/"]),
)
@settings(max_examples=120, deadline=None)
# A ustar path's prefix: the second member's header cut before its magic, and
# inside its prefix (a cut header must not end the sample by a partial name).
@example(cuts=[1024 + 200], members=[(0, "bin", 1), (0, "cls", 0)],
         tar_format=tarfile.USTAR_FORMAT, prefix="x" * 120 + "/")  # fmt: skip
@example(cuts=[1024 + 400], members=[(0, "bin", 1), (0, "bin", 0)],
         tar_format=tarfile.USTAR_FORMAT, prefix="x" * 120 + "/")  # fmt: skip
def test_webdataset_samples_are_indifferent_to_chunk_boundaries(
    cuts, members, tar_format, prefix
) -> None:
    """Small samples grouped natively a buffer at a time, members cut by every
    kind of boundary, keys that go on across buffers, repeated extensions,
    names without an extension and directories: as member by member."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format) as archive:
        for key, extension, size in members:
            name = f"{prefix}k{key}" + (f".{extension}" if extension else "")
            if extension == "/x":
                info = tarfile.TarInfo(f"{prefix}dir{key}.d")
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
                continue
            add_file(archive, name, bytes([key]) * size)
    data = buffer.getvalue()
    expected, repeat = grouped_by_tarfile(data, "u")
    cuts = [c % (len(data) + 1) for c in cuts]
    for own in (None, bytes):
        locate = functools.partial(locate_webdataset, whole=True, own=own)
        if repeat is None:
            found = list(locate(chunked(data, cuts), "u"))
        else:
            found, error = decode_until_error(locate, chunked(data, cuts), "u")
            assert (error.offset, str(error).split(": ", 1)[1]) == repeat
        assert plain(sample for _, _, sample in found) == expected
        assert all(type(v) is (memoryview if own is None else bytes)
                   for _, _, s in found for k, v in s.items() if k[:2] != "__")  # fmt: skip
        # Every sample's byte range alone decodes to the same sample.
        for start, end, sample in found:
            alone = list(decode_webdataset([chunk_of(data[start:end], start)], "u"))
            assert plain(alone) == plain([sample])


@pytest.mark.parametrize("range_ends", [True, False])
def test_a_sample_that_ends_a_range_comes_before_the_next_range_is_read(
    tmp_path, range_ends: bool
) -> None:
    """Ranges of whole samples (as an index gives them): a sample whose bytes
    end a range comes as soon as that range is in, not once the next
    member's header shows another key (a dataset's first sample waited for
    its second read). Without that knowledge, it waits, as it must."""
    path = tmp_path / "shard.tar"
    samples = write_webdataset(path, 4, tarfile.PAX_FORMAT)
    data = path.read_bytes()
    located = list(locate_webdataset(stream(str(path), 1 << 20), str(path)))
    taken = 0

    def one_chunk_per_sample():
        nonlocal taken
        for index, (start, end, _) in enumerate(located):
            taken += 1
            last = index == len(located) - 1
            yield fastio.Chunk(0, index, str(path), start, memoryview(data[start:end]), True, last)

    waited = []
    got = []
    for _, _, sample in locate_webdataset(one_chunk_per_sample(), str(path), whole=False,
                                          range_ends=range_ends):  # fmt: skip
        waited.append(taken)
        got.append(sample)
    assert plain(got) == [{**s, "__url__": str(path)} for s in samples]
    if range_ends:
        assert waited == [1, 2, 3, 4]
    else:
        assert waited == [2, 3, 4, 4]


@pytest.mark.parametrize("tar_format", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT])
@pytest.mark.parametrize("header_bytes", [157, 300, 511, 512, 700])
def test_a_sample_comes_once_the_next_header_names_another_key(
    tmp_path, tar_format: int, header_bytes: int
) -> None:
    """A buffer that ends inside the next sample's first member, its whole
    header in view: the sample before it has all its members and comes at
    once, not once the next buffer is in (a remote shard's first sample
    waited a round trip for it). A header cut short settles nothing (it may
    show part of a path), so the sample then waits for the next buffer."""
    path = tmp_path / "shard.tar"
    samples = write_webdataset(path, 5, tar_format)
    data = path.read_bytes()
    located = list(locate_webdataset([chunk_of(data)], str(path)))
    for index, (next_start, _, _) in enumerate(located[1:], start=1):
        taken = 0

        def two_chunks(cut: int = next_start + header_bytes):
            nonlocal taken
            for chunk in chunked(data, [cut]):
                taken += 1
                yield chunk

        got = locate_webdataset(two_chunks(), str(path))
        for before in range(index):
            start, end, sample = next(got)
            if before < index - 1 or header_bytes >= 512:
                assert taken == 1, f"sample {before} waited for the next buffer"
            else:
                assert taken == 2, f"sample {before} came before its end was known"
            assert (start, end) == located[before][:2]
            assert plain([sample]) == [{**samples[before], "__url__": str(path)}]
        assert plain([s for _, _, s in got]) == [{**s, "__url__": str(path)}
                                                 for s in samples[index:]]  # fmt: skip


def test_extensions_are_lowered_as_webdataset_lowers_them(tmp_path) -> None:
    """``img.JPG`` is the sample's ``jpg``, in samples as in batches' columns;
    ``.JPG`` and ``.jpg`` in one sample repeat an extension (webdataset
    refuses that sample too)."""
    from webdataset.tariterators import group_by_keys, tar_file_iterator

    path = tmp_path / "upper.tar"
    with tarfile.open(path, "w") as archive:
        for name, data in [("a.JPG", b"1"), ("a.Seg.PNG", b"2"), ("b.jpg", b"3")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    with open(path, "rb") as stream:  # webdataset's own grouping, of the same members
        theirs = [{k: v for k, v in s.items() if not k.startswith("__")}
                  for s in group_by_keys({**member, "__url__": str(path)}
                                         for member in tar_file_iterator(stream))]  # fmt: skip
    assert theirs == [{"jpg": b"1", "seg.png": b"2"}, {"jpg": b"3"}]
    dataset = fastio.Dataset(str(path), shuffle=False, index_dir=tmp_path / "index")
    for _ in range(2):  # never seen, then indexed
        ours = [{k: bytes(v) for k, v in s.items() if not k.startswith("__")} for s in dataset]
        assert ours == theirs
        [batch] = dataset.batches(8)
        assert batch.schema.names == ["__key__", "__url__", "jpg", "seg.png"]
    repeated = tmp_path / "repeated.tar"
    with tarfile.open(repeated, "w") as archive:
        for name in ("a.JPG", "a.jpg"):
            info = tarfile.TarInfo(name)
            info.size = 1
            archive.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(fastio.DecodeError, match="repeats extension 'jpg'"):
        list(fastio.Dataset(str(repeated), shuffle=False, index_dir=tmp_path / "r"))


@pytest.mark.parametrize("read_size", [4096, 65_536, 1 << 20])
def test_zeros_over_a_header_end_no_batches_as_the_tar_s_end(tmp_path, read_size: int) -> None:
    """As samples do (see tests/dataset/test_bad_input.py): a zero block
    with data after it is damage at the block, raised after the batches of
    the samples before it, wherever the reads cut the archive."""
    path = tmp_path / "holed.tar"
    with tarfile.open(path, "w") as archive:
        for number in range(12):
            add_file(archive, f"s{number:02d}.bin", bytes([number]) * 3000)
    with tarfile.open(path) as archive:
        hole = next(m.offset for m in archive if m.name == "s05.bin")
    with open(path, "r+b") as handle:
        handle.seek(hole)
        handle.write(bytes(1024))
    keys: list[str] = []
    with pytest.raises(fastio.CorruptRecordError) as caught:
        for batch in columns_webdataset(stream(str(path), read_size), str(path), whole=True):
            keys += batch.column("__key__").to_pylist()
    assert caught.value.offset == hole
    assert keys == [f"s{number:02d}" for number in range(5)]
