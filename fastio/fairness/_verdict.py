"""One window's verdict: Jain's index, who is starved, and the budget shares.

Pure functions over arrays with one entry per participant (a DataLoader worker
of this node, or a rank), so that the same judgement serves workers and ranks
and can be checked over thousands of simulated windows.

A participant's *delivery rate* is samples per second of the time it was asked
for data (time spent waiting for its consumer does not count, see
:data:`BUSY_FLOOR`), divided by its share of the samples assigned: a worker
behind a slow path delivers at the path's speed, one that keeps up at the
consumer's. Its *readiness* is the
fraction of that time the data was already read when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fastio.spec._fairness import FairnessSettings

__all__ = ["Judgement", "jain_index", "judge", "shift_budget", "update_flags"]

# A participant asked for data less than this share of the window keeps up with
# its consumer: its rate counts as if it had been asked for this share. Its true
# speed is not observable (it waits for the consumer, not for storage), and with
# tiny busy times a context switch would swing its rate by multiples. A worker
# that holds up its consumer is asked most of the window and rates at half its
# peers' or less: flagged. One brought back under the share rates as its peers.
BUSY_FLOOR = 0.5


def jain_index(values: np.ndarray) -> float:
    """Jain's fairness index ``(sum x)^2 / (n sum x^2)``: 1 when all are equal,
    ``1/n`` when one gets everything; NaN values are left out, 1.0 without values."""
    present = values[~np.isnan(values)]
    if len(present) == 0:
        return 1.0
    squares = float(np.sum(present * present))
    if squares == 0.0:
        return 1.0
    return float(np.sum(present)) ** 2 / (len(present) * squares)


@dataclass(frozen=True)
class Judgement:
    """Per participant (NaN/False where idle): normalized rate, rate relative to
    the peers' median, readiness, starved in this window; and Jain's index."""

    rate: np.ndarray
    relative_rate: np.ndarray
    readiness: np.ndarray
    starved: np.ndarray
    active: np.ndarray
    jain: float


def judge(
    samples: np.ndarray,
    busy: np.ndarray,
    wait: np.ndarray,
    asked: np.ndarray,
    span: float,
    settings: FairnessSettings,
) -> Judgement:
    """The verdict of one window of ``span`` seconds, from each participant's
    samples delivered, seconds asked for data (``busy``), seconds of that spent
    waiting for storage, and samples assigned (its share of the demand)."""
    busy = np.asarray(busy, np.float64)
    active = (busy > 0) | (samples > 0)  # not asked at all: idle, no verdict
    count = int(active.sum())
    shares = np.where(asked > 0, asked, np.nan)
    mean_share = np.nanmean(shares[active]) if count and not np.isnan(shares[active]).all() else 1.0
    shares = np.where(np.isnan(shares), mean_share, shares) / mean_share
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(active, samples / np.maximum(busy, BUSY_FLOOR * span) / shares, np.nan)
        readiness = np.where(active, np.clip(1.0 - wait / busy, 0.0, 1.0), np.nan)
    relative = np.full(len(busy), np.nan)
    starved = np.zeros(len(busy), bool)
    if count >= 2:
        indexes = np.flatnonzero(active)
        for index in indexes:
            peers = indexes[indexes != index]
            peer_rate = float(np.median(rate[peers]))
            relative[index] = rate[index] / peer_rate if peer_rate > 0 else 1.0
            # Readiness counts below readiness_floor only: data ready most of the
            # time it is asked for is no starvation, whatever the peers get.
            behind = (readiness[index] < settings.readiness_floor and readiness[index]
                      < float(np.median(readiness[peers])) - settings.readiness_gap)  # fmt: skip
            starved[index] = relative[index] < settings.rate_threshold or behind
    return Judgement(rate, relative, readiness, starved, active, jain_index(rate))


def update_flags(
    flagged: np.ndarray,
    starved_streak: np.ndarray,
    good_streak: np.ndarray,
    judgement: Judgement,
    settings: FairnessSettings,
) -> tuple[list[int], list[int]]:
    """Advance the streaks (in place) by one window; returns the participants
    newly flagged and those whose flag cleared. Idle participants keep their
    state: a worker done with its part is neither starved nor recovered."""
    raised: list[int] = []
    cleared: list[int] = []
    for index in np.flatnonzero(judgement.active):
        if judgement.starved[index]:
            starved_streak[index] += 1
            good_streak[index] = 0
            if not flagged[index] and starved_streak[index] >= settings.flag_after:
                flagged[index] = 1
                raised.append(int(index))
        else:
            good_streak[index] += 1
            starved_streak[index] = 0
            if flagged[index] and good_streak[index] >= settings.clear_after:
                flagged[index] = 0
                cleared.append(int(index))
    return raised, cleared


# Jain's index above which shares are left as they are: balanced enough that
# moving requests would chase noise.
BALANCED = 0.97
# Exponent of the correction per window: 0.5 moves halfway (in log terms) toward
# equal rates, which settles within a few windows without overshooting when a
# worker's rate is proportional to its requests (latency-bound storage).
_GAIN = 0.5
_STARVED_STEP = 1.25


def shift_budget(
    weights: np.ndarray, judgement: Judgement, settings: FairnessSettings
) -> np.ndarray:
    """New shares of the node's outstanding requests (mean 1 over the active
    workers, so the total stays the same): more to workers delivering under
    their peers, less to those ahead. Unchanged while the window is balanced."""
    active = judgement.active
    new: np.ndarray = np.array(weights, np.float64)
    if int(active.sum()) < 2 or (judgement.jain >= BALANCED and not judgement.starved.any()):
        return new
    rate = judgement.rate[active]
    target = float(np.mean(rate))
    with np.errstate(divide="ignore"):
        factor = np.where(rate > 0, (target / rate) ** _GAIN, 2.0)
    # Equal rates can hide a worker that waits for storage most of the time it is
    # asked (it holds up its consumer just enough to match): it gets more as well.
    factor = factor * np.where(judgement.starved[active], _STARVED_STEP, 1.0)
    moved = weights[active] * np.clip(factor, 0.5, 2.0)
    moved *= len(moved) / moved.sum()
    # At most max_share each; what the cap removes goes to the others, pro rata.
    for _ in range(len(moved)):
        over = moved > settings.max_share
        if not over.any():
            break
        excess = float(np.sum(moved[over] - settings.max_share))
        moved[over] = settings.max_share
        moved[~over] += excess * moved[~over] / moved[~over].sum()
    # At least 1 / max_share each: shifting requests must not leave a worker
    # without any (a reader keeps at least one in flight, which would push the
    # node over its total); what the floor adds comes from the others, pro rata.
    floor = 1.0 / settings.max_share
    under = moved < floor
    if under.any():
        needed = float(np.sum(floor - moved[under]))
        moved[under] = floor
        moved[~under] -= needed * moved[~under] / moved[~under].sum()
    new[active] = moved
    return new
