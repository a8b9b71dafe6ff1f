"""Where a dataset's samples are: each shard's layout, known or still to be found.

At open, a shard's layout comes from the dataset index (one file, one
request), else the index folder (its file of this dataset's indexes kept
together, one read, else the shard's own file), else the format's own metadata where it is
cheap (Parquet and Arrow footers, ``.npy`` headers, fixed records). The
layouts of record shards found in none of these are unknown: the first epoch
streams those shards and learns them on the way (:mod:`fastio.dataset._stream`),
or :meth:`ShardLayouts.complete` scans them, many at once. What each shard
was when its layout was found (size, version, change stamp) is kept, so a
shard rewritten or replaced later is told apart before it is read. A remote
object that nothing here knows of is not asked about at open: the read that
streams it asks, in reading order, and its index keeps what it was. A remote
shard that a dataset index holds is laid out from it at once; whether it is
still that object is asked in the background, and a read that finds it
replaced fails before using any of its bytes (a bucket of thousands of
objects does not wait for an answer about each before its first sample).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fastio import _native
from fastio._errors import DecodeError, IndexFileError, ShardChangedError
from fastio.formats._index import (
    DatasetIndex,
    IndexColumns,
    dataset_index_location,
    index_columns,
    index_keys,
    indexes_of_columns,
    stamped,
)
from fastio.formats._layout import ColumnLayouts, Layout, counts_of
from fastio.formats._records import RecordFormat
from fastio.reader._reader import listed_stamps, local_stamps
from fastio.shared._collector import collector_paused
from fastio.sources._objects import is_remote
from fastio.spec._records import record

if TYPE_CHECKING:
    from collections.abc import Callable, Container, MutableSequence, Sequence

    from fastio.cache._cache import ShardCache
    from fastio.dataset._policy import ErrorPolicy
    from fastio.formats._index import ShardIndex
    from fastio.formats._layout import ShardFormat
    from fastio.reader._reader import Reader

__all__ = ["ShardLayouts"]

log = logging.getLogger("fastio")

_PREFETCH_SHARDS = 64
_ASKED_WITH_THE_INDEX = 16  # remote sizes asked while the dataset index is: one default round
# Local shards from which their stats are taken on a thread of their own
# while the dataset index is read (fewer: a thread costs more than it saves).
_STATTED_BESIDE = 256


class ShardLayouts:
    """The layouts of ``urls`` in ``shard_format`` (see the module); ``layouts``
    is one list, changed in place as layouts are learned, None where unknown."""

    def __init__(
        self,
        urls: Sequence[str],
        shard_format: ShardFormat,
        reader: Callable[[], Reader],
        policy: ErrorPolicy,
        index: str | None,
        storage_options: dict[str, Any],
        cache: ShardCache | None,
        statted: _Beside | None,
        read_first: Sequence[int] | None = None,
    ) -> None:
        """``statted``: the stats of the shards where every one is local, begun
        by the caller as soon as it knew them (see :func:`stats_beside`); None
        where some shard is remote. ``read_first``: the shards this process
        would read first (their remote objects are asked about while the
        dataset index is looked for)."""
        self.urls = list(urls)
        # Whether any shard is remote: where none is, what only remote objects
        # need (their answers, their checks) is not asked of each shard.
        self.remote = statted is None
        self.format = shard_format
        self._records = shard_format if isinstance(shard_format, RecordFormat) else None
        self.reader = reader
        self.policy = policy
        self.layouts: MutableSequence[Layout | None] = []
        self._indexes: list[ShardIndex | None] | None = []  # see indexes
        # Where every shard is as the dataset index holds it: what ``indexes``
        # are made from when first asked for (a first sample needs none).
        self._columns: IndexColumns | None = None
        self.sizes: list[int] = []
        self._stamps: list[tuple[int, int, int] | None] | None = []  # see stamps
        self._stamp_rows: np.ndarray | None = None  # what stamps are made from, where None
        opener = reader()
        # What every shard's open asks, asked once: a dataset may have thousands.
        # Many local files are statted on another core (``statted``) while this
        # one names them and reads and parses the dataset index (the stats hold
        # no GIL).
        keys = index_keys(self.urls)  # how indexes name the shards
        # The first remote objects' sizes are asked for while the dataset index
        # is (a small dataset not indexed yet waits for one round trip, not
        # two); what the index holds is laid out from it without waiting for
        # them, and checked when a read opens it.
        ahead = range(len(self.urls)) if read_first is None else read_first
        opener.stat_ahead([self.urls[shard] for shard in ahead[:_ASKED_WITH_THE_INDEX]])
        columns = self._dataset_index(index, storage_options, keys)
        if cache is not None:  # shards without an index are read in this order
            cache.plan(self.urls)
        records = self.record_format
        kept = (columns is None or not columns.urls) and index is None and records is not None
        # Indexes that a dataset index holds with an older change stamp (the
        # shards were copied, or their owner or mode changed), found fresh by
        # content: kept in the index folder with the stamp of now, and asked
        # for there first next time, so that each open does not read every
        # shard again. The index folder's file, read at most once.
        self._restamped = 0
        self._kept: dict[str, ShardIndex] | None = None
        known: dict[str, ShardIndex] = {}
        if kept and records is not None:  # what an earlier dataset over these shards left
            known = self._kept = records.store.load_set(self.urls, keys)
        self._reused = 0  # shards whose index came from ``known``
        # Of the shards from the first that ``known`` does not lay out as it
        # is now, those whose own index file the index folder holds: asked
        # about all at once then (see :meth:`IndexStore.holding`), not by
        # opening a file for each (a never-seen dataset of 2,000 shards
        # spent 16 ms failing to open them).
        self._held: set[str] | None = None
        reusable = None if records is None else records.locator().reusable
        if columns is None or statted is None or not self._all_as_indexed(columns, keys, statted,
                                                                          reusable):  # fmt: skip
            if columns is not None:
                known = DatasetIndex(columns.indexes()).lookup()
            stamps: Sequence[tuple[int, int, int] | OSError | None]
            if statted is not None:
                stamps = listed_stamps(statted.result(), self.urls)
            else:  # remote objects among them
                stamps = self._stamps_now(opener, keys, known, records, reusable)
            self._lay_out(opener, keys, stamps, known, reusable)
        self._held = self._kept = None  # asked about at open only
        self._unindexed_at = 0  # where :meth:`_all_indexed` looks first
        if (kept and self._reused < len(self.urls)) or self._restamped:
            self._keep_together()
        self.arm(opener)

    def _lay_out(self, opener: Reader, keys: list[str],
                 stamps: Sequence[tuple[int, int, int] | OSError | None],
                 known: dict[str, ShardIndex], reusable: Callable[[str], bool] | None,
                 ) -> None:  # fmt: skip
        """Each shard's layout: from its index in ``known`` where it is as
        indexed, else as :meth:`_open` finds it."""
        records = self.record_format
        if not known and records is not None and reusable is not None \
                and set(map(type, stamps)) <= {tuple}:  # fmt: skip
            # Record shards never seen, each statted: where the index folder
            # holds none of their indexes (asked about all at once), only
            # their reads can lay them out, every one: told at once, not
            # shard by shard (1.2 us a shard).
            if self._held is None:
                self._held = records.store.holding(self.urls)
            if not self._held:
                count = len(self.urls)
                listed = cast("list[tuple[int, int, int]]", stamps)
                self.sizes.extend([size for size, _, _ in listed])
                self.stamps.extend(listed)
                self.indexes.extend([None] * count)
                self.layouts.extend([None] * count)
                return
        as_indexed = self._as_indexed(keys, stamps, known, reusable)
        indexes = self.indexes
        # Footers and the like are read ahead a group of shards at a time: one
        # wait per group, with a group's bytes held at once. A group of shards
        # all as indexed is laid out at once, with nothing to read.
        for first in range(0, len(self.urls), _PREFETCH_SHARDS):
            group = as_indexed[first : first + _PREFETCH_SHARDS]
            if None not in group:
                self._add_indexed(cast("list[ShardIndex]", group))
                continue
            self.format.prefetch(opener, self.urls[first : first + len(group)])
            for shard, entry in enumerate(group, first):
                if entry is not None:
                    self._add_indexed([entry])
                    continue
                indexes.append(None)
                self.layouts.append(self._open(opener, self.urls[shard], keys[shard],
                                               stamps[shard], known, reusable))  # fmt: skip
        self.format.prefetch(opener, [])

    def _all_as_indexed(self, columns: IndexColumns, keys: list[str], now: _Beside,
                        reusable: Callable[[str], bool] | None) -> bool:  # fmt: skip
        """Where the dataset index holds exactly these local shards, in this
        order, each as it is now (its change stamp too, see :meth:`_as_indexed`:
        ``now`` tells), lays them all out from its columns, with no index
        object a shard, and says so; else changes nothing. The layouts are
        made while the stats are still being taken (beside, for many shards)."""
        records = self.record_format
        if records is None or reusable is None or columns.urls != keys:
            return False
        rows = columns.stamp_rows()
        if rows is None:  # a version past 64 bits: no local file's
            return False
        # (A change stamp of 0: not known when indexed.) Told without a ufunc:
        # a fresh process's first one costs a tenth of a millisecond.
        if np.count_nonzero(rows[2]) < rows.shape[1] or not all(map(reusable, columns.formats())):
            return False
        sizes = rows[0].tolist()
        layouts = records.layouts_of_columns(columns, sizes, keys)  # keys: as the index names them
        found, errors = now.result()
        # A byte of the errnos not zero: a stat failed (an OSError is never as
        # indexed). The stats are three int64 a file, as the rows' columns.
        as_statted = np.ascontiguousarray(rows.T, np.int64).tobytes()
        if errors.count(0) < len(errors) or found != as_statted:
            return False
        self.sizes = sizes
        self._stamps, self._stamp_rows = None, rows  # a first sample needs none
        self.layouts = layouts
        self._indexes, self._columns = None, columns
        self._reused = len(sizes)
        return True

    @property
    def stamps(self) -> list[tuple[int, int, int] | None]:
        """Each shard's size, version and change stamp; None for a remote
        object not asked about yet (its size is 0 until a read learns it).
        Where every shard is as the dataset index holds it, listed from its
        rows when first asked for (a tuple a shard: a pass checks them when
        it begins again, not before the first sample)."""
        if self._stamps is None:
            assert self._stamp_rows is not None
            sizes, versions, changes = self._stamp_rows.tolist()
            self._stamps = list(zip(sizes, versions, changes, strict=True))
            self._stamp_rows = None
        return self._stamps

    @stamps.setter
    def stamps(self, value: list[tuple[int, int, int] | None]) -> None:
        self._stamps, self._stamp_rows = value, None

    @property
    def indexes(self) -> list[ShardIndex | None]:
        """Record shards' indexes, where known (what a dataset index is made of)."""
        if self._indexes is None:
            assert self._columns is not None
            self._indexes = list(self._columns.indexes())
            self._columns = None
        return self._indexes

    @staticmethod
    def _as_indexed(keys: list[str], stamps: Sequence[tuple[int, int, int] | OSError | None],
                    known: dict[str, ShardIndex] | None,
                    reusable: Callable[[str], bool] | None) -> list[ShardIndex | None]:  # fmt: skip
        """Each shard's index in ``known`` where the shard is a local file as
        indexed, its change stamp too (what :meth:`_layout_at_open` finds,
        without its steps), else None."""
        if not known or reusable is None:
            return [None] * len(keys)
        entries = [known.get(key) for key in keys]
        usable = {kind for kind in {entry.format for entry in entries if entry is not None}
                  if reusable(kind)}  # fmt: skip
        return [entry if entry is not None and entry.change and entry.format in usable
                and entry.stamp == stamp else None
                for entry, stamp in zip(entries, stamps, strict=True)]  # fmt: skip

    def _add_indexed(self, indexes: list[ShardIndex]) -> None:
        """The next shards, each as its index holds it (see :meth:`_as_indexed`)."""
        records = self.record_format
        assert records is not None  # only record shards are as indexed
        self.sizes.extend(index.size for index in indexes)
        self.stamps.extend(index.stamp for index in indexes)
        self.indexes.extend(indexes)
        self.layouts.extend(records.layouts_of(indexes))
        self._reused += len(indexes)

    def _stamps_now(self, reader: Reader, keys: list[str], known: dict[str, ShardIndex],
                    records: RecordFormat | None, reusable: Callable[[str], bool] | None,
                    ) -> list[tuple[int, int, int] | OSError | None]:  # fmt: skip
        """Each shard's stamp where some shards are remote (a dataset of
        local files only takes them in one call as it opens): local files'
        and untrusted objects' asked all at once; a remote one's as its
        index in ``known`` holds it, where that was made from the object
        and serves this dataset's reads (``reusable``;
        checked when a read opens it: a dataset of thousands of objects does
        not wait for an answer about each before its first sample). An index
        made from local files and uploaded with them holds their times, not
        the objects' versions: those are asked. None for a remote record
        shard no index anywhere holds: the read that streams it asks (a
        bucket never seen does not wait for an answer about each object)."""
        trusted = {
            url: known[key].stamp for url, key in zip(self.urls, keys, strict=True)
            if key in known and is_remote(url) and known[key].of_an_object
            and reusable is not None and reusable(known[key].format)
        }  # fmt: skip
        reader.unask(trusted)  # asked again in reading order, as each pass begins (see ask_ahead)
        unknown: set[str] = set()
        if records is not None and reusable is not None:
            unknown = {url for url, key in zip(self.urls, keys, strict=True)
                       if url not in trusted and key not in known and is_remote(url)}  # fmt: skip
            if unknown:
                unknown -= records.store.holding(unknown)
        untrusted = [url for url in self.urls if url not in trusted and url not in unknown]
        reader.stat_ahead(untrusted)  # sizes needed now: all at once
        asked = iter(reader.stamps(untrusted))
        return [trusted[url] if url in trusted else None if url in unknown else next(asked)
                for url in self.urls]  # fmt: skip

    def arm(self, reader: Reader) -> None:
        """Have ``reader`` check each remote shard, when a read opens it,
        against what its layout was made from; and tell it how many bytes of
        local shards it serves, so that with ``direct="auto"`` it reads cold
        ones through the page cache where they fit there (later epochs then
        find them cached; see :attr:`Reader.data_bytes`)."""
        if not self.remote:
            reader.data_bytes = sum(self.sizes)
            return
        reader.expect({url: stamp[:2] for url, stamp in zip(self.urls, self.stamps, strict=True)
                       if is_remote(url) and stamp is not None})  # fmt: skip
        reader.data_bytes = sum(size for url, size in zip(self.urls, self.sizes, strict=True)
                                if not is_remote(url))  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:
        """What a spawned DataLoader worker (or a Ray task) gets. A layout made
        from a shard's index is made again from it there, and the indexes go
        as columns, their offsets in two arrays: pickled object by object,
        20,000 shards took 0.5 s and 18 MB (four arrays a shard), once per
        worker per epoch."""
        state = self.__dict__.copy()
        del state["reader"]  # the new process's own: the dataset gives it back
        if self._columns is not None:  # every shard as the dataset index holds it:
            state["layouts"] = None  # laid out there from the columns, as here
        elif any(index is not None for index in self.indexes):
            state["_indexes"] = _PackedIndexes.of(self.indexes)
            pairs = zip(self.layouts, self.indexes, strict=True)
            state["layouts"] = [layout if index is None else None for layout, index in pairs]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        packed, columns = state["_indexes"], state["_columns"]
        if columns is not None:
            with collector_paused():  # objects per shard, none garbage
                state["layouts"] = state["_records"].layouts_of_columns(columns)
        elif isinstance(packed, _PackedIndexes):
            records = state["_records"]
            with collector_paused():  # objects per shard, none garbage
                indexes = state["_indexes"] = packed.unpacked()
                pairs = zip(state["layouts"], indexes, strict=True)
                state["layouts"] = [layout if index is None else records.layout_of(index)
                                    for layout, index in pairs]  # fmt: skip
        self.__dict__.update(state)

    def __copy__(self) -> ShardLayouts:
        """The same layouts and indexes (a part of the dataset, see
        :meth:`Dataset.as_rank`), not made again as unpickling makes them."""
        copied = type(self).__new__(type(self))
        copied.__dict__.update(self.__dict__)
        return copied

    @property
    def record_format(self) -> RecordFormat | None:
        return self._records

    def local_sizes(self) -> list[int]:
        """Each shard's size, 0 for remote objects (whose sizes may be
        learned only as they are read)."""
        if not self.remote:
            return list(self.sizes)
        return [0 if is_remote(url) else size
                for url, size in zip(self.urls, self.sizes, strict=True)]  # fmt: skip

    def ask_unknown(self, shards: Sequence[int]) -> None:
        """Have the reader ask, in the background and in this order, about
        the remote objects of ``shards`` not asked about at open (a read
        needs an object's size before its requests go)."""
        unknown = [self.urls[shard] for shard in shards if self.stamps[shard] is None]
        if unknown:
            self.reader().stat_ahead(unknown)

    def sized(self, shards: Sequence[int]) -> bool:
        """Whether the sizes of ``shards`` are known without asking."""
        return all(self.stamps[shard] is not None for shard in shards)

    def size_of(self, shards: Sequence[int]) -> int:
        """How many bytes ``shards`` hold; the answers about objects not asked
        about at open are waited for (see :meth:`ask_unknown`; one that
        cannot be asked about counts 0)."""
        unknown = [self.urls[shard] for shard in shards if self.stamps[shard] is None]
        known = sum(self.sizes[shard] for shard in shards if self.stamps[shard] is not None)
        asked = self.reader().stamps(unknown) if unknown else []
        return known + sum(stamp[0] for stamp in asked if not isinstance(stamp, OSError))

    def _dataset_index(self, index: str | None, storage_options: dict[str, Any],
                       keys: list[str]) -> IndexColumns | None:  # fmt: skip
        if self.record_format is None:
            return None
        location = index if index is not None else dataset_index_location(keys, keyed=True)
        try:
            found = DatasetIndex.fetch_columns(location, storage_options, self.reader().settings)
        except PermissionError as error:
            if index is not None:
                raise
            # Where it is only looked for: a store that answers 403 for a key
            # it lacks (S3 without ListBucket) has none there to give.
            log.info("fastio: no dataset index readable at %s (%s); the shards are read "
                     "without one", location, error)  # fmt: skip
            return None
        except IndexFileError as error:
            if index is not None or not self.policy.tolerates:
                raise
            self.policy.failure(error, None, "the shards are indexed anew")
            return None
        if found is None and index is not None:
            raise FileNotFoundError(2, "no dataset index there", index)
        return found

    def _open(self, reader: Reader, url: str, key: str,
              stamp: tuple[int, int, int] | OSError | None, known: dict[str, ShardIndex],
              reusable: Callable[[str], bool] | None) -> Layout | None:  # fmt: skip
        """The layout of ``url`` (its :func:`index_key` ``key``) at open
        (``stamp``: what it is now, or why that is not known; None: not
        asked), None where only a read can find it. ``reusable``: whether an
        index of a format (by its locator's name) serves this dataset's reads."""
        if stamp is None:
            self.sizes.append(0)
            self.stamps.append(None)
            return None
        if isinstance(stamp, OSError):
            self.sizes.append(0)
            self.stamps.append((0, 0, 0))
            self.policy.shard_left_out(stamp, url)
            return _empty_layout(url)
        self.sizes.append(stamp[0])
        self.stamps.append(stamp)
        try:
            return self._layout_at_open(reader, url, key, known, stamp, reusable)
        except (OSError, DecodeError) as error:
            self.policy.shard_left_out(error, url)
            return _empty_layout(url)

    def _layout_at_open(self, reader: Reader, url: str, key: str, known: dict[str, ShardIndex],
                        stamp: tuple[int, int, int], reusable: Callable[[str], bool] | None,
                        ) -> Layout | None:  # fmt: skip
        records = self.record_format
        if records is None or reusable is None:
            layout, problems = self.format.layout(reader, url, self.policy.tolerates)
            for problem in problems:
                # What the damage cost is lost; the layout holds the samples around it.
                self.policy.failure(problem, problem.lost, f"shard {url} is laid out without it")
            return layout
        entry = known.get(key) if known else None
        if entry is not None and entry.stamp != stamp:
            entry = self._kept_as_now(records, key, stamp) or entry
        if entry is not None and reusable(entry.format) and entry.fresh(reader, url, stamp):
            self._reused += 1
            if entry.change != stamp[2]:  # fresh by its content
                entry = dataclasses.replace(entry, change=stamp[2])
                self._restamped += 1
        else:
            if self._held is None:  # this shard (``indexes[-1]``) and the rest
                self._held = records.store.holding(self.urls[len(self.indexes) - 1 :])
            entry = self._stored(records, reader, url, self._held)
        if entry is None:
            return None
        self.indexes[-1] = entry
        return records.layout_of(entry)

    def _kept_as_now(self, records: RecordFormat, key: str, stamp: tuple[int, int, int]
                     ) -> ShardIndex | None:  # fmt: skip
        """The index the index folder keeps for shard ``key`` where it was made
        or confirmed when the shard was as ``stamp`` says it is now."""
        if self._kept is None:
            self._kept = records.store.load_set(self.urls)
        entry = self._kept.get(key)
        if entry is not None and entry.stamp == stamp:
            return entry
        return None

    def _stored(self, records: RecordFormat, reader: Reader, url: str, held: Container[str],
                report: bool = True) -> ShardIndex | None:  # fmt: skip
        """The index folder's index of ``url``, where it is one of those
        ``held`` there (:meth:`IndexStore.holding`: asked about together, not
        by failing to open a file for each) and still matches the shard. A
        damaged one is None, reported as the policy says where ``report``."""
        if url not in held:
            return None
        try:
            # Under skip, a shard that cannot be asked about now (gone, its
            # store down) keeps the samples it was indexed with, which its
            # reads then count as skipped: as in every other process of the
            # dataset (a DataLoader worker that read it keeps its layout).
            return records.known_index(reader, url, unanswered=self.policy.tolerates)
        except IndexFileError as error:
            if not report:
                return None
            if not self.policy.tolerates:
                raise
            self.policy.failure(error, None, "the shard is indexed anew")
            return None

    # ---- what is known -----------------------------------------------------------------

    @property
    def known(self) -> bool:
        """Whether every shard's layout is known."""
        return not _unknown_in(self.layouts)

    def counts(self) -> list[int]:
        """Samples per shard. Raises TypeError while some are unknown: not in
        this process, nor in the index folder, where DataLoader workers that
        streamed them left their indexes."""
        if not self.known:
            with contextlib.suppress(OSError):
                self.complete(scan=False, report=False)
        if _unknown_in(self.layouts):
            missing = sum(layout is None for layout in self.layouts)
            raise TypeError(
                f"{missing} of the {len(self.layouts)} shards are not indexed yet, so their "
                "samples are not counted: iterate an epoch (it indexes them on the way), "
                "call dataset.index(), or run fastio-bench index"
            )
        return counts_of(cast("Sequence[Layout]", self.layouts))

    def learned(self, shard: int, ranges: tuple[np.ndarray, np.ndarray], damaged: bool) -> None:
        """A streamed read found shard ``shard``'s samples at ``ranges``: keep its
        index (for later datasets, unless the shard is damaged) and its layout
        (for later epochs: the samples around the damage)."""
        records = self.record_format
        if records is None or self.layouts[shard] is not None:
            return
        url = self.urls[shard]
        index = stamped(self.reader(), url, records.locator().name, *ranges)
        if damaged:
            self._laid_out(shard, records, index)
            return
        records.store.save(index)
        self._found(shard, records, index)
        if self._all_indexed():  # a first epoch's last shard: the next open reads one file
            self._keep_together()

    def _all_indexed(self) -> bool:
        """Whether every shard has its index, looked for from the shard where
        the last look found one without: a first epoch learns its shards one
        by one, and looking over all of them each time would cost a pass
        over the list a shard."""
        indexes, at = self.indexes, min(self._unindexed_at, len(self.indexes))
        for low, high in ((at, len(indexes)), (0, at)):
            with contextlib.suppress(ValueError):
                self._unindexed_at = indexes.index(None, low, high)
                return False
        return True

    def _found(self, shard: int, records: RecordFormat, index: ShardIndex) -> None:
        self.indexes[shard] = index
        self._laid_out(shard, records, index)

    def _laid_out(self, shard: int, records: RecordFormat, index: ShardIndex) -> None:
        """Shard ``shard`` is as ``index`` says: its layout, and what it was
        when indexed (a remote object not asked about at open learns it
        here; later reads of it check that it still is)."""
        self.layouts[shard] = records.layout_of(index)
        if self.stamps[shard] is None:
            self.sizes[shard], self.stamps[shard] = index.size, index.stamp
            self.reader().expect({self.urls[shard]: index.stamp[:2]})

    def _keep_together(self) -> None:
        """Where every shard has its index, keep them in one file of the index
        folder, which the next dataset over these shards reads at once."""
        records = self.record_format
        if records is not None and all(index is not None for index in self.indexes):
            records.store.save_set(self.urls, self.dataset_index())

    def complete(self, scan: bool = True, progress: Callable[[int], None] | None = None,
                 report: bool = True) -> None:  # fmt: skip
        """Find the unknown layouts: in the index folder (where other processes
        that streamed them left them), then, with ``scan``, by scanning the
        shards, ``outstanding_requests`` at a time (``progress(1)`` after each).
        ``report``: damaged stored indexes go through the policy (else they
        are passed over: a count is no pass, and reports nothing)."""
        records = self.record_format
        if records is None or not _unknown_in(self.layouts):
            return
        missing = [i for i, layout in enumerate(self.layouts) if layout is None]
        reader = self.reader()
        # Stored indexes are checked against their objects: asked many at a time.
        held = records.store.holding(self.urls[shard] for shard in missing)
        reader.stat_ahead([self.urls[shard] for shard in missing if self.urls[shard] in held])
        for shard in missing:
            stored = self._stored(records, reader, self.urls[shard], held, report)
            if stored is not None:
                self._found(shard, records, stored)
        missing = [i for i in missing if self.layouts[i] is None]
        if not missing:  # what other processes streamed (DataLoader workers) completes it
            self._keep_together()
        if not scan or not missing:
            return
        # Each scan opens its object: their sizes asked many at a time first.
        reader.stat_ahead([self.urls[shard] for shard in missing])
        tolerate = self.policy.tolerates

        def scan_one(shard: int) -> Any:
            try:
                return records.scan(reader, self.urls[shard], tolerate)
            except (OSError, DecodeError) as error:
                return error
            finally:
                if progress is not None:
                    progress(1)

        workers = max(1, min(len(missing), reader.settings.outstanding_requests))
        with ThreadPoolExecutor(workers, thread_name_prefix="fastio-index") as pool:
            found = list(pool.map(scan_one, missing))
        for shard, result in zip(missing, found, strict=True):
            url = self.urls[shard]
            if isinstance(result, Exception):
                self.policy.shard_left_out(result, url)
                self.layouts[shard] = _empty_layout(url)
                continue
            index, problems = result
            for problem in problems:
                self.policy.failure(problem, problem.lost, f"shard {url} is indexed without it")
            if problems:  # a damaged shard's index is this dataset's alone
                self._laid_out(shard, records, index)
            else:
                self._found(shard, records, index)
        self._keep_together()

    def dataset_index(self) -> DatasetIndex:
        """Every shard's index in one (see :meth:`complete` first). Raises
        ValueError where a shard has none: it is not of a record format, or
        damaged (a dataset index holds intact shards only)."""
        missing = [url for url, index in zip(self.urls, self.indexes, strict=True)
                   if index is None]  # fmt: skip
        if missing:
            # A shard left out as unreadable (under skip or warn) is said to be so.
            [stamp] = [None] if is_remote(missing[0]) else self.reader().stamps(missing[:1])
            why = (f"it cannot be read: {stamp}" if isinstance(stamp, OSError)
                   else "damaged, or of a format laid out without one")  # fmt: skip
            raise ValueError(f"{len(missing)} shards have no index to share, e.g. {missing[0]} "
                             f"({why})")  # fmt: skip
        return DatasetIndex([index for index in self.indexes if index is not None])

    def ask_ahead(self, shards: Sequence[int], anew: bool) -> None:
        """Have the reader confirm the remote objects of ``shards`` (in the
        order a pass reads them) in the background, for each to be checked
        as its reads go (see :meth:`arm` and :meth:`Reader.confirm_ahead`);
        ``anew``: forget what was known of them (a later pass: one may have
        been replaced since). A pass does not wait for a round of requests
        about every object first."""
        if not self.remote:
            return
        urls = [self.urls[shard] for shard in shards if is_remote(self.urls[shard])]
        if urls:
            self.reader().confirm_ahead(urls, anew)

    def changed(self, shards: Sequence[int]) -> list[int]:
        """Of ``shards``, the local files that are no longer what their layouts
        were made from (their times, asked anew); remote objects are checked
        as reads open them (see :meth:`ask_ahead`)."""
        reader = self.reader()
        local = [shard for shard in shards if not is_remote(self.urls[shard])]
        now = reader.stamps([self.urls[shard] for shard in local])
        return [shard for shard, stamp in zip(local, now, strict=True)
                if stamp != self.stamps[shard]]  # an OSError is never equal  # fmt: skip

    def stale_error(self, shard: int) -> ShardChangedError:
        return ShardChangedError.of(self.urls[shard])

    def forget(self, shard: int) -> None:
        """A read found ``shard`` changed since its layout was made (an object
        replaced at its URL): what the index folder keeps of it goes, so that
        the next dataset over it indexes it anew (the plans of this one's
        passes still hold the old layout)."""
        records = self.record_format
        if records is not None:
            records.store.forget(self.urls[shard], self.urls)


