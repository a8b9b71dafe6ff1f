"""Shard formats on files written by the peers' own writers, read through the real reader.

Small read sizes make records straddle chunk boundaries, so the carry path is
exercised as much as the zero-copy one.
"""

from __future__ import annotations

import io
import itertools
import json
import pickle
import random
import tarfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tfrecord.writer import TFRecordWriter

import fastio
from fastio._native import scan_tar
from fastio.formats import (
    decode_fixed,
    decode_jsonl,
    decode_lines,
    decode_npy,
    decode_tfrecord,
    decode_webdataset,
    decompress,
    parse_example,
    sample_key,
)

READ_SIZES = [4096, 65_536, 1 << 20]


def shard_chunks(path: str, read_size: int):
    with fastio.Reader(read_size=read_size, outstanding_requests=4) as reader:
        yield from reader.stream([path])


def write_examples(path, count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    writer = TFRecordWriter(str(path))
    written = []
    for index in range(count):
        payload = rng.randbytes(rng.choice([0, 10, 3000, 110_000]))
        floats = [rng.uniform(-1, 1) for _ in range(rng.randrange(0, 5))]
        ints = [rng.randrange(-(2**40), 2**40) for _ in range(rng.randrange(1, 4))]
        writer.write({
            "image": (payload, "byte"),
            "label": (ints, "int"),
            "weights": (floats, "float"),
            "index": (index, "int"),
        })  # fmt: skip
        written.append({"image": payload, "label": ints, "weights": floats, "index": index})
    writer.close()
    return written


@pytest.mark.parametrize("read_size", READ_SIZES)
def test_tfrecord_examples_round_trip(tmp_path, read_size: int) -> None:
    path = tmp_path / "train-0000.tfrecord"
    written = write_examples(path, 60)
    records = list(decode_tfrecord(shard_chunks(str(path), read_size), str(path)))
    assert len(records) == len(written)
    for record, expected in zip(records, written, strict=True):
        example = parse_example(record)
        assert example["image"] == [expected["image"]]
        assert example["label"].tolist() == expected["label"]
        np.testing.assert_allclose(example["weights"], expected["weights"], rtol=1e-6)
        assert example["index"].tolist() == [expected["index"]]


def test_tfrecord_corrupt_checksum_names_url_offset_and_record(tmp_path) -> None:
    path = tmp_path / "bad.tfrecord"
    write_examples(path, 20)
    data = bytearray(path.read_bytes())
    records = list(decode_tfrecord([chunk_of(bytes(data))], str(path)))
    # Damage the 8th record's data.
    offset = sum(16 + len(r) for r in records[:7])
    data[offset + 14] ^= 0xFF
    path.write_bytes(data)
    decoded = []
    with pytest.raises(fastio.CorruptRecordError) as caught:
        for record in decode_tfrecord(shard_chunks(str(path), 4096), str(path)):
            decoded.append(bytes(record))
    error = caught.value
    assert (error.url, error.offset, error.record) == (str(path), offset, 7)
    assert str(path) in str(error)
    assert f"byte {offset}" in str(error)
    assert len(decoded) == 7
    assert isinstance(pickle.loads(pickle.dumps(error)), fastio.CorruptRecordError)
    # Unverified, the damaged record comes through.
    unverified = list(decode_tfrecord(shard_chunks(str(path), 4096), str(path), verify=False))
    assert len(unverified) == 20


def test_tfrecord_truncated_shard(tmp_path) -> None:
    path = tmp_path / "cut.tfrecord"
    write_examples(path, 10)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(fastio.TruncatedShardError) as caught:
        list(decode_tfrecord(shard_chunks(str(path), 65_536), str(path)))
    assert caught.value.url == str(path)
    assert 0 < caught.value.offset < len(data)


def chunk_of(data: bytes, shard: int = 0) -> fastio.Chunk:
    return fastio.Chunk(shard, 0, "<memory>", 0, memoryview(data), True, True)


def test_parse_example_rejects_garbage() -> None:
    with pytest.raises(fastio.DecodeError):
        parse_example(b"\x0a\xff\xff\xff")


# ---- WebDataset tar -------------------------------------------------------------------


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
                info = tarfile.TarInfo(f"{key}.{extension}")
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
            samples.append({"__key__": key, **sample})
    return samples


@pytest.mark.parametrize("read_size", READ_SIZES)
@pytest.mark.parametrize("tar_format", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_webdataset_samples_round_trip(tmp_path, read_size: int, tar_format: int) -> None:
    path = tmp_path / "shard-000.tar"
    written = write_webdataset(path, 40, tar_format)
    samples = list(decode_webdataset(shard_chunks(str(path), read_size), str(path)))
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


def test_webdataset_damaged_header(tmp_path) -> None:
    path = tmp_path / "bad.tar"
    write_webdataset(path, 5, tarfile.GNU_FORMAT)
    data = bytearray(path.read_bytes())
    members = scan_tar(bytes(data)).members
    second_member = members[4].header_offset  # the fifth member: the second sample's jpg
    data[second_member + 3] ^= 0x40
    path.write_bytes(data)
    with pytest.raises(fastio.CorruptRecordError) as caught:
        list(decode_webdataset(shard_chunks(str(path), 4096), str(path)))
    assert (caught.value.url, caught.value.offset) == (str(path), second_member)


def test_webdataset_truncated_shard(tmp_path) -> None:
    path = tmp_path / "cut.tar"
    write_webdataset(path, 6, tarfile.GNU_FORMAT)
    data = path.read_bytes()
    members = scan_tar(data).members
    cut = members[-1].data_offset + 10  # inside the last member's data
    path.write_bytes(data[:cut])
    with pytest.raises(fastio.TruncatedShardError) as caught:
        list(decode_webdataset(shard_chunks(str(path), 4096), str(path)))
    assert caught.value.offset == members[-1].header_offset


# ---- lines ------------------------------------------------------------------------------


@pytest.mark.parametrize("read_size", [4096, 65_536])
def test_jsonl_round_trip(tmp_path, read_size: int) -> None:
    rng = random.Random(5)
    values = [{"i": i, "text": "x" * rng.randrange(0, 9000)} for i in range(300)]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(v) for v in values))  # no final newline
    assert list(decode_jsonl(shard_chunks(str(path), read_size), str(path))) == values
    lines = [bytes(line) for line in decode_lines(shard_chunks(str(path), read_size), str(path))]
    assert lines == path.read_bytes().split(b"\n")


