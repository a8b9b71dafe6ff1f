"""``fastio-bench run``: read files or folders and report throughput."""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import TYPE_CHECKING, Any

import click

from fastio.cli._config_cmd import config_option, explicit_options, load
from fastio.cli._measure import Measurement, files_to_read, read_with_fastio
from fastio.cli._options import SIZE, reader_options, settings_from
from fastio.cli._report import (
    byte_progress,
    console,
    print_dataset_table,
    print_table,
    sample_progress,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from fastio.dataset._dataset import Dataset
    from fastio.spec._reader import ReaderSettings


_FORMATS = ["auto", "webdataset", "tfrecord", "parquet", "arrow", "npy", "fixed", "jsonl", "lines"]


# Options a config file also sets: option name -> config key.
_CONFIG_KEYS = {
    **{knob: f"reader__{knob}" for knob in
       ("outstanding_requests", "read_size", "engine", "direct", "memory_budget")},
    "format_name": "format", "shuffle": "shuffle__enabled", "seed": "shuffle__seed",
    "shuffle_buffer": "shuffle__buffer", "shuffle_shards": "shuffle__shards",
    "record_size": "format_options__record_size", "columns": "format_options__columns",
    "on_error": "on_error",
}  # fmt: skip


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@config_option(
    "Read the dataset a config file (YAML, TOML, JSON) describes, with its reader "
    "knobs; options given here override it, and PATHS its urls."
)
@reader_options
@click.option(
    "--repeat",
    type=click.IntRange(1, 100),
    default=1,
    show_default=True,
    help="Read everything this many times; the median run is reported.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option(
    "--format",
    "format_name",
    type=click.Choice(_FORMATS),
    help="Read PATHS as a dataset of this format (URL patterns with {a..b} and "
    "globs): samples/s and shuffle quality. Without it, files are read whole.",
)
@click.option(
    "--shuffle/--no-shuffle",
    default=True,
    show_default=True,
    help="Dataset mode: shuffled epoch order.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Dataset mode: shuffle seed.")
@click.option(
    "--shuffle-buffer",
    type=SIZE,
    default="64MiB",
    show_default=True,
    help="Dataset mode: bytes of encoded samples mixed at once.",
)
@click.option(
    "--shuffle-shards",
    type=click.IntRange(1, 4096),
    default=8,
    show_default=True,
    help="Dataset mode: shards mixed at once.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1),
    default=None,
    help="Dataset mode: read batches of this many samples instead of samples.",
)
@click.option("--record-size", type=SIZE, default=None, help="Format fixed: bytes per record.")
@click.option("--columns", default=None, help="Parquet/Arrow: comma-separated columns to read.")
@click.option(
    "--on-error",
    type=click.Choice(["raise", "skip", "warn"]),
    default="raise",
    show_default=True,
    help="Dataset mode: what a damaged or missing shard does.",
)
@click.pass_context
def run(
    ctx: click.Context,
    /,
    paths: tuple[str, ...],
    repeat: int,
    as_json: bool,
    config_file: Path | None,
    **options: Any,
) -> None:
    """Read PATHS and print the throughput.

    Without --format, PATHS are files or folders (read recursively); every file
    is one shard, read whole, in sorted order. With --format, PATHS are URL
    patterns of a sharded dataset, read an epoch at a time as training reads it.
    With --config, the dataset is the config's (PATHS, if given, replace its urls).
    """
    batch_size = options["batch_size"]
    if config_file is not None:
        config = load(config_file, _config_overrides(ctx, paths))
        _run_dataset(config.to_dataset, repeat, as_json, batch_size)
        return
    if not paths:
        raise click.UsageError("give PATHS to read, or --config FILE")
    settings = settings_from(options)
    if options["format_name"] is not None:
        _run_dataset(lambda: _dataset(paths, settings, options), repeat, as_json, batch_size)
        return
    files = files_to_read(paths)
    total = sum(os.path.getsize(path) for path in files)
    runs: list[Measurement] = []
    try:
        for attempt in range(repeat):
            label = f"reading {len(files)} files" + (
                f" (run {attempt + 1}/{repeat})" * (repeat > 1)
            )
            with byte_progress(label, total, quiet=as_json) as advance:
                runs.append(read_with_fastio(files, settings, advance))
    except OSError as error:
        raise click.ClickException(str(error)) from None
    median = sorted(runs, key=lambda m: m.seconds)[len(runs) // 2]
    if as_json:
        result = median.as_dict() | {
            "files": len(files),
            "runs": len(runs),
            "mb_per_s_runs": [m.mb_per_s for m in runs],
        }
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
        return
    print_table("fastio-bench run", [median], extra={"files": len(files), "runs": len(runs)})
    if repeat > 1:
        spread = [m.mb_per_s for m in runs]
        console().print(
            f"MB/s over {repeat} runs: median {statistics.median(spread):.0f}, "
            f"min {min(spread):.0f}, max {max(spread):.0f}"
        )


def _config_overrides(ctx: click.Context, paths: tuple[str, ...]) -> dict[str, Any]:
    """The options given on the command line, as overrides of the config file."""
    overrides = explicit_options(ctx, _CONFIG_KEYS)
    if overrides.get("format") == "auto":
        overrides["format"] = None
    if overrides.get("format_options__columns"):
        overrides["format_options__columns"] = overrides["format_options__columns"].split(",")
    if paths:
        overrides["urls"] = list(paths)
    return overrides


def _dataset(paths: tuple[str, ...], settings: ReaderSettings, options: dict[str, Any]) -> Dataset:
    from fastio.dataset._dataset import Dataset

    format_name = None if options["format_name"] == "auto" else options["format_name"]
    columns = options["columns"].split(",") if options["columns"] else None
    return Dataset(
        list(paths),
        format_name,
        shuffle=options["shuffle"],
        seed=options["seed"],
        shuffle_buffer=options["shuffle_buffer"],
        shuffle_shards=options["shuffle_shards"],
        on_error=options["on_error"],
        record_size=options["record_size"],
        columns=columns,
        reader=settings,
    )


def _run_dataset(
    make_dataset: Callable[[], Dataset], repeat: int, as_json: bool, batch_size: int | None
) -> None:
    from fastio._errors import DecodeError
    from fastio.cli._dataset_run import DatasetRun, describe, read_epoch
    from fastio.plan._windows import shuffle_quality

    try:
        dataset = make_dataset()
    except (OSError, DecodeError, ValueError, TypeError) as error:
        raise click.ClickException(str(error)) from None
    runs: list[DatasetRun] = []
    try:
        with dataset:
            for attempt in range(repeat):
                label = f"epoch of {len(dataset):,} samples" + (
                    f" (run {attempt + 1}/{repeat})" * (repeat > 1)
                )
                with sample_progress(label, len(dataset), quiet=as_json) as advance:
                    runs.append(read_epoch(dataset, batch_size, advance))
            quality = shuffle_quality(dataset.order(), dataset.bases)
    except (OSError, DecodeError) as error:
        raise click.ClickException(str(error)) from None
    median = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
    result = {
        "mode": "dataset",
        **describe(dataset),
        "batch_size": batch_size,
        "expected_samples": len(dataset),
        "samples": median.samples,
        "skipped": median.skipped,
        "bytes": median.bytes,
        "seconds": median.seconds,
        "samples_per_s": median.samples_per_s,
        "mb_per_s": median.mb_per_s,
        "runs": len(runs),
        "samples_per_s_runs": [r.samples_per_s for r in runs],
        "shuffle_quality": quality,
        "settings": dataset.reader.settings.as_dict() | {"engine_used": dataset.reader.engine_kind},
        "stats": median.stats,
    }
    if as_json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
        return
    print_dataset_table(result)
