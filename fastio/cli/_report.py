"""Tables and progress bars for fastio-bench (rich), on stderr for progress."""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from rich.console import Console

    from fastio.cli._measure import Measurement, ProgressCallback


@functools.cache
def console() -> Console:
    from rich.console import Console

    return Console()


@functools.cache
def error_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


@contextlib.contextmanager
def byte_progress(label: str, total: int, quiet: bool = False) -> Iterator[ProgressCallback | None]:
    """A progress bar over ``total`` bytes on stderr; yields the callback that
    advances it (None when quiet or stderr is not a terminal)."""
    with _progress(label, total, quiet, unit="bytes") as advance:
        yield advance


@contextlib.contextmanager
def _progress(label: str, total: int | None, quiet: bool,
              unit: str) -> Iterator[ProgressCallback | None]:  # fmt: skip
    """A transient rich progress bar on stderr counting ``unit`` ("bytes": with
    sizes and speed; anything else: done of total)."""
    if quiet or not error_console().is_terminal:
        yield None
        return
    from rich import progress as bars

    counts: tuple[bars.ProgressColumn, ...] = (
        (bars.DownloadColumn(), bars.TransferSpeedColumn())
        if unit == "bytes"
        else (bars.MofNCompleteColumn(),)
    )
    columns = (bars.TextColumn("{task.description}"), bars.BarColumn(), *counts,
               bars.TimeRemainingColumn())  # fmt: skip
    with bars.Progress(*columns, console=error_console(), transient=True) as progress:
        task = progress.add_task(label, total=total)
        yield lambda count: progress.advance(task, count)


def print_table(
    title: str,
    measurements: Sequence[Measurement],
    extra: dict[str, Any] | None = None,
    baseline: Measurement | None = None,
) -> None:
    from rich.table import Table

    table = Table(title=title)
    for column in ("method", "MB/s", "GiB", "seconds", "settings"):
        table.add_column(
            column, justify="right" if column in ("MB/s", "GiB", "seconds") else "left"
        )
    if baseline is not None:
        table.add_column(f"vs {baseline.method}", justify="right")
    for measurement in measurements:
        row = [
            measurement.method,
            f"{measurement.mb_per_s:,.0f}",
            f"{measurement.bytes / 2**30:.2f}",
            f"{measurement.seconds:.3f}",
            _describe(measurement.settings),
        ]
        if baseline is not None:
            row.append(f"{measurement.mb_per_s / baseline.mb_per_s:.2f}x")
        table.add_row(*row)
    console().print(table)
    stats = next((m.stats for m in measurements if m.stats is not None), None)
    if stats is not None:
        p50, p99 = stats.latency_percentile(0.5), stats.latency_percentile(0.99)
        console().print(
            f"requests {stats.requests:,}  latency p50 {p50 * 1e3:.2f} ms  p99 {p99 * 1e3:.2f} ms  "
            f"consumer waited {stats.wait_seconds:.3f} s  "
            f"backpressure {stats.backpressure_seconds:.3f} s"
        )
    if extra:
        console().print("  ".join(f"{key} {value}" for key, value in extra.items()))


def _describe(settings: dict[str, Any]) -> str:
    if not settings:
        return ""
    parts = []
    for key in ("engine", "outstanding_requests", "read_size", "direct"):
        if key in settings:
            value = settings[key]
            if key == "read_size":
                value = _size(value)
            parts.append(f"{key}={value}")
    return " ".join(parts)


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale}{unit}"
    return str(count)


@contextlib.contextmanager
def sample_progress(
    label: str, total: int | None, quiet: bool = False
) -> Iterator[ProgressCallback | None]:
    """A progress bar over ``total`` samples on stderr (None when quiet or not a
    terminal; a count without a bar where the total is not known yet)."""
    with _progress(label, total, quiet, unit="samples") as advance:
        yield advance


@contextlib.contextmanager
def shard_progress(
    label: str, total: int, quiet: bool = False
) -> Iterator[ProgressCallback | None]:
    """A progress bar over ``total`` shards on stderr (None when quiet or not a terminal)."""
    with _progress(label, total, quiet, unit="shards") as advance:
        yield advance


