"""FairnessSettings: the fairness monitor's knobs, with their defaults and bounds.

The defaults come from measurement (``benchmarks/bench_fairness.py`` and the
seeded noise model in ``tests/fairness/test_verdict.py``). On balanced runs
the slowest worker's rate stayed above 0.8 of its peers' (0.88 over a short run
of real files, 2 DataLoader workers): 0.6 leaves a wide margin. Readiness is
noisier: single windows differed by up to 0.43 between balanced workers, but
not two windows in a row, hence a 0.3 gap and ``flag_after=2``. A worker behind
a path several times slower falls far below both within a window, so it is
flagged within 2-3 windows.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from fastio.spec._knobs import check, knob, switchable
from fastio.spec._records import record

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["FairnessSettings"]


@record(frozen=True)
class FairnessSettings:
    """Knobs of the fairness monitor of a :class:`fastio.Dataset`.

    Monitoring costs a clock read per read request and a few stores into shared
    memory every ``window_seconds / 10``: it is on by default. A participant
    (DataLoader worker, or rank) is *starved* in a window when its delivery rate
    is under ``rate_threshold`` times its peers' median, or its readiness more
    than ``readiness_gap`` under theirs and under ``readiness_floor``; it is
    flagged after ``flag_after`` starved windows in a row and the flag clears
    after ``clear_after`` good ones.
    """

    enabled: bool = knob(True, "Measure and judge; off: no shared memory, no clock reads.", "flag")
    mitigate: bool = knob(True, "Rebalance the workers of this node, as balance says.", "flag")
    balance: Literal["budget", "steal"] = knob(
        "budget",
        "budget: shift outstanding requests toward starved workers (same total). steal: "
        "workers that are ahead take windows a slower worker of the same rank has not "
        "started (every sample still once per epoch; resume per window).",
        "choice", choices=("budget", "steal"),
    )  # fmt: skip
    window_seconds: float = knob(1.0, "Length of a judging window.", "seconds", low=0.01,
                                 high=3600.0)  # fmt: skip
    rate_threshold: float = knob(
        0.6, "Starved below this fraction of the peers' median delivery rate.", "number",
        low=0.0, high=1.0,
    )  # fmt: skip
    readiness_gap: float = knob(
        0.3, "Starved when readiness is this much (0..1) under the peers' median...", "number",
        low=0.0, high=1.0,
    )  # fmt: skip
    readiness_floor: float = knob(
        0.5,
        "...and under this: a worker whose data is ready at least half the time it is asked "
        "for is not starved (single windows' readiness swings by up to 0.4 between balanced "
        "workers).",
        "number", low=0.0, high=1.0,
    )  # fmt: skip
    flag_after: int = knob(2, "Starved windows in a row before a flag is raised.", "count",
                           low=1, high=1000)  # fmt: skip
    clear_after: int = knob(2, "Good windows in a row before a flag clears.", "count", low=1,
                            high=1000)  # fmt: skip
    max_share: float = knob(
        4.0, "Most outstanding requests one worker may get, as a multiple of its even share.",
        "number", low=1.0, high=256.0,
    )  # fmt: skip
    exchange_dir: str | None = knob(
        None,
        "Folder where ranks exchange their totals (shared across nodes for multi-node jobs); "
        "default: one under the temporary folder, named after the job.",
        "path", optional=True,
    )  # fmt: skip
    callback: Callable[[dict[str, Any]], None] | None = knob(
        None,
        "Called with an event dict when a flag is raised or cleared, in the process that "
        "closed the window: a module-level function where workers are spawned.",
        "callable", optional=True, in_config=False,
    )  # fmt: skip

    def __post_init__(self) -> None:
        check(self)

    def replace(self, **changes: Any) -> FairnessSettings:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """The knobs as plain data (the callback by name)."""
        result = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        callback = result.pop("callback")
        result["callback"] = getattr(callback, "__qualname__", None) if callback else None
        return result

    @classmethod
    def coerce(cls, value: FairnessSettings | bool | dict[str, Any] | None) -> FairnessSettings:
        """Settings from what ``Dataset(fairness=...)`` takes: settings, a dict of
        them, True/None (the defaults) or False (off). Raises TypeError otherwise."""
        return switchable(cls, value, "fairness")
