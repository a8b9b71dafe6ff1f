"""Datasets end to end: fastio.Dataset vs WebDataset, MosaicML Streaming, tf.data and pyarrow.

    sudo python benchmarks/bench_datasets.py                 # ~4 GB + 1M samples, ~1 h
    sudo python benchmarks/bench_datasets.py --scale 0.1 --repeats 1 --plot datasets.png

Two datasets, written once with ``fastio-bench gen`` (reused from ``--data-dir``):

* large: ~4 GB of ~110 KB samples; small: 1M samples of 1 KB. Each as WebDataset
  tar, and the same samples as TFRecord (tf.train.Example), MDS (MosaicML
  Streaming's ``MDSWriter``), Parquet and Arrow IPC. fastio's per-shard index is
  built then too (like MDS's index, it is part of preparing a dataset).

Methods: fastio.Dataset per sample (default settings: ``direct="auto"``; cold
also forced ``direct=True`` and ``False``; warm, ``map_cached`` forced
either way, ``... map_cached=...``, beside the default's choice), ``.batches(1024)`` and
``.batches(256)``, and in a torch DataLoader (2 workers, samples and batches);
shuffled as training reads (``fastio shuffled``, ``fastio batches 256
shuffled``, the TFRecord copy's alike, and in a DataLoader; ``webdataset
shuffled``: shard order and a sample buffer as large as fastio's shuffle buffer);
webdataset.WebDataset, alone and in a DataLoader; streaming.StreamingDataset,
alone and in a DataLoader; fastio over the TFRecord copy (samples, batches)
beside the tfrecord package's reader and tf.data.TFRecordDataset (per record
and ``.batch(1024)``); fastio over the Parquet copy (``.batches(256)``,
samples) beside pyarrow ``ParquetFile.iter_batches(256)``; the same over the
Arrow IPC copy beside pyarrow's ``ipc.open_file`` reader (every record batch);
both pyarrow readers also with their batches cut to exactly 256 rows across
files, as fastio's are (``pyarrow 256``, ``pyarrow ipc 256``);
and the hardware:
fio reading the tar files sequentially (io_uring, 16 x 1 MiB; cold: O_DIRECT,
also from hugetlbfs buffers; warm: also psync), a plain Python read loop, and
(warm) each payload copied from the mapped files into fresh 256-sample
batch buffers (``memcpy batches 256``: what any loader that hands out
contiguous columns pays, where per-sample iteration can hand out views).
Every sample is touched (counted, payload length summed); a method that
delivers a wrong count or payload total is reported as failed.

Cold runs also time the second epoch of a process whose first epoch read
the files cold (``... epoch 2 after cold``: fastio's defaults, fastio with
``direct=True``, webdataset): whether the first left them in the page cache.

Every run is a fresh process (so libraries do not share threads, forks or
memory), timed inside from constructing the dataset to the last sample. Cold
runs drop the page cache first (root); warm runs read the files once, untimed,
first, and again in the run's process after its imports (a VM that pages out
what was left idle for seconds would otherwise have dropped part of them).
Methods run in a shuffled order in each of ``--repeats`` rounds; the tables
show medians, with the seconds from constructing the dataset to its first
sample (or batch), and the targets as ratios. MB/s is the bytes of the files
each method reads (its own copy) per second. Results go to
benchmarks/results/ as JSON.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _imports import FASTIO_IMPORTS, collect_imports
from bench_read import drop_caches, hugetlbfs, run_python
from bench_tables_cpu import rebatched

from fastio.cli._gen import DatasetPlan, write_dataset

RESULTS = Path(__file__).parent / "results"
BATCH = 1024
LOADER_BATCH = 256
WORKERS = 2
FIO_DEPTH, FIO_BLOCK = 16, 1 << 20


@dataclass(frozen=True)
class Case:
    name: str
    sample_size: int
    samples: int
    shards: int


def cases(scale: float) -> list[Case]:
    return [
        Case("large", 110_000, max(64, round(4e9 / 110_000 * scale)), 64),
        Case("small", 1_000, max(64, round(1_000_000 * scale)), 64),
    ]


# ---- data ----------------------------------------------------------------------------


def prepare(case: Case, data_dir: Path, seed: int, needed: set[str]) -> dict[str, Any]:
    """The copies of the case's samples that ``needed`` names (a copy missing
    from an earlier run's folder is added to it); reused when the manifest
    matches. MDS needs the ``streaming`` package: a run of other methods
    does not."""
    folder = data_dir / f"{case.name}-{case.samples}x{case.sample_size}"
    manifest_path = folder / "manifest.json"
    wanted = asdict(case) | {"seed": seed}
    manifest: dict[str, Any] = {"case": wanted, "payload_bytes": None, "copies": {}}
    if manifest_path.exists():
        saved = json.loads(manifest_path.read_text())
        if saved["case"] == wanted:
            manifest = saved
    if manifest["copies"] == {}:
        shutil.rmtree(folder, ignore_errors=True)
    copies = manifest["copies"]
    formats = ("webdataset", "tfrecord", "parquet", "arrow")
    for format in sorted(formats, key=lambda name: name not in needed):
        if format in copies or (format not in needed and manifest["payload_bytes"] is not None):
            continue  # (one copy is written anyway: the payload total checks every method)
        copies[format], manifest["payload_bytes"] = write_copy(folder, case, format, seed)
        if format in ("webdataset", "tfrecord"):
            check_index(copies[format]["url"], format, case.samples)
    if "mds" in needed and "mds" not in copies:
        copies["mds"] = write_mds(folder / "mds", case, seed)
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return manifest


def check_index(url: str, format: str, samples: int) -> None:
    """Build fastio's index of a copy (part of preparing it, like MDS's)."""
    import fastio

    with fastio.Dataset(url, format=format, shuffle=False) as ds:
        ds.index()
        if len(ds) != samples:  # building the index found the wrong count
            raise RuntimeError(f"fastio indexed {len(ds)} {format} samples, not {samples}")


def write_copy(folder: Path, case: Case, format: str, seed: int) -> tuple[dict[str, Any], int]:
    """The case's samples as ``format`` (row groups, record batches of BATCH
    rows); the copy's manifest entry and the payload bytes."""
    started = time.perf_counter()
    result = write_dataset(
        folder / format, format, case.samples, case.sample_size, case.shards, seed,
        row_group_size=BATCH,
    )  # fmt: skip
    print(
        f"{case.name}: wrote {format} {result.bytes / 1e9:.2f} GB in "
        f"{time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    copy = {"paths": list(result.paths), "url": result.url, "bytes": result.bytes}
    return copy, result.payload_bytes


def import_streaming() -> types.ModuleType:
    """``streaming`` imports torchvision for its vision datasets, and PyPI's
    torchvision wheel is built against CUDA torch; with CPU torch, stand-ins for
    the two names it imports let the rest load (we use no vision class)."""
    try:
        import torchvision  # noqa: F401
    except Exception:
        import torch
        import transformers  # noqa: F401 - first, so it sees torchvision as absent

        for name in (
            "torchvision",
            "torchvision.datasets",
            "torchvision.transforms",
            "torchvision.transforms.functional",
        ):
            sys.modules[name] = types.ModuleType(name)
        sys.modules["torchvision.datasets"].VisionDataset = torch.utils.data.Dataset
        sys.modules["torchvision.transforms.functional"].to_tensor = lambda x: x
    import streaming

    return streaming


def write_mds(folder: Path, case: Case, seed: int) -> dict[str, Any]:
    streaming = import_streaming()
    started = time.perf_counter()
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    plan = DatasetPlan(case.samples, case.sample_size, case.shards, seed)
    columns = {"key": "str", "label": "int", "data": "bytes"}
    with streaming.MDSWriter(out=str(partial), columns=columns, compression=None) as writer:
        for shard in range(case.shards):
            for block in plan.blocks(shard, 4096):
                for key, label, data in zip(block.keys, block.labels, block.payloads, strict=True):
                    writer.write({"key": key, "label": label, "data": bytes(data)})
    partial.rename(folder)
    paths = sorted(str(p) for p in folder.iterdir())
    total = sum(os.path.getsize(p) for p in paths)
    print(
        f"{case.name}: wrote mds {total / 1e9:.2f} GB in {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    return {"paths": paths, "url": str(folder), "bytes": total}


# ---- methods (each runs in a child process; returns samples and payload bytes) ----

FIRST_SAMPLE: list[float] = []  # the clock when a method saw its first sample


def first_sample() -> None:
    """Called by each method at every sample or batch; notes the first."""
    if not FIRST_SAMPLE:
        FIRST_SAMPLE.append(time.perf_counter())


# The payload's name in each copy, and how fastio gives it: a sample's value
# (tf.train.Example features come as lists of values) and a batch's column.
PAYLOAD = {"webdataset": "bin", "tfrecord": "data", "parquet": "data", "arrow": "data"}


def fastio_dataset(copies: dict[str, Any], copy: str = "webdataset", **knobs: Any) -> Any:
    import fastio

    return fastio.Dataset(copies[copy]["url"], format=copy, **{"shuffle": False, **knobs})


def _payload_length(value: Any) -> int:
    return len(value[0]) if isinstance(value, list) else len(value)


def count_samples(samples: Iterable[Any], name: str = "bin") -> tuple[int, int | None]:
    """Every sample touched (its payload's length), the first one clocked."""
    count = payload = 0
    for sample in samples:
        first_sample()
        count += 1
        payload += _payload_length(sample[name])
    return count, payload


def count_loader(dataset: Any, name: str = "bin") -> tuple[int, int | None]:
    """Every batch of ``dataset`` through a DataLoader with ``WORKERS`` workers
    touched, the first one clocked."""
    from torch.utils.data import DataLoader

    count = payload = 0
    for batch in DataLoader(dataset, batch_size=LOADER_BATCH, num_workers=WORKERS):
        first_sample()
        count += len(batch[name])
        payload += sum(len(b) for b in batch[name])
    return count, payload


def fastio_samples(
    copies: dict[str, Any], copy: str = "webdataset", **knobs: Any
) -> tuple[int, int | None]:
    with fastio_dataset(copies, copy, **knobs) as ds:
        return count_samples(ds, PAYLOAD[copy])


def _column_bytes(batch: Any, name: str) -> int:
    import pyarrow.compute as pc

    column = batch.column(name)
    if hasattr(column, "flatten") and str(column.type).startswith("list"):
        column = column.flatten()  # a tf.train.Example feature: a list per record
    return int(pc.sum(pc.binary_length(column)).as_py() or 0)


def fastio_batches(
    copies: dict[str, Any], copy: str = "webdataset", batch: int = BATCH, **knobs: Any
) -> tuple[int, int | None]:
    samples = payload = 0
    name = PAYLOAD[copy]
    with fastio_dataset(copies, copy, **knobs) as ds:
        for columns in ds.batches(batch):
            first_sample()
            samples += columns.num_rows
            payload += _column_bytes(columns, name)
    return samples, payload


def fastio_loader(copies: dict[str, Any], **knobs: Any) -> tuple[int, int | None]:
    return count_loader(fastio_dataset(copies, **knobs))


def fastio_batches_second_epoch(
    copies: dict[str, Any], batch: int = BATCH, copy: str = "webdataset", **knobs: Any
) -> tuple[int, int | None, float]:
    """A steady-state epoch: the process's first epoch (untimed) faults in the
    reader's buffers and the column buffer pool, as a training job's first
    epoch does once; the second is timed."""
    name = PAYLOAD[copy]
    with fastio_dataset(copies, copy, **knobs) as ds:
        for _ in ds.batches(batch):
            pass
        samples = payload = 0
        started = time.perf_counter()
        for columns in ds.batches(batch):
            samples += columns.num_rows
            payload += _column_bytes(columns, name)
        return samples, payload, time.perf_counter() - started


def fastio_samples_second_epoch(copies: dict[str, Any], copy: str = "webdataset", **knobs: Any
                                ) -> tuple[int, int | None, float]:  # fmt: skip
    """Per sample, the second epoch of one process (see fastio_batches_second_epoch)."""
    name = PAYLOAD[copy]
    with fastio_dataset(copies, copy, **knobs) as ds:
        for _ in ds:
            pass
        samples = payload = 0
        started = time.perf_counter()
        for sample in ds:
            samples += 1
            payload += _payload_length(sample[name])
        return samples, payload, time.perf_counter() - started


def _second_epoch(loader: Any) -> tuple[int, int | None, float]:
    """The second epoch of a DataLoader with persistent workers, timed: the
    workers (and their readers, heaps and hand-off rings) are those of the
    first, as in a training job's later epochs."""
    for _ in loader:
        pass
    samples = payload = 0
    started = time.perf_counter()
    for batch in loader:
        samples += len(batch["bin"])
        payload += sum(len(b) for b in batch["bin"])
    return samples, payload, time.perf_counter() - started


def fastio_loader_second_epoch(copies: dict[str, Any]) -> tuple[int, int | None, float]:
    from torch.utils.data import DataLoader

    return _second_epoch(DataLoader(fastio_dataset(copies), batch_size=LOADER_BATCH,
                                    num_workers=WORKERS, persistent_workers=True))  # fmt: skip


def webdataset_loader_second_epoch(copies: dict[str, Any]) -> tuple[int, int | None, float]:
    import webdataset
    from torch.utils.data import DataLoader

    ds = webdataset.WebDataset(copies["webdataset"]["url"], shardshuffle=False)
    return _second_epoch(DataLoader(ds, batch_size=LOADER_BATCH, num_workers=WORKERS,
                                    persistent_workers=True))  # fmt: skip


def fastio_batches_loader(
    copies: dict[str, Any], rows: int = BATCH, **knobs: Any
) -> tuple[int, int | None]:
    import pyarrow.compute as pc
    from torch.utils.data import DataLoader

    samples = payload = 0
    ds = fastio_dataset(copies, **knobs)
    for batch in DataLoader(ds.batches(rows), batch_size=None, num_workers=WORKERS):
        first_sample()
        samples += batch.num_rows
        payload += pc.sum(pc.binary_length(batch.column("bin"))).as_py()
    return samples, payload


def webdataset_samples(copies: dict[str, Any]) -> tuple[int, int | None]:
    import webdataset

    return count_samples(webdataset.WebDataset(copies["webdataset"]["url"], shardshuffle=False))


def memcpy_batches(copies: dict[str, Any], batch: int = LOADER_BATCH) -> tuple[int, int, float]:
    """The copy any batch of these samples costs, at this machine's memory
    bandwidth: each sample's payload copied from the mapped tar files (the
    page cache) into a fresh buffer of its batch, ``batch`` samples a buffer,
    as a loader that hands out contiguous columns must. Where the members lie
    is found first, untimed; the copies alone are timed."""
    import mmap
    import tarfile

    import numpy as np

    spans: list[tuple[int, int, int]] = []
    maps: list[Any] = []
    for shard, path in enumerate(copies["webdataset"]["paths"]):
        with tarfile.open(path) as tar:
            spans.extend((shard, member.offset_data, member.size)
                         for member in tar if member.name.endswith(".bin"))  # fmt: skip
        with open(path, "rb") as handle:
            maps.append(np.frombuffer(mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ),
                                      np.uint8))  # fmt: skip
    payload = 0
    started = time.perf_counter()
    for first in range(0, len(spans), batch):
        group = spans[first : first + batch]
        column = np.empty(sum(size for _, _, size in group), np.uint8)
        at = 0
        for shard, offset, size in group:
            column[at : at + size] = maps[shard][offset : offset + size]
            at += size
        payload += at
    return len(spans), payload, time.perf_counter() - started


def webdataset_second_epoch(copies: dict[str, Any]) -> tuple[int, int | None, float]:
    """webdataset's second pass over the shards in one process, timed alone."""
    import webdataset

    dataset = webdataset.WebDataset(copies["webdataset"]["url"], shardshuffle=False)
    count_samples(dataset)
    started = time.perf_counter()
    samples, payload = count_samples(dataset)
    return samples, payload, time.perf_counter() - started


def _webdataset_shuffled(copies: dict[str, Any]) -> Any:
    """webdataset shuffling as fastio does by default: shard order, and a
    buffer of as many samples as fastio's shuffle buffer holds bytes of."""
    import webdataset

    from fastio.spec._dataset import ShuffleSettings

    url = copies["webdataset"]["url"]
    case = json.loads((Path(url).parent.parent / "manifest.json").read_text())["case"]
    buffer = max(1, ShuffleSettings().buffer // case["sample_size"])
    return webdataset.WebDataset(url, shardshuffle=True, seed=0).shuffle(buffer)


def webdataset_shuffled(copies: dict[str, Any]) -> tuple[int, int | None]:
    return count_samples(_webdataset_shuffled(copies))


def webdataset_loader_shuffled(copies: dict[str, Any]) -> tuple[int, int | None]:
    return count_loader(_webdataset_shuffled(copies))


def webdataset_loader(copies: dict[str, Any]) -> tuple[int, int | None]:
    import webdataset

    return count_loader(webdataset.WebDataset(copies["webdataset"]["url"], shardshuffle=False))


def streaming_dataset(copies: dict[str, Any]) -> Any:
    streaming = import_streaming()
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    return streaming.StreamingDataset(
        local=copies["mds"]["url"], shuffle=False, batch_size=LOADER_BATCH
    )


def streaming_samples(copies: dict[str, Any]) -> tuple[int, int | None]:
    return count_samples(streaming_dataset(copies), "data")


def streaming_loader(copies: dict[str, Any]) -> tuple[int, int | None]:
    return count_loader(streaming_dataset(copies), "data")


def tfdata(copies: dict[str, Any], batch: int | None) -> tuple[int, int | None]:
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(copies["tfrecord"]["paths"], num_parallel_reads=tf.data.AUTOTUNE)
    samples = 0
    if batch is None:
        for _ in ds:  # serialized Examples (the payload is not parsed out)
            samples += 1
    else:
        for records in ds.batch(batch).prefetch(tf.data.AUTOTUNE):
            samples += int(records.shape[0])
    return samples, None


def tfrecord_package(copies: dict[str, Any]) -> tuple[int, int | None]:
    """The tfrecord package's reader (parses tf.train.Example, as fastio does)."""
    from tfrecord.reader import tfrecord_loader

    samples = payload = 0
    for path in copies["tfrecord"]["paths"]:
        for record in tfrecord_loader(path, None):
            first_sample()
            samples += 1
            payload += len(record["data"])
    return samples, payload


def _pyarrow_rows(batches: Iterator[Any], exact: int | None) -> tuple[int, int | None]:
    """Touch every batch; with ``exact``, cut into batches of that many rows
    across files first, as fastio's ``.batches(n)`` are."""
    import pyarrow.compute as pc

    samples = payload = 0
    for batch in rebatched(batches, exact) if exact else batches:
        first_sample()
        samples += batch.num_rows
        payload += pc.sum(pc.binary_length(batch.column("data"))).as_py()
    return samples, payload


def pyarrow_batches(
    copies: dict[str, Any], batch_size: int = BATCH, exact: bool = False
) -> tuple[int, int | None]:
    import pyarrow.parquet as pq

    batches = (batch for path in copies["parquet"]["paths"]
               for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size))  # fmt: skip
    return _pyarrow_rows(batches, batch_size if exact else None)


def pyarrow_ipc_batches(copies: dict[str, Any], exact: int | None = None) -> tuple[int, int | None]:
    """pyarrow's own Arrow IPC file reader, every record batch (read from the
    file, not memory-mapped: fastio reads the bytes too)."""
    import pyarrow.ipc

    def batches() -> Iterator[Any]:
        for path in copies["arrow"]["paths"]:
            with pyarrow.ipc.open_file(path) as reader:
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)

    return _pyarrow_rows(batches(), exact)


