"""A dataset's metrics as a Prometheus server would scrape them: served by
prometheus_client's own HTTP endpoint, read back with its parser."""

from __future__ import annotations

import urllib.request

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from torch.utils.data import DataLoader

import fastio
from fastio.metrics import DatasetCollector, prometheus_text
from tests.shards import write


def _families(text: str) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(families: dict[str, object], name: str, **labels: str) -> float:
    family = families[name]
    names = (name, f"{name}_total")
    values = [s.value for s in family.samples  # type: ignore[attr-defined]
              if s.name in names and labels.items() <= s.labels.items()]  # fmt: skip
    assert len(values) == 1, (name, labels, values)
    return float(values[0])


def _scrape(registry: CollectorRegistry) -> dict[str, object]:
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            return _families(response.read().decode())
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_scrape_shows_the_datasets_counters(tmp_path) -> None:
    # Some MB: more than a fresh reader reads on the consumer's thread before
    # its loop (and engine) start.
    written = write("webdataset", tmp_path, shards=3, per_shard=20, large=True)
    registry = CollectorRegistry()
    with fastio.Dataset(written.pattern, shuffle=False, outstanding_requests=4) as dataset:
        registry.register(DatasetCollector(dataset))
        samples = sum(1 for _ in dataset)  # read here: this process's reader counts
        families = _scrape(registry)
        stats = dataset.stats()
        assert _value(families, "fastio_samples") == samples == len(written.samples)
        assert _value(families, "fastio_epoch") == 0
        assert _value(families, "fastio_reader_outstanding_requests") == 4
        assert _value(families, "fastio_reader_bytes_read") == stats["reader"]["bytes_read"] > 0
        assert _value(families, "fastio_reader_requests") == stats["reader"]["requests"] > 0
        assert families["fastio_reader_bytes_read"].type == "counter"  # type: ignore[attr-defined]
        latency = families["fastio_reader_request_latency_seconds"]
        assert latency.type == "histogram"  # type: ignore[attr-defined]
        count = [s.value for s in latency.samples  # type: ignore[attr-defined]
                 if s.labels.get("le") == "+Inf"]  # fmt: skip
        assert count == [stats["reader"]["requests"]]
        engine = families["fastio_reader_engine_info"]  # an info metric, as the text shows it
        assert engine.samples[0].labels["engine"] in ("io_uring", "threads")  # type: ignore[attr-defined]
        # With DataLoader workers, each worker's reads show in the fairness
        # series (counters since the dataset was made: the in-process epoch
        # counted as worker 0's).
        before = _value(families, "fastio_fairness_worker_samples", worker="0")
        dataset.set_epoch(1)
        delivered = sum(DataLoader(dataset, batch_size=5, num_workers=2, collate_fn=len))
        families = _scrape(registry)
    per_worker = [_value(families, "fastio_fairness_worker_samples", worker=str(w))
                  for w in (0, 1)]  # fmt: skip
    assert sum(per_worker) - before == delivered == len(written.samples)
    assert all(_value(families, "fastio_fairness_worker_bytes", worker=str(w)) > 0
               for w in (0, 1))  # fmt: skip


def test_text_once_and_in_this_process(tmp_path) -> None:
    written = write("webdataset", tmp_path, shards=2, per_shard=10)
    with fastio.Dataset(written.pattern, shuffle=False, fairness=False) as dataset:
        samples = sum(1 for _ in dataset)
        families = _families(prometheus_text(dataset, prefix="job"))
    assert _value(families, "job_samples") == samples
    assert _value(families, "job_skipped_samples") == 0
    assert not [name for name in families if name.startswith("job_fairness")]
