"""Windows: how a part's spans are cut into runs read together."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastio import _native
from fastio._native import run_shards, whole_reads, whole_spans
from fastio.dataset._reads import Read
from fastio.formats._layout import Layout, sample_bounds
from fastio.plan._assignment import Span
from fastio.plan._windows import (
    FIRST_WINDOW,
    Run,
    Window,
    _mixed_windows,
    _per_sample,
    _stored_windows,
    make_windows,
    permutation,
)


@st.composite
def _layouts(draw: st.DrawFn) -> Layout:
    """A shard laid out per sample (sizes from 0 bytes up), or in units of
    several samples (row groups)."""
    sizes = draw(st.lists(st.integers(0, 5000), max_size=30))
    count = len(sizes)
    ends = np.cumsum(sizes, dtype=np.int64)
    starts = ends - np.asarray(sizes, np.int64)
    if draw(st.booleans()):
        return Layout("s", count, int(ends[-1]) if count else 0, sample_bounds(count),
                      ends - starts, starts, ends)  # fmt: skip
    cuts = sorted(draw(st.sets(st.integers(1, max(count - 1, 1)), max_size=5)) if count > 1
                  else [])  # fmt: skip
    bounds = np.array([0, *cuts, count] if count else [0], np.int64)
    unit_bytes = np.array([int(ends[b - 1] - starts[a]) if b > a else 0
                           for a, b in itertools.pairwise(bounds)], np.int64)  # fmt: skip
    return Layout("s", count, int(unit_bytes.sum()), bounds, unit_bytes)


@st.composite
def _spans(draw: st.DrawFn, layouts: list[Layout]) -> list[Span]:
    spans = []
    for shard in draw(st.permutations(range(len(layouts)))):
        count = layouts[shard].count
        start = draw(st.integers(0, count))
        spans.append(Span(shard, start, draw(st.integers(start, count))))
    return spans


@given(st.lists(_layouts(), min_size=1, max_size=6).flatmap(
    lambda layouts: st.tuples(st.just(layouts), _spans(layouts))),
    st.integers(1, 1 << 17))  # fmt: skip
def test_stored_order_windows_are_the_mixed_cut_of_one_span(case, budget: int) -> None:
    """Cutting spans one after another (stored order) makes the very windows
    the general cut makes when it mixes one span at a time."""
    layouts, spans = case
    stored = _stored_windows(spans, layouts, budget)
    assert stored == _mixed_windows(spans, layouts, budget, 1)
    assert make_windows(spans, layouts, budget, 1) == stored
    assert sum(window.count for window in stored) == sum(s.stop - s.start for s in spans)


@st.composite
def _per_sample_layouts(draw: st.DrawFn) -> Layout:
    """A shard laid out per sample (sizes from 0 bytes up, so that runs of
    empty samples share a start), its offsets read-only or not (an index
    file's arrays are views of its bytes)."""
    # Powers of two too: runs that end exactly at a budget (64 KiB doubling,
    # split over 1, 2, 4 or 8 spans) are where a cut could be off by a sample.
    size = st.one_of(st.integers(0, 70_000), st.sampled_from([0, 1, 8192, 16_384, 32_768]))
    sizes = draw(st.lists(size, max_size=40))
    count = len(sizes)
    ends = np.cumsum(sizes, dtype=np.int64)
    starts = ends - np.asarray(sizes, np.int64)
    if draw(st.booleans()):
        starts.flags.writeable = ends.flags.writeable = False
    return Layout("s", count, int(ends[-1]) if count else 0, sample_bounds(count),
                  ends - starts, starts, ends)  # fmt: skip


@given(st.lists(_per_sample_layouts(), min_size=1, max_size=12).flatmap(
    lambda layouts: st.tuples(st.just(layouts), _spans(layouts))),
    st.one_of(st.integers(1, 1 << 19), st.sampled_from([1 << 16, 1 << 17, 1 << 18])),
    st.integers(1, 10))  # fmt: skip
def test_the_native_cut_makes_the_windows_the_python_cut_makes(case, budget: int, mix: int
                                                               ) -> None:  # fmt: skip
    """Where every shard is laid out per sample, windows are cut in native
    code: the same runs, counts and bytes as the Python cut, from the ramp's
    first windows (a sample per span, then 64 KiB doubling) to the budget."""
    layouts, spans = case
    native = make_windows(spans, layouts, budget, mix)
    python = (_stored_windows(spans, layouts, budget) if mix == 1
              else _mixed_windows(spans, layouts, budget, mix))  # fmt: skip
    assert native == python
    assert all(type(window) is Window and all(type(run) is Run for run in window.runs)
               for window in native)  # fmt: skip


def test_the_native_cut_is_taken_only_where_every_shard_is_laid_out_per_sample() -> None:
    """A shard in units (row groups) among per-sample ones: the Python cut,
    and the same windows either way."""
    sizes = [5_000, 70_000, 0, 12_000]
    ends = np.cumsum(sizes, dtype=np.int64)
    starts = ends - np.asarray(sizes, np.int64)
    per_sample = Layout("a", 4, int(ends[-1]), sample_bounds(4), ends - starts, starts, ends)
    units = Layout("b", 4, int(ends[-1]), np.array([0, 2, 4], np.int64),
                   np.array([75_000, 12_000], np.int64))  # fmt: skip
    spans = [Span(0, 0, 4), Span(1, 0, 4)]
    assert _per_sample(spans, [per_sample, per_sample]) is not None
    assert _per_sample(spans, [per_sample, units]) is None
    assert make_windows(spans, [per_sample, units], 30_000, 2) == _mixed_windows(
        spans, [per_sample, units], 30_000, 2
    )


def test_sample_ranges_not_of_contiguous_int64_are_cut_in_python() -> None:
    """A format's layout may hold its sample ranges in other arrays (int32,
    or every other element of one): the native cut refuses them and the
    Python cut makes the same windows as from contiguous int64 ones."""
    sizes = [5_000, 70_000, 0, 12_000, 300]
    ends = np.cumsum(sizes, dtype=np.int64)
    starts = ends - np.asarray(sizes, np.int64)
    plain = Layout("a", 5, int(ends[-1]), sample_bounds(5), None, starts, ends)
    spans = [Span(0, 0, 5), Span(1, 1, 4)]
    expected = make_windows(spans, [plain, plain], 30_000, 2)
    interleaved = np.empty((5, 2), np.int64)
    interleaved[:, 0], interleaved[:, 1] = starts, ends
    for first, last in [(starts.astype(np.int32), ends.astype(np.int32)),
                        (starts.astype(np.uint64), ends.astype(np.uint64)),
                        (starts.astype(">i8"), ends.astype(">i8")),
                        (starts.astype(np.float64), ends.astype(np.float64)),
                        (interleaved[:, 0], interleaved[:, 1])]:  # fmt: skip
        other = Layout("a", 5, int(ends[-1]), sample_bounds(5), None, first, last)
        assert make_windows(spans, [other, other], 30_000, 2) == expected
        assert make_windows(spans, [plain, other], 30_000, 2) == expected
        with pytest.raises(ValueError, match=r"int64|contiguous"):  # the native cut refuses
            _native.cut_windows([Span(0, 0, 5)], [first], [ends], 30_000, 2, FIRST_WINDOW)


def test_spans_windows_and_runs_compare_show_and_pickle_by_value() -> None:
    """A plan's windows and runs (native: thousands are made before a first
    sample) behave as the dataclasses they were: equal by value, unhashable,
    read-only, shown with their fields, pickled whole. A run holds no object,
    so the collector never visits the thousands a plan holds."""
    import gc
    import pickle

    run = Run(3, 10, 14, 2)
    window = Window((Run(1, 0, 2, 0), run), 6, 600)
    assert (run.shard, run.start, run.stop, run.base, len(run)) == (3, 10, 14, 2, 4)
    assert run == Run(3, 10, 14, 2)
    assert run != Run(3, 10, 14, 0)
    assert run != (3, 10, 14, 2)
    assert window == Window((Run(1, 0, 2, 0), Run(3, 10, 14, 2)), 6, 600)
    assert window != Window((Run(1, 0, 2, 0), run), 6, 601)
    assert repr(run) == "Run(shard=3, start=10, stop=14, base=2)"
    assert repr(window) == f"Window(runs=(Run(shard=1, start=0, stop=2, base=0), {run!r}), " \
        "count=6, nbytes=600)"  # fmt: skip
    assert pickle.loads(pickle.dumps(window)) == window
    # A read of part of a run: where in the window its first sample is.
    read = Read(4, run, 12, 14)
    assert (read.window, read.run, read.start, read.stop, read.at) == (4, run, 12, 14, 4)
    assert read == Read(4, Run(3, 10, 14, 2), 12, 14)
    assert read != Read(4, run, 11, 14)
    assert repr(read) == f"Read(window=4, run={run!r}, start=12, stop=14)"
    assert pickle.loads(pickle.dumps(read)) == read
    with pytest.raises(TypeError):
        Read(0, None, 0, 1)  # type: ignore[arg-type]
    # The spans a plan is cut from, as the same.
    span = Span(2, 5, 9)
    assert (span.shard, span.start, span.stop, len(span)) == (2, 5, 9, 4)
    assert span == Span(2, 5, 9)
    assert span != Span(2, 5, 8)
    assert span != (2, 5, 9)
    assert repr(span) == "Span(shard=2, start=5, stop=9)"
    assert pickle.loads(pickle.dumps(span)) == span
    for value in (run, span):  # values: unhashable, read-only, untracked by the collector
        with pytest.raises(TypeError, match="unhashable"):
            hash(value)
        with pytest.raises(AttributeError):
            value.start = 0  # type: ignore[misc]
        assert not gc.is_tracked(value)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3))))
