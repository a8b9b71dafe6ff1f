"""Text line shards: JSON Lines (a JSON value a line) and plain lines of text.

Read as lines (views), JSON values, text, or Arrow batches of one column,
located for the index, and written.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

from fastio._errors import DecodeError, MixedTypesError
from fastio._native import RecordColumns, split_lines
from fastio.formats._index import Locator
from fastio.formats._reassemble import MAX_BATCH_BYTES, arrow, too_large
from fastio.formats._records import RecordFormat, RecordWriter

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    from fastio.formats._layout import Layout
    from fastio.reader._ranges import Chunk

__all__ = [
    "JsonLinesFormat",
    "JsonLinesWriter",
    "LinesFormat",
    "LinesWriter",
    "columns_lines",
    "decode_jsonl",
    "decode_lines",
    "locate_json_lines",
    "locate_lines",
]


def decode_lines(chunks: Iterable[Chunk], url: str) -> Iterator[memoryview]:
    """The lines of one shard without their newlines, as views (a line cut by a
    chunk boundary is joined in a small carry buffer). A last line without a
    newline is a line too, as in Python's ``str.splitlines``."""
    return (line for _, _, line in locate_lines(chunks, url))


def locate_lines(chunks: Iterable[Chunk], url: str) -> Iterator[tuple[int, int, memoryview]]:
    """Like :func:`decode_lines`, with each line's byte range in the shard
    (newline included), for the index."""
    carry = bytearray()
    current_range = -1
    position: int | None = None  # shard offset of the first byte of the current chunk
    line_start = 0
    stream = iter(chunks)
    while True:
        try:
            chunk = next(stream)
        except StopIteration:
            break
        except DecodeError as error:  # a compressed stream's: a line cut short is lost
            if carry:
                error.lost = max(error.lost, 1)
            raise
        view = chunk.data
        if position is None or (chunk.range != current_range and not carry):
            # A stream may start mid-file, and skip bytes between ranges.
            position = line_start = chunk.offset
        current_range = chunk.range
        scan = split_lines(view)
        ends = scan.ends
        if not ends:
            carry += view
            position += len(view)
            continue
        start = 0
        if carry:  # the first newline ends the line cut by the previous boundary
            carry += view[: ends[0]]
            yield line_start, position + ends[0] + 1, memoryview(bytes(carry))
            carry.clear()
            start = ends[0] + 1
            ends = ends[1:]
        for end in ends:
            yield position + start, position + end + 1, view[start:end]
            start = end + 1
        line_start = position + scan.consumed
        carry += view[scan.consumed :]
        position += len(view)
    if carry and position is not None:
        yield line_start, position, memoryview(bytes(carry))


def decode_jsonl(chunks: Iterable[Chunk], url: str) -> Iterator[Any]:
    """The JSON values of one JSONL shard, one per non-blank line. A line that
    is not JSON raises :class:`DecodeError` naming its byte offset and index."""
    for value in _json_values(chunks, url):
        if isinstance(value, DecodeError):
            raise value
        yield value


def _json_values(chunks: Iterable[Chunk], url: str) -> Iterator[Any]:
    """The JSON values of one JSONL shard, a line that is not JSON as its
    DecodeError in its place."""
    index = 0
    for offset, _, line in locate_lines(chunks, url):
        text = bytes(line)
        if text.strip():
            try:
                yield json_of(text)
            except ValueError as error:
                yield DecodeError(f"line is not {error}", url, offset, index)
            index += 1


def locate_json_lines(chunks: Iterable[Chunk], url: str) -> Iterator[tuple[int, int, memoryview]]:
    """Like :func:`locate_lines` without blank lines: one entry per JSON value,
    so that an index of a JSONL shard counts what :func:`decode_jsonl` yields."""
    for start, end, line in locate_lines(chunks, url):
        if bytes(line).strip():
            yield start, end, line


def columns_lines(
    chunks: Iterable[Chunk], url: str, *, max_batch_bytes: int = MAX_BATCH_BYTES
) -> Iterator[pa.RecordBatch]:
    """The lines :func:`decode_lines` yields (without their newlines; a last line
    without one is a line too), as record batches of one binary column
    ``line`` (of at most ``max_batch_bytes``), in order. A line cut by chunk
    boundaries is joined from a carry buffer and the chunk where it ends, in
    that chunk's batch."""
    pyarrow = arrow()
    collector = RecordColumns("line")
    carry = bytearray()
    carry_base = 0  # stream offset of the line that carry begins
    offset: int | None = None

    def take() -> Iterator[pa.RecordBatch]:
        batch = collector.take()
        if batch is not None:
            yield pyarrow.record_batch(batch)

    for chunk in chunks:
        view = chunk.data
        if offset is None:
            offset = carry_base = chunk.offset
        position = 0
        while True:
            found = collector.lines(view[position:], carry, False, max_batch_bytes)
            if found.rows and carry:
                carry = bytearray()  # the first line took it, and the collector keeps it
            position += found.consumed
            if not found.full:
                break
            if not collector.rows:
                raise too_large(url, carry_base if carry else offset + position, max_batch_bytes)
            yield from take()
        if position < len(view):
            if not carry:
                carry_base = offset + position
            carry += view[position:]
        offset += len(view)
        yield from take()
    if carry:  # a last line without a newline
        if collector.lines(b"", carry, True, max_batch_bytes).full:
            raise too_large(url, carry_base, max_batch_bytes)
        yield from take()


