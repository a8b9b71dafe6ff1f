"""Native record framing against reference implementations and a peer's writer."""

from __future__ import annotations

import io
import subprocess
import tarfile

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tfrecord.writer import TFRecordWriter

from fastio._native import crc32c, scan_tar, scan_tfrecords, split_lines


def test_crc32c_check_value() -> None:
    # The standard check value of CRC-32C.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"123456789", portable=True) == 0xE3069283
    assert crc32c(b"") == 0


@given(data=st.binary(max_size=5000), cut=st.integers(0, 5000), offset=st.integers(0, 7))
@settings(max_examples=300, deadline=None)
def test_crc32c_matches_google_crc32c(data: bytes, cut: int, offset: int) -> None:
    view = memoryview(b"\0" * offset + data)[offset:]  # unaligned starts too
    expected = google_crc32c.value(data)
    assert crc32c(view) == expected
    assert crc32c(view, portable=True) == expected
    cut = min(cut, len(data))
    assert crc32c(data[cut:], crc32c(data[:cut])) == expected


def write_tfrecords(path, payloads: list[bytes]) -> bytes:
    writer = TFRecordWriter(str(path))
    for payload in payloads:
        writer.write({"payload": (payload, "byte")})
    writer.close()
    return path.read_bytes()


def record_payloads(data: bytes, offsets, lengths) -> list[bytes]:
    return [data[o : o + n] for o, n in zip(offsets, lengths, strict=True)]


def test_scan_records_written_by_the_tfrecord_package(tmp_path) -> None:
    payloads = [b"", b"x", bytes(range(256)) * 40, b"y" * 100_000]
    data = write_tfrecords(tmp_path / "a.tfrecord", payloads)
    offsets, lengths, consumed, error, _ = scan_tfrecords(data)
    assert error is None
    assert consumed == len(data)
    records = record_payloads(data, offsets, lengths)
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
    first_offsets, first_lengths, consumed, error, _ = scan_tfrecords(data[:cut])
    assert error is None
    assert consumed <= cut
    rest = data[consumed:]
    more_offsets, more_lengths, rest_consumed, error, _ = scan_tfrecords(rest)
    assert error is None
    assert consumed + rest_consumed == len(data)
    whole = scan_tfrecords(data)
    assert record_payloads(data[:cut], first_offsets, first_lengths) + record_payloads(
        rest, more_offsets, more_lengths
    ) == record_payloads(data, whole[0], whole[1])


def test_corrupt_data_checksum_is_reported_after_the_good_records(tmp_path) -> None:
    data = bytearray(write_tfrecords(tmp_path / "c.tfrecord", [b"a" * 50, b"b" * 50, b"c" * 50]))
    offsets, _, _, _, _ = scan_tfrecords(data)
    second_header = offsets[1] - 12
    data[offsets[1] + 5] ^= 0xFF
    found, _, consumed, error, _ = scan_tfrecords(data)
    assert error == ("data_crc", second_header)
    assert len(found) == 1
    assert consumed == second_header
    # Unverified, the damaged record is framed all the same.
    found, _, consumed, error, _ = scan_tfrecords(data, verify=False)
    assert error is None
    assert (len(found), consumed) == (3, len(data))


def test_corrupt_length_checksum(tmp_path) -> None:
    data = bytearray(write_tfrecords(tmp_path / "l.tfrecord", [b"a" * 10, b"b" * 10]))
    offsets, _, _, _, _ = scan_tfrecords(data)
    data[offsets[1] - 12] ^= 0x01  # the second record's length field
    found, _, _, error, _ = scan_tfrecords(data)
    assert error == ("length_crc", offsets[1] - 12)
    assert len(found) == 1


def test_many_records_span_internal_batches(tmp_path) -> None:
    payloads = [bytes([i % 256]) for i in range(10_000)]  # more than one native batch
    data = write_tfrecords(tmp_path / "m.tfrecord", payloads)
    offsets, lengths, consumed, error, _ = scan_tfrecords(data)
    assert (len(offsets), consumed, error) == (10_000, len(data), None)
    assert list(offsets) == sorted(offsets)
    assert len(set(lengths)) == 1  # every record is an Example of one 1-byte payload
    assert record_payloads(data, offsets, lengths)[-1].endswith(bytes([9_999 % 256]))


