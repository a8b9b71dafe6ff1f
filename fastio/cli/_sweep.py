"""``fastio-bench sweep``: a grid over the reader's knobs on a real read.

Every point reads the same files through a fresh reader (so ``engine`` and
``direct`` can vary too) and reports MB/s: a table per engine and O_DIRECT
mode, a heatmap image (``--plot``), and JSON (``--json``). Points whose bytes
in flight exceed the tuner's budget are read too, and marked: the tuner would
never go there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import click

from fastio.cli._config_cmd import command_spec, config_option
from fastio.cli._measure import files_to_read, read_with_fastio
from fastio.cli._options import knob_option, output_options
from fastio.cli._report import console, emit, error_console, pyplot
from fastio.spec import ReaderSettings, TunerSettings

if TYPE_CHECKING:
    from pathlib import Path

    from fastio.spec import DatasetSpec

_DEFAULT_REQUESTS = (1, 4, 16, 64)
_DEFAULT_SIZES = (64 << 10, 256 << 10, 1 << 20, 4 << 20)


def sweep_points(
    files: list[str],
    base: ReaderSettings,
    requests: list[int],
    sizes: list[int],
    engines: list[str],
    directs: list[bool | Literal["auto"]],
    budget: int,
    repeat: int,
    quiet: bool,
) -> list[dict[str, Any]]:
    """Read ``files`` at every point of the grid (``repeat`` times, the median
    run kept); one dict per point."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    grid = [(e, d, q, s) for e in engines for d in directs for q in requests for s in sizes]
    points = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=error_console(), transient=True,
                  disable=quiet or not error_console().is_terminal) as progress:  # fmt: skip
        task = progress.add_task("sweeping", total=len(grid))
        for engine, direct, requests_, size in grid:
            settings = base.replace(
                engine=engine, direct=direct, outstanding_requests=requests_, read_size=size,
                # Room for every request in flight: the knobs, not the budget, set the depth.
                memory_budget=max(base.memory_budget, 2 * requests_ * size),
            )  # fmt: skip
            runs = [read_with_fastio(files, settings) for _ in range(repeat)]
            median = sorted(runs, key=lambda m: m.seconds)[len(runs) // 2]
            points.append({
                "engine": engine, "engine_used": median.settings["engine"], "direct": direct,
                "outstanding_requests": requests_, "read_size": size,
                "inflight_bytes": requests_ * size, "within_budget": requests_ * size <= budget,
                "mb_per_s": median.mb_per_s, "mb_per_s_runs": [m.mb_per_s for m in runs],
                "bytes": median.bytes, "seconds": median.seconds,
            })  # fmt: skip
            progress.advance(task)
    return points


def _size_label(size: int) -> str:
    from fastio.cli._report import _size

    return _size(size)


def print_grid(points: list[dict[str, Any]], requests: list[int], sizes: list[int]) -> None:
    from rich.table import Table

    groups = dict.fromkeys((p["engine"], p["direct"]) for p in points)
    best = max(points, key=lambda p: p["mb_per_s"])
    for engine, direct in groups:
        mode = _mode_label(direct)
        table = Table(title=f"{engine}, {mode}: MB/s")
        table.add_column("requests \\ read size", justify="right")
        for size in sizes:
            table.add_column(_size_label(size), justify="right")
        for count in requests:
            row = [str(count)]
            for size in sizes:
                point = next(p for p in points if (p["engine"], p["direct"],
                             p["outstanding_requests"], p["read_size"]) ==
                             (engine, direct, count, size))  # fmt: skip
                text = f"{point['mb_per_s']:,.0f}"
                if point is best:
                    text = f"[bold green]{text}[/]"
                elif not point["within_budget"]:
                    text = f"[dim]{text}*[/]"
                row.append(text)
            table.add_row(*row)
        console().print(table)
    console().print(
        f"best: {best['outstanding_requests']} x {_size_label(best['read_size'])} "
        f"({best['engine_used']}, {_mode_label(best['direct'])}) "
        f"{best['mb_per_s']:,.0f} MB/s; * over the tuner's budget of bytes in flight"
    )


def plot_heatmap(points: list[dict[str, Any]], requests: list[int], sizes: list[int],
                 path: str) -> None:  # fmt: skip
    """One heatmap (requests x read size, MB/s) per engine and O_DIRECT mode."""
    plt = pyplot()

    groups = list(dict.fromkeys((p["engine"], p["direct"]) for p in points))
    figure, axes = plt.subplots(1, len(groups), figsize=(5.5 * len(groups), 4.5), squeeze=False)
    for axis, (engine, direct) in zip(axes[0], groups, strict=True):
        values = [[next(p["mb_per_s"] for p in points if (p["engine"], p["direct"],
                   p["outstanding_requests"], p["read_size"]) == (engine, direct, q, s))
                   for s in sizes] for q in requests]  # fmt: skip
        image = axis.imshow(values, cmap="viridis", aspect="auto", origin="lower")
        axis.set_xticks(range(len(sizes)), [_size_label(s) for s in sizes], rotation=45)
        axis.set_yticks(range(len(requests)), [str(q) for q in requests])
        axis.set_xlabel("read size")
        axis.set_ylabel("outstanding requests")
        axis.set_title(f"{engine}, {_mode_label(direct)}")
        for row, line in enumerate(values):
            for column, value in enumerate(line):
                axis.text(column, row, f"{value:.0f}", ha="center", va="center",
                          color="white", fontsize=7)  # fmt: skip
        figure.colorbar(image, ax=axis, label="MB/s")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@config_option("Read the files the config's urls name, with its reader knobs as the base.")
@knob_option(ReaderSettings, "outstanding_requests", grid=True, shown="1,4,16,64")
@knob_option(ReaderSettings, "read_size", grid=True, shown="64KiB,256KiB,1MiB,4MiB")
@knob_option(ReaderSettings, "engine", grid=True, shown="the config's, else auto")
@knob_option(ReaderSettings, "direct", grid=True, shown="the config's, else auto")
@knob_option(TunerSettings, "memory_budget")
@output_options(plot="a heatmap per engine and O_DIRECT mode", repeat="Read each point")
@click.pass_context
def sweep(
    ctx: click.Context,
    /,
    paths: tuple[str, ...],
    config_file: Path | None,
    outstanding_requests: tuple[int, ...] | None,
    read_size: tuple[int, ...] | None,
    engine: tuple[str, ...] | None,
    direct: tuple[bool, ...] | None,
    repeat: int,
    as_json: bool,
    out_path: str | None,
    plot_path: str | None,
    **_knobs: Any,
) -> None:
    """Read PATHS (files or folders) at every point of a grid of reader knobs
    and show MB/s per point: where the tuner should end up on this storage.
    Each reader knob option takes the values to try, comma-separated."""
    spec = command_spec(ctx, config_file, paths)
    files = files_to_read(paths or tuple(_dataset_files(spec)))
    base = spec.reader
    requests, sizes = (
        list(outstanding_requests or _DEFAULT_REQUESTS),
        list(read_size or _DEFAULT_SIZES),
    )
    engines, directs = list(engine or (base.engine,)), list(direct or (base.direct,))
    # The tuner's budget: the option's or the config's, else its default (half the reader's).
    budget = spec.tuner.memory_budget or base.memory_budget // 2
    try:
        points = sweep_points(files, base, requests, sizes, engines, directs, budget, repeat,
                              quiet=as_json)  # fmt: skip
    except OSError as error:
        raise click.ClickException(str(error)) from None
    result = {"files": len(files), "bytes": points[0]["bytes"], "budget": budget,
              "points": points, "best": max(points, key=lambda p: p["mb_per_s"])}  # fmt: skip
    if plot_path is not None:
        plot_heatmap(points, requests, sizes, plot_path)
    emit(result, as_json, out_path, lambda: print_grid(points, requests, sizes), plot_path)


def _dataset_files(spec: DatasetSpec) -> list[str]:
    """The files of a config's urls (patterns and globs, as a dataset reads them)."""
    from fastio.formats._shards import shard_urls

    return shard_urls(spec.urls, spec.format, spec.storage_options)


def _mode_label(direct: bool | str) -> str:
    if isinstance(direct, str):
        return f"direct={direct}"  # "auto": chosen per file
    return "O_DIRECT" if direct else "buffered"
