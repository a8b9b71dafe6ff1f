"""Synthetic traces of intermediate files from several kinds of data pipeline.

A trace is files (features known at creation, then the truth: lifetime and
I/O) and the bursts of I/O each file sees. It covers two periods: policies
learn on the first and are scored on the second, which differs the way
production does from one week to the next: the pipeline mix shifts, each
(pipeline, kind) drifts a little, and a producer unseen before appears.

Densities are drawn so that the features explain only part of them:

``log density = base(pipeline, kind) + size and reuse effects + job effect + file noise``

where the job effect (a job's data and code; the job's id is a feature, its
effect is not) is normal with sd 0.8 and the file noise is Laplace with scale
0.7 (sd about 1): heavier-tailed than normal, so a few files carry much of the
I/O, and a feature-blind guess is off by orders of magnitude. (A first version
drew Student-t noise with 3 degrees of freedom, which put 95% of all I/O in the
densest 1% of space-time and made every policy look nearly perfect.) Sizes are
log-normal or Pareto.

When the I/O comes follows the kind of file, because that is what tells
recency-based policies apart from density-based ones:

* shard copies are read whole once per epoch (``reuse`` bursts, evenly spaced);
* spill is written, then read back once, at the end of its life;
* index files and random-access columnar copies are read steadily;
* users' temporaries see a few bursts at random times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastio.tiering._model import Features, Outcome

if TYPE_CHECKING:
    import numpy as np

__all__ = ["PIPELINES", "Trace", "TraceFile", "make_trace"]

_HOUR = 3600.0
_MIB = 1 << 20


@dataclass(frozen=True)
class TraceFile:
    """One file of a trace: what was known at ``created``, and what happened."""

    number: int
    created: float
    lifetime: float
    features: Features
    operations: int
    period: int

    @property
    def size(self) -> int:
        return self.features.size

    @property
    def ended(self) -> float:
        return self.created + self.lifetime

    @property
    def density(self) -> float:
        return self.outcome().density

    def outcome(self) -> Outcome:
        size = self.features.size
        return Outcome(self.features, size, self.operations, 0, 0, self.lifetime)


@dataclass(frozen=True)
class Trace:
    files: list[TraceFile]
    bursts: list[tuple[float, int, int]]
    """``(time, file number, operations)``, in time order."""
    period_seconds: float

    def period(self, which: int) -> list[TraceFile]:
        return [file for file in self.files if file.period == which]


# Per pipeline: (format, {kind: (base log density, size median MiB, size sigma, lifetime h,
# access, reuse range)}, share of files in period 0, share in period 1).
_Kinds = dict[str, tuple[float, float, float, float, str, tuple[int, int]]]
PIPELINES: dict[str, tuple[str, _Kinds, float, float]] = {
    "vision": ("webdataset", {
        "shard": (-21.5, 256, 0.6, 4.0, "sequential", (2, 16)),
        "spill": (-19.0, 512, 1.0, 0.5, "random", (1, 1)),
        "index": (-18.0, 4, 1.0, 4.0, "random", (1, 1)),
    }, 0.35, 0.25),
    "llm": ("arrow", {
        "shard": (-21.5, 1024, 0.5, 8.0, "sequential", (1, 2)),
        "spill": (-19.5, 1024, 0.8, 1.0, "random", (1, 1)),
        "index": (-18.5, 16, 0.8, 8.0, "random", (1, 1)),
    }, 0.2, 0.3),
    "recsys": ("parquet", {
        "shard": (-21.0, 64, 1.2, 3.0, "random", (4, 40)),
        "spill": (-18.5, 256, 1.0, 0.3, "random", (1, 1)),
    }, 0.25, 0.2),
    "etl": ("jsonl", {
        "user": (-20.0, 512, 1.6, 2.0, "sequential", (1, 3)),
        "spill": (-19.0, 1024, 1.4, 0.5, "random", (1, 1)),
    }, 0.2, 0.25),
}  # fmt: skip
_STAGES = ("train", "eval", "preprocess")
_STAGE_EFFECT = {"train": 0.0, "eval": -0.7, "preprocess": 0.5}


def make_trace(files_per_period: int = 2000, seed: int = 0, hours: float = 24.0) -> Trace:
    """Two periods of ``hours`` each, ``files_per_period`` files in each."""
    import numpy as np

    if files_per_period < 1 or hours <= 0:
        raise ValueError("a trace needs files and time")
    rng = np.random.default_rng(seed)
    period_seconds = hours * _HOUR
    drift = {(p, k): rng.normal(0, 0.3) for p, (_, kinds, _, _) in PIPELINES.items()
             for k in kinds}  # fmt: skip
    files: list[TraceFile] = []
    bursts: list[tuple[float, int, int]] = []
    for period in (0, 1):
        names = list(PIPELINES)
        shares = np.array([PIPELINES[name][2 + period] for name in names])
        jobs = _jobs(rng, names, shares / shares.sum(), period, period_seconds)
        for _ in range(files_per_period):
            job = jobs[int(rng.integers(len(jobs)))]
            name, stage, effect, started = job
            file = _file(rng, len(files), name, stage, effect, started, period,
                         period_seconds, drift if period else {})  # fmt: skip
            files.append(file)
            bursts.extend(_bursts(rng, file))
    bursts.sort()
    return Trace(files, bursts, period_seconds)


def _jobs(
    rng: np.random.Generator, names: list[str], shares: np.ndarray, period: int, length: float
) -> list[tuple[str, str, float, float]]:
    """Jobs of the period: (name, stage, hidden effect, start time); a job's
    name starts with its pipeline's."""
    jobs = []
    for number in range(60):
        pipeline = names[int(rng.choice(len(names), p=shares))]
        stage = _STAGES[int(rng.integers(len(_STAGES)))]
        if period == 1 and rng.random() < 0.15:
            stage = "finetune"  # a producer the first period never saw
        start = period * length + rng.uniform(0, length * 0.8)
        jobs.append((f"{pipeline}-{period}-{number}", stage, float(rng.normal(0, 0.8)), start))
    return jobs


