"""Resume states: what one participant saved, and what a whole layout saved.

A participant's state is its epoch, its position in its part (samples passed)
and the plan it read (:func:`plan_fingerprint`: the dataset, seed, shuffle,
split and format settings), with the batch size and the layout it read in.
Because a part is a pure function of the plan, the states of *every*
participant of a layout (all ranks x all DataLoader workers) say exactly which
samples of the epoch were delivered: each part's delivery order, up to its
position. That is the global sample cursor elastic resume rests on: resuming
with another world size or number of workers, the samples of the epoch not
yet delivered, in the epoch's order, are split among the new participants as
a whole epoch would be (:func:`fastio.plan._assignment.assign_samples` with
``remaining``). A state saved during such a resumed epoch carries the merged
state it resumed from (its *history*), so saving and resuming can repeat.

The same layout resumes exactly (the same order as if never interrupted); any
other layout delivers every remaining sample exactly once, in another order.
A state of another plan is refused, naming the field that differs.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio.formats._layout import counts_of
from fastio.plan._assignment import shard_order
from fastio.plan._part import make_part
from fastio.plan._participant import Participant

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastio.formats._layout import Layout
    from fastio.spec._dataset import Remainder, ShuffleSettings

__all__ = [
    "STATE_VERSION",
    "check_plan",
    "collect_states",
    "merge_states",
    "plan_fingerprint",
    "remaining_samples",
]

STATE_VERSION = 2


def plan_fingerprint(
    counts: Sequence[int], format_name: str, options: dict[str, Any],
    shuffle: ShuffleSettings, remainder: Remainder,
) -> dict[str, Any]:  # fmt: skip
    """What a state's order depends on, as plain data (compared field by field)."""
    digest = hashlib.sha256(np.asarray(counts, np.int64).tobytes()).hexdigest()[:12]
    return {
        "dataset": f"{len(counts)} shards, {sum(counts)} samples, counts {digest}",
        "format": format_name, "format_options": options, "seed": shuffle.seed,
        "shuffle": shuffle.enabled, "shuffle_buffer": shuffle.buffer,
        "shuffle_shards": shuffle.shards, "remainder": remainder,
    }  # fmt: skip


def check_plan(saved: dict[str, Any], here: dict[str, Any]) -> None:
    """Raise ValueError naming the first field where ``saved`` differs from ``here``."""
    for field, mine in here.items():
        theirs = saved.get(field)
        if _plain(theirs) != _plain(mine):
            raise ValueError(
                f"state is of another dataset or order: {field} is {theirs!r} in the state and "
                f"{mine!r} here (resume with the settings it was saved with)"
            )


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def collect_states(state: Any) -> list[dict[str, Any]]:
    """The participant states in ``state``: one, a list of them, or saved loader
    states (torchdata's StatefulDataLoader keeps one per worker), nested anyhow."""
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "version" in value and "position" in value and "rank" in value:
                found.append(value)
                return
            for inner in value.values():
                walk(inner)
        elif isinstance(value, (list, tuple)):
            for inner in value:
                walk(inner)

    walk(state)
    return found


def _participant(state: dict[str, Any]) -> Participant:
    return Participant(int(state["rank"]), int(state["world_size"]), int(state["worker"]),
                       int(state["num_workers"]))  # fmt: skip


# What merged states keep of each participant's.
_MEMBER_KEYS = ("rank", "worker", "position", "steal", "stream", "streams")


def merge_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The states of every participant of one layout as one merged state.
    Raises ValueError when they disagree (epoch, plan, layout, history) or
    do not cover every rank and worker of their layout exactly once."""
    if not states:
        raise ValueError("no fastio dataset state found in what was given")
    first = states[0]
    for key in ("version", "epoch", "plan", "history", "world_size", "num_workers", "batch_size"):
        values = {json.dumps(_plain(state.get(key)), sort_keys=True) for state in states}
        if len(values) > 1:
            raise ValueError(f"the states disagree on {key}: they are not of one save of "
                             "one layout")  # fmt: skip
    world_size, num_workers = int(first["world_size"]), int(first["num_workers"])
    seen = sorted((int(s["rank"]), int(s["worker"])) for s in states)
    wanted = [(rank, worker) for rank in range(world_size) for worker in range(num_workers)]
    if seen != wanted:
        missing = sorted(set(wanted) - set(seen))
        raise ValueError(
            f"the states cover {len(seen)} of the {len(wanted)} (rank, worker) pairs of their "
            f"layout ({world_size} ranks x {num_workers} workers); missing {missing[:8]}, "
            "repeated or extra pairs are refused too: load every rank's saved state"
        )
    members = [{key: state[key] for key in _MEMBER_KEYS if key in state} for state in states]
    return {"version": first["version"], "epoch": first["epoch"], "plan": first["plan"],
            "history": first.get("history"), "world_size": world_size,
            "num_workers": num_workers, "batch_size": first.get("batch_size"),
            "members": members}  # fmt: skip


def remaining_samples(
    merged: dict[str, Any] | None,
    layouts: Sequence[Layout],
    shuffle: ShuffleSettings,
    remainder: Remainder,
) -> np.ndarray | None:
    """The global sample numbers of ``merged``'s epoch not yet delivered, in
    the epoch's order (None: no history, the whole epoch)."""
    if merged is None:
        return None
    counts = counts_of(layouts)
    bases = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    before = remaining_samples(merged.get("history"), layouts, shuffle, remainder)
    epoch = int(merged["epoch"])
    if before is None:
        order = shard_order(len(counts), shuffle.seed, epoch, shuffle.enabled)
        before = np.concatenate([np.arange(bases[s], bases[s + 1]) for s in order] or
                                [np.zeros(0, np.int64)])  # fmt: skip
    delivered = []
    for member in merged["members"]:
        who = Participant(int(member["rank"]), merged["world_size"], int(member["worker"]),
                          merged["num_workers"])  # fmt: skip

        def part_of(participant: Participant) -> Any:
            return make_part(layouts, shuffle, remainder, epoch, participant,
                             merged["batch_size"], before)  # fmt: skip

        steal = member.get("steal")
        if steal is None:
            delivered.append(part_of(who).sample_ids(bases)[: int(member["position"])])
            continue
        # balance="steal": whole units of any worker's part, and one begun.
        owners: dict[int, Any] = {}
        units: list[tuple[int, int, int | None]] = [(int(o), int(u), None)
                                                    for o, u in steal["done"]]  # fmt: skip
        if steal.get("current") is not None:
            current = [int(v) for v in steal["current"]]
            units.append((current[0], current[1], current[2]))
        for owner, unit, offset in units:
            if owner not in owners:
                owners[owner] = part_of(Participant(who.rank, who.world_size, owner,
                                                    who.num_workers))  # fmt: skip
            ids = owners[owner].window_ids(unit, bases)
            delivered.append(ids if offset is None else ids[:offset])
    taken = np.concatenate(delivered) if delivered else np.zeros(0, np.int64)
    left = ~np.isin(before, taken)
    if remainder == "drop":  # the samples the split dropped were in no part: not left either
        workers = max(1, int(merged["num_workers"]))
        assigned = [
            make_part(
                layouts,
                shuffle,
                remainder,
                epoch,
                Participant(rank, merged["world_size"], worker, workers),
                merged["batch_size"],
                before,
            ).sample_ids(bases)
            for rank in range(int(merged["world_size"]))
            for worker in range(workers)
        ]
        left &= np.isin(before, np.concatenate(assigned))  # fmt: skip
    result: np.ndarray = before[left]
    return result
