"""Ranks started by ``torch.multiprocessing.spawn`` (what Lightning's
``ddp_spawn`` does) with the dataset their parent made, before any process
group existed, and DataLoader workers started with ``spawn`` too: each rank
reads its own part and its own epochs, never another rank's."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.shards import write

REPOSITORY = Path(__file__).resolve().parents[2]
EPOCHS = 2

# Launcher: makes the dataset (never seen: no index yet; one rank so far),
# then spawns two ranks that each train EPOCHS epochs over it.
_JOB = """
import json, sys
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader
import fastio
from tests.ddp_job import keys

def rank_main(rank, dataset, port, out, workers):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    loader = DataLoader(dataset, batch_size=8, num_workers=workers, collate_fn=keys,
                        persistent_workers=workers > 0,
                        multiprocessing_context="spawn" if workers else None)
    epochs = []
    for _ in range(EPOCHS):
        batches = [batch.tolist() for batch in loader]
        epochs.append({"keys": [k for b in batches for k in b], "batches": len(batches),
                       "len": len(loader)})
        dist.barrier()
    with open(f"{out}/rank-{rank}.json", "w") as file:
        json.dump(epochs, file)
    dist.destroy_process_group()

if __name__ == "__main__":
    pattern, index_dir, port, out, workers = sys.argv[1:6]
    dataset = fastio.Dataset(pattern, index_dir=index_dir, remainder="drop", seed=2)
    mp.spawn(rank_main, args=(dataset, int(port), out, int(workers)), nprocs=2, join=True)
""".replace("EPOCHS", str(EPOCHS))


@pytest.mark.parametrize("workers", [0, 2])
def test_spawned_ranks_with_their_parents_dataset_read_apart(tmp_path, workers) -> None:
    written = write("webdataset", tmp_path / "data", shards=5, per_shard=20, seed=4, index=False)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    subprocess.run([sys.executable, str(script), written.pattern, str(tmp_path / "index"), port,
                    str(tmp_path), str(workers)], cwd=REPOSITORY, check=True, timeout=600,
                   env={"PYTHONPATH": str(REPOSITORY), "PATH": "/usr/bin:/bin"})  # fmt: skip
    ranks = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in range(2)]
    total = len(written.samples)
    for epoch in range(EPOCHS):
        seen = [ranks[rank][epoch]["keys"] for rank in range(2)]
        # drop: the same count on both ranks (DDP never waits), disjoint,
        # together every sample but those dropped to make the counts equal.
        assert len(seen[0]) == len(seen[1]) == total // 2, [len(s) for s in seen]
        assert not set(seen[0]) & set(seen[1])
        assert max(Counter(seen[0] + seen[1]).values()) == 1
        for rank in range(2):
            assert ranks[rank][epoch]["batches"] == ranks[rank][epoch]["len"]
    for rank in range(2):  # a new order each epoch, on each rank
        assert ranks[rank][0]["keys"] != ranks[rank][1]["keys"]


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_workers_started_without_fork_share_their_main_process_s_epochs(tmp_path, start) -> None:
    """forkserver is Linux's default from Python 3.14: its workers' parent is
    the fork server, not the main process, whose epochs (set_epoch) they read."""
    from torch.utils.data import DataLoader

    import fastio
    from tests.ddp_job import keys

    written = write("webdataset", tmp_path / "data", shards=4, per_shard=20, seed=5)
    dataset = fastio.Dataset(written.pattern, seed=2)
    loader = DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=keys,
                        multiprocessing_context=start)  # fmt: skip
    orders = {}
    for epoch in (3, 1, 3):  # chosen by the main process, read by the workers
        dataset.set_epoch(epoch)
        orders.setdefault(epoch, []).append([k for b in loader for k in b.tolist()])
    assert orders[3][0] == orders[3][1]  # the same epoch, the same order
    assert orders[3][0] != orders[1][0]
    assert sorted(orders[1][0]) == sorted(orders[3][0]) == list(range(len(written.samples)))
