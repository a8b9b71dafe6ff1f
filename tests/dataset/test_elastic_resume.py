"""Elastic resume: a job stopped mid-epoch at 2 ranks x 2 DataLoader workers
resumes at another world size and worker count, every remaining sample once;
a state that cannot be honoured is refused, naming what differs."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import fastio
from tests.shards import batch_keys, key_of, write

BATCH = 8
OPTIONS: dict[str, Any] = {"seed": 3, "shuffle_buffer": 30_000, "shuffle_shards": 3}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write("webdataset", tmp_path_factory.mktemp("elastic"), shards=9, per_shard=27)


def keys(batch: list[Any]) -> list[int]:
    return [key_of("webdataset", sample) for sample in batch]


def loader(written, rank: int, world_size: int, workers: int, mode: str,
           stateful: bool = True) -> tuple[fastio.Dataset, Any]:  # fmt: skip
    dataset = fastio.Dataset(written.pattern, rank=rank, world_size=world_size,
                             batch_size=BATCH, **OPTIONS)  # fmt: skip
    source: Any = dataset.batches(BATCH) if mode == "batches" else dataset
    options: dict[str, Any] = (
        {"batch_size": None} if mode == "batches" else {"batch_size": BATCH, "collate_fn": keys}
    )
    kind = StatefulDataLoader if stateful else DataLoader
    return dataset, kind(source, num_workers=workers, **options)


def flat(batch: Any) -> list[int]:
    return batch if isinstance(batch, list) else batch_keys("webdataset", batch)


def stop_early(written, world_size: int, workers: int, mode: str, rng: random.Random,
               states: Any = None) -> tuple[list[int], list[Any]]:  # fmt: skip
    """Each rank reads a random number of batches, then saves its loader's state."""
    head: list[int] = []
    saved = []
    for rank in range(world_size):
        dataset, source = loader(written, rank, world_size, workers, mode)
        if states is not None:
            dataset.load_state_dict(states)
        batches = iter(source)
        for _ in range(rng.randrange(0, 9)):
            batch = next(batches, None)
            if batch is None:
                break
            head.extend(flat(batch))
        saved.append(source.state_dict())
        del batches
        dataset.close()
    return head, saved


def finish(written, world_size: int, workers: int, mode: str, states: Any) -> list[int]:
    rest: list[int] = []
    for rank in range(world_size):
        dataset, source = loader(written, rank, world_size, workers, mode, stateful=bool(workers))
        dataset.load_state_dict(states)
        rest.extend(k for batch in source for k in flat(batch))
        # The epoch after the resumed one is a whole epoch again.
        assert dataset.epoch == 0
        dataset.close()
    return rest


@pytest.mark.parametrize("mode", ["samples", "batches"])
@pytest.mark.parametrize("layout", [(1, 3), (3, 1), (2, 0)], ids=["1x3", "3x1", "2x0"])
def test_stop_anywhere_at_2x2_resume_at_another_layout(written, mode, layout) -> None:
    everything = Counter(row["key"] for row in written.samples)
    rng = random.Random(f"{mode}{layout}")
    for _ in range(2):  # random stop points
        head, states = stop_early(written, 2, 2, mode, rng)
        assert len(head) < len(written.samples)
        rest = finish(written, *layout, mode, states)
        assert Counter(head + rest) == everything


def test_resume_a_resumed_epoch_at_yet_another_layout(written) -> None:
    everything = Counter(row["key"] for row in written.samples)
    rng = random.Random(7)
    head, states = stop_early(written, 2, 2, "samples", rng)
    middle, again = stop_early(written, 1, 3, "samples", rng, states)
    rest = finish(written, 3, 0, "samples", again)
    assert Counter(head + middle + rest) == everything


def test_the_next_epoch_after_an_elastic_resume_is_whole(written) -> None:
    _, states = stop_early(written, 2, 2, "samples", random.Random(1))
    dataset = fastio.Dataset(written.pattern, batch_size=BATCH, **OPTIONS)
    dataset.load_state_dict(states)
    resumed = [key_of("webdataset", s) for s in dataset]
    following = [key_of("webdataset", s) for s in dataset]
    assert len(resumed) < len(following) == len(written.samples)
    assert sorted(following) == sorted(row["key"] for row in written.samples)
    assert dataset.epoch == 1


def test_states_that_cannot_be_honoured_are_refused(written) -> None:
    _, states = stop_early(written, 2, 2, "samples", random.Random(2))
    for field, changed in (("seed", 4), ("shuffle_buffer", 20_000), ("shuffle_shards", 2),
                           ("remainder", "pad")):  # fmt: skip
        dataset = fastio.Dataset(written.pattern, batch_size=BATCH, **{**OPTIONS, field: changed})
        with pytest.raises(ValueError, match=field):
            dataset.load_state_dict(states)
    fewer = fastio.Dataset(written.urls[:-1], batch_size=BATCH, **OPTIONS)
    with pytest.raises(ValueError, match="dataset"):
        fewer.load_state_dict(states)
    dataset = fastio.Dataset(written.pattern, batch_size=BATCH, **OPTIONS)
    with pytest.raises(ValueError, match=r"cover 2 of the 4"):
        dataset.load_state_dict(states[0])  # one rank's loader state of a two-rank save


@pytest.mark.parametrize("resumed_at", [1, 3])
def test_an_elastic_resume_with_drop_adds_nothing_the_split_dropped(tmp_path, resumed_at) -> None:
    """With ``remainder="drop"`` the split leaves out what does not divide
    among the ranks: the rest of an epoch resumed at another world size is
    what the ranks' parts held and had not delivered (less what the new
    split drops in turn), never a sample in no part."""
    written = write("webdataset", tmp_path / "data", shards=5, per_shard=21)
    world = next(size for size in (2, 3, 4) if len(written.samples) % size)
    options = {**OPTIONS, "remainder": "drop", "index_dir": tmp_path / "index"}
    whole: Counter[int] = Counter()
    head: list[int] = []
    states = []
    for rank in range(world):
        dataset = fastio.Dataset(written.pattern, rank=rank, world_size=world, **options)
        whole.update(keys(dataset))
        dataset.set_epoch(0)  # the same epoch again, stopped early
        samples = iter(dataset)
        head.extend(keys(next(samples) for _ in range(5 + rank)))
        states.append(dataset.state_dict())
        del samples
        dataset.close()
    assert sum(whole.values()) == len(written.samples) // world * world  # some were dropped
    rest: list[int] = []
    for rank in range(resumed_at):
        dataset = fastio.Dataset(written.pattern, rank=rank, world_size=resumed_at, **options)
        dataset.load_state_dict(states)
        rest.extend(keys(dataset))
        dataset.close()
    got = Counter(head + rest)
    assert got <= whole  # nothing outside the parts, nothing twice
    # The new split drops too: at most what does not divide among its ranks.
    assert sum((whole - got).values()) < resumed_at
