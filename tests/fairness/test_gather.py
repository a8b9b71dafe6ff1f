"""Ranks compared through torch.distributed: two real gloo processes, each with
DataLoader workers, call fastio.fairness.all_gather_report at the same step and
get the same report, whose totals are what each rank delivered."""

from __future__ import annotations

import numpy as np
import pytest

import fastio
from fastio.fairness import all_gather_report, jain_index
from tests.ranks import run_ranks
from tests.shards import write

GATHER_SCRIPT = """
import json, sys
import torch.distributed as dist
from torch.utils.data import DataLoader
import fastio
from fastio.fairness import all_gather_report, jain_index
from tests.shards import key_of
rank, port, pattern, exchange = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
dataset = fastio.Dataset(pattern, shuffle_buffer=40_000,
                         fairness={"window_seconds": 0.02, "exchange_dir": exchange})
loader = DataLoader(dataset, batch_size=5, num_workers=2,
                    collate_fn=lambda b: [key_of("webdataset", s) for s in b])
keys = [k for batch in loader for k in batch]
report = all_gather_report(dataset)
length = len(dataset)  # this rank's share, while torch.distributed names the rank
dataset.close()
dist.destroy_process_group()
print(json.dumps({"keys": keys, "length": length, "report": report}))
"""


@pytest.mark.slow  # two interpreters import torch and start DataLoader workers: ~6 s
def test_two_gloo_ranks_gather_the_same_report(tmp_path) -> None:
    written = write("webdataset", tmp_path, shards=8, per_shard=25)
    results = run_ranks(GATHER_SCRIPT, written.pattern, str(tmp_path / "exchange"))
    reports = [r["report"] for r in results]
    assert reports[0] == reports[1], reports  # one collective: every rank sees the same
    report = reports[0]
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    for rank, result in enumerate(results):
        entry = report["ranks"][rank]
        assert entry["samples"] == len(result["keys"]) == result["length"] == entry["assigned"]
        assert entry["workers"] == 2
        assert entry["bytes"] > 0
        assert entry["rate"] > 0
        assert entry["relative_rate"] is not None
    assert report["samples_all_ranks"] == len(written.samples)
    assert sorted(k for r in results for k in r["keys"]) == [s["key"] for s in written.samples]
    # Both were assigned as many samples: Jain's index is over their rates as they are.
    rates = np.array([r["rate"] for r in report["ranks"]])
    assert report["rank_jain_index"] == pytest.approx(jain_index(rates))
    relative = [r["relative_rate"] for r in report["ranks"]]
    assert relative[0] == pytest.approx(rates[0] / rates[1])
    assert report["starved_ranks"] == [r["rank"] for r in report["ranks"] if r["starved"]]


def test_without_torch_distributed_it_says_so(tmp_path) -> None:
    written = write("webdataset", tmp_path, shards=2, per_shard=5)
    with fastio.Dataset(written.pattern) as dataset, pytest.raises(RuntimeError, match="init"):
        all_gather_report(dataset)