@dataclass(frozen=True)
class Method:
    name: str
    copy: str  # which copy it reads
    # None: in the parent. A third value returned is the seconds it timed itself.
    run: Callable[[dict[str, Any]], tuple[Any, ...]] | None
    modes: tuple[str, ...] = ("cold", "warm")
    imports: str | None = None  # the IMPORTS entry (default: the copy's)


# Imported before the clock starts: a once-per-process cost (tensorflow's is seconds).
IMPORTS = {
    "webdataset": (*FASTIO_IMPORTS, "webdataset"),
    # fastio over Parquet and Arrow IPC: the modules pyarrow's own readers
    # import before their clock too (pyarrow.parquet takes 14 ms).
    "fastio columns": (*FASTIO_IMPORTS, "pyarrow.ipc", "pyarrow.parquet"),
    "mds": ("torch", "torch.utils.data"),
    "tensorflow": ("tensorflow",),
    "tfrecord": ("numpy", "tfrecord.reader"),
    "parquet": ("pyarrow", "pyarrow.compute", "pyarrow.parquet"),
    "arrow": ("pyarrow", "pyarrow.compute", "pyarrow.ipc"),
}


METHODS = [
    Method("fastio", "webdataset", fastio_samples),
    # The defaults choose O_DIRECT for cold files (direct="auto"); forced either way:
    Method("fastio direct", "webdataset", lambda c: fastio_samples(c, direct=True), ("cold",)),
    Method("fastio buffered", "webdataset", lambda c: fastio_samples(c, direct=False), ("cold",)),
    # The same with 4 MiB reads: fewer requests for the reader's loop thread to
    # issue while the consumer thread holds the GIL decoding (see README).
    Method(
        "fastio direct 4MiB",
        "webdataset",
        lambda c: fastio_samples(c, direct=True, read_size=4 << 20),
        ("cold",),
    ),
    # Shuffled, as training reads (fastio's default: windows of 32 MiB of samples).
    Method("fastio shuffled", "webdataset", lambda c: fastio_samples(c, shuffle=True)),
    Method(
        "fastio batches 256 shuffled",
        "webdataset",
        lambda c: fastio_batches(c, batch=LOADER_BATCH, shuffle=True),
    ),
    Method("webdataset shuffled", "webdataset", webdataset_shuffled),
    Method("fastio loader shuffled", "webdataset", lambda c: fastio_loader(c, shuffle=True)),
    Method(
        "fastio batches loader 256 shuffled",
        "webdataset",
        lambda c: fastio_batches_loader(c, LOADER_BATCH, shuffle=True),
    ),
    Method("webdataset loader shuffled", "webdataset", webdataset_loader_shuffled),
    # Later epochs of one process, shuffled: what a training job's steady state reads.
    Method(
        "fastio shuffled epoch 2",
        "webdataset",
        lambda c: fastio_samples_second_epoch(c, shuffle=True),
        ("warm",),
    ),
    Method(
        "fastio batches 256 shuffled epoch 2",
        "webdataset",
        lambda c: fastio_batches_second_epoch(c, LOADER_BATCH, shuffle=True),
        ("warm",),
    ),
    Method("fastio batches", "webdataset", fastio_batches),
    Method("fastio batches 256", "webdataset", lambda c: fastio_batches(c, batch=LOADER_BATCH)),
    Method("fastio batches epoch 2", "webdataset", fastio_batches_second_epoch, ("warm",)),
    # Stored order, later epochs of one process: the first epoch of a process
    # also faults in what its batches are built in (two 28 MB columns of 256
    # samples of 110 KB, about 10 ms each here), once.
    Method("fastio epoch 2", "webdataset", fastio_samples_second_epoch, ("warm",)),
    Method(
        "fastio batches 256 epoch 2",
        "webdataset",
        lambda c: fastio_batches_second_epoch(c, LOADER_BATCH),
        ("warm",),
    ),
    # Cold runs: the second epoch of a process whose first read the files
    # cold. A dataset that fits in memory is left in the page cache by the
    # first (direct="auto"); with O_DIRECT throughout it is read cold again.
    Method(
        "fastio batches 256 epoch 2 after cold",
        "webdataset",
        lambda c: fastio_batches_second_epoch(c, LOADER_BATCH),
        ("cold",),
    ),
    Method(
        "fastio batches 256 epoch 2 after cold direct=True",
        "webdataset",
        lambda c: fastio_batches_second_epoch(c, LOADER_BATCH, direct=True),
        ("cold",),
    ),
    Method("webdataset epoch 2 after cold", "webdataset", webdataset_second_epoch, ("cold",)),
    Method(
        "fastio batches 8MiB",
        "webdataset",
        lambda c: fastio_batches(c, read_size=8 << 20, memory_budget=128 << 20),
    ),
    Method("fastio loader", "webdataset", fastio_loader),
    Method("fastio batches loader", "webdataset", fastio_batches_loader),
    # The batch the sample loaders collate (LOADER_BATCH): the same step size.
    Method(
        "fastio batches loader 256", "webdataset", lambda c: fastio_batches_loader(c, LOADER_BATCH)
    ),
    Method("webdataset", "webdataset", webdataset_samples),
    Method("webdataset loader", "webdataset", webdataset_loader),
    Method("fastio loader epoch 2", "webdataset", fastio_loader_second_epoch, ("warm",)),
    Method("webdataset loader epoch 2", "webdataset", webdataset_loader_second_epoch, ("warm",)),
    Method("streaming", "mds", streaming_samples),
    Method("streaming loader", "mds", streaming_loader),
    Method(
        "fastio tfrecord", "tfrecord", lambda c: fastio_samples(c, "tfrecord"), imports="webdataset"
    ),
    Method(
        "fastio tfrecord batches",
        "tfrecord",
        lambda c: fastio_batches(c, "tfrecord", LOADER_BATCH),
        imports="webdataset",
    ),
    Method(
        "fastio tfrecord shuffled",
        "tfrecord",
        lambda c: fastio_samples(c, "tfrecord", shuffle=True),
        imports="webdataset",
    ),
    Method(
        "fastio tfrecord batches shuffled",
        "tfrecord",
        lambda c: fastio_batches(c, "tfrecord", LOADER_BATCH, shuffle=True),
        imports="webdataset",
    ),
    Method(
        "fastio tfrecord epoch 2",
        "tfrecord",
        lambda c: fastio_samples_second_epoch(c, "tfrecord"),
        ("warm",),
        imports="webdataset",
    ),
    Method(
        "fastio tfrecord batches epoch 2",
        "tfrecord",
        lambda c: fastio_batches_second_epoch(c, LOADER_BATCH, "tfrecord"),
        ("warm",),
        imports="webdataset",
    ),
    Method("tfrecord", "tfrecord", tfrecord_package),
    Method("tf.data", "tfrecord", lambda c: tfdata(c, None), imports="tensorflow"),
    Method("tf.data batch", "tfrecord", lambda c: tfdata(c, BATCH), imports="tensorflow"),
    # Parquet at the batch size, fastio and pyarrow alike.
    Method(
        "fastio parquet",
        "parquet",
        lambda c: fastio_batches(c, "parquet", LOADER_BATCH),
        imports="fastio columns",
    ),
    Method(
        "fastio parquet samples",
        "parquet",
        lambda c: fastio_samples(c, "parquet"),
        imports="fastio columns",
    ),
    Method("pyarrow", "parquet", lambda c: pyarrow_batches(c, LOADER_BATCH)),
    # pyarrow's batches cut to exactly 256 rows across files, as fastio's are.
    Method("pyarrow 256", "parquet", lambda c: pyarrow_batches(c, LOADER_BATCH, exact=True)),
    # Arrow IPC: fastio's .batches(256) and samples beside pyarrow's file reader.
    Method(
        "fastio arrow",
        "arrow",
        lambda c: fastio_batches(c, "arrow", LOADER_BATCH),
        imports="fastio columns",
    ),
    # As many rows a batch as each of the files' record batches holds (1,024):
    # the same batches pyarrow's reader gives whole, where fastio's cross files.
    Method(
        "fastio arrow 1024",
        "arrow",
        lambda c: fastio_batches(c, "arrow", BATCH),
        imports="fastio columns",
    ),
    Method(
        "fastio arrow samples",
        "arrow",
        lambda c: fastio_samples(c, "arrow"),
        imports="fastio columns",
    ),
    Method("pyarrow ipc", "arrow", pyarrow_ipc_batches),
    Method("pyarrow ipc 256", "arrow", lambda c: pyarrow_ipc_batches(c, LOADER_BATCH)),
    Method("pyarrow ipc 1024", "arrow", lambda c: pyarrow_ipc_batches(c, BATCH)),
    # map_cached forced either way, beside the default's choice ("auto").
    Method("fastio map_cached=False", "webdataset", lambda c: fastio_samples(c, map_cached=False)),
    Method("fastio map_cached=True", "webdataset", lambda c: fastio_samples(c, map_cached=True)),
    Method(
        "fastio batches 256 map_cached=False",
        "webdataset",
        lambda c: fastio_batches(c, batch=LOADER_BATCH, map_cached=False),
    ),
    Method(
        "fastio batches 256 map_cached=True",
        "webdataset",
        lambda c: fastio_batches(c, batch=LOADER_BATCH, map_cached=True),
    ),
    Method(
        "fastio tfrecord map_cached=True",
        "tfrecord",
        lambda c: fastio_samples(c, "tfrecord", map_cached=True),
        imports="webdataset",
    ),
    Method(
        "fastio arrow map_cached=False",
        "arrow",
        lambda c: fastio_batches(c, "arrow", LOADER_BATCH, map_cached=False),
        imports="fastio columns",
    ),
    Method(
        "fastio arrow 1024 map_cached=False",
        "arrow",
        lambda c: fastio_batches(c, "arrow", BATCH, map_cached=False),
        imports="fastio columns",
    ),
    Method("fio", "webdataset", None),
    # What copying every payload into 256-sample batches costs here (warm).
    Method("memcpy batches 256", "webdataset", memcpy_batches, ("warm",), imports="parquet"),
    # fio's default (malloc) buffers read the page cache at ~2.6 GB/s here, its
    # hugetlbfs ones at ~14 GB/s: the best of its variants is the reference.
    Method("fio hugetlb", "webdataset", None),
    Method("fio psync", "webdataset", None, ("warm",)),
    Method("python read", "webdataset", None),
]
BY_NAME = {method.name: method for method in METHODS}


