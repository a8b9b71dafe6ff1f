"""Exceptions and warnings. One root, ``FastIOError``; each leaf also inherits the
built-in it refines, so ``except OSError`` and ``except FileNotFoundError`` work."""

from __future__ import annotations

import errno
import importlib
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "CacheError",
    "CacheFullError",
    "CacheIntegrityError",
    "CacheTimeoutError",
    "ConfigError",
    "CorruptRecordError",
    "DecodeError",
    "DirectIOFallbackWarning",
    "DownloadCancelled",
    "EngineFallbackWarning",
    "FastIOError",
    "FastIOWarning",
    "HTTPStatusError",
    "IndexFileError",
    "MissingExtraError",
    "MixedTypesError",
    "RangeIgnoredError",
    "ReaderClosedError",
    "RemoteConnectionError",
    "RemoteReadError",
    "RemoteTimeoutError",
    "ShardChangedError",
    "SkippedSamplesWarning",
    "TierFullError",
    "TruncatedFileError",
    "TruncatedShardError",
]


class FastIOError(Exception):
    """Root of every error fastio raises on its own account.

    Each also takes its message alone, as torch's DataLoader re-raises a
    worker's error in the main process (``type(error)(text)``, the text its
    traceback): the type is kept, so ``except`` clauses still match, and the
    fields are read back from the text where it holds them."""


def _raised_line(text: str, kind: type[BaseException]) -> str:
    """The line of a traceback's ``text`` where an error of ``kind`` was
    raised (what follows its type's name), else the text itself."""
    found = re.findall(rf"(?m)^(?:[\w.]*\.)?{kind.__name__}: (.*)$", text)
    return found[-1] if found else text


def _filename(line: str) -> str | None:
    """The file name an OSError's text ends in (``...: 'name'``)."""
    found = re.search(r": '(.*)'$", line)
    return found.group(1) if found else None


class TruncatedFileError(FastIOError, OSError):
    """A file ended before the bytes a read asked for.

    Raised when a range reaches past the end of its file, and when a file
    shrinks while it is being read. ``filename`` is the path, ``offset`` the
    file offset where data ran out, ``expected_end`` the offset the read needed.
    Check that the file is complete (an interrupted copy, a writer still
    running); the reader itself stays usable.
    """

    def __init__(self, path: str, offset: int | None = None, expected_end: int | None = None
                 ) -> None:  # fmt: skip
        if offset is None or expected_end is None:  # rebuilt from its text (see FastIOError)
            line = _raised_line(path, type(self))
            numbers = [int(n) for n in re.findall(r"offset (\d+)", line)] + [0, 0]
            super().__init__(errno.EIO, path, _filename(line))
            self.offset, self.expected_end = numbers[0], numbers[1]
            return
        message = (
            f"file ended at offset {offset} but the read needed bytes up to "
            f"offset {expected_end} (file truncated or still being written)"
        )
        super().__init__(errno.EIO, message, path)
        self.offset = offset
        self.expected_end = expected_end

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError pickles its args; ours differ, so DataLoader workers need this.
        return (type(self), (self.filename, self.offset, self.expected_end))


class DecodeError(FastIOError, ValueError):
    """A shard's bytes do not decode as its format says.

    ``url`` names the shard, ``offset`` the byte offset in it where the bad
    record starts, ``record`` the record's index in the shard (or None where it
    cannot be counted). The file itself is damaged or not of this format.
    ``lost`` is how many of the shard's samples the damage costs, as far as
    the decoder can tell: 1 (the damaged record) unless it knows better, 0
    where every sample decoded (a shard cut exactly between records, a
    checksum over a whole compressed stream).
    """

    def __init__(
        self, message: str, url: str | None = None, offset: int | None = None,
        record: int | None = None, *, lost: int = 1,
    ) -> None:  # fmt: skip
        if url is None or offset is None:  # rebuilt from its text (see FastIOError)
            super().__init__(message)
            found = re.match(_LOCATED, _raised_line(message, type(self)))
            self.url = found.group("url") if found else ""
            self.offset = int(found.group("offset")) if found else 0
            self.record = int(found.group("record")) if found and found.group("record") else None
            self.lost = lost
            return
        where = f"{url} at byte {offset}" + (f" (record {record})" if record is not None else "")
        super().__init__(f"{where}: {message}")
        self.url = url
        self.offset = offset
        self.record = record
        self.lost = lost

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.url, self.offset, self.record), {"lost": self.lost})

    @property
    def message(self) -> str:
        """What is wrong, without where."""
        return str(self).split(": ", 1)[1]

    def numbered(self, sample: int) -> DecodeError:
        """This error as a dataset names it: at the shard's ``sample``-th
        sample (its record; a format's decoder may count otherwise, a tar's
        members)."""
        suffix = f" (sample {sample} of the shard)"
        if self.record == sample and self.message.endswith(suffix):
            return self  # numbered already (an error passes a stream and its policy)
        message = re.sub(_NUMBERED, "", self.message)
        numbered = type(self)(f"{message}{suffix}", self.url, self.offset, sample,
                              lost=self.lost)  # fmt: skip
        numbered.__cause__, numbered.__suppress_context__ = self.__cause__, True
        return numbered


