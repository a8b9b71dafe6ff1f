"""Tiering policies on synthetic traces, the model's learning, tier detection, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastio.cli import main
from fastio.tiering import DensityModel, Tier, compare, knapsack_cutoff, make_trace, media_kind
from fastio.tiering._simulate import peak_bytes

BASELINES = ("first-come", "size-threshold", "lru")


def held_out(seed: int, budget: float = 0.2) -> dict[str, float]:
    results = compare(make_trace(2000, seed), budgets=(budget,))
    return {result.policy: result.ssd_fraction for result in results}


@pytest.fixture(scope="module")
def scores() -> list[dict[str, float]]:
    return [held_out(seed) for seed in range(5)]


@pytest.mark.slow
def test_learned_policy_reaches_the_issues_bar(scores: list[dict[str, float]]) -> None:
    # Issue #7: on held-out traces at a 20 % SSD budget, >= 0.9 of what the oracle
    # serves from SSD and >= 1.3x the best simple baseline. Measured on seeds 0-4:
    # 0.91-0.99 of the oracle, 1.39-1.65x the best baseline; seeds 5-15 in the README.
    for score in scores:
        best = max(score[name] for name in BASELINES)
        assert score["all-hdd"] == 0.0
        assert score["learned"] >= 0.9 * score["oracle"], score
        assert score["learned"] >= 1.3 * best, score


def test_no_policy_overfills_the_fast_tier() -> None:
    trace = make_trace(150, 3)
    results = compare(trace, budgets=(0.1, 0.5))
    for result in results:
        assert result.peak_ssd_bytes <= result.budget
        assert 0.0 <= result.ssd_fraction <= 1.0
        assert 0 <= result.promoted_bytes <= result.ssd_bytes_written
    # Promotions happen, and their bytes count as writes to SSD.
    assert any(r.promotions > 0 and r.promoted_bytes > 0 for r in results if r.policy == "learned")


def test_one_outcome_at_a_time_learns_what_a_batch_does_and_jobs_shrink() -> None:
    files = make_trace(300, 2).period(0)
    batch, single = DensityModel(), DensityModel()
    batch.update(file.outcome() for file in files)
    for file in files:
        single.update([file.outcome()])
    rows = [file.features for file in files[:50]]
    assert np.allclose(batch.predict_log(rows, jobs=False), single.predict_log(rows, jobs=False))
    job = files[0].features.job
    count = batch.job_outcomes(job)
    assert count == sum(1 for file in files if file.features.job == job) > 0
    assert batch.job_effect("a job never seen") == 0.0
    # A job's effect is its files' mean residual, shrunk towards 0 by job_strength.
    loose = DensityModel(job_strength=1e-9)
    loose.update(file.outcome() for file in files)
    assert abs(batch.job_effect(job)) < abs(loose.job_effect(job))
    assert batch.job_effect(job) * loose.job_effect(job) > 0


def test_the_trace_is_heavy_tailed_and_only_partly_predictable() -> None:
    trace = make_trace(1500, 5)
    test = trace.period(1)
    densities = np.log([file.density for file in test])
    assert densities.std() > 1.2  # orders of magnitude apart
    model = DensityModel()
    model.update(file.outcome() for file in trace.period(0))
    error = model.error([file.outcome() for file in test])
    blind = float(np.mean(np.abs(densities - np.median(densities))))
    assert 0.5 < error < 0.9 * blind  # features help, but far from fully


def test_prediction_error_falls_as_outcomes_accumulate() -> None:
    trace = make_trace(2000, 7)
    files = sorted(trace.period(0), key=lambda file: file.ended)
    chunks = np.array_split(np.arange(len(files)), 5)
    model = DensityModel()
    errors = []
    for chunk in chunks:
        outcomes = [files[i].outcome() for i in chunk]
        errors.append(model.error(outcomes))  # before learning this period
        model.update(outcomes)
    assert errors[-1] < errors[0] * 0.7, errors
    assert min(errors[2:]) < errors[1], errors


def test_knapsack_cutoff_fills_the_capacity_densest_first() -> None:
    assert knapsack_cutoff([5.0, 1.0, 3.0], [10, 10, 10], 15) == 3.0
    assert knapsack_cutoff([5.0, 1.0], [10, 10], 100) == 0.0


def test_peak_bytes_counts_overlap_only() -> None:
    trace = make_trace(50, 1)
    files = trace.period(0)
    assert max(f.size for f in files) <= peak_bytes(files) <= sum(f.size for f in files)


def test_media_detection_and_override(tmp_path: object) -> None:
    assert media_kind("/dev/shm") == "ram"
    assert media_kind("/proc") in ("ssd", "hdd", "ram")
    tier = Tier("slow", str(tmp_path), 1 << 20, "hdd")
    assert (tier.media, tier.detected) == ("hdd", False)
    with pytest.raises(ValueError, match="capacity"):
        Tier("x", str(tmp_path), 0)
    with pytest.raises(ValueError, match="media"):
        Tier("x", str(tmp_path), 10, "tape")  # type: ignore[arg-type]


def test_cli_replays_and_writes_json(tmp_path: object) -> None:
    from pathlib import Path

    out = Path(str(tmp_path)) / "tiering.json"
    result = CliRunner().invoke(main, ["tiering", "--files", "200", "--budget-fraction", "0.2",
                                       "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "learned" in result.output
    assert "oracle" in result.output
    data = json.loads(out.read_text())
    assert {r["policy"] for r in data["results"]} >= {"learned", "oracle", "lru"}


def test_cli_probe_shows_tiers(tmp_path: object) -> None:
    result = CliRunner().invoke(main, ["tiering", "probe", "--json", "--tier",
                                       f"slow={tmp_path}:1GiB:hdd", "--tier",
                                       "fast=/dev/shm/fastio-test-tier:64MiB"])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["tiers"]
    assert [(r["name"], r["media"]) for r in rows] == [("slow", "hdd"), ("fast", "ram")]
    assert all(r["random_read_iops"] > 0 and r["sequential_mb_s"] > 0 for r in rows)
    bad = CliRunner().invoke(main, ["tiering", "probe", "--tier", "nonsense"])
    assert bad.exit_code != 0
    assert "NAME=PATH:CAPACITY" in bad.output
    a_file = Path(str(tmp_path)) / "a-file"
    a_file.write_bytes(b"")
    for spec in (f"file={a_file}:1GiB:hdd", f"under-a-file={a_file}/tier:1GiB:hdd"):
        refused = CliRunner().invoke(main, ["tiering", "probe", "--refresh", "--tier", spec])
        assert refused.exit_code == 1, refused.output  # an error, said: no traceback
        assert str(a_file) in refused.output


def test_probed_profiles_are_kept_where_the_cache_folder_is_when_probing(tmp_path, monkeypatch):
    """The profile cache follows ``$XDG_CACHE_HOME`` as set when a tier is
    probed (a job, or a test, that points it elsewhere after importing fastio
    does not write into the user's own cache)."""
    from fastio.tiering._tiers import probe

    tier = Tier("slow", str(tmp_path / "tier"), 1 << 30, "hdd")
    for folder in ("first", "second"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / folder))
        profile = probe(tier, seconds=0.02)
        kept = json.loads((tmp_path / folder / "fastio" / "tier-profiles.json").read_text())
        assert kept == {f"{profile.device}:hdd": profile.as_dict()}
