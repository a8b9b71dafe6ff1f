"""Shard URLs from patterns: brace expansion, then globs."""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
from typing import TYPE_CHECKING, Any

from fastio import _native

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    Chooser = Callable[[str, list[str]], list[str]]

__all__ = ["OWN_MARK", "expand_urls", "is_own_file"]

_GLOB_CHARACTERS = frozenset("*?[")
# The usual shard pattern, one ascending range of numbers and nothing else to
# expand, has none of these outside its braces.
_NOT_IN_ONE_RANGE = ("{", "}", "\\")
OWN_MARK = ".fastio-"
"""Every file fastio writes has this in its name (``<shard>.fastio-index.npz``,
``dataset.fastio-index.json``, temporaries): globs and folder listings skip them."""


def is_own_file(url: str) -> bool:
    """Whether ``url`` names a file fastio wrote (an index, a temporary)."""
    return OWN_MARK in url.rstrip("/").rsplit("/", 1)[-1]


def expand_urls(
    patterns: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    storage_options: dict[str, Any] | None = None,
    choose: Chooser | None = None,
) -> list[str]:
    """The shard URLs that ``patterns`` name, in order.

    Braces expand as in bash and webdataset (``train-{0000..0127}.tar``,
    ``{train,val}/part-{0..3}``, zero padding kept); then globs (``*``, ``?``,
    ``[...]``) match files in sorted order: local paths through :mod:`glob`,
    URLs with a protocol (``s3://``, ``gs://``, ...) through fsspec; files fastio
    wrote (:func:`is_own_file`) never match. Raises FileNotFoundError for a
    glob that matches nothing, so that a typo does not become an empty dataset.

    A folder (a local name ending in ``/``, or one without a ``.`` in its
    last part, that is a folder; an object store's prefix ending in ``/``,
    ``s3://bucket/train/``) stands for the files in it, in sorted order:
    not its subfolders, nor names that begin with ``.`` or ``_``
    (``_SUCCESS``, ``.cache``), nor fastio's own files. ``choose(folder,
    names)`` picks the shards among those names (a dataset keeps those of
    its format); raises FileNotFoundError for a folder left with none.
    """
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    urls: list[str] = []
    for pattern in patterns:
        pattern = os.fspath(pattern)
        # A plain name (the usual list of shards) expands to itself: skip the parser.
        if "{" not in pattern and "\\" not in pattern:
            expanded: Iterable[str] = [pattern]
        else:
            expanded = _one_range(pattern) or _braces(pattern)
        if not _GLOB_CHARACTERS & set(pattern):  # expanding adds no glob character
            if "}" in pattern and _names_files(pattern.rsplit("}", 1)[1]):  # "s-{0..99}.tar"
                urls.extend(expanded)
                continue
            for url in expanded:
                urls.extend(_folder_files(url, choose, storage_options)
                            if _may_be_folder(url) else [url])  # fmt: skip
            continue
        for url in expanded:
            if not _GLOB_CHARACTERS & set(url):
                urls.append(url)
                continue
            if "://" not in url and os.path.lexists(url):
                # A name that is there as it is written ("exp[lr=0.1]/", "run?1"):
                # itself, not a pattern that would not match it.
                urls.extend(_folder_files(url, choose, storage_options)
                            if os.path.isdir(url) else [url])  # fmt: skip
                continue
            found = _remote_glob(url, storage_options or {}) if "://" in url else glob.glob(url)
            matches = sorted(match for match in found if not is_own_file(match))
            if not matches:
                raise FileNotFoundError(2, "no file matches the pattern", url)
            for match in matches:  # a folder matched ("part-*/") stands for its files
                local_folder = "://" not in match and os.path.isdir(match)
                urls.extend(_folder_files(match, choose, storage_options) if local_folder
                            else [match])  # fmt: skip
    return urls


def _may_be_folder(url: str) -> bool:
    """Whether ``url`` may name a folder: a local name that ends in a
    separator or whose last part has no extension, or an object store's
    prefix that ends in ``/`` (``s3://bucket/train/``; not HTTP's, which no
    server lists alike). Only those are looked up, so that a list of
    thousands of shard files costs no system call or request each."""
    if "://" in url:
        return url.endswith("/") and not url.startswith(("http://", "https://"))
    last = url.rstrip("/" + os.sep).rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1]
    return url.endswith(("/", os.sep)) or "." not in last.lstrip(".")


def _names_files(tail: str) -> bool:
    """Whether every name that ends in ``tail`` (what follows a pattern's
    last brace) is one :func:`_may_be_folder` passes over."""
    if "/" in tail or os.sep in tail:
        return not _may_be_folder(tail)
    return "." in tail.rstrip(".")