def child(method_name: str, manifest_path: str, mode: str) -> None:
    """Run one method in this (fresh) process and print its measurement."""
    manifest = json.loads(Path(manifest_path).read_text())
    method = BY_NAME[method_name]
    assert method.run is not None
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for module in IMPORTS[method.imports or method.copy]:
        importlib.import_module(module)
    if method.copy == "mds":
        import_streaming()
    collect_imports()
    if mode == "warm":
        # Once more after the imports (seconds of them): a machine that pages
        # out what was not touched for a few seconds (DAMON reclaim in some
        # VMs) would otherwise have dropped part of what the parent warmed.
        warm_up(manifest["copies"][method.copy]["paths"])
    started = time.perf_counter()
    result = method.run(manifest["copies"])
    seconds = time.perf_counter() - started
    samples, payload = result[0], result[1]
    first = FIRST_SAMPLE[0] - started if FIRST_SAMPLE else None
    if len(result) == 3:  # the method timed itself (a steady-state epoch)
        seconds, first = result[2], None
    print(json.dumps({"samples": samples, "payload": payload, "seconds": seconds,
                      "first": first}))  # fmt: skip


# ---- measuring -----------------------------------------------------------------------


@dataclass
class Cell:
    case: str
    mode: str
    method: str
    bytes: int  # of the copy it reads
    samples: int | None = None  # per run; None for the raw readers
    seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)  # seconds to the first sample

    @property
    def first(self) -> float | None:
        return statistics.median(self.firsts) if self.firsts else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    def mb_per_s(self) -> float | None:
        return None if self.median is None else self.bytes / self.median / 1e6

    def samples_per_s(self) -> float | None:
        if self.median is None or self.samples is None:
            return None
        return self.samples / self.median


