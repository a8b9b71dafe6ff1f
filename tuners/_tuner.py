"""The online tuner: Optuna's ask-and-tell, driven by windows of live traffic.

The caller owns the loop, as with ``study.ask()``/``study.tell()``: it feeds
traffic with :meth:`OnlineTuner.observe` (bytes and seconds of each tick) and
the tuner, at the end of each window, tells Optuna the rate, decides, and
applies the next configuration through the ``apply`` callback. Callers that
measure windows themselves call :meth:`OnlineTuner.tell_window`.

Phases (every window ends in a :class:`Decision` naming them):

``explore``
    Trials: first the starting configuration and its neighbours (one step of
    each knob, and along the budget), then Optuna's multivariate TPE, seeded,
    which models every measured window. Its proposals are applied within a
    trust region around the best (a factor ``trust`` per log knob, shrinking
    while trials fail to improve): one further away is not risked while the
    job trains; the step towards it is measured instead (the far trial is
    failed, unmeasured). A point over a budget is never applied: the trial is
    pruned (the sampler learns the region is bad) and the nearest feasible
    point is measured. After each new best the same move is tried again (a
    pattern move), then moves along a budget that binds.
``remeasure``
    A configuration that measured better than the trusted best is measured
    again right away; a configuration's estimate is the mean of its windows and
    the best is chosen among those measured twice (trusted). The spread of
    repeated windows gives the noise band.
``settled``
    Exploration stops after ``min_trials`` once ``patience`` trials in a row
    raised the trusted best by less than the noise band (or after
    ``max_trials``); the tuner then runs at the best, watching for drift with a
    Page-Hinkley test over windows four times as long. Drift starts a new round
    from the best and its neighbours.
``confirm``
    A run that finds a converged study of its fingerprint starts at the stored
    best, measures it twice, and settles if it delivers what was stored
    (otherwise the storage changed: a new round).
"""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ._drift import PageHinkley
from ._space import Config, IntKnob, SearchSpace, config_key
from ._store import open_storage, round_name, round_names
from ._window import MeasurementWindow, WindowMeter

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterator, Mapping

    from optuna import Study, Trial
    from optuna.storages import BaseStorage

__all__ = ["Decision", "OnlineTuner", "Phase"]

log = logging.getLogger("fastio.tuners")

Phase = Literal["explore", "remeasure", "confirm", "settled"]
Objective = Literal["bytes", "samples"]
_CONFIRM_WINDOWS = 2
_MIN_TRIALS = 8
_ASK_ATTEMPTS = 4
_REFERENCE_WINDOWS = 2
_DRIFT_SPAN = 4.0


@dataclass(frozen=True)
class Decision:
    """The end of one window: what was measured, and what runs next."""

    window: int
    """Windows measured by this tuner so far (this one included)."""
    phase: Phase
    """The phase the window was measured in."""
    config: Config
    rate: float
    """The objective per second over the window."""
    trial: int | None
    """The Optuna trial number the window was told to (None when settled)."""
    next_config: Config
    next_phase: Phase
    reason: str
    best_config: Config
    best_rate: float
    round: int
    noise: float
    """The current noise band (relative)."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna announces every new study at INFO on stderr through its own
    handler; the tuner logs its rounds itself (the ``fastio.tuners`` logger),
    so the announcement is held back. Warnings still show."""
    optuna_log = logging.getLogger("optuna")
    level = optuna_log.level
    optuna_log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        optuna_log.setLevel(level)


@dataclass
class _Estimate:
    config: Config
    rates: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.rates)


