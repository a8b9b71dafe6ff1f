"""Timed reads of whole files: through fastio, and through plain Python for comparison."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastio.reader._reader import Reader
from fastio.sources._urls import is_own_file

if TYPE_CHECKING:
    import os

    from fastio.reader._stats import ReaderStats
    from fastio.spec._reader import ReaderSettings

ProgressCallback = Callable[[int], None]


@dataclass(frozen=True)
class Measurement:
    """One timed pass over a set of files."""

    method: str
    bytes: int
    seconds: float
    settings: dict[str, Any] = field(default_factory=dict)
    stats: ReaderStats | None = None

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "method": self.method,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "mb_per_s": self.mb_per_s,
            "settings": self.settings,
        }
        if self.stats is not None:
            result["stats"] = self.stats.as_dict()
        return result


def expand_paths(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Files named, and every file under folders named (but those fastio
    wrote: indexes), in sorted order. Raises FileNotFoundError for a path that
    does not exist."""
    files: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(str(p) for p in sorted(path.rglob("*"))
                         if p.is_file() and not is_own_file(str(p)))  # fmt: skip
        elif path.exists():
            files.append(str(path))
        else:
            raise FileNotFoundError(2, "No such file or directory", str(path))
    return files


def files_to_read(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """:func:`expand_paths` for a command: a remote URL, a missing path or
    nothing to read ends it with a usage error naming the problem."""
    import click

    remote = [str(path) for path in paths if "://" in str(path)]
    if remote:  # (a Path of one would lose a slash of its URL)
        raise click.BadParameter(f"{remote[0]} is remote: this command reads local files or "
                                 "folders (fastio-bench run --format FORMAT reads remote "
                                 "datasets)")  # fmt: skip
    try:
        files = expand_paths(paths)
    except FileNotFoundError as error:
        raise click.BadParameter(f"{error.filename}: no such file or directory") from None
    if not files:
        raise click.BadParameter("no files found under the given paths")
    return files


def read_with_fastio(
    files: Sequence[str], settings: ReaderSettings, progress: ProgressCallback | None = None
) -> Measurement:
    """Every byte of ``files`` through a fresh reader; chunks are touched (their
    length taken) but not copied, as a consumer that parses in place would."""
    total = 0
    with Reader(settings) as reader:
        engine = reader.engine_kind
        # Start the background loop (and import uvloop) before the clock: a
        # once-per-process cost of ~50 ms that would swamp short measurements.
        for _ in reader.stream([]):
            pass
        started = time.perf_counter()
        for chunk in reader.stream(files):
            size = chunk.data.nbytes
            total += size
            if progress is not None:
                progress(size)
        seconds = time.perf_counter() - started
        stats = reader.stats()
    used = settings.as_dict() | {"engine": engine}
    return Measurement("fastio", total, seconds, used, stats)


def read_with_python(
    files: Sequence[str], read_size: int, progress: ProgressCallback | None = None
) -> Measurement:
    """The plain-Python baseline: ``readinto`` one reused buffer, file by file."""
    buffer = bytearray(read_size)
    total = 0
    started = time.perf_counter()
    for path in files:
        with open(path, "rb", buffering=0) as handle:
            while count := handle.readinto(buffer):
                total += count
                if progress is not None:
                    progress(count)
    seconds = time.perf_counter() - started
    return Measurement("python", total, seconds, {"read_size": read_size})