def run_fio(paths: list[str], engine: str, direct: bool, huge_mount: str | None) -> float:
    """MB/s of fio reading the files one after another. fio reads the same
    whole number of blocks from each file (an uneven size would make it extend
    the smaller files, and it skips a last partial block), so it reads all but
    the last < 1 MiB of the largest files: a rate, not a full pass."""
    block_bytes = min(os.path.getsize(p) for p in paths) // FIO_BLOCK * FIO_BLOCK
    total = block_bytes * len(paths)
    command = [
        "fio", "--name=read", "--rw=read", f"--bs={FIO_BLOCK}", f"--iodepth={FIO_DEPTH}",
        f"--ioengine={engine}", f"--direct={int(direct)}", "--readonly", "--invalidate=0",
        # Names relative to their folder: fio takes at most 4096 characters of them.
        f"--directory={Path(paths[0]).parent}",
        "--filename=" + ":".join(Path(p).name for p in paths),
        "--file_service_type=sequential", f"--size={total}", "--output-format=json",
    ]  # fmt: skip
    if huge_mount is not None:
        command.append(f"--iomem=mmaphuge:{huge_mount}/fio-buffers")
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    job = json.loads(output[output.index("{") :])["jobs"][0]["read"]
    if job["io_bytes"] != total:
        raise RuntimeError(f"fio read {job['io_bytes']} of {total} bytes")
    if job["runtime"] == 0:
        raise RuntimeError("too little data for fio's millisecond clock")
    return float(job["io_bytes"] / (job["runtime"] / 1000) / 1e6)