def test_whole_spans_are_a_span_of_each_shard_with_samples(shards) -> None:
    """Planning a pass makes a span of each shard between its first and last
    (done natively: thousands before a first sample)."""
    numbers, counts = [shard for shard, _ in shards], [count for _, count in shards]
    expected = [Span(shard, 0, count) for shard, count in shards if count]
    assert whole_spans(numbers, counts) == expected
    with pytest.raises(ValueError, match="as many"):
        whole_spans(numbers, [*counts, 1])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 50), st.integers(1, 9)),
                         max_size=4), max_size=8), st.integers(0, 9))  # fmt: skip
def test_the_whole_reads_of_windows_are_one_a_run_in_order(cut, first) -> None:
    """Planning a pass reads each run of each window from ``first`` on, whole,
    in window order (done natively: thousands before a first sample)."""
    windows = []
    for runs in cut:
        made = tuple(Run(shard, start, start + length, 0) for shard, start, length in runs)
        windows.append(Window(made, sum(map(len, made)), 0))
    expected = [Read(index, run, run.start, run.stop) for index in range(first, len(windows))
                for run in windows[index].runs]  # fmt: skip
    assert whole_reads(windows, first) == expected


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), max_size=4), max_size=8))
def test_a_part_reads_the_shards_of_its_runs_in_order_a_repeat_once(cut) -> None:
    """The shards a pass reads (what the cache and the remote checks are told
    ahead), from its windows' runs: a shard whose runs follow each other, in
    one window or across two, once (done natively: thousands before a first
    sample)."""
    windows = [Window(tuple(Run(shard, 0, 1, 0) for shard in shards), len(shards), 0)
               for shards in cut]  # fmt: skip
    read = [shard for shards in cut for shard in shards]
    expected = [shard for i, shard in enumerate(read) if i == 0 or read[i - 1] != shard]
    assert run_shards(windows) == expected


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=0, max_size=7).flatmap(
        lambda lengths: st.tuples(
            st.just(lengths), st.permutations(range(sum(lengths))), st.integers(0, sum(lengths))
        )
    )
)
def test_a_first_window_is_read_in_the_order_its_samples_are_first_needed(case) -> None:
    """A window's reads (each a run of its positions) ordered by the first
    position of each that its delivery order (from ``skip`` on) comes to;
    reads holding none of those last, in the order they came."""
    lengths, order, skip = case
    count = sum(lengths)
    reads, at = [], 0
    for shard, length in enumerate(lengths):
        # A read of samples 2.. of a run (a resumed window reads part of a run).
        run = Run(shard, 2, 2 + length, at)
        reads.append(Read(0, run, 2, 2 + length))
        at += length
    sequence = np.array(order[skip:], np.int64)

    def expected(given: list[Read]) -> list[Read]:
        holder = {place: index for index, read in enumerate(given)
                  for place in range(read.at, read.at + len(read.run))}  # fmt: skip
        needed = list(dict.fromkeys(holder[position] for position in sequence.tolist()))
        rest = [index for index in range(len(given)) if index not in needed]
        return [given[index] for index in needed + rest]

    assert _native.by_first_need(reads, sequence, count) == expected(reads)
    assert _native.by_first_need(reads[::-1], sequence, count) == expected(reads[::-1])