class JsonLinesFormat(RecordFormat):
    """JSON Lines. A line that is not JSON costs that sample alone: it comes
    as its DecodeError in its place, as samples and among batches."""

    name = "jsonl"

    def locator(self) -> Locator:
        return Locator(self.name, locate_json_lines)

    def own(self, record: Any, url: str, offset: int) -> Any:
        try:
            return json_of(bytes(record))
        except ValueError as error:
            raise DecodeError(f"line is not {error}", url, offset) from None

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        return _json_values(self._decompressed(chunks, layout), layout.url)

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        first, data, stopped = _joined(self._decompressed(chunks, layout))
        if data.strip():
            try:
                yield from _json_batches(data, layout.url, first)
            except DecodeError:  # lines that do not parse: read around them, one at a time
                yield from _json_lines_around_damage(data, layout.url, first)
        if stopped is not None:
            raise stopped


def _joined(chunks: Iterable[Chunk]) -> tuple[int, bytes, DecodeError | None]:
    """The offset and bytes of the complete lines of ``chunks``, and the error
    that cut them short (a compressed stream's), if any."""
    first: int | None = None
    pieces: list[bytes] = []
    stopped = None
    try:
        for chunk in chunks:
            if first is None:
                first = chunk.offset
            pieces.append(bytes(chunk.data))
    except DecodeError as error:
        stopped = error
    data = b"".join(pieces)
    if stopped is not None:
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            stopped.lost = max(stopped.lost, 1)
        data = data[:cut]
    return first or 0, data, stopped


