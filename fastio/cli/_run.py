"""``fastio-bench run``: read files or folders and report throughput."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from fastio.cli._config_cmd import command_spec, config_option
from fastio.cli._measure import Measurement, files_to_read, read_with_fastio
from fastio.cli._options import (
    given,
    knob_option,
    output_options,
    reader_options,
    reader_settings,
)
from fastio.cli._report import (
    byte_progress,
    console,
    emit,
    plot_timelines,
    print_dataset_table,
    print_table,
    sample_progress,
    timeline_recorder,
)
from fastio.spec import DatasetSpec, FormatSettings, ShuffleSettings

if TYPE_CHECKING:
    from pathlib import Path

    from fastio.dataset._dataset import Dataset


# The format registry's names (fastio.formats, which loads numpy: not at startup).
_FORMATS = ["auto", "webdataset", "tfrecord", "parquet", "arrow", "npy", "fixed", "jsonl", "lines"]


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@config_option(
    "Read the dataset a config file (YAML, TOML, JSON) describes, with its reader "
    "knobs; options given here override it, and PATHS its urls."
)
@reader_options
@output_options(plot="throughput over time of each run", repeat="Read everything")
@click.option(
    "--format",
    "format_name",
    type=click.Choice(_FORMATS),
    help="Read PATHS as a dataset of this format (URL patterns with {a..b} and "
    "globs): samples/s and shuffle quality. Without it, files are read whole.",
)
@knob_option(ShuffleSettings, "enabled", context="Dataset mode")
@knob_option(ShuffleSettings, "seed", context="Dataset mode")
@knob_option(ShuffleSettings, "buffer", context="Dataset mode")
@knob_option(ShuffleSettings, "shards", context="Dataset mode")
@click.option(
    "--batch-size",
    type=click.IntRange(1),
    default=None,
    help="Dataset mode: read batches of this many samples instead of samples.",
)
@knob_option(FormatSettings, "record_size")
@knob_option(FormatSettings, "columns")
@knob_option(DatasetSpec, "on_error", context="Dataset mode")
@click.pass_context
def run(
    ctx: click.Context,
    /,
    paths: tuple[str, ...],
    repeat: int,
    as_json: bool,
    out_path: str | None,
    plot_path: str | None,
    config_file: Path | None,
    format_name: str | None,
    batch_size: int | None,
    **_knobs: Any,
) -> None:
    """Read PATHS and print the throughput.

    Without --format, PATHS are files or folders (read recursively); every file
    is one shard, read whole, in sorted order. With --format, PATHS are URL
    patterns of a sharded dataset, read an epoch at a time as training reads it.
    With --config, the dataset is the config's (PATHS, if given, replace its urls).
    """
    if config_file is not None or (format_name is not None and paths):
        top = {"format": None if format_name == "auto" else format_name}
        spec = command_spec(ctx, config_file, paths, **(top if given(ctx, "format_name") else {}))
        _run_dataset(spec, repeat, batch_size, Output(as_json, out_path, plot_path))
        return
    if not paths:
        raise click.UsageError("give PATHS to read, or --config FILE")
    settings = reader_settings(ctx)
    files = files_to_read(paths)
    total = sum(os.path.getsize(path) for path in files)
    runs: list[Measurement] = []
    timelines: list[list[tuple[float, int]]] = []
    try:
        for attempt in range(repeat):
            label = f"reading {len(files)} files" + (
                f" (run {attempt + 1}/{repeat})" * (repeat > 1)
            )
            with byte_progress(label, total, quiet=as_json) as advance:
                progress = advance
                if plot_path is not None:
                    progress, points = timeline_recorder(advance)
                    timelines.append(points)
                runs.append(read_with_fastio(files, settings, progress))
    except OSError as error:
        raise click.ClickException(str(error)) from None
    median = sorted(runs, key=lambda m: m.seconds)[len(runs) // 2]
    result = median.as_dict() | {
        "files": len(files),
        "runs": len(runs),
        "mb_per_s_runs": [m.mb_per_s for m in runs],
    }

    def show() -> None:
        print_table("fastio-bench run", [median], extra={"files": len(files), "runs": len(runs)})
        if repeat > 1:
            spread = [m.mb_per_s for m in runs]
            console().print(
                f"MB/s over {repeat} runs: median {statistics.median(spread):.0f}, "
                f"min {min(spread):.0f}, max {max(spread):.0f}"
            )

    if plot_path is not None:
        plot_timelines(timelines, "MB", f"fastio-bench run: {len(files)} files", plot_path)
    emit(result, as_json, out_path, show, plot_path)


def _count(dataset: Dataset) -> int | None:
    """The samples of an epoch, or None before a never-seen dataset's first
    epoch has indexed its shards."""
    try:
        return len(dataset)
    except TypeError:
        return None


@dataclass(frozen=True)
class Output:
    """Where a command's result goes: ``--json``, ``--out``, ``--plot``."""

    as_json: bool
    out_path: str | None
    plot_path: str | None


def _run_dataset(spec: DatasetSpec, repeat: int, batch_size: int | None, output: Output) -> None:
    from fastio._errors import DecodeError, MissingExtraError
    from fastio.cli._dataset_run import DatasetRun, describe, read_epoch
    from fastio.dataset._dataset import Dataset
    from fastio.plan._windows import shuffle_quality

    try:
        dataset = Dataset.from_spec(spec)
    except (OSError, DecodeError, ValueError, TypeError, MissingExtraError) as error:
        raise click.ClickException(str(error)) from None
    runs: list[DatasetRun] = []
    timelines: list[list[tuple[float, int]]] = []
    try:
        with dataset:
            for attempt in range(repeat):
                count = _count(dataset)
                label = ("epoch of " + (f"{count:,} samples" if count is not None else
                         "a dataset never seen (indexed on the way)") +
                         f" (run {attempt + 1}/{repeat})" * (repeat > 1))  # fmt: skip
                with sample_progress(label, count, quiet=output.as_json) as advance:
                    progress = advance
                    if output.plot_path is not None:
                        progress, points = timeline_recorder(advance)
                        timelines.append(points)
                    runs.append(read_epoch(dataset, batch_size, progress))
            quality = shuffle_quality(dataset.order(), dataset.bases)
    except (OSError, DecodeError, MissingExtraError) as error:
        raise click.ClickException(str(error)) from None
    median = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
    shards_skipped = dataset.stats()["shards_skipped"]
    if shards_skipped >= len(dataset.urls):  # nothing was read: no figure to report
        raise click.ClickException(
            f"no shard could be read: all {len(dataset.urls)} were left out under "
            f"on_error={dataset.on_error!r}, e.g. {dataset.urls[0]} (paths in a config are "
            "taken from the directory it is used in)"
        )
    result = {
        "mode": "dataset",
        **describe(dataset),
        "batch_size": batch_size,
        "expected_samples": len(dataset),
        "samples": median.samples,
        "skipped": median.skipped,
        "shards_skipped": shards_skipped,
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
    if output.plot_path is not None:
        plot_timelines(timelines, "samples", f"fastio-bench run: {dataset.format} dataset",
                       output.plot_path)  # fmt: skip
    emit(result, output.as_json, output.out_path, lambda: print_dataset_table(result),
         output.plot_path)  # fmt: skip
