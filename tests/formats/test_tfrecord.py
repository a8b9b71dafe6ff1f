"""TFRecord shards and tf.train.Example records: decoded, gathered into columns,
parsed (against the tfrecord package and a pure-Python parser), and written."""

from __future__ import annotations

import functools
import pickle
import random
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tfrecord.writer import TFRecordWriter as PeerWriter

import fastio
from fastio.formats import (
    TFRecordWriter,
    columns_tfrecord,
    decode_tfrecord,
    example_parts,
    parse_example,
)
from fastio.formats._tfrecord import locate_tfrecords
from tests.formats.chunks import (
    READ_SIZES,
    chunk_of,
    chunked,
    column,
    decode_until_error,
    stream,
)


def write_examples(path, count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    writer = PeerWriter(str(path))
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
    records = list(decode_tfrecord(stream(str(path), read_size), str(path)))
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
        for record in decode_tfrecord(stream(str(path), 4096), str(path)):
            decoded.append(bytes(record))
    error = caught.value
    assert (error.url, error.offset, error.record) == (str(path), offset, 7)
    assert str(path) in str(error)
    assert f"byte {offset}" in str(error)
    assert len(decoded) == 7
    assert isinstance(pickle.loads(pickle.dumps(error)), fastio.CorruptRecordError)
    # Unverified, the damaged record comes through.
    unverified = list(decode_tfrecord(stream(str(path), 4096), str(path), verify=False))
    assert len(unverified) == 20


@pytest.mark.parametrize("read_size", [1 << 20, 64 << 20])
def test_damaged_records_anywhere_in_a_read_each_come_in_their_place(tmp_path, read_size) -> None:
    """Data checksums are checked a few records at a time, as the records are
    taken: records damaged at the first, last and inner places of those
    groups (and of the reads) each come as their error, in their place,
    with every other record whole and in order; unskipped, the first raises
    after exactly the records before it."""
    path = tmp_path / "bad.tfrecord"
    write_examples(path, 700, seed=3)
    data = bytearray(path.read_bytes())
    located = list(locate_tfrecords([chunk_of(bytes(data))], str(path)))
    rng = random.Random(7)
    damaged = sorted({0, 1, 255, 256, 257, 511, 512, len(located) - 1,
                      *rng.sample(range(len(located)), 12)})  # fmt: skip
    for index in damaged:
        start, end, record = located[index]
        if len(record) == 0:
            data[end - 1] ^= 0xFF  # no data: its checksum itself
        else:
            data[start + 12 + len(record) // 2] ^= 0xFF
    path.write_bytes(data)

    items = list(locate_tfrecords(stream(str(path), read_size), str(path), step_over=True))
    assert [(start, end) for start, end, _ in items] == [(s, e) for s, e, _ in located]
    for index, (start, _, item) in enumerate(items):
        if index in damaged:
            assert isinstance(item, fastio.CorruptRecordError)
            assert (item.url, item.offset, item.record) == (str(path), start, index)
            assert "data checksum" in str(item)
        else:
            assert bytes(item) == bytes(located[index][2])

    decoded = []
    with pytest.raises(fastio.CorruptRecordError) as caught:
        for record in decode_tfrecord(stream(str(path), read_size), str(path)):
            decoded.append(bytes(record))
    assert (caught.value.offset, caught.value.record) == (located[damaged[0]][0], damaged[0])
    assert decoded == [bytes(r) for _, _, r in located[: damaged[0]]]


def test_tfrecord_truncated_shard(tmp_path) -> None:
    path = tmp_path / "cut.tfrecord"
    write_examples(path, 10)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(fastio.TruncatedShardError) as caught:
        list(decode_tfrecord(stream(str(path), 65_536), str(path)))
    assert caught.value.url == str(path)
    assert 0 < caught.value.offset < len(data)


# ---- columns -----------------------------------------------------------------------


def write_tfrecords(path, count: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    writer = PeerWriter(str(path))
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


def test_tfrecord_full_batches_split(tfrecord_shard: str) -> None:
    expected = [bytes(r) for r in decode_tfrecord(stream(tfrecord_shard, 1 << 20), tfrecord_shard)]
    chunks = stream(tfrecord_shard, 1 << 20)
    batches = list(columns_tfrecord(chunks, tfrecord_shard, max_batch_bytes=60_000))
    assert column(batches, "record") == expected
    assert all(batch.nbytes < 60_000 + 8 * batch.num_rows + 64 for batch in batches)
    small = functools.partial(columns_tfrecord, max_batch_bytes=1000)
    _, error = decode_until_error(small, stream(tfrecord_shard, 4096), tfrecord_shard)
    assert "does not fit" in str(error)


# ---- tf.train.Example --------------------------------------------------------------
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
                for part, wire, value in _fields(entry):
                    if part == 1:
                        if wire == 0:  # bytes() of a varint would allocate that many
                            raise TypeError("a name given as a varint")
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
    writer = PeerWriter(path)
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


def test_parse_example_rejects_a_key_given_twice() -> None:
    # The first key is not UTF-8, and a parser that kept the last key alone never
    # checked it: the test above found such a record.
    entry = wire_field(1, 2, b"\n\x01\x80") + wire_field(1, 2, b"a") + wire_field(2, 2, b"")
    with pytest.raises(fastio.DecodeError, match="key twice"):
        parse_example(wire_field(1, 2, wire_field(1, 2, entry)))


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


def test_parse_example_rejects_garbage() -> None:
    with pytest.raises(fastio.DecodeError):
        parse_example(b"\x0a\xff\xff\xff")


# ---- writing -----------------------------------------------------------------------


def test_writer_writes_what_the_tfrecord_package_reads(tmp_path) -> None:
    from tfrecord.reader import tfrecord_loader

    path = str(tmp_path / "written.tfrecord")
    rng = random.Random(8)
    written = [
        {
            "key": b"k%d" % index,
            "label": rng.randrange(-(2**40), 2**40),
            "weight": rng.uniform(-1, 1),
            "data": rng.randbytes(rng.choice([0, 255, 256, 4000])),
        }
        for index in range(60)
    ]
    with open(path, "wb") as file, TFRecordWriter(file) as writer:
        for example in written:
            writer.write(*example_parts(example))
    description = {"key": "byte", "label": "int", "weight": "float", "data": "byte"}
    theirs = list(tfrecord_loader(path, None, description))
    ours = [parse_example(r) for r in decode_tfrecord(stream(path, 4096), path)]  # CRCs checked
    assert len(ours) == len(theirs) == len(written)
    for parsed, loaded, example in zip(ours, theirs, written, strict=True):
        assert parsed["key"] == [example["key"]]
        assert parsed["data"] == [example["data"]]
        assert parsed["label"].tolist() == loaded["label"].tolist() == [example["label"]]
        as_float32 = struct.unpack("<f", struct.pack("<f", example["weight"]))
        assert parsed["weight"].tolist() == list(as_float32)


def test_example_parts_leave_large_values_as_they_are() -> None:
    payload = bytes(range(256)) * 4
    parts = example_parts({"small": b"abc", "data": payload, "n": 7})
    assert any(part is payload for part in parts)
    assert len(parts) == 3  # the head, the payload and what follows it
    assert parse_example(b"".join(parts))["data"] == [payload]
    assert parse_example(b"".join(example_parts({}))) == {}


def test_examples_are_made_as_they_are_taken_not_a_read_at_a_time(tmp_path) -> None:
    """A read of small examples holds thousands: made all at once, they lived
    together long enough for the garbage collector to move them to its oldest
    generation, whose collections walk the whole process (half the time of
    an epoch of 1 KB examples, with torch imported). They are made a few
    hundred at a time, and come as the tfrecord package reads them."""
    import gc

    from tfrecord.reader import tfrecord_loader

    path = str(tmp_path / "small.tfrecord")
    writer = PeerWriter(path)
    for index in range(3000):
        writer.write({"image": (b"x" * (index % 50), "byte"), "index": (index, "int")})
    writer.close()
    theirs = list(tfrecord_loader(path, None, {"image": "byte", "index": "int"}))

    def made() -> int:  # examples alive as dicts (a dict holding lists is tracked)
        keys = {"image", "index"}
        return sum(1 for o in gc.get_objects() if type(o) is dict and o.keys() == keys)

    with fastio.Dataset(path, format="tfrecord", shuffle=False) as dataset:
        assert len(list(dataset)) == 3000  # a first pass, which indexes the shard
    ours, alive = [], []
    with fastio.Dataset(path, format="tfrecord", shuffle=False) as dataset:  # by its index
        for sample in dataset:
            if len(ours) % 300 == 150:
                alive.append(made() - len(ours))  # made, not yet taken
            ours.append(sample)
    assert len(alive) == 10
    assert max(alive) <= 256  # 1,600 where a read's examples were made at once
    assert len(ours) == len(theirs) == 3000
    for parsed, loaded in zip(ours, theirs, strict=True):
        assert parsed["image"] == [bytes(loaded["image"])]
        assert parsed["index"].tolist() == loaded["index"].tolist()
