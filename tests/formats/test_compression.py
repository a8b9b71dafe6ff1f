"""Compressed shards (gzip, zstd): decompressed between the reader and a decoder."""

from __future__ import annotations

import pytest

import fastio
from fastio.formats import decode_tfrecord, decompress, parse_example
from tests.formats.chunks import stream
from tests.formats.test_tfrecord import write_examples


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
    chunks = decompress(stream(path, read_size), path, piece_size=50_000)
    records = list(decode_tfrecord(chunks, path))
    assert [parse_example(r)["index"].tolist() for r in records] == [[w["index"]] for w in written]


def test_compression_detected_from_magic_bytes(tmp_path) -> None:
    _path, written = compressed_tfrecord(tmp_path, "gzip")
    renamed = tmp_path / "no-extension"
    (tmp_path / "shard.tfrecord.gz").rename(renamed)
    chunks = decompress(stream(str(renamed), 65_536), str(renamed))
    assert len(list(decode_tfrecord(chunks, str(renamed)))) == len(written)


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_truncated_and_damaged_compressed_shards(tmp_path, codec: str) -> None:
    path, _ = compressed_tfrecord(tmp_path, codec, examples=10)
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data[: len(data) * 3 // 4])
    with pytest.raises(fastio.DecodeError) as caught:  # truncated, or a record cut short
        list(decode_tfrecord(decompress(stream(path, 4096), path), path))
    assert caught.value.url == path
    damaged = bytearray(data)
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = b"\xaa" * 64
    with open(path, "wb") as handle:
        handle.write(damaged)
    with pytest.raises(fastio.DecodeError) as caught:
        list(decode_tfrecord(decompress(stream(path, 4096), path), path))
    assert caught.value.url == path


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("read_size", [4096, 1 << 20])
def test_zero_padding_after_the_stream_is_no_damage(tmp_path, codec: str, read_size: int) -> None:
    """Zeros after a compressed stream (a tape's or a file system's blocks)
    are padding, as gzip reads them: every record, no error. Bytes after the
    stream that are neither zeros nor another stream are damage, named where
    they start."""
    path, written = compressed_tfrecord(tmp_path, codec)
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data + bytes(5000))
    records = list(decode_tfrecord(decompress(stream(path, read_size), path), path))
    assert len(records) == len(written)
    with open(path, "wb") as handle:
        handle.write(data + bytes(700) + b"not a stream" * 20)
    got = []
    with pytest.raises(fastio.CorruptRecordError) as caught:
        got.extend(decode_tfrecord(decompress(stream(path, read_size), path), path))
    assert len(got) == len(written)
    assert (caught.value.url, caught.value.offset) == (path, len(data) + 700)
