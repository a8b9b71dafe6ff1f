"""``fastio-bench tune``: online tuning on a real read, shown as it happens.

PATHS are read over and over through one reader while the tuner (the same
:class:`fastio.reader._tuning.ReaderTuning` a dataset with ``tune=True`` runs)
changes its outstanding requests and read size between windows. A live table
shows the trials; at the end come a table of every configuration measured,
a plot of throughput over time with the trial boundaries (``--plot``), JSON
(``--json``, ``--out``), and the tuned configuration as a config file
(``--tuned-config``) that ``--config`` of the other subcommands, and
``fastio.load_config``, read back.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from fastio._errors import ConfigError
from fastio.cli._config_cmd import command_spec, config_option
from fastio.cli._measure import files_to_read
from fastio.cli._options import knob_option, output_options, reader_options, writable_file
from fastio.cli._report import _size, console, emit, error_console, pyplot
from fastio.config._files import file_kind
from fastio.spec import TunerSettings

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:
    from fastio.reader._tuning import ReaderTuning
    from fastio.spec import DatasetSpec
    from tuners import Decision, OnlineTuner  # fastio.tuners, as mypy reads the tuners/ folder

_SHOWN = 14  # trials in the live table
# The tuner's knobs a command offers (the rest: in a config file).
_TUNER_OPTIONS = ("memory_budget", "window_seconds", "warmup_seconds", "max_trials", "storage",
                  "seed")  # fmt: skip


def tuner_options(function: F) -> F:
    """The tuner's knobs a command offers, as options (``--tuner-max-trials``)."""
    for name in reversed(_TUNER_OPTIONS):
        function = knob_option(TunerSettings, name)(function)
    return function


def tuned_config_option(function: F) -> F:
    """``--tuned-config FILE``: where the tuned configuration is written."""
    return click.option(
        "--tuned-config", type=click.Path(dir_okay=False), default="fastio-tuned.yaml",
        show_default=True, callback=_config_file_to_write,
        help="Write the tuned configuration here, as a config file "
        "(YAML, TOML or JSON by its extension) that --config reads back.",
    )(function)  # fmt: skip


