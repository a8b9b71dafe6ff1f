"""``fastio-bench demo``: a synthetic sharded dataset, read by fastio and by plain Python."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import click

from fastio.cli._config_cmd import config_option, load
from fastio.cli._measure import read_with_fastio, read_with_python
from fastio.cli._options import SIZE, output_options
from fastio.cli._report import byte_progress, emit, print_table
from fastio.spec._reader import ReaderSettings

_WRITE_BLOCK = 1 << 20


def write_demo_dataset(folder: Path, shards: int, shard_size: int, seed: int = 0) -> list[str]:
    """``shards`` files of ``shard_size`` pseudo-random bytes (incompressible, so
    no filesystem or device shortcut flatters the numbers)."""
    import numpy as np

    generator = np.random.default_rng(seed)
    paths = []
    with byte_progress("writing the demo dataset", shards * shard_size) as advance:
        for index in range(shards):
            path = folder / f"train-{index:04d}.bin"
            with open(path, "wb") as handle:
                remaining = shard_size
                while remaining:
                    block = min(remaining, _WRITE_BLOCK)
                    handle.write(generator.bytes(block))
                    remaining -= block
                    if advance is not None:
                        advance(block)
            paths.append(str(path))
    return paths


@click.command()
@click.option("--shards", type=click.IntRange(1, 100_000), default=16, show_default=True)
@click.option("--shard-size", type=SIZE, default="16MiB", show_default=True)
@click.option(
    "--folder",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write the dataset (default: a temporary folder, removed after).",
)
@output_options(repeat="Read with each method", repeat_default=3)
@config_option(
    "Read with the reader settings of a config file (YAML, TOML, JSON); its urls "
    "are not read: the demo writes its own dataset."
)
def demo(
    shards: int, shard_size: int, folder: Path | None, repeat: int, as_json: bool,
    out_path: str | None, config_file: Path | None,
) -> None:  # fmt: skip
    """Write a small synthetic sharded dataset, read it with fastio and with
    plain Python, and print both throughputs side by side.

    The files were just written, so both read from the page cache: this shows
    the per-byte cost of each reader, not the disk (see benchmarks/ for cold reads).
    """
    settings = ReaderSettings() if config_file is None else load(config_file, {}).to_spec().reader
    temporary = folder is None
    root = Path(tempfile.mkdtemp(prefix="fastio-demo-")) if folder is None else folder
    root.mkdir(parents=True, exist_ok=True)
    try:
        files = write_demo_dataset(root, shards, shard_size)
        total = shards * shard_size * repeat
        # Interleaved, so that both see the same machine state; medians, since a
        # read of a few hundred MiB from the page cache takes only tens of ms.
        python_runs, fastio_runs = [], []
        with byte_progress("plain Python and fastio", 2 * total, quiet=as_json) as advance:
            for _ in range(repeat):
                python_runs.append(read_with_python(files, settings.read_size, advance))
                fastio_runs.append(read_with_fastio(files, settings, advance))
        python = sorted(python_runs, key=lambda m: m.seconds)[repeat // 2]
        fast = sorted(fastio_runs, key=lambda m: m.seconds)[repeat // 2]
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    if fast.bytes != python.bytes:
        raise click.ClickException(f"fastio read {fast.bytes} bytes, Python {python.bytes}")
    result = {
        "dataset": {"shards": shards, "shard_size": shard_size, "folder": str(root)},
        "reader": settings.as_dict(),
        "fastio": fast.as_dict(),
        "python": python.as_dict(),
        "speedup": fast.mb_per_s / python.mb_per_s,
        "runs": repeat,
        "fastio_mb_per_s_runs": [m.mb_per_s for m in fastio_runs],
        "python_mb_per_s_runs": [m.mb_per_s for m in python_runs],
    }
    where = "a temporary folder" if temporary else os.fspath(root)
    emit(result, as_json, out_path, lambda: print_table(
        f"demo: {shards} shards x {shard_size / 2**20:g} MiB in {where} "
        f"(warm page cache, median of {repeat})", [python, fast], baseline=python,
    ))  # fmt: skip
