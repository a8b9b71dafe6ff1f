"""A prometheus_client collector over a dataset's ``stats()``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fastio._errors import import_extra
from fastio.fairness._metrics import exposition, fairness_families

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["DatasetCollector", "prometheus_text"]

# name, kind, help, key of stats() (dataset) or of stats()["reader"] (reader_)
_DATASET = (
    ("samples_total", "counter", "Samples this process delivered, all epochs.", "samples"),
    ("skipped_samples_total", "counter", "Samples skipped (on_error skip or warn).", "skipped"),
    ("skipped_shards_total", "counter", "Shards left out as unreadable.", "shards_skipped"),
    ("epoch", "gauge", "The epoch being read.", "epoch"),
)
_READER = (
    ("bytes_read_total", "counter", "Bytes read from storage.", "bytes_read"),
    ("bytes_delivered_total", "counter", "Bytes handed to the consumer.", "bytes_delivered"),
    ("requests_total", "counter", "Read requests completed.", "requests"),
    ("errors_total", "counter", "Read requests that failed.", "errors"),
    ("wait_seconds_total", "counter", "Seconds the consumer waited for data not yet read.",
     "wait_seconds"),
    ("backpressure_seconds_total", "counter",
     "Seconds reads were held back by a full memory budget (the consumer was slower).",
     "backpressure_seconds"),
    ("outstanding_requests", "gauge", "Reads kept in flight (the live knob).",
     "outstanding_requests"),
    ("read_size_bytes", "gauge", "Largest single read (the live knob).", "read_size"),
    ("inflight_requests", "gauge", "Reads in flight now.", "inflight_requests"),
    ("inflight_bytes", "gauge", "Bytes of the reads in flight now.", "inflight_bytes"),
    ("buffered_bytes", "gauge", "Bytes read ahead and not yet consumed, plus in flight.",
     "buffered_bytes"),
)  # fmt: skip


class DatasetCollector:
    """Collects ``dataset.stats()`` (anything with that method) as metric
    families named ``<prefix>_...`` at every scrape. Raises
    :class:`~fastio.MissingExtraError` without prometheus_client."""

    def __init__(self, dataset: Any, prefix: str = "fastio") -> None:
        self._core = import_extra("prometheus_client.core", "Prometheus metrics")
        self.dataset, self.prefix = dataset, prefix

    def collect(self) -> Iterator[Any]:
        stats = self.dataset.stats()
        core, prefix = self._core, self.prefix
        kinds = {"counter": core.CounterMetricFamily, "gauge": core.GaugeMetricFamily}
        for name, kind, text, key in _DATASET:
            yield kinds[kind](f"{prefix}_{name}", text, value=_number(stats[key]))
        reader = stats["reader"]
        engine = core.InfoMetricFamily(f"{prefix}_reader_engine", "The engine serving reads.")
        engine.add_metric([], {"engine": str(reader["engine"])})
        yield engine
        for name, kind, text, key in _READER:
            yield kinds[kind](f"{prefix}_reader_{name}", text, value=_number(reader[key]))
        yield _latency(core, f"{prefix}_reader_request_latency_seconds",
                       reader["latency_histogram"])  # fmt: skip
        tuner = stats.get("tuner")
        if tuner:
            yield core.GaugeMetricFamily(f"{prefix}_tuner_converged",
                                         "1 once the tuner has settled.",
                                         value=float(tuner["converged"]))  # fmt: skip
            yield core.CounterMetricFamily(f"{prefix}_tuner_trials",
                                           "Configurations the tuner measured this round.",
                                           value=float(tuner["trials"]))  # fmt: skip
        yield from fairness_families(stats.get("fairness") or {}, f"{prefix}_fairness")


def _number(value: Any) -> float:
    # Not known in this process (a DataLoader's parent reads no epoch itself): NaN.
    return math.nan if value is None else float(value)


def _latency(core: Any, name: str, histogram: list[int] | tuple[int, ...]) -> Any:
    """The reader's log2 latency buckets (bucket i: under 2**i microseconds;
    the last is open-ended) as a cumulative histogram. It keeps no sum."""
    buckets, total = [], 0
    for index, count in enumerate(histogram):
        total += count
        bound = "+Inf" if index == len(histogram) - 1 else repr(2.0**index / 1e6)
        buckets.append((bound, float(total)))
    return core.HistogramMetricFamily(name, "Read request latency (log2 buckets).",
                                      buckets=buckets)  # fmt: skip


def prometheus_text(dataset: Any, prefix: str = "fastio") -> str:
    """The dataset's metrics (:class:`DatasetCollector`) once, as Prometheus text."""
    return exposition(list(DatasetCollector(dataset, prefix).collect()))