@given(st.lists(st.integers(0, 6), max_size=30), st.integers(0, 3))
def test_reads_are_counted_by_window_as_bincount_counts_them(windows, more) -> None:
    """How many reads each window has (natively: a part may plan thousands),
    and a read of a window past those counted refused."""
    run = Run(0, 0, 1, 0)
    reads = [Read(window, run, 0, 1) for window in windows]
    count = (max(windows) + 1 if windows else 0) + more
    expected = np.bincount(np.array(windows, np.int64), minlength=count).tolist()
    assert list(_native.reads_per_window(reads, count)) == expected
    if windows:
        with pytest.raises(IndexError):
            _native.reads_per_window(reads, max(windows))


def test_a_permutation_is_drawn_from_its_key_alone() -> None:
    order = permutation(1000, seed=7, epoch=2, rank=1, worker=0, window=3)
    assert order.dtype == np.int64
    assert sorted(order.tolist()) == list(range(1000))
    assert np.array_equal(order, permutation(1000, seed=7, epoch=2, rank=1, worker=0, window=3))
    for changed in ({"seed": 8}, {"epoch": 3}, {"rank": 0}, {"worker": 1}, {"window": 4}):
        key = {"seed": 7, "epoch": 2, "rank": 1, "worker": 0, "window": 3, **changed}
        assert not np.array_equal(order, permutation(1000, **key)), changed
    # Seeds past 64 bits count in full: two that share their low 64 bits differ.
    assert not np.array_equal(permutation(50, 1 << 70, 0, 0, 0, 0),
                              permutation(50, (1 << 70) | (1 << 71), 0, 0, 0, 0))  # fmt: skip
    # A key given as numpy integers draws the order the same key of ints does.
    assert np.array_equal(order, permutation(1000, *map(np.int64, (7, 2, 1, 0, 3))))
    assert permutation(0, 1, 0, 0, 0, 0).tolist() == []
    assert permutation(1, 1, 0, 0, 0, 0).tolist() == [0]


def test_permutations_are_uniform() -> None:
    """Each of the 24 orders of 4 items comes up about as often over 24,000
    keys (a chi-square test at p = 0.001: 23 degrees of freedom, 49.7), and
    each item lands in each place as often."""
    counts: dict[tuple[int, ...], int] = {}
    places = np.zeros((4, 4), np.int64)
    for seed in range(24_000):
        order = permutation(4, seed, 0, 0, 0, 0)
        counts[tuple(order.tolist())] = counts.get(tuple(order.tolist()), 0) + 1
        places[order, np.arange(4)] += 1
    assert len(counts) == 24
    chi_square = sum((seen - 1000) ** 2 / 1000 for seen in counts.values())
    assert chi_square < 49.7, counts
    assert np.all(np.abs(places - 6000) < 400), places
