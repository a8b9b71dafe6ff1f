"""Windows: how a part's spans are cut into runs read together."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fastio.formats._layout import Layout, sample_bounds
from fastio.plan._assignment import Span
from fastio.plan._windows import _mixed_windows, _stored_windows, make_windows


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
