"""fastio.Dataset: sharded datasets as a drop-in iterable.

URLs -> layouts (per-shard counts and byte ranges, from the index or
metadata) -> the epoch's assignment for this (rank, worker) -> windows (see
:mod:`fastio.plan._windows`) -> reads through one :class:`fastio.Reader` stream ->
the format decodes -> samples or batches, in the window's permutation.

With torch installed the class is a ``torch.utils.data.IterableDataset``; each
DataLoader worker then reads its own part of the rank's samples.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fastio._errors import DecodeError, SkippedSamplesWarning
from fastio.dataset._batching import assemble, rebatch, rows_of
from fastio.dataset._reads import Read, execute, plan_reads
from fastio.dataset._spill import MISSING as SPILL_MISSING  # tiering hook
from fastio.dataset._spill import make_spill  # tiering hook
from fastio.fairness._monitor import FairnessMonitor  # fairness hook (issue #6)
from fastio.formats._shards import Layout, format_for_url, format_options, make_format
from fastio.plan._assignment import assign_samples, current_rank, current_worker
from fastio.plan._windows import Run, Window, make_windows, permutation
from fastio.reader import _tuning  # tuner hook (issue #5)
from fastio.reader._reader import Reader
from fastio.sources._urls import expand_urls
from fastio.spec._dataset import DatasetSpec, OnError, Remainder, TieringSettings, TierSettings

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Iterator, Sequence

    from fastio.cache._cache import ShardCache
    from fastio.fairness._publish import Publisher
    from fastio.spec._fairness import FairnessSettings
    from fastio.spec._reader import ReaderSettings
    from fastio.spec._tuner import TunerSettings
    from fastio.tiering import Tiering  # tiering hook

__all__ = ["Batches", "Dataset"]

log = logging.getLogger("fastio")

_STATE_VERSION = 1
_MAX_KEPT_ERRORS = 100

if TYPE_CHECKING:
    _Base = object
else:
    try:  # a real torch IterableDataset where torch is installed
        from torch.utils.data import IterableDataset as _Base
    except ImportError:  # torch is an optional extra
        _Base = object


@dataclass(frozen=True, slots=True)
class _Who:
    rank: int
    world_size: int
    worker: int
    num_workers: int


def _empty_layout(url: str) -> Layout:
    return Layout(url, 0, 0, np.zeros(1, np.int64), np.zeros(0, np.int64))


class Dataset(_Base):
    """A sharded dataset: iterate for samples, :meth:`batches` for batches.

    ``urls`` is a pattern (``train-{0000..0127}.tar``, globs) or a list of them;
    ``format`` one of webdataset, tfrecord, parquet, arrow, npy, fixed, jsonl,
    lines (default: from the first URL's extension). Every sample is delivered
    exactly once per epoch across ranks and DataLoader workers (``remainder``
    ``"drop"``/``"pad"`` give every rank the same count). Shuffling reads
    windows of ``shuffle_buffer`` bytes mixing ``shuffle_shards`` shards and
    delivers each in a permutation of ``(seed, epoch)``; call
    :meth:`set_epoch` each epoch for a new order. :meth:`state_dict` /
    :meth:`load_state_dict` resume at the next sample.

    Format options: ``verify`` and ``example`` (tfrecord: check CRCs; decode
    ``tf.train.Example``), ``record_size`` (fixed), ``columns`` (parquet,
    arrow), ``index_dir`` (where indexes go when the shard's folder is
    read-only; remote shards' indexes go there or to ``~/.cache/fastio/index``).
    URLs may name remote objects (``https://``, ``s3://``, ``gs://``, fsspec
    chaining); ``storage_options`` go to fsspec. With ``cache_dir`` and
    ``cache_bytes``, remote shards are read from local copies in a shard cache
    that never exceeds ``cache_bytes`` and evicts by this plan's future use
    (``cache_policy="plan"``, or ``"lru"``), downloading the
    ``cache_prefetch`` shards the plan needs next in the background. ``reader`` and further
    keywords are :class:`ReaderSettings`.

    ``on_error``: ``"raise"`` (default; the error names URL, byte offset and
    sample), ``"skip"`` (go on, count skipped samples in :meth:`stats`, log a
    summary each epoch) or ``"warn"`` (as skip, with a
    :class:`SkippedSamplesWarning` per failure).

    ``fairness``: the fairness monitor's :class:`~fastio.fairness.FairnessSettings`
    (or a dict of them; ``False`` turns it off); its report is in :meth:`stats`.
    ``tune=True`` (or tuner options) tunes ``outstanding_requests`` and
    ``read_size`` online (see :mod:`fastio.reader._tuning`).

    ``tiering`` (a :class:`fastio.tiering.Tiering`) places intermediate files
    by predicted I/O density: shuffle windows larger than ``shuffle_memory``
    spill to a tier file, with ``cache_bytes`` the shard cache keeps its
    copies in the tiers' directories, each where the policy puts it, and
    without ``index_dir`` the indexes of remote shards (and of shards in
    read-only folders) go where it puts them too.
    """

    def __init__(
        self,
        urls: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        format: str | None = None,
        *,
        shuffle: bool = True,
        seed: int = 0,
        shuffle_buffer: int = 64 << 20,
        shuffle_shards: int = 8,
        rank: int | None = None,
        world_size: int | None = None,
        remainder: Remainder = "exact",
        on_error: OnError = "raise",
        columns: Sequence[str] | None = None,
        record_size: int | None = None,
        verify: bool = True,
        example: bool = True,
        index_dir: str | os.PathLike[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        cache_bytes: int | None = None,
        cache_policy: Literal["plan", "lru"] = "plan",
        cache_prefetch: int = 2,
        reader: ReaderSettings | None = None,
        fairness: FairnessSettings | dict[str, Any] | bool | None = None,
        shuffle_memory: int | None = None,  # tiering hook: shuffle spill (fastio.dataset._spill)
        tiering: Tiering | TieringSettings | dict[str, Any] | None = None,
        tune: bool | dict[str, Any] | TunerSettings | None = None,
        **reader_knobs: Any,
    ) -> None:
        live_tiering = None
        settings: TieringSettings | dict[str, Any] | None = None
        if isinstance(tiering, (dict, TieringSettings)):
            settings = tiering
        elif tiering is not None:
            live_tiering, settings = tiering, _settings_of(tiering)
        spec = DatasetSpec.from_keywords(
            urls, format=format, shuffle=shuffle, seed=seed, shuffle_buffer=shuffle_buffer,
            shuffle_shards=shuffle_shards, rank=rank, world_size=world_size, remainder=remainder,
            on_error=on_error, columns=columns, record_size=record_size, verify=verify,
            example=example, index_dir=index_dir, storage_options=storage_options,
            cache_dir=cache_dir, cache_bytes=cache_bytes, cache_policy=cache_policy,
            cache_prefetch=cache_prefetch, reader=reader, fairness=fairness,
            shuffle_memory=shuffle_memory, tiering=settings, tune=tune, **reader_knobs,
        )  # fmt: skip
        self._setup(spec, live_tiering)

    @classmethod
    def from_spec(cls, spec: DatasetSpec, *, tiering: Tiering | None = None) -> Dataset:
        """The dataset ``spec`` describes (a config file's, see
        :func:`fastio.load_config`). ``tiering``: a live :class:`Tiering` to
        use instead of making one from ``spec.tiering``."""
        dataset = cls.__new__(cls)
        dataset._setup(spec, tiering)
        return dataset

    def _setup(self, spec: DatasetSpec, tiering: Tiering | None) -> None:
        self.spec = spec
        if tiering is None and spec.tiering.enabled:
            tiering = _tiering_of(spec.tiering)
        shuffle_memory = spec.tiering.shuffle_memory
        cache = spec.cache
        self.storage_options = dict(spec.storage_options)
        self._spill = make_spill(shuffle_memory, tiering)
        self.cache: ShardCache | None = None
        if cache.dir is not None or (tiering is not None and cache.max_bytes is not None):
            from fastio.cache._cache import ShardCache

            folders = tiering.directories if tiering is not None else cache.dir
            assert folders is not None  # checked by the spec
            assert cache.max_bytes is not None
            self.cache = ShardCache(folders, cache.max_bytes, cache.policy, placement=tiering,
                                    prefetch=cache.prefetch)  # fmt: skip
        urls = spec.urls
        self.urls = expand_urls(urls if isinstance(urls, str) else list(urls),
                                self.storage_options)  # fmt: skip
        if not self.urls:
            raise ValueError(f"no shards: {urls!r} names no URL")
        self.format = spec.format or format_for_url(self.urls[0])
        fmt = spec.format_options
        placement = tiering if fmt.index_dir is None else None
        options = format_options(self.format, fmt.columns, fmt.record_size, fmt.verify,
                                 fmt.example, fmt.index_dir, placement)  # fmt: skip
        self._format = make_format(self.format, **options)
        self.shuffle = spec.shuffle.enabled
        self.seed = spec.shuffle.seed
        self.shuffle_buffer = spec.shuffle.buffer
        self.shuffle_shards = spec.shuffle.shards
        self.remainder: Remainder = spec.split.remainder
        self.on_error: OnError = spec.on_error
        split = spec.split
        self._explicit_rank = None if split.rank is None else (split.rank, split.world_size or 1)
        self.settings = spec.reader
        self._reader: Reader | None = None
        self.tune = spec.tuner if spec.tuner.enabled else None
        self._tuning: _tuning.ReaderTuning | None = None
        self.epoch = 0
        # (epoch, position, who saved it) from load_state_dict, for the next iteration
        self._resume: tuple[int, int, _Who] | None = None
        self._position = 0
        self._running_epoch: int | None = None
        self._who: _Who | None = None
        self._skipped = 0
        self._delivered = 0
        self._errors: list[str] = []
        self.fairness = FairnessMonitor(spec.fairness, self.urls, self.seed)
        self._shards_skipped = 0
        self.layouts = self._load_layouts()
        counts = [layout.count for layout in self.layouts]
        self._bases = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    # ---- setup ---------------------------------------------------------------------

    @property
    def reader(self) -> Reader:
        if self._reader is None or self._reader.closed:
            self._reader = Reader(
                self.settings, storage_options=self.storage_options, cache=self.cache
            )
            if self._tuning is not None:
                self._tuning.close()
            self._tuning = _tuning.attach(self._reader, self.spec.tuner, self.urls)
        return self._reader

    def _load_layouts(self) -> list[Layout]:
        layouts = []
        tolerate = self.on_error != "raise"
        self.reader.prefetch_info(self.urls)  # remote objects: one round trip for all
        if self.cache is not None:  # shards without an index are read in this order
            self.cache.plan(self.urls)
        for url in self.urls:
            try:
                layout, problems = self._format.layout(self.reader, url, tolerate)
            except (OSError, DecodeError) as error:
                if not tolerate:
                    raise
                self._shards_skipped += 1
                self._failure(error, None, f"shard {url} is unreadable and left out")
                layouts.append(_empty_layout(url))
                continue
            for problem in problems:
                # The damaged record is lost; the index holds the samples around it.
                self._failure(problem, 1, f"shard {url} is indexed without the damaged record")
            layouts.append(layout)
        return layouts

    def _failure(
        self, error: Exception, lost: int | None, what: str, on_error: OnError | None = None
    ) -> None:
        """Apply the ``on_error`` policy (the dataset's unless given) to
        ``error`` (``lost`` samples, if known)."""
        on_error = on_error or self.on_error
        if on_error == "raise":
            raise error
        if lost:
            self._skipped += lost
        text = f"{error} ({what}" + (f"; {lost} samples skipped)" if lost else ")")
        if len(self._errors) < _MAX_KEPT_ERRORS:
            self._errors.append(text)
        if on_error == "warn":
            warnings.warn(text, SkippedSamplesWarning, stacklevel=3)
        else:
            log.debug("fastio: %s", text)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"] = None  # each process makes its own
        state["_tuning"] = None  # tuner hook (issue #5): and tunes its own
        return state

    def close(self) -> None:
        """Release the reader (its descriptors, buffers and loop thread) and the
        shard cache's connection; using the dataset again makes them anew."""
        if self._tuning is not None:  # its summary stays readable
            self._tuning.close()
        if self._reader is not None:
            self._reader.close()
        if self.cache is not None:  # its index connection and pins; reopened on use
            self.cache.close()
        self.fairness.close()  # fairness hook (issue #6)

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- sizes and assignment ------------------------------------------------------

    @property
    def counts(self) -> list[int]:
        """Samples per shard, in URL order."""
        return [layout.count for layout in self.layouts]

    @property
    def total(self) -> int:
        """Samples in the whole dataset (all ranks)."""
        return int(self._bases[-1])

    def _rank(self) -> tuple[int, int]:
        return self._explicit_rank if self._explicit_rank is not None else current_rank()

    def _current(self) -> _Who:
        rank, world_size = self._rank()
        worker, num_workers = current_worker()
        return _Who(rank, world_size, worker, num_workers)

    def __len__(self) -> int:
        """Samples this rank gets per epoch (all its DataLoader workers together)."""
        rank, world_size = self._rank()
        total = self.total
        if self.remainder == "exact":
            return total * (rank + 1) // world_size - total * rank // world_size
        return total // world_size if self.remainder == "drop" else -(-total // world_size)

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s order from the next iteration on (call it every epoch,
        as with DistributedSampler, in the main process before iterating)."""
        self.epoch = int(epoch)

    def _windows(self, epoch: int, who: _Who) -> list[Window]:
        spans = assign_samples(
            self.counts, rank=who.rank, world_size=who.world_size, worker=who.worker,
            num_workers=who.num_workers, seed=self.seed, epoch=epoch, shuffle=self.shuffle,
            remainder=self.remainder,
        )  # fmt: skip
        mix = self.shuffle_shards if self.shuffle else 1
        return make_windows(spans, self.layouts, self.shuffle_buffer, mix)

    def _order(self, window: Window, index: int, epoch: int, who: _Who) -> np.ndarray | None:
        if not self.shuffle:
            return None
        return permutation(window.count, self.seed, epoch, who.rank, who.worker, index)

    def order(
        self,
        epoch: int | None = None,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        worker: int = 0,
        num_workers: int = 1,
    ) -> np.ndarray:
        """Global sample numbers (positions in URL order) in the order this
        (rank, worker) delivers them in ``epoch``: computed from the plan alone."""
        default_rank, default_world = self._rank()
        who = _Who(
            default_rank if rank is None else rank,
            default_world if world_size is None else world_size,
            worker,
            num_workers,
        )
        epoch = self.epoch if epoch is None else epoch
        parts = []
        for index, window in enumerate(self._windows(epoch, who)):
            ids = np.concatenate(
                [self._bases[p.shard] + np.arange(p.start, p.stop) for p in window.pieces]
            ) if window.pieces else np.zeros(0, np.int64)  # fmt: skip
            order = self._order(window, index, epoch, who)
            parts.append(ids if order is None else ids[order])
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    # ---- state -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this iterator is: the epoch and the position in it (samples
        delivered or skipped). Small and picklable; with DataLoader workers, use
        torchdata's StatefulDataLoader, which keeps one per worker."""
        who = self._who or self._current()
        if self._running_epoch is not None:
            epoch, position = self._running_epoch, self._position
        elif self._resume is not None:
            epoch, position, _ = self._resume
        else:
            epoch, position = self.epoch, 0
        return {
            "version": _STATE_VERSION, "epoch": epoch, "position": position, "seed": self.seed,
            "shuffle": self.shuffle, "total": self.total, "rank": who.rank,
            "world_size": who.world_size, "worker": who.worker, "num_workers": who.num_workers,
        } | self.fairness.steal_state()  # fmt: skip  # fairness hook (issue #6): steal units

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next iteration starts at the
        next sample of that epoch, without reading what was delivered."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"state version {state.get('version')}, not {_STATE_VERSION}")
        for key, mine in (("seed", self.seed), ("shuffle", self.shuffle), ("total", self.total)):
            if state[key] != mine:
                raise ValueError(
                    f"state is of another dataset or order: {key} {state[key]!r}, here {mine!r}"
                )
        self.epoch = int(state["epoch"])
        saved = _Who(state["rank"], state["world_size"], state["worker"], state["num_workers"])
        self._resume = (self.epoch, int(state["position"]), saved)
        self._running_epoch = None
        self.fairness.load_steal_state(state.get("steal"))  # fairness hook (issue #6)

    def _start(self) -> tuple[int, int, _Who]:
        who = self._current()
        epoch, position = self.epoch, 0
        if self._resume is not None:
            epoch, position, saved = self._resume
            if saved != who:
                raise ValueError(
                    f"state was saved by rank {saved.rank}/{saved.world_size}, worker "
                    f"{saved.worker}/{saved.num_workers}; resuming as rank {who.rank}/"
                    f"{who.world_size}, worker {who.worker}/{who.num_workers} would change the "
                    "order (resume with the same world size and number of workers)"
                )
            self._resume = None
        self._who = who
        self._running_epoch, self._position = epoch, position
        return epoch, position, who

    # ---- statistics ------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Samples delivered and skipped, shards left out as unreadable,
        failures kept (up to 100) and the reader's statistics."""
        return {
            "samples": self._delivered, "skipped": self._skipped,
            "shards_skipped": self._shards_skipped, "errors": list(self._errors),
            "epoch": self._running_epoch, "position": self._position,
            "reader": self._reader.stats().as_dict() if self._reader is not None else None,
            "fairness": self.fairness.report(),  # fairness hook (issue #6)
            "tuner": self._tuning.summary() if self._tuning is not None else None,  # issue #5
        }  # fmt: skip

    # ---- iteration -------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        return self._run(columnar=False, batch_size=0, drop_last=False)

    def batches(self, batch_size: int, *, drop_last: bool = False) -> Batches:
        """An iterable of batches of ``batch_size`` samples, one Python object per
        batch: ``pyarrow.RecordBatch`` (webdataset, tfrecord, jsonl, lines,
        parquet, arrow) or ``numpy.ndarray`` (fixed, npy), in the same order as
        iterating samples. Usable as a DataLoader dataset with ``batch_size=None``."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        return Batches(self, batch_size, drop_last)

    def _run(self, columnar: bool, batch_size: int, drop_last: bool) -> Iterator[Any]:
        # fairness hook (issue #6): the monitor runs the outermost loop, timing and
        # publishing what this process delivers (no generator layer of its own)
        return self.fairness.iterate(lambda: self._begin(columnar, batch_size, drop_last),
                                     self._ended)  # fmt: skip

    def _begin(
        self, columnar: bool, batch_size: int, drop_last: bool
    ) -> tuple[Iterator[Any], Publisher | None]:
        """At the first item: the iteration's items, and what publishes them."""
        epoch, position, who = self._start()
        publisher = self.fairness.watcher(self, who, epoch, position, lambda: self._delivered)
        # fairness hook (issue #6): with balance="steal", units shared between workers
        stolen = self.fairness.stolen_units(self, epoch, position, who, columnar, batch_size,
                                            drop_last)  # fmt: skip
        if stolen is not None:
            return stolen, publisher
        if columnar:
            return rebatch(self._units(epoch, position, who, True), batch_size, drop_last,
                           self), publisher  # fmt: skip
        return self._units(epoch, position, who, False), publisher

    def _ended(self) -> None:
        if (self._skipped or self._shards_skipped) and self.on_error == "skip":
            log.warning("fastio: %d samples and %d unreadable shards skipped so far "
                        "(on_error='skip'); see stats()", self._skipped,
                        self._shards_skipped)  # fmt: skip

    def _units(
        self, epoch: int, position: int, who: _Who, columnar: bool, stop: int | None = None
    ) -> Iterator[Any]:
        """Samples in delivery order; or, ``columnar``, per window a table, the
        rows to deliver in order, each row's position in the epoch, and the
        position after the window. ``self._position`` counts every sample
        passed, delivered or skipped (samples mode; batches set it as they go).
        ``stop``: windows before it only (a unit of work, fairness issue #6)."""
        windows = self._windows(epoch, who)[:stop]
        sizes = np.cumsum([0] + [w.count for w in windows])
        first = int(np.searchsorted(sizes, position, side="right")) - 1
        if first >= len(windows):
            return
        skip = position - int(sizes[first])
        reads = plan_reads(self, windows, first, skip, epoch, who)
        if self.cache is not None:
            self._plan_cache(reads, epoch, who)
        per_window = np.bincount([r.window for r in reads], minlength=len(windows))
        executed = execute(self, reads, columnar)
        for index in range(first, len(windows)):
            window = windows[index]
            order = self._order(window, index, epoch, who)
            begin = skip if index == first else 0
            its_reads = islice(executed, int(per_window[index]))
            if order is None and not columnar:  # stored order: stream as decoded
                expected = begin
                for read, decoded, count in its_reads:
                    at = read.piece.base + read.start - read.piece.start
                    self._position += at - expected  # samples a failure lost
                    for sample in decoded:
                        self._position += 1
                        self._delivered += 1
                        yield sample
                    expected = at + count
                self._position = int(sizes[index + 1])
                continue
            # A window over shuffle_memory waits in a spill file.
            if self._spill is not None and self._spill.applies(window.nbytes, columnar):
                placed = ((r.piece.base + r.start - r.piece.start, d) for r, d, _ in its_reads)
                sequence = order[begin:] if order is not None else np.arange(begin, window.count)
                for sample in self._spill.window(placed, window.count, sequence, window.nbytes):
                    self._position += 1
                    if sample is not SPILL_MISSING:
                        self._delivered += 1
                        yield sample
                continue
            # Collect the window (the shuffle buffer), then deliver it in its order.
            slots: list[Any] = [_MISSING] * window.count
            parts: list[tuple[int, Any]] = []
            for read, decoded, count in its_reads:
                at = read.piece.base + read.start - read.piece.start
                if columnar:
                    for part in decoded:
                        parts.append((at, part))
                        at += rows_of(part)
                else:
                    slots[at : at + count] = decoded
            sequence = order[begin:] if order is not None else np.arange(begin, window.count)
            if columnar:
                table, rows_at = assemble(parts, window.count)
                if order is not None and not isinstance(table, np.ndarray) and table is not None:
                    table = table.combine_chunks()  # one copy; gathers from one chunk are fast
                rows = rows_at[sequence]
                present = rows >= 0
                first_position = int(sizes[index]) + begin
                if order is None and bool(present.all()) and len(rows):
                    # Stored order, nothing skipped: rows and positions are runs.
                    start_row = int(rows[0])
                    yield (table, range(start_row, start_row + len(rows)),
                           range(first_position, first_position + len(rows)),
                           int(sizes[index + 1]))  # fmt: skip
                    continue
                positions = first_position + np.flatnonzero(present)
                yield table, rows[present], positions, int(sizes[index + 1])
                continue
            for slot in sequence:
                sample = slots[slot]
                slots[slot] = None  # the buffer shrinks as it is delivered
                self._position += 1
                if sample is not _MISSING:
                    self._delivered += 1
                    yield sample

    def _plan_cache(self, reads: list[Read], epoch: int, who: _Who) -> None:
        """Tell the shard cache the order shards are needed in: the rest of this
        epoch, then the next (so that eviction keeps what is used soonest)."""
        assert self.cache is not None
        shards = [read.piece.shard for read in reads]
        shards += [p.shard for window in self._windows(epoch + 1, who) for p in window.pieces]
        order = [self.layouts[s].url for i, s in enumerate(shards) if i == 0 or shards[i - 1] != s]
        self.cache.plan(order)

    # ---- random access ---------------------------------------------------------------

    def __getitem__(self, index: int) -> Any:
        """Sample ``index`` of the whole dataset in stored order (URL order), read
        on its own through the index."""
        if not -self.total <= index < self.total:
            raise IndexError(f"sample {index} out of range for {self.total} samples")
        index %= self.total
        shard = int(np.searchsorted(self._bases, index, side="right")) - 1
        sample = index - int(self._bases[shard])
        piece = Run(shard, sample, sample + 1, 0)
        read = Read(0, piece, sample, sample + 1)
        for _, decoded, _ in execute(self, [read], False, on_error="raise"):
            return decoded[0]
        raise IndexError(index)  # unreachable: _execute yields once or raises

    def __repr__(self) -> str:
        return (f"<fastio.Dataset {self.format} shards={len(self.urls)} samples={self.total} "
                f"shuffle={self.shuffle} seed={self.seed}>")  # fmt: skip


_MISSING = object()


class Batches(_Base):
    """``dataset.batches(n)``: iterate for batches; a DataLoader dataset (use
    ``batch_size=None``) whose workers split the rank's samples."""

    def __init__(self, dataset: Dataset, batch_size: int, drop_last: bool) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[Any]:
        return self.dataset._run(True, self.batch_size, self.drop_last)

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dataset.load_state_dict(state)


def _settings_of(tiering: Tiering) -> TieringSettings:
    """What a live :class:`Tiering` is, as settings (for the dataset's spec)."""
    tiers = tuple(TierSettings(tier.name, tier.path, tier.capacity,
                               None if tier.detected else tier.media)
                  for tier in tiering.tiers)  # fmt: skip
    return TieringSettings(enabled=True, tiers=tiers)


def _tiering_of(settings: TieringSettings) -> Tiering:
    from fastio.tiering import DensityModel, Tier, Tiering

    tiers = [Tier(t.name, t.path, t.capacity, t.media) for t in settings.tiers]
    return Tiering(tiers, DensityModel(settings.prior_strength),
                   prior_seconds=settings.prior_seconds)  # fmt: skip
