"""``fastio-bench run``: read files or folders and report throughput."""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any

import click

from fastio.cli._measure import Measurement, expand_paths, read_with_fastio
from fastio.cli._options import reader_options, settings_from
from fastio.cli._report import byte_progress, console, print_table


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@reader_options
@click.option("--repeat", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Read everything this many times; the median run is reported.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def run(paths: tuple[str, ...], repeat: int, as_json: bool, **options: Any) -> None:
    """Read PATHS (files, or folders read recursively) and print the throughput.

    Every file is one shard, read whole, in sorted order.
    """
    settings = settings_from(options)
    try:
        files = expand_paths(paths)
    except FileNotFoundError as error:
        raise click.BadParameter(f"{error.filename}: no such file or directory") from None
    if not files:
        raise click.BadParameter("no files found under the given paths")
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
