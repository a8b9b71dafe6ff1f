"""The fairness verdict over simulated windows: Jain's index, flags raised
within 3 windows of a slowdown and cleared after it, no false flags under
ordinary noise, and budget shares that move toward the starved worker.

The noise model is seeded: each window, every worker of a DataLoader in
lockstep delivers about the same samples (its consumer takes them round-robin)
with +-10% jitter, is asked for data 20-45% of the window (decode, GIL and
scheduling jitter), and waits for storage 0-10% of that; a starved worker is
asked all window and waits for storage most of it.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastio.fairness import FairnessSettings, jain_index
from fastio.fairness._verdict import judge, shift_budget, update_flags

SPAN = 1.0


def window(rng, workers, slow=(), asked=None):
    samples = 400 * rng.uniform(0.9, 1.1, workers)
    busy = rng.uniform(0.20, 0.45, workers) * SPAN
    wait = busy * rng.uniform(0.0, 0.10, workers)
    for index in slow:
        busy[index] = rng.uniform(0.90, 1.0) * SPAN
        wait[index] = busy[index] * rng.uniform(0.6, 0.9)
        samples[index] *= rng.uniform(0.8, 1.0)
    asked = np.full(workers, 1000.0) if asked is None else asked
    return samples, busy, wait, asked


class Flags:
    def __init__(self, workers, settings):
        self.flagged = np.zeros(workers)
        self.starved = np.zeros(workers)
        self.good = np.zeros(workers)
        self.settings = settings

    def step(self, samples, busy, wait, asked):
        verdict = judge(samples, busy, wait, asked, SPAN, self.settings)
        raised, cleared = update_flags(self.flagged, self.starved, self.good, verdict,
                                       self.settings)  # fmt: skip
        return verdict, raised, cleared


def test_jain_index_bounds() -> None:
    assert jain_index(np.array([3.0, 3.0, 3.0])) == pytest.approx(1.0)
    assert jain_index(np.array([1.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    assert jain_index(np.array([1.0, 2.0])) == pytest.approx(0.9)
    assert jain_index(np.array([np.nan, 2.0, 2.0])) == pytest.approx(1.0)
    assert jain_index(np.array([])) == 1.0


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_no_false_flags_over_many_balanced_windows(workers) -> None:
    rng = np.random.default_rng(workers)
    flags = Flags(workers, FairnessSettings())
    lowest_relative, jains = 1.0, []
    for _ in range(1500):
        verdict, raised, _ = flags.step(*window(rng, workers))
        assert not raised
        lowest_relative = min(lowest_relative, float(np.nanmin(verdict.relative_rate)))
        jains.append(verdict.jain)
    assert not flags.flagged.any()
    # Margin under the defaults (0.6): balanced noise stays well clear of them.
    assert lowest_relative > 0.8
    assert min(jains) > 0.97


@pytest.mark.parametrize("workers", [2, 4])
def test_a_slowed_worker_is_flagged_within_3_windows_and_cleared_after(workers) -> None:
    rng = np.random.default_rng(10 + workers)
    settings = FairnessSettings()
    flags = Flags(workers, settings)
    events = []
    for index in range(60):
        slow = (1,) if 20 <= index < 40 else ()
        _, raised, cleared = flags.step(*window(rng, workers, slow))
        events += [("raised", index, w) for w in raised] + [("cleared", index, w) for w in cleared]
    raised_at = [i for kind, i, w in events if kind == "raised" and w == 1]
    cleared_at = [i for kind, i, w in events if kind == "cleared" and w == 1]
    assert len(raised_at) == 1
    assert 20 <= raised_at[0] < 23
    assert len(cleared_at) == 1
    assert 40 <= cleared_at[0] < 43
    assert {w for _, _, w in events} == {1}


def test_rates_count_relative_to_the_samples_assigned() -> None:
    settings = FairnessSettings()
    # Worker 1 was assigned half as much and delivers half as much: not behind.
    samples, busy, wait = np.array([400.0, 200.0]), np.ones(2), np.zeros(2)
    verdict = judge(samples, busy, wait, np.array([1000.0, 500.0]), SPAN, settings)
    assert verdict.jain == pytest.approx(1.0)
    assert not verdict.starved.any()
    verdict = judge(samples, busy, wait, np.array([1000.0, 1000.0]), SPAN, settings)
    assert verdict.starved.tolist() == [False, True]


def test_idle_workers_get_no_verdict() -> None:
    samples, busy, wait = np.array([400.0, 0.0, 380.0]), np.array([0.3, 0.0, 0.3]), np.zeros(3)
    verdict = judge(samples, busy, wait, np.full(3, 1000.0), SPAN, FairnessSettings())
    assert verdict.active.tolist() == [True, False, True]
    assert np.isnan(verdict.rate[1])
    assert not verdict.starved.any()


def test_shares_move_toward_the_starved_worker_under_the_same_total() -> None:
    settings = FairnessSettings(max_share=1.6)
    rng = np.random.default_rng(3)
    weights = np.ones(4)
    for _ in range(20):
        verdict = judge(*window(rng, 4, slow=(2,)), SPAN, settings)
        weights = shift_budget(weights, verdict, settings)
        assert weights.sum() == pytest.approx(4.0)
        assert weights.max() <= settings.max_share + 1e-9
    assert weights[2] == pytest.approx(1.6)
    assert (weights[[0, 1, 3]] < 1.0).all()


def test_balanced_windows_leave_shares_alone() -> None:
    rng = np.random.default_rng(5)
    weights = np.array([1.5, 0.5, 1.0])
    for _ in range(200):
        verdict = judge(*window(rng, 3), SPAN, FairnessSettings())
        assert shift_budget(weights, verdict, FairnessSettings()).tolist() == weights.tolist()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"window_seconds": 0}, "window_seconds"),
        ({"rate_threshold": 1.5}, "rate_threshold"),
        ({"flag_after": 0}, "flag_after"),
        ({"max_share": 0.5}, "max_share"),
        ({"enabled": "yes"}, "enabled"),
        ({"callback": 3}, "callback"),
    ],
)
def test_bad_settings_are_named(changes, message) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        FairnessSettings(**changes)


def test_settings_from_what_a_dataset_takes() -> None:
    assert FairnessSettings.coerce(None) == FairnessSettings.coerce(True) == FairnessSettings()
    assert FairnessSettings.coerce(False).enabled is False
    assert FairnessSettings.coerce({"flag_after": 3}).flag_after == 3
    with pytest.raises(TypeError, match="fairness must be"):
        FairnessSettings.coerce(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("readiness", "starved"), [(0.75, False), (0.55, False), (0.45, True), (0.2, True)]
)
def test_readiness_counts_under_the_floor_only(readiness: float, starved: bool) -> None:
    # Equal rates (round-robin forces them); worker 0's data is ready `readiness`
    # of the time it is asked, the others' always.
    busy = np.full(3, SPAN)
    wait = np.array([(1 - readiness) * SPAN, 0.0, 0.0])
    verdict = judge(np.full(3, 500.0), busy, wait, np.full(3, 1000.0), SPAN, FairnessSettings())
    assert bool(verdict.starved[0]) is starved  # 0.55: 0.45 behind its peers, over the floor
    assert not verdict.starved[1:].any()


def test_shifted_shares_never_leave_a_worker_under_its_floor() -> None:
    settings = FairnessSettings(max_share=4.0)
    busy = np.full(2, SPAN)
    verdict = judge(np.array([10.0, 1000.0]), busy, np.array([0.9 * SPAN, 0.0]),
                    np.full(2, 1000.0), SPAN, settings)  # fmt: skip
    weights = np.ones(2)
    for _ in range(20):  # keeps moving toward the starved worker, within bounds
        weights = shift_budget(weights, verdict, settings)
    assert weights.sum() == pytest.approx(2.0)
    assert weights.min() >= 1 / settings.max_share - 1e-9
    assert weights[0] > 1 > weights[1]
