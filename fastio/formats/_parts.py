"""WebDataset samples that a tar collector found but did not copy yet: parts
that the dataset slices and joins as it cuts batches, gathered natively into
each batch once, so that a sample's bytes are copied once on their way from
the read buffers into the batch, however many reads and shards it spans.

The buffers the samples lie in stay referenced until the part is gathered or
dropped: they count against the reader's memory budget as lent buffers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastio._native import gather_tar
from fastio.formats._reassemble import arrow

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from fastio._native import TarRows

__all__ = ["TarPart"]

# (samples, first row, rows, shard URL)
Span = tuple["TarRows", int, int, str]


class TarPart:
    """Rows of one or more collections of tar samples, in order."""

    __slots__ = ("num_rows", "spans")

    def __init__(self, spans: Sequence[Span]) -> None:
        self.spans = tuple(spans)
        self.num_rows = sum(rows for _, _, rows, _ in self.spans)

    @classmethod
    def of(cls, samples: TarRows, url: str) -> TarPart:
        return cls([(samples, 0, samples.num_rows, url)])

    @classmethod
    def join(cls, parts: Sequence[TarPart]) -> TarPart:
        spans: list[Span] = []
        for part in parts:
            for span in part.spans:
                if spans and spans[-1][0] is span[0] and spans[-1][1] + spans[-1][2] == span[1]:
                    samples, first, rows, url = spans[-1]
                    spans[-1] = (samples, first, rows + span[2], url)
                else:
                    spans.append(span)
        return cls(spans)

    def slice(self, offset: int, length: int) -> TarPart:
        """Rows ``offset..offset + length``, as ``pyarrow.RecordBatch.slice``."""
        spans: list[Span] = []
        skip, want = offset, length
        for samples, first, rows, url in self.spans:
            if want <= 0:
                break
            if skip >= rows:
                skip -= rows
                continue
            taken = min(rows - skip, want)
            spans.append((samples, first + skip, taken, url))
            want -= taken
            skip = 0
        return TarPart(spans)

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

    def combine_chunks(self) -> Any:
        """The rows gathered, for gathers in another order (:meth:`batch`)."""
        return self.batch()

    def take(self, rows: np.ndarray) -> Any:
        return self.batch().take(rows)
