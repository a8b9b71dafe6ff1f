"""What a reader did: counters and a latency histogram, readable as windows."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from fastio.spec._records import record

__all__ = ["LATENCY_BUCKETS", "ReaderStats", "latency_bucket"]

LATENCY_BUCKETS = 32
"""Bucket ``i`` counts requests whose latency ``t`` (microseconds) has
``int(t).bit_length() == i``: bucket 0 is under 1 us, bucket 31 is 2**30 us or more."""


def latency_bucket(nanoseconds: int) -> int:
    return min((nanoseconds // 1000).bit_length(), LATENCY_BUCKETS - 1)


@record(frozen=True)
class ReaderStats:
    """A snapshot of a reader's counters since it was made.

    ``later.since(earlier)`` gives the counts of the window between two
    snapshots (the tuner and the fairness monitor read windows this way).
    """

    engine: str
    outstanding_requests: int
    read_size: int
    bytes_read: int
    """Bytes storage delivered into buffers (including alignment padding)."""
    bytes_delivered: int
    """Bytes handed to consumers as chunks."""
    requests: int
    """Reads completed (successfully or not)."""
    chunks_delivered: int
    errors: int
    wait_seconds: float
    """Time consumers waited for data that was not read yet."""
    backpressure_seconds: float
    """Time new reads were held back because the memory budget was full of data
    the consumer had not taken yet: the consumer, not storage, was the bottleneck."""
    elapsed_seconds: float
    inflight_requests: int
    inflight_bytes: int
    buffered_bytes: int
    """Bytes read ahead and waiting for the consumer, plus bytes in flight."""
    latency_histogram: tuple[int, ...]
    peak_inflight_requests: int = 0
    """The most reads in flight at once since the reader was made."""
    bytes_arrived: int = 0
    """Bytes of remote answers received, counted as they arrive rather than
    when a read completes (plain HTTP through fastio's own client; 0 for
    other sources): a smooth measure of a link, where each remote read takes
    a large share of a second."""
    answer_seconds_fastest: float = 0.0
    """The quickest remote request's wait from being sent to its answer's
    head: about the link's round trip (plain HTTP through fastio's own
    client; 0 for other sources and before any answer)."""
    answer_seconds_recent: float = 0.0
    """The median of that wait over the last 32 requests: the round trip as
    the link is loaded now."""

    @property
    def throughput(self) -> float:
        """Delivered bytes per second over the snapshot's span."""
        return self.bytes_delivered / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    def latency_percentile(self, q: float) -> float:
        """Request latency in seconds at quantile ``q`` (0..1), from the
        histogram's log2 buckets (the bucket's geometric middle); NaN without requests."""
        total = sum(self.latency_histogram)
        if total == 0:
            return math.nan
        rank = q * total
        seen = 0
        for bucket, count in enumerate(self.latency_histogram):
            seen += count
            if seen >= rank and count:
                low = 0.0 if bucket == 0 else 2.0 ** (bucket - 1)
                high = 2.0**bucket
                middle = math.sqrt(low * high) if low else high / 2
                return middle * 1e-6
        return math.nan  # unreachable: seen reaches total

    def since(self, earlier: ReaderStats) -> ReaderStats:
        """Counts of the window from ``earlier`` to this snapshot; gauges
        (knobs, in-flight, buffered) keep this snapshot's values."""
        return dataclasses.replace(
            self,
            bytes_read=self.bytes_read - earlier.bytes_read,
            bytes_delivered=self.bytes_delivered - earlier.bytes_delivered,
            bytes_arrived=self.bytes_arrived - earlier.bytes_arrived,
            requests=self.requests - earlier.requests,
            chunks_delivered=self.chunks_delivered - earlier.chunks_delivered,
            errors=self.errors - earlier.errors,
            wait_seconds=self.wait_seconds - earlier.wait_seconds,
            backpressure_seconds=self.backpressure_seconds - earlier.backpressure_seconds,
            elapsed_seconds=self.elapsed_seconds - earlier.elapsed_seconds,
            latency_histogram=tuple(
                a - b
                for a, b in zip(self.latency_histogram, earlier.latency_histogram, strict=True)
            ),
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain numbers for JSON, with throughput and latency percentiles added."""
        result = dataclasses.asdict(self)
        result["latency_histogram"] = list(self.latency_histogram)
        result["throughput_bytes_per_second"] = self.throughput
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            value = self.latency_percentile(q)
            result[f"latency_{name}_seconds"] = None if math.isnan(value) else value
        return result
