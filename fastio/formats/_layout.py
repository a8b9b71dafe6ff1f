"""What the dataset needs of a shard format: a :class:`Layout` (how many
samples a shard holds and which bytes hold any run of them, known without
reading samples) and a :class:`ShardFormat` (those bytes decoded into samples
the caller owns, or into columnar batches). And what every format's writer
is: a :class:`ShardWriter`.

Samples can be read in runs as small as a layout's *unit*: one sample for
indexed and fixed formats, one row group or record batch for Parquet and
Arrow, the whole shard for compressed ones (decompression starts at byte 0).
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import MutableSequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from fastio._errors import DecodeError, MixedTypesError, import_extra
from fastio.reader._ranges import ByteRange
from fastio.spec._records import record

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence
    from types import TracebackType

    from typing_extensions import Self

    from fastio.reader._ranges import Chunk
    from fastio.reader._reader import Reader

__all__ = [
    "ColumnLayouts",
    "Layout",
    "ShardFormat",
    "ShardWriter",
    "batch_of",
    "counts_of",
    "gather",
    "sample_bounds",
]


@record(slots=True)
class Layout:
    """Where the samples of one shard are.

    ``bounds`` are the sample numbers where readable units start, followed by
    ``count``; ``unit_ranges[u]`` are the byte ranges unit ``u`` decodes from.
    ``starts``/``ends`` (when every sample is its own unit) give each sample's
    bytes. ``meta`` holds what the format needs to decode (a dtype, a schema).
    ``unit_bytes`` are each unit's bytes, for window sizing; None where the
    samples are the units (:attr:`per_sample`): their ranges say it, and a
    dataset of thousands of shards lays them all out before its first sample.
    """

    url: str
    count: int
    size: int
    bounds: np.ndarray  # int64, len = units + 1
    unit_bytes: np.ndarray | None  # int64, bytes of each unit
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    whole: bool = False  # the only unit is the whole (compressed) file

    def __init__(
        self, url: str, count: int, size: int, bounds: np.ndarray, unit_bytes: np.ndarray | None,
        starts: np.ndarray | None = None, ends: np.ndarray | None = None,
        meta: dict[str, Any] | None = None, whole: bool = False,
    ) -> None:  # fmt: skip
        # Written out: a dataset lays out every shard before its first sample (see record).
        self.url, self.count, self.size, self.bounds = url, count, size, bounds
        self.unit_bytes, self.starts, self.ends = unit_bytes, starts, ends
        self.meta = {} if meta is None else meta
        self.whole = whole

    @property
    def per_sample(self) -> bool:
        return self.starts is not None and not self.whole

    def nbytes(self, start: int, stop: int) -> int:
        """Encoded bytes of samples ``start`` to ``stop`` (for budgets; exact
        where samples have their own ranges, proportional inside a unit)."""
        if stop <= start:
            return 0
        if self.per_sample:
            assert self.starts is not None
            assert self.ends is not None
            return int(self.ends[stop - 1]) - int(self.starts[start])
        assert self.unit_bytes is not None
        total = int(self.unit_bytes.sum())
        return max(1, total * (stop - start) // max(self.count, 1))

    def cut(self, start: int, stop: int, budget: int) -> tuple[int, int]:
        """:meth:`next_cut` and the :meth:`nbytes` of the run it ends."""
        cut = self.next_cut(start, stop, budget)
        return cut, self.nbytes(start, cut)

    def next_cut(self, start: int, stop: int, budget: int) -> int:
        """Where a run of about ``budget`` bytes from sample ``start`` ends (at
        most ``stop``, at least one unit, at a unit boundary)."""
        if self.per_sample:
            assert self.starts is not None
            target = int(self.starts[start]) + budget
            if int(self.starts[stop - 1]) < target:  # the rest fits (small shards: all of it)
                return stop
            # The method, not np.searchsorted: its dispatch took most of a cut.
            cut = int(self.starts.searchsorted(target))
            return min(max(cut, start + 1), stop)
        assert self.unit_bytes is not None
        unit = int(np.searchsorted(self.bounds, start, side="right")) - 1
        total = 0
        while unit < len(self.unit_bytes) and total < budget:
            total += int(self.unit_bytes[unit])
            unit += 1
        return min(int(self.bounds[unit]), stop)

    def decoded_from(self, start: int) -> int:
        """The sample the bytes :meth:`ranges` gives for samples from ``start``
        on decode from (a unit's first)."""
        if self.per_sample:
            return start
        if self.whole:
            return 0
        return int(self.bounds[int(np.searchsorted(self.bounds, start, side="right")) - 1])

    def ranges(self, start: int, stop: int, piece: int = 0) -> tuple[list[ByteRange], int]:
        """Byte ranges that decode to samples ``first..`` covering ``start..stop``,
        and ``first`` (the sample the decoded stream starts at). With ``piece``
        (bytes), a run of samples is cut at sample boundaries into ranges of
        about that size at most: read one piece each, no sample is cut by the
        end of a piece."""
        if self.per_sample:
            assert self.starts is not None
            assert self.ends is not None
            # One range per run of adjacent samples: a damaged record that the
            # index left out (a gap) is not read.
            gaps = np.flatnonzero(self.starts[start + 1 : stop] != self.ends[start : stop - 1])
            edges = [start, *(start + 1 + gaps).tolist(), stop]
            if piece > 0:
                edges = _cut_runs(self.starts, self.ends, edges, piece)
            return [ByteRange(self.url, int(self.starts[a]), int(self.ends[b - 1] - self.starts[a]))
                    for a, b in itertools.pairwise(edges)], start  # fmt: skip
        if self.whole:
            return [ByteRange(self.url)], 0
        first_unit = int(np.searchsorted(self.bounds, start, side="right")) - 1
        last_unit = int(np.searchsorted(self.bounds, stop, side="left"))
        units = range(first_unit, last_unit)
        return [r for u in units for r in self.meta["unit_ranges"](u)], int(self.bounds[first_unit])


_UNMADE: Any = object()  # a layout of ColumnLayouts not made yet


class ColumnLayouts(MutableSequence["Layout | None"]):
    """The layouts of shards whose samples' byte ranges are columns of one
    dataset index: shard ``i`` holds samples ``bounds[i]`` to ``bounds[i + 1]``
    of ``starts`` and ``ends`` (int64), and is laid out by ``make(url, size,
    starts, ends)`` when first asked for. A dataset of thousands of shards
    reads a few before its first sample: its plan takes the others' counts
    (:func:`counts_of`) and offsets (:meth:`per_sample`) from the columns
    (made all at open, the layouts cost a microsecond a shard). ``plain``:
    every layout ``make`` makes is per sample. A layout set in place (learned
    anew, left out) is kept as set; the shards are fixed (nothing is
    inserted or deleted)."""

    def __init__(
        self, urls: list[str], sizes: list[int], starts: np.ndarray, ends: np.ndarray,
        bounds: list[int], make: Callable[[str, int, np.ndarray, np.ndarray], Layout],
        plain: bool, counts: list[int] | None = None,
    ) -> None:  # fmt: skip
        """``counts``: each shard's samples, where listed already (else told
        from ``bounds``)."""
        self._urls, self._sizes, self._starts, self._ends = urls, sizes, starts, ends
        self._bounds, self._make, self._plain = bounds, make, plain
        self._counts = counts
        self._made: list[Layout | None] = [_UNMADE] * len(urls)
        self._set: set[int] = set()  # shards whose layout was set in place

    def __len__(self) -> int:
        return len(self._made)

    @overload
    def __getitem__(self, index: int) -> Layout | None: ...
    @overload
    def __getitem__(self, index: slice) -> list[Layout | None]: ...
    def __getitem__(self, index: int | slice) -> Layout | list[Layout | None] | None:
        if isinstance(index, slice):
            return [self[shard] for shard in range(*index.indices(len(self._made)))]
        layout = self._made[index]  # IndexError as a list's
        if layout is _UNMADE:
            shard = index % len(self._made)
            first, last = self._bounds[shard], self._bounds[shard + 1]
            layout = self._made[shard] = self._make(
                self._urls[shard], self._sizes[shard], self._starts[first:last],
                self._ends[first:last],
            )  # fmt: skip
        return layout

    @overload
    def __setitem__(self, index: int, value: Layout | None) -> None: ...
    @overload
    def __setitem__(self, index: slice, value: Iterable[Layout | None]) -> None: ...
    def __setitem__(self, index: int | slice, value: Any) -> None:
        if isinstance(index, slice):
            raise TypeError("a shard's layout is set one at a time")
        self._made[index] = value
        self._set.add(index % len(self._made))

    def __delitem__(self, index: int | slice) -> None:
        raise TypeError("a dataset's shards are fixed: none is deleted")

    def insert(self, index: int, value: Layout | None) -> None:
        raise TypeError("a dataset's shards are fixed: none is inserted")

    def __iter__(self) -> Iterator[Layout | None]:
        for shard in range(len(self._made)):
            yield self[shard]

    def __contains__(self, value: object) -> bool:
        if value is None:  # made from the columns, a layout is never None
            return any(self._made[shard] is None for shard in self._set)
        return any(layout is value or layout == value for layout in self)

    def counts(self) -> list[int]:
        """Each shard's samples (a layout set in place: its own; None: 0)."""
        if self._counts is not None:
            counts = list(self._counts)
        else:
            counts = [last - first for first, last in itertools.pairwise(self._bounds)]
        for shard in self._set:
            layout = self._made[shard]
            counts[shard] = 0 if layout is None else layout.count
        return counts

    def per_sample(self) -> tuple[list[np.ndarray], list[np.ndarray], list[int]] | None:
        """Every shard's sample starts and ends as arrays and where in them
        its samples begin (the columns themselves, shared by all shards not
        set in place), where every layout is per sample; else None."""
        if not self._plain:
            return None
        count = len(self._made)
        starts, ends = [self._starts] * count, [self._ends] * count
        firsts = self._bounds[:-1]  # a list of its own
        for shard in self._set:
            layout = self._made[shard]
            if layout is None or not layout.per_sample:
                return None
            assert layout.starts is not None
            assert layout.ends is not None
            starts[shard], ends[shard], firsts[shard] = layout.starts, layout.ends, 0
        return starts, ends, firsts


def counts_of(layouts: Sequence[Layout]) -> list[int]:
    """Each layout's samples, without making the layouts of :class:`ColumnLayouts`."""
    if isinstance(layouts, ColumnLayouts):
        return layouts.counts()
    return [layout.count for layout in layouts]


_BOUNDS = np.arange(1, dtype=np.int64)


def sample_bounds(count: int) -> np.ndarray:
    """``0..count`` (a layout's ``bounds`` where every sample is a unit): a
    read-only view of one array that all layouts share, not an array per shard."""
    global _BOUNDS
    bounds = _BOUNDS  # the view is of this one: another thread may swap in its own
    if len(bounds) <= count:
        bounds = np.arange(max(count + 1, 2 * len(bounds)), dtype=np.int64)
        bounds.flags.writeable = False
        _BOUNDS = bounds
    return bounds[: count + 1]


def _cut_runs(starts: np.ndarray, ends: np.ndarray, edges: list[int], piece: int) -> list[int]:
    """``edges`` (runs of samples ``edges[i]..edges[i+1]``) with more edges
    inside each run, where its bytes pass each next multiple of ``piece``
    from the run's start (a sample larger than ``piece`` is a run alone)."""
    cut = [edges[0]]
    for first, stop in itertools.pairwise(edges):
        at = first
        while at < stop:
            # The first sample that would end past ``piece`` bytes from ``at``.
            limit = int(starts[at]) + piece
            after = int(np.searchsorted(ends[at:stop], limit, side="right")) + at
            at = min(max(after, at + 1), stop)
            cut.append(at)
    return cut


def gather(chunks: Iterable[Chunk]) -> dict[int, bytes]:
    """The bytes of each range of a piece, keyed by file offset."""
    parts: dict[int, list[memoryview]] = {}
    starts: dict[int, int] = {}
    for chunk in chunks:
        if chunk.range not in starts:
            starts[chunk.range] = chunk.offset
        parts.setdefault(chunk.range, []).append(chunk.data)
    return {starts[r]: b"".join(parts[r]) for r in parts}


MAPPED_SAMPLE_BYTES = 16 << 10
"""Average sample bytes from which a format that copies each sample's bytes
once, past a header or a record boundary each, gains by mapping cached
ranges (:meth:`ShardFormat.maps_cached`): 110 KB tar samples ran 1.26x
mapped, 1 KB ones 0.92x (the scan of their headers passes over nearly every
byte before the copy)."""


class ShardFormat(abc.ABC):
    """A format as the dataset drives it. Subclasses set ``name`` and implement
    :meth:`layout` and :meth:`samples`; :meth:`batches` has a generic default
    (one Python object per sample) that columnar formats replace."""

    name = ""
    batch_kind = "arrow"  # "arrow": pyarrow RecordBatch; "numpy": ndarray
    columns_by_name = False  # records name the columns, in no order of the shard's

    @abc.abstractmethod
    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        """The shard's layout, and (with ``tolerate``) the problems its scan met."""

    @abc.abstractmethod
    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        """The samples of the chunks of ``layout.ranges(...)``, owned by the
        caller. A damaged record the format can step over (the records after
        it are sound) may come as its DecodeError in its place; damage it
        cannot step over is raised."""

    def maps_cached(self, columnar: bool, sample_bytes: float | None) -> bool:
        """Whether the ranges of a read (of :meth:`parts` with ``columnar``,
        else of :meth:`samples`; of shards whose samples take
        ``sample_bytes`` on average, where known) that the page cache holds
        are best mapped rather than read (``map_cached="auto"``): where
        decoding copies each byte once, mapped, that copy is the only one.
        Where it passes over the bytes twice (a checksum, a scan, then a
        copy), a read into a buffer, whose copy leaves them in the CPU's
        caches, was faster."""
        return False

    @property
    def encodes(self) -> bool:
        """Whether a shuffle window holds this format's samples encoded
        (:meth:`encoded`) until :meth:`finish` makes each as it is delivered:
        a window of thousands of decoded samples (dicts of lists) is what the
        garbage collector scans again at each of its passes, a window of
        encoded records is not."""
        return False

    def encoded(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        """The samples of :meth:`samples`, encoded (where :attr:`encodes`)."""
        return self.samples(chunks, layout)

    def finish(self, encoded: Any, url: str) -> Any:
        """The sample an item of :meth:`encoded` is. Raises the format's DecodeError."""
        return encoded

    def batch_of(self, samples: list[Any]) -> Any:
        """Samples (of :meth:`samples`) as one batch, with the columns and
        types :meth:`batches` gives: a streamed pass shuffles samples and
        batches them so, and must give what an indexed pass does."""
        return batch_of(samples)

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        """Columnar batches of the same samples (any sizes), in order; a
        DecodeError that :meth:`samples` gives in a record's place comes
        between them in its place, and what came before an error first."""
        samples: list[Any] = []
        try:
            for sample in self.samples(chunks, layout):
                if isinstance(sample, DecodeError):
                    if samples:
                        yield batch_of(samples)
                        samples = []
                    yield sample
                else:
                    samples.append(sample)
        except (DecodeError, OSError):
            if samples:
                yield batch_of(samples)
            raise
        if samples:
            yield batch_of(samples)

    def parts(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        """:meth:`batches`, or parts of them that the dataset slices and joins
        (``num_rows``, ``slice``, ``TarPart.join``) and gathers once per batch
        it delivers (:mod:`fastio.formats._parts`)."""
        return self.batches(chunks, layout)

    def options(self) -> dict[str, Any]:
        return {}

    def prefetch(self, reader: Reader, urls: Sequence[str]) -> None:
        """Read ahead, for many files at once, what :meth:`layout` reads of
        each (a footer), so that laying them out one by one waits once; an
        empty ``urls`` drops what was read ahead. Nothing to do by default."""
        return


def batch_of(samples: list[Any]) -> Any:
    """Samples as one ``pyarrow.RecordBatch`` (a column per key, in the order
    the samples first give them, None where a sample lacks it; or one column
    ``value``), typed as
    ``pyarrow.RecordBatch.from_pylist`` infers them (numpy arrays as lists of
    their values). Built a column at a time: one Python object per sample and
    key. Raises :class:`~fastio.MissingExtraError` without pyarrow."""
    pa = import_extra("pyarrow", "Arrow record batches")

    if not samples or not all(type(sample) is dict for sample in samples):
        return pa.RecordBatch.from_pylist([_plain(sample) for sample in samples])
    names = list(dict.fromkeys(name for sample in samples for name in sample))
    try:
        columns = [_column(pa, [sample.get(name) for sample in samples]) for name in names]
    except (pa.ArrowTypeError, pa.ArrowInvalid) as error:
        raise MixedTypesError(f"samples whose fields have two types make no Arrow batch "
                              f"({error}); iterate samples instead") from None  # fmt: skip
    return pa.RecordBatch.from_arrays(columns, names)


# Arrays whose values from_pylist would infer as these types (float32 values
# become Python floats, so doubles).
_LIST_VALUES = {np.dtype(np.int64): np.dtype(np.int64), np.dtype(np.float32): np.dtype(np.float64),
                np.dtype(np.float64): np.dtype(np.float64)}  # fmt: skip


def _column(pa: Any, values: list[Any]) -> Any:
    """One column of :func:`batch_of`. A column of one-dimensional numpy
    arrays (tf.train.Example's int64 and float features) becomes a list
    array from their values at once, rather than from a Python number each."""
    first = values[0]
    if isinstance(first, np.ndarray) and first.dtype in _LIST_VALUES:
        dtype = first.dtype
        if all(type(value) is np.ndarray and value.dtype == dtype and value.ndim == 1
               for value in values):  # fmt: skip
            lengths = np.fromiter((len(value) for value in values), np.int64, len(values))
            flat = np.concatenate(values)
            if len(flat) and len(flat) < 1 << 31:  # all empty: from_pylist's list<null>
                offsets = np.zeros(len(values) + 1, np.int32)
                np.cumsum(lengths, out=offsets[1:])
                items = pa.array(flat.astype(_LIST_VALUES[dtype], copy=False))
                return pa.ListArray.from_arrays(pa.array(offsets), items)
    if type(first) is list:
        column = _bytes_lists(pa, values)
        if column is not None:
            return column
    if isinstance(first, bytes) or first is None:
        column = _bytes_values(pa, values)
        if column is not None:
            return column
    return pa.array([value.tolist() if isinstance(value, np.ndarray) else value
                     for value in values])  # fmt: skip


def _bytes_lists(pa: Any, values: list[Any]) -> Any:
    """A column of lists of bytes (tf.train.Example's bytes features) as
    ``from_pylist`` types it (``list<binary>``), its bytes copied once into
    one buffer of Arrow's pool. ``pa.array`` grows its buffer as it goes:
    copied again at each doubling, into fresh memory, 3x the time at 110 KB
    values. None where a value is not a list of bytes, all of them empty (the
    type is then ``list<null>``), or past 2 GiB (32-bit offsets)."""
    if not all(type(value) is list for value in values):
        return None
    flat = [item for value in values for item in value]
    if not flat or not all(type(item) is bytes for item in flat):
        return None
    items = _binary(pa, flat, None)
    if items is None:
        return None
    counts = np.zeros(len(values) + 1, np.int32)
    np.cumsum(np.fromiter((len(value) for value in values), np.int64, len(values)),
              out=counts[1:])  # fmt: skip
    return pa.ListArray.from_arrays(pa.array(counts), items)


def _bytes_values(pa: Any, values: list[Any]) -> Any:
    """A column of bytes values, None where a sample lacks one (WebDataset
    members), as ``from_pylist`` types it (``binary``), copied once as
    :func:`_bytes_lists` copies. None where a value is something else, all of
    them are None, or past 2 GiB."""
    if not all(isinstance(value, bytes) or value is None for value in values):
        return None
    present = [value is not None for value in values]
    if not any(present):
        return None  # from_pylist's null column
    return _binary(pa, [b"" if value is None else value for value in values],
                   None if all(present) else np.array(present))  # fmt: skip


def _binary(pa: Any, items: list[bytes], present: np.ndarray | None) -> Any:
    """A ``binary`` array of ``items`` (null where ``present`` is False), each
    copied once into one buffer of Arrow's pool; None past 2 GiB."""
    sizes = np.fromiter((len(item) for item in items), np.int64, len(items))
    total = int(sizes.sum())
    if total >= 1 << 31:
        return None
    data = pa.allocate_buffer(total)
    target = memoryview(data).cast("B") if total else None
    at = 0
    for item, size in zip(items, sizes.tolist(), strict=True):
        if size:
            assert target is not None
            target[at : at + size] = item
            at += size
    offsets = np.zeros(len(items) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    validity = None if present is None else pa.py_buffer(np.packbits(present, bitorder="little"))
    nulls = 0 if present is None else int(len(present) - present.sum())
    return pa.Array.from_buffers(pa.binary(), len(items),
                                 [validity, pa.py_buffer(offsets), data], nulls)  # fmt: skip


def _plain(sample: Any) -> dict[str, Any]:
    if isinstance(sample, dict):
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in sample.items()}
    return {"value": sample}


class ShardWriter:
    """Writes the samples of one shard to a file it is given; :meth:`close`
    ends the shard. Used as a context manager, the writer is closed when the
    block ends, or abandoned when it ends with an exception (the unfinished
    file is then the caller's to discard)."""

    def close(self) -> None:
        """Write what ends the shard (an end marker, a footer); the file stays open."""

    def abandon(self) -> None:
        """Let an unfinished shard go, releasing what the writer holds."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if error is None:
            self.close()
        else:
            self.abandon()
