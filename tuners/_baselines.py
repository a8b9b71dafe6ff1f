"""What the online tuner is compared with: fixed knobs, and a hill climber.

:class:`FixedConfig` keeps one configuration (the defaults). :class:`HillClimber`
tunes one knob at a time, as tf.data's AUTOTUNE grows parallelism: from the
start it doubles a knob (halves it if doubling does not help) while each move
raises the rate by more than ``threshold``, then goes on to the next knob,
and stops after a pass over all knobs moves none. Moves over a budget are
skipped. Both take windows the way :class:`~fastio.tuners.OnlineTuner` does
(``start``, ``observe``, ``tell_window``, ``config``), so one driver runs all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._window import MeasurementWindow, WindowMeter

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._space import Config, SearchSpace

__all__ = ["FixedConfig", "HillClimber"]


class _WindowedPolicy:
    """Windows of traffic in, one rate per window to :meth:`tell_window`."""

    def __init__(
        self,
        initial: Mapping[str, Any],
        apply: Callable[[Config], None] | None,
        window: MeasurementWindow | None,
    ) -> None:
        self.config: Config = dict(initial)
        self._apply = apply
        self._meter = WindowMeter(window or MeasurementWindow())
        self._started = False
        self.windows = 0

    def start(self) -> Config:
        if not self._started:
            self._started = True
            if self._apply is not None:
                self._apply(dict(self.config))
        return dict(self.config)

    def observe(self, nbytes: int, seconds: float, samples: float = 0.0) -> float | None:
        """Traffic of one tick; the window's rate when this tick completes one."""
        self.start()
        self._meter.add(nbytes, seconds, float(nbytes))
        if not self._meter.complete:
            return None
        rate = self._meter.rate
        self.tell_window(rate)
        return rate

    def tell_window(self, rate: float) -> None:
        self.start()
        self.windows += 1
        self._decide(rate)

    def _decide(self, rate: float) -> None:
        self._meter.next_window()

    def _change(self, config: Config) -> None:
        if config == self.config:
            self._meter.next_window()
            return
        self.config = dict(config)
        self._meter.restart()
        if self._apply is not None:
            self._apply(dict(config))

    @property
    def converged(self) -> bool:
        return True


class FixedConfig(_WindowedPolicy):
    """Never changes the configuration it starts with."""

    def __init__(
        self,
        initial: Mapping[str, Any],
        *,
        apply: Callable[[Config], None] | None = None,
        window: MeasurementWindow | None = None,
    ) -> None:
        super().__init__(initial, apply, window)


class HillClimber(_WindowedPolicy):
    """One knob at a time, doubling or halving while it helps (see the module)."""

    def __init__(
        self,
        space: SearchSpace,
        initial: Mapping[str, Any],
        *,
        apply: Callable[[Config], None] | None = None,
        window: MeasurementWindow | None = None,
        threshold: float = 0.03,
    ) -> None:
        space.check(initial)
        super().__init__(space.repair(initial), apply, window)
        self.space = space
        self.threshold = threshold
        self.best_rate: float | None = None
        self._knob = 0
        self._direction = 0  # 0: not tried yet; +1 up; -1 down
        self._unmoved = 0  # knobs in a row that did not move
        self._moved_this_knob = False
        self._done = False

    @property
    def converged(self) -> bool:
        return self._done

    def _decide(self, rate: float) -> None:
        if self._done:
            self._meter.next_window()
            return
        if self.best_rate is None:
            self.best_rate, self._best_config = rate, dict(self.config)
        elif rate > self.best_rate * (1.0 + self.threshold):
            self.best_rate, self._best_config = rate, dict(self.config)
            self._moved_this_knob = True
        else:  # the move did not help: back, and the other way or the next knob
            if self._direction > 0 and not self._moved_this_knob:
                self._direction = -1
            else:
                self._finish_knob()
        self._change(self._next_move())

    def _finish_knob(self) -> None:
        self._unmoved = 0 if self._moved_this_knob else self._unmoved + 1
        self._knob = (self._knob + 1) % len(self.space.knobs)
        self._direction = 0
        self._moved_this_knob = False

    def _next_move(self) -> Config:
        while self._unmoved < len(self.space.knobs):
            if self._direction == 0:
                self._direction = 1
            knob = self.space.knobs[self._knob]
            value = self._best_config[knob.name]
            steps = knob.neighbours(value)
            wanted = [v for v in steps if (v > value) == (self._direction > 0)] if steps else []
            if wanted and not isinstance(value, (str, bool)):
                candidate = self._best_config | {knob.name: wanted[0]}
                if self.space.feasible(candidate):
                    return candidate
            if self._direction > 0 and not self._moved_this_knob:
                self._direction = -1
                continue
            self._finish_knob()
        self._done = True
        return dict(self._best_config)
