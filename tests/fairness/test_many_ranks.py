"""The fairness monitor at any world size: 1,024 ranks (their summaries in the
exchange folder, as ranks publish them), a rank past the old table's end,
judged and reported like the others."""

from __future__ import annotations

import os

import fastio
from fastio.fairness import FairnessMonitor
from fastio.fairness import _board as b
from fastio.fairness._exchange import FileExchange
from fastio.plan import Participant
from tests.shards import write

WORLD = 1024
SLOW = 1000


def publish_peers(exchange: FileExchange, window: int, skip: int) -> None:
    for rank in range(WORLD):
        if rank != skip:
            exchange.publish(rank, {
                "pid": 1, "window": window, "samples": 100 * window, "bytes": 0, "asked": 1000,
                "workers": 1, "rate": 10.0 if rank == SLOW else 100.0, "readiness": 1.0,
                "starved_workers": [],
            })  # fmt: skip


def test_a_slow_rank_among_1024_is_flagged(tmp_path) -> None:
    folder = str(tmp_path / "exchange")
    monitor = FairnessMonitor({"window_seconds": 1.0, "exchange_dir": folder})
    exchange = FileExchange(folder)
    try:
        with fastio.Reader() as reader:
            observer = monitor.observe(Participant(WORLD - 1, WORLD), 0, 1000, reader, lambda: 0)
            assert observer is not None
            observer.tick(0.0)  # its first publish takes its slot
            board = monitor._get_board()
            for window in range(1, 5):
                publish_peers(exchange, window, skip=WORLD - 1)
                board.slots[0, b.SAMPLES] += 100
                board.slots[0, b.BUSY] += 1.0
                monitor._close_window(board, 1.0)
        report = monitor.report()
        assert (report["rank"], report["world_size"]) == (WORLD - 1, WORLD)
        assert len(report["ranks"]) == WORLD
        assert report["starved_ranks"] == [SLOW]
        assert report["ranks"][WORLD - 1]["samples"] == 400
    finally:
        monitor.close()
    assert not os.path.exists(os.path.join(folder, f"rank-{WORLD - 1}.json"))


def test_datasets_of_the_last_ranks_read_with_monitoring_on(tmp_path) -> None:
    written = write("webdataset", tmp_path / "data", shards=3, per_shard=20)
    fairness = {"exchange_dir": str(tmp_path)}
    for rank in (255, 256, WORLD - 1):
        dataset = fastio.Dataset(written.pattern, rank=rank, world_size=WORLD, remainder="pad",
                                 fairness=fairness)  # fmt: skip
        assert len(list(dataset)) == len(dataset) == 1  # 60 samples padded to one each
        assert dataset.stats()["fairness"]["rank"] == rank
        dataset.close()