def test_jsonl_bad_line(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"b": 2}\nnot json\n')
    with pytest.raises(fastio.DecodeError) as caught:
        list(decode_jsonl(shard_chunks(str(path), 4096), str(path)))
    assert (caught.value.offset, caught.value.record) == (18, 2)


# ---- arrays -----------------------------------------------------------------------------


@pytest.mark.parametrize("read_size", [4096, 65_536])
@pytest.mark.parametrize(
    "array",
    [
        np.arange(10_000, dtype=np.int64),
        np.random.default_rng(0).random((300, 17, 3)).astype(np.float32),
        np.arange(4000, dtype=">i4").reshape(1000, 4),  # big-endian stays big-endian
        np.zeros(50, dtype=[("x", "<f8"), ("label", "u1")]),  # structured rows
        np.zeros((0, 5)),
    ],
    ids=["int64", "float32-3d", "big-endian", "structured", "empty"],
)
def test_npy_rows_round_trip(tmp_path, read_size: int, array: np.ndarray) -> None:
    path = tmp_path / "array.npy"
    np.save(path, array)
    rows = list(decode_npy(shard_chunks(str(path), read_size), str(path)))
    assert len(rows) == len(array)
    if len(array):
        np.testing.assert_array_equal(np.stack(rows), array)
        assert rows[0].dtype == array.dtype


