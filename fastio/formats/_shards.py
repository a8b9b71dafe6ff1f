"""Shard formats as the dataset uses them, by name: layouts (counts and byte
ranges of samples) and decoding into owned samples or columnar batches. See
:mod:`fastio.formats._layout` for the two interfaces each format implements."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from fastio.formats._compression import named_path
from fastio.formats._layout import Layout, ShardFormat
from fastio.formats._records import RecordFormat
from fastio.sources._urls import expand_urls

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastio.formats._index import IndexPlacement

__all__ = [
    "FORMATS",
    "Layout",
    "ShardFormat",
    "format_for_url",
    "format_options",
    "make_format",
    "shard_urls",
]


class _Formats(Mapping[str, type[ShardFormat]]):
    """Format name -> its class, imported when first asked for (a dataset
    reads one format; the others' modules stay unloaded)."""

    def __init__(self, paths: dict[str, str]) -> None:
        self._paths = paths

    def __getitem__(self, name: str) -> type[ShardFormat]:
        module, _, cls = self._paths[name].partition(":")
        found: type[ShardFormat] = getattr(importlib.import_module(module), cls)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


FORMATS: Mapping[str, type[ShardFormat]] = _Formats({
    "webdataset": "fastio.formats._webdataset:WebDatasetFormat",
    "tfrecord": "fastio.formats._tfrecord:TFRecordFormat",
    "jsonl": "fastio.formats._lines:JsonLinesFormat",
    "lines": "fastio.formats._lines:LinesFormat",
    "fixed": "fastio.formats._arrays:FixedFormat",
    "npy": "fastio.formats._arrays:NpyFormat",
    "parquet": "fastio.formats._tables:ParquetFormat",
    "arrow": "fastio.formats._tables:ArrowFormat",
})  # fmt: skip

_EXTENSIONS = {
    ".tar": "webdataset", ".tgz": "webdataset", ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord", ".jsonl": "jsonl", ".ndjson": "jsonl", ".txt": "lines",
    ".npy": "npy", ".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow",
    ".ipc": "arrow",
}  # fmt: skip


def format_for_url(url: str) -> str:
    """The format a shard's extension names (compression suffixes looked
    through; a remote URL's query left out)."""
    name = named_path(url).lower()
    for suffix in (".gz", ".zst", ".zstd"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.endswith(".tgz"):
        return "webdataset"
    _, extension = os.path.splitext(name)
    if extension not in _EXTENSIONS:
        raise ValueError(
            f"cannot tell the format of {url!r} from its extension; "
            f"pass format= (one of {', '.join(sorted(FORMATS))})"
        )
    return _EXTENSIONS[extension]


def shard_urls(patterns: str | Sequence[str], format: str | None,
               storage_options: dict[str, Any] | None = None) -> list[str]:  # fmt: skip
    """The shard URLs of a dataset's ``patterns`` (see :func:`expand_urls`):
    a folder stands for its files of ``format``, or, with no format given,
    for its files of the one format their extensions name."""
    return expand_urls(patterns, storage_options,
                       lambda folder, names: shards_in_folder(folder, names, format))  # fmt: skip


def shards_in_folder(folder: str, names: list[str], format: str | None) -> list[str]:
    """The shards among the file ``names`` of ``folder``: those whose
    extension names ``format`` (with no such name, those whose extension
    names no format: shards named without one). With no format given, those
    of the format most of the names name (tar shards beside a README.txt
    and a metadata.jsonl); raises ValueError where two formats are named
    by as many files."""
    formats: dict[str, list[str]] = {}
    for name in names:
        try:
            formats.setdefault(format_for_url(name), []).append(name)
        except ValueError:
            formats.setdefault("", []).append(name)
    if format is not None:
        return formats.get(format) or formats.get("", [])
    found = sorted(((len(chosen), kind) for kind, chosen in formats.items() if kind), reverse=True)
    if len(found) > 1 and found[0][0] == found[1][0]:
        tied = [kind for count, kind in found if count == found[0][0]]
        raise ValueError(
            f"the folder {folder} holds as many files of {' as of '.join(sorted(tied))}; "
            "pass format= to choose, or name the shards with a pattern"
        )
    return formats[found[0][1]] if found else []


def make_format(name: str, **options: Any) -> ShardFormat:
    """A format by name with its options (unknown options raise TypeError)."""
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; one of {', '.join(sorted(FORMATS))}")
    try:
        return FORMATS[name](**options)
    except TypeError as error:
        raise TypeError(f"format {name!r}: {error}") from None


def format_options(
    name: str,
    columns: Sequence[str] | None,
    record_size: int | None,
    verify: bool,
    example: bool,
    index_dir: str | os.PathLike[str] | None,
    index_placement: IndexPlacement | None = None,
) -> dict[str, Any]:
    """The options of format ``name`` (for :func:`make_format`) among the
    dataset's settings. Raises ValueError for a setting given to a format that
    does not take it, or ``fixed`` without ``record_size``."""
    options: dict[str, Any] = {}
    if name in FORMATS and issubclass(FORMATS[name], RecordFormat):
        options["index_dir"] = index_dir
        if index_placement is not None:
            options["index_placement"] = index_placement
    if name == "tfrecord":
        options.update(verify=verify, example=example)
    else:  # their defaults go unused; anything else was meant for a tfrecord dataset
        for knob, value in (("verify", verify), ("example", example)):
            if not value:
                raise ValueError(f"{knob}=False applies to tfrecord, not {name}")
    if name in ("parquet", "arrow"):
        options["columns"] = columns
    elif columns is not None:
        raise ValueError(f"columns= applies to parquet and arrow, not {name}")
    if name == "fixed":
        if record_size is None:
            raise ValueError("format 'fixed' needs record_size=")
        options["record_size"] = record_size
    elif record_size is not None:
        raise ValueError(f"record_size= applies to format 'fixed', not {name}")
    return options
