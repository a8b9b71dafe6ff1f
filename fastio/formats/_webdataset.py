"""WebDataset tar shards: members grouped into samples by key, as webdataset does."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fastio._errors import CorruptRecordError, DecodeError
from fastio._native import scan_tar
from fastio.formats._reassemble import framed

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from fastio._native import TarMember
    from fastio.reader._ranges import Chunk

# webdataset's rule: the key is the path up to the first dot of its last
# component, the extension is the rest ("a/b.seg.png" -> "a/b", "seg.png").
_KEY_EXT = re.compile(r"^((?:.*/|)[^./]+)[.]([^/]*)$")
_BLOCK = 512
_REGULAR = frozenset("07")


def sample_key(name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a member name, or None for names without an
    extension (webdataset skips those)."""
    match = _KEY_EXT.match(name)
    return (match.group(1), match.group(2)) if match else None


def _padded(size: int) -> int:
    return (size + _BLOCK - 1) // _BLOCK * _BLOCK


def _members(chunks: Iterable[Chunk], url: str) -> Iterator[tuple[TarMember, int, memoryview]]:
    """The tar members of one shard, each with the shard offset of the buffer
    its offsets count from, and its data."""
    index = 0

    def scan(
        view: memoryview, base: int
    ) -> tuple[list[tuple[TarMember, int, memoryview]], int, bool, Exception | None, int]:
        nonlocal index
        scan = scan_tar(view)
        found = [(member, base, view[member.data_offset : member.data_offset + member.size])
                 for member in scan.members]  # fmt: skip
        index += len(found)
        problem = None
        if scan.error is not None:
            problem = CorruptRecordError(
                f"damaged tar header ({scan.error.kind})", url, base + scan.error.offset, index
            )
        return found, scan.consumed, scan.at_end, problem, scan.needed

    return framed(chunks, url, scan)


def decode_webdataset(chunks: Iterable[Chunk], url: str) -> Iterator[dict[str, Any]]:
    """Samples of one WebDataset tar shard: ``{"__key__", "__url__", ext: view}``
    for consecutive members sharing a key. Directories and names without an
    extension are skipped, as webdataset does; a repeated extension within one
    sample raises :class:`DecodeError`."""
    return (sample for _, _, sample in locate_webdataset(chunks, url))


def locate_webdataset(
    chunks: Iterable[Chunk], url: str
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """Like :func:`decode_webdataset`, with each sample's byte range in the shard
    (its first member's header to its last member's padded data), for the index.
    A sample's range read on its own decodes to the same sample."""
    sample: dict[str, Any] | None = None
    start = end = 0
    for member, base, data in _members(chunks, url):
        if member.typeflag not in _REGULAR:
            continue
        name = member.name
        parts = sample_key(name)
        if parts is None:
            continue
        key, extension = parts
        if sample is None or sample["__key__"] != key:
            if sample is not None:
                yield start, end, sample
            sample = {"__key__": key, "__url__": url}
            start = base + member.header_offset
        if extension in sample:
            raise DecodeError(
                f"{name!r} repeats extension {extension!r} of sample {key!r}",
                url,
                base + member.header_offset,
            )
        sample[extension] = data
        end = base + member.data_offset + _padded(member.size)
    if sample is not None:
        yield start, end, sample