def warm_up(paths: list[str]) -> None:
    buffer = bytearray(1 << 20)
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass


def measure_once(
    method: Method, manifest: dict[str, Any], manifest_path: Path, mode: str, huge_mount: str | None
) -> tuple[float | None, float | None, str | None]:
    """(seconds, seconds to the first sample, failure) of one run."""
    copy = manifest["copies"][method.copy]
    if method.run is None:
        paths = copy["paths"]
        cold = mode == "cold"
        if method.name == "python read":
            return copy["bytes"] / (run_python(paths, FIO_BLOCK, cold) * 1e6), None, None
        engine = "psync" if method.name == "fio psync" else "io_uring"
        huge = huge_mount if method.name == "fio hugetlb" else None
        try:
            mb_per_s = run_fio(paths, engine, cold, huge)
        except (RuntimeError, subprocess.CalledProcessError) as error:
            return None, None, str(error)
        return copy["bytes"] / (mb_per_s * 1e6), None, None
    command = [sys.executable, __file__, "--child", method.name, str(manifest_path), mode]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None, None, f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    expected = manifest["case"]["samples"]
    if report["samples"] != expected:
        return None, None, f"delivered {report['samples']} samples, not {expected}"
    if report["payload"] is not None and report["payload"] != manifest["payload_bytes"]:
        return (
            None,
            None,
            f"delivered {report['payload']} payload bytes, not {manifest['payload_bytes']}",
        )
    return report["seconds"], report.get("first"), None


