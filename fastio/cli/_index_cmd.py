"""``fastio-bench index URLS...``: index a dataset once, for every job after.

Every shard is scanned (``outstanding_requests`` at a time: a remote dataset is
read once, at the link's rate) and one dataset index is written, beside the
shards or at ``--out``: every rank, worker and node of a job then reads that
one file with one request instead of finding any shard's samples itself.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from fastio.cli._config_cmd import command_spec, config_option
from fastio.cli._options import reader_options
from fastio.cli._report import console, shard_progress

if TYPE_CHECKING:
    from pathlib import Path

# The formats that have shard indexes (the others are laid out from their metadata).
_INDEXED = ["webdataset", "tfrecord", "jsonl", "lines"]


@click.command("index")
@click.argument("urls", nargs=-1)
@config_option("Index the dataset a config file describes (its urls, format and knobs).")
@click.option("--format", "format_name", type=click.Choice(_INDEXED), default=None,
              help="The shards' format (default: from the first URL's extension).")  # fmt: skip
@click.option("--out", default=None,
              help="Where the dataset index goes (a path or URL); default: "
                   "dataset.fastio-index.npz in the shards' folder, where datasets "
                   "find it without being told.")  # fmt: skip
@reader_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of lines.")
@click.pass_context
def index(
    ctx: click.Context,
    /,
    urls: tuple[str, ...],
    config_file: Path | None,
    format_name: str | None,
    out: str | None,
    as_json: bool,
    **_knobs: Any,
) -> None:
    """Scan every shard of URLS (patterns, globs, remote URLs) and write one
    dataset index for every job after."""
    from fastio.dataset._dataset import Dataset

    top = {"format": format_name} if format_name is not None else {}
    spec = command_spec(ctx, config_file, urls, **top)
    started = time.perf_counter()
    try:
        with Dataset.from_spec(spec.replace(fairness=spec.fairness.replace(enabled=False))) \
                as dataset:  # fmt: skip
            with shard_progress("indexing", len(dataset.urls), quiet=as_json) as advance:
                where = dataset.save_index(out, progress=advance)
            stats = dataset.reader.stats()
            result: dict[str, Any] = {"index": where, "shards": len(dataset.urls),
                                      "samples": dataset.total,
                      "bytes_read": stats.bytes_read, "requests": stats.requests,
                      "seconds": time.perf_counter() - started}  # fmt: skip
    except (OSError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
        return
    console().print(f"{result['shards']} shards, {result['samples']} samples indexed in "
                    f"{result['seconds']:.1f} s ({result['bytes_read'] / 1e6:.1f} MB read): "
                    f"{where}")  # fmt: skip
