"""Samples that a collector found but did not copy yet (WebDataset samples
of tar members, tf.train.Example records): parts that the dataset slices and
joins as it cuts batches, gathered natively into each batch once, so that a
sample's bytes are copied once on their way from the read buffers into the
batch, however many reads and shards it spans. Rows that a batch takes a
few at a time, as reads come in, are copied (or parsed) into it as they
come, by a :class:`PartBuilder` of their kind (``fastio.dataset._batching``).

The buffers the samples lie in stay referenced until the part is gathered or
dropped: they count against the reader's memory budget as lent buffers.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio._native import TarBatch, gather_tar
from fastio.formats._reassemble import arrow

if TYPE_CHECKING:
    from collections.abc import Sequence

    from typing_extensions import Self

    from fastio._native import TarRows

__all__ = ["Part", "PartBuilder", "TarPart"]


class Part(abc.ABC):
    """Rows of one or more collections, in order: ``spans`` of (collection,
    first row, rows, what else the collection's rows need)."""

    __slots__ = ("num_rows", "spans")

    def __init__(self, spans: Sequence[tuple[Any, ...]]) -> None:
        self.spans = tuple(spans)
        self.num_rows = sum(span[2] for span in self.spans)

    @classmethod
    def join(cls, parts: Sequence[Self]) -> Self:
        spans: list[tuple[Any, ...]] = []
        for part in parts:
            for span in part.spans:
                last = spans[-1] if spans else None
                if last is not None and last[0] is span[0] and last[1] + last[2] == span[1]:
                    spans[-1] = (last[0], last[1], last[2] + span[2], *last[3:])
                else:
                    spans.append(span)
        return cls(spans)

    def slice(self, offset: int, length: int) -> Self:
        """Rows ``offset..offset + length``, as ``pyarrow.RecordBatch.slice``."""
        spans: list[tuple[Any, ...]] = []
        skip, want = offset, length
        for span in self.spans:
            rows = span[2]
            if want <= 0:
                break
            if skip >= rows:
                skip -= rows
                continue
            taken = min(rows - skip, want)
            spans.append((span[0], span[1] + skip, taken, *span[3:]))
            want -= taken
            skip = 0
        return type(self)(spans)

    def pick(self, rows: np.ndarray) -> Self:
        """Rows ``rows`` (positions in this part), in that order, still not
        copied: a shuffled batch is then gathered straight from the read
        buffers, each sample's bytes copied once. Raises IndexError for a
        row that is not there."""
        counts = np.fromiter((span[2] for span in self.spans), np.int64, len(self.spans))
        firsts = np.fromiter((span[1] for span in self.spans), np.int64, len(self.spans))
        ends = np.cumsum(counts)
        wanted = np.asarray(rows, np.int64)
        if len(wanted) and (int(wanted.min()) < 0 or int(wanted.max()) >= self.num_rows):
            raise IndexError(f"rows outside 0..{self.num_rows}")
        which = np.searchsorted(ends, wanted, side="right")
        in_collection = wanted - (ends - counts)[which] + firsts[which]
        picked: list[tuple[Any, ...]] = []
        for span_at, row in zip(which.tolist(), in_collection.tolist(), strict=True):
            span = self.spans[span_at]
            last = picked[-1] if picked else None
            if last is not None and last[0] is span[0] and last[1] + last[2] == row:
                picked[-1] = (last[0], last[1], last[2] + 1, *last[3:])
            else:
                picked.append((span[0], row, 1, *span[3:]))
        return type(self)(picked)

    def row_bytes(self) -> float | None:
        """The mean bytes of a row of the collections the spans are rows of,
        where they say (None where they do not)."""
        collections = list({id(span[0]): span[0] for span in self.spans}.values())
        total, rows = 0, 0
        for collection in collections:
            size = getattr(collection, "nbytes", None)
            if size is None:
                return None
            total, rows = total + int(size), rows + int(collection.num_rows)
        return total / rows if rows else None

    @abc.abstractmethod
    def batch(self) -> Any:
        """The rows gathered into one batch."""

    @classmethod
    def building(cls, rows: int) -> PartBuilder | None:
        """A builder of batches of up to ``rows`` rows of such parts, copied
        in as they are added; None where this kind has none."""
        return None

    def take(self, rows: np.ndarray) -> Any:
        """Rows ``rows`` gathered into one batch, in that order."""
        return self.pick(rows).batch()


class PartBuilder(abc.ABC):
    """A batch of one kind of part, each part's rows copied (or parsed) into
    it as the part is added: in stored order a batch of large samples is made
    of many reads, and copied only once complete, its first reads' bytes had
    left the CPU's caches by then."""

    kind: type[Part]

    @property
    @abc.abstractmethod
    def num_rows(self) -> int: ...

    @abc.abstractmethod
    def add(self, part: Part) -> Part | None:
        """Adds ``part``'s rows; returns the rows it could not add (a column
        past Arrow's 2 GiB), to be gathered as they are, or None."""

    @abc.abstractmethod
    def take(self) -> Any:
        """The rows added as one batch; the builder is empty again."""


class TarPart(Part):
    """Rows of tar sample collections: spans of (samples, first row, rows, shard URL)."""

    __slots__ = ()

    @classmethod
    def of(cls, samples: TarRows, url: str) -> TarPart:
        return cls([(samples, 0, samples.num_rows, url)])

    @classmethod
    def building(cls, rows: int) -> PartBuilder | None:
        return _TarBuilder(rows)

    def batch(self) -> Any:
        """The rows as one ``pyarrow.RecordBatch`` (each sample's bytes copied
        once); a ``pyarrow.Table`` of a chunk per span where a column would
        pass Arrow's 2 GiB."""
        pa = arrow()
        urls: dict[str, int] = {}
        spans = [(samples, first, rows, urls.setdefault(url, len(urls)))
                 for samples, first, rows, url in self.spans]  # fmt: skip
        try:
            return pa.record_batch(gather_tar(spans, list(urls)))
        except OverflowError:
            # A column past Arrow's 2 GiB: a batch per span, as pyarrow joins them.
            tables = [pa.Table.from_batches([pa.record_batch(gather_tar([(s, f, r, 0)], [u]))])
                      for s, f, r, u in self.spans]  # fmt: skip
            return pa.concat_tables(tables, promote_options="default")


class _TarBuilder(PartBuilder):
    """Tar rows copied into the batch's columns as they are added: the read
    buffers they lie in go back to the reader at once."""

    kind = TarPart

    def __init__(self, rows: int) -> None:
        self._batch = TarBatch(rows)

    @property
    def num_rows(self) -> int:
        return int(self._batch.num_rows)

    def add(self, part: Part) -> Part | None:
        for at, (samples, first, rows, url) in enumerate(part.spans):
            try:
                self._batch.add(samples, first, rows, url)
            except OverflowError:  # a column past Arrow's 2 GiB: as TarPart.batch joins them
                return TarPart(part.spans[at:])
        return None

    def take(self) -> Any:
        return arrow().record_batch(self._batch.take())