@given(st.binary(max_size=3000).map(lambda b: b.replace(b"\r", b"")))
@settings(max_examples=200, deadline=None)
def test_split_lines_matches_python(data: bytes) -> None:
    ends, consumed = split_lines(data)
    starts = [0, *(end + 1 for end in ends)][: len(ends)]
    assert [data[s:e] for s, e in zip(starts, ends, strict=True)] == data.split(b"\n")[:-1]
    assert consumed == (data.rfind(b"\n") + 1)


def test_split_lines_over_many_batches() -> None:
    data = b"line\n" * 20_000
    ends, consumed = split_lines(data)
    assert len(ends) == 20_000
    assert consumed == len(data)


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
    members, consumed, at_end, error, _ = scan_tar(data)
    assert error is None
    assert at_end
    assert data[consumed:].strip(b"\0") == b""  # stopped at the end-of-archive marker
    found = {
        name: data[offset : offset + size] for name, offset, size, kind, _ in members if kind == "0"
    }
    assert found == files
    assert [kind for *_, kind, _ in members].count("5") == 1  # the directory
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        # tarfile drops a directory's trailing slash; the scanner keeps the stored name.
        expected = [m.name for m in archive.getmembers()]
    assert expected == [name.rstrip("/") for name, *_ in members]


def test_scan_tar_written_by_gnu_tar(tmp_path) -> None:
    source = tmp_path / "src"
    (source / ("d" * 120)).mkdir(parents=True)
    files = {"a.txt": b"alpha", ("d" * 120) + "/b.bin": bytes(range(200)) * 30}
    for name, payload in files.items():
        (source / name).write_bytes(payload)
    archive = tmp_path / "gnu.tar"
    subprocess.run(["tar", "-C", str(source), "-cf", str(archive), *files], check=True)
    data = archive.read_bytes()
    members, _, at_end, error, _ = scan_tar(data)
    assert (at_end, error) == (True, None)
    assert {n: data[o : o + s] for n, o, s, kind, _ in members if kind == "0"} == files


@given(cut=st.integers(0, 20_000))
@settings(max_examples=80, deadline=None)
def test_tar_members_cut_at_any_byte_resume_in_the_next_scan(cut: int) -> None:
    data = tar_members(sample_files(), tarfile.PAX_FORMAT)
    cut = min(cut, len(data))
    first, consumed, _, error, _ = scan_tar(data[:cut])
    assert error is None
    assert consumed <= cut
    assert consumed % 512 == 0
    rest, _, at_end, error, _ = scan_tar(data[consumed:])
    assert error is None
    assert at_end
    names = [m[0] for m in first] + [m[0] for m in rest]
    assert names == [m[0] for m in scan_tar(data)[0]]


def test_damaged_tar_header_is_reported_with_its_offset() -> None:
    data = bytearray(tar_members(sample_files(), tarfile.GNU_FORMAT))
    members, _, _, _, _ = scan_tar(data)
    third_header = members[2][4]
    data[third_header + 10] ^= 0x20  # inside the name: the checksum no longer matches
    found, consumed, at_end, error, _ = scan_tar(data)
    assert error == ("header_checksum", third_header)
    assert len(found) == 2
    assert consumed == third_header
    assert not at_end


def test_scanners_say_how_many_bytes_a_cut_record_needs(tmp_path) -> None:
    data = write_tfrecords(tmp_path / "n.tfrecord", [b"a" * 1000, b"b" * 2000])
    offsets, lengths, _, _, _ = scan_tfrecords(data)
    second = offsets[1] - 12
    *_, consumed, error, needed = scan_tfrecords(data[: second + 5])  # inside the header
    assert (consumed, error, needed) == (second, None, 12)
    *_, consumed, error, needed = scan_tfrecords(data[: second + 100])  # inside the data
    assert (consumed, needed) == (second, 16 + lengths[1])
    assert scan_tfrecords(data)[4] == 0
    tar = tar_members({"long/" * 40 + "x.bin": b"z" * 3000}, tarfile.GNU_FORMAT)
    # The directory member, then a GNU long name: the needed size grows as blocks arrive.
    members, start, _, _, _ = scan_tar(tar[:1024])
    assert [m[3] for m in members] == ["5"]
    needs = [scan_tar(tar[start : start + cut])[4] for cut in (100, 512, 1024, 1536)]
    assert needs[0] == 512  # a header block first
    assert needs[-1] == 512 + 512 + 512 + 3072  # long-name header, its data, header, data
    assert scan_tar(tar)[4] == 0
