"""fastio.Dataset in torch's DataLoader with real worker processes: every
sample exactly once per epoch across simulated ranks and workers."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import fastio
from tests.ranks import run_ranks
from tests.shards import batch_keys, check_sample, key_of, write


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write("webdataset", tmp_path_factory.mktemp("loader"), shards=7, per_shard=23)


def collate_keys(samples):
    return [key_of("webdataset", s) for s in samples]


def epoch_keys(pattern, rank, world_size, num_workers, **options) -> list[int]:
    dataset = fastio.Dataset(pattern, rank=rank, world_size=world_size,
                             shuffle_buffer=50_000, **options)  # fmt: skip
    loader = DataLoader(dataset, batch_size=5, num_workers=num_workers, collate_fn=collate_keys)
    return [k for batch in loader for k in batch]


def test_is_a_torch_iterable_dataset(written) -> None:
    assert isinstance(fastio.Dataset(written.pattern), IterableDataset)


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_exactly_once_across_ranks_and_workers(written, world_size, num_workers) -> None:
    per_rank = [epoch_keys(written.pattern, rank, world_size, num_workers)
                for rank in range(world_size)]  # fmt: skip
    union = collections.Counter(k for keys in per_rank for k in keys)
    assert set(union) == {row["key"] for row in written.samples}
    assert set(union.values()) == {1}
    sizes = [len(keys) for keys in per_rank]
    assert max(sizes) - min(sizes) <= 1
    # Same seed, same order; another epoch, another.
    assert epoch_keys(written.pattern, 0, world_size, num_workers) == per_rank[0]
    assert epoch_keys(written.pattern, 0, world_size, num_workers, seed=1) != per_rank[0]


@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_drop_and_pad_give_equal_counts_with_workers(written, remainder) -> None:
    sizes = [len(epoch_keys(written.pattern, rank, 3, 2, remainder=remainder))
             for rank in range(3)]  # fmt: skip
    total = len(written.samples)
    assert sizes == [total // 3 if remainder == "drop" else -(-total // 3)] * 3


def test_batches_in_a_dataloader_with_workers(written) -> None:
    batches = fastio.Dataset(written.pattern, seed=2).batches(16)
    loader = DataLoader(batches, batch_size=None, num_workers=2)
    got = [k for batch in loader for k in batch_keys("webdataset", batch)]
    assert sorted(got) == [row["key"] for row in written.samples]


@pytest.mark.parametrize("batches", [False, True], ids=["samples", "batches"])
def test_persistent_workers_deliver_mapped_samples_whole_every_epoch(tmp_path, batches) -> None:
    # Samples of 30-110 KB in shards of about 2 MB: cached, they are mapped
    # in the workers (map_cached="auto"); every sample comes once an epoch,
    # as written.
    large = write("webdataset", tmp_path, shards=4, per_shard=30, large=True)
    rows = {row["key"]: row for row in large.samples}
    dataset = fastio.Dataset(large.pattern, seed=3)
    if batches:
        loader = DataLoader(dataset.batches(7), batch_size=None, num_workers=2,
                            persistent_workers=True)  # fmt: skip
    else:
        loader = DataLoader(dataset, batch_size=5, num_workers=2, persistent_workers=True,
                            collate_fn=list)  # fmt: skip
    for epoch in range(2):
        dataset.set_epoch(epoch)
        got = []
        for item in loader:
            if batches:
                keys = batch_keys("webdataset", item)
                payloads = item.column("bin").to_pylist()
                for key, payload in zip(keys, payloads, strict=True):
                    assert payload == rows[key]["data"]
                got += keys
            else:
                for sample in item:
                    check_sample("webdataset", sample, rows[key_of("webdataset", sample)])
                    got.append(key_of("webdataset", sample))
        assert sorted(got) == sorted(rows)
    del loader


def test_spawned_workers_receive_a_pickled_dataset(written) -> None:
    dataset = fastio.Dataset(written.pattern, seed=4)
    next(iter(dataset))  # a live reader in the parent must not travel to the workers
    loader = DataLoader(dataset, batch_size=10, num_workers=2, collate_fn=collate_keys,
                        multiprocessing_context="spawn")  # fmt: skip
    got = [k for batch in loader for k in batch]
    assert sorted(got) == [row["key"] for row in written.samples]
    dataset.close()


def test_set_epoch_in_the_main_process_reaches_the_workers(written) -> None:
    dataset = fastio.Dataset(written.pattern, seed=4)
    loader = DataLoader(dataset, batch_size=10, num_workers=2, collate_fn=collate_keys)
    orders = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        orders.append([k for batch in loader for k in batch])
    assert orders[0] != orders[1]
    assert sorted(orders[0]) == sorted(orders[1])
    assert torch.utils.data.get_worker_info() is None


DISTRIBUTED_SCRIPT = """
import json, sys
import torch.distributed as dist
import fastio
from tests.shards import key_of
rank, port, world_size, pattern = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world_size)
dataset = fastio.Dataset(pattern, remainder="pad")  # rank and world size from torch
keys = [key_of("webdataset", s) for s in dataset]
length = len(dataset)
counts = [None] * world_size
dist.all_gather_object(counts, len(keys))  # padded: every rank the same count
dist.destroy_process_group()
print(json.dumps({"keys": keys, "length": length, "counts": counts}))
"""


def test_ranks_come_from_torch_distributed(written) -> None:
    results = run_ranks(DISTRIBUTED_SCRIPT, "2", written.pattern)
    total = len(written.samples)
    assert [r["counts"] for r in results] == [[-(-total // 2)] * 2] * 2
    assert all(len(r["keys"]) == r["length"] == -(-total // 2) for r in results)
    union = {k for r in results for k in r["keys"]}
    assert union == {row["key"] for row in written.samples}


def test_ranks_come_from_the_environment(written, monkeypatch) -> None:
    per_rank = []
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        dataset = fastio.Dataset(written.pattern)
        per_rank.append([key_of("webdataset", s) for s in dataset])
        assert dataset.state_dict()["rank"] == rank
    union = collections.Counter(k for keys in per_rank for k in keys)
    assert set(union.values()) == {1}
    assert len(union) == len(written.samples)


def test_spawned_workers_get_a_large_dataset_through_one_shared_file(tmp_path) -> None:
    """A dataset whose pickle passes a pipe's buffer (300 shards) reaches
    spawned workers through one file of the shared folder, which their
    pickles name: the parent does not wait for each worker to import its
    main module before it starts the next. Every sample comes once; the
    file is removed when the dataset is closed; pickled for anything but a
    spawned process (a Ray task, a user's own), the dataset holds its state."""
    import os
    import pickle

    from fastio.shared._mapped import shared_folder
    from fastio.shared._sent import KIND

    def files() -> list[str]:
        return [name for name in os.listdir(shared_folder())
                if name.startswith(f"fastio-{KIND}-{os.getpid()}-")]  # fmt: skip

    written = write("webdataset", tmp_path, shards=300, per_shard=2)
    dataset = fastio.Dataset(written.pattern, seed=4)
    whole = pickle.dumps(dataset)
    assert len(whole) > 64 << 10
    loader = DataLoader(dataset, batch_size=10, num_workers=2, collate_fn=collate_keys,
                        multiprocessing_context="spawn")  # fmt: skip
    got = [k for batch in loader for k in batch]
    assert sorted(got) == sorted(row["key"] for row in written.samples)
    assert len(files()) == 1  # one for both workers
    copy = pickle.loads(whole)
    dataset.close()
    assert files() == []
    assert sorted(key_of("webdataset", sample) for sample in copy) == sorted(got)
    copy.close()


def test_a_state_sent_through_a_file_is_written_once_kept_a_while_and_removed() -> None:
    """While a process is being spawned, a large state goes into a file: one
    per distinct state (the same one for every worker), the latest few kept,
    all removed on close, none by a forked child's copy; a small state, and
    any state pickled when no process is being spawned, go as they are. A
    process that receives a state whose file is gone is told so."""
    import os
    import pickle
    from multiprocessing import context

    from fastio.shared._sent import SENT, SentStates, received

    sent = SentStates()
    small, large = {"a": 1}, {"a": b"x" * (64 << 10)}
    assert sent.state(large) is large  # not spawning: a Ray task's, a user's own pickle
    context.set_spawning_popen(object())
    try:
        assert sent.state(small) is small
        first = sent.state(large)
        assert sent.state(dict(large)) == first  # the same state: the same file
        assert received(pickle.loads(pickle.dumps(first))) == large
        later = [sent.state({"a": bytes([n]) * (64 << 10)})[SENT] for n in range(5)]
    finally:
        context.set_spawning_popen(None)
    assert not os.path.exists(first[SENT])  # the oldest let go: four kept
    assert all(os.path.exists(path) for path in later[1:])
    child = os.fork()
    if child == 0:  # a forked copy closing (a worker's) removes nothing of its parent's
        sent.close()
        os._exit(0)
    os.waitpid(child, 0)
    assert all(os.path.exists(path) for path in later[1:])
    sent.close()
    assert not any(os.path.exists(path) for path in later)
    with pytest.raises(FileNotFoundError, match="closed") as gone:
        received({SENT: later[-1]})
    assert gone.value.filename == later[-1]
