"""fastio.metrics: a dataset's counters for Prometheus (prometheus_client,
``pip install 'fastio[metrics]'``).

:class:`DatasetCollector` reads ``dataset.stats()`` at every scrape: samples
delivered and skipped, the reader's bytes, requests, waits and request latency
(a histogram), its live knobs, the tuner's state, and the fairness monitor's
per-worker series. Register it with a registry that an HTTP endpoint serves::

    from prometheus_client import REGISTRY, start_http_server
    from fastio.metrics import DatasetCollector

    REGISTRY.register(DatasetCollector(dataset))
    start_http_server(9100)

:func:`prometheus_text` renders the same once, as text.
"""

from __future__ import annotations

from fastio.metrics._collector import DatasetCollector, prometheus_text

__all__ = ["DatasetCollector", "prometheus_text"]
