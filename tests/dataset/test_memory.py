"""A process grows over an epoch by no more than its budgets plus 32 MiB.

Each measurement runs in a fresh interpreter, so nothing else the suite did
lives in the process measured. Growth is the peak of the process's private
memory (``/proc/self/smaps_rollup``: what USS counts) over the iteration, less
its value after the dataset was made. The data is ten times the budgets, so a
buffer that grows with the data (a queue without bound, a leak per sample)
overshoots the allowance whatever the timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MiB = 1 << 20
BUDGET = 4 * MiB  # shuffle_buffer and memory_budget each
SLACK = 32 * MiB
SAMPLE = 100_000
SHARDS, PER_SHARD = 8, 100  # 80 MB of samples

_MEASURE = """
import json, sys

def private_bytes():
    with open("/proc/self/smaps_rollup") as rollup:
        fields = dict(line.split()[:2] for line in rollup if line.endswith("kB\\n"))
    return (int(fields["Private_Clean:"]) + int(fields["Private_Dirty:"])) * 1024

class Measured:
    \"\"\"Iterates ``dataset`` in whatever process iterates it (a DataLoader
    worker too), then yields that process's growth as a last item.\"\"\"

    def __init__(self, dataset, epochs):
        self.dataset, self.epochs = dataset, epochs

    def __iter__(self):
        first = peak = private_bytes()
        count = 0
        for _ in range(self.epochs):
            for sample in self.dataset:
                count += 1
                yield sample
                if count % 8 == 0:
                    peak = max(peak, private_bytes())
        peak = max(peak, private_bytes())
        yield {"growth": peak - first, "count": count}
"""

_ONE_PROCESS = (
    _MEASURE
    + """
import fastio
urls, knobs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
dataset = fastio.Dataset(urls, **knobs)
for result in Measured(dataset, 2):
    pass
print(json.dumps(result))
"""
)

_WORKER = (
    _MEASURE
    + """
import torch.utils.data
import fastio

class Loadable(Measured, torch.utils.data.IterableDataset):
    pass

urls, knobs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
dataset = fastio.Dataset(urls, **knobs)
loader = torch.utils.data.DataLoader(Loadable(dataset, 2), batch_size=None, num_workers=1)
for result in loader:
    pass
print(json.dumps(result))
"""
)


@pytest.fixture(scope="module")
def big_shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    import webdataset

    folder = tmp_path_factory.mktemp("memory")
    urls = []
    for shard in range(SHARDS):
        path = folder / f"wds-{shard:04d}.tar"
        with webdataset.TarWriter(str(path)) as sink:
            for key in range(shard * PER_SHARD, (shard + 1) * PER_SHARD):
                sink.write({"__key__": f"sample{key:07d}", "bin": os.urandom(SAMPLE)})
        urls.append(str(path))
    return urls


def _growth(script: str, urls: list[str], **knobs: object) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", script, json.dumps(urls), json.dumps(knobs)],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _budgets(tmp_path: Path) -> dict[str, object]:
    return {"shuffle_buffer": BUDGET, "memory_budget": BUDGET,
            "index_dir": str(tmp_path / "index")}  # fmt: skip


def test_one_process_grows_within_its_budgets(big_shards: list[str], tmp_path: Path) -> None:
    result = _growth(_ONE_PROCESS, big_shards, **_budgets(tmp_path))
    assert result["count"] == 2 * SHARDS * PER_SHARD
    allowed = 2 * BUDGET + SLACK
    assert result["growth"] <= allowed, (
        f"grew {result['growth'] / MiB:.0f} MiB, allowed {allowed / MiB:.0f}"
    )


def test_a_dataloader_worker_grows_within_its_budgets(
    big_shards: list[str], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    handoff = 4 * MiB
    result = _growth(_WORKER, big_shards, handoff_memory=handoff, **_budgets(tmp_path))
    assert result["count"] == 2 * SHARDS * PER_SHARD
    allowed = 2 * BUDGET + handoff + SLACK
    assert result["growth"] <= allowed, (
        f"grew {result['growth'] / MiB:.0f} MiB, allowed {allowed / MiB:.0f}"
    )
