"""Ranks compared through torch.distributed: an explicit collective.

The monitor never calls a collective on its own: ranks close their windows out
of step, and a hidden ``all_gather`` inside the loader would wait for a rank
that is still reading (or deadlock with the training step's own collectives
issued in another order); DataLoader workers are not in the process group at
all. The training loop calls :func:`all_gather_report` instead, from the main
process of every rank at the same step (as it calls any collective), and gets
every rank's totals and a verdict, the same on every rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fastio.fairness._monitor import FairnessMonitor
from fastio.fairness._verdict import judge

if TYPE_CHECKING:
    from fastio.spec._fairness import FairnessSettings

__all__ = ["all_gather_report"]


class Monitored(Protocol):
    """What carries a monitor: a :class:`fastio.Dataset`."""

    @property
    def fairness(self) -> FairnessMonitor: ...


def all_gather_report(source: Monitored | FairnessMonitor, group: Any = None) -> dict[str, Any]:
    """Every rank's fairness totals through ``torch.distributed.all_gather_object``
    (a few hundred bytes per rank), and the ranks' verdict from them.

    A collective: call it from the main process of every rank of ``group``
    (default: the whole job) at the same step, e.g. every N steps or at the end
    of an epoch. Returns ``{"ranks": [...], "rank_jain_index", "starved_ranks",
    "samples_all_ranks"}``; a rank is starved here when its delivery rate (per
    sample assigned, in its last judged window) is under ``rate_threshold`` of
    its peers' median, or its readiness ``readiness_gap`` under theirs (one
    look: no streak, unlike the windowed flags). Raises RuntimeError when
    torch.distributed is not initialized, and ValueError when monitoring is off.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "all_gather_report needs torch.distributed initialized (init_process_group); "
            "without it ranks compare through files: dataset.stats()['fairness']['ranks']"
        )
    monitor = source if isinstance(source, FairnessMonitor) else source.fairness
    if not monitor.settings.enabled:
        raise ValueError("the dataset's fairness monitor is off (fairness=False)")
    summary = monitor.rank_summary()
    summary["rank"] = dist.get_rank(group)
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, summary, group=group)
    return _verdict(gathered, monitor.settings)


def _verdict(summaries: list[dict[str, Any]], settings: FairnessSettings) -> dict[str, Any]:
    count = len(summaries)
    rates = np.array([s["rate"] for s in summaries], np.float64)
    readiness = np.array([s["readiness"] for s in summaries], np.float64)
    asked = np.array([s["asked"] for s in summaries], np.float64)
    # A rank that delivered nothing yet has no rate: idle, no verdict.
    busy = np.array([float(s["samples"] > 0) for s in summaries])
    verdict = judge(rates * busy, busy, (1.0 - readiness) * busy, asked, 1.0, settings)
    ranks = [{
        "rank": s["rank"], "samples": s["samples"], "bytes": s["bytes"], "assigned": s["asked"],
        "workers": s["workers"], "rate": s["rate"], "readiness": s["readiness"],
        "relative_rate": None if np.isnan(verdict.relative_rate[i])
        else float(verdict.relative_rate[i]),
        "starved": bool(verdict.starved[i]), "starved_workers": s["starved_workers"],
    } for i, s in enumerate(summaries)]  # fmt: skip
    return {
        "ranks": ranks,
        "world_size": count,
        "rank_jain_index": verdict.jain,
        "starved_ranks": [r["rank"] for r in ranks if r["starved"]],
        "samples_all_ranks": sum(r["samples"] for r in ranks),
    }