def _config_file_to_write(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # Checked before the measuring, which its result would be lost after.
    try:
        file_kind(Path(value))
    except ConfigError as error:
        raise click.BadParameter(str(error), ctx, param) from None
    return str(writable_file(ctx, param, value))


def _human(size: int) -> str:
    exact = _size(size)
    return exact if not exact.isdigit() else f"{size / 1024:,.0f}KiB"


def _label(config: dict[str, Any]) -> str:
    return f"{config['outstanding_requests']} x {_human(config['read_size'])}"


def _live_table(decisions: list[Decision], status: str) -> Any:
    from rich.table import Table

    table = Table(title="fastio-bench tune", caption=status)
    for column in ("window", "phase", "knobs", "MB/s", "decision"):
        table.add_column(column, justify="right" if column in ("window", "MB/s") else "left")
    for decision in decisions[-_SHOWN:]:
        table.add_row(str(decision.window), decision.phase, _label(decision.config),
                      f"{decision.rate / 1e6:,.0f}", decision.reason)  # fmt: skip
    return table


def run_tuning(
    files: list[str],
    tuning: ReaderTuning,
    max_seconds: float,
    settled_windows: int,
    on_tick: Any,
) -> tuple[list[tuple[float, int]], float]:
    """Read ``files`` over and over, ticking ``tuning`` every tick, until it has
    settled and measured ``settled_windows`` more windows (or ``max_seconds``
    pass). Returns (seconds, delivered bytes) at every tick and the duration."""
    reader = tuning.reader
    tick = tuning.options.tick_seconds
    started = last = time.perf_counter()
    timeline = [(0.0, reader.stats().bytes_delivered)]
    tuning.tick()

    def finished() -> bool:
        tuner = tuning.tuner
        if not tuner.converged:
            return False
        settled = next(d.window for d in reversed(tuner.decisions) if d.next_phase == "settled"
                       and d.phase != "settled")  # fmt: skip
        return len(tuner.decisions) - settled >= settled_windows

    while True:
        stream = reader.stream(files)
        try:
            for _chunk in stream:
                now = time.perf_counter()
                if now - last < tick:
                    continue
                last = now
                tuning.tick()
                timeline.append((now - started, reader.stats().bytes_delivered))
                on_tick(now - started)
                if finished() or now - started > max_seconds:
                    return timeline, now - started
        finally:
            stream.close()  # type: ignore[attr-defined]


def summarize(decisions: list[Decision]) -> list[dict[str, Any]]:
    """Every configuration measured while exploring: windows, mean MB/s."""
    rates: dict[tuple[int, int], list[float]] = defaultdict(list)
    for decision in decisions:
        if decision.phase != "settled":
            config = decision.config
            rates[(config["outstanding_requests"], config["read_size"])].append(decision.rate)
    rows = [{"outstanding_requests": q, "read_size": s, "windows": len(r),
             "mb_per_s": statistics.fmean(r) / 1e6} for (q, s), r in rates.items()]  # fmt: skip
    return sorted(rows, key=lambda row: -row["mb_per_s"])


def plot_timeline(timeline: list[tuple[float, int]], changes: list[tuple[float, dict[str, Any]]],
                  path: str) -> None:  # fmt: skip
    plt = pyplot()

    times = [t for t, _ in timeline[1:]]
    rates = [(b1 - b0) / (t1 - t0) / 1e6 if t1 > t0 else 0.0
             for (t0, b0), (t1, b1) in itertools.pairwise(timeline)]  # fmt: skip
    figure, axis = plt.subplots(figsize=(10, 4.5))
    axis.plot(times, rates, color="tab:blue", linewidth=0.8, label="delivered MB/s (per tick)")
    for index, (when, config) in enumerate(changes):
        axis.axvline(when, color="tab:gray", linewidth=0.6, linestyle="--")
        if index < 40:
            axis.annotate(_label(config), (when, 0), rotation=90, fontsize=6, color="tab:gray",
                          xytext=(2, 2), textcoords="offset points")  # fmt: skip
    axis.set_xlabel("seconds")
    axis.set_ylabel("MB/s")
    axis.set_title("fastio-bench tune: throughput over time (dashed: a new configuration)")
    axis.legend(loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def absolute_paths(settings: Any) -> Any:
    """``settings`` (a spec or one of its sections) with every local path
    knob absolute, in its sections and tiers too: the shards' URLs, the
    index and the index folder, cache folders, the fairness exchange folder,
    tier folders, and a tuner storage that names a file (a path, or an
    SQLite URL's)."""
    from fastio.sources._objects import is_remote
    from fastio.spec._knobs import knobs

    def local(path: str) -> str:
        return path if is_remote(path) or "::" in path else os.path.abspath(path)

    changes: dict[str, Any] = {}
    for name, knob in knobs(settings).items():
        value = getattr(settings, name)
        if value is None:
            continue
        if knob.kind == "path":
            changes[name] = local(value)
        elif knob.kind in ("paths", "urls"):
            changes[name] = local(value) if isinstance(value, str) else tuple(map(local, value))
        elif knob.kind == "section":
            changes[name] = absolute_paths(value)
        elif knob.kind == "sections":
            changes[name] = tuple(map(absolute_paths, value))
        elif name == "storage" and isinstance(value, str):  # the tuner's trials
            sqlite = "sqlite:///"
            if value.startswith(sqlite) and not value[len(sqlite) :].startswith("/"):
                changes[name] = sqlite + os.path.abspath(value[len(sqlite) :])
            elif "://" not in value:
                changes[name] = os.path.abspath(os.path.expanduser(value))
    return dataclasses.replace(settings, **changes)


def write_config(out: Path, spec: DatasetSpec, tuned: dict[str, Any]) -> dict[str, Any]:
    """Save ``spec`` with the tuned knobs as a config file and load it back;
    its reader section."""
    from fastio.config import DatasetConfig, load_config, save_config

    knobs = {"outstanding_requests": tuned["outstanding_requests"],
             "read_size": tuned["read_size"]}  # fmt: skip
    # Local paths (patterns and folders too) absolute: a config's paths are
    # taken from the directory it is used in, which is seldom this one.
    spec = absolute_paths(spec.replace(reader=spec.reader.replace(**knobs)))
    save_config(DatasetConfig.from_spec(spec), out)
    reader = load_config(out).to_spec().reader
    if (reader.outstanding_requests, reader.read_size) != (
        knobs["outstanding_requests"], knobs["read_size"]
    ):  # fmt: skip
        raise click.ClickException(f"{out}: the written config does not load back the same")
    return reader.as_dict()


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@config_option("Read the files the config's urls name, starting from its reader knobs.")
@reader_options
@tuner_options
@click.option("--max-seconds", type=click.FloatRange(1), default=300.0, show_default=True,
              help="Stop after this long even if not settled.")  # fmt: skip
@click.option("--settled-windows", type=click.IntRange(0), default=3, show_default=True,
              help="Windows measured at the best after settling.")  # fmt: skip
@tuned_config_option
@output_options(plot="throughput over time with the trial boundaries")
@click.pass_context
def tune(ctx: click.Context, /, paths: tuple[str, ...], config_file: Path | None,
         **options: Any) -> None:  # fmt: skip
    """Tune outstanding requests and read size online while reading PATHS
    (files or folders, read whole, over and over), and write the result: the
    dataset (PATHS, or the config's) with the tuned reader and these tuner
    settings."""
    from fastio.reader._tuning import storage_fingerprint

    spec = command_spec(ctx, config_file, paths)
    if not paths:
        from fastio.formats._shards import shard_urls

        # patterns, globs and folders, as a dataset reads them
        paths = tuple(shard_urls(spec.urls, spec.format, spec.storage_options))
    files = files_to_read(paths)  # read whole, a folder's other files too
    if config_file is None:
        from fastio.formats._shards import shard_urls

        try:  # the config written names the dataset as given, where it is one
            shard_urls(list(paths), spec.format, spec.storage_options)
        except (OSError, ValueError):  # files of no format a folder is read as: by name
            spec = spec.replace(urls=tuple(files))
    tuner = spec.tuner
    # Ticks finer than the windows, so that each window is measured on time.
    tuning_options = tuner.replace(enabled=True, tick_seconds=min(0.1, tuner.window_seconds / 4))
    result, changes = tune_files(files, spec, tuning_options, options["max_seconds"],
                                 options["settled_windows"], show_live=not options["as_json"],
                                 study_name=storage_fingerprint(files))  # fmt: skip
    out = Path(options["tuned_config"])
    result["config_file"] = str(out)
    result["reader"] = write_config(out, spec, result["best_config"])
    if options["plot_path"] is not None:
        plot_timeline(result["timeline"], changes, options["plot_path"])
    emit(result, options["as_json"], options["out_path"], lambda: _print_result(result),
         options["plot_path"])  # fmt: skip


Changes = list[tuple[float, dict[str, Any]]]


def tune_files(files: list[str], spec: DatasetSpec, tuning_options: TunerSettings,
               max_seconds: float, settled_windows: int, show_live: bool,
               study_name: str) -> tuple[dict[str, Any], Changes]:  # fmt: skip
    """Tune a reader of ``spec``'s reader knobs on ``files``, read over and
    over (a live table on a terminal with ``show_live``): the result, and when the
    configuration changed. Ends the command on a read error."""
    from rich.live import Live

    from fastio.reader._reader import Reader
    from fastio.reader._tuning import ReaderTuning

    changes: Changes = []
    clock = {"now": 0.0}
    live_on = show_live and error_console().is_terminal
    with Reader(spec.reader) as reader, Live(console=error_console(), transient=False,
                                         auto_refresh=False) as live:  # fmt: skip
        if not live_on:
            live.stop()

        def decided(decision: Decision) -> None:
            if decision.next_config != decision.config:
                changes.append((clock["now"], decision.next_config))

        def ticked(now: float) -> None:
            clock["now"] = now
            if live_on:
                tuner = tuning.tuner
                best, rate = tuner.best
                status = (
                    f"{now:5.1f} s  {tuner.phase}  round {tuner.round}  trials "
                    f"{tuner.trials}  best {_label(best)} {rate / 1e6:,.0f} MB/s"
                )
                live.update(_live_table(tuner.decisions, status), refresh=True)

        tuning = ReaderTuning(reader, tuning_options, study_name, on_decision=decided)
        changes.append((0.0, dict(tuning.tuner.config)))
        try:
            timeline, seconds = run_tuning(files, tuning, max_seconds, settled_windows, ticked)
        except OSError as error:
            raise click.ClickException(str(error)) from None
        finally:
            tuning.close()
    tuner = tuning.tuner
    rows = summarize(tuner.decisions)
    settled_at = next((d.window for d in tuner.decisions if d.next_phase == "settled"), None)
    start = changes[0][1]
    best, best_rate, start_rate, gain = best_and_gain(tuner, start, rows)
    result: dict[str, Any] = {
        "files": len(files), "seconds": seconds, "converged": tuner.converged,
        "windows": len(tuner.decisions), "trials": tuner.trials, "round": tuner.round,
        "settled_after_windows": settled_at, "memory_budget": tuning.budget,
        "start_config": start, "start_mb_per_s": start_rate / 1e6,
        "best_config": best, "best_mb_per_s": best_rate / 1e6, "gain_over_start": gain,
        "configurations": rows, "decisions": [d.as_dict() for d in tuner.decisions],
        "timeline": timeline,
    }  # fmt: skip
    return result, changes


def best_and_gain(
    tuner: OnlineTuner, start: dict[str, Any], rows: list[dict[str, Any]] | None = None
) -> tuple[dict[str, Any], float, float, float | None]:
    """From its measured configurations (``rows``, as :func:`summarize` gives
    them, made here if not given), the best configuration and its rate
    (bytes/s), the rate of ``start``
    (the configuration the run began at) and the best's gain over it, each
    rate the mean over the windows measured at it. A round begun after drift
    has measured nothing yet: the best is then what the last round settled
    at, as measured then. A best that is the start gains exactly nothing (its
    first window alone made the same setting 0.7x or 1.2x itself)."""
    rates = {(row["outstanding_requests"], row["read_size"]): row["mb_per_s"] * 1e6
             for row in (summarize(tuner.decisions) if rows is None else rows)}  # fmt: skip
    best, best_rate = tuner.best
    if not best_rate:
        settled = [d.next_config for d in tuner.decisions if d.next_phase == "settled"]
        best = dict(settled[-1]) if settled else best
        best_rate = rates.get((best["outstanding_requests"], best["read_size"]), 0.0)
    first = next((d.rate for d in tuner.decisions), 0.0)
    start_rate = rates.get((start["outstanding_requests"], start["read_size"]), first)
    if not start_rate:
        return best, best_rate, start_rate, None
    return best, best_rate, start_rate, 1.0 if best == start else best_rate / start_rate


def _print_result(result: dict[str, Any]) -> None:
    from rich.table import Table

    rows, best = result["configurations"], result["best_config"]
    table = Table(title="fastio-bench tune: configurations measured")
    for column in ("outstanding requests", "read size", "windows", "MB/s"):
        table.add_column(column, justify="right")
    for row in rows:
        mark = "[bold green]" if (row["outstanding_requests"], row["read_size"]) == (
            best["outstanding_requests"], best["read_size"]) else "[default]"  # fmt: skip
        table.add_row(f"{mark}{row['outstanding_requests']}", f"{mark}{_human(row['read_size'])}",
                      str(row["windows"]), f"{mark}{row['mb_per_s']:,.0f}")  # fmt: skip
    console().print(table)
    gain = result["gain_over_start"]
    console().print(
        f"{'settled' if result['converged'] else 'NOT settled'} after "
        f"{(result['converged'] and result['settled_after_windows']) or result['windows']} windows "
        f"({result['seconds']:.1f} s in all, {result['round']} re-tunes after drift): "
        f"{_label(best)} at {result['best_mb_per_s']:,.0f} "
        f"MB/s, x{gain or 0:.2f} the start ({_label(result['start_config'])}); "
        f"config: {result['config_file']}"
    )
