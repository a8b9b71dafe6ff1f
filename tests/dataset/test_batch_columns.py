"""Arrow batches of formats without a schema (TFRecord Examples, JSON lines)
keep every column the dataset's batches have had, in one type each: a shard
without a feature does not drop its column from the batches made of it, so
that a consumer of a fixed signature (tf.data's ``output_signature``, a
compiled step) does not fail in the middle of an epoch."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from tfrecord.writer import TFRecordWriter as PeerWriter
from torch.utils.data import DataLoader
from webdataset import TarWriter

import fastio

SHARDS, PER_SHARD, BATCH = 3, 40, 16


def _tfrecords(folder: Path) -> list[str]:
    """Shards written by the tfrecord package; only the last one's Examples
    have a ``label``."""
    folder.mkdir()
    urls = []
    for shard in range(SHARDS):
        path = folder / f"train-{shard}.tfrecord"
        writer = PeerWriter(str(path))
        for row in range(PER_SHARD):
            features = {"id": (shard * PER_SHARD + row, "int")}
            if shard == SHARDS - 1:
                features["label"] = (row % 10, "int")
            writer.write(features)
        writer.close()
        urls.append(str(path))
    return urls


def _labels(batches: list[pa.RecordBatch]) -> dict[int, list[int] | None]:
    found = {}
    for batch in batches:
        identities, labels = batch.column("id").to_pylist(), batch.column("label").to_pylist()
        for identity, label in zip(identities, labels, strict=True):
            found[identity[0]] = label
    return found


def _expected_labels() -> dict[int, list[int] | None]:
    return {shard * PER_SHARD + row: [row % 10] if shard == SHARDS - 1 else None
            for shard in range(SHARDS) for row in range(PER_SHARD)}  # fmt: skip


@pytest.mark.parametrize("shuffle", [False, True], ids=["stored order", "shuffled"])
def test_a_feature_of_some_shards_is_a_column_of_every_batch_after_a_pass(tmp_path, shuffle):
    """In one process: once a batch had the column, every later batch has it
    (null where an Example lacks the feature); from the second pass on,
    every batch."""
    urls = _tfrecords(tmp_path / "data")
    dataset = fastio.Dataset(urls, shuffle=shuffle, index_dir=str(tmp_path / "index"))
    first = list(dataset.batches(BATCH))
    named = ["label" in batch.schema.names for batch in first]
    assert named[named.index(True) :] == [True] * (len(named) - named.index(True))
    for _ in range(2):
        later = list(dataset.batches(BATCH))
        assert all(batch.schema.equals(later[0].schema) for batch in later)
        assert later[0].schema.names == ["id", "label"]
        assert _labels(later) == _expected_labels()


@pytest.mark.parametrize(("persistent", "seed"), [(False, 1), (True, 0)],
                         ids=["made anew", "persistent"])  # fmt: skip
def test_dataloader_workers_make_every_batch_with_every_column(tmp_path, persistent, seed):
    """Workers made anew each epoch start from the columns the workers before
    them met, kept beside the dataset's indexes; persistent workers that did
    not meet the labelled shard in an epoch learn of its column from the
    others. Each worker's first batch depends on the shard it starts with
    (the labelled shard writes ``label`` before ``id``): from the second
    epoch on, every batch of every worker has one schema, in name order."""
    urls = _tfrecords(tmp_path / "data")
    dataset = fastio.Dataset(urls, shuffle=True, seed=seed, index_dir=str(tmp_path / "index"))
    loader = DataLoader(dataset.batches(BATCH), batch_size=None, num_workers=2,
                        persistent_workers=persistent)  # fmt: skip
    first = list(loader)  # the first epoch meets the label in the last shard
    assert all(batch.schema.names == ["id", "label"] for batch in first
               if "label" in batch.schema.names)  # fmt: skip
    for epoch in (1, 2):
        dataset.set_epoch(epoch)
        batches = list(loader)
        assert all(batch.schema.names == ["id", "label"] for batch in batches)
        assert _labels(batches) == _expected_labels()


def test_json_lines_batches_keep_one_type_and_every_field(tmp_path):
    """Integers in one shard and floats in another make floats in every
    batch once both were met; a field of one shard only is a column of
    every batch, null where a line lacks it; columns in name order."""
    urls = []
    for shard in range(SHARDS):
        path = tmp_path / f"part-{shard}.jsonl"
        lines = []
        for row in range(PER_SHARD):
            number = shard * PER_SHARD + row
            line = {"id": number, "x": number * 0.5 if shard == 1 else number}
            if shard == 2:
                line["extra"] = "e"
            lines.append(json.dumps(line) + "\n")
        path.write_text("".join(lines))
        urls.append(str(path))
    dataset = fastio.Dataset(urls, shuffle=False, index_dir=str(tmp_path / "index"))
    list(dataset.batches(BATCH))
    batches = list(dataset.batches(BATCH))
    schema = pa.schema([("extra", pa.string()), ("id", pa.int64()), ("x", pa.float64())])
    assert all(batch.schema.equals(schema) for batch in batches)
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [row["x"] for row in rows] == [n * 0.5 if PER_SHARD <= n < 2 * PER_SHARD else float(n)
                                          for n in range(SHARDS * PER_SHARD)]  # fmt: skip
    assert [row["extra"] for row in rows] == [None] * 2 * PER_SHARD + ["e"] * PER_SHARD


def test_webdataset_batches_name_the_sample_first_then_extensions_in_order(tmp_path):
    """Shards written by webdataset's ``TarWriter``, one with extensions the
    others lack (one that sorts before ``__key__``): from the second pass
    on, every batch has ``__key__``, ``__url__``, then every extension in
    name order, whatever shard the shuffle starts with."""
    urls = []
    for shard in range(SHARDS):
        path = tmp_path / f"shard-{shard}.tar"
        with TarWriter(str(path)) as writer:
            for row in range(PER_SHARD):
                sample = {"__key__": f"s{shard}-{row:03d}", "txt": f"{row}", "cls": str(shard)}
                if shard == 1:
                    sample["0.json"], sample["aux"] = b"{}", bytes([row])
                writer.write(sample)
        urls.append(str(path))
    dataset = fastio.Dataset(urls, shuffle=True, seed=3, index_dir=str(tmp_path / "index"))
    list(dataset.batches(BATCH))
    batches = list(dataset.batches(BATCH))
    names = ["__key__", "__url__", "0.json", "aux", "cls", "txt"]
    assert all(batch.schema.names == names for batch in batches)
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert len(rows) == SHARDS * PER_SHARD
    assert sorted(row["aux"] for row in rows if row["aux"] is not None) == [
        bytes([row]) for row in range(PER_SHARD)]  # fmt: skip
    assert all((row["0.json"] is None) == (row["cls"] != b"1") for row in rows)


def test_a_column_whose_types_do_not_join_is_a_mixed_types_error(tmp_path):
    """A field of text in one shard and of numbers in another: no one type
    holds both, which the batches say rather than change their columns."""
    (tmp_path / "a.jsonl").write_text("".join(f'{{"x": {n}}}\n' for n in range(20)))
    (tmp_path / "b.jsonl").write_text("".join(f'{{"x": "t{n}"}}\n' for n in range(20)))
    dataset = fastio.Dataset(str(tmp_path / "{a,b}.jsonl"), shuffle=False,
                             index_dir=str(tmp_path / "index"))  # fmt: skip
    with pytest.raises(fastio.MixedTypesError, match="iterate samples"):
        list(dataset.batches(8))
    assert len(list(dataset)) == 40