def measure(
    args: argparse.Namespace, case: Case, manifest: dict[str, Any], huge_mount: str | None
) -> list[Cell]:
    manifest_path = args.data_dir / f"{case.name}-{case.samples}x{case.sample_size}"
    manifest_path = manifest_path / "manifest.json"
    order = random.Random(args.seed)
    cells: dict[tuple[str, str], Cell] = {}
    chosen = [m for m in METHODS if not args.methods or m.name in args.methods]
    for mode in args.modes:
        for round_ in range(args.repeats):
            plan = [m for m in chosen if mode in m.modes]
            if huge_mount is None:
                plan = [m for m in plan if m.name != "fio hugetlb"]
            order.shuffle(plan)
            for method in plan:
                copy = manifest["copies"][method.copy]
                cell = cells.setdefault(
                    (mode, method.name),
                    Cell(
                        case.name,
                        mode,
                        method.name,
                        copy["bytes"],
                        None if method.run is None else case.samples,
                    ),
                )
                if mode == "cold":
                    drop_caches()
                else:
                    warm_up(copy["paths"])
                seconds, first, failure = measure_once(
                    method, manifest, manifest_path, mode, huge_mount
                )
                if failure is None and seconds is not None:
                    cell.seconds.append(seconds)
                    if first is not None:
                        cell.firsts.append(first)
                    line = f"{cell.bytes / seconds / 1e6:9,.0f} MB/s"
                    if cell.samples is not None:
                        line += f" {cell.samples / seconds:12,.0f} samples/s"
                else:
                    cell.failures.append(failure or "no result")
                    line = f"FAILED: {failure}"
                print(
                    f"{case.name} {mode} round {round_ + 1}: {method.name:22} {line}",
                    file=sys.stderr,
                )
    return list(cells.values())