def json_of(line: bytes) -> Any:
    """The JSON value of a line; ValueError saying "UTF-8: ..." or "JSON:
    ..." where it is not one. Strict UTF-8: ``json.loads`` of bytes lets
    encoded surrogates (ED A0 80) through, which no Arrow string holds."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"UTF-8: {error}") from None
    try:
        return json.loads(text)
    except ValueError as error:
        raise ValueError(f"JSON: {error}") from None


def _json_batches(data: bytes, url: str, offset: int) -> Iterator[Any]:
    pyarrow = arrow()
    import pyarrow.json as pa_json  # type: ignore[import-untyped,unused-ignore]

    # Arrow's parser takes what is not UTF-8 into its strings: checked first,
    # by decoding where it is not all ASCII (a scan that allocates nothing).
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DecodeError(f"JSON lines are not UTF-8: {error}", url,
                              offset + error.start) from None  # fmt: skip

    try:
        try:
            table = pa_json.read_json(io.BytesIO(data))
        except pyarrow.ArrowInvalid as error:
            if "straddl" not in str(error):
                raise
            # A line longer than the parser's blocks (1 MiB by default): the
            # lines in one block, which holds any of them.
            block = min(max(len(data), 1 << 20) + 1, (1 << 31) - 1)  # an int32 there
            options = pa_json.ReadOptions(block_size=block)
            table = pa_json.read_json(io.BytesIO(data), read_options=options)
    except pyarrow.ArrowInvalid as error:
        raise DecodeError(f"JSON lines do not parse: {error}", url, offset) from None
    yield from table.to_batches()


def _json_lines_around_damage(data: bytes, url: str, offset: int) -> Iterator[Any]:
    """Batches of the lines that are JSON objects, and in their places the
    DecodeErrors of those that are not. Raises MixedTypesError where the
    good lines still do not make one table (a field of two types: intact
    lines, which no policy may skip as damage)."""
    good = bytearray()
    good_start = offset
    index = 0
    for line in data.split(b"\n"):
        line += b"\n"  # (one too many after the last line, which counts for nothing)
        if line.strip():
            try:
                value = json_of(line)
                problem = None if isinstance(value, dict) else "a JSON object"
            except ValueError as error:
                problem = str(error)
            if problem is not None:
                if good:
                    yield from _typed_json_batches(bytes(good), url, good_start)
                    good.clear()
                yield DecodeError(f"line is not {problem}", url, offset, index)
            else:
                if not good:
                    good_start = offset
                good += line
            index += 1
        offset += len(line)
    if good:
        yield from _typed_json_batches(bytes(good), url, good_start)


def _typed_json_batches(data: bytes, url: str, offset: int) -> Iterator[Any]:
    """:func:`_json_batches` of lines that are all JSON objects: where they
    still do not parse, a field has two types (MixedTypesError)."""
    try:
        yield from _json_batches(data, url, offset)
    except DecodeError as error:
        raise MixedTypesError(f"{url} at byte {offset}: JSON lines whose fields have two types "
                              f"make no Arrow batch ({str(error).split(': ', 2)[-1]}); "
                              "iterate samples instead") from None  # fmt: skip


class LinesFormat(RecordFormat):
    """Lines of text. A line that is not UTF-8 costs that sample alone: it
    comes as its DecodeError in its place, as samples and among batches."""

    name = "lines"

    def locator(self) -> Locator:
        return Locator(self.name, locate_lines)

    def own(self, record: Any, url: str, offset: int) -> str:
        try:
            text = str(record, "utf-8")
        except UnicodeDecodeError as error:
            raise DecodeError(f"line is not UTF-8: {error}", url, offset) from None
        # A line ends at "\r\n" too (Windows' newline), as Python's text files read.
        return text[:-1] if text.endswith("\r") else text

    def samples(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        for offset, _, line in locate_lines(self._decompressed(chunks, layout), layout.url):
            try:
                yield self.own(line, layout.url, offset)
            except DecodeError as error:  # in the line's place: the lines after it are sound
                yield error

    def batch_of(self, samples: list[Any]) -> Any:
        pyarrow = arrow()
        return pyarrow.record_batch([pyarrow.array(samples, pyarrow.string())], ["line"])

    def batches(self, chunks: Iterable[Chunk], layout: Layout) -> Iterator[Any]:
        pyarrow = arrow()
        text = pyarrow.schema([("line", pyarrow.string())])
        offsets = _Offsets(self._decompressed(chunks, layout))
        for batch in columns_lines(offsets, layout.url):
            try:  # text, as samples are (validated as UTF-8 by the cast)
                yield _without_returns(batch.cast(text))
            except pyarrow.ArrowInvalid:
                yield from map(_without_returns,
                               _text_rows(batch, text, layout.url, offsets.position))  # fmt: skip
            offsets.passed(batch)


def _without_returns(batch: Any) -> Any:
    """A batch of lines (or an error in a line's place) with the "\r" of
    lines that ended in "\r\n" taken off, as :meth:`LinesFormat.own` does."""
    if isinstance(batch, DecodeError):
        return batch
    compute = arrow().compute
    column = batch.column(0)
    if not compute.any(compute.ends_with(column, "\r")).as_py():
        return batch
    trimmed = compute.replace_substring_regex(column, "\r$", "")
    return type(batch).from_arrays([trimmed], schema=batch.schema)


class _Offsets:
    """The chunks of a stream of lines, counting where the next batch's
    first line starts (for the error of a line that is not UTF-8)."""

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        self.chunks = chunks
        self.position = 0

    def __iter__(self) -> Iterator[Chunk]:
        for index, chunk in enumerate(self.chunks):
            if not index:
                self.position = chunk.offset
            yield chunk

    def passed(self, batch: Any) -> None:
        compute = arrow().compute
        column = batch.column(0)
        self.position += len(column) + (compute.sum(compute.binary_length(column)).as_py() or 0)


def _text_rows(batch: Any, schema: Any, url: str, offset: int) -> Iterator[Any]:
    """The lines of ``batch`` as text in batches, and in their places the
    DecodeErrors of those that are not UTF-8."""
    pyarrow = arrow()
    good: list[str] = []
    for line in batch.column(0).to_pylist():
        try:
            good.append(line.decode("utf-8"))
        except UnicodeDecodeError as error:
            if good:
                yield pyarrow.record_batch([pyarrow.array(good, pyarrow.string())], schema=schema)
                good = []
            yield DecodeError(f"line is not UTF-8: {error}", url, offset)
        offset += len(line) + 1
    if good:
        yield pyarrow.record_batch([pyarrow.array(good, pyarrow.string())], schema=schema)


# ---- writing ------------------------------------------------------------------------


class _LineWriter(RecordWriter):
    def _line(self, encoded: bytes) -> None:
        start = self.position
        self._put(encoded + b"\n")
        self._noted(start)


class LinesWriter(_LineWriter):
    """Writes lines of text, each ended by a newline."""

    format = "lines"

    def write(self, line: str) -> None:
        """Write ``line`` (UTF-8). Raises ValueError for a line with a newline in it."""
        if "\n" in line:
            raise ValueError(f"a line cannot hold a newline: {line[:40]!r}")
        self._line(line.encode())


class JsonLinesWriter(_LineWriter):
    """Writes JSON Lines: a JSON value a line, as :func:`json.dumps` makes it."""

    format = "jsonl"

    def write(self, value: Any) -> None:
        """Write ``value`` (anything :func:`json.dumps` takes; raises TypeError
        for what it does not)."""
        self._line(json.dumps(value).encode())
