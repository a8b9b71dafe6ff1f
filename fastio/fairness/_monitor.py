"""The fairness monitor of one dataset: publishers in every process, judging
by whichever process closes a window.

The monitor observes and decides; it never runs the dataset's loop. Every
process that iterates the dataset (the main process, or each DataLoader worker)
gets an observer from :meth:`FairnessMonitor.observe`, which the dataset's loop
tells how busy it was: every tenth of a window its counters go to its slot of
the board (:mod:`fastio.fairness._publish`, :mod:`fastio.fairness._board`). The
first process to notice that a window has ended judges it
(:mod:`fastio.fairness._verdict`) under the board's lock: flags raised and
cleared go to the log and the callback, new budget shares to the slots, which
each worker gives its own reader as a share of ``outstanding_requests``. With
``balance="steal"``, :meth:`FairnessMonitor.claims` decides which units of work
each worker reads.
Ranks compare through a :class:`~fastio.fairness._exchange.FileExchange`.
"""

from __future__ import annotations

import logging
import math
import os
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio.fairness import _board as b
from fastio.fairness._exchange import job_exchange
from fastio.fairness._publish import Publisher
from fastio.shared._mapped import remove_owned, shared_path
from fastio.spec._fairness import FairnessSettings

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from fastio.fairness._steal import StealClaims
    from fastio.plan._participant import Participant
    from fastio.reader._reader import Reader

__all__ = ["FairnessMonitor"]

log = logging.getLogger("fastio.fairness")