class OnlineTuner:
    """Tunes ``space`` from windows of live traffic (see the module docstring).

    ``initial`` is the first configuration (repaired to fit the budgets);
    ``apply(config)`` is called whenever the configuration changes (and for
    the first one, by :meth:`start`). ``objective``: ``"bytes"`` or
    ``"samples"`` per second. ``storage`` (a journal file, SQLite file, an RDB
    URL or an Optuna storage) with ``study_name`` (a :func:`fingerprint`)
    persists the trials; without it they live in memory. ``seed`` makes the
    decisions repeatable for a repeatable input. ``keep_initial``: the
    initial configuration is the floor, as for a job's first epoch that must
    never run slower than its defaults: it is measured twice, the moves along
    a budget are tried first, and another configuration is only chosen once it
    measured better than it by more than the noise band, in two windows, and
    kept only while its gain holds over the first settled window.
    :meth:`settle_now` ends exploring early (a caller's budget for trials).
    Raises ValueError for a bad ``initial`` or bounds.
    """

    def __init__(
        self,
        space: SearchSpace,
        initial: Mapping[str, Any],
        *,
        apply: Callable[[Config], None] | None = None,
        window: MeasurementWindow | None = None,
        objective: Objective = "bytes",
        seed: int | None = 0,
        storage: str | os.PathLike[str] | BaseStorage | None = None,
        study_name: str = "fastio-tuner",
        max_trials: int = 30,
        min_trials: int | None = None,
        patience: int = 8,
        min_noise: float = 0.03,
        drift_threshold: float = 0.3,
        trust: float | None = 2.0,
        keep_initial: bool = False,
    ) -> None:
        if objective not in ("bytes", "samples"):
            raise ValueError(f"objective must be 'bytes' or 'samples', not {objective!r}")
        if min_trials is None:  # 8, or every trial allowed when fewer are
            min_trials = min(_MIN_TRIALS, max_trials)
        if not 1 <= min_trials <= max_trials or patience < 1:
            raise ValueError("need 1 <= min_trials <= max_trials and patience >= 1")
        if not 0 <= min_noise < 1:
            raise ValueError(f"min_noise must be in 0..1, not {min_noise}")
        space.check(initial)
        self.space = space
        self.initial = space.repair(initial)
        self.objective: Objective = objective
        self.window = window or MeasurementWindow()
        self.seed = seed
        self.max_trials = max_trials
        self.min_trials = min_trials
        self.patience = patience
        self.min_noise = min_noise
        self.drift_threshold = drift_threshold
        if trust is not None and trust <= 1:
            raise ValueError(f"trust must be a factor > 1 (or None), not {trust}")
        self.trust = trust
        self.keep_initial = keep_initial
        self.decisions: list[Decision] = []
        self._apply = apply
        self._meter = WindowMeter(self.window)
        self._storage: BaseStorage | None = None if storage is None else open_storage(storage)
        self._owns_storage = storage is not None and self._storage is not storage
        self._base_name = study_name
        self._started = False
        self._applied = False
        self._closed = False
        self._drift: PageHinkley | None = None
        self._lazy_reference: list[float] = []
        self._probation = False
        self._trial: Trial | None = None
        self._pending: deque[tuple[Config, Phase]] = deque()
        self._confirm_rates: list[float] = []
        self._stored_estimate: _Estimate | None = None
        self.phase: Phase = "explore"
        self.config: Config = dict(self.initial)
        self._resume_or_begin()

    # ---- rounds and studies ------------------------------------------------------------

    def _resume_or_begin(self) -> None:
        rounds = [] if self._storage is None else round_names(self._storage, self._base_name)
        if not rounds:
            self._begin_round(0, self.initial)
            return
        number, name = rounds[-1]
        self._open_round(number, name, startup=1)
        attrs = self.study.user_attrs
        best = self._settled_estimate(attrs.get("best")) if attrs.get("converged") else None
        best = best or self.best_estimate()
        if best is None:  # a round that never completed a trial: start it afresh
            self._queue_design(self.initial)
        elif attrs.get("converged"):
            self._stored_estimate = best
            self.phase = "confirm"
            self.config = best.config
            for _ in range(_CONFIRM_WINDOWS):
                self._pending.append((best.config, "confirm"))
        else:  # an unfinished exploration: go on from what it learned
            self.config = best.config
            self._pending.append((best.config, "remeasure"))
        log.info("tuner: resuming study %s (round %d) with %d windows measured, %s at %s",
                 name, number, sum(len(e.rates) for e in self._estimates.values()),
                 self.phase, self.config)  # fmt: skip

    def _settled_estimate(self, stored: Any) -> _Estimate | None:
        """The stored trials' estimate of the configuration a converged round
        settled at (``stored``, as the study keeps it), None where that is
        not a configuration of this space measured in the round. The
        settled configuration is the one to confirm, not the best of the
        stored trials: a round also weighs windows it does not store as
        trials (those measured settled, on probation), so the two can
        differ."""
        if not isinstance(stored, dict) or set(stored) != set(self.space.names):
            return None
        try:
            self.space.check(stored)
        except (TypeError, ValueError):
            return None
        return self._estimates.get(config_key(stored))

    def _begin_round(self, number: int, start: Config) -> None:
        design = self._design(start)
        self._open_round(number, round_name(self._base_name, number), startup=len(design))
        self.config = dict(start)
        for config in design:
            self._pending.append((config, "explore"))
        self.phase = "explore"

    def _queue_design(self, start: Config) -> None:
        for config in self._design(start):
            self._pending.append((config, "explore"))

    def _design(self, start: Config) -> list[Config]:
        """The first trials of a round: ``start`` and its feasible neighbours.
        Keeping the initial configuration, the moves along a budget come first:
        they keep the memory in flight, so they are the ones that may beat it
        early, while the steps that spend less are the likeliest to lose."""
        neighbours = self.space.neighbours(start)
        if self.keep_initial:
            along = self.space.budget_steps(start)
            neighbours = along + [c for c in neighbours if c not in along]
        return [dict(start), *neighbours]

    def _open_round(self, number: int, name: str, startup: int) -> None:
        # Few startup trials: the design already spreads around the start, and
        # random points cost throughput while the job trains.
        self._round_seed = None if self.seed is None else self.seed + number
        self._round_startup = max(startup, 2)
        self._round_name = name
        self._study: Study | None = None
        self._untold: list[tuple[Config, float]] = []
        self._untold_attrs: dict[str, Any] = {}
        if self._storage is not None:  # stored trials inform this round from the start
            self._create_study()
        self.round = number
        self._trials_this_round = 0
        self._since_improvement = 0
        self._reference: float | None = None
        self._previous_best: Config | None = None
        self._pending.clear()
        self._estimates: dict[tuple[tuple[str, Any], ...], _Estimate] = {}
        if self._storage is None:  # a new in-memory study: nothing stored to load
            return
        import optuna.trial

        names = set(self.space.names)
        for trial in self.study.get_trials(deepcopy=False,
                                           states=(optuna.trial.TrialState.COMPLETE,)):  # fmt: skip
            if set(trial.params) != names or trial.value is None:
                continue
            config = dict(trial.params)
            try:
                self.space.check(config)
            except (TypeError, ValueError):
                continue  # stored under other bounds
            if self.space.feasible(config):
                self._record(config, trial.value)

    @property
    def study(self) -> Study:
        """The round's optuna study. An in-memory one is made (optuna imported,
        about a second of CPU) only when the sampler is first asked: a tuner
        that settles on its design trials, as one keeping the initial
        configuration usually does, never imports it."""
        if self._study is None:
            self._create_study()
        assert self._study is not None
        return self._study

    def _create_study(self) -> None:
        import optuna
        from optuna.samplers import TPESampler
        from optuna.trial import create_trial

        sampler = TPESampler(seed=self._round_seed, multivariate=True,
                             n_startup_trials=self._round_startup)  # fmt: skip
        with _quiet_optuna():
            study = optuna.create_study(storage=self._storage, study_name=self._round_name,
                                        direction="maximize", sampler=sampler,
                                        load_if_exists=True)  # fmt: skip
        distributions = self.space.distributions()
        for config, rate in self._untold:
            study.add_trial(create_trial(params=config, distributions=distributions, value=rate))
        for key, value in self._untold_attrs.items():
            study.set_user_attr(key, value)
        self._untold.clear()
        self._untold_attrs.clear()
        self._study = study

    def _set_attr(self, key: str, value: Any) -> None:
        if self._study is None:
            self._untold_attrs[key] = value
        else:
            self._study.set_user_attr(key, value)

    # ---- estimates ---------------------------------------------------------------------

    def _record(self, config: Config, rate: float) -> None:
        key = config_key(config)
        self._estimates.setdefault(key, _Estimate(dict(config))).rates.append(rate)

    @property
    def noise(self) -> float:
        """The relative noise band: twice the median relative spread of repeated
        windows of one configuration, and at least ``min_noise``."""
        spreads = [
            statistics.stdev(e.rates) / e.mean
            for e in self._estimates.values()
            if len(e.rates) >= 2 and e.mean > 0
        ]
        measured = 2.0 * statistics.median(spreads) if spreads else 0.0
        return min(max(self.min_noise, measured), 0.5)

    def best_estimate(self, trusted_only: bool = True) -> _Estimate | None:
        """The configuration with the highest mean rate among those measured
        at least twice (any, if none is, or with ``trusted_only=False``)."""
        estimates = list(self._estimates.values())
        trusted = [e for e in estimates if len(e.rates) >= 2]
        pool = trusted if trusted and trusted_only else estimates
        best = max(pool, key=lambda e: e.mean, default=None)
        if self.keep_initial and trusted_only and best is not None:
            # Another configuration replaces the initial one only when it
            # measured better by more than the noise band: a gain within the
            # noise may be a loss, and the initial one is the floor to keep.
            initial = self._estimates.get(config_key(self.initial))
            if (
                initial is not None
                and len(initial.rates) >= 2
                and best is not initial
                and best.mean <= initial.mean * (1.0 + self.noise)
            ):
                return initial
        return best

    @property
    def best(self) -> tuple[Config, float]:
        """The best configuration known and its estimated rate (0.0 before any
        window): once settled, the configuration settled at, which is what
        the study stores and a later run confirms."""
        if self.phase == "settled":
            settled = self._estimates.get(config_key(self.config))
            return dict(self.config), settled.mean if settled is not None else 0.0
        best = self.best_estimate()
        return (dict(best.config), best.mean) if best is not None else (dict(self.config), 0.0)

    @property
    def converged(self) -> bool:
        return self.phase == "settled"

    @property
    def trials(self) -> int:
        """Configurations measured (trials told) in the current round by this tuner."""
        return self._trials_this_round

    # ---- the loop ----------------------------------------------------------------------

    def start(self) -> Config:
        """Apply the first configuration (once) and return it."""
        if not self._started:
            self._started = True
            self._next()
        return dict(self.config)

    def observe(self, nbytes: int, seconds: float, samples: float = 0.0) -> Decision | None:
        """Traffic of one tick at the configuration in force. Returns the
        :class:`Decision` when this tick completes a window, else None."""
        if self._closed:
            raise RuntimeError("the tuner is closed")
        self.start()
        amount = float(nbytes) if self.objective == "bytes" else float(samples)
        self._meter.add(nbytes, seconds, amount)
        if not self._meter.complete:
            return None
        return self.tell_window(self._meter.rate)

    def tell_window(self, rate: float) -> Decision:
        """The rate of one complete window at :attr:`config`: tell it, decide,
        apply the next configuration, and return the decision."""
        if self._closed:
            raise RuntimeError("the tuner is closed")
        if not math.isfinite(rate) or rate < 0:
            raise ValueError(f"a window's rate must be a finite number >= 0, not {rate}")
        self.start()
        measured, phase = dict(self.config), self.phase
        number = None
        if phase != "settled":
            number = self._tell(measured, rate)
            self._record(measured, rate)
        reason = self._decide(measured, phase, rate)
        decision = self._decided(measured, phase, rate, number, reason)
        level = logging.INFO if decision.next_config != measured or phase != "settled" else 10
        log.log(level, "tuner window %d (%s, trial %s): %s -> %.4g/s; %s; next %s (%s)",
                decision.window, phase, decision.trial, measured, rate, reason,
                decision.next_config, self.phase)  # fmt: skip
        return decision

    def _decided(self, measured: Config, phase: Phase, rate: float, trial: int | None,
                 reason: str) -> Decision:  # fmt: skip
        """The decision of a window at ``measured`` (now applied), recorded."""
        best_config, best_rate = self.best
        decision = Decision(
            window=len(self.decisions) + 1, phase=phase, config=measured, rate=rate,
            trial=trial, next_config=dict(self.config),
            next_phase=self.phase, reason=reason, best_config=best_config, best_rate=best_rate,
            round=self.round, noise=self.noise,
        )  # fmt: skip
        self.decisions.append(decision)
        return decision

    def _fail_trial(self) -> None:
        """End the sampled trial in progress, if any, as failed (unmeasured)."""
        if self._trial is not None:
            from optuna.trial import TrialState

            self.study.tell(self._trial, state=TrialState.FAIL)
            self._trial = None

    def _decide(self, measured: Config, phase: Phase, rate: float) -> str:
        if phase == "settled":
            self._meter.next_window()
            if self._probation:
                # A configuration chosen over the initial one must keep its
                # gain over a longer window: short windows right after a change
                # can flatter it (new connections take a link before the
                # losses they cause slow every one).
                self._probation = False
                self._record(measured, rate)
                kept = self.best_estimate()
                if kept is not None and kept.config != measured:
                    self._settle(kept.mean, kept.config)
                    return f"its gain did not hold over a longer window: back to {kept.config}"
                return "settled; its gain held over a longer window"
            if self._drift is None:
                # Settled before a window was measured, likely while the pipe
                # still filled: the first settled window is let go, and the next
                # ones give the reference (their mean) and, with their spread,
                # the noise band drift must exceed.
                self._lazy_reference.append(rate)
                if len(self._lazy_reference) > 1:
                    self._record(measured, rate)
                if len(self._lazy_reference) > _REFERENCE_WINDOWS:
                    self._start_drift(statistics.fmean(self._lazy_reference[1:]))
                    return "settled; drift measured against its first windows"
                return "settled; measuring the reference for drift"
            if self._drift.update(rate):
                direction = self._drift.direction
                best, _ = self.best
                self._retune(best)
                return f"drift {direction} at a fixed configuration: re-tuning (round {self.round})"
            return "settled"
        if phase == "confirm":
            self._confirm_rates.append(rate)
            if len(self._confirm_rates) < _CONFIRM_WINDOWS:
                self._next()
                return "confirming the stored best"
            stored = self._stored_estimate
            assert stored is not None
            now = statistics.fmean(self._confirm_rates)
            if now >= stored.mean * (1.0 - max(2 * self.noise, 0.1)):
                self._settle(now)
                return f"the stored best delivers {now / stored.mean:.0%} of its record: settled"
            self._retune(stored.config)
            return f"the stored best delivers {now / stored.mean:.0%} of its record: re-tuning"
        self._trials_this_round += 1
        reason = self._track_improvement()
        if reason == "best improved":
            self._walk_from_best()
        estimate = self._estimates[config_key(measured)]
        trusted = self.best_estimate()
        if (
            len(estimate.rates) == 1
            and (trusted is None or rate > trusted.mean or trusted is estimate)
            and self._trials_this_round < self.max_trials
        ):
            self._pending.appendleft((measured, "remeasure"))
            reason += "; better than the trusted best: measure again"
        if self._trials_this_round >= self.max_trials or (
            self._trials_this_round >= self.min_trials
            and self._since_improvement >= self.patience
            and not any(purpose == "remeasure" for _, purpose in self._pending)
        ):
            settled = self.best_estimate()
            assert settled is not None
            self._settle(settled.mean)
            return reason + f"; converged after {self._trials_this_round} trials"
        self._next()
        return reason

    def _walk_from_best(self) -> None:
        """Queue, first, the moves from a new best likeliest to gain: the same
        move again (a pattern move), then moves along a budget that binds
        (the same memory on more, smaller requests, or fewer, larger ones);
        and drop design points far from it, which would only cost throughput."""
        best = self.best_estimate()
        assert best is not None
        moves = self.space.budget_steps(best.config)
        if self._previous_best is not None:
            moves.insert(0, self.space.extrapolate(self._previous_best, best.config))
        steps: list[tuple[Config, Phase]] = []
        for config in moves:
            if config_key(config) not in self._estimates and (config, "explore") not in steps:
                steps.append((config, "explore"))
        self._previous_best = dict(best.config)
        kept = [(c, purpose) for c, purpose in self._pending
                if purpose != "explore" or self._within_trust(c) == c]  # fmt: skip
        self._pending = deque([*steps, *kept])

    def _track_improvement(self) -> str:
        best = self.best_estimate()
        assert best is not None
        if self._reference is None or best.mean > self._reference * (1.0 + self.noise):
            self._reference = best.mean
            self._since_improvement = 0
            return "best improved"
        self._since_improvement += 1
        return f"no improvement beyond the noise band for {self._since_improvement} trials"

    def _settle(self, reference: float | None, config: Config | None = None) -> None:
        """Settle at ``config`` (the best estimate), watching for drift from
        ``reference`` (from the first settled window when None)."""
        if config is None:
            best = self.best_estimate()
            assert best is not None
            config = best.config
        self._pending.clear()
        self.phase = "settled"
        self._drift = None
        self._lazy_reference = []
        # Drift is a sustained change: settled windows are longer, and noise
        # within them averages out.
        self._meter.span = _DRIFT_SPAN
        self._probation = self.keep_initial and config != self.initial
        if reference is not None:
            self._start_drift(reference)
        self._set_attr("converged", True)
        self._set_attr("best", config)
        self._change(config)

    def _start_drift(self, reference: float) -> None:
        self._drift = PageHinkley(max(reference, 1e-12), delta=max(0.05, self.noise),
                                  threshold=self.drift_threshold)  # fmt: skip

    def settle_now(self, reason: str) -> Decision | None:
        """Stop exploring at once (the caller's budget for trials is spent):
        settle at the best configuration measured twice; keeping the initial
        one, at it unless another measured better beyond the noise in two
        windows, and at it too when no configuration is measured twice yet.
        The window in progress is dropped; drift is watched from the first
        settled window. Returns the decision, or None when already settled."""
        if self._closed or self.phase == "settled":
            return None
        self.start()
        measured, phase, rate = dict(self.config), self.phase, self._meter.rate
        trusted = any(len(e.rates) >= 2 for e in self._estimates.values())
        best = self.best_estimate() if trusted else None
        if best is not None:
            config = best.config
        else:
            config = self.initial if self.keep_initial else measured
        self._fail_trial()
        self._settle(None, config)
        decision = self._decided(measured, phase, rate, None, reason)
        log.info("tuner window %d (%s, cut short): %s; %s; settled at %s", decision.window, phase,
                 measured, reason, decision.next_config)  # fmt: skip
        return decision

    def seconds_to_settle(self) -> float:
        """About how many seconds of traffic exploring still takes when no
        trial improves on the best (0 once settled): the window in progress,
        and a window with its warm-up for each further trial that needs."""
        if self.phase == "settled":
            return 0.0
        window, meter = self.window, self._meter
        current = max(0.0, window.warmup_seconds - meter.warm_seconds) + max(
            0.0, window.min_seconds - meter.seconds
        )
        if self.phase == "confirm":
            more = _CONFIRM_WINDOWS - len(self._confirm_rates) - 1
        else:
            told = self._trials_this_round + 1  # the window in progress ends a trial
            # The round's first window sets the reference: it counts as a gain.
            since = 0 if self._reference is None else self._since_improvement + 1
            more = max(self.min_trials - told, self.patience - since)
            more += sum(purpose == "remeasure" for _, purpose in self._pending)
        return current + max(more, 0) * (window.min_seconds + window.warmup_seconds)

    def _retune(self, start: Config) -> None:
        self._drift = None
        self._meter.span = 1.0
        self._confirm_rates = []
        self._begin_round(self.round + 1, self.space.repair(start))
        self._next()

    def _next(self) -> None:
        """Ask for the next trial (a pending one first) and apply it."""
        if self._pending:
            config, self.phase = self._pending.popleft()
            self._trial = None  # chosen here: added as a trial when measured
        else:
            self.phase = "explore"
            asked = self._ask()
            if asked is None:
                best = self.best_estimate()
                assert best is not None
                self._settle(best.mean)
                return
            self._trial, config = asked
        self._change(config)

    def _tell(self, config: Config, rate: float) -> int:
        """Tell the window as a trial: the sampled trial in progress, or a new
        trial of a configuration the tuner chose itself. Returns its number."""
        if self._trial is not None:
            trial, self._trial = self._trial, None
            self.study.tell(trial, rate)
            return trial.number
        if self._study is None:  # told when the study is made
            self._untold.append((dict(config), rate))
            return len(self._untold) - 1
        # Added complete rather than enqueued and asked: in a study shared by
        # several processes another one's ask could take an enqueued trial.
        from optuna.trial import create_trial

        self.study.add_trial(create_trial(params=config, distributions=self.space.distributions(),
                                          value=rate))  # fmt: skip
        return self.study.get_trials(deepcopy=False)[-1].number

    def _ask(self) -> tuple[Trial | None, Config] | None:
        from optuna.trial import TrialState

        distributions = self.space.distributions()
        for _ in range(_ASK_ATTEMPTS):
            trial = self.study.ask(distributions)
            sampled = dict(trial.params)
            if not self.space.feasible(sampled):
                # Over a budget: never applied. Pruned, the sampler counts the
                # region as bad; the nearest feasible point goes in its place.
                trial.set_user_attr("infeasible", True)
                self.study.tell(trial, state=TrialState.PRUNED)
                config = self._within_trust(self.space.repair(sampled))
            else:
                config = self._within_trust(sampled)
                if config == sampled and config_key(config) not in self._estimates:
                    return trial, config
                if config == sampled:  # measured already: a window better spent elsewhere
                    trial.set_user_attr("duplicate", True)
                    self.study.tell(trial, state=TrialState.FAIL)
                    continue
                # Too far from the best to risk while the job trains: a step
                # of at most ``trust`` in the direction the sampler wants. The
                # sampled trial fails (unmeasured, the sampler ignores it).
                trial.set_user_attr("beyond_trust", True)
                self.study.tell(trial, state=TrialState.FAIL)
            if config_key(config) not in self._estimates:
                break
        else:
            # The sampler keeps coming back to measured points: try an
            # unmeasured neighbour of the best; with none left, nothing near
            # the best is unknown, and exploring is done.
            best = self.best_estimate()
            assert best is not None
            fresh = [c for c in self.space.neighbours(best.config)
                     if config_key(c) not in self._estimates]  # fmt: skip
            if not fresh:
                return None
            config = fresh[0]
        return None, config

    def _within_trust(self, config: Config) -> Config:
        """``config`` with each integer knob at most a factor ``trust`` (log
        knobs) or ``1/trust`` of its range away from the best, and feasible."""
        best = self.best_estimate()
        if self.trust is None or best is None:
            return config
        # The region shrinks while trials fail to improve (to a fifth of an
        # octave at most): late trials refine around the best, cheaply.
        factor = self.trust ** max(0.35, 1.0 - self._since_improvement / 6)
        moved = dict(config)
        for knob in self.space.knobs:
            if not isinstance(knob, IntKnob):
                continue
            centre = best.config[knob.name]
            if knob.log:
                low, high = math.ceil(centre / factor), math.floor(centre * factor)
            else:
                reach = max(1, round((knob.high - knob.low) / factor / 8))
                low, high = centre - reach, centre + reach
            moved[knob.name] = min(max(moved[knob.name], low, knob.low), high, knob.high)
        return self.space.repair(moved)

    def _change(self, config: Config) -> None:
        if not self.space.feasible(config):  # every path above repairs first
            raise AssertionError(f"tuner bug: about to apply {config}, over a budget")
        first = not self._applied
        if config == self.config and not first:
            self._meter.next_window()  # the same knobs: no warm-up to discard
            return
        self._applied = True
        self.config = dict(config)
        self._meter.restart()
        if self._apply is not None:
            self._apply(dict(config))

    def close(self) -> None:
        """End the trial in progress (as failed: its window is incomplete) and
        release the storage the tuner opened (database connections)."""
        if self._closed:
            return
        self._closed = True
        self._fail_trial()
        if self._owns_storage:
            from optuna.storages import RDBStorage

            if isinstance(self._storage, RDBStorage):
                self._storage.remove_session()
                self._storage.engine.dispose()

    def __enter__(self) -> OnlineTuner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
