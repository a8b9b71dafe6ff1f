"""Compressed shards: a stage between the reader and a decoder, and between a
writer and its file.

``decompress(chunks, url)`` turns the chunks of a gzip or zstd shard into chunks
of its decompressed bytes, which any decoder accepts. Decompressed data is new
memory by nature; it comes in pieces of at most ``piece_size`` bytes so that
memory stays bounded whatever the compression ratio. ``compressing(file,
codec)`` puts a compressor in front of a file that a writer writes to.
"""

from __future__ import annotations

import contextlib
import gzip
import zlib
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from fastio._errors import CorruptRecordError, TruncatedShardError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from typing_extensions import Buffer

    from fastio.reader._ranges import Chunk

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_DEFAULT_PIECE = 1 << 20


def codec_for(url: str) -> str | None:
    """``"gzip"``, ``"zstd"`` or None, from the URL's extension."""
    lowered = url.lower()
    if lowered.endswith((".gz", ".tgz")):
        return "gzip"
    if lowered.endswith((".zst", ".zstd")):
        return "zstd"
    return None


def _zstandard(doing: str) -> Any:
    try:
        import zstandard
    except ImportError:
        raise ImportError(
            f"{doing} zstd shards needs the zstandard package: pip install 'fastio[zstd]'"
        ) from None
    return zstandard


def decompress(
    chunks: Iterable[Chunk], url: str, codec: str | None = None, piece_size: int = _DEFAULT_PIECE
) -> Iterator[Chunk]:
    """The decompressed bytes of one shard as chunks (``offset`` counts
    decompressed bytes). ``codec`` is ``"gzip"``, ``"zstd"``, or None to tell
    from the URL's extension, else from the data's magic bytes. Damaged data
    raises :class:`CorruptRecordError`, a stream cut short
    :class:`TruncatedShardError`; both name the URL and the compressed offset."""
    stream = iter(chunks)
    first = next(stream, None)
    if first is None:
        return
    codec = codec or codec_for(url) or _sniff(first.data)
    if codec not in ("gzip", "zstd"):
        raise ValueError(f"{url}: unknown compression {codec!r} (gzip or zstd)")
    inflate = _gunzip if codec == "gzip" else _unzstd
    produced = 0
    for piece in inflate(_prepend(first, stream), url, piece_size):
        yield first._replace(offset=produced, data=piece, end_of_range=False, end_of_shard=False)
        produced += len(piece)


def _gunzip(chunks: Iterable[Chunk], url: str, piece_size: int) -> Iterator[memoryview]:
    decompressor = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
    inside_member = False  # input fed to the current member, and its end not seen
    consumed = 0
    for chunk in chunks:
        data: bytes | memoryview = chunk.data
        try:
            while data:
                inside_member = True
                output = decompressor.decompress(data, piece_size)
                if output:
                    yield memoryview(output)
                if decompressor.eof:
                    # Concatenated members (cat a.gz b.gz) form one gzip stream.
                    data = decompressor.unused_data
                    decompressor = zlib.decompressobj(wbits=47)
                    inside_member = False
                else:
                    data = decompressor.unconsumed_tail
        except zlib.error as error:
            raise CorruptRecordError(f"gzip data is damaged: {error}", url, consumed) from None
        consumed += chunk.data.nbytes
    if inside_member:
        raise TruncatedShardError("gzip stream ends early", url, consumed)


def _unzstd(chunks: Iterable[Chunk], url: str, piece_size: int) -> Iterator[memoryview]:
    zstandard = _zstandard("reading")
    decompressor = zstandard.ZstdDecompressor().decompressobj()

    consumed = 0
    for chunk in chunks:
        try:
            output = decompressor.decompress(bytes(chunk.data))
        except zstandard.ZstdError as error:
            raise CorruptRecordError(f"zstd data is damaged: {error}", url, consumed) from None
        for start in range(0, len(output), piece_size):
            yield memoryview(output)[start : start + piece_size]
        consumed += chunk.data.nbytes
    if not decompressor.eof:
        raise TruncatedShardError("zstd stream ends early", url, consumed)


def _prepend(first: Chunk, rest: Iterator[Chunk]) -> Iterator[Chunk]:
    yield first
    yield from rest


def _sniff(data: memoryview) -> str | None:
    head = bytes(data[:4])
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    if head == _ZSTD_MAGIC:
        return "zstd"
    return None


class Writable(Protocol):
    """A binary file, or a compressor in front of one: what shard writers write to."""

    def write(self, data: Buffer, /) -> int: ...


@contextlib.contextmanager
def compressing(file: BinaryIO, codec: str | None) -> Iterator[Writable]:
    """``file`` behind a ``"gzip"`` or ``"zstd"`` compressor (None: ``file``
    itself), finished when the block ends (``file`` stays open). The output
    depends on the input alone: no name or time in a gzip header. Raises
    ValueError for another codec, ImportError without zstandard for zstd."""
    if codec is None:
        yield file
    elif codec == "gzip":
        with gzip.GzipFile(filename="", mode="wb", fileobj=file, mtime=0, compresslevel=6) as gz:
            yield gz
    elif codec == "zstd":
        compressor = _zstandard("writing").ZstdCompressor(level=3)
        with compressor.stream_writer(file, closefd=False) as zst:
            yield zst
    else:
        raise ValueError(f"unknown compression {codec!r} (gzip or zstd)")