def test_npy_fortran_order_and_object_arrays_are_refused(tmp_path) -> None:
    fortran = tmp_path / "f.npy"
    np.save(fortran, np.asfortranarray(np.ones((4, 3))))
    with pytest.raises(fastio.DecodeError, match="Fortran"):
        list(decode_npy(shard_chunks(str(fortran), 4096), str(fortran)))
    objects = tmp_path / "o.npy"
    np.save(objects, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(fastio.DecodeError, match="object"):
        list(decode_npy(shard_chunks(str(objects), 4096), str(objects)))


def test_npy_truncated(tmp_path) -> None:
    path = tmp_path / "cut.npy"
    np.save(path, np.arange(1000, dtype=np.int32))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(fastio.TruncatedShardError) as caught:
        list(decode_npy(shard_chunks(str(path), 4096), str(path)))
    assert caught.value.url == str(path)


def test_fixed_records(tmp_path) -> None:
    path = tmp_path / "records.bin"
    data = random.Random(9).randbytes(1000 * 37)
    path.write_bytes(data)
    records = [bytes(r) for r in decode_fixed(shard_chunks(str(path), 4096), str(path), 37)]
    assert records == [data[i : i + 37] for i in range(0, len(data), 37)]
    path.write_bytes(data + b"xx")
    with pytest.raises(fastio.TruncatedShardError) as caught:
        list(decode_fixed(shard_chunks(str(path), 4096), str(path), 37))
    assert caught.value.offset == len(data)


# ---- URLs ---------------------------------------------------------------------------------


def test_expand_urls(tmp_path) -> None:
    for name in ("train-0000.tar", "train-0001.tar", "train-0002.tar", "val-0000.tar"):
        (tmp_path / name).write_bytes(b"")
    base = str(tmp_path)
    assert fastio.expand_urls(f"{base}/train-{{0000..0002}}.tar") == [
        f"{base}/train-000{i}.tar" for i in range(3)
    ]
    assert fastio.expand_urls([f"{base}/val-*.tar", f"{base}/train-000[12].tar"]) == [
        f"{base}/val-0000.tar",
        f"{base}/train-0001.tar",
        f"{base}/train-0002.tar",
    ]
    assert fastio.expand_urls("s3://bucket/part-{a,b}.tar") == [
        "s3://bucket/part-a.tar",
        "s3://bucket/part-b.tar",
    ]
    with pytest.raises(FileNotFoundError):
        fastio.expand_urls(f"{base}/missing-*.tar")


def test_expand_urls_globs_remote_filesystems_through_fsspec() -> None:
    import fsspec

    memory = fsspec.filesystem("memory")
    for index in range(3):
        memory.pipe(f"/fastio-test/shard-{index}.tar", b"x")
    assert fastio.expand_urls("memory://fastio-test/shard-*.tar") == [
        f"memory:///fastio-test/shard-{index}.tar" for index in range(3)
    ]


# ---- compressed shards -------------------------------------------------------------------


def compressed_tfrecord(tmp_path, codec: str, examples: int = 40) -> tuple[str, list[dict]]:
    import gzip

    import zstandard

    plain = tmp_path / "plain.tfrecord"
    written = write_examples(plain, examples)
    data = plain.read_bytes()
    if codec == "gzip":
        path = tmp_path / "shard.tfrecord.gz"
        half = len(data) // 2  # two members, as `cat a.gz b.gz` makes
        path.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    else:
        path = tmp_path / "shard.tfrecord.zst"
        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    return str(path), written


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("read_size", [4096, 1 << 20])
def test_compressed_tfrecord_shards(tmp_path, codec: str, read_size: int) -> None:
    path, written = compressed_tfrecord(tmp_path, codec)
    chunks = decompress(shard_chunks(path, read_size), path, piece_size=50_000)
    records = list(decode_tfrecord(chunks, path))
    assert [parse_example(r)["index"].tolist() for r in records] == [[w["index"]] for w in written]


def test_compression_detected_from_magic_bytes(tmp_path) -> None:
    _path, written = compressed_tfrecord(tmp_path, "gzip")
    renamed = tmp_path / "no-extension"
    (tmp_path / "shard.tfrecord.gz").rename(renamed)
    chunks = decompress(shard_chunks(str(renamed), 65_536), str(renamed))
    assert len(list(decode_tfrecord(chunks, str(renamed)))) == len(written)


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_truncated_and_damaged_compressed_shards(tmp_path, codec: str) -> None:
    path, _ = compressed_tfrecord(tmp_path, codec, examples=10)
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data[: len(data) * 3 // 4])
    with pytest.raises(fastio.DecodeError) as caught:  # truncated, or a record cut short
        list(decode_tfrecord(decompress(shard_chunks(path, 4096), path), path))
    assert caught.value.url == path
    damaged = bytearray(data)
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = b"\xaa" * 64
    with open(path, "wb") as handle:
        handle.write(damaged)
    with pytest.raises(fastio.DecodeError) as caught:
        list(decode_tfrecord(decompress(shard_chunks(path, 4096), path), path))
    assert caught.value.url == path


# ---- any chunking gives the same records -----------------------------------------------

_TFRECORD_DATA: dict[str, bytes] = {}


def _tfrecord_bytes(tmp_path_factory) -> bytes:
    if "data" not in _TFRECORD_DATA:
        path = tmp_path_factory.mktemp("chunking") / "c.tfrecord"
        write_examples(path, 25, seed=3)
        _TFRECORD_DATA["data"] = path.read_bytes()
    return _TFRECORD_DATA["data"]


def chunked(data: bytes, cuts: list[int]) -> list[fastio.Chunk]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [chunk_of(data[a:b]) for a, b in itertools.pairwise(points)]


@given(cuts=st.lists(st.integers(0, 400_000), max_size=40), data=st.data())
@settings(max_examples=60, deadline=None)
def test_every_decoder_is_indifferent_to_chunk_boundaries(tmp_path_factory, cuts, data) -> None:
    record_bytes = _tfrecord_bytes(tmp_path_factory)
    whole = [bytes(r) for r in decode_tfrecord([chunk_of(record_bytes)], "u")]
    pieces = [bytes(r) for r in decode_tfrecord(chunked(record_bytes, cuts), "u")]
    assert pieces == whole
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for index in range(12):
            payload = bytes([index]) * data.draw(st.integers(0, 3000))
            info = tarfile.TarInfo(f"{'x' * 120}/s{index:03d}.bin")
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    tar_bytes = buffer.getvalue()
    tar_cuts = [c % (len(tar_bytes) + 1) for c in cuts]
    expected = [{k: bytes(v) if isinstance(v, memoryview) else v for k, v in s.items()}
                for s in decode_webdataset([chunk_of(tar_bytes)], "u")]  # fmt: skip
    got = [{k: bytes(v) if isinstance(v, memoryview) else v for k, v in s.items()}
           for s in decode_webdataset(chunked(tar_bytes, tar_cuts), "u")]  # fmt: skip
    assert got == expected
    assert len(got) == 12
    text = b"".join(b"line %d %s\n" % (i, b"y" * (i * 37 % 500)) for i in range(200))
    text_cuts = [c % (len(text) + 1) for c in cuts]
    lines = [bytes(x) for x in decode_lines(chunked(text, text_cuts), "u")]
    assert lines == text.split(b"\n")[:-1]
    record_size = len(text) // 8
    exact = text[: record_size * 8]  # a whole number of records
    fixed = [bytes(x) for x in decode_fixed(chunked(exact, text_cuts), "u", record_size)]
    assert fixed == [exact[i : i + record_size] for i in range(0, len(exact), record_size)]


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
