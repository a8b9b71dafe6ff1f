"""The monitor's report in the Prometheus text exposition format (0.0.4)."""

from __future__ import annotations

from typing import Any

__all__ = ["prometheus_text"]

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


def _value(value: Any) -> str:
    if value is None:
        return "NaN"
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(float(value)) if isinstance(value, float) else str(value)


def prometheus_text(report: dict[str, Any], prefix: str = "fastio_fairness") -> str:
    """``report`` (``dataset.stats()["fairness"]``) as Prometheus text: per-worker
    series labelled ``rank`` and ``worker``, per-rank series labelled ``rank``,
    and Jain's indexes."""
    if not report.get("enabled"):
        return ""
    lines: list[str] = []
    rank = report["rank"]
    for name, kind, text, key in _WORKER_METRICS:
        lines += [f"# HELP {prefix}_worker_{name} {text}", f"# TYPE {prefix}_worker_{name} {kind}"]
        for worker in report["workers"]:
            labels = f'rank="{rank}",worker="{worker["worker"]}"'
            lines.append(f"{prefix}_worker_{name}{{{labels}}} {_value(worker[key])}")
    lines += [f"# HELP {prefix}_jain_index Jain's index over the workers' rates, last window.",
              f"# TYPE {prefix}_jain_index gauge",
              f'{prefix}_jain_index{{rank="{rank}"}} {_value(report["jain_index"])}']  # fmt: skip
    for name, kind, text, key in _RANK_METRICS if report.get("ranks") else ():
        lines += [f"# HELP {prefix}_rank_{name} {text}", f"# TYPE {prefix}_rank_{name} {kind}"]
        for entry in report["ranks"]:
            lines.append(f'{prefix}_rank_{name}{{rank="{entry["rank"]}"}} {_value(entry[key])}')
    if report.get("ranks"):
        lines += [f"# HELP {prefix}_rank_jain_index Jain's index over the ranks' rates.",
                  f"# TYPE {prefix}_rank_jain_index gauge",
                  f"{prefix}_rank_jain_index {_value(report['rank_jain_index'])}"]  # fmt: skip
    return "\n".join(lines) + "\n"
