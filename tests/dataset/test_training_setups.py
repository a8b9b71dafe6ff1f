"""Every sample exactly once per epoch, in a new order each epoch, the same for
the same seed, and as many steps as ``len(loader)`` says: in the setups people
train with, in this process and DataLoader workers. Ranks (torchrun DDP and
the Lightning Trainer) are in test_distributed_setups.py."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import fastio
from tests.shards import batch_keys, key_of, write

EPOCHS = 3
BATCH = 16
SETUPS = ["loop", "dataloader", "persistent", "stateful"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    # 7 shards of about 29 samples: neither the total nor any part is whole batches.
    return write("webdataset", tmp_path_factory.mktemp("setups"), shards=7, per_shard=29)


def keys(batch: list[Any]) -> list[int]:
    return [key_of("webdataset", sample) for sample in batch]


def run(
    setup: str, mode: str, workers: int, written, seed: int = 5
) -> list[tuple[list[int], int, int]]:
    """Per epoch: the keys in delivery order, the steps taken (batches, or
    samples of a plain loop) and what ``len`` promised."""
    dataset = fastio.Dataset(written.pattern, seed=seed, shuffle_buffer=40_000, batch_size=BATCH)
    source: Any = dataset.batches(BATCH) if mode == "batches" else dataset
    options: dict[str, Any] = (
        {"batch_size": None} if mode == "batches" else {"batch_size": BATCH, "collate_fn": keys}
    )
    loader: Any = None
    if setup == "dataloader":
        loader = DataLoader(source, num_workers=workers, **options)
    elif setup == "persistent":
        loader = DataLoader(source, num_workers=workers, persistent_workers=True, **options)
    elif setup == "stateful":
        loader = StatefulDataLoader(source, num_workers=workers, **options)
    epochs = []
    for _ in range(EPOCHS):
        if loader is None:  # a plain loop: every item is a step
            items = list(source)
            got = [k for b in items for k in batch_keys("webdataset", b)] if mode == "batches" \
                else keys(items)  # fmt: skip
            epochs.append((got, len(items), len(source)))
            continue
        steps, got = 0, []
        for batch in loader:
            steps += 1
            got.extend(batch_keys("webdataset", batch) if mode == "batches" else batch)
        epochs.append((got, steps, len(loader)))
    dataset.close()
    return epochs


def combinations() -> list[tuple[str, str, int]]:
    return [
        (setup, mode, workers)
        for setup in SETUPS
        for mode in ("samples", "batches")
        for workers in (0, 2)
        if not (setup == "loop" and workers) and not (setup == "persistent" and not workers)
    ]


@pytest.mark.parametrize(("setup", "mode", "workers"), combinations(),
                         ids=["-".join(map(str, c)) for c in combinations()])  # fmt: skip
def test_every_epoch_exactly_once_in_new_orders_as_long_as_len_says(
    written, setup: str, mode: str, workers: int
) -> None:
    everything = Counter(row["key"] for row in written.samples)
    first = run(setup, mode, workers, written)
    for got, steps, promised in first:
        assert Counter(got) == everything
        assert steps == promised
    orders = [got for got, _, _ in first]
    assert len({tuple(order) for order in orders}) == EPOCHS  # each epoch its own order
    again = run(setup, mode, workers, written)
    assert [got for got, _, _ in again] == orders  # the same seed, the same orders
    other = run(setup, mode, workers, written, seed=6)
    assert [got for got, _, _ in other] != orders


def test_set_epoch_still_chooses_the_epoch(written) -> None:
    dataset = fastio.Dataset(written.pattern, seed=5, shuffle_buffer=40_000)
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=2, persistent_workers=True,
                        collate_fn=keys)  # fmt: skip
    by_epoch = {}
    for epoch in (0, 1, 2):
        by_epoch[epoch] = [k for batch in loader for k in batch]
    dataset.set_epoch(1)  # persistent workers hear it too
    assert [k for batch in loader for k in batch] == by_epoch[1]
    assert dataset.epoch == 1
    assert [k for batch in loader for k in batch] == by_epoch[2]  # then on from there
    state = dataset.state_dict()
    assert state["epoch"] == 3  # the next pass's
