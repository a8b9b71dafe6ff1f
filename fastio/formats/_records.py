"""Record formats (WebDataset tar, TFRecord, JSONL, text lines): a shard is a run
of records that only a scan finds. So a shard is laid out from its index (one
scan, then kept: :mod:`fastio.formats._index`), and written by a writer that
notes the same index as it writes.
"""

from __future__ import annotations

import abc
from array import array
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio.formats._compression import codec_for, decompress
from fastio.formats._index import ShardIndex, load_or_scan
from fastio.formats._layout import Layout, ShardFormat, ShardWriter

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable

    from typing_extensions import Buffer

    from fastio._errors import DecodeError
    from fastio.formats._compression import Writable
    from fastio.formats._index import IndexPlacement, Locator
    from fastio.reader._ranges import Chunk
    from fastio.reader._reader import Reader

__all__ = ["RecordFormat", "RecordWriter"]


class RecordFormat(ShardFormat):
    """A record format as the dataset drives it: every sample is its own unit
    (a compressed shard is one unit: decompression starts at byte 0). The
    index is kept beside the shard, else in ``index_dir``, else where
    ``index_placement`` puts it. Subclasses set ``name`` and implement
    :meth:`locator` and :meth:`samples` (of :meth:`_decompressed` chunks)."""

    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None = None,
        index_placement: IndexPlacement | None = None,
    ) -> None:
        self.index_dir = index_dir
        self.index_placement = index_placement

    @abc.abstractmethod
    def locator(self) -> Locator:
        """How the index finds this format's samples in a shard."""

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        index, problems = load_or_scan(
            reader, url, self.locator(), self.index_dir,
            tolerate=tolerate, placement=self.index_placement,
        )  # fmt: skip
        starts = index.starts.astype(np.int64)
        ends = index.ends.astype(np.int64)
        count, size = len(starts), index.size
        if codec_for(url) is not None:
            whole = np.array([size], np.int64)
            bounds = np.array([0, count], np.int64)
            return Layout(url, count, size, bounds, whole, starts, ends, whole=True), problems
        bounds = np.arange(count + 1, dtype=np.int64)
        return Layout(url, count, size, bounds, ends - starts, starts, ends), problems

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

    def index(self, url: str, size: int, mtime_ns: int) -> ShardIndex:
        """The index of the shard written, as a scan of it would build it;
        ``size`` and ``mtime_ns`` are those of its file once written (an index
        is reused while they stay so)."""
        starts, ends = np.array(self._starts, np.uint64), np.array(self._ends, np.uint64)
        return ShardIndex(url, self.format, size, mtime_ns, starts, ends)


def owned(value: Any) -> Any:
    """A sample's value owned by the caller: views of the reader's buffers copied."""
    return bytes(value) if isinstance(value, memoryview) else value
