"""Text line shards (JSON Lines and plain lines): decoded, gathered into columns, written."""

from __future__ import annotations

import functools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastio
from fastio.formats import JsonLinesWriter, LinesWriter, columns_lines, decode_jsonl, decode_lines
from tests.formats.chunks import chunk_of, chunked, column, decode_until_error, stream


@pytest.mark.parametrize("read_size", [4096, 65_536])
def test_jsonl_round_trip(tmp_path, read_size: int) -> None:
    rng = random.Random(5)
    values = [{"i": i, "text": "x" * rng.randrange(0, 9000)} for i in range(300)]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(v) for v in values))  # no final newline
    assert list(decode_jsonl(stream(str(path), read_size), str(path))) == values
    lines = [bytes(line) for line in decode_lines(stream(str(path), read_size), str(path))]
    assert lines == path.read_bytes().split(b"\n")


def test_jsonl_bad_line(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"b": 2}\nnot json\n')
    with pytest.raises(fastio.DecodeError) as caught:
        list(decode_jsonl(stream(str(path), 4096), str(path)))
    assert (caught.value.offset, caught.value.record) == (18, 2)


# ---- columns -----------------------------------------------------------------------


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


def test_lines_full_batches_split() -> None:
    data = b"".join(b"%05d\n" % i for i in range(5000))
    batches = list(columns_lines(chunked(data, [7, 20_000]), "u", max_batch_bytes=1000))
    assert column(batches, "line") == data.split(b"\n")[:-1]
    assert len(batches) >= 25
    small = functools.partial(columns_lines, max_batch_bytes=1000)
    _, error = decode_until_error(small, chunked(b"x" * 3000 + b"\nshort\n", [5]), "u")
    assert "does not fit" in str(error)


# ---- writing -----------------------------------------------------------------------


def test_writers_write_what_the_decoders_read(tmp_path) -> None:
    values = [{"i": index, "text": "\u00e9" * index} for index in range(100)]
    path = tmp_path / "written.jsonl"
    with open(path, "wb") as file, JsonLinesWriter(file) as writer:
        for value in values:
            writer.write(value)
    assert list(decode_jsonl(stream(str(path), 4096), str(path))) == values
    lines = ["", "plain", "\u00fcn\u00ef", "x" * 5000]
    path = tmp_path / "written.txt"
    with open(path, "wb") as file, LinesWriter(file) as writer:
        for line in lines:
            writer.write(line)
    assert [bytes(x).decode() for x in decode_lines(stream(str(path), 4096), str(path))] == lines
    with pytest.raises(ValueError, match="newline"):
        writer.write("two\nlines")


def test_json_numbers_of_both_kinds_batch_as_floats(tmp_path) -> None:
    """Integers in one shard and floats in the next (or the same field as
    both, as JSON writers do): one column of floats, every row."""
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n{"x": 2}\n')
    (tmp_path / "b.jsonl").write_text('{"x": 1.5}\n{"x": 2, "y": [1]}\n')
    urls = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    for on_error in ("raise", "skip"):
        dataset = fastio.Dataset(
            urls, shuffle=False, on_error=on_error, index_dir=tmp_path / on_error
        )
        samples = list(dataset)
        for _ in range(2):  # never seen (streamed), then indexed
            rows = [row for batch in dataset.batches(8) for row in batch.to_pylist()]
            assert [row["x"] for row in rows] == [sample["x"] for sample in samples]
            assert [row.get("y") for row in rows] == [None, None, None, [1]]
        assert dataset.stats()["skipped"] == 0


def test_json_fields_of_two_types_are_no_batch_and_no_damage(tmp_path) -> None:
    """Every line is a JSON object, but a field is a number in one and text
    in another: no Arrow column holds both. A clear error under every policy
    (no intact line is skipped as damage); samples deliver them all."""
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"x": 1}\n{"x": "two"}\n{"x": 3}\n')
    for indexed in (False, True):
        for on_error in ("raise", "skip"):
            folder = tmp_path / f"{on_error}{indexed}"
            dataset = fastio.Dataset(str(path), shuffle=False, on_error=on_error, index_dir=folder)
            if indexed:
                dataset.index()
            with pytest.raises(fastio.MixedTypesError, match="iterate samples"):
                list(dataset.batches(8))
            assert dataset.stats()["skipped"] == 0
            assert [sample["x"] for sample in dataset] == [1, "two", 3]


@pytest.mark.parametrize("seen", [False, True], ids=["never seen", "indexed"])
def test_json_lines_longer_than_the_parser_s_blocks_batch(tmp_path, seen) -> None:
    """A line of 3 MB among short ones (the JSON parser reads 1 MiB blocks):
    its batch holds it, as samples do; no field has two types."""
    rows = [{"id": i, "text": "x" * (3_000_000 if i == 5 else 10)} for i in range(12)]
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    dataset = fastio.Dataset(str(path), shuffle=False, index_dir=tmp_path / "index")
    if seen:
        dataset.index()
    got = [row for batch in dataset.batches(4) for row in batch.to_pylist()]
    assert got == rows
    assert list(dataset) == rows


@pytest.mark.parametrize("batches", [False, True], ids=["samples", "batches"])
@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_a_json_line_with_an_encoded_surrogate_is_not_utf8(tmp_path, batches, on_error) -> None:
    """ED A0 80 encodes a lone surrogate, which UTF-8 does not allow (Python's
    codec refuses it, and no Arrow string may hold it; ``json.loads`` of
    bytes lets it through): that line is damage, its own sample alone."""
    lines = [json.dumps({"id": i, "text": f"row {i}"}).encode() for i in range(6)]
    lines[3] = b'{"id": 3, "text": "\xed\xa0\x80"}'
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    dataset = fastio.Dataset(str(path), shuffle=False, on_error=on_error)

    def epoch() -> list[dict]:
        if batches:
            return [row for batch in dataset.batches(2) for row in batch.to_pylist()]
        return list(dataset)

    if on_error == "raise":
        with pytest.raises(fastio.DecodeError, match="UTF-8") as caught:
            epoch()
        assert caught.value.record == 3
        assert caught.value.offset == sum(len(line) + 1 for line in lines[:3])
    else:
        assert [row["id"] for row in epoch()] == [0, 1, 2, 4, 5]
        assert dataset.stats()["skipped"] == 1


def test_lines_that_end_in_crlf_come_without_the_return(tmp_path) -> None:
    """Windows' newline ends a line as "\\n" does (samples and batches); a
    return inside a line stays."""
    path = tmp_path / "windows.txt"
    path.write_bytes(b"first\r\nse\rcond\r\nthird\n\r\nlast\r")
    expected = ["first", "se\rcond", "third", "", "last"]
    dataset = fastio.Dataset(str(path), format="lines", shuffle=False, index_dir=tmp_path / "i")
    for _ in range(2):  # never seen, then indexed
        assert list(dataset) == expected
        assert [row for batch in dataset.batches(2) for row in batch.column(0).to_pylist()] == (
            expected
        )
