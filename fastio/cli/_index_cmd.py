"""``fastio-bench index URLS...``: index a dataset once, for every job after.

Every shard is scanned (``outstanding_requests`` at a time: a remote dataset is
read once, at the link's rate) and one dataset index is written, beside the
shards or at ``--index`` (the knob a dataset then reads it from): every rank,
worker and node of a job then reads that one file with one request instead of
finding any shard's samples itself.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import click

from fastio.cli._config_cmd import command_spec, config_option
from fastio.cli._options import knob_option, output_options, reader_options
from fastio.cli._report import console, emit, shard_progress
from fastio.spec import FormatSettings

if TYPE_CHECKING:
    from pathlib import Path

# The formats that have shard indexes (the others are laid out from their metadata).
_INDEXED = ["webdataset", "tfrecord", "jsonl", "lines"]


@click.command("index")
@click.argument("urls", nargs=-1)
@config_option("Index the dataset a config file describes (its urls, format and knobs).")
@click.option("--format", "format_name", type=click.Choice(_INDEXED), default=None,
              help="The shards' format (default: from the first URL's extension).")  # fmt: skip
@knob_option(FormatSettings, "index")
@reader_options
@output_options()
@click.pass_context
def index(
    ctx: click.Context,
    /,
    urls: tuple[str, ...],
    config_file: Path | None,
    format_name: str | None,
    index: str | None,
    as_json: bool,
    out_path: str | None,
    **_knobs: Any,
) -> None:
    """Scan every shard of URLS (patterns, globs, remote URLs) and write one
    dataset index for every job after."""
    from fastio.dataset._dataset import Dataset

    top = {"format": format_name} if format_name is not None else {}
    spec = command_spec(ctx, config_file, urls, **top)
    # The index is written, not read: the dataset must not look for it.
    where = index or spec.format_options.index
    spec = spec.replace(format_options=dataclasses.replace(spec.format_options, index=None))
    started = time.perf_counter()
    try:
        with Dataset.from_spec(spec.replace(fairness=spec.fairness.replace(enabled=False))) \
                as dataset:  # fmt: skip
            with shard_progress("indexing", len(dataset.urls), quiet=as_json) as advance:
                where = dataset.save_index(where, progress=advance)
            stats = dataset.reader.stats()
            result: dict[str, Any] = {"index": where, "shards": len(dataset.urls),
                                      "samples": dataset.total,
                      "bytes_read": stats.bytes_read, "requests": stats.requests,
                      "seconds": time.perf_counter() - started}  # fmt: skip
    except (OSError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    emit(result, as_json, out_path, lambda: console().print(
        f"{result['shards']} shards, {result['samples']} samples indexed in "
        f"{result['seconds']:.1f} s ({result['bytes_read'] / 1e6:.1f} MB read): {where}"
    ))  # fmt: skip
