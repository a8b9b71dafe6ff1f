"""Shard URLs from patterns: brace expansion, then globs."""

from __future__ import annotations

import glob
import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["OWN_MARK", "expand_urls", "is_own_file"]

_GLOB_CHARACTERS = frozenset("*?[")
# The usual shard pattern: one ascending range of numbers, nothing else to expand.
_ONE_RANGE = re.compile(r"([^{}\\]*)\{(\d+)\.\.(\d+)\}([^{}\\]*)")
OWN_MARK = ".fastio-"
"""Every file fastio writes has this in its name (``<shard>.fastio-index.npz``,
``dataset.fastio-index.json``, temporaries): globs and folder listings skip them."""


def is_own_file(url: str) -> bool:
    """Whether ``url`` names a file fastio wrote (an index, a temporary)."""
    return OWN_MARK in url.rstrip("/").rsplit("/", 1)[-1]


def expand_urls(
    patterns: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    storage_options: dict[str, Any] | None = None,
) -> list[str]:
    """The shard URLs that ``patterns`` name, in order.

    Braces expand as in bash and webdataset (``train-{0000..0127}.tar``,
    ``{train,val}/part-{0..3}``, zero padding kept); then globs (``*``, ``?``,
    ``[...]``) match files in sorted order: local paths through :mod:`glob`,
    URLs with a protocol (``s3://``, ``gs://``, ...) through fsspec; files fastio
    wrote (:func:`is_own_file`) never match. Raises FileNotFoundError for a
    glob that matches nothing, so that a typo does not become an empty dataset.
    """
    from braceexpand import braceexpand

    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    urls: list[str] = []
    for pattern in patterns:
        pattern = os.fspath(pattern)
        # A plain name (the usual list of shards) expands to itself: skip the parser.
        if "{" not in pattern and "\\" not in pattern:
            expanded: Iterable[str] = [pattern]
        else:
            expanded = _one_range(pattern) or braceexpand(pattern)
        if not _GLOB_CHARACTERS & set(pattern):  # expanding adds no glob character
            urls.extend(expanded)
            continue
        for url in expanded:
            if not _GLOB_CHARACTERS & set(url):
                urls.append(url)
                continue
            found = _remote_glob(url, storage_options or {}) if "://" in url else glob.glob(url)
            matches = sorted(match for match in found if not is_own_file(match))
            if not matches:
                raise FileNotFoundError(2, "no file matches the pattern", url)
            urls.extend(matches)
    return urls


def _one_range(pattern: str) -> list[str] | None:
    """What braceexpand makes of ``pattern`` where it is one ascending range
    of numbers (``shard-{0000..1999}.tar``), made here: a dataset of thousands
    of shards waits for its names before its first sample, and braceexpand
    spends microseconds on each. None for any other pattern."""
    found = _ONE_RANGE.fullmatch(pattern)
    if found is None:
        return None
    head, first, last, tail = found.groups()
    start, stop = int(first), int(last)
    if start > stop:
        return None
    # Zero padding as braceexpand keeps it: where an end has a leading zero.
    padded = any(end.startswith("0") and end != "0" for end in (first, last))
    width = max(len(first), len(last)) if padded else 0
    return [f"{head}{number:0{width}d}{tail}" for number in range(start, stop + 1)]


def _remote_glob(url: str, storage_options: dict[str, Any]) -> list[str]:
    import fsspec

    filesystem, path = fsspec.core.url_to_fs(url, **storage_options)
    return [filesystem.unstrip_protocol(match) for match in filesystem.glob(path)]
