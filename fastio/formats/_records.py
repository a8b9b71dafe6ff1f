"""Record formats (WebDataset tar, TFRecord, JSONL, text lines): a shard is a run
of records that only a scan finds. So a shard is laid out from its index (one
scan, then kept: :mod:`fastio.formats._index`), and written by a writer that
notes the same index as it writes.
"""

from __future__ import annotations

import abc
from array import array
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio._errors import DecodeError
from fastio._native import ends_alike
from fastio.formats._compression import codec_for, decompress
from fastio.formats._index import (
    DatasetIndex,
    IndexStore,
    ShardIndex,
    dataset_index_location,
    holds,
    scan_shard,
    stamped,
)
from fastio.formats._layout import ColumnLayouts, Layout, ShardFormat, ShardWriter, sample_bounds

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Iterator

    from typing_extensions import Buffer

    from fastio.formats._compression import Writable
    from fastio.formats._index import IndexColumns, IndexPlacement, Locator
    from fastio.reader._ranges import Chunk
    from fastio.reader._reader import Reader

__all__ = ["RecordFormat", "RecordWriter"]


class RecordFormat(ShardFormat):
    """A record format as the dataset drives it: every sample is its own unit
    (a compressed shard is one unit: decompression starts at byte 0), laid
    out from the shard's index (see :mod:`fastio.formats._index`), kept in
    ``index_dir``, else where ``index_placement`` puts it, else the user's
    cache folder. Subclasses set ``name`` and implement :meth:`locator`,
    :meth:`own` and :meth:`samples` (of :meth:`_decompressed` chunks)."""

    columns_by_name = True

    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None = None,
        index_placement: IndexPlacement | None = None,
    ) -> None:
        self.index_dir = index_dir
        self.index_placement = index_placement
        self.store = IndexStore(index_dir, index_placement)

    @abc.abstractmethod
    def locator(self) -> Locator:
        """How the index finds this format's samples in a shard."""

    @abc.abstractmethod
    def own(self, record: Any, url: str, offset: int) -> Any:
        """A record as :meth:`locator` finds it (views of the reader's buffers)
        as the sample :meth:`samples` yields. Raises the format's DecodeError."""

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        index = self.known_index(reader, url)
        problems: list[DecodeError] = []
        if index is None:
            index, problems = self.scan(reader, url, tolerate)
        return self.layout_of(index), problems

    def known_index(self, reader: Reader, url: str, unanswered: bool = False
                    ) -> ShardIndex | None:  # fmt: skip
        """A stored index that still matches the shard, else None. Raises
        :class:`fastio.IndexFileError` for a damaged one (and see
        :meth:`IndexStore.load` for ``unanswered``)."""
        return self.store.load(reader, url, self.locator(), unanswered)

    def scan(self, reader: Reader, url: str, tolerate: bool
             ) -> tuple[ShardIndex, list[DecodeError]]:  # fmt: skip
        """The shard's index from a scan (stored for later, unless the shard is
        damaged: a repaired one gets a scan), and the problems it met."""
        index, problems = scan_shard(reader, url, self.locator(), tolerate=tolerate)
        if not problems:
            self.store.save(index)
        return index, problems

    def layout_of(self, index: ShardIndex) -> Layout:
        """The layout an index describes."""
        [layout] = self.layouts_of([index])
        return layout

    def layouts_of(self, indexes: Iterable[ShardIndex]) -> list[Layout]:
        """The layouts the indexes describe, in one loop (a dataset lays out
        every shard before its first sample, and may have tens of thousands)."""
        return _layouts((index.url, index.size, *_offsets(index.starts, index.ends))
                        for index in indexes)  # fmt: skip

    def layouts_of_columns(self, columns: IndexColumns, sizes: list[int] | None = None,
                           urls: list[str] | None = None) -> ColumnLayouts:  # fmt: skip
        """The layouts a dataset index's columns describe (see
        :meth:`layouts_of`), with no index object a shard, each made when
        first asked for: its offsets a slice of the columns' own, taken as
        int64 once. ``sizes``: the shards' sizes as the columns hold them,
        where already listed; ``urls``: the shards' URLs as the columns name
        them, where already listed."""
        starts, ends = _offsets(columns.starts, columns.ends)
        if urls is None:
            urls = list(columns.urls)
        if sizes is None:
            sizes = list(map(int, columns.fields["size"]))
        return ColumnLayouts(urls, sizes, starts, ends, columns.bounds, _layout,
                             _uncompressed(urls), columns.counts())  # fmt: skip

    def scanned(
        self, chunks: Iterable[Chunk], url: str, encoded: bool = False
    ) -> Iterator[tuple[int, int, Any]]:
        """Every sample of a whole shard's chunks, owned, with its byte range as
        the shard's index has it: what a scan and :meth:`samples` give, in
        one pass (a first epoch streams a shard so); with ``encoded``, as
        :meth:`hold` keeps it for :meth:`finish`. A damaged record the format
        can step over comes as its DecodeError in the sample's place; damage
        it cannot step over is raised."""
        whole = decompress(chunks, url) if codec_for(url) is not None else chunks
        owner = self.hold if encoded else self.own
        for start, end, record in self.locator().locate(whole, url):
            if not isinstance(record, DecodeError):
                try:
                    record = owner(record, url, start)
                except DecodeError as error:  # the record is framed: the next one is sound
                    record = error
            yield start, end, record

    def hold(self, record: Any, url: str, offset: int) -> Any:
        """A record as a shuffle window holds it where :attr:`encodes` (see
        :meth:`encoded`): by default the sample :meth:`own` makes."""
        return self.own(record, url, offset)

    def _decompressed(self, chunks: Iterable[Chunk], layout: Layout) -> Iterable[Chunk]:
        """The chunks of ``layout.ranges(...)`` as the format's bytes."""
        return decompress(chunks, layout.url) if layout.whole else chunks


