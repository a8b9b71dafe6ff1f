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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["FairnessSettings"]


@dataclass(frozen=True)
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

    enabled: bool = True
    """Measure and judge; off: no shared memory, no clock reads."""
    mitigate: bool = True
    """Rebalance the workers of this node, as ``balance`` says."""
    balance: Literal["budget", "steal"] = "budget"
    """``"budget"``: shift outstanding requests toward starved workers (same total).
    ``"steal"``: workers that are ahead take windows a slower worker of the same
    rank has not started (every sample still once per epoch; resume per window;
    see :mod:`fastio.fairness._steal`)."""
    window_seconds: float = 1.0
    """Length of a judging window."""
    rate_threshold: float = 0.6
    """Starved below this fraction of the peers' median delivery rate."""
    readiness_gap: float = 0.3
    """Starved when readiness is this much (0..1) under the peers' median..."""
    readiness_floor: float = 0.5
    """...and under this: a worker whose data is ready at least half the time it
    is asked for is not starved (single windows' readiness swings by up to 0.4
    between balanced workers, see benchmarks/bench_fairness.py)."""
    flag_after: int = 2
    """Starved windows in a row before a flag is raised."""
    clear_after: int = 2
    """Good windows in a row before a flag clears."""
    max_share: float = 4.0
    """Most outstanding requests one worker may get, as a multiple of its even share."""
    exchange_dir: str | None = None
    """Folder where ranks exchange their totals (shared across nodes for multi-node
    jobs); default: one under the temporary folder, named after the job."""
    callback: Callable[[dict[str, Any]], None] | None = None
    """Called with an event dict when a flag is raised or cleared, in the process
    that closed the window (a DataLoader worker or the main process): picklable
    (a module-level function) when workers are spawned."""

    def __post_init__(self) -> None:
        for name in ("enabled", "mitigate"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, not {getattr(self, name)!r}")
        if self.balance not in ("budget", "steal"):
            raise ValueError(f"balance must be budget or steal, not {self.balance!r}")
        _check_number("window_seconds", self.window_seconds, 0.01, 3600.0)
        _check_number("rate_threshold", self.rate_threshold, 0.0, 1.0)
        _check_number("readiness_gap", self.readiness_gap, 0.0, 1.0)
        _check_number("readiness_floor", self.readiness_floor, 0.0, 1.0)
        _check_number("max_share", self.max_share, 1.0, 256.0)
        for name in ("flag_after", "clear_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
                raise ValueError(f"{name} must be an integer in 1..1000, not {value!r}")
        if self.callback is not None and not callable(self.callback):
            raise TypeError(f"callback must be callable, not {self.callback!r}")

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
        if value is None or value is True:
            return cls()
        if value is False:
            return cls(enabled=False)
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            return cls(**value)
        raise TypeError(f"fairness must be FairnessSettings, a dict, True or False, not {value!r}")


def _check_number(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"{name} must be a number in {low}..{high}, not {value!r}")
