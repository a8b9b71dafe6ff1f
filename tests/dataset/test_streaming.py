"""A never-seen dataset (no index anywhere): its first epoch streams whole
shards, every sample once across ranks and workers, reproducibly, resumably,
and leaves the indexes the next epochs plan by."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import fastio
from tests.shards import batch_keys, key_of, write

REPOSITORY = Path(__file__).resolve().parents[2]
OPTIONS: dict[str, Any] = {"seed": 4, "shuffle_buffer": 60_000}


@pytest.fixture
def never_seen(tmp_path):
    return write("webdataset", tmp_path / "data", shards=6, per_shard=25, index=False)


def fresh(written, tmp_path, name: str = "index", **options) -> fastio.Dataset:
    """A dataset whose index folder is its own (so nothing else indexed it)."""
    return fastio.Dataset(written.pattern, index_dir=tmp_path / name, **{**OPTIONS, **options})


def keys(items) -> list[int]:
    return [key_of("webdataset", sample) for sample in items]


def everything(written) -> Counter[int]:
    return Counter(row["key"] for row in written.samples)


@pytest.mark.parametrize("shuffle", [True, False])
def test_the_first_epoch_streams_then_the_next_read_windows(never_seen, tmp_path, shuffle):
    dataset = fresh(never_seen, tmp_path, shuffle=shuffle)
    with pytest.raises(TypeError, match="not indexed yet"):
        len(dataset)
    first = keys(dataset)
    assert Counter(first) == everything(never_seen)
    assert len(dataset) == dataset.total == len(first)  # indexed on the way
    stored = list((tmp_path / "index").glob("*.fastio-index.npz"))
    assert len(stored) == len(never_seen.urls)
    assert sorted(os.listdir(tmp_path / "data")) == sorted(
        os.path.basename(url) for url in never_seen.urls
    )
    second = keys(dataset)
    assert Counter(second) == everything(never_seen)
    if shuffle:
        assert second != first
    else:  # stored order is stored order, streamed or not
        assert first == second == sorted(first)
    # The next epoch is what a dataset indexed from the start reads then.
    indexed = fastio.Dataset(never_seen.pattern, index_dir=tmp_path / "index",
                             shuffle=shuffle, **OPTIONS)  # fmt: skip
    indexed.set_epoch(1)
    assert keys(indexed) == second


def test_streamed_epochs_are_reproducible_and_in_a_new_order_each(never_seen, tmp_path):
    one = keys(fresh(never_seen, tmp_path, "a"))
    two = keys(fresh(never_seen, tmp_path, "b"))
    assert one == two  # the same seed, the same order
    other = keys(fresh(never_seen, tmp_path, "c", seed=5))
    assert other != one
    assert Counter(other) == Counter(one)
    later = fresh(never_seen, tmp_path, "d")
    later.set_epoch(3)
    assert keys(later) != one  # another epoch streamed: another order


@pytest.mark.parametrize("mode", ["samples", "batches"])
def test_workers_and_ranks_split_whole_shards_exactly_once(never_seen, tmp_path, mode):
    got: Counter[int] = Counter()
    for rank in range(2):
        dataset = fresh(never_seen, tmp_path, f"rank{rank}", rank=rank, world_size=2)
        if mode == "batches":
            loader = DataLoader(dataset.batches(7), batch_size=None, num_workers=2)
            got.update(k for batch in loader for k in batch_keys("webdataset", batch))
        else:
            loader = DataLoader(dataset, batch_size=7, num_workers=2, collate_fn=keys)
            got.update(k for batch in loader for k in batch)
    assert got == everything(never_seen)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_rank_that_opens_after_another_indexed_the_shards_streams_as_it_did(
    never_seen, tmp_path, workers, monkeypatch
):
    """Ranks of one machine share the index folder. Rank 0 streams its first
    epoch and indexes every shard (its second epoch begun) before rank 1
    opens the dataset (no collective per step, a rank started late): rank 1
    finds it indexed, and must still split the first epoch as rank 0 did,
    by whole shards, or the two lose and repeat samples. A dataset another
    job indexed splits the first epoch by its indexes."""

    def epoch_of(dataset) -> list[int]:
        loader = DataLoader(dataset, batch_size=7, num_workers=workers, collate_fn=keys)
        return [k for batch in loader for k in batch]

    first = fresh(never_seen, tmp_path, "shared", rank=0, world_size=2)
    got = Counter(epoch_of(first))
    first.set_epoch(1)
    next(iter(first))  # its second epoch begun: every shard indexed
    second = fresh(never_seen, tmp_path, "shared", rank=1, world_size=2)
    assert second.total == len(everything(never_seen))  # found indexed
    with pytest.raises(TypeError, match="streams whole shards"):
        len(second)  # not the indexed share: the pass streams
    streamed = epoch_of(second)
    got.update(streamed)
    assert got == everything(never_seen)
    assert len(second) == second.total - second.total // 2  # the epochs after it: its share
    # Indexed before (by another job: other launch variables), no rank
    # streams: each reads its share of the samples.
    monkeypatch.setenv("MASTER_PORT", "29999")
    shares = [epoch_of(fresh(never_seen, tmp_path, "shared", rank=rank, world_size=2))
              for rank in range(2)]  # fmt: skip
    assert Counter(shares[0] + shares[1]) == everything(never_seen)
    assert abs(len(shares[0]) - len(shares[1])) <= 1


@pytest.mark.parametrize("workers", [0, 2])
def test_the_mark_of_a_streamed_first_epoch_goes_with_its_process(never_seen, tmp_path, workers):
    """A rank that streams its first epoch marks it in the shared folder for
    the other ranks of its job; the mark goes as the process exits, however
    it read (its own loop, or DataLoader workers marking for it)."""
    script = (
        "import os, sys, fastio\n"
        "from torch.utils.data import DataLoader\n"
        f"ds = fastio.Dataset({never_seen.pattern!r}, index_dir={str(tmp_path / 'marks')!r}, "
        "rank=0, world_size=2)\n"
        f"n = sum(len(b) for b in DataLoader(ds, batch_size=5, num_workers={workers}, "
        "collate_fn=list))\n"
        "own = f'fastio-firstpass-{os.getpid()}-'\n"
        "marks = [m for m in os.listdir('/dev/shm') if m.startswith(own)]\n"
        "print(os.getpid(), n, len(marks))\n"
    )  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    pid, delivered, marks = map(int, done.stdout.split())
    assert delivered > 0
    assert marks == 1  # marked while it ran
    assert not [name for name in os.listdir("/dev/shm")
                if name.startswith(f"fastio-firstpass-{pid}-")]  # fmt: skip


def test_persistent_workers_stream_once_then_read_windows(never_seen, tmp_path):
    dataset = fresh(never_seen, tmp_path)
    loader = DataLoader(dataset, batch_size=7, num_workers=2, persistent_workers=True,
                        collate_fn=keys)  # fmt: skip
    epochs = [[k for batch in loader for k in batch] for _ in range(3)]
    for epoch in epochs:
        assert Counter(epoch) == everything(never_seen)
    assert len({tuple(epoch) for epoch in epochs}) == 3


@pytest.mark.parametrize("persistent", [False, True], ids=["workers", "persistent workers"])
def test_once_workers_streamed_an_epoch_the_main_process_counts_it(never_seen, tmp_path,
                                                                   persistent):  # fmt: skip
    """The workers index the shards on the way; the main process, which read
    none of them, finds their indexes for ``len`` (of the dataset, and of the
    loader, by which Lightning sizes its epochs)."""
    dataset = fresh(never_seen, tmp_path, batch_size=7)
    loader = DataLoader(dataset, batch_size=7, num_workers=2, persistent_workers=persistent,
                        collate_fn=keys)  # fmt: skip
    with pytest.raises(TypeError, match="not indexed yet"):
        len(loader)
    first = [k for batch in loader for k in batch]
    total = sum(everything(never_seen).values())
    assert len(dataset) == dataset.total == len(first) == total
    batches = list(loader)
    assert Counter(k for batch in batches for k in batch) == everything(never_seen)
    assert len(loader) == len(batches)


def test_equal_counts_across_ranks_index_first(never_seen, tmp_path):
    # drop and pad need every rank's count before the first sample: the
    # dataset indexes at open (and says so in its length).
    for remainder in ("drop", "pad"):
        counts = []
        got: Counter[int] = Counter()
        for rank in range(2):
            dataset = fresh(never_seen, tmp_path, f"{remainder}{rank}", rank=rank, world_size=2,
                            remainder=remainder)  # fmt: skip
            delivered = keys(dataset)
            counts.append(len(delivered))
            assert len(delivered) == len(dataset)
            got.update(delivered)
        assert counts[0] == counts[1]
        total = len(never_seen.samples)
        if remainder == "drop":
            assert sum(counts) == total // 2 * 2
            assert max(got.values()) == 1
        else:
            assert set(got) == set(everything(never_seen))
            assert sum(counts) == -(-total // 2) * 2


@pytest.mark.parametrize("shuffle", [True, False])
def test_resume_mid_stream_exactly(never_seen, tmp_path, shuffle):
    full = keys(fresh(never_seen, tmp_path, "full", shuffle=shuffle))
    if not shuffle:
        assert full == [row["key"] for row in never_seen.samples]  # as stored
    rng = random.Random(1)
    for stop in [0, 1, 37, len(full) - 1, *rng.sample(range(len(full)), 4)]:
        first = fresh(never_seen, tmp_path, f"first{stop}", shuffle=shuffle)
        iterator = iter(first)
        head = [key_of("webdataset", next(iterator)) for _ in range(stop)]
        state = json.loads(json.dumps(first.state_dict()))
        assert ("stream" in state) == (stop > 0)  # before the first sample, not begun
        resumed = fresh(never_seen, tmp_path, f"resumed{stop}", shuffle=shuffle)
        resumed.load_state_dict(state)
        assert head + keys(resumed) == full, stop


RESUME = """
import json, sys
import fastio
from tests.shards import key_of
pattern, index_dir, state = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
dataset = fastio.Dataset(pattern, index_dir=index_dir, seed=4, shuffle_buffer=60_000)
dataset.load_state_dict(state)
print(json.dumps([key_of("webdataset", s) for s in dataset]))
"""


def test_resume_mid_stream_with_workers_in_a_new_process(never_seen, tmp_path):
    def loader(dataset):
        return StatefulDataLoader(dataset, batch_size=5, num_workers=2, collate_fn=keys)

    full = [k for batch in loader(fresh(never_seen, tmp_path, "full")) for k in batch]
    first = loader(fresh(never_seen, tmp_path, "first"))
    batches = iter(first)
    head = [k for _ in range(9) for k in next(batches)]
    state = first.state_dict()
    del batches
    second = loader(fresh(never_seen, tmp_path, "second"))
    second.load_state_dict(state)
    rest = [k for batch in second for k in batch]
    assert Counter(head + rest) == everything(never_seen)
    assert head + rest == full
    # Without workers, in a new process: the state is plain data.
    alone = fresh(never_seen, tmp_path, "alone")
    iterator = iter(alone)
    head = keys(next(iterator) for _ in range(50))
    result = subprocess.run(
        [sys.executable, "-c", RESUME, never_seen.pattern, str(tmp_path / "new"),
         json.dumps(alone.state_dict())],
        capture_output=True, text=True, check=True, cwd=REPOSITORY,
    )  # fmt: skip
    assert Counter(head + json.loads(result.stdout)) == everything(never_seen)


@pytest.mark.parametrize(("shards", "workers", "saved_after"), [(6, 2, 1), (2, 3, 5)],
                         ids=["a worker not begun", "more workers than shards"])  # fmt: skip
def test_a_streamed_epoch_resumes_exactly_after_its_shards_were_indexed(
    tmp_path, shards, workers, saved_after
):
    """Saved where some worker had delivered nothing yet (its state is at a
    start), the saving job then finishes the epoch, which indexes the shards:
    resumed, each worker still reads its part of the streamed epoch, not a
    part of the plan the indexes now give. So does a list of the states, in
    the same layout; another layout is refused."""
    written = write("webdataset", tmp_path / "data", shards=shards, per_shard=25, index=False)

    def loader(dataset, kind=StatefulDataLoader, count=workers):
        return kind(dataset, batch_size=5, num_workers=count, collate_fn=keys)

    first = loader(fresh(written, tmp_path))
    batches = iter(first)
    head = [k for _ in range(saved_after) for k in next(batches)]
    state = first.state_dict()
    for _ in batches:  # the job goes on: its workers index the shards
        pass
    assert len(fresh(written, tmp_path)) == len(written.samples)  # indexed now
    resumed = loader(fresh(written, tmp_path))
    resumed.load_state_dict(state)
    rest = [k for batch in resumed for k in batch]
    assert sorted(head + rest) == sorted(everything(written).elements())
    listed = fresh(written, tmp_path)
    listed.load_state_dict([state])  # every worker's state, as one merged state
    rest = [k for batch in loader(listed, DataLoader) for k in batch]
    assert sorted(head + rest) == sorted(everything(written).elements())
    other = fresh(written, tmp_path)
    other.load_state_dict([state])
    with pytest.raises(ValueError, match="streamed first epoch"):  # raised in a worker
        next(iter(loader(other, DataLoader, workers + 1)))


def test_a_streamed_state_resumes_at_its_layout_only(never_seen, tmp_path):
    dataset = fresh(never_seen, tmp_path, "a", rank=0, world_size=2)
    next(iter(dataset))
    other = fresh(never_seen, tmp_path, "b")
    other.load_state_dict(dataset.state_dict())
    with pytest.raises(ValueError, match="streamed first epoch"):
        next(iter(other))


def test_damage_in_a_streamed_shard(never_seen, tmp_path):
    url = never_seen.urls[2]
    with open(url, "r+b") as handle:
        handle.truncate(os.path.getsize(url) // 2)
    with pytest.raises(fastio.TruncatedShardError) as caught:
        keys(fresh(never_seen, tmp_path, "raise"))
    assert caught.value.url == url
    skipping = fresh(never_seen, tmp_path, "skip", on_error="skip")
    got = keys(skipping)
    assert len(got) == len(set(got))
    assert skipping.stats()["skipped"] == 1  # the sample the cut is in
    assert skipping.layouts[2] is not None  # the samples around the damage, for this dataset
    assert not any(p.name.startswith("index-") and never_seen.urls[2] in p.name
                   for p in (tmp_path / "skip").iterdir())  # fmt: skip
    assert len(list((tmp_path / "skip").iterdir())) == len(never_seen.urls) - 1  # not kept


def test_an_index_saved_once_serves_later_datasets(never_seen, tmp_path):
    location = fresh(never_seen, tmp_path).save_index()
    assert location == os.path.join(tmp_path, "data", "dataset.fastio-index.npz")
    later = fastio.Dataset(never_seen.pattern, index_dir=tmp_path / "unused", **OPTIONS)
    assert len(later) == len(never_seen.samples)  # no stream, no scan: the dataset index
    assert later.reader.stats().bytes_read == 0
    assert not (tmp_path / "unused").exists()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_streamed_first_epoch_leaves_its_indexes_in_one_file(never_seen, tmp_path, workers):
    """Once a first epoch has indexed every shard (in this process, or in its
    DataLoader workers and then counted here, as Lightning sizes an epoch),
    the index folder keeps the indexes together: the next dataset over the
    shards opens from that file alone, its shards' own index files gone."""
    dataset = fresh(never_seen, tmp_path)
    loader = DataLoader(dataset, batch_size=7, num_workers=workers, collate_fn=keys)
    assert Counter(k for batch in loader for k in batch) == everything(never_seen)
    folder = tmp_path / "index"
    if workers:  # each worker streamed some: the main process counts them all
        assert not list(folder.rglob("dataset-*"))
        assert len(dataset) == len(never_seen.samples)
    assert len(list(folder.rglob("dataset-*.fastio-dataset.npz"))) == 1
    own = [path for path in folder.rglob("*") if path.is_file() and "dataset-" not in path.name]
    assert len(own) == 6
    for path in own:
        path.unlink()
    later = fresh(never_seen, tmp_path)
    assert len(later) == len(never_seen.samples)
    assert later.reader.stats().bytes_read == 0  # no stream, no scan
    assert Counter(keys(later)) == everything(never_seen)