class RecordWriter(ShardWriter):
    """Writes the samples of one shard to ``file`` (a binary file, or a
    compressor in front of one: :func:`fastio.formats.compressing`), noting
    where each sample's bytes start and end as the shard's index has them
    (offsets before compression), so that :meth:`index` needs no scan.

    Subclasses set ``format``, write a sample to ``self.file`` (advancing
    ``self.position``; :meth:`_put` does both) and then note it with
    ``self._noted(start)``.
    """

    format = ""

    def __init__(self, file: Writable) -> None:
        self.file = file
        self.position = 0
        """Bytes written so far (before compression)."""
        self._starts = array("Q")
        self._ends = array("Q")

    def __len__(self) -> int:
        """Samples written so far."""
        return len(self._starts)

    def _put(self, data: Buffer) -> None:
        self.file.write(data)
        self.position += memoryview(data).nbytes

    def _noted(self, start: int) -> None:
        self._starts.append(start)
        self._ends.append(self.position)

    def index(self, reader: Reader, url: str) -> ShardIndex:
        """The index of the shard written (once its file is closed), as a scan
        of it would build it, stamped with what ``url`` is now through
        ``reader``: no scan."""
        return stamped(reader, url, self.format, np.array(self._starts, np.uint64),
                       np.array(self._ends, np.uint64))  # fmt: skip


class DatasetIndexWriter:
    """The dataset index of shards written by the record formats' writers,
    made from what the writers noted (no shard is scanned)::

        index = DatasetIndexWriter()
        for number, shard in enumerate(shards):
            path = f"data/train-{number:04d}.tar"
            with open(path, "wb") as file, WebDatasetWriter(file) as writer:
                for key, sample in shard:
                    writer.write(key, sample)
            index.add(writer, path)
        index.save()  # data/dataset.fastio-index.npz, found there by every Dataset

    Add a shard once its file is complete and in place (the index records the
    file's size and times as they are then)."""

    def __init__(self) -> None:
        self._written: list[tuple[RecordWriter, str]] = []

    def add(self, writer: RecordWriter, url: str | os.PathLike[str]) -> None:
        """``writer`` wrote the shard ``url``, which is now complete."""
        if not isinstance(writer, RecordWriter):
            raise TypeError(f"{type(writer).__name__} writes no index (Parquet and Arrow "
                            "shards need none: their footers say where everything is)")  # fmt: skip
        self._written.append((writer, str(url)))

    def save(self, location: str | os.PathLike[str] | None = None,
             storage_options: dict[str, Any] | None = None) -> str:  # fmt: skip
        """Write the dataset index to ``location`` (a path or URL; default
        ``dataset.fastio-index.npz`` in the shards' folder) and return it.
        Raises ValueError when no shard was added."""
        if not self._written:
            raise ValueError("no shard was added to the dataset index")
        from fastio.reader._reader import Reader  # a reader stamps what each shard is now

        urls = [url for _, url in self._written]
        where = str(location) if location is not None else dataset_index_location(urls)
        with Reader() as reader:
            shards = [writer.index(reader, url) for writer, url in self._written]
        DatasetIndex(shards).save(where, storage_options)
        return where


