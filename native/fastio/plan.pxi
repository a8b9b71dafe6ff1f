# An epoch's plan, cut: the windows of fastio/plan/_windows.py over shards laid
# out per sample, where the Python loop took most of a shuffled epoch's time
# to its first sample (a thousand cuts, each a binary search and a few array
# lookups, for 64 shards of 110 KB samples). Same cuts, same objects.
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint64_t

cimport cython

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void *op)


cdef array.array _INT32S = _array.array("i")  # (the module is imported in framing.pxi)
cdef array.array _BYTES = _array.array("b")
cdef array.array _INT64S = _array.array("q")

cdef enum:
    _MAX_MIX = 64
CUT_MAX_MIX = _MAX_MIX
"""The most spans a window may mix for :func:`cut_windows`."""


cdef inline Py_ssize_t _first_at_least(const int64_t *values, Py_ssize_t low, Py_ssize_t high,
                                       int64_t target) noexcept nogil:
    """The first index in [low, high) whose value is >= target (high if none):
    numpy's searchsorted, side "left", on sorted values."""
    cdef Py_ssize_t middle
    while low < high:
        middle = low + (high - low) // 2
        if values[middle] < target:
            low = middle + 1
        else:
            high = middle
    return low


cdef const int64_t *_int64s(object numbers) except NULL:
    """The data of ``numbers``, contiguous int64 (the caller holds the object
    while it reads them); ValueError for any other buffer. Asked of the
    buffer protocol directly and let go at once: a typed memoryview's
    acquisition, for the two arrays of each of thousands of shards, took
    most of the cut."""
    cdef Py_buffer view
    cdef const char *kind
    PyObject_GetBuffer(numbers, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    try:
        kind = view.format
        if kind != NULL and (kind[0] == 60 or kind[0] == 61 or kind[0] == 64):  # <, =, @
            kind += 1
        if (view.itemsize != 8 or kind == NULL or not (kind[0] == 108 or kind[0] == 113)
                or kind[1] != 0 or view.buf == NULL):  # l or q, alone
            raise ValueError("the sample offsets are not contiguous int64 numbers")
        return <const int64_t *>view.buf
    finally:
        PyBuffer_Release(&view)


cdef class Span:
    """Samples ``start`` to ``stop`` (exclusive) of shard ``shard``. Native: a
    plan makes one per shard, thousands before a first sample, and one holds
    no object (the collector passes it by)."""

    cdef readonly int64_t shard, start, stop

    def __init__(self, int64_t shard, int64_t start, int64_t stop):
        self.shard, self.start, self.stop = shard, start, stop

    def __len__(self):
        return self.stop - self.start

    def __eq__(self, other):
        if type(other) is not Span:
            return NotImplemented
        cdef Span span = <Span>other
        return self.shard == span.shard and self.start == span.start and self.stop == span.stop

    __hash__ = None  # as a mutable dataclass's: compared by value, not hashed

    def __repr__(self):
        return f"Span(shard={self.shard}, start={self.start}, stop={self.stop})"

    def __reduce__(self):
        return Span, (self.shard, self.start, self.stop)


cdef inline Span _span(int64_t shard, int64_t start, int64_t stop):
    cdef Span span = Span.__new__(Span)
    span.shard, span.start, span.stop = shard, start, stop
    return span


def whole_spans(list shards, list counts):
    """A span of every sample of each of ``shards`` (``counts[i]`` samples of
    ``shards[i]``), but those of none."""
    cdef list spans = []
    cdef Py_ssize_t index
    cdef int64_t count
    if len(counts) != len(shards):
        raise ValueError("need as many counts as shards")
    for index in range(len(shards)):
        count = counts[index]
        if count:
            spans.append(_span(shards[index], 0, count))
    return spans


cdef class Run:
    """Samples ``start`` to ``stop`` of shard ``shard`` (positions in the window
    from ``base``). Native: a plan makes one per shard per window, thousands
    before a first sample, and one holds no object (the collector passes it by)."""

    cdef readonly int64_t shard, start, stop, base

    def __init__(self, int64_t shard, int64_t start, int64_t stop, int64_t base):
        self.shard, self.start, self.stop, self.base = shard, start, stop, base

    def __len__(self):
        return self.stop - self.start

    def __eq__(self, other):
        if type(other) is not Run:
            return NotImplemented
        cdef Run run = <Run>other
        return (self.shard == run.shard and self.start == run.start and self.stop == run.stop
                and self.base == run.base)

    __hash__ = None  # as a mutable dataclass's: compared by value, not hashed

    def __repr__(self):
        return f"Run(shard={self.shard}, start={self.start}, stop={self.stop}, base={self.base})"

    def __reduce__(self):
        return Run, (self.shard, self.start, self.stop, self.base)


@cython.no_gc  # its runs hold no object: it is in no cycle
cdef class Window:
    """Samples mixed at once: ``count`` of them, ``nbytes`` encoded, in ``runs``."""

    cdef readonly tuple runs
    cdef readonly int64_t count, nbytes

    def __init__(self, tuple runs, int64_t count, int64_t nbytes):
        self.runs, self.count, self.nbytes = runs, count, nbytes

    def __eq__(self, other):
        if type(other) is not Window:
            return NotImplemented
        cdef Window window = <Window>other
        return self.count == window.count and self.nbytes == window.nbytes and \
            self.runs == window.runs

    __hash__ = None

    def __repr__(self):
        return f"Window(runs={self.runs!r}, count={self.count}, nbytes={self.nbytes})"

    def __reduce__(self):
        return Window, (self.runs, self.count, self.nbytes)


@cython.no_gc  # its run holds no object: it is in no cycle
cdef class Read:
    """Samples ``start``..``stop`` of ``run``'s shard, for window ``window``."""

    cdef readonly Py_ssize_t window
    cdef readonly Run run
    cdef readonly int64_t start, stop

    def __init__(self, Py_ssize_t window, Run run not None, int64_t start, int64_t stop):
        self.window, self.run, self.start, self.stop = window, run, start, stop

    @property
    def at(self):
        """The window position of the read's first sample."""
        return self.run.base + self.start - self.run.start

    def __eq__(self, other):
        if type(other) is not Read:
            return NotImplemented
        cdef Read read = <Read>other
        return self.window == read.window and self.start == read.start and \
            self.stop == read.stop and self.run == read.run

    __hash__ = None

    def __repr__(self):
        return (f"Read(window={self.window}, run={self.run!r}, start={self.start}, "
                f"stop={self.stop})")

    def __reduce__(self):
        return Read, (self.window, self.run, self.start, self.stop)


def whole_reads(list windows, Py_ssize_t first):
    """A read of each run of windows ``first``.. (the whole of each run)."""
    cdef list reads = []
    cdef Py_ssize_t index
    cdef Window window
    cdef Run run
    cdef Read read
    for index in range(first, len(windows)):
        window = <Window?>windows[index]
        for run in window.runs:
            read = Read.__new__(Read)
            read.window, read.run, read.start, read.stop = index, run, run.start, run.stop
            reads.append(read)
    return reads


def by_first_need(list reads, const int64_t[::1] sequence, int64_t count):
    """``reads`` (of one window of ``count`` samples, :class:`Read`) in the
    order the window's ``sequence`` (the positions it delivers, in order)
    first needs a sample of each: the read that holds the first sample to
    deliver first, and so on; reads that hold none of them last, as they
    came. A read holds the positions ``at .. at + stop - start``."""
    cdef Py_ssize_t n = len(reads), index, filled = 0
    cdef int64_t position, at, place
    cdef Read read
    if n < 2:
        return list(reads)
    cdef int32_t[::1] holder = array.clone(_INT32S, count, zero=False)
    cdef signed char[::1] taken = array.clone(_BYTES, n, zero=True)
    for place in range(count):
        holder[place] = -1
    for index in range(n):
        read = <Read?>reads[index]
        at = read.run.base + read.start - read.run.start
        for place in range(max(at, 0), min(at + read.stop - read.start, count)):
            holder[place] = <int32_t>index
    cdef list ordered = []
    for index in range(sequence.shape[0]):
        position = sequence[index]
        if not 0 <= position < count or holder[position] < 0 or taken[holder[position]]:
            continue
        taken[holder[position]] = 1
        ordered.append(reads[holder[position]])
        filled += 1
        if filled == n:
            return ordered
    for index in range(n):
        if not taken[index]:
            ordered.append(reads[index])
    return ordered


def reads_per_window(list reads, Py_ssize_t windows):
    """How many of ``reads`` (:class:`Read`) are of each of ``windows``
    windows: int64s (a part may have thousands of reads, planned before
    its first sample). Raises IndexError for a read of no such window."""
    cdef array.array counts = array.clone(_INT64S, windows, zero=True)
    cdef int64_t[::1] view = counts
    cdef Py_ssize_t window
    for read in reads:
        window = (<Read?>read).window
        if not 0 <= window < windows:
            raise IndexError(f"a read of window {window}, of {windows}")
        view[window] += 1
    return counts


def window_starts(list windows):
    """Where each of ``windows`` begins in their sequence of samples, and
    (last) how many they hold: int64s (a part of a dataset of thousands of
    shards has thousands of windows, planned before its first sample)."""
    cdef array.array starts = array.clone(_INT64S, len(windows) + 1, zero=False)
    cdef int64_t[::1] view = starts
    cdef int64_t total = 0
    cdef Py_ssize_t index
    view[0] = 0
    for index in range(len(windows)):
        total += (<Window?>windows[index]).count
        view[index + 1] = total
    return starts


def run_shards(list windows):
    """The shard of each run of ``windows``, in order, a shard whose runs
    follow each other once."""
    cdef list shards = []
    cdef Window window
    cdef Run run
    cdef int64_t last = -1  # (shards are numbered from 0)
    for item in windows:
        window = <Window?>item
        for run in window.runs:
            if run.shard != last:
                shards.append(run.shard)
                last = run.shard
    return shards


# Made without their __init__ (a call each from Python): thousands a plan.
cdef inline Run _run(int64_t shard, int64_t start, int64_t stop, int64_t base):
    cdef Run run = Run.__new__(Run)
    run.shard, run.start, run.stop, run.base = shard, start, stop, base
    return run


cdef inline Window _window(tuple runs, int64_t count, int64_t nbytes):
    # Its tuple holds runs alone, which hold no object: the collector would
    # untrack it at its first collection, after scanning it (a gen-0
    # collection of 20,000 windows' tuples took 2.3 ms before a first sample).
    PyObject_GC_UnTrack(<void *>runs)
    cdef Window window = Window.__new__(Window)
    window.runs, window.count, window.nbytes = runs, count, nbytes
    return window


def cut_windows(list spans, list starts, list ends, int64_t buffer, Py_ssize_t mix,
                int64_t first_window, list firsts=None):
    """The windows ``make_windows`` cuts ``spans`` (:class:`Span`, in order)
    into, where every shard is laid out per sample:
    ``starts[shard]`` and ``ends[shard]`` hold its samples' byte ranges
    (contiguous int64 arrays, many shards' the same), from ``firsts[shard]``
    on (without ``firsts``: from the first). Window ``i`` takes a run of about
    ``max(1, budget(i) // mix)`` bytes from each of up to ``mix`` spans,
    where ``budget(0)`` is 1 and ``budget(i)`` is ``first_window << (i - 1)``
    up to ``buffer``."""
    cdef Py_ssize_t pending = 0, count = len(spans), active = 0, index, kept
    cdef Py_ssize_t window_index = 0
    cdef int64_t window_budget, per_span, first, target, cut, samples, nbytes, shard
    # Per active span: its shard, cursor, stop, and its arrays' data.
    cdef int64_t[_MAX_MIX] shard_of, cursor_small, stop_small
    cdef const int64_t *starts_small[_MAX_MIX]
    cdef const int64_t *ends_small[_MAX_MIX]
    # The arrays last asked for their data: shards that share them ask once.
    cdef object starts_array = None, ends_array = None, array
    cdef const int64_t *starts_data = NULL
    cdef const int64_t *ends_data = NULL
    cdef int64_t offset
    cdef Span span
    if mix < 1 or mix > _MAX_MIX:
        raise ValueError(f"mix must be 1..{_MAX_MIX} here, not {mix}")
    cdef list windows = []
    cdef list runs
    while pending < count or active:
        while active < mix and pending < count:
            span = <Span?>spans[pending]
            shard, first, target = span.shard, span.start, span.stop
            pending += 1
            if target <= first:
                continue
            shard_of[active] = shard
            cursor_small[active] = first
            stop_small[active] = target
            array = starts[shard]
            if array is not starts_array:
                starts_data, starts_array = _int64s(array), array
            array = ends[shard]
            if array is not ends_array:
                ends_data, ends_array = _int64s(array), array
            offset = 0 if firsts is None else <int64_t>firsts[shard]
            starts_small[active] = starts_data + offset
            ends_small[active] = ends_data + offset
            active += 1
        if not active:
            break
        if window_index == 0:
            window_budget = 1
        else:
            window_budget = first_window << min(window_index - 1, 40)
            if window_budget > buffer:
                window_budget = buffer
        per_span = window_budget // mix
        if per_span < 1:
            per_span = 1
        runs = []
        samples = nbytes = 0
        for index in range(active):
            first = starts_small[index][cursor_small[index]]
            target = first + per_span
            if starts_small[index][stop_small[index] - 1] < target:
                cut = stop_small[index]
            else:
                cut = _first_at_least(starts_small[index], cursor_small[index] + 1,
                                      stop_small[index], target)
            runs.append(_run(shard_of[index], cursor_small[index], cut, samples))
            samples += cut - cursor_small[index]
            nbytes += ends_small[index][cut - 1] - first
            cursor_small[index] = cut
        kept = 0
        for index in range(active):  # the spans not done, in their order
            if cursor_small[index] < stop_small[index]:
                shard_of[kept] = shard_of[index]
                cursor_small[kept] = cursor_small[index]
                stop_small[kept] = stop_small[index]
                starts_small[kept] = starts_small[index]
                ends_small[kept] = ends_small[index]
                kept += 1
        active = kept
        windows.append(_window(tuple(runs), samples, nbytes))
        window_index += 1
    return windows


# Shuffle orders. Seeded from a key of words (seed, epoch, rank, ...), so that
# every process draws the same order for the same key without sharing state:
# xoshiro256** seeded through splitmix64, and Fisher-Yates with unbiased
# bounded draws. Here rather than numpy.random, whose import (eight extension
# modules) a shuffled epoch's first sample would wait for.


cdef inline uint64_t _splitmix(uint64_t *state) noexcept nogil:
    state[0] += 0x9E3779B97F4A7C15ULL
    cdef uint64_t z = state[0]
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef inline uint64_t _rotl(uint64_t x, int k) noexcept nogil:
    return (x << k) | (x >> (64 - k))


cdef inline uint64_t _xoshiro(uint64_t *s) noexcept nogil:
    cdef uint64_t result = _rotl(s[1] * 5, 7) * 9
    cdef uint64_t t = s[1] << 17
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = _rotl(s[3], 45)
    return result


cdef inline uint64_t _below(uint64_t *s, uint64_t bound) noexcept nogil:
    """A uniform draw in [0, bound): draws under 2**64 mod bound are
    rejected, so that every residue is equally likely."""
    cdef uint64_t threshold = (0 - bound) % bound
    cdef uint64_t draw = _xoshiro(s)
    while draw < threshold:
        draw = _xoshiro(s)
    return draw % bound


def permute(int64_t[::1] order, key):
    """Fill ``order`` with a permutation of ``0 .. len(order) - 1`` drawn from
    ``key`` (non-negative integers, each mixed in 64 bits at a time): the
    same key, the same order, in every process and on every machine."""
    cdef uint64_t mixed = 0x6A09E667F3BCC909ULL
    cdef uint64_t state[4]
    cdef Py_ssize_t count = order.shape[0], index
    cdef int64_t swap
    cdef uint64_t other
    for word in key:
        word = int(word)  # numpy integers too
        while True:
            mixed ^= <uint64_t>(word & 0xFFFFFFFFFFFFFFFF)
            mixed = _splitmix(&mixed)
            word >>= 64
            if word <= 0:
                break
    for index in range(4):
        state[index] = _splitmix(&mixed)
    with nogil:
        for index in range(count):
            order[index] = index
        index = count - 1
        while index > 0:
            other = _below(state, <uint64_t>(index + 1))
            swap = order[index]
            order[index] = order[other]
            order[other] = swap
            index -= 1
