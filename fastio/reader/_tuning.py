"""Wiring a :class:`~fastio.Reader` to the online tuner (:mod:`fastio.tuners`).

What is tuned live: ``outstanding_requests`` (1..256) and ``read_size``
(16 KiB..64 MiB), the two knobs a reader takes while data flows, under a
memory budget for bytes in flight (``outstanding_requests x read_size``;
by default half the reader's ``memory_budget``, leaving the other half for
data read ahead and handed over; large budgets, e.g. 64 x 4 MiB, were
measured erratic on small VMs). ``engine`` and ``direct`` only take effect
when a reader is made or a stream opens, so a live tuner, which must not
interrupt the job's stream, leaves them alone: ``fastio-bench sweep --engine
io_uring,threads --direct false,true`` measures them with a fresh reader per
setting, and the choice goes into the config (``reader: {engine, direct}``).

With DataLoader workers, each worker's reader has its own tuner (a forked
worker makes its own: the parent's thread is not in it); given a shared
``storage`` they share one study (trials of all of them inform each). The
tuner owns each reader's total; a fairness monitor that shifts requests
between workers works within it. Each worker's summary goes to the process
that made the dataset (:class:`WorkersTuners`), whose ``stats()["tuner"]``
sums them up (:func:`combined`).

A :class:`ReaderTuning` measures the reader every ``tick_seconds`` on a
daemon thread: delivered bytes over elapsed time, what the job sees (for
remote reads, bytes as they arrive), and only while data flows. Time the
consumer held reads back counts too: a reader whose consumer (decoding, on a
busy machine) sets the pace is still faster with a setting that costs less
CPU per byte, and a consumer that sets the pace whatever the knobs makes every
setting measure alike, so the tuner keeps the defaults and settles. Trials
cost the job throughput, so they are bounded: they end within
``explore_share`` of the first pass's bytes, and a pass too short to hold them
keeps the defaults. Every window's decision goes to the ``fastio.tuners``
logger and to :meth:`ReaderTuning.summary` (``dataset.stats()["tuner"]``).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import logging
import os
import threading
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fastio._errors import import_extra
from fastio.reader._requests import REMOTE_REQUEST_BYTES
from fastio.shared._mapped import OwnedFile, remove_owned
from fastio.sources._objects import is_remote
from fastio.spec._reader import MAX_OUTSTANDING_REQUESTS
from fastio.spec._tuner import MAX_TUNED_READ_SIZE, MIN_TUNED_READ_SIZE, TunerSettings

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    # mypy reads the tuners/ folder as the package it is installed as.
    import tuners as tuners_api
    from fastio.reader._reader import Reader
    from fastio.reader._stats import ReaderStats
    from fastio.spec._reader import ReaderSettings
    from tuners import Decision, OnlineTuner, SearchSpace
else:

    class _Tuners:
        """:mod:`fastio.tuners`, imported at its first use: tuning is off
        unless asked for, and the tuners' modules (about 10 ms) would be
        imported before every dataset's first sample (they import optuna
        only when a tuner is made)."""

        def __getattr__(self, name: str) -> Any:
            from fastio import tuners

            return getattr(tuners, name)

    tuners_api = _Tuners()

__all__ = [
    "ReaderTuning",
    "WorkersTuners",
    "attach",
    "combined",
    "reader_space",
    "storage_fingerprint",
]

log = logging.getLogger("fastio")

# Trials before the tuner may settle, and trials in a row without a gain beyond
# the noise band that settle it: the live reader's tuning must be done within
# the first tenth of an epoch, so it stops as soon as nothing near the
# defaults measures better.
_MIN_TRIALS = 3
_PATIENCE = 3
# A remote reader's one knob has a single step from the defaults: the
# defaults twice and that step decide it.
_REMOTE_PATIENCE = 2
# A remote link is full at the defaults (see ReaderTuning._link_full) where a
# request takes at least this many round trips, and the round trip under load
# is this many times the quickest one.
_FULL_ROUND_TRIPS = 8
_QUEUED_ROUND_TRIP = 1.2
# Seconds between looks for the first bytes, and at most between ticks while
# exploring within the first pass's share.
_FIRST_BYTES_POLL = 0.01
_BUDGET_TICK = 0.05
_RECENT_SECONDS = 0.2


def budget_for(settings: ReaderSettings, options: TunerSettings) -> int:
    if options.memory_budget is not None:
        return options.memory_budget
    # The reader's own settings fit, however far past half its memory budget
    # they reach (16 x 4 MiB by default, which the budget holds to 8 in
    # flight): they are where the tuner starts, and its floor.
    defaults = settings.outstanding_requests * settings.read_size
    return max(settings.memory_budget // 2, defaults, MIN_TUNED_READ_SIZE)


def remote_budget_for(settings: ReaderSettings, options: TunerSettings) -> int:
    if options.memory_budget is not None:
        return options.memory_budget
    return settings.remote_memory_budget


def remote_space(settings: ReaderSettings, budget: int) -> SearchSpace | None:
    """The live knob of a reader of remote objects: ``outstanding_requests``
    alone, from the reader's setting up to what ``budget`` holds of
    full-size remote pieces (None when that is no more). Remote pieces grow to
    REMOTE_REQUEST_BYTES whatever ``read_size`` is, so it is not a knob
    there; and every request waits a round trip before its first byte, so
    fewer requests than the defaults only lose (measured over a 20 ms link:
    8 requests 0.88x of 16), which a job's first epoch would pay for."""
    low = settings.outstanding_requests
    high = min(budget // REMOTE_REQUEST_BYTES, MAX_OUTSTANDING_REQUESTS)
    if high <= low:
        return None
    knob = tuners_api.IntKnob("outstanding_requests", low, high, log=True)
    return tuners_api.SearchSpace((knob,), ())


def reader_space(budget: int) -> SearchSpace:
    """The live knobs and their budget, as the tuner sees them."""
    knob = tuners_api.IntKnob
    return tuners_api.SearchSpace(
        (
            knob("outstanding_requests", 1, MAX_OUTSTANDING_REQUESTS, log=True),
            knob("read_size", MIN_TUNED_READ_SIZE, MAX_TUNED_READ_SIZE, log=True),
        ),
        (tuners_api.ProductBudget(("outstanding_requests", "read_size"), budget),),
    )


def storage_fingerprint(urls: Sequence[str], **extra: Any) -> str:
    """The study name of a dataset: its storage (filesystem device, or scheme
    and host), the dataset (its URLs) and this machine."""
    first = urls[0] if urls else ""
    parts = urlsplit(first)
    where = "unknown"
    if parts.scheme and parts.scheme != "file" and "://" in first:
        where = f"{parts.scheme}://{parts.netloc}"
    else:
        with contextlib.suppress(OSError):
            where = f"local:{os.stat(os.path.dirname(parts.path or first) or '.').st_dev}"
    return "fastio-" + tuners_api.fingerprint(
        storage=where, dataset=list(urls), machine=tuners_api.machine_identity(), **extra
    )


class ReaderTuning:
    """An :class:`~fastio.tuners.OnlineTuner` driving one reader's live knobs.

    :meth:`tick` takes one measurement (the CLI calls it itself);
    :meth:`start` runs ticks on a daemon thread until :meth:`close`.
    Raises :class:`~fastio.MissingExtraError` without optuna (the ``tune`` extra).
    """

    def __init__(
        self,
        reader: Reader,
        options: TunerSettings,
        study_name: str,
        on_decision: Callable[[Decision], None] | None = None,
        remote: bool = False,
    ) -> None:
        # The tuners import optuna when a study opens: say which extra it takes
        # first, without importing it here (the study opens on the tuner's
        # thread, so the job's first sample does not wait for optuna).
        if importlib.util.find_spec("optuna") is None:
            import_extra("optuna", "tuning")
        self.reader = reader
        self.options = options
        self.pid = os.getpid()  # a forked child's copy tunes nothing: its thread is not there
        self._defaults = {"outstanding_requests": reader.settings.outstanding_requests}
        budget = remote_budget_for(reader.settings, options)
        space = remote_space(reader.settings, budget) if remote else None
        # A remote reader without room for more requests tunes both knobs.
        self.remote = space is not None
        if space is not None:
            self.budget, self.space = budget, space
        else:
            self.budget = budget_for(reader.settings, options)
            self.space = reader_space(self.budget)
        self._study_name = study_name
        self._tuner: OnlineTuner | None = None
        self.on_decision = on_decision
        self._last: ReaderStats | None = None
        self._first: ReaderStats | None = None
        self.settled_after: dict[str, float] | None = None
        # Exploring ends once the reader has delivered this many bytes (set by
        # the first pass's size, see expect()); None: no such bound.
        self._explore_until: int | None = None
        self.first_pass_bytes: int | None = None
        self._recent: deque[ReaderStats] = deque()
        self._stop = threading.Event()
        self._pass_begun = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._making = threading.Lock()
        self.decisions: list[dict[str, Any]] = []
        log.info("fastio: tuning %s live within %d bytes in flight (study %s)",
                 ", ".join(self.space.names), self.budget, study_name)  # fmt: skip

    @property
    def tuner(self) -> OnlineTuner:
        """The tuner, made on first use: its study opens then."""
        with self._making:
            return self._tuner or self._make()

    def _make(self) -> OnlineTuner:
        if self._tuner is None:
            options, settings = self.options, self.reader.settings
            initial = {"outstanding_requests": settings.outstanding_requests}
            if not self.remote:
                initial["read_size"] = min(max(settings.read_size, MIN_TUNED_READ_SIZE),
                                           MAX_TUNED_READ_SIZE)  # fmt: skip
            window = tuners_api.MeasurementWindow(
                min_seconds=options.window_seconds,
                min_bytes=options.window_bytes,
                max_seconds=max(options.window_seconds * 10, 30.0),
                warmup_seconds=options.warmup_seconds,
            )
            # The reader's settings are the floor (keep_initial): tuning in the
            # job's first epoch must never make it slower than the defaults, and
            # few trials (the defaults twice and both moves along the budget: a decision
            # after 4 windows when none gains) let it settle early.
            self._tuner = tuners_api.OnlineTuner(
                self.space, initial, apply=self._apply, window=window, seed=options.seed,
                storage=options.storage, study_name=self._study_name,
                max_trials=options.max_trials, min_trials=min(_MIN_TRIALS, options.max_trials),
                patience=_REMOTE_PATIENCE if self.remote else _PATIENCE, keep_initial=True,
            )  # fmt: skip
        return self._tuner

    def _apply(self, config: dict[str, Any]) -> None:
        if self.reader.closed:
            return
        if "read_size" in config:
            self.reader.read_size = config["read_size"]
        self.reader.outstanding_requests = config["outstanding_requests"]

    def expect(self, nbytes: int) -> None:
        """A pass over about ``nbytes`` begins. The first one bounds exploring:
        the tuner settles before the reader has delivered ``explore_share`` of
        it, and at once when what its trials still need cannot fit. A job's
        first epoch thus never pays for more than that share of trials, and a
        short epoch (seconds, where a trial costs more than it can win) keeps
        the defaults."""
        with self._lock:
            if self.first_pass_bytes is not None or self.reader.closed:
                return
            start = self.reader.stats().bytes_delivered
            self.first_pass_bytes = nbytes
            self._explore_until = start + max(1, int(nbytes * self.options.explore_share))
        self._pass_begun.set()

    def tick(self) -> Decision | None:
        """Feed the reader's traffic since the last tick to the tuner; returns
        the decision when this tick completes a window."""
        with self._lock:
            if self.reader.closed:
                return None
            self.tuner.start()
            now = self.reader.stats()
            last, self._last = self._last, now
            if last is None:
                self._first = now
                return None
            window = now.since(last)
            seconds = window.elapsed_seconds
            # A remote read delivers its piece (megabytes, most of a second
            # over a link) at once: bytes as they arrive measure the link
            # smoothly, where whole pieces would make short windows noise.
            amount = _measured(window, now)
            if amount <= 0 or seconds <= 0:
                return None
            recent = self._recent
            recent.append(now)
            while len(recent) > 2 and (
                recent[-1].elapsed_seconds - recent[1].elapsed_seconds >= _RECENT_SECONDS
            ):
                recent.popleft()
            decision = self._link_full(now)
            if decision is None:
                decision = self.tuner.observe(amount, seconds)
            if decision is None:
                decision = self._within_budget(now)
            if decision is not None:
                self._record(decision, now)
            return decision

    def _within_budget(self, now: ReaderStats) -> Decision | None:
        """Settle when exploring would run past the first pass's share by the
        end of the trials still needed (and the next tick), at the higher of
        the rate since the first bytes and the rate of the last
        ``_RECENT_SECONDS`` (while the pipe fills, the first lags behind; a
        single tick's own rate is a burst)."""
        limit = self._explore_until
        if limit is None:
            return None
        if self.tuner.converged:  # within the share: later rounds (drift) are not bounded
            self._explore_until = None
            return None
        assert self._first is not None
        span = now.since(self._recent[0])
        recent_rate = _measured(span, now) / span.elapsed_seconds if span.elapsed_seconds else 0.0
        rate = max(now.since(self._first).throughput, recent_rate)
        ahead = self.tuner.seconds_to_settle() + self._interval()
        if now.bytes_delivered + rate * ahead <= limit:
            return None
        self._explore_until = None
        share = self.options.explore_share
        return self.tuner.settle_now(f"trials would run past {share:.0%} of the first pass")

    def _link_full(self, now: ReaderStats) -> Decision | None:
        """Settle at the defaults, before any trial above them, where the link
        is full at the defaults: a remote request takes many round trips
        (bytes in flight over the rate they arrive at, by Little's law: the
        requests share a bottleneck) and the round trip has grown under load
        (a queue formed at it). More requests there only split the link
        further and lengthen the queue: over a 20 ms link limited to 1 Gbit/s,
        a trial at 32 requests measured 82-110 MB/s where 16 held 113-117.
        A server that limits each connection instead leaves the round trip as
        it was, and the trials go on."""
        if not self.remote or self.tuner.converged or not self.tuner.decisions:
            return None
        fastest, recent = now.answer_seconds_fastest, now.answer_seconds_recent
        if fastest <= 0 or dict(self.tuner.config) != self._defaults:
            return None
        first = self._recent[0]
        span = now.since(first)
        if span.elapsed_seconds <= 0:
            return None
        rate = _measured(span, now) / span.elapsed_seconds
        in_flight = (first.inflight_bytes + now.inflight_bytes) / 2
        if rate <= 0 or in_flight <= 0:
            return None
        round_trips = in_flight / rate / fastest
        log.debug("fastio: a request takes %.1f round trips of %.1f ms, %.1f ms now",
                  round_trips, 1e3 * fastest, 1e3 * recent)  # fmt: skip
        if round_trips < _FULL_ROUND_TRIPS or recent < _QUEUED_ROUND_TRIP * fastest:
            return None
        return self.tuner.settle_now(
            f"the link is full at the defaults: a request takes {round_trips:.0f} round trips,"
            f" and the round trip grew from {1e3 * fastest:.0f} to {1e3 * recent:.0f} ms"
        )

    def _record(self, decision: Decision, now: ReaderStats) -> None:
        assert self._first is not None
        since = now.since(self._first)
        when = {"seconds": since.elapsed_seconds, "bytes_delivered": since.bytes_delivered}
        self.decisions.append(decision.as_dict() | when)
        if decision.next_phase == "settled" and self.settled_after is None:
            self.settled_after = when
        if self.on_decision is not None:
            self.on_decision(decision)

    def start(self) -> ReaderTuning:
        if self._thread is None:
            # The thread holds the tuning weakly: a dataset dropped unclosed
            # takes its tuning and reader with it (their finalizers stop it).
            self._thread = threading.Thread(target=_run, args=(weakref.ref(self),),
                                            name="fastio-tuner", daemon=True)  # fmt: skip
            weakref.finalize(self, _wake, self._stop, self._pass_begun)
            self._thread.start()
        return self

    def _interval(self) -> float:
        """Seconds to the next tick: while exploring within the first pass's
        share, often enough to settle before it runs out."""
        tick = self.options.tick_seconds
        if self._explore_until is not None and not self.tuner.converged:
            return min(tick, _BUDGET_TICK)
        return tick

    def close(self) -> None:
        """Stop the thread (waiting for it) and end the trial in progress."""
        self._stop.set()
        self._pass_begun.set()  # wakes a thread waiting for the first pass
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            if self._tuner is not None:
                self._tuner.close()

    def summary(self) -> dict[str, Any]:
        """The tuner's state for ``stats()``: phase, round, trials, best, current
        knobs, when it first settled (``settled_after``: seconds and bytes
        delivered since its first measurement; None while it has not), and the
        size of the first pass that bounds its trials (``first_pass_bytes``)."""
        tuner = self.tuner
        best, rate = tuner.best
        return {
            "phase": tuner.phase, "round": tuner.round, "trials": tuner.trials,
            "windows": len(tuner.decisions), "converged": tuner.converged,
            "config": dict(tuner.config), "best_config": best, "best_bytes_per_second": rate,
            "memory_budget": self.budget, "noise": tuner.noise,
            "settled_after": self.settled_after, "first_pass_bytes": self.first_pass_bytes,
            "last_decision": self.decisions[-1] if self.decisions else None,
        }  # fmt: skip


def _measured(window: ReaderStats, now: ReaderStats) -> int:
    """The bytes a window measures: as they arrive for a reader whose remote
    client counts them (``now`` has any), else as they are delivered."""
    return window.bytes_arrived if now.bytes_arrived > 0 else window.bytes_delivered


def attach(
    reader: Reader, settings: TunerSettings, urls: Sequence[str],
    on_decision: Callable[[Decision], None] | None = None,
) -> ReaderTuning | None:  # fmt: skip
    """A started :class:`ReaderTuning` of ``reader`` for a dataset of ``urls``,
    or None when tuning is not enabled."""
    if not settings.enabled:
        return None
    remote = bool(urls) and all(is_remote(url) for url in urls)
    return ReaderTuning(reader, settings, storage_fingerprint(urls), on_decision,
                        remote=remote).start()  # fmt: skip


class WorkersTuners(OwnedFile):
    """The summaries of a dataset's DataLoader workers' tuners, for the process
    that made it (a worker's tuner dies with it, a non-persistent worker's
    with its pass). A shared file, named by that process and removed with it:
    one JSON object of each worker's latest summary by worker number,
    rewritten under an exclusive ``flock`` at each of the worker's decisions
    and as each of its passes ends."""

    kind = "tuners"

    def put(self, worker: int, summary: dict[str, Any]) -> None:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with open(fd, "r+b", closefd=False) as file:
                reports = _reports(file.read())
                reports[str(worker)] = summary
                file.seek(0)
                file.truncate()
                file.write(json.dumps(reports, default=str).encode())
        finally:
            os.close(fd)

    def read(self) -> dict[str, dict[str, Any]]:
        """Each worker's latest summary, by worker number (as text)."""
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return dict(self.__dict__.get("_kept", {}))  # as it was when closed
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            with open(fd, "rb", closefd=False) as file:
                return _reports(file.read())
        finally:
            os.close(fd)

    def close(self) -> None:
        """Remove the file (the owner), keeping what it held for :meth:`read`;
        workers of a later pass make it again."""
        if os.getpid() == self._owner:
            self._kept = self.read()
        remove_owned(self._path, self._owner)


def _wake(stop: threading.Event, begun: threading.Event) -> None:
    """A tuning collected unclosed: its thread ends."""
    stop.set()
    begun.set()


def _run(tuning_ref: weakref.ref[ReaderTuning]) -> None:
    """The tuner's thread: a tick every interval, the tuning taken anew from
    ``tuning_ref`` for each (and never held while waiting)."""
    tuning = tuning_ref()
    if tuning is None:
        return
    stop, begun = tuning._stop, tuning._pass_begun
    # Optuna's import holds the GIL for a second or so: it waits until the
    # reader has delivered its first bytes, so the job's first sample does not.
    # Its first measurement starts with the first bytes, looked for often
    # once a pass has begun (a fast link delivers a tenth of a short epoch
    # in a fraction of a second), and every tick before that.
    tick = tuning.options.tick_seconds
    while tuning.reader.stats().bytes_delivered <= 0:
        del tuning
        if begun.is_set():
            stop.wait(min(tick, _FIRST_BYTES_POLL))
        else:
            begun.wait(tick)  # a pass beginning (or close) wakes it
        tuning = tuning_ref()
        if tuning is None or stop.is_set() or tuning.reader.closed:
            return
    try:
        tuning.tick()  # the first snapshot, and the tuner's start
    except Exception:
        log.exception("fastio: the tuner could not start; knobs stay as they are")
        return
    interval = tuning._interval()
    del tuning
    while not stop.wait(interval):
        tuning = tuning_ref()
        if tuning is None or tuning.reader.closed:
            break
        try:
            tuning.tick()
        except Exception:  # the job's data keeps flowing; tuning stops
            log.exception("fastio: the tuner failed and stops; knobs stay as they are")
            break
        interval = tuning._interval()
        del tuning


def _reports(text: bytes) -> dict[str, Any]:
    """The summaries in a :class:`WorkersTuners` file; none where it is empty
    or torn (a worker killed while it wrote)."""
    try:
        reports = json.loads(text) if text else {}
    except ValueError:
        return {}
    return reports if isinstance(reports, dict) else {}


def _seconds(settled: Any) -> float:
    return float(settled["seconds"])


def combined(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One summary of several tuners' (a dataset's DataLoader workers', by
    worker): settled once all are, the phase of one still working else;
    rounds the most any ran, trials and windows in all; the knobs where all
    agree (else None); rates, budgets and first passes added up (the workers
    read side by side, each its share of a pass); ``settled_after`` the
    latest, once all settled. Each tuner's own under ``"workers"``."""
    values = list(summaries.values())

    def agreed(key: str) -> Any:
        first = values[0].get(key)
        return first if all(value.get(key) == first for value in values) else None

    def total(key: str) -> Any:
        numbers = [value.get(key) for value in values]
        return None if None in numbers else sum(numbers)

    settled = [value.get("settled_after") for value in values]
    waiting = [value["phase"] for value in values if not value.get("converged")]
    return {
        "phase": waiting[0] if waiting else "settled",
        "round": max(value.get("round", 0) for value in values),
        "trials": total("trials"), "windows": total("windows"), "converged": not waiting,
        "config": agreed("config"), "best_config": agreed("best_config"),
        "best_bytes_per_second": total("best_bytes_per_second"),
        "memory_budget": total("memory_budget"),
        "noise": max((value.get("noise") or 0.0) for value in values),
        "settled_after": None if None in settled else max(settled, key=_seconds),
        "first_pass_bytes": total("first_pass_bytes"), "last_decision": None,
        "workers": dict(summaries),
    }  # fmt: skip