@record(frozen=True)
class _PackedIndexes:
    """A dataset's shard indexes as :func:`index_columns` gives them (the
    shards that have one, ``held``, of ``count``), for pickling."""

    count: int
    held: list[int]
    fields: dict[str, list[Any]]
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, indexes: list[ShardIndex | None]) -> _PackedIndexes:
        held = [shard for shard, index in enumerate(indexes) if index is not None]
        fields, starts, ends = index_columns([index for index in indexes if index is not None])
        return cls(len(indexes), held, fields, starts, ends)

    def unpacked(self) -> list[ShardIndex | None]:
        indexes: list[ShardIndex | None] = [None] * self.count
        made = indexes_of_columns(self.fields, self.starts, self.ends, self.fields["url"],
                                  "a pickled dataset")  # fmt: skip
        for shard, index in zip(self.held, made, strict=True):
            indexes[shard] = index
        return indexes


def _unknown_in(layouts: Sequence[Layout | None]) -> bool:
    """Whether some of ``layouts`` is not known (None). Asked of a list by
    identity: ``None in`` it would call each layout's ``__eq__``, a Python
    call a shard."""
    if isinstance(layouts, ColumnLayouts):
        return None in layouts  # told by the layouts set in place alone
    return any(layout is None for layout in layouts)


