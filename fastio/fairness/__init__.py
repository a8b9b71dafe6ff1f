"""fastio.fairness: which DataLoader worker or rank is starved of I/O.

Each process iterating a :class:`fastio.Dataset` publishes what it delivers to
a board in shared memory; per window the monitor computes Jain's index over the
workers' delivery rates, flags workers (and ranks) that stay behind their peers,
and shifts outstanding requests toward them. ``dataset.stats()["fairness"]``
holds the report, :func:`prometheus_text` renders it for scraping, and
:class:`ThrottledFileSystem` reproduces a slow path for drills and tests;
:func:`all_gather_report` compares ranks through torch.distributed, called by
the training loop (a collective); ``balance="steal"`` lets workers share work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastio.sources._imports import lazy_attributes
from fastio.spec._fairness import FairnessSettings

if TYPE_CHECKING:
    from fastio.fairness._gather import all_gather_report
    from fastio.fairness._metrics import prometheus_text
    from fastio.fairness._monitor import FairnessMonitor
    from fastio.fairness._verdict import jain_index
    from fastio.sources._throttled import ThrottledFileSystem

# Imported at first use: a dataset needs the monitor only, and fsspec (under
# the slow-path injection) is heavy.
_exports, __dir__ = lazy_attributes(__name__, {
    "_gather": ["all_gather_report"],
    "_metrics": ["prometheus_text"],
    "_monitor": ["FairnessMonitor"],
    "_verdict": ["jain_index"],
})  # fmt: skip


def __getattr__(name: str) -> object:
    if name == "ThrottledFileSystem":  # a source, shown here for the drills it serves
        from fastio.sources._throttled import ThrottledFileSystem

        return ThrottledFileSystem
    return _exports(name)


__all__ = [
    "FairnessMonitor",
    "FairnessSettings",
    "ThrottledFileSystem",
    "all_gather_report",
    "jain_index",
    "prometheus_text",
]