# Compiled, by re, at first use: an error's, not every import's.
_NUMBERED = r" \(sample \d+ of the shard\)$"
_LOCATED = r"(?P<url>.+?) at byte (?P<offset>\d+)(?: \(record (?P<record>\d+)\))?: "


class CorruptRecordError(DecodeError):
    """A record's checksum or header does not match its contents."""


class TruncatedShardError(DecodeError):
    """A shard ends in the middle of a record: an interrupted write or copy."""


class ShardChangedError(FastIOError, OSError):
    """A shard is no longer what its index describes: rewritten since it was
    indexed (another size, modification or change time, or content), or a
    remote object replaced (another ETag). ``filename`` is its URL. Reading
    it with the old layout would deliver the wrong samples: make the dataset
    anew (it indexes the shard again), or restore the shard."""

    def __init__(self, url: str, message: str | None = None) -> None:
        if message is None:  # rebuilt from its text (see FastIOError)
            url, message = _filename(_raised_line(url, type(self))) or "", url
        super().__init__(errno.ESTALE, message, url)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.filename, self.strerror))

    @classmethod
    def of(cls, url: str) -> ShardChangedError:
        """The error of shard ``url``, found changed against its layout."""
        return cls(url, f"{url} changed since it was indexed (its size, version or change time "
                        "differ): its samples are not where the index says")  # fmt: skip


class MixedTypesError(FastIOError, ValueError):
    """A field holds values of two types that no one Arrow column holds (a
    JSON field that is a number in one line and text in another): Arrow
    batches cannot be made of those samples; iterating samples delivers them.
    Not damage, so no error policy skips it: every such sample is intact.
    Numbers of both kinds (1 and 1.5) make one column of floats."""


class IndexFileError(FastIOError, ValueError):
    """An index file is damaged or of another version (``path``), so it cannot
    say where ``url``'s samples are. Under ``on_error="skip"``/``"warn"`` the
    shard is indexed again; make the index anew with ``fastio-bench index``."""

    def __init__(self, path: str, url: str | None = None, problem: str | None = None) -> None:
        if url is None or problem is None:  # rebuilt from its text (see FastIOError)
            super().__init__(path)
            found = re.match(r"index (.+?) of (.+?) cannot be read: (.*)",
                             _raised_line(path, type(self)))  # fmt: skip
            self.path, self.url, self.problem = found.groups() if found else ("", "", path)
            return
        super().__init__(f"index {path} of {url} cannot be read: {problem}")
        self.path = path
        self.url = url
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.url, self.problem))


class ConfigError(FastIOError, ValueError):
    """A config (its file, explicit arguments or a ``FASTIO_*`` variable) is not
    a valid dataset config.

    The message has a line per problem, in ``problems``: where it came from (the
    file, ``arguments``, or the environment variable), the key path, what was
    expected and what was found. ``file`` is the config file's path. Fix the
    key named, or unset the variable.
    """

    def __init__(self, *problems: str, file: str | None = None) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.file = file

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.problems, {"file": self.file})


class ReaderClosedError(FastIOError, ValueError):
    """The reader was closed (or closed while this stream was running)."""


class RangeIgnoredError(FastIOError, OSError):
    """The server answered a ranged request with other bytes than asked (it
    ignores ``Range``): reading on would deliver wrong data."""


class HTTPStatusError(FastIOError, OSError):
    """An HTTP server answered a ranged read with a status other than the
    bytes asked for; ``status`` is the HTTP status (a 5xx or 429 is retried)."""

    def __init__(self, status: int | str, reason: str | None = None, url: str | None = None
                 ) -> None:  # fmt: skip
        if isinstance(status, str):  # rebuilt from its text (see FastIOError)
            line = _raised_line(status, type(self))
            found = re.search(r"HTTP (\d+)", line)
            super().__init__(errno.EIO, status, _filename(line))
            self.status, self.reason = (int(found.group(1)) if found else 0), ""
            return
        super().__init__(errno.EIO, f"HTTP {status} {reason or ''}".rstrip(), url)
        self.status, self.reason = status, reason or ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.status, self.reason, self.filename))


class MovedOffClient(FastIOError, OSError):
    """A redirect to a URL fastio's plain-HTTP client does not read
    (``https://``): the reader asks fsspec's HTTP filesystem, which follows
    it (not raised to callers)."""

    def __init__(self, url: str, location: str) -> None:
        super().__init__(errno.EIO, f"moved to {location}, not plain HTTP", url)
        self.location = location

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.filename, self.location))