def _folder_files(url: str, choose: Chooser | None,
                  storage_options: dict[str, Any] | None = None) -> list[str]:  # fmt: skip
    """The shards of the folder ``url`` (see :func:`expand_urls`), or
    ``[url]`` where it is not a folder."""
    listed = _listed(url, storage_options or {})
    if listed is None:
        return [url]  # a file, or a name whose absence the read reports
    files, folders = listed
    folder = url.rstrip("/" + os.sep) or url
    names = sorted(name for name in files
                   if not name.startswith((".", "_")) and not is_own_file(name))  # fmt: skip
    chosen = choose(folder, names) if choose is not None else names
    if not chosen:
        inside = sorted(name for name in folders if not name.startswith((".", "_")))
        hint = f"; its subfolders ({', '.join(inside[:5])}) may: name them" if inside else ""
        raise FileNotFoundError(2, f"the folder holds no shard files{hint}", url)
    return [os.path.join(folder, name) for name in chosen]  # "s3://b/train" + "/x.tar" too


def _listed(url: str, storage_options: dict[str, Any]) -> tuple[list[str], list[str]] | None:
    """The names of the files and of the folders in the folder ``url``; None
    where ``url`` is not a folder."""
    if "://" not in url:
        try:
            entries = list(os.scandir(url))
        except (NotADirectoryError, FileNotFoundError):
            return None
        return ([entry.name for entry in entries if entry.is_file()],
                [entry.name for entry in entries if entry.is_dir()])  # fmt: skip
    import fsspec

    filesystem, path = fsspec.core.url_to_fs(url, **storage_options)
    try:
        with _uncached(filesystem, path):
            entries = filesystem.ls(path.rstrip("/"), detail=True)
    except FileNotFoundError:
        if url.endswith("/"):  # named as a folder: not an object
            raise FileNotFoundError(2, "nothing is stored under this prefix", url) from None
        return None
    except Exception as error:
        raise _listing_error(error, url) from error
    names: dict[str, list[str]] = {"file": [], "directory": []}
    for entry in entries:
        names.setdefault(entry["type"], []).append(entry["name"].rstrip("/").rsplit("/", 1)[-1])
    return names["file"], names["directory"]


def _braces(pattern: str) -> Iterable[str]:
    """braceexpand's expansion of ``pattern``, imported only for a pattern
    that is not one range: the import compiles its expressions, a millisecond
    or two before a dataset's first sample."""
    from braceexpand import braceexpand

    return braceexpand(pattern)


def _one_range(pattern: str) -> list[str] | None:
    """What braceexpand makes of ``pattern`` where it is one ascending range
    of numbers (``shard-{0000..1999}.tar``), made here: a dataset of thousands
    of shards waits for its names before its first sample, and braceexpand
    spends microseconds on each. None for any other pattern."""
    # Told with string methods: a regular expression is compiled in each fresh
    # process, a tenth of a millisecond before its first sample.
    head, brace, rest = pattern.partition("{")
    inner, brace_closed, tail = rest.partition("}")
    first, dots, last = inner.partition("..")
    if not (brace and brace_closed and dots) or any(
        mark in head or mark in tail for mark in _NOT_IN_ONE_RANGE
    ):
        return None
    if not (_ascii_number(first) and _ascii_number(last)):
        return None
    start, stop = int(first), int(last)
    if start > stop:
        return None
    # Zero padding as braceexpand keeps it: where an end has a leading zero.
    padded = any(end.startswith("0") and end != "0" for end in (first, last))
    width = max(len(first), len(last)) if padded else 0
    if stop < 1 << 62 and width <= 64:  # named natively: a fifth of the time of zfill here
        return _native.numbered_names(head, start, stop, width, tail)
    return [head + str(number).zfill(width) + tail for number in range(start, stop + 1)]


def _ascii_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _remote_glob(url: str, storage_options: dict[str, Any]) -> list[str]:
    import fsspec

    filesystem, path = fsspec.core.url_to_fs(url, **storage_options)
    fixed = re.split(r"[*?\[]", path, maxsplit=1)[0]  # the folder the matches are under
    try:
        with _uncached(filesystem, fixed.rsplit("/", 1)[0]):
            return [filesystem.unstrip_protocol(match) for match in filesystem.glob(path)]
    except FileNotFoundError:
        return []
    except Exception as error:
        raise _listing_error(error, url) from error


def _listing_error(error: BaseException, url: str) -> BaseException:
    """A failed listing of ``url`` as an error naming it (s3fs's refusal
    names none; botocore's connection errors are no OSError)."""
    from fastio.sources._remote import caller_error, denied, naming

    if denied(error):  # a built-in's, or an HTTP 401 or 403 in aiohttp's own
        return PermissionError(errno.EACCES, f"access denied listing it ({error})", url)
    if caller_error(error):
        return error
    return naming(error, url, "listing it")


@contextlib.contextmanager
def _uncached(filesystem: Any, path: str) -> Iterator[None]:
    """A listing of ``path`` as the store holds it now, not kept after: fsspec
    keeps listings (s3fs, gcsfs) in its filesystem, which is shared by the
    process, and answers later listings and ``info`` from them: objects
    uploaded since would be missing, and objects replaced since would keep
    their old sizes and ETags, which the reads check the objects against."""
    filesystem.invalidate_cache(path)
    try:
        yield
    finally:
        filesystem.invalidate_cache(path)
