"""Search spaces: named knobs with their ranges, and a budget on their product.

A configuration is a plain ``dict`` of knob name to value. Integer knobs may be
log-scaled (a read size of 16 KiB..64 MiB is searched by its exponent, not
linearly); categorical knobs take one of a tuple of choices. A
:class:`ProductBudget` bounds the product of some knobs (reads in flight times
read size is memory in flight): a configuration over it is *infeasible* and the
tuner never applies one; :meth:`SearchSpace.repair` gives the nearest feasible
configuration by lowering the knobs in the order they are named.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from optuna.distributions import BaseDistribution

__all__ = ["Categorical", "Config", "IntKnob", "Knob", "ProductBudget", "SearchSpace"]

Config = dict[str, Any]


@dataclass(frozen=True)
class IntKnob:
    """An integer knob in ``low..high``; ``log``: searched by its logarithm."""

    name: str
    low: int
    high: int
    log: bool = False

    def __post_init__(self) -> None:
        valid = 0 < self.low <= self.high if self.log else self.low <= self.high
        if not valid:
            raise ValueError(
                f"knob {self.name}: need {'0 < ' if self.log else ''}low <= high, "
                f"not {self.low}..{self.high}"
            )

    def distribution(self) -> BaseDistribution:
        from optuna.distributions import IntDistribution

        return IntDistribution(self.low, self.high, log=self.log)

    def check(self, value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"knob {self.name} must be an integer, not {value!r}")
        if not self.low <= value <= self.high:
            raise ValueError(f"knob {self.name} must be in {self.low}..{self.high}, not {value}")

    def grid(self, points: int) -> list[int]:
        """``points`` values spread over the range (by ratio when log-scaled)."""
        if points < 2 or self.low == self.high:
            return [self.low]
        if self.log:
            ratio = (self.high / self.low) ** (1 / (points - 1))
            values = {round(self.low * ratio**i) for i in range(points)}
        else:
            step = (self.high - self.low) / (points - 1)
            values = {round(self.low + step * i) for i in range(points)}
        return sorted(min(max(v, self.low), self.high) for v in values)

    def neighbours(self, value: int) -> list[int]:
        """One step down and up: halving and doubling when log-scaled, else an
        eighth of the range."""
        if self.log:
            steps = [value // 2, value * 2]
        else:
            stride = max(1, (self.high - self.low) // 8)
            steps = [value - stride, value + stride]
        return [v for v in steps if self.low <= v <= self.high and v != value]


@dataclass(frozen=True)
class Categorical:
    """A knob taking one of ``choices`` (str, int, float, bool or None)."""

    name: str
    choices: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.choices:
            raise ValueError(f"knob {self.name}: needs at least one choice")

    def distribution(self) -> BaseDistribution:
        from optuna.distributions import CategoricalDistribution

        return CategoricalDistribution(self.choices)

    def check(self, value: object) -> None:
        if value not in self.choices:
            raise ValueError(f"knob {self.name} must be one of {self.choices!r}, not {value!r}")

    def grid(self, points: int) -> list[Any]:
        return list(self.choices)

    def neighbours(self, value: Any) -> list[Any]:
        return [choice for choice in self.choices if choice != value]


Knob = IntKnob | Categorical


@dataclass(frozen=True)
class ProductBudget:
    """``product(config[k] for k in knobs) <= limit``: e.g. outstanding
    requests x read size under a memory budget in bytes."""

    knobs: tuple[str, ...]
    limit: int

    def __post_init__(self) -> None:
        if self.limit < 1 or not self.knobs:
            raise ValueError("a product budget needs knobs and a positive limit")

    def usage(self, config: Mapping[str, Any]) -> int:
        return math.prod(int(config[name]) for name in self.knobs)

    def allows(self, config: Mapping[str, Any]) -> bool:
        return self.usage(config) <= self.limit


@dataclass(frozen=True)
class SearchSpace:
    """Knobs by name, and budgets every applied configuration keeps.

    Raises ValueError when knob names repeat, a budget names an unknown or a
    categorical knob, or no configuration can meet a budget.
    """

    knobs: tuple[Knob, ...]
    budgets: tuple[ProductBudget, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [knob.name for knob in self.knobs]
        if len(set(names)) != len(names):
            raise ValueError(f"knob names repeat: {names}")
        for budget in self.budgets:
            for name in budget.knobs:
                if not isinstance(self.by_name.get(name), IntKnob):
                    raise ValueError(f"budget on {name!r}: not an integer knob of this space")
            lowest = 1
            for name in budget.knobs:
                lowest *= self.knob(name).low  # type: ignore[union-attr]
            if lowest > budget.limit:
                raise ValueError(
                    f"no configuration fits the budget {budget.limit} on "
                    f"{' x '.join(budget.knobs)} (the smallest uses {lowest})"
                )

    @property
    def by_name(self) -> dict[str, Knob]:
        return {knob.name: knob for knob in self.knobs}

    @property
    def names(self) -> list[str]:
        return [knob.name for knob in self.knobs]

    def knob(self, name: str) -> Knob:
        try:
            return self.by_name[name]
        except KeyError:
            raise KeyError(f"no knob {name!r}; knobs: {', '.join(self.names)}") from None

    def distributions(self) -> dict[str, BaseDistribution]:
        return {knob.name: knob.distribution() for knob in self.knobs}

    def check(self, config: Mapping[str, Any]) -> None:
        """Raise ValueError/TypeError unless ``config`` sets every knob in range."""
        missing = set(self.names) - set(config)
        if missing:
            raise ValueError(f"configuration lacks knobs {sorted(missing)}")
        for knob in self.knobs:
            knob.check(config[knob.name])

    def feasible(self, config: Mapping[str, Any]) -> bool:
        return all(budget.allows(config) for budget in self.budgets)

    def repair(self, config: Mapping[str, Any]) -> Config:
        """``config`` itself if feasible, else with the budgeted knobs lowered in
        the order each budget names them, each no further than needed."""
        fixed = {name: config[name] for name in self.names}
        for budget in self.budgets:
            for name in budget.knobs:
                if budget.allows(fixed):
                    break
                knob = self.knob(name)
                assert isinstance(knob, IntKnob)
                others = budget.usage(fixed) // fixed[name]
                fixed[name] = max(knob.low, min(fixed[name], budget.limit // others))
        return fixed

    def neighbours(self, config: Mapping[str, Any]) -> list[Config]:
        """Feasible configurations one knob step away from ``config`` and, for
        each budget, one step along it (one knob up, another down: the same
        memory in flight spent on more, smaller requests or fewer, larger ones)."""
        found = [
            moved
            for knob in self.knobs
            for value in knob.neighbours(config[knob.name])
            if self.feasible(moved := dict(config) | {knob.name: value})
        ]
        return found + [moved for moved in self.budget_steps(config) if moved not in found]

    def extrapolate(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> Config:
        """The move from ``before`` to ``after`` made once more (a pattern move:
        by ratio for log knobs), within the bounds and repaired to be feasible."""
        moved = dict(after)
        for knob in self.knobs:
            if not isinstance(knob, IntKnob) or before[knob.name] == after[knob.name]:
                continue
            old, new = before[knob.name], after[knob.name]
            value = round(new * new / old) if knob.log else 2 * new - old
            moved[knob.name] = min(max(value, knob.low), knob.high)
        return self.repair(moved)

    def budget_steps(self, config: Mapping[str, Any]) -> list[Config]:
        """Feasible moves along each budget that binds (no knob of it can take a
        step up): one knob a step up, another down."""
        found = []
        for budget in self.budgets:
            if any(
                budget.allows(dict(config) | {name: up})
                for name in budget.knobs
                for up in self.knob(name).neighbours(config[name])
                if up > config[name]
            ):
                continue
            for first, second in itertools.permutations(budget.knobs, 2):
                up = [v for v in self.knob(first).neighbours(config[first]) if v > config[first]]
                down = [v for v in self.knob(second).neighbours(config[second])
                        if v < config[second]]  # fmt: skip
                if up and down:
                    found.append(dict(config) | {first: up[0], second: down[0]})
        return [moved for moved in found if self.feasible(moved)]

    def grid(self, points: int) -> Iterator[Config]:
        """Every feasible combination of ``points`` values per integer knob
        (every choice of categorical ones)."""
        axes: Sequence[list[Any]] = [knob.grid(points) for knob in self.knobs]
        for values in itertools.product(*axes):
            config = dict(zip(self.names, values, strict=True))
            if self.feasible(config):
                yield config


def config_key(config: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A hashable identity of a configuration (its items in name order)."""
    return tuple(sorted(config.items()))
