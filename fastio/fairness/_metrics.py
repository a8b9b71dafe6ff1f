"""The monitor's report as Prometheus metrics (prometheus_client, the
``metrics`` extra): metric families for a collector, or the text exposition."""

from __future__ import annotations

import math
from typing import Any

from fastio._errors import import_extra

__all__ = ["exposition", "fairness_families", "prometheus_text"]

# name, type, help, report key (per worker, or per rank)
_WORKER_METRICS = (
    ("samples_total", "counter", "Samples delivered by the worker.", "samples"),
    ("bytes_total", "counter", "Bytes delivered by the worker's reader.", "bytes"),
    ("requests_total", "counter", "Read requests completed by the worker's reader.", "requests"),
    ("busy_seconds_total", "counter", "Seconds the worker was asked for data.", "busy_seconds"),
    ("wait_seconds_total", "counter", "Seconds the worker waited for storage.", "wait_seconds"),
    ("rate", "gauge", "Samples per second asked, last window, per share assigned.", "rate"),
    ("relative_rate", "gauge", "Rate relative to the peers' median, last window.",
     "relative_rate"),
    ("readiness", "gauge", "Fraction of the asked time data was ready, last window.",
     "readiness"),
    ("starved", "gauge", "1 while the worker is flagged as starved of I/O.", "starved"),
    ("outstanding_requests", "gauge", "Reads the worker keeps in flight.",
     "outstanding_requests"),
    ("inflight_bytes", "gauge", "Bytes of the worker's reads in flight.", "inflight_bytes"),
    ("latency_p50_seconds", "gauge", "Median request latency.", "latency_p50_seconds"),
    ("latency_p99_seconds", "gauge", "99th percentile request latency.", "latency_p99_seconds"),
)  # fmt: skip
_RANK_METRICS = (
    ("samples_total", "counter", "Samples delivered by the rank.", "samples"),
    ("rate", "gauge", "Samples per second the rank's workers deliver when asked.", "rate"),
    ("readiness", "gauge", "Fraction of the asked time the rank's data was ready.", "readiness"),
    ("starved", "gauge", "1 while the rank is flagged as starved of I/O.", "starved"),
)


def fairness_families(report: dict[str, Any], prefix: str = "fastio_fairness") -> list[Any]:
    """``report`` (``dataset.stats()["fairness"]``) as prometheus_client metric
    families: per-worker series labelled ``rank`` and ``worker``, per-rank
    series labelled ``rank``, and Jain's indexes (none when it is off). Raises
    :class:`~fastio.MissingExtraError` without prometheus_client (``metrics``)."""
    if not report.get("enabled"):
        return []
    core = import_extra("prometheus_client.core", "Prometheus metrics")
    kinds = {"counter": core.CounterMetricFamily, "gauge": core.GaugeMetricFamily}
    rank = str(report["rank"])
    families = []
    for name, kind, text, key in _WORKER_METRICS:
        family = kinds[kind](f"{prefix}_worker_{name}", text, labels=["rank", "worker"])
        for worker in report["workers"]:
            family.add_metric([rank, str(worker["worker"])], _value(worker[key]))
        families.append(family)
    jain = core.GaugeMetricFamily(f"{prefix}_jain_index",
                                  "Jain's index over the workers' rates, last window.",
                                  labels=["rank"])  # fmt: skip
    jain.add_metric([rank], _value(report["jain_index"]))
    families.append(jain)
    for name, kind, text, key in _RANK_METRICS if report.get("ranks") else ():
        family = kinds[kind](f"{prefix}_rank_{name}", text, labels=["rank"])
        for entry in report["ranks"]:
            family.add_metric([str(entry["rank"])], _value(entry[key]))
        families.append(family)
    if report.get("ranks"):
        rank_jain = _value(report["rank_jain_index"])
        families.append(core.GaugeMetricFamily(f"{prefix}_rank_jain_index",
                                               "Jain's index over the ranks' rates.",
                                               value=rank_jain))  # fmt: skip
    return families


def prometheus_text(report: dict[str, Any], prefix: str = "fastio_fairness") -> str:
    """``report`` (``dataset.stats()["fairness"]``) in the Prometheus text
    exposition format, through prometheus_client (see :func:`fairness_families`);
    empty when the monitor is off. For a scrape endpoint, register
    :class:`fastio.metrics.DatasetCollector`, which includes these."""
    families = fairness_families(report, prefix)
    return exposition(families) if families else ""


def exposition(families: list[Any]) -> str:
    """Metric families in the Prometheus text format (0.0.4)."""
    client = import_extra("prometheus_client", "Prometheus metrics")

    class _Once:
        def collect(self) -> list[Any]:
            return families

    registry = client.CollectorRegistry(auto_describe=False)
    registry.register(_Once())
    text: str = client.generate_latest(registry).decode()
    return text


def _value(value: Any) -> float:
    # prometheus_client writes NaN for a value not known yet (before any window).
    return math.nan if value is None else float(value)
