"""The storage simulator: deterministic, and plausible for each profile."""

from __future__ import annotations

import pytest
from fastio.tuners import PROFILES, StorageSimulator

KiB = 1024
MiB = 1024 * KiB


def rate(profile: str, requests: int, size: int, **knobs: object) -> float:
    return PROFILES[profile].rate({"outstanding_requests": requests, "read_size": size, **knobs})


def ticks(seed: int, count: int = 20) -> list[tuple[int, float]]:
    simulator = StorageSimulator("hdd", seed=seed)
    simulator.apply({"outstanding_requests": 4, "read_size": 4 * MiB})
    return [simulator.tick() for _ in range(count)]


def test_same_seed_same_traffic_other_seed_other_noise() -> None:
    assert ticks(3) == ticks(3)
    assert ticks(3) != ticks(4)


def test_nvme_one_large_read_is_nearly_enough() -> None:
    best = max(rate("nvme", n, s) for n in (1, 4, 16, 64) for s in (256 * KiB, MiB, 4 * MiB))
    assert rate("nvme", 1, MiB) >= 0.6 * best
    assert rate("nvme", 1, 16 * KiB) < 0.2 * best  # small reads pay latency per request


def test_remote_1gbit_needs_sixteen_in_flight_or_four_large() -> None:
    cap = PROFILES["remote-1gbit"].bandwidth
    assert rate("remote-1gbit", 16, MiB) >= 0.9 * cap
    assert rate("remote-1gbit", 4, 4 * MiB) >= 0.8 * cap
    assert rate("remote-1gbit", 1, MiB) < 0.25 * cap
    # Too much in flight loses again: 64 x 4 MiB is worse than 16 x 1 MiB.
    assert rate("remote-1gbit", 64, 4 * MiB) < 0.8 * rate("remote-1gbit", 16, MiB)


def test_remote_uncapped_scales_with_bytes_in_flight() -> None:
    assert rate("remote-uncapped", 32, MiB) > 1.8 * rate("remote-uncapped", 16, MiB)
    # Many tiny requests run into the client's per-request CPU cost.
    assert rate("remote-uncapped", 256, 16 * KiB) < 0.15 * PROFILES["remote-uncapped"].bandwidth


def test_hdd_wants_large_reads_and_few_of_them() -> None:
    assert rate("hdd", 4, 8 * MiB) > 5 * rate("hdd", 4, 64 * KiB)
    assert rate("hdd", 64, 8 * MiB) < 0.8 * rate("hdd", 4, 8 * MiB)


def test_engine_and_direct_knobs_change_local_rates() -> None:
    assert rate("nvme", 64, 16 * KiB, engine="threads") < rate("nvme", 64, 16 * KiB)
    assert rate("nvme", 32, 4 * MiB, direct=True) > rate("nvme", 32, 4 * MiB, direct=False)


def test_warm_up_after_a_change_and_switching_profiles() -> None:
    simulator = StorageSimulator("remote-1gbit", seed=0, tick_seconds=0.05)
    simulator.apply({"outstanding_requests": 16, "read_size": MiB})
    first, _ = simulator.tick()
    steady = [simulator.tick()[0] for _ in range(10)][-1]
    assert first < 0.7 * steady  # the pipe fills over about two service times
    simulator.switch("remote-uncapped")
    assert simulator.profile.name == "remote-uncapped"
    faster = [simulator.tick()[0] for _ in range(5)]
    assert min(faster) > 1.5 * steady
    assert simulator.clock == pytest.approx(0.05 * 16)


def test_a_tick_needs_a_configuration() -> None:
    with pytest.raises(RuntimeError, match="apply a configuration"):
        StorageSimulator("nvme").tick()
    with pytest.raises(KeyError):
        StorageSimulator("tape")
