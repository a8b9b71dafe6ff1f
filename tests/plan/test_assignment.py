"""Sample assignment across ranks and DataLoader workers: exactly once, balanced."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastio.plan._assignment import Span, _spans, assign_samples, shard_order
from fastio.plan._participant import current_rank, current_worker

COUNTS = st.lists(st.integers(0, 60), min_size=1, max_size=12)


def delivered(counts, world_size, num_workers, **options) -> dict[int, collections.Counter]:
    """Per rank, how often each (shard, sample) is delivered."""
    per_rank = {}
    for rank in range(world_size):
        seen: collections.Counter = collections.Counter()
        for worker in range(max(num_workers, 1)):
            for span in assign_samples(
                counts, rank=rank, world_size=world_size, worker=worker,
                num_workers=num_workers, **options,
            ):  # fmt: skip
                assert 0 <= span.start < span.stop <= counts[span.shard]
                seen.update((span.shard, i) for i in range(span.start, span.stop))
        per_rank[rank] = seen
    return per_rank


@given(
    counts=COUNTS,
    world_size=st.integers(1, 3),
    num_workers=st.integers(0, 3),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 5),
)
@settings(max_examples=300, deadline=None)
def test_exact_every_sample_once_and_ranks_within_one(counts, world_size, num_workers, seed, epoch):
    per_rank = delivered(counts, world_size, num_workers, seed=seed, epoch=epoch)
    union = collections.Counter()
    for seen in per_rank.values():
        union.update(seen)
    everything = {(shard, i) for shard, n in enumerate(counts) for i in range(n)}
    assert set(union) == everything
    assert all(times == 1 for times in union.values())
    sizes = [sum(seen.values()) for seen in per_rank.values()]
    assert max(sizes) - min(sizes) <= 1


@given(counts=COUNTS, world_size=st.integers(1, 3), num_workers=st.integers(0, 3))
@settings(max_examples=200, deadline=None)
def test_drop_and_pad_give_every_rank_the_same_count(counts, world_size, num_workers):
    total = sum(counts)
    dropped = delivered(counts, world_size, num_workers, remainder="drop")
    assert {sum(seen.values()) for seen in dropped.values()} == {total // world_size}
    union = collections.Counter()
    for seen in dropped.values():
        union.update(seen)
    assert all(times == 1 for times in union.values())
    assert len(union) == total - total % world_size
    padded = delivered(counts, world_size, num_workers, remainder="pad")
    per_rank = -(-total // world_size)
    assert {sum(seen.values()) for seen in padded.values()} == {per_rank}
    union = collections.Counter()
    for seen in padded.values():
        union.update(seen)
    assert len(union) == total  # every sample at least once
    assert sum(union.values()) == per_rank * world_size


def spans_one_by_one(counts, order, start, stop, total) -> list[Span]:
    """The spans, shard by shard through each lap: what the bisection must give."""
    spans = []
    position = start
    while total and position < stop:
        base = position - position % total
        offset = base
        for shard in order:
            lo, hi = max(position, offset), min(stop, offset + counts[shard])
            if lo < hi:
                spans.append(Span(shard, lo - offset, hi - offset))
            offset += counts[shard]
        position = base + total
    return spans


@given(
    counts=st.lists(st.integers(0, 5), min_size=1, max_size=12),
    data=st.data(),
)
@settings(max_examples=300, deadline=None)
def test_the_spans_of_any_range_are_those_counted_shard_by_shard(counts, data) -> None:
    total = sum(counts)
    order = data.draw(st.permutations(range(len(counts))))
    start = data.draw(st.integers(0, 3 * total + 1))
    stop = data.draw(st.integers(start, 3 * total + 2))  # laps past the end: padding
    assert _spans(counts, order, start, stop, total) == spans_one_by_one(
        counts, order, start, stop, total
    )


def test_order_comes_from_seed_and_epoch() -> None:
    assert shard_order(50, seed=1, epoch=0) == shard_order(50, seed=1, epoch=0)
    assert shard_order(50, seed=1, epoch=0) != shard_order(50, seed=1, epoch=1)
    assert shard_order(50, seed=1, epoch=0) != shard_order(50, seed=2, epoch=0)
    assert sorted(shard_order(50, seed=1, epoch=3)) == list(range(50))
    assert shard_order(5, seed=9, epoch=9, shuffle=False) == [0, 1, 2, 3, 4]


def test_spans_are_contiguous_within_shards() -> None:
    spans = assign_samples([100, 100, 100], rank=1, world_size=2, shuffle=False)
    assert spans == [Span(1, 50, 100), Span(2, 0, 100)]
    assert sum(len(s) for s in spans) == 150


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="rank"):
        assign_samples([1], rank=2, world_size=2)
    with pytest.raises(ValueError, match="worker"):
        assign_samples([1], worker=3, num_workers=2)
    with pytest.raises(ValueError, match="remainder"):
        assign_samples([1], remainder="round")  # type: ignore[arg-type]


def test_rank_from_environment(monkeypatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert current_rank() == (2, 4)
    monkeypatch.delenv("RANK")
    assert current_rank() == (0, 1)
    assert current_worker() == (0, 1)  # not inside a DataLoader worker


def _streamed_by_middle_byte(sizes, by_number, shuffle, epoch, who) -> list[int]:
    """The shards of the epoch's order whose middle byte (or place, by number)
    falls in ``who``'s equal share, told shard by shard."""
    order = shard_order(len(sizes), shuffle.seed, epoch, shuffle.enabled)
    shares, me = who.world_size * max(who.num_workers, 1), who.rank * max(who.num_workers, 1)
    me += who.worker
    ordered = [0 if by_number else sizes[shard] for shard in order]
    total, mine, before = sum(ordered), [], 0
    for place, (shard, size) in enumerate(zip(order, ordered, strict=True)):
        if total == 0:
            owner = place * shares // len(order)
        else:
            owner = min(int((before + size / 2) * shares / total), shares - 1)
        before += size
        if owner == me:
            mine.append(shard)
    return mine


@given(
    sizes=st.lists(st.integers(0, 10**9), min_size=1, max_size=40),
    world_size=st.integers(1, 3),
    num_workers=st.integers(0, 3),
    by_number=st.booleans(),
    epoch=st.integers(0, 3),
)
@settings(max_examples=200, deadline=None)
def test_streamed_shards_go_to_one_participant_each(sizes, world_size, num_workers, by_number,
                                                    epoch) -> None:  # fmt: skip
    """A streamed first epoch hands out whole shards: each to exactly one
    participant; without sizes (remote objects not asked about yet), an equal
    number each, within one."""
    from fastio.plan._participant import Participant
    from fastio.plan._stream import stream_shards
    from fastio.spec._dataset import ShuffleSettings

    shuffle = ShuffleSettings(seed=7)
    got = []
    for rank in range(world_size):
        for worker in range(max(num_workers, 1)):
            who = Participant(rank, world_size, worker, num_workers)
            got.append(stream_shards(len(sizes), None if by_number else sizes, shuffle, epoch, who))
            assert got[-1] == _streamed_by_middle_byte(sizes, by_number, shuffle, epoch, who)
    assert sorted(shard for mine in got for shard in mine) == list(range(len(sizes)))
    if by_number:
        assert max(map(len, got)) - min(map(len, got)) <= 1