def print_dataset_table(result: dict[str, Any]) -> None:
    """The report of ``fastio-bench run --format``: speed, counts, shuffle quality."""
    from rich.table import Table

    table = Table(title=f"fastio-bench run: {result['format']} dataset", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    quality = result["shuffle_quality"]
    rows = [
        ("shards / samples in the dataset", f"{result['shards']:,} / {result['total_samples']:,}"),
        ("samples read (expected)", f"{result['samples']:,} ({result['expected_samples']:,})"),
        ("samples skipped", f"{result['skipped']:,}"),
        ("shards skipped", f"{result['shards_skipped']:,}"),
        ("samples/s", f"{result['samples_per_s']:,.0f}"),
        ("MB/s", f"{result['mb_per_s']:,.0f}"),
        ("seconds (median of runs)", f"{result['seconds']:.3f} ({result['runs']})"),
        ("mode", f"batches of {result['batch_size']}" if result["batch_size"] else "samples"),
        (
            "shuffle",
            f"{result['shuffle']} (seed {result['seed']}, buffer "
            f"{result['shuffle_buffer'] / 2**20:.0f} MiB, {result['shuffle_shards']} shards)",
        ),
        ("rank correlation stored/delivered", f"{quality['rank_correlation']:+.3f}"),
        ("longest run from one shard", f"{quality['longest_shard_run']:.0f}"),
        ("shards per 1000 consecutive samples", f"{quality['shards_per_window']:.1f}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console().print(table)


def emit(result: dict[str, Any], as_json: bool, out_path: str | None, show: Callable[[], None],
         plot_path: str | None = None) -> None:  # fmt: skip
    """A command's result: one JSON object on stdout with ``--json``, else the
    table ``show`` prints; with ``--out`` the JSON also goes to that file. The
    table then names the files written (``--out``, ``--plot``)."""
    if out_path is not None:
        with open(out_path, "w") as file:
            json.dump(result, file, indent=1)
            file.write("\n")
    if as_json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
        return
    show()
    for what, path in (("result", out_path), ("plot", plot_path)):
        if path is not None:
            console().print(f"{what}: {path}", highlight=False)


def pyplot() -> Any:
    """matplotlib's pyplot drawing to files (``--plot`` checked it is installed)."""
    from fastio._errors import import_extra

    import_extra("matplotlib", "--plot").use("Agg")
    import matplotlib.pyplot as plt

    return plt


def timeline_recorder(advance: ProgressCallback | None) -> tuple[ProgressCallback, list[Any]]:
    """A progress callback that also records (seconds, count so far) as it is
    called, and the list it records into; ``advance`` still moves the bar."""
    points: list[tuple[float, int]] = []
    started = time.perf_counter()
    total = 0

    def record(count: int) -> None:
        nonlocal total
        total += count
        points.append((time.perf_counter() - started, total))
        if advance is not None:
            advance(count)

    return record, points


def plot_timelines(timelines: Sequence[Sequence[tuple[float, int]]], unit: str, title: str,
                   path: str) -> None:  # fmt: skip
    """Throughput over time of each run (``unit`` per second), one line a run."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 4))
    for run, points in enumerate(timelines):
        times, rates = _rates(points, 1e6 if unit == "MB" else 1.0)
        axis.plot(times, rates, linewidth=0.9, label=f"run {run + 1}")
    axis.set_xlabel("seconds")
    axis.set_ylabel(f"{unit}/s")
    axis.set_title(title)
    if len(timelines) > 1:
        axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _rates(points: Sequence[tuple[float, int]], scale: float) -> tuple[list[float], list[float]]:
    """Rates at about every fiftieth of the run, each over the tenth of the
    run before it (from the start, for the first ones). Bytes come a chunk
    at a time, several chunks at once: a rate over a fiftieth alone (the
    slice a burst falls in, or the few microseconds before the last chunk)
    was many times what the storage delivers."""
    if not points:
        return [], []
    end = points[-1][0]
    step, window = max(end / 50, 1e-9), max(end / 10, 1e-9)
    moments = [moment for moment, _ in points]
    counts = [count for _, count in points]
    times: list[float] = []
    rates: list[float] = []
    last = 0.0
    for moment, count in points:
        if moment - last < step and moment != end:
            continue
        last = moment
        since = max(moment - window, 0.0)
        # Bytes delivered by ``since``: the count of the last point at or before it.
        before = bisect.bisect_right(moments, since)
        earlier = counts[before - 1] if before else 0
        if moment > since:
            times.append(moment)
            rates.append((count - earlier) / (moment - since) / scale)
    return times, rates
