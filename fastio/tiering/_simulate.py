"""Replaying a trace through a policy: the fraction of I/O the fast tier served.

Events in time order: a file is made (the policy places it, demoting others if
it likes), a burst of its operations arrives (served by whichever tier holds it
then; afterwards the policy sees it and may promote the file, demoting others),
it is removed (the policy learns its outcome). Every policy plays by the same
rules: one budget, checked after every change; any policy may demote and promote.

Bytes written to the fast tier are the sizes of the files placed there plus
those of the files promoted to it (a promotion copies the whole file); a
demotion reads the fast copy and writes the slow one, so it adds no fast-tier
writes. The budget is a fraction of the period's peak live bytes: what it would
take to hold everything on SSD.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastio.tiering._policies import Policy
    from fastio.tiering._trace import TraceFile

__all__ = ["BUDGETS", "Result", "peak_bytes", "replay"]

BUDGETS = (0.1, 0.2, 0.5)


@dataclass
class Result:
    policy: str
    budget_fraction: float
    ssd_fraction: float
    """Operations served by the fast tier over all operations."""
    ssd_bytes_written: int
    """Bytes placed on the fast tier at creation plus bytes promoted to it."""
    demotions: int
    promotions: int
    promoted_bytes: int
    peak_ssd_bytes: int
    budget: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Fast:
    budget: int
    used: int = 0
    peak: int = 0
    residents: dict[int, TraceFile] = field(default_factory=dict)
    last_access: dict[int, float] = field(default_factory=dict)
    observed: dict[int, int] = field(default_factory=dict)
    demotions: int = 0
    promotions: int = 0
    written: int = 0
    promoted_bytes: int = 0

    def demote(self, number: int) -> None:
        file = self.residents.pop(number)
        self.used -= file.size
        self.demotions += 1

    def admit(self, file: TraceFile, now: float) -> None:
        if self.used + file.size > self.budget:
            raise AssertionError(f"file {file.number} overfills the fast tier")
        self.residents[file.number] = file
        self.used += file.size
        self.peak = max(self.peak, self.used)
        self.last_access[file.number] = now
        self.written += file.size

    def promote(self, file: TraceFile, now: float) -> None:
        if file.number in self.residents:
            raise AssertionError(f"file {file.number} is on the fast tier already")
        self.admit(file, now)
        self.promotions += 1
        self.promoted_bytes += file.size


def peak_bytes(files: Sequence[TraceFile]) -> int:
    """The most bytes alive at once."""
    events = sorted([(f.created, f.size) for f in files] + [(f.ended, -f.size) for f in files],
                    key=lambda event: (event[0], event[1]))  # fmt: skip
    live = peak = 0
    for _, change in events:
        live += change
        peak = max(peak, live)
    return peak


def replay(
    files: Sequence[TraceFile], budget: int, policy: Policy,
    bursts: Sequence[tuple[float, int, int]] | None = None, fraction: float = 0.0,
) -> Result:  # fmt: skip
    """``policy`` placing ``files`` with a fast tier of ``budget`` bytes.
    Without ``bursts``, each file's operations come evenly over its life (in
    four bursts): enough for tuning a baseline on a training period."""
    numbers = {file.number for file in files}
    if bursts is None:
        bursts = [(f.created + f.lifetime * (i + 0.5) / 4, f.number, f.operations // 4)
                  for f in files for i in range(4)]  # fmt: skip
    by_number = {file.number: file for file in files}
    # Same-time order: made, then its I/O, then removed.
    events: list[tuple[float, int, int, int]] = [(f.created, 0, f.number, 0) for f in files]
    events += [(t, 1, n, ops) for t, n, ops in bursts if n in numbers]
    events += [(f.ended, 2, f.number, 0) for f in files]
    events.sort()
    fast = _Fast(budget)
    served = total = 0
    for now, what, number, operations in events:
        if what == 0:
            file = by_number[number]
            if policy.place(file, now, fast):
                fast.admit(file, now)
        elif what == 1:
            total += operations
            fast.observed[number] = fast.observed.get(number, 0) + operations
            if number in fast.residents:
                served += operations
                fast.last_access[number] = now
            policy.observe(by_number[number], now, fast)
        else:
            if number in fast.residents:
                fast.demote(number)
                fast.demotions -= 1  # a removal, not a demotion
            fast.last_access.pop(number, None)
            fast.observed.pop(number, None)
            policy.ended(by_number[number], now, fast)
    return Result(policy.name, fraction, served / max(total, 1), fast.written, fast.demotions,
                  fast.promotions, fast.promoted_bytes, fast.peak, budget)  # fmt: skip
