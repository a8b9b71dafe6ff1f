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
import re
import zlib
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol
from urllib.parse import urlsplit

from fastio._errors import CorruptRecordError, TruncatedShardError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from typing_extensions import Buffer

    from fastio.reader._ranges import Chunk

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_DEFAULT_PIECE = 1 << 20
_GZIP_TRAILER = 8  # CRC-32 and size of a gzip member
_ZSTD_CHECKSUM = 4  # a zstd frame's content checksum (when written)
_ZSTD_MAX_HEADER = 18


def named_path(url: str) -> str:
    """The part of ``url`` whose extension names what it holds: of an fsspec
    chain, the first link that names an object (``zip://a.tar::s3://b/c.zip``
    holds ``a.tar``; ``simplecache::s3://b/a.tar`` names it in its second); a
    remote URL's path, without a query (a signed URL's) or fragment."""
    if "::" in url:
        url = next((link for link in url.split("::") if not re.fullmatch(_PROTOCOL, link)), url)
    if "://" in url and not url.startswith("file://") and ("?" in url or "#" in url):
        return urlsplit(url).path
    return url


# A chain's link that names no object. (Compiled, by re, at first use: fsspec chains only.)
_PROTOCOL = r"[A-Za-z][A-Za-z0-9+_-]*"


def codec_for(url: str) -> str | None:
    """``"gzip"``, ``"zstd"`` or None, from the URL's extension."""
    lowered = named_path(url)[-5:].lower()  # the longest extension told: ".zstd"
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
    from the URL's extension, else from the data's magic bytes. Concatenated
    streams (gzip members, zstd frames) are one stream. Damaged data raises
    :class:`CorruptRecordError`, a stream cut short or an empty file
    :class:`TruncatedShardError`; both name the URL and the compressed
    offset. Everything a checksum covers is delivered before a mismatch is
    raised. A mismatch, and a stream cut in its checksum or trailer, have
    ``lost`` 0 (the decoder adds a record it was in the middle of); damage
    inside the data, or a cut there, ``lost`` 1 (what the rest of the stream
    held is unknowable)."""
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


def _held_back(chunks: Iterable[Chunk], keep: int) -> Iterator[tuple[bytes | memoryview, int]]:
    """The bytes of ``chunks`` in pieces, each with its offset in the stream,
    the stream's last ``keep`` bytes (its checksum) held back to come last:
    a decompressor that meets a bad checksum raises without the output of
    the call, so that call should have none to give."""
    held = b""
    offset = 0  # of the first byte not yet given out
    for chunk in chunks:
        view = chunk.data
        if len(view) >= keep:
            pieces: tuple[bytes | memoryview, ...] = (held, view[: len(view) - keep])
            held = bytes(view[len(view) - keep :])
        else:
            joined = held + bytes(view)
            pieces = (joined[: max(len(joined) - keep, 0)],)
            held = joined[len(pieces[0]) :]
        for piece in pieces:
            if len(piece):
                yield piece, offset
                offset += len(piece)
    if held:
        yield held, offset


def _gunzip(chunks: Iterable[Chunk], url: str, piece_size: int) -> Iterator[memoryview]:
    decompressor = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
    inside_member = False  # input fed to the current member, and its end not seen
    between = False  # after a member's end: zero padding may follow (as gzip reads it)
    offset = end = -1
    at = 0  # where the bytes fed to the decompressor start in the stream
    for data, offset in _held_back(chunks, _GZIP_TRAILER):
        end = offset + len(data)
        at = offset
        try:
            while data:
                if between:
                    data, at = _past_zeros(data, at)
                    if not data:
                        break
                    decompressor = zlib.decompressobj(wbits=47)
                    between = False
                inside_member = True
                output = decompressor.decompress(data, piece_size)
                if output:
                    yield memoryview(output)
                if decompressor.eof:
                    # Concatenated members (cat a.gz b.gz) form one gzip stream.
                    unused = decompressor.unused_data
                    at += len(data) - len(unused)
                    data, between, inside_member = unused, True, False
                else:
                    tail = decompressor.unconsumed_tail
                    at += len(data) - len(tail)
                    data = tail
        except zlib.error as error:
            raise _damaged("gzip", error, url, at) from None
    if offset < 0:
        raise TruncatedShardError("the file is empty (no gzip stream)", url, 0, lost=0)
    if inside_member:
        lost = 0 if _only_trailer_missing(decompressor) else 1
        raise TruncatedShardError("gzip stream ends early", url, end, lost=lost)


def _past_zeros(data: bytes | memoryview, at: int) -> tuple[bytes, int]:
    """``data`` (at stream offset ``at``) past the zero bytes it starts with:
    gzip (and zstd) readers take zeros after a stream's end as padding (tape
    blocks, a file system's), not as another, damaged stream."""
    raw = bytes(data)
    rest = raw.lstrip(b"\0")
    return rest, at + len(raw) - len(rest)


def _only_trailer_missing(decompressor: Any) -> bool:
    """Whether a gzip member cut short has all its data: then a copy of it
    takes any eight bytes as its trailer (and finds the checksum wrong),
    where data cut short takes them as more data."""
    probe = decompressor.copy()
    try:
        probe.decompress(bytes(_GZIP_TRAILER))
    except zlib.error as error:
        return "check" in str(error)  # "incorrect data check", "incorrect length check"
    return bool(probe.eof)


def _unzstd(chunks: Iterable[Chunk], url: str, piece_size: int) -> Iterator[memoryview]:
    zstandard = _zstandard("reading")
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    head = b""  # the first bytes of the current frame, for its header
    produced = 0  # bytes the current frame gave
    between = False  # after a frame's end: zero padding may follow
    offset = end = -1
    at = 0  # where the bytes fed to the decompressor start in the stream
    for data, offset in _held_back(chunks, _ZSTD_CHECKSUM):
        end = offset + len(data)
        pending, at = bytes(data), offset
        try:
            while pending:
                if between:
                    pending, at = _past_zeros(pending, at)
                    if not pending:
                        break
                    between = False
                if len(head) < _ZSTD_MAX_HEADER:
                    head += pending[: _ZSTD_MAX_HEADER - len(head)]
                output = decompressor.decompress(pending)
                produced += len(output)
                for start in range(0, len(output), piece_size):
                    yield memoryview(output)[start : start + piece_size]
                fed, pending = len(pending), b""
                if decompressor.eof:  # concatenated frames form one stream
                    pending = decompressor.unused_data
                    at += fed - len(pending)
                    decompressor = zstandard.ZstdDecompressor().decompressobj()
                    head, produced, between = b"", 0, True
        except zstandard.ZstdError as error:
            raise _damaged("zstd", error, url, at) from None
    if offset < 0:
        raise TruncatedShardError("the file is empty (no zstd stream)", url, 0, lost=0)
    if head:
        # All of it came out if the frame says how much there is and that
        # much did (only the checksum was cut); else what followed is unknown.
        try:
            whole = zstandard.get_frame_parameters(head).content_size == produced
        except zstandard.ZstdError:
            whole = False
        raise TruncatedShardError("zstd stream ends early", url, end, lost=0 if whole else 1)


def _damaged(codec: str, error: Exception, url: str, offset: int) -> CorruptRecordError:
    text = str(error)
    # A checksum over the whole stream: everything it covers was delivered.
    checksum = "incorrect data check" in text or "incorrect length check" in text or (
        "checksum" in text)  # fmt: skip
    what = "checksum does not match its data" if checksum else "data is damaged"
    return CorruptRecordError(f"the {codec} stream's {what}: {text}", url, offset,
                              lost=0 if checksum else 1)  # fmt: skip


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