class FairnessMonitor:
    """Per-worker and per-rank delivery of one dataset, its verdicts and its
    mitigation (see :class:`FairnessSettings`). Made by :class:`fastio.Dataset`;
    read it through ``dataset.stats()["fairness"]`` or :meth:`report`."""

    def __init__(
        self,
        settings: FairnessSettings | bool | dict[str, Any] | None = None,
        urls: Iterable[str] = (),
        seed: int = 0,
    ) -> None:
        self.settings = FairnessSettings.coerce(settings)
        self._owner = os.getpid()
        self._path = shared_path(b.KIND)
        self._exchange = job_exchange(urls, seed, self.settings.exchange_dir)
        self._rank = (0, 1)
        self._board: b.Board | None = None
        self._iterations = 0  # with steal, in this process (names the claim table's generation)
        self._closes = 0  # close() calls: an iteration begun before one takes no board after it
        self._finalizer = weakref.finalize(self, _remove_files, self._path, self._owner)

    # ---- processes ---------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        # A spawned worker finds the board by name; the owner alone removes it.
        return {"settings": self.settings, "_owner": self._owner, "_path": self._path,
                "_exchange": self._exchange, "_rank": self._rank}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._board = None
        self._iterations = 0
        self._closes = 0
        self._finalizer = weakref.finalize(self, _remove_files, self._path, self._owner)

    def _get_board(self) -> b.Board:
        if self._board is None:
            self._board = b.Board(self._path)
        return self._board

    def _learn_rank(self, board: b.Board) -> None:
        """The rank as the workers recorded it (the main process of a DataLoader
        with workers never iterates itself)."""
        if board.header[b.WORLD_SIZE] > 0:
            self._rank = (int(board.header[b.RANK]), int(board.header[b.WORLD_SIZE]))

    def close(self) -> None:
        """Unmap the board; the owner also removes it and its rank's summary.
        The monitor stays usable: the next iteration makes a fresh board (one
        begun before, still open, publishes nowhere)."""
        self._closes += 1
        if self._board is not None:
            self._learn_rank(self._board)
            self._board.close()
            self._board = None
        if os.getpid() == self._owner:
            _remove_files(self._path, self._owner)
            self._exchange.remove(self._rank[0])

    # ---- observing ---------------------------------------------------------------------

    def observe(
        self,
        participant: Participant,
        epoch: int,
        assigned: int,
        reader: Reader,
        delivered: Callable[[], int],
    ) -> Publisher | None:
        """The observer of one iteration of ``epoch`` by ``participant`` in this
        process, which is to deliver ``assigned`` samples through ``reader``
        (``delivered()`` counts those delivered so far); None when monitoring
        is off. Raises ValueError past the DataLoader workers a board holds."""
        if not self.settings.enabled:
            return None
        who = participant
        if who.worker >= b.MAX_WORKERS:
            raise ValueError(
                f"the fairness monitor follows up to {b.MAX_WORKERS} DataLoader workers per rank, "
                f"not {who.num_workers}; pass fairness=False to the dataset"
            )
        self._rank = (who.rank, who.world_size)
        closes = self._closes

        def taken() -> tuple[np.ndarray, Callable[[], None]] | None:
            if self._closes != closes:  # closed since: its board (and file) are gone
                return None
            board = self._get_board()
            board.header[b.RANK], board.header[b.WORLD_SIZE] = who.rank, who.world_size
            slot = board.slots[who.worker]
            slot[b.ASKED] += assigned
            return slot, lambda: self._judge_open(board)

        return Publisher(taken, reader, delivered, self.settings.window_seconds / 10,
                         seed=who.worker)  # fmt: skip

    def _judge_open(self, board: b.Board) -> None:
        """Close the window if it is due, unless the board was closed meanwhile
        (an iteration abandoned and collected after :meth:`close`)."""
        if self._board is board:
            self._maybe_close_window(board)

    # ---- balance="steal" ----------------------------------------------------------------

    def steals(self, participant: Participant) -> bool:
        """Whether ``participant`` shares its rank's work with ``balance="steal"``."""
        settings = self.settings
        return settings.mitigate and settings.balance == "steal" and participant.num_workers > 1

    def claims(
        self,
        participant: Participant,
        epoch: int,
        unit_samples: Sequence[Sequence[int]],
        done: Sequence[tuple[int, int]],
        current: tuple[int, int, int] | None,
        resumed: bool,
    ) -> StealClaims:
        """The segments ``participant`` is to read this iteration (see
        :class:`StealClaims`): ``unit_samples[w]`` are the sample counts of
        worker ``w``'s units, ``done``/``current`` what a resumed state finished."""
        from fastio.fairness._steal import StealClaims  # balance="steal" only

        self._iterations += 1
        slots = self._get_board().slots if self.settings.enabled else None
        return StealClaims(_claims_path(self._path), participant, epoch, self._iterations,
                           unit_samples, done, current, resumed, slots)  # fmt: skip

    # ---- judging -----------------------------------------------------------------------

    def _maybe_close_window(self, board: b.Board) -> None:
        header, now = board.header, time.monotonic()
        if header[b.WINDOW_START] == 0.0:
            header[b.WINDOW_START] = now
            return
        if now - header[b.WINDOW_START] < self.settings.window_seconds:
            return
        try:
            with board.exclusive() as mine:
                span = now - float(header[b.WINDOW_START])
                if not mine or span < self.settings.window_seconds:
                    return  # another process is closing it, or just did
                try:
                    self._close_window(board, span)
                except Exception:  # a failing callback or exchange must not stop the data
                    log.exception("fastio: the fairness monitor failed to judge a window")
                header[b.WINDOW_START] = now
        except FileNotFoundError:
            # The board is gone: its owner closed it, or died and a worker
            # swept it. No one reads a verdict of it any more.
            return

    def _close_window(self, board: b.Board, span: float) -> None:
        # Imported at the first window's end, not before the first sample.
        from fastio.fairness._verdict import BUSY_FLOOR, judge, shift_budget, update_flags

        settings, slots, header = self.settings, board.slots, board.header
        samples = slots[:, b.SAMPLES] - slots[:, b.LAST_SAMPLES]
        busy = slots[:, b.BUSY] - slots[:, b.LAST_BUSY]
        wait = slots[:, b.WAIT] - slots[:, b.LAST_WAIT]
        verdict = judge(samples, busy, wait, _assigned(slots), span, settings)
        # A worker's first window holds its start (process, reader, first reads):
        # it counts toward rates and the timeline, never toward a flag.
        verdict.starved[slots[:, b.JUDGED] == 0] = False
        raised, cleared = update_flags(slots[:, b.FLAGGED], slots[:, b.STARVED_STREAK],
                                       slots[:, b.GOOD_STREAK], verdict, settings)  # fmt: skip
        active = verdict.active
        slots[active, b.RATE] = verdict.rate[active]
        slots[active, b.RELATIVE_RATE] = verdict.relative_rate[active]
        slots[active, b.READINESS] = verdict.readiness[active]
        slots[active, b.JUDGED] += 1
        if settings.mitigate and settings.balance == "budget":
            weights = np.where(slots[:, b.WEIGHT] > 0, slots[:, b.WEIGHT], 1.0)
            slots[:, b.WEIGHT] = shift_budget(weights, verdict, settings)
        slots[:, b.LAST_SAMPLES] = slots[:, b.SAMPLES]
        slots[:, b.LAST_BUSY] = slots[:, b.BUSY]
        slots[:, b.LAST_WAIT] = slots[:, b.WAIT]
        index = int(header[b.WINDOW_INDEX])
        if active.any():
            header[b.JAIN] = verdict.jain
        row = board.timeline[index % b.TIMELINE]
        row[b.T_TIME], row[b.T_JAIN] = time.time(), verdict.jain
        per_worker = row[2:].reshape(b.MAX_WORKERS, b.T_PER_WORKER)
        per_worker[:, b.T_RATE] = verdict.rate
        per_worker[:, b.T_READINESS] = verdict.readiness
        per_worker[:, b.T_FLAGGED] = slots[:, b.FLAGGED]
        per_worker[:, b.T_OUTSTANDING] = slots[:, b.OUTSTANDING]
        header[b.WINDOW_INDEX] = index + 1
        rank, world_size = self._rank
        for worker in raised + cleared:
            self._notify("worker", rank, worker, worker in raised, slots[worker, b.RELATIVE_RATE],
                         slots[worker, b.READINESS], index)  # fmt: skip
        if active.any():
            own = board.ranks_for(world_size)[rank] if world_size > 1 else None
            floor = BUSY_FLOOR * span
            rates = samples[active] / np.maximum(busy[active], floor)
            if own is not None:
                own[b.R_RATE] = float(rates.sum())
                own[b.R_READINESS] = 1.0 - float(wait[active].sum() / busy[active].sum())
        if world_size > 1:
            self._judge_ranks(board, index)

    def _rank_summary(self, board: b.Board) -> dict[str, Any]:
        slots, rank = board.slots, self._rank[0]
        used = slots[:, b.PID] != 0
        own = board.ranks_for(self._rank[1])[rank]
        rate, readiness = float(own[b.R_RATE]), float(own[b.R_READINESS])
        busy = float(slots[used, b.BUSY].sum())
        if rate == 0.0 and busy > 0:  # no window of this rank judged yet: the totals so far
            rate = float(slots[used, b.SAMPLES].sum()) / busy
            readiness = 1.0 - float(slots[used, b.WAIT].sum()) / busy
        return {
            "pid": os.getpid(), "window": int(board.header[b.WINDOW_INDEX]),
            "samples": int(slots[used, b.SAMPLES].sum()),
            "bytes": int(slots[used, b.BYTES].sum()),
            "asked": int(_assigned(slots)[used].sum()),
            "workers": int(used.sum()),
            "rate": rate, "readiness": readiness,
            "starved_workers": [int(w) for w in np.flatnonzero(slots[:, b.FLAGGED])],
        }  # fmt: skip

    def _judge_ranks(self, board: b.Board, index: int) -> None:
        from fastio.fairness._verdict import judge, update_flags

        rank, world_size = self._rank
        self._exchange.publish(rank, self._rank_summary(board))
        seen = self._exchange.gather(world_size, self._max_age())
        table = board.ranks_for(world_size)[:world_size]
        fresh = np.zeros(world_size, bool)
        for other, summary in seen.items():
            # A rank whose window has not advanced since the last look is idle.
            fresh[other] = summary["window"] != table[other, b.R_WINDOW] or other == rank
            table[other, b.R_WINDOW] = summary["window"]
            table[other, b.R_SAMPLES] = summary["samples"]
            table[other, b.R_RATE] = summary["rate"]
            table[other, b.R_READINESS] = summary["readiness"]
        asked = np.array([seen.get(r, {}).get("asked", 0) for r in range(world_size)], float)
        verdict = judge(table[:, b.R_RATE] * fresh, fresh.astype(float),
                        (1.0 - table[:, b.R_READINESS]) * fresh, asked, 1.0,
                        self.settings)  # fmt: skip
        raised, cleared = update_flags(
            table[:, b.R_FLAGGED], table[:, b.R_STARVED_STREAK], table[:, b.R_GOOD_STREAK],
            verdict, self.settings,
        )  # fmt: skip
        table[fresh, b.R_RELATIVE_RATE] = verdict.relative_rate[fresh]
        if fresh.sum() >= 2:
            board.header[b.RANK_JAIN] = verdict.jain
        for other in raised + cleared:
            self._notify("rank", other, None, other in raised, table[other, b.R_RELATIVE_RATE],
                         table[other, b.R_READINESS], index)  # fmt: skip

    def _max_age(self) -> float:
        return max(5 * self.settings.window_seconds, 5.0)

    def _notify(self, kind: str, rank: int, worker: int | None, starved: bool,
                relative_rate: float, readiness: float, window: int) -> None:  # fmt: skip
        who = f"rank {rank}" if worker is None else f"DataLoader worker {worker} of rank {rank}"
        if starved:
            log.warning("fastio: %s is starved of I/O: %.0f%% of its peers' delivery rate, data "
                        "ready %.0f%% of the time (window %d)", who, 100 * relative_rate,
                        100 * readiness, window)  # fmt: skip
        else:
            log.warning("fastio: %s is no longer starved of I/O (window %d)", who, window)
        callback = self.settings.callback
        if callback is not None:
            callback({"event": "starved" if starved else "recovered", "kind": kind,
                      "rank": rank, "worker": worker, "window": window,
                      "relative_rate": _number(relative_rate), "readiness": _number(readiness),
                      "time": time.time()})  # fmt: skip

    # ---- reporting ---------------------------------------------------------------------

    def report(self, timeline: bool = False) -> dict[str, Any]:
        """What the monitor knows now: per worker of this rank and per rank,
        counters, last window's rate and readiness, flags, outstanding requests;
        with ``timeline``, the last windows' per-worker values too."""
        settings = self.settings
        if not settings.enabled:
            return {"enabled": False}
        board = self._get_board()
        self._maybe_close_window(board)
        slots, header = board.slots, board.header
        self._learn_rank(board)
        rank, world_size = self._rank
        workers = []
        for worker in np.flatnonzero(slots[:, b.PID]):
            slot = slots[worker]
            histogram = tuple(int(v) for v in slot[b.LATENCY : b.SLOT])
            workers.append({
                "worker": int(worker), "pid": int(slot[b.PID]), "active": bool(slot[b.ACTIVE]),
                "samples": int(slot[b.SAMPLES]), "bytes": int(slot[b.BYTES]),
                "assigned": int(_assigned(slots)[worker]), "requests": int(slot[b.REQUESTS]),
                "units_stolen": int(slot[b.UNITS_STOLEN]),
                "samples_stolen": int(slot[b.SAMPLES_STOLEN]),
                "samples_given": int(slot[b.SAMPLES_GIVEN]),
                "busy_seconds": float(slot[b.BUSY]), "wait_seconds": float(slot[b.WAIT]),
                "readiness_total": _number(1.0 - slot[b.WAIT] / slot[b.BUSY])
                if slot[b.BUSY] > 0 else None,
                "windows_judged": int(slot[b.JUDGED]),
                **_last_window(slot), "starved": bool(slot[b.FLAGGED]),
                "outstanding_requests": int(slot[b.OUTSTANDING]),
                "share": float(slot[b.WEIGHT]) or 1.0,
                "inflight_bytes": int(slot[b.INFLIGHT_BYTES]),
                **{f"latency_{name}_seconds": _percentile(histogram, q)
                   for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))},
            })  # fmt: skip
        result: dict[str, Any] = {
            "enabled": True, "mitigate": settings.mitigate, "balance": settings.balance,
            "window_seconds": settings.window_seconds, "windows": int(header[b.WINDOW_INDEX]),
            "jain_index": float(header[b.JAIN]) if header[b.WINDOW_INDEX] else None,
            "rank": rank, "world_size": world_size, "workers": workers,
            "samples": sum(w["samples"] for w in workers),
            "starved_workers": [w["worker"] for w in workers if w["starved"]],
        }  # fmt: skip
        if world_size > 1:
            result |= self._ranks_report(board)
        if timeline:
            result["timeline"] = self._timeline(board)
        return result

    def rank_summary(self) -> dict[str, Any]:
        """This rank's totals, as it would publish them to its peers (what
        :func:`fastio.fairness.all_gather_report` gathers)."""
        board = self._get_board()
        self._learn_rank(board)  # first: a window closed here must count for this rank
        self._maybe_close_window(board)
        return {"rank": self._rank[0], **self._rank_summary(board)}

    def _ranks_report(self, board: b.Board) -> dict[str, Any]:
        rank, world_size = self._rank
        self._exchange.publish(rank, self._rank_summary(board))
        seen = self._exchange.gather(world_size, self._max_age())
        table = board.ranks_for(world_size)
        ranks = [{
            "rank": other, "samples": summary["samples"], "bytes": summary["bytes"],
            "assigned": summary["asked"], "workers": summary["workers"],
            "rate": summary["rate"], "readiness": summary["readiness"],
            "relative_rate": _number(table[other, b.R_RELATIVE_RATE]),
            "starved": bool(table[other, b.R_FLAGGED]),
            "starved_workers": summary["starved_workers"],
        } for other, summary in sorted(seen.items())]  # fmt: skip
        return {
            "ranks": ranks,
            "rank_jain_index": _number(board.header[b.RANK_JAIN]),
            "starved_ranks": [r["rank"] for r in ranks if r["starved"]],
            "samples_all_ranks": sum(r["samples"] for r in ranks),
        }

    def _timeline(self, board: b.Board) -> list[dict[str, Any]]:
        count = int(board.header[b.WINDOW_INDEX])
        used = np.flatnonzero(board.slots[:, b.PID])
        rows = []
        for index in range(max(0, count - b.TIMELINE), count):
            row = board.timeline[index % b.TIMELINE]
            per_worker = row[2:].reshape(b.MAX_WORKERS, b.T_PER_WORKER)
            rows.append({
                "window": index, "time": float(row[b.T_TIME]), "jain_index": float(row[b.T_JAIN]),
                "workers": [{
                    "worker": int(w), "rate": _number(per_worker[w, b.T_RATE]),
                    "readiness": _number(per_worker[w, b.T_READINESS]),
                    "starved": bool(per_worker[w, b.T_FLAGGED]),
                    "outstanding_requests": int(per_worker[w, b.T_OUTSTANDING]),
                } for w in used],
            })  # fmt: skip
        return rows


def _assigned(slots: np.ndarray) -> np.ndarray:
    """Samples each worker was to deliver: its part, plus what it took from
    others' parts, minus what others took from its part (balance="steal")."""
    result: np.ndarray = slots[:, b.ASKED] + slots[:, b.SAMPLES_STOLEN] - slots[:, b.SAMPLES_GIVEN]
    return result


def _claims_path(board: str) -> str:
    return f"{board}.claims"


def _remove_files(path: str, owner: int) -> None:
    """The board and its claim table, in the owner process only."""
    remove_owned(path, owner)
    remove_owned(_claims_path(path), owner)


def _last_window(slot: np.ndarray) -> dict[str, float | None]:
    """The slot's values of the last window it was judged in (None before any)."""
    judged = slot[b.JUDGED] > 0
    return {
        name: _number(slot[field]) if judged else None
        for name, field in (
            ("rate", b.RATE),
            ("relative_rate", b.RELATIVE_RATE),
            ("readiness", b.READINESS),
        )
    }


def _number(value: float) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def _percentile(histogram: tuple[int, ...], q: float) -> float | None:
    from fastio.reader._stats import ReaderStats

    stats = ReaderStats("", 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0, 0, 0, histogram)
    return _number(stats.latency_percentile(q))
