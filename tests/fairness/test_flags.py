"""A starved worker's flag and share, from the board to the user, with no
clock in the verdict: the monitor judges windows whose counters the test
writes (as workers' publishers do), so every outcome here is the same on a
busy machine. How fast a real slow path is flagged, and what mitigation buys
in time, are timing outcomes: ``benchmarks/bench_fairness.py`` measures them
(parts ``flagging`` and ``injected``)."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest

import fastio
from fastio.fairness import FairnessMonitor
from fastio.fairness import _board as b
from fastio.plan import Participant


class Events(list[dict[str, Any]]):
    def __call__(self, event: dict[str, Any]) -> None:
        self.append(event)


@pytest.fixture
def monitor():
    events = Events()
    monitor = FairnessMonitor({"window_seconds": 1.0, "callback": events})
    monitor.events = events  # type: ignore[attr-defined]
    yield monitor
    monitor.close()


def window(monitor: FairnessMonitor, samples: tuple[float, float], waits=(0.0, 0.0)) -> None:
    """One second in which each of two workers was busy for all of it,
    delivered ``samples`` and waited ``waits`` for storage; then judged."""
    board = monitor._get_board()
    for worker, (delivered, waited) in enumerate(zip(samples, waits, strict=True)):
        slot = board.slots[worker]
        slot[b.PID], slot[b.ACTIVE], slot[b.ASKED] = os.getpid(), 1.0, 10_000.0
        slot[b.SAMPLES] += delivered
        slot[b.BUSY] += 1.0
        slot[b.WAIT] += waited
    monitor._close_window(board, 1.0)


def starved(monitor: FairnessMonitor) -> list[int]:
    return monitor.report()["starved_workers"]


def test_a_slow_worker_is_flagged_after_two_windows_and_cleared_after_two(monitor, caplog):
    caplog.set_level(logging.WARNING, "fastio.fairness")
    window(monitor, (500, 500))  # a worker's first window never counts
    window(monitor, (100, 500))
    assert starved(monitor) == []  # one window is not a streak
    window(monitor, (100, 500))
    assert starved(monitor) == [0]
    window(monitor, (500, 500))
    assert starved(monitor) == [0]
    window(monitor, (500, 500))
    assert starved(monitor) == []
    events = monitor.events  # type: ignore[attr-defined]
    assert [(e["event"], e["worker"]) for e in events] == [("starved", 0), ("recovered", 0)]
    assert events[0]["relative_rate"] == pytest.approx(0.2)
    assert "DataLoader worker 0 of rank 0 is starved" in caplog.text
    timeline = monitor.report(timeline=True)["timeline"]
    assert [[w["starved"] for w in row["workers"]] for row in timeline] == [
        [False, False], [False, False], [True, False], [True, False], [False, False]]  # fmt: skip


def test_waiting_for_storage_flags_even_at_an_equal_rate(monitor):
    # A round-robin DataLoader makes the workers' rates equal; readiness tells.
    for _ in range(3):
        window(monitor, (500, 500), waits=(0.8, 0.05))
    assert starved(monitor) == [0]


def test_the_share_moves_toward_the_starved_worker_and_reaches_its_reader(monitor):
    window(monitor, (500, 500))
    for _ in range(3):
        window(monitor, (100, 500))
    board = monitor._get_board()
    weights = board.slots[:2, b.WEIGHT]
    assert weights[0] > 1.0 > weights[1]
    assert weights[:2].sum() == pytest.approx(2.0)
    with fastio.Reader(outstanding_requests=10) as slow, fastio.Reader(outstanding_requests=10) \
            as fast:  # fmt: skip
        limits = []
        for worker, reader in enumerate((slow, fast)):
            observer = monitor.observe(Participant(0, 1, worker, 2), 0, 0, reader, lambda: 0)
            assert observer is not None
            observer.tick(0.0)  # publishing applies the monitor's share
            limits.append(reader.request_limit)
            assert reader.outstanding_requests == 10  # the base is the tuner's, untouched
        assert limits[0] > 10 > limits[1]
        assert sum(limits) <= 20  # never more than the node's total


def test_without_mitigation_shares_stay_even(monitor):
    plain = FairnessMonitor({"window_seconds": 1.0, "mitigate": False})
    try:
        for samples in ((500, 500), (100, 500), (100, 500), (100, 500)):
            window(plain, samples)
        assert starved(plain) == [0]
        assert list(plain._get_board().slots[:2, b.WEIGHT]) == [0.0, 0.0]  # never written
    finally:
        plain.close()
