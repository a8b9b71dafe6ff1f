"""Exact resume: stop anywhere (inside a shuffle window, with workers, in
batches), save the state, rebuild in a new process, load it; the rest of the
epoch continues exactly, and what was delivered is not read again."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

import fastio
from tests.shards import batch_keys, key_of, write

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

OPTIONS = {"seed": 11, "shuffle_buffer": 60_000, "shuffle_shards": 3}


@pytest.fixture(scope="module")
def tars(tmp_path_factory):
    return write("webdataset", tmp_path_factory.mktemp("resume"), shards=6, per_shard=40)


@pytest.mark.parametrize("format_name", ["webdataset", "tfrecord", "parquet", "npy", "jsonl"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_resume_in_process_at_random_points(tmp_path, format_name, shuffle) -> None:
    written = write(format_name, tmp_path, shards=5, per_shard=30)
    options = {**OPTIONS, "shuffle": shuffle, **written.options}
    full = [key_of(format_name, s) for s in fastio.Dataset(written.pattern, **options)]
    rng = random.Random(format_name)
    for stop in [0, 1, len(full) - 1, len(full), *rng.sample(range(len(full)), 5)]:
        first = fastio.Dataset(written.pattern, **options)
        head = []
        iterator = iter(first)
        for _ in range(stop):
            head.append(key_of(format_name, next(iterator)))
        state = first.state_dict()
        assert state["position"] == stop
        resumed = fastio.Dataset(written.pattern, **options)
        resumed.load_state_dict(json.loads(json.dumps(state)))  # plain data
        rest = [key_of(format_name, s) for s in resumed]
        assert head + rest == full, stop


@pytest.mark.parametrize("format_name", ["webdataset", "tfrecord", "npy", "arrow"])
def test_resume_between_batches(tmp_path, format_name) -> None:
    written = write(format_name, tmp_path, shards=5, per_shard=30)
    options = {**OPTIONS, **written.options}
    full = [k for b in fastio.Dataset(written.pattern, **options).batches(7)
            for k in batch_keys(format_name, b)]  # fmt: skip
    for stop in (1, 5, 9, len(full) // 7):
        first = fastio.Dataset(written.pattern, **options)
        batches = iter(first.batches(7))
        head = [k for _ in range(stop) for k in batch_keys(format_name, next(batches))]
        state = first.state_dict()
        assert state["position"] == len(head)
        resumed = fastio.Dataset(written.pattern, **options)
        resumed.load_state_dict(state)
        rest = [k for b in resumed.batches(7) for k in batch_keys(format_name, b)]
        assert head + rest == full


RESUME_SCRIPT = """
import json, sys
import fastio
from tests.shards import key_of
pattern, state = sys.argv[1], json.loads(sys.argv[2])
dataset = fastio.Dataset(pattern, **json.loads(sys.argv[3]))
dataset.load_state_dict(state)
keys = [key_of("webdataset", s) for s in dataset]
print(json.dumps({"keys": keys, "bytes_read": dataset.reader.stats().bytes_read}))
"""


def test_resume_in_a_new_process_reads_at_most_one_shard_again(tars) -> None:
    full_dataset = fastio.Dataset(tars.pattern, **OPTIONS)
    full = [key_of("webdataset", s) for s in full_dataset]
    # Keys number samples in stored order, so key k is global sample k.
    sizes = [int(end - start) for layout in full_dataset.layouts
             for start, end in zip(layout.starts, layout.ends, strict=True)]  # fmt: skip
    largest_shard = max(os.path.getsize(url) for url in tars.urls)
    for stop in (37, 150):
        first = fastio.Dataset(tars.pattern, **OPTIONS)
        iterator = iter(first)
        head = [key_of("webdataset", next(iterator)) for _ in range(stop)]
        state = first.state_dict()
        first.close()
        result = subprocess.run(
            [sys.executable, "-c", RESUME_SCRIPT, tars.pattern, json.dumps(state),
             json.dumps(OPTIONS)],
            capture_output=True, text=True, check=True,
            cwd=REPOSITORY,
        )  # fmt: skip
        resumed = json.loads(result.stdout)
        assert head + resumed["keys"] == full
        remaining_payload = sum(sizes[k] for k in resumed["keys"])
        already_delivered_read = resumed["bytes_read"] - remaining_payload
        # Bytes of already delivered samples read again (coalescing gaps) stay
        # under one shard's worth.
        assert 0 <= already_delivered_read < largest_shard


def collate_keys(samples):
    return [key_of("webdataset", s) for s in samples]


@pytest.mark.parametrize("num_workers", [1, 3])
def test_resume_with_dataloader_workers(tars, num_workers) -> None:
    def loader():
        return StatefulDataLoader(fastio.Dataset(tars.pattern, **OPTIONS), batch_size=8,
                                  num_workers=num_workers, collate_fn=collate_keys)  # fmt: skip

    full = [k for batch in loader() for k in batch]
    assert sorted(full) == [row["key"] for row in tars.samples]
    for stop in (2, 11):
        first = loader()
        head = []
        for index, batch in enumerate(first):
            head.extend(batch)
            if index == stop:
                state = first.state_dict()
                break
        del first
        second = loader()
        second.load_state_dict(state)
        rest = [k for batch in second for k in batch]
        assert head + rest == full


def test_state_of_another_dataset_or_layout_is_refused(tars, tmp_path) -> None:
    dataset = fastio.Dataset(tars.pattern, **OPTIONS)
    state = dataset.state_dict()
    other = fastio.Dataset(tars.pattern, **{**OPTIONS, "seed": 12})
    with pytest.raises(ValueError, match="seed"):
        other.load_state_dict(state)
    for field, changed in (("shuffle_buffer", 50_000), ("shuffle_shards", 4),
                           ("remainder", "drop"), ("shuffle", False)):  # fmt: skip
        with pytest.raises(ValueError, match=field):
            fastio.Dataset(tars.pattern, **{**OPTIONS, field: changed}).load_state_dict(state)
    # One rank's state of a two-rank save cannot say what the other rank delivered.
    half = fastio.Dataset(tars.pattern, rank=1, world_size=2, **OPTIONS)
    iterator = iter(half)
    next(iterator)
    alone = fastio.Dataset(tars.pattern, **OPTIONS)
    alone.load_state_dict(half.state_dict())
    with pytest.raises(ValueError, match="every rank and worker"):
        next(iter(alone))


@pytest.mark.parametrize("never_seen", [False, True], ids=["indexed", "never seen"])
@pytest.mark.parametrize("how", ["dataset", "loader, 0 workers", "loader, 2 workers"])
def test_a_state_saved_as_an_epoch_ended_resumes_with_the_next_epoch(tmp_path, how, never_seen):
    """A checkpoint at an epoch's end (after its loop), loaded by a new run:
    the next loop is the next epoch, in the order an uninterrupted run reads
    it. The state said 'epoch 0, at its end', so the next loop read the
    empty rest of epoch 0 and training lost an epoch (without workers)."""
    written = write("webdataset", tmp_path / "data", shards=3, per_shard=20, index=not never_seen)

    def source(run: str) -> tuple[fastio.Dataset, object]:
        # Never seen: the run's own index folder, which its first epoch fills
        # (the resumed run is on the same machine).
        folder = tmp_path / (f"index-{run}" if never_seen else "index")
        dataset = fastio.Dataset(written.pattern, seed=5, shuffle_buffer=20_000,
                                 index_dir=folder)  # fmt: skip
        if how == "dataset":
            return dataset, dataset
        workers = 2 if how.endswith("2 workers") else 0
        return dataset, StatefulDataLoader(dataset, batch_size=4, num_workers=workers,
                                           collate_fn=lambda samples: samples)  # fmt: skip

    def epoch(iterable) -> list[int]:
        items = list(iterable)
        samples = items if how == "dataset" else [s for batch in items for s in batch]
        return [key_of("webdataset", sample) for sample in samples]

    _, reference = source("reference")
    expected = [epoch(reference) for _ in range(3)]
    assert expected[1] != expected[0]
    _, running = source("run")
    assert epoch(running) == expected[0]
    saved = json.loads(json.dumps(running.state_dict()))  # as a checkpoint holds it
    _, resumed = source("run")
    resumed.load_state_dict(saved)
    assert [epoch(resumed), epoch(resumed)] == expected[1:]


def test_setting_the_epoch_a_loaded_state_is_in_resumes_it(tars) -> None:
    """Lightning's loop (and the README's) sets the epoch at each epoch's
    start, after a checkpoint taken mid-epoch was loaded: the epoch resumes
    where the state was saved. Setting the epoch dropped the state, and the
    whole epoch came again (its first samples twice)."""
    reference = fastio.Dataset(tars.pattern, **OPTIONS)
    reference.set_epoch(1)
    expected = [key_of("webdataset", s) for s in reference]
    running = fastio.Dataset(tars.pattern, **OPTIONS)
    running.set_epoch(1)
    iterator = iter(running)
    got = [key_of("webdataset", next(iterator)) for _ in range(15)]
    saved = json.loads(json.dumps(running.state_dict()))
    resumed = fastio.Dataset(tars.pattern, **OPTIONS)
    resumed.load_state_dict(saved)
    resumed.set_epoch(1)
    assert got + [key_of("webdataset", s) for s in resumed] == expected
    resumed.load_state_dict(saved)
    resumed.set_epoch(2)  # another epoch: from its start
    assert len(list(resumed)) == len(expected)