# ---- reporting -----------------------------------------------------------------------


def reference(cells: list[Cell], case: str, mode: str, names: tuple[str, ...]) -> Cell | None:
    found = [c for c in cells if (c.case, c.mode) == (case, mode) and c.method in names]
    found = [c for c in found if c.median is not None]
    return max(found, key=lambda c: c.mb_per_s() or 0.0) if found else None


def print_tables(cells: list[Cell]) -> None:
    for case, mode in sorted({(c.case, c.mode) for c in cells}):
        rows = [c for c in cells if (c.case, c.mode) == (case, mode)]
        wds = reference(cells, case, mode, ("webdataset",))
        fio = reference(cells, case, mode, ("fio", "fio hugetlb", "fio psync"))
        print(f"\n{case}, {mode} (median of runs; MB/s of the files each method reads)")
        print(
            "| method | samples/s | MB/s | vs webdataset (samples/s) | vs fio (MB/s) "
            "| first sample (s) | runs |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for cell in sorted(rows, key=lambda c: -(c.mb_per_s() or 0.0)):
            if cell.median is None:
                print(f"| {cell.method} | failed: {cell.failures[0]} | | | | | 0 |")
                continue
            rate = cell.samples_per_s()
            vs_wds = f"{rate / wds.samples_per_s():.2f}x" if rate and wds else ""
            vs_fio = f"{cell.mb_per_s() / fio.mb_per_s():.2f}" if fio else ""
            samples = f"{rate:,.0f}" if rate else ""
            first = "" if cell.first is None else f"{cell.first:.3f}"
            print(
                f"| {cell.method} | {samples} | {cell.mb_per_s():,.0f} | {vs_wds} | {vs_fio} "
                f"| {first} | {len(cell.seconds)} |"
            )


def targets(cells: list[Cell]) -> list[dict[str, Any]]:
    """The issue's targets, each with the numbers behind it."""

    def rate(case: str, mode: str, method: str, what: str) -> float | None:
        cell = reference(cells, case, mode, (method,))
        if cell is None:
            return None
        return cell.samples_per_s() if what == "samples" else cell.mb_per_s()

    def fio(case: str, mode: str) -> float | None:
        cell = reference(cells, case, mode, ("fio", "fio hugetlb", "fio psync"))
        return None if cell is None else cell.mb_per_s()

    def best_fastio_mb(case: str, mode: str) -> float | None:
        # fastio's best configuration, as fio's figure is its best.
        methods = ("fastio", "fastio direct", "fastio direct 4MiB", "fastio batches")
        found = [rate(case, mode, m, "mb") for m in methods]
        return max((v for v in found if v is not None), default=None)

    def first(case: str, mode: str, method: str) -> float | None:
        cell = reference(cells, case, mode, (method,))
        return None if cell is None else cell.first

    def quicker(case: str, mode: str) -> float | None:
        # A rate of first samples: the ratio is webdataset's wait over fastio's.
        ours = first(case, mode, "fastio")
        return None if not ours else 1.0 / ours

    def warm_rates(claim: str, ratio: float, pairs: list[tuple[str, str, str]]
                   ) -> list[tuple[str, float, float | None, float | None]]:  # fmt: skip
        """A check per case and (name, ours, peer) in ``pairs``: warm samples/s
        of ``ours`` against ``peer``, ``claim`` naming it with {case} and {name}."""
        return [(claim.format(case=case, name=name), ratio, rate(case, "warm", ours, "samples"),
                 rate(case, "warm", peer, "samples"))
                for case in ("large", "small") for name, ours, peer in pairs]  # fmt: skip

    large_wds = rate("large", "warm", "webdataset", "samples")
    small_wds = rate("small", "warm", "webdataset", "samples")
    wds_first = first("large", "warm", "webdataset")
    checks = [
        (
            "large, cold: fastio (default settings) MB/s >= 0.85x fio",
            0.85,
            rate("large", "cold", "fastio", "mb"),
            fio("large", "cold"),
        ),
        (
            "large, cold start: fastio .batches(256) epoch 2 >= webdataset's epoch 2",
            1.0,
            rate("large", "cold", "fastio batches 256 epoch 2 after cold", "samples"),
            rate("large", "cold", "webdataset epoch 2 after cold", "samples"),
        ),
        *warm_rates(
            "{case}, warm: fastio Parquet .batches(256) >= pyarrow iter_batches(256)",
            1.0,
            [("", "fastio parquet", "pyarrow")],
        ),
        *warm_rates(
            "{case}, warm: fastio Arrow IPC .batches(256) >= pyarrow's IPC file reader",
            1.0,
            [("", "fastio arrow", "pyarrow ipc")],
        ),
        # Like for like: pyarrow's batches cut to 256 rows across files too.
        *warm_rates(
            "{case}, warm: fastio {name} .batches(256) >= pyarrow's, cut to 256 rows",
            1.0,
            [
                ("Parquet", "fastio parquet", "pyarrow 256"),
                ("Arrow IPC", "fastio arrow", "pyarrow ipc 256"),
            ],
        ),
        *warm_rates(
            "{case}, warm: fastio TFRecord samples/s >= 1.5x the tfrecord package",
            1.5,
            [("", "fastio tfrecord", "tfrecord")],
        ),
        *warm_rates(
            "{case}, warm: fastio {name}.batches(256) samples/s >= per-sample iteration",
            1.0,
            [
                ("", "fastio batches 256", "fastio"),
                ("(epoch 2) ", "fastio batches 256 epoch 2", "fastio epoch 2"),
                ("TFRecord ", "fastio tfrecord batches", "fastio tfrecord"),
                (
                    "TFRecord (epoch 2) ",
                    "fastio tfrecord batches epoch 2",
                    "fastio tfrecord epoch 2",
                ),
            ],
        ),
        *warm_rates(
            "{case}, warm, shuffled: fastio {name}.batches(256) >= per-sample iteration",
            1.0,
            [
                ("", "fastio batches 256 shuffled", "fastio shuffled"),
                ("(epoch 2) ", "fastio batches 256 shuffled epoch 2", "fastio shuffled epoch 2"),
                ("TFRecord ", "fastio tfrecord batches shuffled", "fastio tfrecord shuffled"),
            ],
        ),
        *warm_rates(
            "{case}, warm, shuffled: fastio samples/s >= webdataset's, shuffled alike",
            1.0,
            [("", "fastio shuffled", "webdataset shuffled")],
        ),
        (
            "large, warm: fastio's time to first sample <= webdataset's",
            1.0,
            quicker("large", "warm"),
            None if not wds_first else 1.0 / wds_first,
        ),
        (
            "large, warm: fastio samples/s >= 2x webdataset",
            2.0,
            rate("large", "warm", "fastio", "samples"),
            large_wds,
        ),
        (
            "large, cold: fastio MB/s >= 0.85x fio",
            0.85,
            best_fastio_mb("large", "cold"),
            fio("large", "cold"),
        ),
        (
            "small, warm: fastio samples/s >= 15x webdataset",
            15.0,
            rate("small", "warm", "fastio", "samples"),
            small_wds,
        ),
        (
            "small, warm: fastio .batches() >= 1M samples/s",
            1.0,
            max(
                (
                    r
                    for m in ("fastio batches", "fastio batches epoch 2")
                    if (r := rate("small", "warm", m, "samples")) is not None
                ),
                default=None,
            ),
            1e6,
        ),
    ]
    results = []
    for label, goal, ours, theirs in checks:
        ratio = ours / theirs if ours is not None and theirs else None
        results.append(
            {
                "target": label,
                "goal": goal,
                "ratio": ratio,
                "met": ratio is not None and ratio >= goal,
            }
        )
    return results


def plot(cells: list[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    panels = sorted({(c.case, c.mode) for c in cells})
    figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 6), squeeze=False)
    for axis, (case, mode) in zip(axes[0], panels, strict=True):
        rows = [c for c in cells if (c.case, c.mode) == (case, mode) and c.median is not None]
        rows.sort(key=lambda c: c.mb_per_s() or 0.0)
        colors = [
            "tab:orange"
            if c.method.startswith("fastio")
            else "tab:gray"
            if c.method.startswith(("fio", "python"))
            else "tab:blue"
            for c in rows
        ]
        axis.barh([c.method for c in rows], [c.mb_per_s() for c in rows], color=colors)
        axis.set_xscale("log")
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.set_xlabel("MB/s (log)")
        axis.set_title(f"{case} samples, {mode}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/work/data/bench-datasets"))
    parser.add_argument("--scale", type=float, default=1.0, help="of the sample counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="for the data and the method order")
    parser.add_argument("--cases", type=lambda s: s.split(","), default=["large", "small"])
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["cold", "warm"])
    parser.add_argument(
        "--methods",
        type=lambda s: s.split(","),
        default=[],
        help="comma-separated subset (default: all)",
    )
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/datasets-*.json")
    parser.add_argument("--plot", type=Path, help="write a PNG bar chart here (matplotlib)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    unknown = set(args.methods) - set(BY_NAME)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; known: {', '.join(BY_NAME)}")
    if "cold" in args.modes and os.geteuid() != 0:
        parser.error("cold runs drop the page cache, which needs root (or use --modes warm)")
    started = time.time()
    cells: list[Cell] = []
    manifests = {}
    with hugetlbfs(FIO_DEPTH * FIO_BLOCK) as huge_mount:
        for case in cases(args.scale):
            if case.name not in args.cases:
                continue
            needed = {BY_NAME[name].copy for name in args.methods or BY_NAME}
            manifests[case.name] = prepare(case, args.data_dir, args.seed, needed)
            cells += measure(args, case, manifests[case.name], huge_mount)
    print_tables(cells)
    checks = targets(cells)
    print()
    for check in checks:
        ratio = "n/a" if check["ratio"] is None else f"{check['ratio']:.2f}"
        print(f"{'MET ' if check['met'] else 'MISSED'} {check['target']}: ratio {ratio}")
    RESULTS.mkdir(exist_ok=True)
    out = args.json or RESULTS / f"datasets-{time.strftime('%Y%m%d-%H%M%S')}.json"
    record = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "seconds": time.time() - started,
        "kernel": os.uname().release,
        "cases": {
            name: m["case"] | {"copies": {k: v["bytes"] for k, v in m["copies"].items()}}
            for name, m in manifests.items()
        },
        "cells": [
            asdict(c) | {"mb_per_s": c.mb_per_s(), "samples_per_s": c.samples_per_s()}
            for c in cells
        ],
        "targets": checks,
    }
    out.write_text(json.dumps(record, indent=1))
    print(f"results: {out}")
    if args.plot:
        plot(cells, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