def test_a_stream_that_holds_the_whole_memory_budget_still_indexes_its_shards(never_seen, tmp_path):
    # Each shard is indexed as the stream reaches its end, while the stream
    # has read ahead into the next shards with all the memory it may use.
    dataset = fresh(never_seen, tmp_path, shuffle=False, memory_budget="64KiB",
                    read_size="16KiB")  # fmt: skip
    assert Counter(keys(dataset)) == everything(never_seen)
    assert len(dataset) == sum(everything(never_seen).values())


def test_an_unshuffled_stream_hands_each_sample_over_as_it_is_found(tmp_path):
    # Unshuffled, a window's order is the order its samples are found in: none
    # waits for the rest of its window. A consumer that drops each sample holds
    # about one read's samples at a time, however large the shuffle buffer
    # (windows of up to 8 MiB of these 15 MB would be held otherwise).
    import webdataset

    size, shards, per_shard = 32_000, 8, 60
    rng = random.Random(3)
    for shard in range(shards):
        with webdataset.TarWriter(str(tmp_path / f"big-{shard}.tar")) as sink:
            for i in range(per_shard):
                sink.write({"__key__": f"{shard:02d}{i:04d}", "bin": rng.randbytes(size)})
    dataset = fastio.Dataset(str(tmp_path / f"big-{{0..{shards - 1}}}.tar"), format="webdataset",
                             shuffle=False, shuffle_buffer="256MiB", read_size="1MiB",
                             index_dir=tmp_path / "index")  # fmt: skip
    tracemalloc.start()
    try:
        count = 0
        for sample in dataset:
            assert len(sample["bin"]) == size
            count += 1
            if count == 1:
                tracemalloc.reset_peak()  # from the first sample on: the reader has started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == shards * per_shard
    assert peak < 4 << 20  # a read's samples (1 MiB), their framing, the event loop's
    assert len(dataset) == count  # and the stream indexed every shard
