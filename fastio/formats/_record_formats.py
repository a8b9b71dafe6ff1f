"""Record formats with a per-shard index: WebDataset tar, TFRecord, JSONL and
text lines (compressed with gzip or zstd, or not)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio._errors import DecodeError
from fastio.formats._layout import Layout, ShardFormat

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Iterator

    from fastio.formats._index import IndexPlacement
    from fastio.reader._ranges import Chunk
    from fastio.reader._reader import Reader

__all__ = ["JsonLinesFormat", "LinesFormat", "TFRecordFormat", "WebDatasetFormat"]


def _layout_from_index(url: str, index: Any, whole: bool, size: int) -> Layout:
    starts = index.starts.astype(np.int64)
    ends = index.ends.astype(np.int64)
    count = len(starts)
    if whole:
        return Layout(url, count, size, np.array([0, count], np.int64),
                      np.array([size], np.int64), starts, ends, whole=True)  # fmt: skip
    return Layout(url, count, size, np.arange(count + 1, dtype=np.int64), ends - starts,
                  starts, ends)  # fmt: skip


def _owned(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


class _Indexed(ShardFormat):
    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None = None,
        index_placement: IndexPlacement | None = None,
    ) -> None:
        self.index_dir = index_dir
        self.index_placement = index_placement  # tiering hook: see fastio.formats._index

    def layout(self, reader: Reader, url: str, tolerate: bool) -> tuple[Layout, list[DecodeError]]:
        from fastio.formats._compression import codec_for
        from fastio.formats._index import load_or_scan

        index, problems = load_or_scan(reader, url, self.name, self.index_dir, tolerate=tolerate,
                                       verify=getattr(self, "verify", True),
                                       placement=self.index_placement)  # fmt: skip
        return _layout_from_index(url, index, codec_for(url) is not None, index.size), problems

    def _chunks(self, chunks: Iterable[Chunk], layout: Layout) -> Iterable[Chunk]:
        if layout.whole:
            from fastio.formats._compression import decompress

            return decompress(chunks, layout.url)
        return chunks


class WebDatasetFormat(_Indexed):
    name = "webdataset"

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[dict[str, Any]]:
        from fastio.formats._webdataset import decode_webdataset

        for sample in decode_webdataset(self._chunks(chunks, layout), layout.url):
            yield {key: _owned(value) for key, value in sample.items()}

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        columnar = _columnar("columns_webdataset")
        if columnar is None:
            yield from super().batches(chunks, layout)
            return
        yield from columnar(self._chunks(chunks, layout), layout.url)


class TFRecordFormat(_Indexed):
    name = "tfrecord"

    def __init__(
        self,
        index_dir: str | os.PathLike[str] | None = None,
        verify: bool = True,
        example: bool = True,
        index_placement: IndexPlacement | None = None,
    ) -> None:
        super().__init__(index_dir, index_placement)
        self.verify = verify
        self.example = example

    def options(self) -> dict[str, Any]:
        return {"verify": self.verify, "example": self.example}

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        from fastio.formats._tfrecord import locate_tfrecords, parse_example

        records = locate_tfrecords(self._chunks(chunks, layout), layout.url, self.verify)
        if not self.example:
            for _, _, record in records:
                yield bytes(record)
            return
        for start, _, record in records:
            try:
                yield parse_example(record)
            except DecodeError as error:
                message = str(error).split(": ", 1)[1]
                raise DecodeError(message, layout.url, start) from None

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        columnar = _columnar("columns_tfrecord")
        if self.example or columnar is None:
            yield from super().batches(chunks, layout)
            return
        yield from columnar(self._chunks(chunks, layout), layout.url, self.verify)


class JsonLinesFormat(_Indexed):
    name = "jsonl"

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        from fastio.formats._lines import decode_jsonl

        return decode_jsonl(self._chunks(chunks, layout), layout.url)

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.json as pa_json

        data = b"".join(bytes(c.data) for c in self._chunks(chunks, layout))
        if not data.strip():
            return
        try:
            table = pa_json.read_json(io.BytesIO(data))
        except pa.ArrowInvalid as error:
            raise DecodeError(f"JSON lines do not parse: {error}", layout.url, -1) from None
        yield from table.to_batches()


class LinesFormat(_Indexed):
    name = "lines"

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[str]:
        from fastio.formats._lines import locate_lines

        for offset, _, line in locate_lines(self._chunks(chunks, layout), layout.url):
            try:
                yield str(line, "utf-8")
            except UnicodeDecodeError as error:
                raise DecodeError(f"line is not UTF-8: {error}", layout.url, offset) from None

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        columnar = _columnar("columns_lines")
        if columnar is None:
            import pyarrow as pa

            lines = list(self.samples(chunks, layout))
            if lines:
                yield pa.RecordBatch.from_pydict({"line": pa.array(lines, pa.string())})
            return
        import pyarrow as pa

        for batch in columnar(self._chunks(chunks, layout), layout.url):
            try:  # text, as samples are (validated as UTF-8 by the cast)
                yield batch.cast(pa.schema([("line", pa.string())]))
            except pa.ArrowInvalid as error:
                raise DecodeError(f"a line is not UTF-8: {error}", layout.url, -1) from None


def _columnar(name: str) -> Any:
    """A native columnar decoder where the build has it."""
    try:
        from fastio.formats import _columnar as module
    except ImportError:
        return None
    return getattr(module, name, None)
