"""Text line shards (JSONL and plain lines)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fastio._errors import DecodeError
from fastio._native import split_lines

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from fastio.reader._ranges import Chunk


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
    for chunk in chunks:
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
    index = 0
    for offset, _, line in locate_lines(chunks, url):
        text = bytes(line)
        if text.strip():
            try:
                yield json.loads(text)
            except ValueError as error:
                raise DecodeError(f"line is not JSON: {error}", url, offset, index) from None
            index += 1


def locate_json_lines(chunks: Iterable[Chunk], url: str) -> Iterator[tuple[int, int, memoryview]]:
    """Like :func:`locate_lines` without blank lines: one entry per JSON value,
    so that an index of a JSONL shard counts what :func:`decode_jsonl` yields."""
    for start, end, line in locate_lines(chunks, url):
        if bytes(line).strip():
            yield start, end, line
