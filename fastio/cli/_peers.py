"""The loaders ``fastio-bench compare`` measures: fastio's ways of reading a
dataset, and the peers installed here that read the same files.

Each loader reads one epoch of the dataset in stored order and touches every
sample (takes it; batches count their rows) and answers how many samples it
delivered; a count that differs from the dataset's marks the loader as wrong.
A peer runs only for the formats it reads and when its package is installed;
:func:`loaders` says why the others were left out.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastio.spec import DatasetSpec

# (urls of the shards, the dataset's spec, the run's options) -> samples delivered
Run = Callable[[list[str], "DatasetSpec", "LoaderOptions"], int]


@dataclass(frozen=True)
class LoaderOptions:
    format: str  # the dataset's (from its extension when not given)
    batch_size: int
    workers: int


@dataclass(frozen=True)
class Loader:
    name: str
    formats: tuple[str, ...]  # empty: every format
    modules: tuple[str, ...]  # what must be installed (pip names in the message)
    run: Run
    what: str  # for the table and --help

    def missing(self, format_name: str, options: LoaderOptions) -> str | None:
        """Why this loader cannot run here, or None."""
        if self.formats and format_name not in self.formats:
            return f"reads {', '.join(self.formats)}, not {format_name}"
        if "torch" in self.modules and options.workers == 0:
            return "--workers 0"
        absent = [m for m in self.modules if importlib.util.find_spec(m) is None]
        return f"{', '.join(absent)} not installed" if absent else None


def _dataset(spec: DatasetSpec) -> Any:
    from fastio.dataset._dataset import Dataset

    return Dataset.from_spec(spec)


def fastio_samples(urls: list[str], spec: DatasetSpec, options: LoaderOptions) -> int:
    with _dataset(spec) as dataset:
        return sum(1 for _ in dataset)


def fastio_batches(urls: list[str], spec: DatasetSpec, options: LoaderOptions) -> int:
    with _dataset(spec) as dataset:
        return sum(_rows(batch) for batch in dataset.batches(options.batch_size))


def fastio_loader(urls: list[str], spec: DatasetSpec, options: LoaderOptions) -> int:
    from torch.utils.data import DataLoader

    with _dataset(spec) as dataset:
        batches = DataLoader(dataset, batch_size=options.batch_size,
                             num_workers=options.workers, collate_fn=len)  # fmt: skip
        return sum(batches)


def webdataset_samples(urls: list[str], spec: DatasetSpec, options: LoaderOptions) -> int:
    import webdataset

    return sum(1 for _ in webdataset.WebDataset(urls, shardshuffle=False, empty_check=False))


def webdataset_loader(urls: list[str], spec: DatasetSpec, options: LoaderOptions) -> int:
    import webdataset
    from torch.utils.data import DataLoader

    # Its default worker splitter gives each worker its own shards.
    dataset = webdataset.WebDataset(urls, shardshuffle=False, empty_check=False)
    batches = DataLoader(dataset, batch_size=options.batch_size, num_workers=options.workers,
                         collate_fn=len)  # fmt: skip
    return sum(batches)


def tarfile_samples(urls: list[str], spec: DatasetSpec, options: LoaderOptions) -> int:
    """The standard library's tarfile: members grouped into samples by key, as
    webdataset groups them (the name up to the first dot of its last part)."""
    samples = 0
    for url in urls:
        with tarfile.open(url, "r|*") as archive:
            keys = []
            for member in archive:
                if not member.isfile():
                    continue
                file = archive.extractfile(member)
                if file is not None:
                    file.read()
                folder, _, name = member.name.rpartition("/")
                keys.append(f"{folder}/{name.partition('.')[0]}")
            samples += sum(1 for _ in itertools.groupby(keys))
    return samples


def tfrecord_samples(urls: list[str], spec: DatasetSpec, options: LoaderOptions) -> int:
    """The tfrecord package: parsed Examples (as fastio's ``example=True``) or raw records."""
    from tfrecord.reader import tfrecord_iterator, tfrecord_loader

    samples = 0
    for url in urls:
        records = (tfrecord_loader(url, None) if spec.format_options.example
                   else tfrecord_iterator(url))  # fmt: skip
        samples += sum(1 for _ in records)
    return samples


def pyarrow_batches(urls: list[str], spec: DatasetSpec, options: LoaderOptions) -> int:
    """pyarrow's own readers, a batch of ``batch_size`` rows at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = list(spec.format_options.columns) if spec.format_options.columns else None
    rows = 0
    for url in urls:
        if options.format == "parquet":
            file = pq.ParquetFile(url)
            rows += sum(b.num_rows for b in file.iter_batches(options.batch_size, columns=columns))
        else:
            with pa.memory_map(url) as source:
                if source.read(6) != b"ARROW1":  # an IPC stream (Hugging Face's .arrow files)
                    source.seek(0)
                    rows += sum(batch.num_rows for batch in pa.ipc.open_stream(source))
                    continue
                source.seek(0)
                reader = pa.ipc.open_file(source)
                rows += sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    return rows


def _rows(batch: Any) -> int:
    return len(batch) if hasattr(batch, "__len__") else int(batch.num_rows)


LOADERS = (
    Loader("fastio", (), (), fastio_samples, "fastio.Dataset, sample by sample"),
    Loader("fastio batches", (), (), fastio_batches, "fastio.Dataset.batches(--batch-size)"),
    Loader("fastio DataLoader", (), ("torch",), fastio_loader,
           "fastio.Dataset in a torch DataLoader with --workers workers"),
    Loader("webdataset", ("webdataset",), ("webdataset",), webdataset_samples,
           "webdataset.WebDataset"),
    Loader("webdataset DataLoader", ("webdataset",), ("webdataset", "torch"), webdataset_loader,
           "webdataset.WebDataset in a torch DataLoader with --workers workers"),
    Loader("tarfile", ("webdataset",), (), tarfile_samples, "a plain tarfile loop"),
    Loader("tfrecord", ("tfrecord",), ("tfrecord",), tfrecord_samples, "the tfrecord package"),
    Loader("pyarrow", ("parquet", "arrow"), ("pyarrow",), pyarrow_batches,
           "pyarrow's Parquet / IPC reader, in batches of --batch-size"),
)  # fmt: skip


def loaders(format_name: str, options: LoaderOptions) -> tuple[list[Loader], dict[str, str]]:
    """The loaders that can run on this format here, and why each other one cannot."""
    usable, skipped = [], {}
    for loader in LOADERS:
        reason = loader.missing(format_name, options)
        if reason is None:
            usable.append(loader)
        else:
            skipped[loader.name] = reason
    return usable, skipped


def files_bytes(urls: list[str]) -> int:
    return sum(os.path.getsize(url) for url in urls)
