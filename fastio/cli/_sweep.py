"""``fastio-bench sweep``: a grid over the reader's knobs on a real read.

Every point reads the same files through a fresh reader (so ``engine`` and
``direct`` can vary too) and reports MB/s: a table per engine and O_DIRECT
mode, a heatmap image (``--plot``), and JSON (``--json``). Points whose bytes
in flight exceed the tuner's budget are read too, and marked: the tuner would
never go there.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from fastio.cli._config_cmd import command_spec, config_option
from fastio.cli._measure import files_to_read, read_with_fastio
from fastio.cli._options import knob_option, parse_size
from fastio.cli._report import console, error_console
from fastio.spec import ReaderSettings, TunerSettings, check_value, knobs

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

# The grid's axes are reader knobs: their bounds and choices are the spec's.
_READER = knobs(ReaderSettings)


def _ints(text: str) -> list[int]:
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of integers: {text!r}") from None
    try:
        for value in values:
            check_value("outstanding_requests", _READER["outstanding_requests"], value)
    except ValueError:
        low, high = _READER["outstanding_requests"].low, _READER["outstanding_requests"].high
        raise click.BadParameter(
            f"outstanding requests must be in {low:.0f}..{high:.0f}: {text!r}"
        ) from None
    if not values:
        raise click.BadParameter("give at least one count of outstanding requests")
    return values


def _sizes(text: str) -> list[int]:
    try:
        sizes = [parse_size(item.strip()) for item in text.split(",") if item.strip()]
        for size in sizes:
            check_value("read_size", _READER["read_size"], size)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    if not sizes:
        raise click.BadParameter("give at least one read size")
    return sizes


def _choices(text: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    wrong = [item for item in items if item not in allowed]
    if wrong or not items:
        raise click.BadParameter(f"{what} must be among {', '.join(allowed)}, not {text!r}")
    return items


def sweep_points(
    files: list[str],
    base: ReaderSettings,
    requests: list[int],
    sizes: list[int],
    engines: list[str],
    directs: list[bool],
    budget: int,
    repeat: int,
    quiet: bool,
) -> list[dict[str, Any]]:
    """Read ``files`` at every point of the grid (``repeat`` times, the best run
    kept); one dict per point."""
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
            best = max(runs, key=lambda m: m.mb_per_s)
            points.append({
                "engine": engine, "engine_used": best.settings["engine"], "direct": direct,
                "outstanding_requests": requests_, "read_size": size,
                "inflight_bytes": requests_ * size, "within_budget": requests_ * size <= budget,
                "mb_per_s": best.mb_per_s, "mb_per_s_runs": [m.mb_per_s for m in runs],
                "bytes": best.bytes, "seconds": best.seconds,
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
        mode = "O_DIRECT" if direct else "buffered"
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
        f"({best['engine_used']}, {'O_DIRECT' if best['direct'] else 'buffered'}) "
        f"{best['mb_per_s']:,.0f} MB/s; * over the tuner's budget of bytes in flight"
    )


def plot_heatmap(points: list[dict[str, Any]], requests: list[int], sizes: list[int],
                 path: Path) -> None:  # fmt: skip
    """One heatmap (requests x read size, MB/s) per engine and O_DIRECT mode."""
    try:
        import matplotlib
    except ImportError:
        raise click.ClickException("plots need matplotlib: pip install 'fastio[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
        axis.set_title(f"{engine}, {'O_DIRECT' if direct else 'buffered'}")
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
@click.option("--requests", "requests_text", default="1,4,16,64", show_default=True,
              help="Outstanding requests to try (comma-separated).")  # fmt: skip
@click.option("--sizes", "sizes_text", default="64KiB,256KiB,1MiB,4MiB", show_default=True,
              help="Read sizes to try (comma-separated).")  # fmt: skip
@click.option("--engines", "engines_text", default=None,
              help=f"Engines to try: {', '.join(_READER['engine'].choices)} (comma-separated; "
              "default: the config's, else the spec's).")  # fmt: skip
@click.option("--direct", "direct_text", type=click.Choice(["buffered", "direct", "both"]),
              default=None, help="O_DIRECT modes to try (default: the config's, else "
              "buffered).")  # fmt: skip
@knob_option(TunerSettings, "memory_budget", "--budget")
@click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Reads per point; the fastest is kept.")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the points as JSON here ('-': stdout, not the table).")  # fmt: skip
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a heatmap PNG here (needs the plot extra).")  # fmt: skip
@click.pass_context
def sweep(
    ctx: click.Context,
    /,
    paths: tuple[str, ...],
    config_file: Path | None,
    requests_text: str,
    sizes_text: str,
    engines_text: str | None,
    direct_text: str | None,
    repeat: int,
    json_path: str | None,
    plot_path: str | None,
    **_knobs: Any,
) -> None:
    """Read PATHS (files or folders) at every point of a grid of reader knobs
    and show MB/s per point: where the tuner should end up on this storage."""
    from pathlib import Path

    requests, sizes = _ints(requests_text), _sizes(sizes_text)
    spec = command_spec(ctx, config_file, paths)
    base = spec.reader
    if not paths:
        from fastio.sources._urls import expand_urls

        paths = tuple(expand_urls(spec.urls))  # patterns and globs, as a dataset reads them
    engines = _choices(engines_text or base.engine, _READER["engine"].choices, "--engines")
    modes = {"buffered": [False], "direct": [True], "both": [False, True]}
    directs = modes[direct_text] if direct_text is not None else [base.direct]
    files = files_to_read(paths)
    # The tuner's budget: the option's or the config's, else its default (half the reader's).
    budget = spec.tuner.memory_budget or base.memory_budget // 2
    to_stdout = json_path == "-"
    try:
        points = sweep_points(files, base, requests, sizes, engines, directs, budget, repeat,
                              quiet=to_stdout)  # fmt: skip
    except OSError as error:
        raise click.ClickException(str(error)) from None
    result = {"files": len(files), "bytes": points[0]["bytes"], "budget": budget,
              "points": points, "best": max(points, key=lambda p: p["mb_per_s"])}  # fmt: skip
    if to_stdout:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    else:
        print_grid(points, requests, sizes)
        if json_path is not None:
            Path(json_path).write_text(json.dumps(result, indent=1))
            console().print(f"points: {json_path}")
    if plot_path is not None:
        plot_heatmap(points, requests, sizes, Path(plot_path))
        if not to_stdout:
            console().print(f"heatmap: {plot_path}")
