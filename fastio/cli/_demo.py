"""``fastio-bench demo``: a sharded WebDataset tar dataset, read by fastio and by
the loaders installed beside it, cold and warm, side by side.

The dataset is written with ``fastio-bench gen`` (random, incompressible
payloads of about ``--sample-size``) and indexed once, untimed, as a prepared
dataset is. Each loader reads one epoch in stored order and touches every
sample; a loader that delivers a different count is shown as wrong, with no
ratio. Cold runs first drop the files from the page cache
(``posix_fadvise(DONTNEED)`` after an ``fsync``: no root needed), warm runs
follow a read of every file. Loaders run in a rotating order in each of
``--repeat`` rounds; the table shows medians, and each peer's ratio is
fastio's median (the same way: in this process, or in a DataLoader with the
same workers, batch size and the default collate) over the peer's.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from fastio.cli._config_cmd import config_option, load
from fastio.cli._options import SIZE, output_options
from fastio.cli._peers import files_bytes, tarfile_samples, webdataset_samples
from fastio.cli._report import console, emit

# (urls, the dataset's index folder, reader settings, workers, batch size) -> samples
Read = Callable[[list[str], str, dict[str, Any], int, int], int]


def _fastio_samples(urls: list[str], index_dir: str, reader: dict[str, Any], workers: int,
                    batch_size: int) -> int:  # fmt: skip
    from fastio.dataset._dataset import Dataset

    with Dataset(urls, shuffle=False, index_dir=index_dir, reader=reader) as dataset:
        return sum(1 for _ in dataset)


def _fastio_loader(urls: list[str], index_dir: str, reader: dict[str, Any], workers: int,
                   batch_size: int) -> int:  # fmt: skip
    from torch.utils.data import DataLoader

    from fastio.dataset._dataset import Dataset

    with Dataset(urls, shuffle=False, index_dir=index_dir, reader=reader) as dataset:
        loader: Any = DataLoader(dataset, batch_size=batch_size, num_workers=workers)  # type: ignore[arg-type]
        return sum(len(batch["__key__"]) for batch in loader)


def _webdataset_loader(urls: list[str], index_dir: str, reader: dict[str, Any], workers: int,
                       batch_size: int) -> int:  # fmt: skip
    import webdataset
    from torch.utils.data import DataLoader

    dataset = webdataset.WebDataset(urls, shardshuffle=False, empty_check=False)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    return sum(len(batch["__key__"]) for batch in loader)


def _peer(run: Callable[..., int]) -> Read:
    def read(urls: list[str], index_dir: str, reader: dict[str, Any], workers: int,
             batch_size: int) -> int:  # fmt: skip
        return run(urls, None, None)

    return read


@dataclass(frozen=True)
class _Loader:
    name: str
    read: Read
    modules: tuple[str, ...]
    baseline: str | None  # the fastio loader it is compared with (None: it is fastio's)


_LOADERS = (
    _Loader("fastio", _fastio_samples, (), None),
    _Loader("webdataset", _peer(webdataset_samples), ("webdataset",), "fastio"),
    _Loader("tarfile loop", _peer(tarfile_samples), (), "fastio"),
    _Loader("fastio DataLoader", _fastio_loader, ("torch",), None),
    _Loader("webdataset DataLoader", _webdataset_loader, ("webdataset", "torch"),
            "fastio DataLoader"),
)  # fmt: skip


def _missing(loader: _Loader, workers: int) -> str | None:
    if "torch" in loader.modules and workers == 0:
        return "--workers 0"
    absent = [m for m in loader.modules if importlib.util.find_spec(m) is None]
    return f"{', '.join(absent)} not installed" if absent else None


def _drop_from_cache(urls: list[str]) -> None:
    """Evict the files' pages (clean ones: they were fsynced after writing)."""
    for url in urls:
        fd = os.open(url, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _warm_up(urls: list[str]) -> None:
    for url in urls:
        with open(url, "rb", buffering=0) as file:
            while file.read(4 << 20):
                pass


def _write(folder: Path, samples: int, sample_size: int, shards: int) -> tuple[list[str], str]:
    from fastio.cli._gen import write_dataset
    from fastio.dataset._dataset import Dataset

    written = write_dataset(folder, "webdataset", samples, sample_size, shards)
    for path in written.paths:
        with open(path, "rb") as file:
            os.fsync(file.fileno())
    index_dir = str(folder / "index")
    with Dataset(list(written.paths), index_dir=index_dir) as dataset:
        dataset.index()
    return list(written.paths), index_dir


@click.command()
@click.option("--samples", type=click.IntRange(1), default=2000, show_default=True)
@click.option("--sample-size", type=SIZE, default="110KB", show_default=True,
              help="Bytes per sample, about.")  # fmt: skip
@click.option("--shards", type=click.IntRange(1, 100_000), default=8, show_default=True)
@click.option("--workers", type=click.IntRange(0, 64), default=2, show_default=True,
              help="DataLoader workers (0: no DataLoader rows).")  # fmt: skip
@click.option("--batch-size", type=click.IntRange(1), default=64, show_default=True)
@click.option(
    "--folder",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write the dataset (default: a temporary folder, removed after).",
)
@output_options(repeat="Read with each loader, cold and warm,", repeat_default=3)
@config_option(
    "Read with the reader settings of a config file (YAML, TOML, JSON); its urls "
    "are not read: the demo writes its own dataset."
)
def demo(
    samples: int, sample_size: int, shards: int, workers: int, batch_size: int,
    folder: Path | None, repeat: int, as_json: bool, out_path: str | None,
    config_file: Path | None,
) -> None:  # fmt: skip
    """Write a sharded WebDataset tar dataset, read it with fastio and with the
    loaders installed here (webdataset, a plain tarfile loop, each in a torch
    DataLoader with --workers workers), cold and warm, and print them side by
    side: samples/s, MB/s and each peer's ratio to fastio read the same way."""
    from fastio.spec._reader import ReaderSettings

    if sample_size < 1:
        raise click.BadParameter("a sample needs at least one byte", param_hint="--sample-size")
    if samples < shards:
        raise click.BadParameter(f"{samples} samples cannot fill {shards} shards",
                                 param_hint="--samples")  # fmt: skip
    settings = ReaderSettings() if config_file is None else load(config_file, {}).to_spec().reader
    temporary = folder is None
    root = Path(tempfile.mkdtemp(prefix="fastio-demo-")) if folder is None else folder
    root.mkdir(parents=True, exist_ok=True)
    usable = [loader for loader in _LOADERS if _missing(loader, workers) is None]
    skipped = {loader.name: _missing(loader, workers) for loader in _LOADERS
               if loader not in usable}  # fmt: skip
    runs: dict[tuple[str, str], list[tuple[float, int]]] = {}
    try:
        if not as_json:
            console().print(f"writing {samples} samples of ~{sample_size / 1e3:g} KB in "
                            f"{shards} shards to {root}")  # fmt: skip
        urls, index_dir = _write(root, samples, sample_size, shards)
        for loader in usable:  # imported untimed: a first import costs seconds, not reading
            for module in loader.modules:
                importlib.import_module("torch.utils.data" if module == "torch" else module)
        total_bytes = files_bytes(urls)
        reader = settings.as_dict()
        for round_ in range(repeat):
            shift = round_ % len(usable)
            for loader in usable[shift:] + usable[:shift]:
                for mode in ("cold", "warm"):
                    (_drop_from_cache if mode == "cold" else _warm_up)(urls)
                    started = time.perf_counter()
                    count = loader.read(urls, index_dir, reader, workers, batch_size)
                    runs.setdefault((loader.name, mode), []).append(
                        (time.perf_counter() - started, count)
                    )
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    result = _result(runs, usable, samples, total_bytes)
    result.update({
        "dataset": {"samples": samples, "sample_size": sample_size, "shards": shards,
                    "bytes": total_bytes, "folder": str(root)},
        "workers": workers, "batch_size": batch_size, "runs": repeat,
        "reader": settings.as_dict(), "skipped": skipped,
    })  # fmt: skip
    emit(result, as_json, out_path, lambda: _print(result, temporary))


def _result(runs: dict[tuple[str, str], list[tuple[float, int]]], usable: list[_Loader],
            samples: int, total_bytes: int) -> dict[str, Any]:  # fmt: skip
    loaders: dict[str, Any] = {}
    for loader in usable:
        for mode in ("cold", "warm"):
            measured = runs[(loader.name, mode)]
            seconds = statistics.median(s for s, _ in measured)
            counts = sorted({count for _, count in measured})
            row = {"seconds": seconds, "samples_per_s": samples / seconds,
                   "mb_per_s": total_bytes / seconds / 1e6, "samples": counts,
                   "seconds_runs": [s for s, _ in measured],
                   "wrong": counts != [samples]}  # fmt: skip
            loaders.setdefault(loader.name, {})[mode] = row
    for loader in usable:
        if loader.baseline is None or loader.baseline not in loaders:
            continue
        for mode, row in loaders[loader.name].items():
            base = loaders[loader.baseline][mode]
            # fastio over the peer; no ratio where either delivered a wrong count.
            row["fastio_ratio"] = (None if row["wrong"] or base["wrong"]
                                   else row["seconds"] / base["seconds"])  # fmt: skip
    return {"loaders": loaders}


def _print(result: dict[str, Any], temporary: bool) -> None:
    from rich.table import Table

    data = result["dataset"]
    where = "a temporary folder" if temporary else data["folder"]
    table = Table(title=(
        f"demo: {data['samples']} samples of ~{data['sample_size'] / 1e3:g} KB in "
        f"{data['shards']} tar shards ({data['bytes'] / 1e6:,.0f} MB) in {where}; "
        f"DataLoader: {result['workers']} workers, batch {result['batch_size']}, default collate; "
        f"median of {result['runs']}"
    ))  # fmt: skip
    for column in ("loader", "cache", "samples/s", "MB/s", "fastio is"):
        table.add_column(column, justify="left" if column in ("loader", "cache") else "right")
    for name, modes in result["loaders"].items():
        for mode, row in modes.items():
            ratio = row.get("fastio_ratio")
            if row["wrong"]:
                shown = f"wrong: {row['samples']} samples"
            elif ratio is None:
                shown = ""
            else:
                shown = f"{ratio:.2f}x" + (" (slower)" if ratio < 1 else "")
            table.add_row(name, mode, f"{row['samples_per_s']:,.0f}", f"{row['mb_per_s']:,.0f}",
                          shown)  # fmt: skip
    console().print(table)
    console().print("cold: the files dropped from the page cache first (posix_fadvise); "
                    "warm: read once first. Ratio: fastio read the same way, over this "
                    "loader.")  # fmt: skip
    for name, reason in result["skipped"].items():
        console().print(f"{name}: not run ({reason})")
