"""Shard formats on files written by the peers' own writers, read through the real reader.

Small read sizes make records straddle chunk boundaries, so the carry path is
exercised as much as the zero-copy one.
"""

from __future__ import annotations

import io
import json
import pickle
import random
import tarfile

import numpy as np
import pytest
from tfrecord.writer import TFRecordWriter

import fastio
from fastio._native import scan_tar
from fastio.formats import (
    decode_jsonl,
    decode_lines,
    decode_tfrecord,
    decode_webdataset,
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
    members = scan_tar(bytes(data))[0]
    second_member = members[4][4]  # the header of the fifth member: the second sample's jpg
    data[second_member + 3] ^= 0x40
    path.write_bytes(data)
    with pytest.raises(fastio.CorruptRecordError) as caught:
        list(decode_webdataset(shard_chunks(str(path), 4096), str(path)))
    assert (caught.value.url, caught.value.offset) == (str(path), second_member)


def test_webdataset_truncated_shard(tmp_path) -> None:
    path = tmp_path / "cut.tar"
    write_webdataset(path, 6, tarfile.GNU_FORMAT)
    data = path.read_bytes()
    members = scan_tar(data)[0]
    cut = members[-1][1] + 10  # inside the last member's data
    path.write_bytes(data[:cut])
    with pytest.raises(fastio.TruncatedShardError) as caught:
        list(decode_webdataset(shard_chunks(str(path), 4096), str(path)))
    assert caught.value.offset == members[-1][4]


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
