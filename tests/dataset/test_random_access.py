"""``len`` and ``[i]`` agree: index samplers cover every sample once under ranks,
over each rank's share (``dataset[i]``) or over the whole dataset with samplers
that split ranks themselves (``dataset.map_style()``)."""

from __future__ import annotations

from collections import Counter

import grain.python as grain
import pytest
from torch.utils.data import DataLoader, DistributedSampler

import fastio
from tests.shards import key_of, write


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write("tfrecord", tmp_path_factory.mktemp("indexed"), shards=5, per_shard=21)


def ranks(written, world_size: int = 2, **options):
    return [fastio.Dataset(written.pattern, rank=rank, world_size=world_size, **options)
            for rank in range(world_size)]  # fmt: skip


def test_each_rank_indexes_its_share(written) -> None:
    everything = Counter(row["key"] for row in written.samples)
    datasets = ranks(written)
    got = Counter(key_of("tfrecord", ds[i]) for ds in datasets for i in range(len(ds)))
    assert got == everything
    assert sum(len(ds) for ds in datasets) == len(written.samples)
    with pytest.raises(IndexError):
        datasets[0][len(datasets[0])]


def test_a_sampler_over_each_ranks_share_covers_every_sample_once(written) -> None:
    covered: Counter[int] = Counter()
    for ds in ranks(written):
        shuffled = grain.MapDataset.source(ds).shuffle(seed=1)  # over len and [i]
        covered.update(key_of("tfrecord", sample) for sample in shuffled)
    assert covered == Counter(row["key"] for row in written.samples)


def test_samplers_that_split_ranks_use_the_whole_dataset(written) -> None:
    everything = Counter(row["key"] for row in written.samples)
    grain_covered: Counter[int] = Counter()
    torch_covered: Counter[int] = Counter()
    for rank, ds in enumerate(ranks(written)):
        whole = ds.map_style()
        assert len(whole) == len(written.samples)
        mine = grain.MapDataset.source(whole).shuffle(seed=1)[rank::2]  # grain splits ranks
        grain_covered.update(key_of("tfrecord", sample) for sample in mine)
        distributed = DistributedSampler(whole, num_replicas=2, rank=rank, shuffle=True)
        batches = DataLoader(whole, batch_size=4, sampler=distributed, num_workers=2,
                             collate_fn=lambda b: [key_of("tfrecord", s) for s in b])  # fmt: skip
        torch_covered.update(k for batch in batches for k in batch)
    assert grain_covered == everything
    # DistributedSampler pads to equal shares: at most one sample twice, none missing.
    assert set(torch_covered) == set(everything)
    assert sum(torch_covered.values()) - len(everything) <= 1
