"""Drift: a sustained change of the delivered rate at a fixed configuration.

A two-sided Page-Hinkley test on the rate relative to a reference (the rate
the tuner trusted when it settled): it sums how far each window falls below
(or rises above) the reference beyond a tolerance ``delta``, and signals once
either sum exceeds ``threshold``. One window far off signals at once; a
small shift signals after a few; noise within ``delta`` never does.
"""

from __future__ import annotations

__all__ = ["PageHinkley"]


class PageHinkley:
    """``update(rate)`` is True when the rate has drifted from ``reference``.

    ``delta`` and ``threshold`` are fractions of the reference: with the
    defaults, a rate 20% lower signals after 3 windows, 40% lower after 2, 60% lower after one.
    """

    def __init__(self, reference: float, delta: float = 0.05, threshold: float = 0.3) -> None:
        if reference <= 0:
            raise ValueError(f"drift reference must be a positive rate, not {reference}")
        if delta < 0 or threshold <= 0:
            raise ValueError("drift: delta must be >= 0 and threshold > 0")
        self.reference = reference
        self.delta = delta
        self.threshold = threshold
        self.falling = 0.0
        self.rising = 0.0
        self.windows = 0

    def update(self, rate: float) -> bool:
        deviation = rate / self.reference - 1.0
        self.windows += 1
        self.falling = max(0.0, self.falling - deviation - self.delta)
        self.rising = max(0.0, self.rising + deviation - self.delta)
        return self.falling > self.threshold or self.rising > self.threshold

    @property
    def direction(self) -> str:
        """``"down"`` or ``"up"``: which way the rate moved (meaningful after a signal)."""
        return "down" if self.falling >= self.rising else "up"
