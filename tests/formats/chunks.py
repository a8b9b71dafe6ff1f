"""Chunks for the decoders: from the real reader, or cut from bytes in memory;
and what the decoders yield, made comparable."""

from __future__ import annotations

import itertools
import tarfile

import pyarrow as pa
import pytest

import fastio

READ_SIZES = [4096, 65_536, 1 << 20]
TAR_FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}


def stream(path: str, read_size: int, ranges: list[fastio.ByteRange] | None = None):
    """The chunks of ``path`` (or of its ``ranges``) through the real reader."""
    shard = fastio.Shard(tuple(ranges)) if ranges else path
    with fastio.Reader(read_size=read_size, outstanding_requests=4) as reader:
        yield from reader.stream([shard])


def chunk_of(data: bytes, offset: int = 0) -> fastio.Chunk:
    return fastio.Chunk(0, 0, "<memory>", offset, memoryview(data), True, True)


def chunked(data: bytes, cuts: list[int]) -> list[fastio.Chunk]:
    """``data`` as chunks cut at ``cuts``."""
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [chunk_of(data[a:b], a) for a, b in itertools.pairwise(points)]


def rows(batches) -> list[dict]:
    """The samples of record batches as dicts, without the nulls of missing extensions."""
    found = []
    for batch in batches:
        assert isinstance(batch, pa.RecordBatch)
        batch.validate(full=True)
        assert batch.num_rows > 0
        found += [{k: v for k, v in row.items() if v is not None} for row in batch.to_pylist()]
    return found


def plain(samples) -> list[dict]:
    return [
        {k: bytes(v) if isinstance(v, memoryview) else v for k, v in sample.items()}
        for sample in samples
    ]


def column(batches, name: str) -> list[bytes]:
    values = []
    for batch in batches:
        batch.validate(full=True)
        assert batch.schema.names == [name]
        assert batch.schema.field(name).type == pa.binary()
        values += batch.column(name).to_pylist()
    return values


def decode_until_error(decoder, chunks, url):
    """What ``decoder`` yields before it raises a DecodeError, and the error."""
    found: list = []
    with pytest.raises(fastio.DecodeError) as caught:
        found.extend(decoder(chunks, url))  # what came before the error stays
    return found, caught.value
