"""``fastio-bench compare``: what the storage gives, what each loader gets, and
the best settings, in one run.

1. The storage ceiling: raw reads of the dataset's files at a small grid of
   reader knobs (``fastio-bench sweep``'s machinery), the best point kept.
2. The tuned configuration: the online tuner on the same files (``fastio-bench
   tune``'s machinery), written as a config file (``--tuned-config``).
3. The loaders: fastio (samples, batches, in a DataLoader, and with the tuned
   config file, which proves it loads and reads the dataset) and the peers
   installed here that read the format (:mod:`fastio.cli._peers`), each an
   epoch in stored order, ``--repeat`` rounds in a rotating order, medians.

MB/s is the size of the dataset's files over an epoch's seconds, so loaders
and the ceiling compare directly.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import TYPE_CHECKING, Any

import click

from fastio.cli._config_cmd import command_spec, config_option
from fastio.cli._options import NamesType, dataset_options, output_options, reader_options
from fastio.cli._peers import LOADERS, Loader, LoaderOptions, fastio_samples, files_bytes, loaders
from fastio.cli._report import _size, console, emit, error_console, pyplot
from fastio.cli._sweep import sweep_points
from fastio.cli._tune import _human, tune_files, tuned_config_option, tuner_options, write_config

if TYPE_CHECKING:
    from pathlib import Path

    from fastio.spec import DatasetSpec, TunerSettings

# The ceiling's grid: around where local storage peaks (sweep explores further).
_CEILING_REQUESTS = [4, 16, 64]
_CEILING_SIZES = [256 << 10, 1 << 20, 4 << 20]
TUNED = "fastio tuned config"


@click.command()
@click.argument("paths", nargs=-1)
@config_option("Compare on the dataset a config file describes (fastio reads with its knobs).")
@reader_options
@dataset_options
@click.option("--batch-size", type=click.IntRange(1), default=256, show_default=True,
              help="Samples per batch: fastio's, pyarrow's and the DataLoaders'.")  # fmt: skip
@click.option("--workers", type=click.IntRange(0, 64), default=2, show_default=True,
              help="DataLoader worker processes (0: no DataLoader rows).")  # fmt: skip
@click.option("--loaders", "only", type=NamesType(), default=None,
              help="Only these loaders (comma-separated; default: every one that applies: "
              f"{', '.join(loader.name for loader in LOADERS)}).")  # fmt: skip
@tuner_options
@click.option("--tune-seconds", type=click.FloatRange(1), default=60.0, show_default=True,
              help="Longest the tuner runs before its best so far is taken.")  # fmt: skip
@tuned_config_option
@output_options(plot="MB/s of each loader beside the storage ceiling",
                repeat="Read with each loader", repeat_default=3)  # fmt: skip
@click.pass_context
def compare(ctx: click.Context, /, paths: tuple[str, ...], config_file: Path | None,
            batch_size: int, workers: int, only: tuple[str, ...] | None, tune_seconds: float,
            tuned_config: str, repeat: int, as_json: bool, out_path: str | None,
            plot_path: str | None, **_knobs: Any) -> None:  # fmt: skip
    """Measure the storage ceiling, every loader installed here (fastio and its
    peers) and the tuned configuration on the dataset PATHS name (URL patterns,
    format from the extension or --format), and write the tuned config file."""
    spec = command_spec(ctx, config_file, paths)
    urls, total, format_name = _dataset_files(spec)
    options = LoaderOptions(format_name, batch_size, workers)
    usable, skipped = loaders(format_name, options)
    if only:
        unknown = sorted(set(only) - {loader.name for loader in LOADERS} - {TUNED})
        if unknown:
            raise click.BadParameter(f"unknown loaders {unknown}", param_hint="--loaders")
        usable = [loader for loader in usable if loader.name in only]
    size = files_bytes(urls)
    with error_console().status("storage ceiling: raw reads") as status:
        if as_json:
            status.stop()
        ceiling = _ceiling(urls, spec, repeat)
    tuning = _tune(urls, spec, tune_seconds, as_json)
    tuning["config_file"] = tuned_config
    tuning["reader"] = write_config(_path(tuned_config), spec, tuning["best_config"])
    runs = _measure(usable, urls, spec, options, tuned_config, repeat, total, size, as_json)
    result = {
        "dataset": {"format": format_name, "shards": len(urls), "samples": total, "bytes": size},
        "ceiling": ceiling, "tuning": tuning, "loaders": runs, "left_out": skipped,
        "batch_size": batch_size, "workers": workers, "runs": repeat,
    }  # fmt: skip
    if plot_path is not None:
        plot(result, plot_path)
    emit(result, as_json, out_path, lambda: print_result(result), plot_path)


def _path(text: str) -> Path:
    from pathlib import Path

    return Path(text)


def _dataset_files(spec: DatasetSpec) -> tuple[list[str], int, str]:
    """The dataset's shard files, its sample count and format (indexes built
    now, untimed, as preparing a dataset does). Ends the command if it cannot
    be read, or is not local."""
    from fastio._errors import DecodeError, MissingExtraError
    from fastio.dataset._dataset import Dataset

    try:
        with Dataset.from_spec(spec) as dataset:
            dataset.index()  # counts every shard; later datasets of them plan from the start
            urls, total, format_name = list(dataset.urls), dataset.total, dataset.format
    except (OSError, DecodeError, ValueError, TypeError, MissingExtraError) as error:
        raise click.ClickException(str(error)) from None
    remote = [url for url in urls if "://" in url or "::" in url]
    if remote:
        raise click.ClickException(f"compare measures local storage; {remote[0]} is remote")
    # Under on_error skip or warn the dataset left out shards it could not
    # open; every loader compares on the rest.
    missing = [url for url in urls if not os.path.isfile(url)]
    if len(missing) == len(urls):
        raise click.ClickException(f"no shard of the dataset can be read: {missing[0]} is not "
                                   "a file (paths in a config are taken from the directory "
                                   "it is used in)")  # fmt: skip
    if missing:
        click.echo(f"compare leaves out {len(missing)} shards that are not files, e.g. "
                   f"{missing[0]}", err=True)  # fmt: skip
    gone = set(missing)
    return [url for url in urls if url not in gone], total, format_name


def _ceiling(urls: list[str], spec: DatasetSpec, repeat: int) -> dict[str, Any]:
    """Raw reads of the files at the grid's points: the best point and all of them."""
    base = spec.reader
    budget = spec.tuner.memory_budget or base.memory_budget // 2
    try:
        points = sweep_points(urls, base, _CEILING_REQUESTS, _CEILING_SIZES, [base.engine],
                              [base.direct], budget, repeat, quiet=True)  # fmt: skip
    except OSError as error:
        raise click.ClickException(str(error)) from None
    best = max(points, key=lambda point: point["mb_per_s"])
    return {"mb_per_s": best["mb_per_s"], "best": best, "points": points}


