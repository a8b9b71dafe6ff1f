"""Real ranks (torchrun, gloo, two processes): plain DDP and the Lightning
Trainer train 3 epochs over a fastio dataset, in samples and batches, with 0
and 2 DataLoader workers. Every sample exactly once per epoch across the
ranks, a new order each epoch, the same order a rank simulated in this
process gets (the same seed, the same orders), and as many optimizer steps as
``len(loader)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import fastio
from tests.ddp_job import BATCH, COMBINATIONS, EPOCHS, batch_of, keys
from tests.shards import write

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    # An even total split into ranks of equal counts (DDP ranks must take
    # equal steps), neither a multiple of the batch size.
    written = write("webdataset", tmp_path_factory.mktemp("ddp"), shards=6, per_shard=29, seed=3)
    assert len(written.samples) % 2 == 0
    assert len(written.samples) // 2 % BATCH
    return written


def torchrun(kind: str, written, tmp_path: Path) -> list[dict[str, list[dict]]]:
    out = tmp_path / kind
    out.mkdir()
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(REPOSITORY / "tests" / "ddp_job.py"), kind, str(out), written.pattern],
        cwd=REPOSITORY, env=environment, check=True, timeout=600,
    )  # fmt: skip
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(2)]


def simulated(written, rank: int, mode: str, workers: int) -> list[list[int]]:
    """What rank ``rank`` of 2 reads, simulated in this process."""
    dataset = fastio.Dataset(written.pattern, seed=5, shuffle_buffer=40_000, batch_size=BATCH,
                             rank=rank, world_size=2)  # fmt: skip
    if mode == "batches":
        loader = DataLoader(dataset.batches(BATCH), batch_size=None, num_workers=workers)
    else:
        loader = DataLoader(dataset, batch_size=BATCH, num_workers=workers, collate_fn=keys)
    return [[k for batch in loader for k in batch_of(batch).tolist()] for _ in range(EPOCHS)]


@pytest.mark.parametrize("kind", ["ddp", "lightning"])
def test_ranks_train_every_sample_once_per_epoch(written, tmp_path, kind: str) -> None:
    ranks = torchrun(kind, written, tmp_path)
    everything = Counter(row["key"] for row in written.samples)
    for mode, workers in COMBINATIONS:
        combination = f"{mode}-{workers}"
        per_rank = [rank[combination] for rank in ranks]
        assert all(len(epochs) == EPOCHS for epochs in per_rank), combination
        for epoch in range(EPOCHS):
            union = Counter(k for epochs in per_rank for k in epochs[epoch]["keys"])
            assert union == everything, (combination, epoch)
            for epochs in per_rank:
                assert epochs[epoch]["steps"] == epochs[epoch]["len"], (combination, epoch)
                if kind == "lightning":
                    assert epochs[epoch]["len"] == epochs[epoch]["loader_len"]
        for rank, epochs in enumerate(per_rank):
            orders = [epoch["keys"] for epoch in epochs]
            assert len({tuple(order) for order in orders}) == EPOCHS, combination
            assert orders == simulated(written, rank, mode, workers), (combination, rank)