class RemoteReadError(FastIOError, OSError):
    """A read of an object store or HTTP server failed after its retries
    (the connection failed, the server stopped answering): ``errno`` and
    ``filename`` (the URL) as the failure's, the message names the range.
    The subclasses also refine the built-in of that failure."""

    def __init__(self, *args: Any) -> None:
        if len(args) == 1 and isinstance(args[0], str):  # rebuilt from its text (see FastIOError)
            super().__init__(errno.EIO, args[0], _filename(_raised_line(args[0], type(self))))
            return
        super().__init__(*args)


class RemoteTimeoutError(RemoteReadError, TimeoutError):
    """A remote read that timed out on every attempt."""


class RemoteConnectionError(RemoteReadError, ConnectionError):
    """A remote read whose connection failed on every attempt."""


class DownloadCancelled(FastIOError):
    """A background download stopped because its reader closed (nothing is cached)."""


class CacheError(FastIOError, OSError):
    """Root of the shard cache's errors. ``filename`` is the shard's URL."""

    code = errno.EIO

    def __init__(self, url: str, message: str | None = None) -> None:
        if message is None:  # rebuilt from its text (see FastIOError)
            url, message = _filename(_raised_line(url, type(self))) or "", url
        super().__init__(self.code, message, url)

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError pickles (errno, strerror); ours take (url, message), and
        # DataLoader workers send errors to their parent by pickle.
        return (type(self), (self.filename, self.strerror))


class CacheIntegrityError(CacheError):
    """A download delivered other bytes than the store promised: a different
    size, or a checksum or ETag that does not match. Nothing was cached. The
    object may have changed while it was read (read it again), or the store or a
    proxy in between truncates or alters it."""


class CacheFullError(CacheError):
    """A shard does not fit in the cache: it is larger than ``max_bytes``, or the
    shards in use (pinned by readers, here or in other processes) left no room
    until the wait timed out. Raise ``max_bytes``, release shards sooner
    (``release`` or the ``use`` context manager), or read fewer shards at once."""

    code = errno.ENOSPC


class CacheTimeoutError(CacheError, TimeoutError):
    """Another process was still downloading the shard when the wait timed out.
    Raise ``wait_timeout`` for very large shards or slow stores."""

    code = errno.ETIMEDOUT


class CacheUnavailableError(CacheError):
    """The cache's folder cannot take a copy now: it was removed and cannot be
    made again, or its filesystem is read-only or refuses the writes. The
    shard is read from the store instead (a reader says so once)."""

    code = errno.EROFS


class TierFullError(FastIOError, OSError):
    """No tier can hold the bytes asked for: raise a capacity, or remove files."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.strerror,))


class MissingExtraError(FastIOError, ImportError):
    """A feature needs a package of one of fastio's extras, and it is not
    installed: Parquet and Arrow shards and columnar batches need ``arrow``
    (pyarrow), tuning needs ``tune`` (optuna), plots ``plot``, metrics
    ``metrics``. ``extra`` names the extra and ``name`` the missing module;
    install it with ``pip install 'fastio[<extra>]'``."""

    def __init__(self, feature: str, module: str, extra: str) -> None:
        super().__init__(f"{feature} needs {module}: pip install 'fastio[{extra}]'", name=module)
        self.feature, self.extra = feature, extra

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.feature, self.name, self.extra))


# The module each extra brings, by module (pyproject.toml's optional dependencies).
EXTRAS = {
    "pyarrow": "arrow",
    "optuna": "tune",
    "uvloop": "fast",
    "matplotlib": "plot",
    "prometheus_client": "metrics",
    "zstandard": "zstd",
    "torch": "torch",
    "ray": "ray",
}


def import_extra(module: str, feature: str) -> ModuleType:
    """``module`` (one of :data:`EXTRAS`), imported for ``feature``
    (``"Parquet shards"``). Raises :class:`MissingExtraError` naming the extra
    to install when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(feature, module.partition(".")[0],
                                EXTRAS[module.partition(".")[0]]) from None  # fmt: skip


class FastIOWarning(RuntimeWarning):
    """Root of every warning fastio gives: ``warnings.simplefilter("ignore",
    fastio.FastIOWarning)`` silences them all."""


class EngineFallbackWarning(FastIOWarning):
    """io_uring was unavailable or refused, so the pread thread pool serves reads.

    Throughput on fast storage may be lower. Force an engine with
    ``engine="threads"`` to silence this, or allow io_uring (seccomp profile,
    ``/proc/sys/kernel/io_uring_disabled``).
    """


class DirectIOFallbackWarning(FastIOWarning):
    """The filesystem refused O_DIRECT (tmpfs, some FUSE and network filesystems),
    so the file is read through the page cache instead."""


class SkippedSamplesWarning(FastIOWarning):
    """A dataset with ``on_error="warn"`` skipped samples: a damaged or missing
    shard, or a failed read. The message names the URL, byte offset and sample;
    ``dataset.stats()`` counts what was skipped."""