def _tune(urls: list[str], spec: DatasetSpec, seconds: float, quiet: bool) -> dict[str, Any]:
    from fastio.reader._tuning import storage_fingerprint

    tuner: TunerSettings = spec.tuner
    options = tuner.replace(enabled=True, tick_seconds=min(0.1, tuner.window_seconds / 4))
    result, _ = tune_files(urls, spec, options, seconds, settled_windows=2,
                           show_live=not quiet, study_name=storage_fingerprint(urls))  # fmt: skip
    keep = ("converged", "trials", "windows", "seconds", "start_config", "best_config",
            "best_mb_per_s", "gain_over_start")  # fmt: skip
    return {key: result[key] for key in keep}


def _measure(usable: list[Loader], urls: list[str], spec: DatasetSpec, options: LoaderOptions,
             tuned_config: str, repeat: int, total: int, size: int,
             quiet: bool) -> list[dict[str, Any]]:  # fmt: skip
    """Every loader ``repeat`` times, each round in a rotated order (so none is
    always first after another's page-cache footprint); medians."""
    from fastio.config import load_config

    stored = spec.replace(shuffle=dataclasses.replace(spec.shuffle, enabled=False))

    # The written config, loaded back as a user would (once, outside the
    # clock, as the other loaders' settings are): it must read the whole dataset.
    loaded = load_config(tuned_config).to_spec().replace(shuffle=stored.shuffle)

    def tuned(urls: list[str], _: DatasetSpec, options: LoaderOptions) -> int:
        return fastio_samples(urls, loaded, options)

    plan = [*usable, Loader(TUNED, (), (), tuned, "fastio.Dataset of the tuned config file")]
    seconds: dict[str, list[float]] = {loader.name: [] for loader in plan}
    failures: dict[str, str] = {}
    with error_console().status("loaders") as status:
        if quiet:
            status.stop()
        for round_ in range(repeat):
            shift = round_ % len(plan)
            for loader in plan[shift:] + plan[:shift]:
                if loader.name in failures:
                    continue
                status.update(f"round {round_ + 1}/{repeat}: {loader.name}")
                started = time.perf_counter()
                try:
                    samples = loader.run(urls, stored, options)
                except Exception as error:  # a peer's own failure is a result, not a crash
                    failures[loader.name] = f"{type(error).__name__}: {error}"
                    continue
                elapsed = time.perf_counter() - started
                if samples != total:
                    failures[loader.name] = f"delivered {samples} samples, not {total}"
                    continue
                seconds[loader.name].append(elapsed)
    rows = []
    for loader in plan:
        runs = seconds[loader.name]
        median = statistics.median(runs) if runs and loader.name not in failures else None
        rows.append({
            "loader": loader.name, "what": loader.what, "failed": failures.get(loader.name),
            "seconds": median, "seconds_runs": runs,
            "samples_per_s": total / median if median else None,
            "mb_per_s": size / median / 1e6 if median else None,
        })  # fmt: skip
    return rows


