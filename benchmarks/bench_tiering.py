"""Tiering: trace replay of every policy at every budget, the model comparison, and
the real mechanics on two directories.

    python benchmarks/bench_tiering.py                       # 3 seeds, 2000 files/period
    python benchmarks/bench_tiering.py --seeds 1 --files 300 # a quick check
    python benchmarks/bench_tiering.py --compare-models      # + scikit-learn's SGDRegressor

Prints, per budget, each policy's share of all I/O served by SSD (mean over
seeds), its ratio to the oracle and to the best simple baseline, GiB written
to SSD (placements plus promotions) and GiB promoted; then spill through two
tier directories (one in /dev/shm when it exists). Writes benchmarks/results/tiering.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import fastio
from fastio.tiering import DensityModel, Tier, Tiering, compare, make_trace
from fastio.tiering._model import _WIDTH, feature_vector
from fastio.tiering._policies import DensityPolicy
from fastio.tiering._simulate import peak_bytes, replay

BASELINES = ("first-come", "size-threshold", "lru")


def replay_all(seeds: int, files: int) -> list[dict[str, object]]:
    rows = []
    for seed in range(seeds):
        started = time.perf_counter()
        for result in compare(make_trace(files, seed)):
            rows.append({"seed": seed, **result.as_dict()})
        print(f"seed {seed}: {time.perf_counter() - started:.1f} s", flush=True)
    return rows


def summarize(rows: list[dict[str, object]]) -> None:
    budgets = sorted({float(r["budget_fraction"]) for r in rows})  # type: ignore[arg-type]
    policies = list(dict.fromkeys(str(r["policy"]) for r in rows))
    print(f"\n{'budget':>6} {'policy':15} {'SSD I/O':>8} {'/oracle':>8} {'/best base':>10} "
          f"{'GiB to SSD':>10} {'promoted':>9}")  # fmt: skip
    for budget in budgets:
        mine = [r for r in rows if r["budget_fraction"] == budget]
        seeds = sorted({int(r["seed"]) for r in mine})  # type: ignore[call-overload]

        def share(policy: str, seed: int, mine: list[dict[str, object]] = mine) -> float:
            return next(float(r["ssd_fraction"]) for r in mine  # type: ignore[arg-type]
                        if r["policy"] == policy and r["seed"] == seed)  # fmt: skip

        for policy in policies:
            fractions = [share(policy, s) for s in seeds]
            oracle = [fractions[i] / max(share("oracle", s), 1e-12) for i, s in enumerate(seeds)]
            best = [fractions[i] / max(max(share(b, s) for b in BASELINES), 1e-12)
                    for i, s in enumerate(seeds)]  # fmt: skip
            written = statistics.mean(float(r["ssd_bytes_written"]) for r in mine  # type: ignore[arg-type]
                                      if r["policy"] == policy) / (1 << 30)  # fmt: skip
            promoted = statistics.mean(float(r["promoted_bytes"]) for r in mine  # type: ignore[arg-type]
                                       if r["policy"] == policy) / (1 << 30)  # fmt: skip
            print(f"{budget:>6.0%} {policy:15} {statistics.mean(fractions):>8.3f} "
                  f"{min(oracle):>4.2f}-{max(oracle):<4.2f}{min(best):>6.2f}-{max(best):<4.2f} "
                  f"{written:>10,.0f} {promoted:>9,.0f}")  # fmt: skip


class SgdModel:
    """scikit-learn's SGDRegressor on the same hashed features, learning online."""

    def __init__(self) -> None:
        from sklearn.linear_model import SGDRegressor

        self.regressor = SGDRegressor(learning_rate="adaptive", eta0=0.01, alpha=1e-4)
        self.fitted = False
        self.offset = -20.0  # centre the target: SGD starts from zero weights

    @staticmethod
    def _matrix(rows: list[fastio.tiering.Features]) -> np.ndarray:
        matrix = np.zeros((len(rows), _WIDTH))
        for i, row in enumerate(rows):
            for slot, value in feature_vector(row):
                matrix[i, slot] += value
        return matrix

    job_strength = 1.0  # no job effects: the policy's uncertainty is the kind's alone

    def job_effect(self, job: str) -> float:
        return 0.0

    def job_outcomes(self, job: str) -> int:
        return 0

    def predict_log(self, rows: list[fastio.tiering.Features], *, jobs: bool = True) -> np.ndarray:
        if not self.fitted:
            return np.full(len(rows), self.offset)
        return self.regressor.predict(self._matrix(rows)) + self.offset

    def predict(self, rows: object) -> np.ndarray:
        return np.exp(self.predict_log(list(rows)))  # type: ignore[call-overload]

    def update(self, outcomes: object) -> None:
        outcomes = list(outcomes)  # type: ignore[call-overload]
        if not outcomes:
            return
        matrix = self._matrix([o.features for o in outcomes])
        target = np.log([o.density for o in outcomes]) - self.offset
        for _ in range(5):  # a few passes: one is far from converged on a period's files
            self.regressor.partial_fit(matrix, target)
        self.fitted = True

    def error(self, outcomes: list[fastio.tiering.Outcome]) -> float:
        predicted = self.predict_log([o.features for o in outcomes])
        return float(np.mean(np.abs(predicted - np.log([o.density for o in outcomes]))))


