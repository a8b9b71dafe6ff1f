"""Measurement windows: how much live traffic makes one measurement.

After every change of configuration the first ``warmup_seconds`` (and
``warmup_bytes``) are discarded: requests of the old configuration are still
finishing and the new ones are filling the pipe. A window then closes once it
holds at least ``min_seconds`` and ``min_bytes``, or after ``max_seconds``
whatever it holds (a slow storage must not stall the tuner).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MeasurementWindow", "WindowMeter"]


@dataclass(frozen=True)
class MeasurementWindow:
    """How long one measurement lasts; seconds of traffic, not of wall time."""

    min_seconds: float = 2.0
    min_bytes: int = 0
    max_seconds: float = 30.0
    warmup_seconds: float = 0.5
    warmup_bytes: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.min_seconds <= self.max_seconds:
            raise ValueError(
                f"window: need 0 < min_seconds <= max_seconds, not "
                f"{self.min_seconds} and {self.max_seconds}"
            )
        if self.min_bytes < 0 or self.warmup_bytes < 0 or self.warmup_seconds < 0:
            raise ValueError("window: byte counts and warm-up must not be negative")


class WindowMeter:
    """Adds up traffic of one configuration; says when a window is complete."""

    def __init__(self, window: MeasurementWindow) -> None:
        self.window = window
        self.span = 1.0
        """Windows last this many times ``min_seconds`` and ``min_bytes``."""
        self.restart()

    def restart(self) -> None:
        """A new configuration: warm up again, then measure from zero."""
        self.warm_seconds = 0.0
        self.warm_bytes = 0
        self.seconds = 0.0
        self.amount = 0.0
        self.bytes = 0

    def next_window(self) -> None:
        """The same configuration goes on: measure from zero, without warm-up."""
        self.seconds = 0.0
        self.amount = 0.0
        self.bytes = 0

    @property
    def warming(self) -> bool:
        window = self.window
        return self.warm_seconds < window.warmup_seconds or self.warm_bytes < window.warmup_bytes

    def add(self, nbytes: int, seconds: float, amount: float) -> None:
        """Traffic of one tick: ``nbytes`` over ``seconds``, worth ``amount``
        in the objective's unit (bytes, or samples)."""
        if nbytes < 0 or seconds < 0:
            raise ValueError(f"traffic must not be negative, not {nbytes} bytes in {seconds} s")
        if self.warming:
            self.warm_seconds += seconds
            self.warm_bytes += nbytes
            return
        self.seconds += seconds
        self.bytes += nbytes
        self.amount += amount

    @property
    def complete(self) -> bool:
        window = self.window
        if self.warming or self.seconds <= 0:
            return False
        span = self.span
        enough = self.seconds >= window.min_seconds * span and self.bytes >= window.min_bytes * span
        return enough or self.seconds >= max(window.max_seconds, window.min_seconds * span)

    @property
    def rate(self) -> float:
        """The objective per second over the window so far."""
        return self.amount / self.seconds if self.seconds > 0 else 0.0