def _empty_layout(url: str) -> Layout:
    return Layout(url, 0, 0, np.zeros(1, np.int64), np.zeros(0, np.int64))


def stats_beside(urls: list[str]) -> _Beside:
    """The stamps of ``urls`` (local files), for :class:`ShardLayouts`: taken
    on a thread of their own where they are many (from ``_STATTED_BESIDE``),
    so that a dataset's open, which begins them as soon as it knows its
    shards, goes on meanwhile on the other core; the open, once it needs
    them, stats what is left beside that thread (see :class:`_Beside`)."""
    if len(urls) < _STATTED_BESIDE:
        return _Beside(local_stamps, urls, beside=False)
    try:
        job = _native.StatsJob(urls)
    except (TypeError, ValueError):  # a path that is no path: the call raises it, where taken
        return _Beside(local_stamps, urls, beside=False)

    def stats(_: list[str]) -> None:
        job.run(threads=1)  # one core: the open's own thread runs on the other

    return _Beside(stats, urls, beside=True, helps=job.help, answer=job.result)


class _Beside:
    """``ask(urls)``, on a thread of its own where ``beside`` (else at once),
    for :meth:`result`: the answer, or what it raised. ``helps``: what the
    caller of :meth:`result` runs before waiting for that thread (a share of
    the work the thread does, left when it is taken); ``answer``: what the
    answer is, taken once both are done (else what ``ask`` returned)."""

    def __init__(self, ask: Callable[[list[str]], Any], urls: list[str], beside: bool,
                 helps: Callable[[], None] | None = None,
                 answer: Callable[[], Any] | None = None) -> None:  # fmt: skip
        self._ask, self._urls, self._helps, self._answer_of = ask, urls, helps, answer
        self._answer: Any = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if beside:
            self._thread = threading.Thread(target=self._run, daemon=True, name="fastio-stat")
            self._thread.start()
        else:
            self._run()

    def _run(self) -> None:
        try:
            self._answer = self._ask(self._urls)
        except BaseException as error:  # raised where the answer is taken
            self._error = error

    def result(self) -> Any:
        if self._thread is not None:
            if self._helps is not None and self._thread.is_alive():
                self._helps()
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._answer if self._answer_of is None else self._answer_of()