def compare_models(seeds: int, files: int) -> dict[str, dict[str, float]]:
    makers = {"ours (ridge with a prior)": DensityModel, "prior only": None,
              "sklearn SGDRegressor": SgdModel}  # fmt: skip
    scores: dict[str, dict[str, list[float]]] = {name: {"mae": [], "share": []} for name in makers}
    for seed in range(seeds):
        trace = make_trace(files, seed)
        train, test = trace.period(0), trace.period(1)
        budget = int(peak_bytes(test) * 0.2)
        oracle = DensityPolicy(oracle=True, future=test)
        oracle.fit(train, budget, trace.period_seconds)
        best = replay(test, budget, oracle, trace.bursts).ssd_fraction
        for name, maker in makers.items():
            model = DensityModel() if maker is None else maker()
            if maker is not None:
                model.update(f.outcome() for f in train)
            scores[name]["mae"].append(model.error([f.outcome() for f in test]))
            frozen = model if maker is not None else _Frozen()
            policy = DensityPolicy(frozen)  # type: ignore[arg-type]
            policy.fit(train if maker is not None else [], budget, trace.period_seconds)
            share = replay(test, budget, policy, trace.bursts).ssd_fraction / best
            scores[name]["share"].append(share)
    summary = {name: {k: statistics.mean(v) for k, v in s.items()} for name, s in scores.items()}
    print(f"\n{'model':28} {'MAE log density':>16} {'share of oracle at 20%':>24}")
    for name, s in summary.items():
        print(f"{name:28} {s['mae']:>16.2f} {s['share']:>24.2f}")
    return summary


class _Frozen(DensityModel):
    """The prior alone: learns nothing."""

    def update(self, outcomes: object) -> None:
        return None


def mechanics(samples: int) -> dict[str, object]:
    """A shuffled dataset whose windows spill through two tier directories."""
    fast_root = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory() as slow, tempfile.TemporaryDirectory(dir=fast_root) as fast:
        shards = []
        for number in range(4):
            path = Path(slow) / f"part-{number}.jsonl"
            path.write_text("".join(f'{{"shard": {number}, "row": {i}, "pad": "{"x" * 200}"}}\n'
                                    for i in range(samples // 4)))  # fmt: skip
            shards.append(str(path))
        fast_tier = Tier("fast", Path(fast) / "t", 8 << 20)
        tiering = Tiering([fast_tier, Tier("slow", Path(slow) / "t", 1 << 30, "hdd")])
        timings = {}
        for label, extra in (("in memory", {}), ("spilled", {"shuffle_memory": 1 << 16,
                                                           "tiering": tiering})):  # fmt: skip
            with fastio.Dataset(shards, shuffle_buffer=1 << 20, shuffle_shards=4,
                                **extra) as dataset:  # type: ignore[arg-type]  # fmt: skip
                started = time.perf_counter()
                count = sum(1 for _ in dataset)
                timings[label] = count / (time.perf_counter() - started)
        spills = [o for o in tiering.outcomes if o.features.kind == "spill"]
        result = {"samples_per_s": timings, "spill_files": len(spills),
                  "spill_bytes_written": sum(o.bytes_written for o in spills),
                  "spill_operations": sum(o.operations for o in spills),
                  "tiers": [t.media for t in tiering.tiers]}  # fmt: skip
    print(
        f"\nspill through tiers {result['tiers']}: {json.dumps(result['samples_per_s'])} "
        f"samples/s; {result['spill_files']} spill files, "
        f"{result['spill_bytes_written']:,} bytes, {result['spill_operations']:,} operations"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--compare-models", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" /
                        "tiering.json")  # fmt: skip
    args = parser.parse_args()
    rows = replay_all(args.seeds, args.files)
    summarize(rows)
    report: dict[str, object] = {"seeds": args.seeds, "files_per_period": args.files,
                                 "replay": rows}  # fmt: skip
    if args.compare_models:
        report["models"] = compare_models(args.seeds, args.files)
    report["mechanics"] = mechanics(args.samples)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
