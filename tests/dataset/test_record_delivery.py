"""TFRecord shards of tf.train.Example records through a Dataset: samples and
batches deliver the same values (the per-scan parse and the column-wise
batches), with and without checksum checks, and a damaged record or one that
is not an example costs that sample alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import fastio
from fastio._native import scan_tfrecords
from fastio.formats import TFRecordWriter, example_parts
from fastio.formats._layout import _plain, batch_of
from tests.formats.test_tfrecord import wire_field, write_examples


def as_batch(samples: list[dict]) -> pa.RecordBatch:
    """What the batches must equal: pyarrow's own inference over the samples."""
    return pa.RecordBatch.from_pylist([_plain(sample) for sample in samples])


def in_name_order(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A Dataset's batches of named records have their columns in name order."""
    return batch.select(sorted(batch.schema.names))


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("examples")
    paths = [str(folder / f"train-{n}.tfrecord") for n in range(2)]
    for seed, path in enumerate(paths):  # payloads of 0 B to 110 KB, empty float lists
        write_examples(path, 40, seed)
    return paths


@pytest.mark.parametrize(("verify", "read_size"), [(True, "1MiB"), (False, "1MiB"),
                                                   (True, "64KiB")])  # fmt: skip
def test_example_batches_equal_the_samples(tmp_path, shards: list[str], verify: bool,
                                           read_size: str) -> None:  # fmt: skip
    """In reads of 64 KiB, a read holds one or two examples of up to 110 KB:
    each batch of 7 is built from several reads, the examples parsed into it
    as each read comes in."""
    options = {"format": "tfrecord", "shuffle": False, "verify": verify,
               "index_dir": tmp_path, "read_size": read_size}  # fmt: skip
    with fastio.Dataset(shards, **options) as dataset:
        dataset.index()  # read by samples, not streamed
        samples = list(dataset)
        batches = list(dataset.batches(7))
    assert len(samples) == 80
    assert [b.num_rows for b in batches] == [7] * 11 + [3]
    joined = pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
    expected = in_name_order(as_batch(samples))
    assert joined.schema == expected.schema
    assert joined.equals(expected)


@pytest.mark.parametrize("read_size", ["1MiB", "64KiB"])
def test_a_batch_untyped_midway_holds_every_row(tmp_path, read_size: str) -> None:
    """An example whose feature has no value list (pyarrow types it, fastio's
    columns do not) in the middle of a batch built from several reads: the
    batch goes on from the rows already built, and every batch equals
    pyarrow's inference over its samples."""
    no_values = wire_field(1, 2, b"image") + wire_field(2, 2, b"")  # a Feature, no list
    odd = wire_field(1, 2, wire_field(1, 2, no_values))
    path = tmp_path / "train-0.tfrecord"
    with path.open("wb") as file, TFRecordWriter(file) as writer:
        for number in range(20):
            if number == 10:
                writer.write(odd)
            else:
                writer.write(*example_parts({"image": bytes([number]) * 30_000,
                                             "label": number}))  # fmt: skip
    options = {"format": "tfrecord", "shuffle": False, "index_dir": tmp_path / "index",
               "read_size": read_size}  # fmt: skip
    with fastio.Dataset(str(path), **options) as dataset:
        samples = list(dataset)
        batches = list(dataset.batches(7))
    assert [b.num_rows for b in batches] == [7, 7, 6]
    for number, batch in enumerate(batches):
        batch.validate(full=True)
        assert batch.equals(batch_of(samples[7 * number : 7 * number + 7]))
    assert batches[1].column("image").to_pylist()[3] == []  # the odd one, in its place
    assert batches[1].column("label").to_pylist()[3] is None


@pytest.mark.parametrize(
    "column",
    [
        [[b"a", b""], [], [b"xyz" * 40_000]],  # bytes features, some empty
        [[b""], [b""]],  # every value empty
        [[], []],  # no values at all: list<null>
        [["text"], ["more"]],  # not bytes: as pyarrow infers
        [[1, 2], [3]],
    ],
)
def test_a_batch_of_lists_is_typed_as_pyarrow_infers_it(column) -> None:
    samples = [{"feature": value, "n": len(value)} for value in column]
    got = batch_of(samples)
    expected = as_batch(samples)
    assert got.schema == expected.schema
    assert got.equals(expected)


@pytest.mark.parametrize(
    "column",
    [
        [b"a", None, b"xyz" * 40_000],  # a member some samples lack: null there
        [b"", b""],
        [None, None],  # no sample has it: a null column
        [b"bytes", "text"],  # not all bytes: as pyarrow infers
    ],
)
def test_a_batch_of_bytes_values_is_typed_as_pyarrow_infers_it(column) -> None:
    samples = [{"__key__": f"k{n}", "bin": value} for n, value in enumerate(column)]
    got = batch_of(samples)
    expected = as_batch(samples)
    assert got.schema == expected.schema
    assert got.equals(expected)


def _same_sample(got: dict, expected: dict) -> bool:
    return got.keys() == expected.keys() and all(
        np.array_equal(value, expected[name]) if isinstance(value, np.ndarray)
        else value == expected[name]
        for name, value in got.items()
    )  # fmt: skip


@pytest.mark.parametrize("streamed", [False, True])
def test_shuffled_examples_are_the_stored_ones(tmp_path, shards: list[str], streamed) -> None:
    """Examples of up to 16 KiB wait in a shuffle window encoded and are
    parsed as they are delivered, larger ones are parsed as they are read:
    either way each is the sample stored order delivers, in the planned order
    (or, in a first epoch streamed from shards never seen, in its own)."""
    options = {"format": "tfrecord", "seed": 5, "shuffle_buffer": 300_000}  # several windows
    with fastio.Dataset(shards, shuffle=False, index_dir=tmp_path / "planned",
                        **options) as dataset:  # fmt: skip
        dataset.index()
        stored = list(dataset)
    index_dir = tmp_path / ("streamed" if streamed else "planned")
    with fastio.Dataset(shards, shuffle=True, index_dir=index_dir, **options) as dataset:
        shuffled = list(dataset)
        order = dataset.order(0)
    sizes = {len(sample["image"][0]) for sample in stored}
    assert min(sizes) < 16 << 10 < max(sizes)  # both ways are taken
    assert len(shuffled) == len(stored)
    if streamed:
        matched = [next(n for n, s in enumerate(stored) if _same_sample(got, s))
                   for got in shuffled]  # fmt: skip
        assert sorted(matched) == list(range(len(stored)))
        assert matched != sorted(matched)
        return
    assert list(order) != sorted(order)
    for got, number in zip(shuffled, order, strict=True):
        assert _same_sample(got, stored[number])


@pytest.mark.parametrize(("shuffle", "streamed"), [(False, False), (True, False), (True, True)])
def test_a_record_that_is_not_an_example_costs_itself(tmp_path, shuffle, streamed) -> None:
    """In stored order, shuffled, and shuffled in a first epoch streamed from
    a shard never seen (where the record is framed and indexed, and found not
    to be an example only as it is delivered)."""
    path = tmp_path / "mixed.tfrecord"
    with open(path, "wb") as file, TFRecordWriter(file) as writer:
        for number in range(30):
            if number in (3, 17):
                writer.write(b"\xff\xff not a tf.train.Example")
            else:
                writer.write(*example_parts({"data": bytes([number]) * 1000, "label": number}))
    options = {"format": "tfrecord", "shuffle": shuffle, "index_dir": tmp_path / "skip"}
    with fastio.Dataset(str(path), on_error="skip", **options) as dataset:
        if not streamed:
            dataset.index()
        labels = [int(sample["label"][0]) for sample in dataset]
        assert dataset.stats()["skipped"] == 2
        rows = sum(batch.num_rows for batch in dataset.batches(8))
    assert sorted(labels) == [n for n in range(30) if n not in (3, 17)]
    assert (labels != sorted(labels)) == shuffle
    assert rows == 28
    options["index_dir"] = tmp_path / "raise"
    strict = fastio.Dataset(str(path), **options)
    if not streamed:
        strict.index()
    with strict, pytest.raises(fastio.DecodeError) as raised:
        list(strict)
    assert raised.value.url.endswith("mixed.tfrecord")
    assert raised.value.offset > 0
    assert "not a tf.train.Example" in str(raised.value)


def test_stored_order_batches_count_a_damaged_record(tmp_path, shards: list[str]) -> None:
    damaged = tmp_path / "damaged.tfrecord"
    data = bytearray(Path(shards[0]).read_bytes())
    with fastio.Dataset(shards[0], format="tfrecord", shuffle=False,
                        index_dir=tmp_path / "scan") as dataset:  # fmt: skip
        intact = list(dataset)
    data[-5] ^= 0xFF  # the last record's data checksum
    damaged.write_bytes(data)
    with fastio.Dataset(str(damaged), format="tfrecord", shuffle=False, on_error="skip",
                        index_dir=tmp_path) as dataset:  # fmt: skip
        dataset.index()
        batches = list(dataset.batches(16))
        stats = dataset.stats()
    assert sum(b.num_rows for b in batches) + stats["skipped"] == len(intact)
    assert stats["skipped"] == 1
    delivered = pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
    assert delivered.equals(in_name_order(as_batch(intact[:-1])))


def large_examples(path: Path, count: int) -> list[bytes]:
    """Records of 60 KB, so that 1 MiB reads hold several and cut some."""
    payloads = [bytes([number]) * 60_000 + number.to_bytes(4, "little") for number in range(count)]
    with open(path, "wb") as file, TFRecordWriter(file) as writer:
        for number, payload in enumerate(payloads):
            writer.write(*example_parts({"data": payload, "label": number, "weight": 0.5}))
    return payloads


@pytest.mark.parametrize("damage", ["none", "data", "length"])
def test_records_cut_by_reads_deliver_what_small_reads_deliver(tmp_path, damage: str) -> None:
    """Large records, many of them cut by 1 MiB reads (completed in a carry
    buffer), deliver the same samples as 4 KiB reads, and skip and count the
    same damaged record."""
    path = tmp_path / "large.tfrecord"
    payloads = large_examples(path, 30)
    data = bytearray(path.read_bytes())
    start = int(scan_tfrecords(data).offsets[11]) - 12  # the 12th record's header
    if damage == "data":
        data[start + 12 + 100] ^= 0xFF
    elif damage == "length":
        data[start + 1] ^= 0x01
    path.write_bytes(data)
    delivered = {}
    for read_size in (4096, 1 << 20):
        options = {"read_size": read_size, "index_dir": tmp_path / str(read_size)}
        with fastio.Dataset(str(path), format="tfrecord", shuffle=False, on_error="skip",
                            **options) as dataset:  # fmt: skip
            samples = list(dataset)
            skipped = dataset.stats()["skipped"]
        assert len(samples) + skipped == 30
        assert skipped == (damage != "none")
        delivered[read_size] = [(bytes(s["data"][0]), int(s["label"][0])) for s in samples]
    assert delivered[4096] == delivered[1 << 20]
    expected = [(payload, number) for number, payload in enumerate(payloads)]
    assert delivered[1 << 20] == [item for item in expected if damage == "none" or item[1] != 11]