_owned_bytes: type[bytes] = bytes


def owned(value: Any) -> Any:
    """A sample's value owned by the caller: views of the reader's buffers copied."""
    return _owned_bytes(value) if isinstance(value, memoryview) else value


def owned_kind() -> type[bytes]:
    """What :func:`owned` copies views into (for formats that copy natively)."""
    return _owned_bytes


def own_bytes_as(kind: type[bytes]) -> None:
    """Make :func:`owned` copy views into ``kind``, a ``bytes`` subclass (in a
    DataLoader worker, one its queue hands to the main process unpickled)."""
    global _owned_bytes
    _owned_bytes = kind


_UINT64 = np.dtype(np.uint64)
_INT64 = np.dtype(np.int64)
_UNTOLD = "untold"  # not a codec's name
_ENDING = itemgetter(slice(-5, None))  # what names a URL's codec (see codec_for)


def _layouts(shards: Iterable[tuple[str, int, np.ndarray, np.ndarray]]) -> list[Layout]:
    """The layouts of ``(url, size, starts, ends)`` shards (int64 offsets)."""
    layouts: list[Layout] = []
    append = layouts.append
    # A dataset's shards mostly share an extension: the codec it names is
    # told once per ending (a URL with a query or fragment, or an fsspec
    # chain, whose first link names what it holds: each alone).
    codecs: dict[str, str | None] = {}
    # Shards mostly hold as many samples as each other: one bounds view each
    # count (read-only, shared as sample_bounds shares its array).
    counted: dict[int, np.ndarray] = {}
    for url, size, starts, ends in shards:
        count = len(starts)
        if "?" in url or "#" in url or "::" in url:
            codec = codec_for(url)
        else:
            ending = url[-5:]  # (_ENDING's, sliced inline: a shard each)
            codec = codecs.get(ending, _UNTOLD)
            if codec is _UNTOLD:
                codec = codecs[ending] = codec_for(url)
        if codec is None:
            bounds = counted.get(count)
            if bounds is None:
                bounds = counted[count] = sample_bounds(count)
            append(Layout(url, count, size, bounds, None, starts, ends))
            continue
        whole = np.array([size], np.int64)
        bounds = np.array([0, count], np.int64)
        append(Layout(url, count, size, bounds, whole, starts, ends, whole=True))
    return layouts


def _layout(url: str, size: int, starts: np.ndarray, ends: np.ndarray) -> Layout:
    """The layout of one shard (see :func:`_layouts`)."""
    [layout] = _layouts([(url, size, starts, ends)])
    return layout


def _uncompressed(urls: list[str]) -> bool:
    """Whether :func:`_layouts` lays every one of ``urls`` out per sample:
    none names a codec (told once per ending, as there)."""
    joined = "".join(urls)
    if "?" in joined or "#" in joined or holds(joined, "::"):  # (see _layouts)
        return all(codec_for(url) is None for url in urls)
    # Most datasets' shards end alike: told in one native loop.
    ending = _ENDING(urls[0]) if urls else ""
    if len(ending) == 5 and ends_alike(urls, ending):
        return codec_for(ending) is None
    return all(codec_for(ending) is None for ending in set(map(_ENDING, urls)))


def _offsets(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An index's offsets as the int64 a layout computes with (see :func:`_signed`)."""
    if starts.dtype is _UINT64 and ends.dtype is _UINT64:
        return starts.view(_INT64), ends.view(_INT64)
    return _signed(starts), _signed(ends)


def _signed(offsets: np.ndarray) -> np.ndarray:
    """An index's offsets (uint64, below 2**63) as the int64 a layout computes
    with: a view of the same memory where they are uint64 (a dataset lays out
    thousands of shards before its first sample), else a copy."""
    if offsets.dtype == _UINT64:
        return offsets.view(_INT64)
    return offsets.astype(_INT64)
