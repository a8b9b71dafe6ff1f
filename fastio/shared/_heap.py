"""Heap settings for the processes samples' payloads pass through.

glibc's malloc gives the top of its heap back to the kernel once more than
128 KiB of it is free, and serves blocks of 128 KiB and more from mappings of
their own, unmapped when freed (it raises that threshold, up to 32 MiB, only
after it has seen such a block freed). A DataLoader batch of samples is many
such blocks at once: 256 payloads of 110 KB are 28 MB, allocated as a worker
collects them and as the main process reads them back, and freed together.
Each batch then hands its pages back and the next faults every one in again,
which costs more than the copies themselves (3.7 us per 4 KiB page first
touched on the test machine): a DataLoader with 2 workers read 110 KB samples
at 7.9k samples/s with the defaults and 11.7k with the settings below
(medians of 6 runs, ``benchmarks/bench_datasets.py``).

A shuffle window is the same: its samples' payloads are allocated together
as it fills and freed together as it is delivered (110 KB samples shuffled
in one process: 49k samples/s with the defaults, 59k with these settings).

So a process that iterates a dataset, hands payloads (a worker) or reads them
(the main process) keeps up to :data:`KEPT_TOP` free bytes at the top of its heap, and serves
blocks below :data:`MAPPED_FROM` from the heap: the ceiling glibc's own
threshold would reach. The peak a process reaches is unchanged (freed memory is
reused, not added to); the difference is that it is not given back between
batches. Nothing is changed where the user has set malloc's thresholds (the
``MALLOC_*_`` variables or ``GLIBC_TUNABLES``), or without glibc.
"""

from __future__ import annotations

import os

from fastio import _native

__all__ = ["KEPT_TOP", "MAPPED_FROM", "keep_heap"]

KEPT_TOP = 256 << 20
MAPPED_FROM = 32 << 20
_M_TRIM_THRESHOLD = -1  # malloc.h
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")


def _glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):  # not a glibc system
        return False


_kept = False  # in this process (a forked one inherits them with the heap)


def keep_heap() -> bool:
    """Apply the settings in this process, once; whether they are in effect."""
    global _kept
    if _kept:
        return True
    if any(name in os.environ for name in _USER_SETTINGS) or "malloc" in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False
    if not _glibc():
        return False
    if not (_native.set_malloc_option(_M_MMAP_THRESHOLD, MAPPED_FROM)
            and _native.set_malloc_option(_M_TRIM_THRESHOLD, KEPT_TOP)):  # fmt: skip
        return False
    _kept = True
    return True
