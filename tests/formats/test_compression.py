"""Compressed shards (gzip, zstd): decompressed between the reader and a decoder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


def test_shards_ending_alike_are_laid_out_by_what_each_names() -> None:
    """Shards are laid out as their URLs say they are compressed, a dataset's
    many at once: an fsspec chain names its shard in its first link, and
    two chains can end alike (two members of one zip) while one member is
    compressed and the other is not; so can signed URLs with a query."""
    import numpy as np

    from fastio.formats._compression import codec_for
    from fastio.formats._index import ShardIndex
    from fastio.formats._records import _uncompressed
    from fastio.formats._shards import make_format

    urls = [
        "zip://a.tar.gz::s3://bucket/both.zip",
        "zip://b.tar::s3://bucket/both.zip",
        "s3://bucket/c.tar.gz?sig=1.tar",
        "s3://bucket/d.tar?sig=2.tar",
        "/data/e.tar",
    ]
    offsets = np.arange(3, dtype=np.uint64)
    indexes = [ShardIndex(url, "webdataset", 100, 1, offsets, offsets + 1) for url in urls]
    layouts = make_format("webdataset").layouts_of(indexes)
    assert [layout.whole for layout in layouts] == [codec_for(url) is not None for url in urls]
    assert [layout.whole for layout in layouts] == [True, False, True, False, False]
    assert not _uncompressed(urls)
    assert _uncompressed(urls[1::2])
    assert not _uncompressed(urls[:2][::-1])


@given(st.lists(st.tuples(st.sampled_from(["", "/d/", "s3://b/", "a\0"]),
                          st.sampled_from(["s", "shard-01", "x.y", ""]),
                          st.sampled_from([".tar", ".tar.gz", ".gz", "a.zst", ".zst", ".tfrecord",
                                           "?v=1", ".tar#x", "", "z.tar"])),
                min_size=1, max_size=6))  # fmt: skip
def test_whether_every_shard_is_uncompressed_is_told_as_shard_by_shard(parts) -> None:
    """Shards ending as the first does are told at once, by one count over
    them joined; any other mix (another ending, short names, a query, a NUL)
    is told as each shard's own codec tells it."""
    from fastio.formats._compression import codec_for
    from fastio.formats._records import _uncompressed

    urls = [folder + name + ending for folder, name, ending in parts]
    assert _uncompressed(urls) is all(codec_for(url) is None for url in urls)