def print_result(result: dict[str, Any]) -> None:
    from rich.table import Table

    data, ceiling = result["dataset"], result["ceiling"]
    best = ceiling["best"]
    table = Table(title=f"fastio-bench compare: {data['format']}, {data['shards']} shards, "
                  f"{data['samples']:,} samples, {data['bytes'] / 1e6:,.0f} MB "
                  f"(median of {result['runs']})")  # fmt: skip
    for column in ("", "samples/s", "MB/s", "of the ceiling", "vs fastio"):
        table.add_column(column, justify="left" if not column else "right")
    table.add_row(f"storage ceiling: raw reads, {best['outstanding_requests']} x "
                  f"{_size(best['read_size'])} ({best['engine_used']})", "",
                  f"{ceiling['mb_per_s']:,.0f}", "1.00", "", style="bold")  # fmt: skip
    loaders = result["loaders"]
    fastio = next((row for row in loaders if row["loader"] == "fastio"), None)
    reference = fastio["samples_per_s"] if fastio and fastio["samples_per_s"] else None
    for row in sorted(loaders, key=lambda row: -(row["samples_per_s"] or 0.0)):
        if row["samples_per_s"] is None:
            table.add_row(row["loader"], f"failed: {row['failed']}", "", "", "")
            continue
        versus = f"{row['samples_per_s'] / reference:.2f}x" if reference else ""
        style = "green" if row["loader"].startswith("fastio") else None
        table.add_row(row["loader"], f"{row['samples_per_s']:,.0f}", f"{row['mb_per_s']:,.0f}",
                      f"{row['mb_per_s'] / ceiling['mb_per_s']:.2f}", versus,
                      style=style)  # fmt: skip
    console().print(table)
    tuning = result["tuning"]
    tuned = tuning["best_config"]
    console().print(
        f"tuned: {tuned['outstanding_requests']} x {_human(tuned['read_size'])} "
        f"({'settled' if tuning['converged'] else 'not settled'} after {tuning['windows']} "
        f"windows, {tuning['best_mb_per_s']:,.0f} MB/s raw); config: {tuning['config_file']}",
        highlight=False,
    )  # fmt: skip
    if result["left_out"]:
        console().print("left out: " + "; ".join(f"{name} ({why})" for name, why
                                                in result["left_out"].items()))  # fmt: skip


def plot(result: dict[str, Any], path: str) -> None:
    """Bars of each loader's MB/s, the storage ceiling as a line."""
    plt = pyplot()
    rows = sorted((row for row in result["loaders"] if row["mb_per_s"]),
                  key=lambda row: row["mb_per_s"])  # fmt: skip
    figure, axis = plt.subplots(figsize=(8, 1.2 + 0.45 * len(rows)))
    colors = ["tab:orange" if row["loader"].startswith("fastio") else "tab:blue" for row in rows]
    axis.barh([row["loader"] for row in rows], [row["mb_per_s"] for row in rows], color=colors)
    axis.axvline(result["ceiling"]["mb_per_s"], color="black", linestyle="--",
                 label="storage ceiling (raw reads)")  # fmt: skip
    axis.set_xlabel("MB/s (dataset bytes per epoch second)")
    data = result["dataset"]
    axis.set_title(f"fastio-bench compare: {data['format']}, {data['samples']:,} samples")
    axis.legend(loc="lower right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
