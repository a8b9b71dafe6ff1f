"""TunerSettings: how the online tuner drives a reader's live knobs."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from fastio.spec._knobs import check, knob, switchable
from fastio.spec._records import record

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["MAX_TUNED_READ_SIZE", "MIN_TUNED_READ_SIZE", "TunerSettings"]

MIN_TUNED_READ_SIZE = 16 * 1024
MAX_TUNED_READ_SIZE = 64 * 1024 * 1024


@record(frozen=True)
class TunerSettings:
    """How a reader is tuned while data flows (the ``tuner:`` config section;
    ``Dataset(tune=...)``). Off unless ``enabled``."""

    enabled: bool = knob(False, "Tune outstanding requests and read size while data flows.",
                         "flag")  # fmt: skip
    storage: str | None = knob(
        None,
        "Where trials persist: a journal file, a .db SQLite file, or an RDB URL shared by many "
        "nodes; unset keeps them in memory for this run.",
        "text", optional=True,
    )  # fmt: skip
    memory_budget: int | None = knob(
        None,
        "Bytes in flight (outstanding requests x read size; for remote objects, requests x "
        "4 MiB) the tuner may use; unset: half the reader's memory_budget, or what its "
        "outstanding_requests x read_size are where more (for remote objects, "
        "remote_memory_budget).",
        "size", low=MIN_TUNED_READ_SIZE, optional=True,
    )  # fmt: skip
    window_seconds: float = knob(0.4, "Seconds of traffic per measurement (after the warm-up).",
                                 "seconds", above=0)  # fmt: skip
    window_bytes: int = knob(0, "And at least this many bytes per measurement.", "size", low=0)
    warmup_seconds: float = knob(0.2, "Traffic discarded after each change of knobs.",
                                 "seconds", low=0)  # fmt: skip
    max_trials: int = knob(8, "Configurations tried before the tuner settles.", "count",
                           low=1, high=10_000)  # fmt: skip
    explore_share: float = knob(
        0.1,
        "Share of the first pass's bytes the tuner may spend trying settings: it settles by "
        "then, at the defaults unless a setting measured better twice (at once when its trials "
        "cannot fit).",
        "number", above=0.0, high=1.0,
    )  # fmt: skip
    seed: int | None = knob(0, "Seed of the sampler (unset: random).", "count", low=0,
                            optional=True)  # fmt: skip
    tick_seconds: float = knob(0.2, "How often the reader's counters are read.", "seconds",
                               above=0)  # fmt: skip

    def __post_init__(self) -> None:
        check(self)

    def replace(self, **changes: Any) -> TunerSettings:
        return dataclasses.replace(self, **changes)

    @classmethod
    def coerce(cls, value: bool | TunerSettings | Mapping[str, Any] | None) -> TunerSettings:
        """Settings from what ``Dataset(tune=...)`` takes: True (tune with the
        defaults), settings, a mapping of them (tuning unless it says
        ``enabled: false``), or None/False (off). Raises TypeError otherwise."""
        return switchable(cls, value, "tune")
