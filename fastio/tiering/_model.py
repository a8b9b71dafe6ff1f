"""Predicting a file's I/O density from what is known when it is made.

I/O density is operations per byte of space per second of life: what a byte
of a tier earns by holding the file. It is learned in log space (densities
span many orders of magnitude) from the features known at creation (kind,
format, access pattern, producer, size, expected reuse from the epoch plan),
hashed into a fixed vector with their pairwise crosses, so new producers and
formats need no vocabulary.

**The model**, :class:`DensityModel`, is ridge regression solved exactly and
updated online: it keeps ``A = λI + Σxxᵀ`` (and its inverse, by Sherman-Morrison
one outcome at a time) and ``b = λw₀ + Σxy``, so every recorded outcome counts
at once and the weights start at (and are pulled towards) a prior ``w₀`` that
says what any engineer would guess: spill and index files are read hot and die
young, shard copies earn in proportion to their reuse, big files are cooler per
byte. A job (one run's data and code) shifts all its files alike, so the
model adds a random effect per job: the mean residual of its ended files,
shrunk by ``job_strength`` pseudo-outcomes (noise variance over the jobs'
spread: about 1.5 measured; a hashed job word under the words' ridge
strength of 20 learned it far too slowly: held-out MAE 0.96-1.02 against
0.87-0.95 with the random effect, on outcomes as they end).

**Why our own and not a library's** (``benchmarks/bench_tiering.py --compare-models``:
held-out period of the default traces, 2000 files a period, seeds 0-4; mean absolute
error of log density, lower is better; the learned policy's share of the oracle's
SSD I/O at a 20 % budget with that model inside):

====================================  ==========  ========================
model                                 MAE (log)   share of oracle at 20 %
====================================  ==========  ========================
this ridge with a prior (ours)        1.06        0.96
scikit-learn SGDRegressor partial_fit 1.08        0.92
prior only (no learning)              1.55        0.91
====================================  ==========  ========================

SGD needs passes and a learning-rate schedule to converge on the few thousand
outcomes a period gives, and has no prior, so it starts blind; the exact solve
is cheap at this width (512 weights: a solve takes milliseconds) and
needs no tuning. scikit-learn would also be a new dependency for the library.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import numpy as np

__all__ = ["Access", "DensityModel", "Features", "Outcome", "feature_vector"]

Access = Literal["sequential", "random"]
_WIDTH = 512
_NUMERIC = ("log_size", "log_reuse")
# The bias and the numeric features have slots of their own: a word hashed onto one of
# them would inherit its large weight.
_OWN_SLOTS = {"log_size": 1, "log_reuse": 2}
_FIRST_HASHED = 3


@dataclass(frozen=True)
class Features:
    """What is known about a file when it is made."""

    kind: str
    """``shard``, ``spill``, ``index``, ``user`` or any word a caller uses."""
    size: int
    """Expected bytes (a hint: the file may grow past it)."""
    format: str = ""
    access: Access = "sequential"
    reuse: float = 1.0
    """Expected reads of the whole file (epochs the plan uses a shard copy in)."""
    producer: str = ""
    """What makes it: a pipeline stage or module name, stable across runs."""
    job: str = ""
    """Which run makes it (a job or process id): its files share its data and code,
    so the outcomes of its first files tell about its later ones."""


@dataclass(frozen=True)
class Outcome:
    """A file's life as recorded when it was closed or removed."""

    features: Features
    size: int
    operations: int
    bytes_read: int
    bytes_written: int
    lifetime: float

    @property
    def density(self) -> float:
        """Operations per byte per second (floored so an idle file still has a log)."""
        return max(self.operations, 0.5) / max(self.size, 1) / max(self.lifetime, 1e-3)


@functools.lru_cache(maxsize=4096)
def _slot(name: str) -> tuple[int, float]:
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    if name in _OWN_SLOTS:
        return _OWN_SLOTS[name], 1.0
    return _FIRST_HASHED + value % (_WIDTH - _FIRST_HASHED), 1.0 if value >> 63 else -1.0


def feature_vector(features: Features) -> list[tuple[int, float]]:
    """Sparse ``(slot, value)`` pairs: a bias, each word, pairwise crosses of
    the words, and the numeric features beside the file's kind."""
    words = {"kind": features.kind, "format": features.format, "access": features.access,
             "producer": features.producer}  # fmt: skip
    names = [f"{key}={value}" for key, value in words.items()]
    names += [f"{a}&{b}" for i, a in enumerate(names) for b in names[i + 1 :]]
    pairs = [(0, 1.0)]
    for name in names:
        slot, sign = _slot(name)
        pairs.append((slot, sign))
    numeric = {"log_size": math.log2(max(features.size, 1)) / 30.0,
               "log_reuse": math.log1p(max(features.reuse, 0.0))}  # fmt: skip
    for key in _NUMERIC:
        for scope in ("", f"|kind={features.kind}"):
            slot, sign = _slot(key + scope)
            pairs.append((slot, sign * numeric[key]))
    return pairs


def _dense(rows: Sequence[Features]) -> np.ndarray:
    import numpy as np

    matrix = np.zeros((len(rows), _WIDTH))
    for i, row in enumerate(rows):
        for slot, value in feature_vector(row):
            matrix[i, slot] += value
    return matrix


