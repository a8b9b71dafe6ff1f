"""fastio.Dataset: sharded datasets as a drop-in iterable.

URLs -> layouts (per-shard counts and byte ranges, from the index or
metadata) -> this participant's part of the epoch, in windows
(:mod:`fastio.plan`) -> reads through one :class:`fastio.Reader` stream -> the
format decodes -> samples or batches, in each window's permutation
(:mod:`fastio.dataset._units`). The dataset runs its own loop
(:mod:`fastio.dataset._delivery`); the fairness monitor observes it and, with
``balance="steal"``, decides which units each worker reads; the tuner sets the
reader's knobs. The epoch cursor is the one writer of the position, the error
policy of what was skipped.

With torch installed the class is a ``torch.utils.data.IterableDataset``; each
DataLoader worker then reads its own part of the rank's samples.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import hashlib
import math
import os
import threading
import weakref
from multiprocessing import util
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from fastio import _native
from fastio._errors import ReaderClosedError, import_extra
from fastio.dataset._delivery import deliver
from fastio.dataset._layouts import ShardLayouts, stats_beside
from fastio.dataset._policy import MAX_KEPT_ERRORS, ErrorPolicy
from fastio.dataset._reads import Read, SampleReads
from fastio.dataset._spill import make_spill
from fastio.dataset._units import read_part
from fastio.fairness._monitor import FairnessMonitor
from fastio.formats._index import dataset_index_location
from fastio.formats._layout import Layout
from fastio.formats._records import own_bytes_as
from fastio.formats._shards import format_for_url, format_options, make_format, shard_urls
from fastio.plan._assignment import part_bounds
from fastio.plan._cursor import EpochCursor, Start
from fastio.plan._ledger import EpochLedger
from fastio.plan._part import make_part
from fastio.plan._participant import Participant, current_rank, current_worker, job_run
from fastio.plan._resume import (
    STATE_VERSION,
    check_plan,
    collect_states,
    merge_states,
    plan_fingerprint,
    remaining_samples,
)
from fastio.plan._windows import Run
from fastio.reader._reader import Reader
from fastio.shared._collector import collector_paused
from fastio.shared._heap import keep_heap
from fastio.shared._inherited import freeze_inherited, in_dataloader_worker
from fastio.shared._mapped import mark, marked
from fastio.shared._sent import SentStates, received
from fastio.sources._objects import is_remote, local_path
from fastio.spec._dataset import DatasetSpec, TieringSettings, TierSettings

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from fastio.cache._cache import ShardCache
    from fastio.dataset._batching import BatchSchema
    from fastio.dataset._delivery import Observer
    from fastio.dataset._steal import StealingRun
    from fastio.dataset._stream import StreamPass
    from fastio.plan._part import Part
    from fastio.reader._tuning import ReaderTuning, WorkersTuners
    from fastio.spec._dataset import OnError, Remainder
    from fastio.spec._fairness import FairnessSettings
    from fastio.spec._reader import ReaderSettings
    from fastio.spec._tuner import TunerSettings
    from fastio.tiering import Tiering

__all__ = ["Batches", "Dataset", "MapStyle"]

# Tuners a forked DataLoader worker inherited, kept: closing or collecting
# one would close its study's connection, which is its parent's.
_INHERITED_TUNINGS: list[ReaderTuning] = []


def _rebatch(units: Iterator[Any], batch_size: int, drop_last: bool, cursor: EpochCursor
             ) -> Iterator[Any]:  # fmt: skip
    """:func:`~fastio.dataset._batching.rebatch`, its module loaded at the first
    batch: a pass of samples never needs it."""
    from fastio.dataset._batching import rebatch

    return rebatch(units, batch_size, drop_last, cursor)


def _workers_tuners() -> WorkersTuners:
    from fastio.reader._tuning import WorkersTuners  # where the spec tunes only

    return WorkersTuners()


if TYPE_CHECKING:
    _Base = object
    _MapBase = object
else:
    try:  # real torch datasets where torch is installed
        from torch.utils.data import Dataset as _MapBase
        from torch.utils.data import IterableDataset as _Base
    except ImportError:  # torch is an optional extra
        _Base = _MapBase = object


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
    (``cache_policy="plan"``, or ``"lru"``), downloading the ``cache_prefetch``
    shards the plan needs next in the background. ``reader`` and further
    keywords are :class:`ReaderSettings`. Every knob is described, with its
    default and bounds, in :mod:`fastio.spec`; sizes may be given as ``"64MiB"``.

    ``on_error``: ``"raise"`` (default; the error names URL, byte offset and
    sample), ``"skip"`` (go on, count skipped samples in :meth:`stats`, log a
    summary each epoch) or ``"warn"`` (as skip, with a
    :class:`SkippedSamplesWarning` per failure).

    ``fairness``: the fairness monitor's :class:`~fastio.spec.FairnessSettings`
    (or a dict of them; ``False`` turns it off); its report is in :meth:`stats`.
    ``tune=True`` (or :class:`~fastio.spec.TunerSettings`, or a dict of them)
    tunes ``outstanding_requests`` and ``read_size`` online.

    ``tiering`` (a :class:`fastio.tiering.Tiering`, or its settings) places
    intermediate files by predicted I/O density: shuffle windows larger than
    ``shuffle_memory`` spill to a tier file, with ``cache_bytes`` the shard
    cache keeps its copies in the tiers' directories, each where the policy
    puts it, and without ``index_dir`` the indexes of remote shards (and of
    shards in read-only folders) go where it puts them too.

    Raises TypeError or ValueError for a bad knob (naming it), and the
    reader's or the format's errors for shards that cannot be indexed.
    """

    def __init__(
        self,
        urls: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        format: str | None = None,
        *,
        shuffle: bool = True,
        seed: int = 0,
        shuffle_buffer: int | str = 32 << 20,
        shuffle_shards: int = 8,
        rank: int | None = None,
        world_size: int | None = None,
        remainder: Remainder = "exact",
        batch_size: int | None = None,
        handoff_memory: int | str = 32 << 20,
        on_error: OnError = "raise",
        columns: Sequence[str] | None = None,
        record_size: int | str | None = None,
        verify: bool = True,
        example: bool = True,
        index: str | os.PathLike[str] | None = None,
        index_dir: str | os.PathLike[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        cache_bytes: int | str | None = None,
        cache_policy: Literal["plan", "lru"] = "plan",
        cache_prefetch: int = 2,
        reader: ReaderSettings | dict[str, Any] | None = None,
        fairness: FairnessSettings | dict[str, Any] | bool | None = None,
        shuffle_memory: int | str | None = None,
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
        if not isinstance(urls, (str, bytes)) and not hasattr(urls, "__fspath__"):
            urls = list(urls)
        spec = DatasetSpec.from_keywords(
            urls, format=format, shuffle=shuffle, seed=seed, shuffle_buffer=shuffle_buffer,
            shuffle_shards=shuffle_shards, rank=rank, world_size=world_size, remainder=remainder,
            batch_size=batch_size, handoff_memory=handoff_memory, on_error=on_error,
            columns=columns, record_size=record_size,
            verify=verify, example=example, index=index, index_dir=index_dir,
            storage_options=storage_options,
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
        """Opens the dataset; where that fails, what it had made so far (the
        reader's threads, descriptors and connections, the shard cache's
        connection) is released before the error is raised."""
        self._reader: Reader | None = None
        self._tuning: ReaderTuning | None = None
        self.cache: ShardCache | None = None
        self._sent = SentStates()
        try:
            with collector_paused():
                self._open(spec, tiering)
        except BaseException:
            self.close()
            raise

    def _open(self, spec: DatasetSpec, tiering: Tiering | None) -> None:
        self.spec = spec
        if tiering is None and spec.tiering.enabled:
            tiering = _tiering_of(spec.tiering)
        self.storage_options = dict(spec.storage_options)
        self._spill = make_spill(spec.tiering.shuffle_memory, tiering)
        self.cache = _make_cache(spec, tiering)
        urls = spec.urls
        self.urls = shard_urls(urls if isinstance(urls, str) else list(urls), spec.format,
                               self.storage_options)  # fmt: skip
        if not self.urls:
            raise ValueError(f"no shards: {urls!r} names no URL")
        # (Absolute normal paths, told in one native pass, are never remote.)
        self._remote = not _native.normal_paths(self.urls) and any(map(is_remote, self.urls))
        # Local shards are statted (on another core, where many) while the rest
        # of the dataset is set up.
        statted = None if self._remote else stats_beside(self.urls)
        self.format = spec.format or _format_of(self.urls[0])
        options = spec.format_options
        placement = tiering if options.index_dir is None else None
        self._format = make_format(self.format, **format_options(
            self.format, options.columns, options.record_size, options.verify, options.example,
            options.index_dir, placement,
        ))  # fmt: skip
        split = spec.split
        self._explicit_rank = None if split.rank is None else (split.rank, split.world_size or 1)
        self._cursor = EpochCursor()
        self._epochs = EpochLedger()  # see _ledger
        self._home = os.getpid()  # the process whose group of readers this copy belongs to
        self._policy = ErrorPolicy(spec.on_error)
        self._stealing: StealingRun | None = None
        self._worker_tuners = _workers_tuners() if spec.tuner.enabled else None
        self._history: dict[str, Any] | None = None  # the merged state a resumed pass continues
        self._remaining: np.ndarray | None = None  # what of that epoch is left to read
        self._pass_batch_size = spec.split.batch_size
        self._pass_finished = False  # whether the last pass's loop ended with all its part
        self._batch_schema: BatchSchema | None = None  # Arrow batches' columns, once batched
        self.fairness = FairnessMonitor(spec.fairness, self.urls, spec.shuffle.seed)
        # A never-seen remote dataset's first reads: the first shards this
        # process would stream (where it is a DataLoader worker's parent, its
        # workers' differ: what it asked about then goes unused).
        first = None
        if self._remote:
            from fastio.plan._stream import stream_shards  # where whole shards may stream

            first = stream_shards(len(self.urls), None, spec.shuffle, self._ledger.first_epoch(),
                                  self._participant())  # fmt: skip
        self._shards = ShardLayouts(
            self.urls, self._format, lambda: self.reader, self._policy,
            spec.format_options.index, self.storage_options, self.cache, statted, first,
        )  # fmt: skip
        self.layouts = self._shards.layouts
        # Not indexed yet: the first epoch streams whole shards, unless the split
        # needs every rank's count from its start (equal counts across ranks).
        self._first_streams = not self._shards.known
        self._index_for_equal_counts()
        self._stream: StreamPass | None = None
        # Remote objects' sizes are not in it: a never-seen one's is learned
        # as it is read, so a state saved then resumes where it is known.
        self._plan_made: dict[str, Any] | None = None
        self._plan_sizes: list[int] | None = self._shards.local_sizes()
        self._reads = SampleReads(self._known, self._format, lambda: self.reader, self._policy)
        self._reads.on_changed = self._shards.forget

    @property
    def _plan(self) -> dict[str, Any]:
        """What a saved state's order depends on (see :func:`plan_fingerprint`),
        from the shards' sizes as the dataset was opened: made when a state is
        first saved or loaded (its digest of every size is not needed before)."""
        if self._plan_made is None:
            assert self._plan_sizes is not None
            options = self.spec.format_options
            self._plan_made = plan_fingerprint(self._plan_sizes, self.format, {
                "columns": None if options.columns is None else list(options.columns),
                "record_size": options.record_size, "example": options.example,
                "verify": options.verify}, self.spec.shuffle, self.remainder)  # fmt: skip
            self._plan_sizes = None
        return self._plan_made

    # ---- the spec's knobs ------------------------------------------------------------

    @property
    def settings(self) -> ReaderSettings:
        """The reader's knobs as configured (the tuner may move the live reader's)."""
        return self.spec.reader

    @property
    def shuffle(self) -> bool:
        return self.spec.shuffle.enabled

    @property
    def seed(self) -> int:
        return self.spec.shuffle.seed

    @property
    def remainder(self) -> Remainder:
        return self.spec.split.remainder

    @property
    def on_error(self) -> OnError:
        return self.spec.on_error

    # ---- setup ---------------------------------------------------------------------

    @property
    def reader(self) -> Reader:
        """This process's reader (made on first use, and anew after :meth:`close`)."""
        if self._reader is None or self._reader.closed:
            self._reader = Reader(self.spec.reader, storage_options=self.storage_options,
                                  cache=self.cache)  # fmt: skip
            # A window (the shuffle buffer, plus the unit that crosses its end)
            # of Arrow record batches decoded in place keeps its reader buffers,
            # each up to twice its bytes (buffers come in powers of two).
            self._reader.consumer_holds = 2 * self.spec.shuffle.buffer
            # Samples held for a window (or a batch) to be gathered are the
            # shuffle buffer's memory, not read-ahead.
            self._reader.consumer_window = self.spec.shuffle.buffer
            if self._tuning is not None:
                self._tuning.close()
            self._attach_tuning()
            shards = self.__dict__.get("_shards")  # None while the shards are first opened
            if shards is not None:
                shards.arm(self._reader)
        elif self._tuning is not None and self._tuning.pid != os.getpid():
            # A forked DataLoader worker: the parent's tuner thread is not
            # here, and its study's connection is the parent's (kept, never
            # closed here). The worker's reader gets a tuner of its own.
            _INHERITED_TUNINGS.append(self._tuning)
            self._attach_tuning()
        # DataLoader workers share the link: each holds its share of the
        # remote budget (a reader inherited through fork included).
        settings = self.spec.reader
        share = max(settings.memory_budget, settings.remote_memory_budget // current_worker()[1])
        if self._reader.remote_memory_budget != share:
            self._reader.remote_memory_budget = share
        return self._reader

    @property
    def _ledger(self) -> EpochLedger:
        """The epochs of the passes of this process and its DataLoader workers
        (see :meth:`_rehome`)."""
        self._rehome()
        return self._epochs

    def _rehome(self) -> None:
        """A dataset made in another process and handed to this one, which is
        none of its DataLoader workers (a rank that ``ddp_spawn`` or
        ``torch.multiprocessing.spawn`` started with the dataset its parent
        made), reads as a rank of its own: its epochs, and what its own
        workers skip and tune, are this process's and its workers', from the
        maker's next epoch on (each finds the same files on its own: see
        :meth:`~fastio.shared._mapped.OwnedFile.regrouped`). Shared, the ranks took each
        other's epochs (rank 0 read epochs 0, 2, 4 and rank 1 epochs 1, 3, 5)."""
        # The group: this process, or for a DataLoader worker the process that
        # started it (a rank that may not have used the dataset itself before):
        # the one that handed the dataset over where it was unpickled here
        # (spawn, forkserver), else the parent it was forked from.
        group = os.getpid()
        if in_dataloader_worker():
            unpickled_here = self.__dict__.get("_received_in") == os.getpid()
            group = self.__dict__.get("_handed_by", 0) if unpickled_here else os.getppid()
        if self.__dict__.get("_home", group) == group:
            return
        self._home = group
        self._epochs = self._epochs.regrouped(group)
        self._policy.workers = self._policy.workers.regrouped(group)
        if self._worker_tuners is not None:
            self._worker_tuners = self._worker_tuners.regrouped(group)

    def _attach_tuning(self) -> None:
        """The reader's tuner, where the spec tunes; in a DataLoader worker,
        its summary goes to the process that made the dataset at each of its
        decisions (see :meth:`_report_tuning`)."""
        assert self._reader is not None
        if not self.spec.tuner.enabled:  # and the tuners' module stays unloaded
            self._tuning = None
            return
        from fastio.reader import _tuning

        worker = in_dataloader_worker() and self._worker_tuners is not None
        report = (lambda _: self._report_tuning()) if worker else None
        self._tuning = _tuning.attach(self._reader, self.spec.tuner, self.urls, report)

    def _report_tuning(self) -> None:
        """This worker's tuner's summary, to the process that made the dataset."""
        tuning, reports = self._tuning, self._worker_tuners
        if tuning is not None and reports is not None and in_dataloader_worker():
            with contextlib.suppress(OSError):  # a report lost costs only the report
                reports.put(current_worker()[0], tuning.summary())

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        rank = current_rank()
        # The rank this process is, for a spawned DataLoader worker (see _rank).
        state["_handed_rank"] = rank if rank != (0, 1) else self.__dict__.get("_handed_rank")
        state["_handed_by"] = os.getpid()  # the group of a worker started here (see _rehome)
        state["_plan_made"], state["_plan_sizes"] = self._plan, None  # made once, not per worker
        state["_reader"] = None  # each process makes its own
        state["_tuning"] = None  # and tunes its own
        del state["_reads"]  # which reads through this copy's reader
        del state["layouts"]  # the shards' list, which they pickle (see ShardLayouts)
        del state["_sent"]
        return self._sent.state(state)  # a spawned worker's through a file where large

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(received(state))
        self._received_in = os.getpid()
        self._sent = SentStates()
        self.layouts = self._shards.layouts
        self._shards.reader = lambda: self.reader
        self._reads = SampleReads(self._known, self._format, lambda: self.reader, self._policy)
        self._reads.on_changed = self._shards.forget

    def as_rank(self, rank: int, world_size: int) -> Dataset:
        """A dataset that reads ``rank``'s part of ``world_size`` (with
        ``remainder``), for frameworks that run each part as a task of their
        own (Ray's read tasks): it shares this dataset's layouts (nothing is
        indexed again) but has its own epochs, position, error counts and
        reader, so that parts read in one process or many never take each
        other's epoch. Index first (:meth:`index`) when the parts must be
        known before they are read. Raises ValueError for a rank outside
        ``0..world_size - 1``."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in 0..{world_size - 1}, not {rank}")
        spec = dataclasses.replace(self.spec, split=dataclasses.replace(
            self.spec.split, rank=rank, world_size=world_size))  # fmt: skip
        part = type(self).__new__(type(self))
        state = self.__getstate__()
        policy = ErrorPolicy(spec.on_error)
        shards = copy.copy(self._shards)  # the same layouts; its reader and policy the part's
        shards.policy = policy
        state.update(
            spec=spec, _explicit_rank=(rank, world_size), _cursor=EpochCursor(),
            _epochs=EpochLedger(), _policy=policy, _shards=shards, _stealing=None,
            _history=None, _remaining=None, _stream=None,
            _pass_batch_size=spec.split.batch_size,
            fairness=FairnessMonitor(spec.fairness, self.urls, spec.shuffle.seed),
        )  # fmt: skip
        part.__setstate__(state)
        part._index_for_equal_counts()
        return part

    def _index_for_equal_counts(self) -> None:
        """Where ranks must have equal counts from the start (``remainder``
        drop or pad, more than one rank), index what is not yet: the first
        epoch cannot stream."""
        if self._first_streams and self.remainder != "exact" and self._rank()[1] > 1:
            self._shards.complete()
            self._first_streams = False

    def close(self) -> None:
        """Release the reader (its descriptors, buffers and loop thread) and the
        shard cache's connection; using the dataset again makes them anew."""
        # The tuning's summary stays readable; the cache (its index connection
        # and pins) is reopened on use. What an open that failed did not make
        # yet is not there.
        # Each part is released even where one before it fails (a cache whose
        # filesystem went read-only); the first failure is raised after.
        failure: BaseException | None = None
        for name in ("_tuning", "_reader", "cache", "fairness", "_epochs", "_sent",
                     "_worker_tuners"):  # fmt: skip
            made = self.__dict__.get(name)
            if made is None:
                continue
            try:
                made.close()
            except Exception as error:
                failure = failure or error
        if failure is not None:
            raise failure

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- sizes and assignment ------------------------------------------------------

    @property
    def _known(self) -> Sequence[Layout]:
        """The layouts, where every one is known (or will be, before they are
        read: :meth:`index`); the one list, changed in place."""
        return cast("Sequence[Layout]", self.layouts)

    @property
    def counts(self) -> list[int]:
        """Samples per shard, in URL order. Raises TypeError while shards are not
        indexed yet (see :meth:`index`)."""
        return self._shards.counts()

    @property
    def bases(self) -> np.ndarray:
        """Each shard's first global sample number (positions in URL order), then
        the total. Raises TypeError while shards are not indexed yet."""
        return np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)

    @property
    def total(self) -> int:
        """Samples in the whole dataset (all ranks). Raises TypeError while
        shards are not indexed yet."""
        return sum(self.counts)

    def index(self, progress: Callable[[int], None] | None = None) -> Dataset:
        """Index every shard not indexed yet, scanning ``outstanding_requests``
        of them at once (a never-seen dataset's first epoch does this on the
        way instead), so that counts, ``len``, :meth:`order` and ``[i]`` are
        known, and the first epoch reads windows of samples instead of
        streaming whole shards: call it on every rank or none. ``progress(1)``
        is called after each shard scanned. Returns the dataset."""
        self._shards.complete(progress=progress)
        self._first_streams = False
        return self

    def save_index(
        self,
        location: str | os.PathLike[str] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> str:
        """Index every shard (:meth:`index`) and write the dataset index: one
        file that every rank, worker and node then reads with one request
        instead of finding any shard's index. ``location``: a path or URL;
        default ``dataset.fastio-index.npz`` in the shards' folder (found
        there without being named). Returns where it went. Raises ValueError
        where a shard cannot be indexed (damaged, or a format without
        indexes), OSError where the file cannot be written (before any shard
        is scanned where it is an HTTP URL: HTTP serves, it takes no writes)."""
        where = (os.fspath(location) if location is not None
                 else dataset_index_location(self.urls))  # fmt: skip
        if where.startswith(("http://", "https://")):
            raise OSError(errno.EROFS, "a dataset index cannot be written over HTTP: name a "
                          "local path or a store that takes writes (save_index(location); "
                          "fastio-bench index --index)", where)  # fmt: skip
        self.index(progress)
        self._shards.dataset_index().save(where, self.storage_options)
        return where

    @property
    def epoch(self) -> int:
        """The epoch of the running (or last) pass in any process of this rank,
        or the next one's before any."""
        current = self._ledger.current()
        return self._ledger.next_epoch() if current is None else current

    def _rank(self) -> tuple[int, int]:
        if self._explicit_rank is not None:
            return self._explicit_rank
        rank = current_rank()
        handed: tuple[int, int] | None = self.__dict__.get("_handed_rank")
        if rank == (0, 1) and handed is not None and in_dataloader_worker():
            # A spawned DataLoader worker of a rank whose process group it
            # cannot see (no torch.distributed there, no RANK variables under
            # ddp_spawn): the rank its parent was when it handed the dataset over.
            return handed
        return rank

    def _participant(self) -> Participant:
        return Participant.current(self._rank())

    def __len__(self) -> int:
        """Samples this rank reads per epoch (all its DataLoader workers
        together): what a DataLoader over it divides into batches. With
        ``remainder="drop"`` or ``"pad"``, the same on every rank. Raises
        TypeError while shards are not indexed yet (a DataLoader, Lightning
        and tf.data then go by the samples that come), and before a first
        epoch that streams whole shards as another rank of the job streamed
        its own (see :meth:`_first_pass_agreed`)."""
        self._index_for_equal_counts()  # ranks known now, perhaps not when it was made
        rank, world_size = self._rank()
        total = self.total
        if (world_size > 1 and not self._first_streams
                and self._cursor.pending_resume() is None
                and self._ledger.next_epoch() == self._ledger.first_epoch()
                and self._first_pass_agreed(world_size)):  # fmt: skip
            raise TypeError("this rank's first epoch streams whole shards, as another rank of "
                            "the job streamed its own: its count is known after it")  # fmt: skip
        if self.remainder == "exact":
            return total * (rank + 1) // world_size - total * rank // world_size
        return total // world_size if self.remainder == "drop" else -(-total // world_size)

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` in the next pass (then ``epoch + 1``, and so on).
        Optional: each new pass over the dataset is the next epoch by itself,
        in DataLoader workers and persistent workers too; call it in the main
        process, before iterating, to choose the epoch. A state loaded with
        :meth:`load_state_dict` of that same epoch is kept: the pass resumes
        it (a loop that sets the epoch at each start, as Lightning's, resumes
        a checkpoint taken mid-epoch); of another epoch, it is dropped."""
        self._cursor.set_epoch(epoch)
        self._ledger.set_next(int(epoch))

    def _part(self, epoch: int, participant: Participant, following: bool = False) -> Part:
        """``participant``'s part of ``epoch`` as the running pass reads it (its
        batch size; the rest of a resumed epoch), or, ``following``, of an
        epoch after it (every sample)."""
        return make_part(self._known, self.spec.shuffle, self.remainder, epoch, participant,
                         self._pass_batch_size,
                         None if following else self._remaining)  # fmt: skip

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
        participant = Participant(
            default_rank if rank is None else rank,
            default_world if world_size is None else world_size,
            worker,
            num_workers,
        )
        epoch = self.epoch if epoch is None else epoch
        self.index()
        part = make_part(self._known, self.spec.shuffle, self.remainder, epoch, participant,
                         self.spec.split.batch_size)  # fmt: skip
        return part.sample_ids(self.bases)

    # ---- state -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this iterator is: the epoch, the position in this participant's
        part (samples delivered or skipped), and the plan it follows. Small
        plain data (JSON-able); with DataLoader workers, use torchdata's
        StatefulDataLoader, which keeps one per worker."""
        cursor = self._cursor
        if not cursor.running and cursor.pending is not None:
            return copy.deepcopy(cursor.pending)
        # A pass whose loop ended, having delivered its whole part, is saved as
        # the next epoch's start: resumed, that epoch is read, not an empty rest.
        # (A DataLoader worker's state is taken with each of its batches, its
        # last before its loop ends: the workers of one save agree.)
        running = cursor.running and not (self._pass_finished and not in_dataloader_worker())
        who = cursor.participant or self._participant()
        state: dict[str, Any] = {
            "version": STATE_VERSION, "epoch": self._ledger.next_epoch(), "position": 0,
            "rank": who.rank,
            "world_size": who.world_size, "worker": who.worker, "num_workers": who.num_workers,
            "batch_size": self.spec.split.batch_size, "plan": self._plan, "history": None,
        }  # fmt: skip
        if not running and self._first_streams and state["epoch"] == self._ledger.first_epoch():
            state["streams"] = True  # its pass will stream: resumed, it streams too
        if running:
            state.update(epoch=cursor.epoch, position=cursor.position,
                         batch_size=self._pass_batch_size, history=self._history)  # fmt: skip
            if self._stealing is not None:
                state["steal"] = self._stealing.state()
            if self._stream is not None:
                state["stream"] = self._stream.state()
        return state

    def load_state_dict(self, state: Any) -> None:
        """Resume from saved state: the next pass continues that epoch without
        reading what was delivered.

        ``state`` is what :meth:`state_dict` returned, or the states of every
        participant of a save (a list of them, or each rank's
        StatefulDataLoader state): with the same world size, workers and batch
        size the epoch continues exactly as it would have; with others, the
        samples not yet delivered are split among the new ranks and workers,
        each delivered once. Raises ValueError for a state of another dataset
        or order (naming the field), or states that do not cover a layout."""
        states = collect_states(state)
        if not states and isinstance(state, dict) and "members" in state:
            states = [state]  # a merged state, as state_dict gives it back before a pass
        if not states:
            raise ValueError("no fastio dataset state found in what was given")
        for one in states:
            if one.get("version") != STATE_VERSION:
                raise ValueError(f"state version {one.get('version')}, not {STATE_VERSION} "
                                 "(saved by another version of fastio)")  # fmt: skip
            check_plan(one["plan"], self._plan)
            if one.get("steal") is not None:
                from fastio.dataset._steal import check_steal_state

                check_steal_state(one["steal"])
        saved = states[0] if len(states) == 1 else merge_states(states)
        self._stealing = None
        token = (int.from_bytes(os.urandom(8), "little") >> 2) + 1  # 62 random bits, never 0
        self._cursor.resume(copy.deepcopy(saved), int(saved["epoch"]), token)
        self._ledger.announce_resume(token)

    def _resumed(
        self, saved: dict[str, Any] | None, participant: Participant, batch_size: int | None
    ) -> tuple[dict[str, Any] | None, int, dict[str, Any] | None]:
        """Where a pass resuming ``saved`` begins: its history (the merged
        state whose rest it reads), its position and its steal state."""
        if saved is None:
            return None, 0, None
        if "members" in saved:
            return saved, 0, None
        same = (_participant_of(saved), saved.get("batch_size")) == (participant, batch_size)
        if same:
            steal = saved.get("steal")
            if steal is not None:
                from fastio.dataset._steal import check_steal_state

                steal = check_steal_state(steal)
            return saved.get("history"), int(saved["position"]), steal
        if saved["world_size"] * saved["num_workers"] == 1:
            return merge_states([saved]), 0, None
        raise ValueError(
            f"state was saved by {_participant_of(saved).describe()} (batch size "
            f"{saved.get('batch_size')}); resuming as {participant.describe()} (batch size "
            f"{batch_size}) needs the states of every rank and worker of that save: load "
            "them all (a list, or each rank's StatefulDataLoader state)"
        )

    # ---- statistics ------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Samples delivered and skipped, shards left out as unreadable,
        failures kept (up to 100) and the reader's statistics. In the process
        that made the dataset, what its DataLoader workers skipped counts too
        (the samples delivered are those this process read itself)."""
        cursor, policy = self._cursor, self._policy
        skipped, shards_skipped, errors = policy.skipped, policy.shards_skipped, policy.errors
        if not in_dataloader_worker():  # and what its DataLoader workers skipped
            samples, shards, texts = policy.workers.read(known=policy.places)
            skipped, shards_skipped = skipped + samples, shards_skipped + shards
            errors = [*errors, *texts][:MAX_KEPT_ERRORS]
        return {
            "samples": cursor.delivered, "skipped": skipped,
            "shards_skipped": shards_skipped, "errors": list(errors),
            "epoch": cursor.epoch if cursor.participant is not None else None,
            "position": cursor.position,
            "reader": self._reader.stats().as_dict() if self._reader is not None else None,
            "fairness": self.fairness.report(),
            "tuner": self._tuner_summary(),
        }  # fmt: skip

    def _tuner_summary(self) -> dict[str, Any] | None:
        """This process's tuner's summary; in the process that made the
        dataset, once its DataLoader workers tuned, theirs summed up (and its
        own among them, where it read too)."""
        own = self._tuning.summary() if self._tuning is not None else None
        reports = self._worker_tuners
        if reports is None or in_dataloader_worker():
            return own
        workers = reports.read()
        if not workers:
            return own
        if own is not None and (own["windows"] or own["first_pass_bytes"] is not None):
            workers["main"] = own
        from fastio.reader._tuning import combined

        return combined(workers)

    # ---- iteration -------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        return self._iterate(columnar=False, batch_size=0, drop_last=False)

    def batches(self, batch_size: int, *, drop_last: bool = False) -> Batches:
        """An iterable of batches of ``batch_size`` samples, one Python object per
        batch: ``pyarrow.RecordBatch`` (webdataset, tfrecord, jsonl, lines,
        parquet, arrow) or ``numpy.ndarray`` (fixed, npy), in the same order as
        iterating samples. Usable as a DataLoader dataset with ``batch_size=None``.
        Raises :class:`~fastio.MissingExtraError` for Arrow batches without
        pyarrow (the ``arrow`` extra)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        if self._format.batch_kind == "arrow":
            import_extra("pyarrow", f"batches of {self.format} shards (Arrow record batches)")
        return Batches(self, batch_size, drop_last)

    def _iterate(self, columnar: bool, batch_size: int, drop_last: bool) -> Iterator[Any]:
        def begin() -> tuple[Iterator[Any], Observer | None]:
            with collector_paused():  # the pass's plan: objects per shard, none garbage
                items, observer = self._begin(columnar, batch_size, drop_last)
            if columnar and self._format.batch_kind == "arrow":  # every column, every batch
                self._keep_schema()  # what other processes met, and what they did not
                items = self._schema().conformed(items, self._keep_schema)
            return items, observer

        def end(finished: bool) -> None:
            self._pass_finished = finished
            self._policy.iteration_ended()
            self._report_tuning()

        return deliver(begin, end)

    def _schema(self) -> BatchSchema:
        """The columns this dataset's Arrow batches have had (made at the first
        batch: a pass of samples never loads the batching module)."""
        if self._batch_schema is None:
            from fastio.dataset._batching import BatchSchema

            self._batch_schema = BatchSchema(self._format.columns_by_name)
        return self._batch_schema

    def _keep_schema(self) -> None:
        """Keep the columns the batches have had where every process of the
        dataset finds them (DataLoader workers made anew each epoch, ranks),
        joined with those kept there: no process's columns undo another's."""
        records, schema = self._shards.record_format, self._schema()
        if records is not None and schema.adopt(records.store.load_schema(self.urls)):
            records.store.save_schema(self.urls, schema.schema.serialize().to_pybytes())

    def _begin(
        self, columnar: bool, batch_size: int, drop_last: bool
    ) -> tuple[Iterator[Any], Observer | None]:
        """At the first item: the iteration's items, and what observes them."""
        self._pass_finished = False
        keep_heap()  # a window's payloads are allocated and freed together
        if in_dataloader_worker():
            self._policy.reports = True  # to the process that made the dataset
            self._close_at_exit()
            freeze_inherited()
            from fastio.shared._handoff import HandedBytes, hand_off  # workers' only

            capacity = self.spec.split.handoff_memory
            hand_off(capacity, arrow=columnar and self._format.batch_kind == "arrow")
            own_bytes_as(HandedBytes if capacity else bytes)
        participant = self._participant()
        # Made before torch.distributed was initialized (a DataModule's
        # __init__), it saw one rank: drop and pad need every rank's count.
        self._index_for_equal_counts()
        cursor = self._cursor
        epoch, resumes = self._ledger.begin(participant.worker, cursor.pending_resume())
        saved = cursor.pending if resumes else None
        if saved is not None and "members" in saved and _streamed(saved):
            saved = _own_stream(saved, participant)
        streams = False  # the pass streams, as its epoch did where the state was saved
        if saved is not None and "stream" not in saved and _at_a_start(saved):
            # Saved before a pass began: that pass from its start (a stream's
            # too: its participant's shards are its own, not a part of the
            # plan that an index made since would give).
            streams, saved = bool(saved.get("streams")), None
        self._stealing = self._stream = None
        first_streams = False
        if saved is None and epoch == self._ledger.first_epoch():
            first_streams = self._first_streams
            if participant.world_size > 1:
                first_streams = self._first_pass_agreed(participant.world_size)
        if (saved is not None and "stream" in saved) or (saved is None and (
            streams or first_streams
        )):  # fmt: skip
            return self._begin_stream(participant, epoch, saved, columnar, batch_size, drop_last)
        self._shards.complete()  # indexes the streamed first epoch left, or scans
        batch_size_of_part = batch_size if columnar else self.spec.split.batch_size
        history, position, steal_state = self._resumed(saved, participant, batch_size_of_part)
        cursor.begin(participant, Start(epoch, position))
        self._history, self._pass_batch_size = history, batch_size_of_part
        self._remaining = remaining_samples(history, self._known, self.spec.shuffle,
                                            self.remainder)  # fmt: skip
        part = self._part(epoch, participant)
        later = epoch != self._ledger.first_epoch()  # the first pass reads what open just saw
        shards = part.shards()
        self._shards.ask_ahead(shards, anew=later)
        if later:
            self._check_unchanged(shards)
        steals = self.fairness.steals(participant)
        if steals and steal_state is None and position:
            raise ValueError("state was saved without balance='steal' (or with one DataLoader "
                             "worker): resume it the same way")  # fmt: skip
        if not steals and steal_state is not None:
            raise ValueError("state was saved with balance='steal' and more than one DataLoader "
                             "worker: resume it the same way")  # fmt: skip
        # With steal a resumed position is inside some worker's unit: the share
        # counts whole parts, and moves with each stolen unit.
        assigned = part.count - (0 if steals else position)
        observer = self.fairness.observe(participant, epoch, assigned, self.reader,
                                         lambda: cursor.delivered)  # fmt: skip
        self._expect(lambda: sum(self._shards.sizes) * part.count // max(1, self.total))
        if steals:
            return self._stolen(part, steal_state, columnar, batch_size, drop_last), observer
        units = self._read(part, position, columnar)
        return (_rebatch(units, batch_size, drop_last, cursor) if columnar else units), observer

    def _close_at_exit(self) -> None:
        """Close this copy as its process (a DataLoader worker) exits, before
        the interpreter waits for its threads: a loader dropped mid-epoch
        then stops the worker's downloads and requests at once (their
        partial files removed, its cache lock let go) rather than holding
        its exit until torch kills it."""
        if self.__dict__.get("_closing_in") == os.getpid():
            return
        self._closing_in = os.getpid()
        util.Finalize(self, _close_copy, args=(weakref.ref(self),), exitpriority=20)

    def _begin_stream(
        self, participant: Participant, epoch: int, saved: dict[str, Any] | None,
        columnar: bool, batch_size: int, drop_last: bool,
    ) -> tuple[Iterator[Any], Observer | None]:  # fmt: skip
        """A pass over whole shards not indexed yet (see :mod:`fastio.dataset._stream`)."""
        from fastio.dataset._stream import StreamPass, check_stream_state  # a first epoch's only
        from fastio.plan._stream import stream_shards

        records = self._shards.record_format
        assert records is not None  # only record formats have shards without a layout
        resume = None
        position = 0
        if saved is not None:
            if _participant_of(saved) != participant:
                raise ValueError(
                    f"state was saved in a streamed first epoch by "
                    f"{_participant_of(saved).describe()}: it resumes as the same participant "
                    f"only, not as {participant.describe()} (index the dataset to resume with "
                    "another layout)"
                )
            resume, position = check_stream_state(saved["stream"]), int(saved["position"])
        cursor = self._cursor
        cursor.begin(participant, Start(epoch, position))
        self._history, self._remaining = None, None
        # Remote objects are shared by number: their sizes may not be known.
        sizes = None if self._remote else self._shards.sizes
        shards = stream_shards(len(self.urls), sizes, self.spec.shuffle, epoch, participant)
        self._shards.ask_unknown(shards)
        if self.cache is not None:
            self.cache.plan([self.urls[shard] for shard in shards])
        stream = self._stream = StreamPass(
            shards, self.urls, records, lambda: self.reader, self._policy, cursor,
            self.spec.shuffle, epoch, participant, resume, self._shards.learned,
            self.spec.tiering.shuffle_memory,
        )  # fmt: skip
        # Rates are per share of the work: here bytes (or shards), the same
        # for every worker.
        assigned = len(shards) if sizes is None else sum(sizes[shard] for shard in shards)
        observer = self.fairness.observe(participant, epoch, assigned, self.reader,
                                         lambda: cursor.delivered)  # fmt: skip
        self._expect(lambda: self._shards.size_of(shards), soon=not self._shards.sized(shards))
        items = stream.items(columnar)
        return (_rebatch(items, batch_size, drop_last, cursor) if columnar else items), observer

    def _first_pass_agreed(self, world_size: int) -> bool:
        """Whether the first epoch streams, as every rank of this machine
        reading the dataset in this job decides it: a rank that found the
        shards indexed (by another rank's first epochs, in the index folder
        they share) while a rank that found them never seen still runs,
        streams as that one does, else the two would split the epoch apart
        (samples lost and read twice). The rank that streams leaves a mark,
        which lives as long as its process (its DataLoader workers' parent)."""
        # (A mark of another job's first epoch is not this one's.)
        named = "\n".join([*self.urls, str(world_size), *job_run()])
        key = hashlib.sha256(named.encode()).hexdigest()
        if self._first_streams:
            mark("firstpass", key, self._home)
            return True
        return marked("firstpass", key)

    def _expect(self, nbytes: Callable[[], int], soon: bool = False) -> None:
        """The tuner's first pass bounds its trials (see ReaderTuning.expect);
        the pass's size is worked out only for a dataset that tunes. With
        ``soon``, on a thread of its own, as the answers it waits for come
        (the sizes of remote objects not asked about at open): the pass's
        reads do not wait for them all."""
        tuning = self._tuning
        if tuning is None or tuning.first_pass_bytes is not None:
            return
        if not soon:
            tuning.expect(nbytes())
            return

        def expect() -> None:
            with contextlib.suppress(ReaderClosedError):  # the dataset closed meanwhile
                tuning.expect(nbytes())

        threading.Thread(target=expect, daemon=True, name="fastio-expect").start()

    def _check_unchanged(self, shards: list[int]) -> None:
        """Shards rewritten or replaced since their layouts were found raise
        :class:`fastio.ShardChangedError`; under skip/warn their samples are
        skipped instead (counted), every epoch, as the other participants'
        plans still hold them."""
        for shard in self._shards.changed(sorted(set(shards))):
            error = self._shards.stale_error(shard)
            if not self._policy.tolerates:
                raise error
            self._reads.failing[shard] = error

    def _read(self, part: Part, position: int, columnar: bool, stop: int | None = None
              ) -> Iterator[Any]:  # fmt: skip
        if self.cache is not None:
            self._plan_cache(part, position, stop)
        return read_part(part, position, self._reads, self._cursor, self._spill, columnar, stop)

    def _stolen(self, part: Part, resume: dict[str, Any] | None, columnar: bool,
                batch_size: int, drop_last: bool) -> Iterator[Any]:  # fmt: skip
        """Units shared with the rank's other workers (``balance="steal"``)."""
        if columnar and drop_last:
            raise ValueError(
                "batches(drop_last=True) with balance='steal' would drop rows at every unit's "
                "end: use drop_last=False, or balance='budget'"
            )
        me = part.participant
        parts = [part if worker == me.worker else
                 self._part(part.epoch, dataclasses.replace(me, worker=worker))
                 for worker in range(me.num_workers)]  # fmt: skip
        unit_samples = [[window.count for window in p.windows] for p in parts]
        from fastio.dataset._steal import StealingRun  # balance="steal" only

        run = self._stealing = StealingRun(unit_samples, resume, self._cursor)
        claims = self.fairness.claims(me, part.epoch, unit_samples, run.done, run.resumed_unit,
                                      resume is not None)  # fmt: skip

        def read(owner: int, position: int, stop: int) -> Iterator[Any]:
            units = self._read(parts[owner], position, columnar, stop)
            return _rebatch(units, batch_size, False, self._cursor) if columnar else units

        return run.run(claims.segments(), read)

    def _plan_cache(self, part: Part, position: int, stop: int | None) -> None:
        """Tell the shard cache the order shards are needed in: the rest of this
        part, then the next epoch's (so that eviction keeps what is used soonest)."""
        assert self.cache is not None
        first, _ = part.locate(position)
        rest = dataclasses.replace(part, windows=part.windows[first:stop])
        following = self._part(part.epoch + 1, part.participant, following=True)
        shards = rest.shards() + following.shards()
        order = [self.urls[s] for i, s in enumerate(shards) if i == 0 or shards[i - 1] != s]
        self.cache.plan(order)

    # ---- random access ---------------------------------------------------------------

    def __getitem__(self, index: int) -> Any:
        """Sample ``index`` of this rank's share in stored order: ``dataset[i]``
        for ``i`` in ``range(len(dataset))`` are the samples ``len`` counts
        (with one rank, the whole dataset in URL order). For an index sampler
        that splits ranks itself (DistributedSampler, grain), use
        :meth:`map_style`. Indexes shards not indexed yet (:meth:`index`).
        Raises IndexError out of range."""
        self.index()
        length = len(self)
        if not -length <= index < length:
            raise IndexError(f"sample {index} out of range for this rank's {length} samples")
        rank, world_size = self._rank()
        first, _ = part_bounds(self.total, rank=rank, world_size=world_size,
                               remainder=self.remainder)  # fmt: skip
        return self._sample((first + index % length) % self.total)

    def map_style(self) -> MapStyle:
        """The whole dataset as a map-style dataset: ``len`` is every sample and
        ``[i]`` sample ``i`` in URL order, on every rank (see :class:`MapStyle`)."""
        return MapStyle(self)

    def _sample(self, number: int) -> Any:
        """Global sample ``number``, read on its own through the index."""
        self.index()
        bases = self.bases
        shard = int(np.searchsorted(bases, number, side="right")) - 1
        sample = number - int(bases[shard])
        read = Read(0, Run(shard, sample, sample + 1, 0), sample, sample + 1)
        for _, samples in self._reads.execute([read], False, ErrorPolicy("raise")):
            decoded = list(samples)  # to its end: a read cut short raises
            return decoded[0]
        raise IndexError(number)  # unreachable: execute yields once or raises

    def __repr__(self) -> str:
        samples = self.total if self._shards.known else "unknown (not indexed yet)"
        return (f"<fastio.Dataset {self.format} shards={len(self.urls)} samples={samples} "
                f"shuffle={self.shuffle} seed={self.seed}>")  # fmt: skip


class Batches(_Base):
    """``dataset.batches(n)``: iterate for batches; a DataLoader dataset (use
    ``batch_size=None``) whose workers split the rank's samples."""

    def __init__(self, dataset: Dataset, batch_size: int, drop_last: bool) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[Any]:
        return self.dataset._iterate(True, self.batch_size, self.drop_last)

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dataset.load_state_dict(state)


class MapStyle(_MapBase):
    """A map-style view of a whole :class:`Dataset` (``dataset.map_style()``):
    ``len`` is every sample of every rank, ``[i]`` sample ``i`` in URL order.
    For index samplers that split the indices among ranks themselves
    (``DistributedSampler``, grain's ``IndexSampler`` with sharding); a torch
    map-style ``Dataset`` where torch is installed."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return self.dataset.total

    def __getitem__(self, index: int) -> Any:
        total = self.dataset.total
        if not -total <= index < total:
            raise IndexError(f"sample {index} out of range for {total} samples")
        return self.dataset._sample(index % total)


def _empty_layout(url: str) -> Layout:
    return Layout(url, 0, 0, np.zeros(1, np.int64), np.zeros(0, np.int64))


def _at_a_start(state: dict[str, Any]) -> bool:
    """Whether ``state`` was saved where nothing of its epoch was passed yet."""
    return (not state.get("position") and "members" not in state
            and not state.get("history") and not state.get("steal"))  # fmt: skip


def _streamed(merged: dict[str, Any]) -> bool:
    """Whether merged states were saved in a streamed first epoch."""
    return any("stream" in member or "streams" in member for member in merged["members"])


def _own_stream(merged: dict[str, Any], participant: Participant) -> dict[str, Any]:
    """``participant``'s own state among merged states saved in a streamed
    first epoch (its stream resumes as it was, in that participant only).
    Raises ValueError where the layout is another."""
    layout = (int(merged["world_size"]), int(merged["num_workers"]))
    own = [member for member in merged["members"]
           if (int(member["rank"]), int(member["worker"])) == (participant.rank,
                                                                participant.worker)]  # fmt: skip
    if layout != (participant.world_size, participant.num_workers) or not own:
        raise ValueError(
            f"states saved in a streamed first epoch ({layout[0]} ranks x {layout[1]} "
            f"workers) resume with the same world size and workers only, not as "
            f"{participant.describe()} (index the dataset to resume with another layout)"
        )
    shared = {key: value for key, value in merged.items() if key != "members"}
    return {**shared, **own[0]}


def _participant_of(state: dict[str, Any]) -> Participant:
    return Participant(int(state["rank"]), int(state["world_size"]), int(state["worker"]),
                       int(state["num_workers"]))  # fmt: skip


def _format_of(url: str) -> str:
    """The format ``url``'s extension names; a folder whose name has a dot
    (``/data/train.v2``, not taken for a folder) is said to be one."""
    try:
        return format_for_url(url)
    except ValueError:
        if not is_remote(url) and os.path.isdir(url):
            raise IsADirectoryError(
                errno.EISDIR, "a folder: name it with a trailing / for the shards in it", url
            ) from None
        if not is_remote(url) and not os.path.exists(local_path(url)):  # a typo, most likely
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", url) from None
        raise


def _make_cache(spec: DatasetSpec, tiering: Tiering | None) -> ShardCache | None:
    cache = spec.cache
    if cache.dir is None and (tiering is None or cache.max_bytes is None):
        return None
    from fastio.cache._cache import ShardCache

    folders = tiering.directories if tiering is not None else cache.dir
    assert folders is not None  # one of the two, by the test above
    assert cache.max_bytes is not None  # the spec checks that a folder comes with a limit
    return ShardCache(folders, cache.max_bytes, cache.policy, placement=tiering,
                      prefetch=cache.prefetch)  # fmt: skip


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


def _close_copy(dataset: weakref.ref[Dataset]) -> None:
    """Close a worker's copy of a dataset as the worker exits (if it lives)."""
    made = dataset()
    if made is not None:
        with contextlib.suppress(Exception):  # exiting: what could not close goes with it
            made.close()
