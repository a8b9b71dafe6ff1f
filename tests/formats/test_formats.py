"""What holds for every format: any chunking gives the same records; shard URLs."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import fastio
from fastio.formats import decode_fixed, decode_lines, decode_tfrecord, decode_webdataset
from tests.formats.chunks import chunk_of, chunked
from tests.formats.test_tfrecord import write_examples

_TFRECORD_DATA: dict[str, bytes] = {}


def _tfrecord_bytes(tmp_path_factory) -> bytes:
    if "data" not in _TFRECORD_DATA:
        path = tmp_path_factory.mktemp("chunking") / "c.tfrecord"
        write_examples(path, 25, seed=3)
        _TFRECORD_DATA["data"] = path.read_bytes()
    return _TFRECORD_DATA["data"]


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


# ---- URLs --------------------------------------------------------------------------


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


_NUMBERS = st.integers(0, 1200)
_PARTS = st.text("ab/-_.\u00e9\U0001f600", max_size=4)  # one, two and four bytes in UTF-8


@given(_PARTS, _NUMBERS, _NUMBERS, st.integers(0, 5), st.integers(0, 5), _PARTS,
       st.sampled_from(["", "{x,yz}", "{0..2}", "\\{", "{", "}", "{7..3}", "{a..c}"]))  # fmt: skip
@example("s-", 0, 12, 0, 0, ".tar", "")  # a lone 0 pads nothing
@example("s-", 0, 12, 1, 0, ".tar", "")  # 00 pads
def test_expand_urls_names_the_shards_braceexpand_names(
    head: str, first: int, last: int, first_zeros: int, last_zeros: int, tail: str, more: str
) -> None:
    """A range of numbers is expanded without braceexpand's parser; the names,
    their order and their zero padding are braceexpand's, and so for every
    pattern the fast path leaves to it (ranges that count down, lists,
    escapes, more than one range, unbalanced braces)."""
    from braceexpand import UnbalancedBracesError, braceexpand

    pattern = f"{head}{{{'0' * first_zeros}{first}..{'0' * last_zeros}{last}}}{tail}{more}"
    try:
        expected = list(braceexpand(pattern))
    except UnbalancedBracesError:
        with pytest.raises(UnbalancedBracesError):
            fastio.expand_urls(pattern)
        return
    assert fastio.expand_urls(pattern) == expected


def test_a_range_of_shards_is_named_without_importing_braceexpand() -> None:
    """Its import compiles expressions before a dataset's first sample: a
    fresh process naming one range of shards never imports it, and one
    naming a list in braces still gets braceexpand's names."""
    script = (
        "import sys, fastio, fastio.dataset\n"
        "names = fastio.expand_urls('/data/s-{0000..0002}.tar')\n"
        "assert names == [f'/data/s-000{i}.tar' for i in range(3)], names\n"
        "assert 'braceexpand' not in sys.modules\n"
        "assert fastio.expand_urls('s3://b/{train,val}-{0..1}.tar') == "
        "['s3://b/train-0.tar', 's3://b/train-1.tar', 's3://b/val-0.tar', 's3://b/val-1.tar']\n"
        "assert 'braceexpand' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_expand_urls_globs_remote_filesystems_through_fsspec() -> None:
    import fsspec

    memory = fsspec.filesystem("memory")
    for index in range(3):
        memory.pipe(f"/fastio-test/shard-{index}.tar", b"x")
    assert fastio.expand_urls("memory://fastio-test/shard-*.tar") == [
        f"memory:///fastio-test/shard-{index}.tar" for index in range(3)
    ]


def test_a_remote_urls_query_does_not_hide_its_extension() -> None:
    from fastio.formats._compression import codec_for
    from fastio.formats._shards import format_for_url

    signed = "https://bucket.example.com/a/b-0001.tar.gz?X-Amz-Signature=x%2Fy.json#part"
    assert (format_for_url(signed), codec_for(signed)) == ("webdataset", "gzip")
    assert format_for_url("s3://bucket/data.parquet?versionId=3") == "parquet"
    with pytest.raises(ValueError, match="cannot tell the format"):
        format_for_url("https://example.com/download?file=x.tar")  # the path names none
    assert format_for_url("/data/odd?name.jsonl") == "jsonl"  # a local name is taken whole
