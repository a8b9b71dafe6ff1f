"""Every placement policy replayed on the same trace: trained on its first
period, scored on its second, at each SSD budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastio.tiering._baselines import AllSlow, FirstCome, Lru, SizeThreshold
from fastio.tiering._policies import DensityPolicy
from fastio.tiering._simulate import BUDGETS, Result, peak_bytes, replay

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from fastio.tiering._policies import Policy
    from fastio.tiering._trace import Trace, TraceFile

__all__ = ["compare", "default_policies"]


def default_policies(future: Sequence[TraceFile] = ()) -> list[Policy]:
    """The baselines, the learned policy and the oracle (knowing ``future``)."""
    return [AllSlow(), FirstCome(), SizeThreshold(), Lru(), DensityPolicy(),
            DensityPolicy(oracle=True, future=future)]  # fmt: skip


def compare(
    trace: Trace, budgets: Sequence[float] = BUDGETS,
    policies: Callable[[Sequence[TraceFile]], list[Policy]] = default_policies,
    progress: Callable[[str], None] | None = None,
) -> list[Result]:  # fmt: skip
    """Every policy trained on period 0 and scored on period 1, at each budget
    (a fraction of period 1's peak live bytes)."""
    train, test = trace.period(0), trace.period(1)
    peak = peak_bytes(test)
    results = []
    for fraction in budgets:
        budget = max(1, int(peak * fraction))
        for policy in policies(test):
            if progress is not None:
                progress(f"{policy.name} at {fraction:.0%}")
            policy.fit(train, budget, trace.period_seconds)
            results.append(replay(test, budget, policy, trace.bursts, fraction))
    return results
