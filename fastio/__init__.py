"""fastio: feeds training jobs their data as fast as the storage allows.

``import fastio`` stays light: it loads the native engine and the reader, not
numpy, pyarrow, optuna or any framework.
"""

from __future__ import annotations

from fastio._errors import (
    CacheError,
    CacheFullError,
    CacheIntegrityError,
    CacheTimeoutError,
    CacheUnavailableError,
    ConfigError,
    CorruptRecordError,
    DecodeError,
    DirectIOFallbackWarning,
    DownloadCancelled,
    EngineFallbackWarning,
    FastIOError,
    FastIOWarning,
    HTTPStatusError,
    IndexFileError,
    MissingExtraError,
    MixedTypesError,
    RangeIgnoredError,
    ReaderClosedError,
    RemoteConnectionError,
    RemoteReadError,
    RemoteTimeoutError,
    ShardChangedError,
    SkippedSamplesWarning,
    TierFullError,
    TruncatedFileError,
    TruncatedShardError,
)
from fastio.reader._ranges import ByteRange, Chunk, Shard
from fastio.reader._reader import Reader
from fastio.reader._stats import ReaderStats
from fastio.reader._sync import new_event_loop
from fastio.sources._urls import expand_urls
from fastio.spec._reader import ReaderSettings

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The dataset pulls in numpy (and torch where installed), configs pydantic:
    # loaded on first use.
    if name in ("Dataset", "Batches", "MapStyle"):
        from fastio.dataset import _dataset

        return getattr(_dataset, name)
    if name in ("DatasetConfig", "load_config", "save_config"):
        from fastio import config

        return getattr(config, name)
    raise AttributeError(f"module 'fastio' has no attribute {name!r}")


__all__ = [
    "Batches",
    "ByteRange",
    "CacheError",
    "CacheFullError",
    "CacheIntegrityError",
    "CacheTimeoutError",
    "CacheUnavailableError",
    "Chunk",
    "ConfigError",
    "CorruptRecordError",
    "Dataset",
    "DatasetConfig",
    "DecodeError",
    "DirectIOFallbackWarning",
    "DownloadCancelled",
    "EngineFallbackWarning",
    "FastIOError",
    "FastIOWarning",
    "IndexFileError",
    "MapStyle",
    "MissingExtraError",
    "MixedTypesError",
    "HTTPStatusError",
    "RangeIgnoredError",
    "Reader",
    "ReaderClosedError",
    "RemoteConnectionError",
    "RemoteReadError",
    "RemoteTimeoutError",
    "ReaderSettings",
    "ReaderStats",
    "Shard",
    "ShardChangedError",
    "SkippedSamplesWarning",
    "TierFullError",
    "TruncatedFileError",
    "TruncatedShardError",
    "__version__",
    "expand_urls",
    "load_config",
    "new_event_loop",
    "save_config",
]
