"""ReaderSettings: the knobs of a :class:`fastio.Reader`."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from fastio.spec._knobs import check, knob
from fastio.spec._records import record

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


@record(frozen=True)
class ReaderSettings:
    """Knobs of a :class:`fastio.Reader`.

    ``outstanding_requests`` and ``read_size`` may change while a reader runs
    (the tuner does this); the others take effect when a reader is made.
    Sizes may be given as ``"64MiB"``. Raises TypeError or ValueError naming
    the knob, what it must be and what it was.
    """

    outstanding_requests: int = knob(
        16, "Reads kept in flight at once.", "count", low=1, high=MAX_OUTSTANDING_REQUESTS,
        short="q",
    )  # fmt: skip
    read_size: int = knob(
        4 * MiB, "Largest single read in bytes (rounded up to 4 KiB for O_DIRECT).", "size",
        low=MIN_READ_SIZE, high=MAX_READ_SIZE, short="b",
    )  # fmt: skip
    engine: EngineKind = knob(
        "auto", "io_uring, threads (a pread pool), or auto: io_uring, else threads.", "choice",
        choices=ENGINE_KINDS,
    )  # fmt: skip
    direct: bool | Literal["auto"] = knob(
        "auto", "O_DIRECT, bypassing the page cache: true, false, or auto: per file, O_DIRECT "
        "when the page cache holds less than half of it, unless a Dataset's local shards fit in "
        "half the memory the page cache may use (per shard overridable).", "flag",
        choices=("auto",),
    )  # fmt: skip
    map_cached: bool | Literal["auto"] = knob(
        "auto", "Local data the page cache holds is mapped (mmap) rather than copied into read "
        "buffers: one copy fewer. auto: where the consumer gains (a Dataset's Arrow IPC, tar, "
        "npy and fixed shards of samples of 16 KiB and more; TFRecord shards of records of "
        "16 KiB and more, in batches), in reads of 512 KiB and more; and a local dataset index "
        "(beyond 64 KiB). A file cut short while its mapped bytes are in use ends the process "
        "(SIGBUS); false reads it.", "flag",
        choices=("auto",),
    )  # fmt: skip
    memory_budget: int = knob(
        32 * MiB, "Bytes that reads in flight plus data read ahead but not yet consumed may hold.",
        "size", low=MIN_READ_SIZE, high=1 << 50,
    )  # fmt: skip
    remote_memory_budget: int = knob(
        128 * MiB, "Bytes remote reads may hold, when more than memory_budget (a link with 20 ms "
        "round trips needs about this much to carry 1 GB/s); a Dataset's DataLoader workers "
        "share it.", "size",
        low=MIN_READ_SIZE, high=1 << 50,
    )  # fmt: skip
    coalesce_gap: int = knob(
        4 * KiB, "Neighbouring small ranges of one file closer than this are read as one request.",
        "size", low=0, high=MAX_READ_SIZE,
    )  # fmt: skip
    max_idle_files: int = knob(
        128, "Open file descriptors kept for reuse after their reads finish.", "count",
        low=0, high=1 << 20,
    )  # fmt: skip
    retries: int = knob(
        5, "Remote reads: retries of a failed request (timeouts, resets, 5xx) before giving up.",
        "count", low=0, high=100,
    )  # fmt: skip
    retry_seconds: float = knob(
        60.0, "Remote reads: longest time one request may spend retrying.", "seconds", above=0,
    )  # fmt: skip
    request_timeout: float = knob(
        30.0, "Remote reads: seconds one request may take before it counts as failed (a stall).",
        "seconds", above=0,
    )  # fmt: skip

    def __post_init__(self) -> None:
        check(self)

    def replace(self, **changes: Any) -> ReaderSettings:
        """A copy with ``changes`` applied and checked; unknown names raise TypeError."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
