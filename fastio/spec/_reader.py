"""ReaderSettings: the one home of every reader knob, with its default and bounds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ENGINE_KINDS",
    "MAX_OUTSTANDING_REQUESTS",
    "MAX_READ_SIZE",
    "MIN_READ_SIZE",
    "EngineKind",
    "ReaderSettings",
]

EngineKind = Literal["auto", "io_uring", "threads"]
ENGINE_KINDS: tuple[EngineKind, ...] = ("auto", "io_uring", "threads")

MAX_OUTSTANDING_REQUESTS = 256
MIN_READ_SIZE = 4 * 1024
MAX_READ_SIZE = 256 * 1024 * 1024

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class ReaderSettings:
    """Knobs of a :class:`fastio.Reader`.

    ``outstanding_requests`` and ``read_size`` may change while a reader runs
    (the tuner does this); the others take effect when a reader is made.
    """

    outstanding_requests: int = 16
    """Reads kept in flight at once (1..256)."""
    read_size: int = 1 * MiB
    """Largest single read in bytes (4 KiB..256 MiB); rounded up to 4 KiB for O_DIRECT."""
    engine: EngineKind = "auto"
    """``io_uring``, ``threads`` (pread pool), or ``auto``: io_uring, else threads."""
    direct: bool = False
    """Open files with O_DIRECT, bypassing the page cache (per shard overridable)."""
    memory_budget: int = 64 * MiB
    """Bytes that reads in flight plus data read ahead but not yet consumed may hold."""
    coalesce_gap: int = 4 * KiB
    """Neighbouring small ranges of one file closer than this are read as one request."""
    max_idle_files: int = 128
    """Open file descriptors kept for reuse after their reads finish."""
    retries: int = 5
    """Remote reads: retries of a failed request (timeouts, resets, 5xx) before giving up."""
    retry_seconds: float = 60.0
    """Remote reads: longest time one request may spend retrying."""
    request_timeout: float = 30.0
    """Remote reads: seconds one request may take before it counts as failed (a stall)."""

    def __post_init__(self) -> None:
        _check_int("outstanding_requests", self.outstanding_requests, 1, MAX_OUTSTANDING_REQUESTS)
        _check_int("read_size", self.read_size, MIN_READ_SIZE, MAX_READ_SIZE)
        _check_int("memory_budget", self.memory_budget, MIN_READ_SIZE, 1 << 50)
        _check_int("coalesce_gap", self.coalesce_gap, 0, MAX_READ_SIZE)
        _check_int("max_idle_files", self.max_idle_files, 0, 1 << 20)
        _check_int("retries", self.retries, 0, 100)
        for name in ("retry_seconds", "request_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if self.engine not in ENGINE_KINDS:
            raise ValueError(
                f"engine must be one of {', '.join(ENGINE_KINDS)}, not {self.engine!r}"
            )
        if not isinstance(self.direct, bool):
            raise TypeError(f"direct must be a bool, not {type(self.direct).__name__}")

    def replace(self, **changes: Any) -> ReaderSettings:
        """A copy with ``changes`` applied and validated; unknown names raise TypeError."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, not {value}")