# The prior, in log density (ops per byte per second) units: a shard copy read once
# per epoch over an hour, a spill read a few times within minutes, an index read
# constantly. Sizes: 10x bigger is ~3x cooler per byte (log_size is log2/30).
_PRIOR_WORDS = {"kind=spill": 2.0, "kind=index": 3.0, "kind=user": 0.5, "kind=shard": -1.0,
                "access=random": 1.0}  # fmt: skip
_PRIOR_BIAS = -13.0
# Above this many outcomes at once, refactoring the Gram matrix beats rank-one updates.
_SMALL_BATCH = 32
_JOBS_KEPT = 4096
_PRIOR_NUMERIC = {"log_size": -15.0 * math.log(2), "log_reuse": 1.0}


class DensityModel:
    """Online ridge regression of log I/O density on :func:`feature_vector`,
    plus a random effect per job (:attr:`Features.job`).

    ``strength`` is how many outcomes' worth of belief the prior carries;
    ``job_strength`` how many a job's effect is shrunk by (the ratio of the
    file noise's variance to the spread of jobs' effects).
    Safe to pickle; not thread-safe (its owner locks).
    """

    def __init__(self, strength: float = 20.0, *, prior: bool = True,
                 job_strength: float = 1.5) -> None:  # fmt: skip
        import numpy as np

        if strength <= 0 or job_strength <= 0:
            raise ValueError(f"strengths must be positive, not {strength!r}, {job_strength!r}")
        self.strength = strength
        self.job_strength = job_strength
        self.prior = np.zeros(_WIDTH)
        if prior:
            self.prior[0] = _PRIOR_BIAS
            for word, value in _PRIOR_WORDS.items():
                slot, sign = _slot(word)
                self.prior[slot] += sign * value
            for key, value in _PRIOR_NUMERIC.items():
                slot, sign = _slot(key)
                self.prior[slot] += sign * value
        self._gram = strength * np.eye(_WIDTH)
        self._inverse: np.ndarray = np.eye(_WIDTH) / strength
        self._moment = strength * self.prior.copy()
        self._weights: np.ndarray | None = self.prior.copy()
        # job -> (sum of its files' residuals from the ridge, their count)
        self._jobs: dict[str, tuple[float, int]] = {}
        self.updates = 0

    def predict(self, rows: Iterable[Features]) -> np.ndarray:
        """Predicted densities (ops per byte per second) of ``rows``."""
        import numpy as np

        rows = list(rows)
        if not rows:
            return np.zeros(0)
        predicted: np.ndarray = np.exp(self.predict_log(rows))
        return predicted

    def predict_log(self, rows: Sequence[Features], *, jobs: bool = True) -> np.ndarray:
        """Predicted log densities; ``jobs=False`` leaves the jobs' effects out
        (see :meth:`job_effect`)."""
        predicted: np.ndarray = _dense(rows) @ self._solved()
        if jobs:
            predicted += [self.job_effect(row.job) for row in rows]
        return predicted

    def job_effect(self, job: str) -> float:
        """What the outcomes of ``job``'s files so far add to its next file's
        log density (0 for a job not seen, shrunk towards 0 for few outcomes)."""
        total, count = self._jobs.get(job, (0.0, 0))
        return total / (count + self.job_strength)

    def job_outcomes(self, job: str) -> int:
        """How many of ``job``'s files' outcomes :meth:`job_effect` rests on."""
        return self._jobs.get(job, (0.0, 0))[1]

    def update(self, outcomes: Iterable[Outcome]) -> None:
        """Learn from recorded outcomes (any number at once)."""
        import numpy as np

        outcomes = list(outcomes)
        if not outcomes:
            return
        matrix = _dense([outcome.features for outcome in outcomes])
        target = np.log([outcome.density for outcome in outcomes])
        self._gram += matrix.T @ matrix
        self._moment += matrix.T @ target
        if len(outcomes) > _SMALL_BATCH:
            self._inverse = np.linalg.inv(self._gram)
        else:  # Sherman-Morrison, one outcome at a time: O(width²) instead of a solve
            for row in matrix:
                column = self._inverse @ row
                self._inverse -= np.outer(column, column) / (1.0 + row @ column)
        self._weights = None
        residuals = target - matrix @ self._solved()
        for outcome, residual in zip(outcomes, residuals, strict=True):
            job = outcome.features.job
            if job:
                total, count = self._jobs.pop(job, (0.0, 0))
                self._jobs[job] = (total + float(residual), count + 1)
        while len(self._jobs) > _JOBS_KEPT:  # the least recently finished go first
            del self._jobs[next(iter(self._jobs))]
        self.updates += len(outcomes)

    def _solved(self) -> np.ndarray:
        if self._weights is None:
            self._weights = self._inverse @ self._moment
        return self._weights

    def error(self, outcomes: Sequence[Outcome]) -> float:
        """Mean absolute error of the log density on ``outcomes`` (not learned from)."""
        import numpy as np

        if not outcomes:
            return 0.0
        predicted = self.predict_log([outcome.features for outcome in outcomes])
        actual = np.log([outcome.density for outcome in outcomes])
        return float(np.mean(np.abs(predicted - actual)))