def _file(
    rng: np.random.Generator, number: int, job: str, stage: str, effect: float,
    started: float, period: int, length: float, drift: dict[tuple[str, str], float],
) -> TraceFile:  # fmt: skip
    pipeline = job.split("-")[0]
    format_name, kinds, _, _ = PIPELINES[pipeline]
    kind = list(kinds)[int(rng.integers(len(kinds)))]
    base, median, sigma, hours, access, (low, high) = kinds[kind]
    if kind == "user":  # users' temporaries: Pareto sizes, the heaviest tail
        size_mib = median * 0.3 * (1 + rng.pareto(1.3))
    else:
        size_mib = median * math.exp(rng.normal(0, sigma))
    size = max(4096, int(size_mib * _MIB))
    reuse = int(rng.integers(low, high + 1))
    noise = float(rng.laplace(0, 0.7))
    log_density = (
        base + drift.get((pipeline, kind), 0.0) + _STAGE_EFFECT.get(stage, 0.3)
        - 0.35 * math.log(size / (median * _MIB) + 1e-9) + 0.8 * math.log(reuse)
        + effect + noise
    )  # fmt: skip
    lifetime = hours * _HOUR * math.exp(rng.normal(0, 0.7))
    if kind == "shard":
        lifetime *= reuse / ((low + high) / 2)  # more epochs, longer kept
    created = min(started + rng.exponential(length * 0.1), (period + 1) * length - 60)
    mean_operations = math.exp(log_density) * size * lifetime
    operations = max(1, int(rng.poisson(min(mean_operations, 1e9))))
    features = Features(kind, size, format_name, access, float(reuse),  # type: ignore[arg-type]
                        f"{pipeline}/{stage}", job)  # fmt: skip
    return TraceFile(number, created, lifetime, features, operations, period)


def _bursts(rng: np.random.Generator, file: TraceFile) -> list[tuple[float, int, int]]:
    """When the file's operations come (see the module's docstring)."""
    kind, start, life, total = file.features.kind, file.created, file.lifetime, file.operations
    if kind == "shard":
        count = max(1, int(file.features.reuse))
        times = [start + life * (i + 0.5) / count for i in range(count)]
    elif kind == "spill":
        times = [start + 0.01 * life, start + 0.99 * life]
    elif kind == "user":
        times = sorted(start + life * rng.uniform(0, 1, int(rng.integers(1, 5))))
    else:  # steady: many small bursts
        count = 20
        times = [start + life * (i + 0.5) / count for i in range(count)]
    shares = rng.multinomial(total, [1 / len(times)] * len(times))
    return [(float(t), file.number, int(n)) for t, n in zip(times, shares, strict=False) if n > 0]
