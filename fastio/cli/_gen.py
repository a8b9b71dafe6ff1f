"""``fastio-bench gen``: write a synthetic sharded dataset (for benchmarks, demos and tests).

Every format holds the same samples for the same seed: sample ``i`` of shard
``s`` has the key ``f"{s:06d}{i:08d}"``, a label in ``[0, classes)`` and a payload
of about ``sample_size`` random bytes (text, for JSONL). Each shard draws from
its own random streams (sizes, labels, payload bytes), and a payload consumes
whole 64-bit words of its stream, so neither the block size a writer works in
nor the format changes what a sample holds. The output is deterministic: the
same arguments write the same bytes.

The samples are written by the formats' own writers (:mod:`fastio.formats`).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fastio.cli._config_cmd import config_option, gen_target
from fastio.cli._options import SIZE, output_options
from fastio.cli._report import byte_progress, console, emit

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from fastio.cli._measure import ProgressCallback
    from fastio.formats._compression import Writable
    from fastio.formats._records import RecordWriter

# format -> file extension
FORMATS: dict[str, str] = {
    "webdataset": "tar",
    "tfrecord": "tfrecord",
    "parquet": "parquet",
    "arrow": "arrow",
    "npy": "npy",
    "fixed": "bin",
    "jsonl": "jsonl",
}
COMPRESSIONS: dict[str, str] = {"none": "", "gzip": ".gz", "zstd": ".zst"}
# Formats compressed inside the file (column chunks, IPC buffers), not as a whole.
_SELF_COMPRESSED = ("parquet", "arrow")
_FIXED_SIZE = ("npy", "fixed")
_BLOCK_BYTES = 4 << 20  # payload generated and written at a time
_ROW_GROUP_BYTES = 32 << 20  # default Parquet row group / Arrow record batch
_ROW_GROUP_ROWS = 65_536
_TEXT_ALPHABET = b"abcdefghijklmnopqrstuvwxyz      "  # 32 symbols: a byte's low 5 bits


@dataclass(frozen=True)
class Block:
    """Consecutive samples of one shard: payloads are views of one buffer."""

    keys: list[str]
    labels: list[int]
    payloads: list[memoryview]

    def __len__(self) -> int:
        return len(self.keys)

    def samples(self) -> Iterator[tuple[str, int, memoryview]]:
        """``(key, label, payload)`` of each sample."""
        return zip(self.keys, self.labels, self.payloads, strict=True)

    @property
    def payload_bytes(self) -> int:
        return sum(p.nbytes for p in self.payloads)


@dataclass(frozen=True)
class DatasetPlan:
    """What to generate; :meth:`blocks` yields a shard's samples in any block size."""

    samples: int
    sample_size: int
    shards: int
    seed: int = 0
    size_jitter: float = 0.0
    classes: int = 1000

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"shards must be at least 1, not {self.shards}")
        if self.samples < self.shards:
            raise ValueError(f"{self.samples} samples cannot fill {self.shards} shards")
        if self.sample_size < 1:
            raise ValueError(f"sample_size must be positive, not {self.sample_size}")
        if not 0.0 <= self.size_jitter < 1.0:
            raise ValueError(f"size_jitter must be in [0, 1), not {self.size_jitter}")
        if self.classes < 1:
            raise ValueError(f"classes must be at least 1, not {self.classes}")

    def shard_samples(self, shard: int) -> range:
        """Indexes (global) of the samples in ``shard``."""
        return range(shard * self.samples // self.shards, (shard + 1) * self.samples // self.shards)

    def blocks(self, shard: int, block_samples: int) -> Iterator[Block]:
        import numpy as np

        count = len(self.shard_samples(shard))
        sizes_seed, labels_seed, data_seed = np.random.SeedSequence([self.seed, shard]).spawn(3)
        if self.size_jitter:
            factors = np.random.default_rng(sizes_seed).uniform(
                1 - self.size_jitter, 1 + self.size_jitter, count
            )
            sizes = np.maximum(1, np.rint(self.sample_size * factors)).astype(np.int64)
        else:
            sizes = np.full(count, self.sample_size, dtype=np.int64)
        labels = np.random.default_rng(labels_seed).integers(0, self.classes, count)
        data = np.random.PCG64DXSM(data_seed)
        for start in range(0, count, block_samples):
            stop = min(count, start + block_samples)
            yield _block(shard, start, sizes[start:stop], labels[start:stop], data)


def _block(
    shard: int,
    start: int,
    sizes: npt.NDArray[np.int64],
    labels: npt.NDArray[np.int64],
    data: np.random.PCG64DXSM,
) -> Block:
    import numpy as np

    words = (sizes + 7) // 8
    raw = data.random_raw(int(words.sum())).astype("<u8", copy=False)
    view = raw.view(np.uint8).data
    starts = (np.cumsum(words) - words) * 8
    payloads = [view[o : o + s] for o, s in zip(starts.tolist(), sizes.tolist(), strict=True)]
    keys = [f"{shard:06d}{index:08d}" for index in range(start, start + len(sizes))]
    return Block(keys, labels.tolist(), payloads)


@dataclass(frozen=True)
class GenResult:
    """What :func:`write_dataset` wrote."""

    format: str
    compression: str
    paths: tuple[str, ...]
    url: str  # a brace pattern naming every shard, for fastio.expand_urls / webdataset
    samples: int
    payload_bytes: int
    bytes: int  # on disk
    seconds: float
    index: str | None = None  # the dataset index written beside the shards

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "compression": self.compression,
            "files": len(self.paths),
            "samples": self.samples,
            "payload_bytes": self.payload_bytes,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "url": self.url,
            "index": self.index,
        }


def shard_names(
    out_dir: str | os.PathLike[str], format: str, shards: int, compression: str
) -> tuple[list[str], str]:
    """The shard paths and the brace pattern that names them all."""
    width = max(5, len(str(shards - 1)))
    suffix = f".{FORMATS[format]}" + (
        "" if format in _SELF_COMPRESSED else COMPRESSIONS[compression]
    )
    prefix = os.path.join(os.fspath(out_dir), f"{format}-")
    paths = [f"{prefix}{index:0{width}d}{suffix}" for index in range(shards)]
    url = f"{prefix}{{{0:0{width}d}..{shards - 1:0{width}d}}}{suffix}"
    return paths, url


def write_dataset(
    out_dir: str | os.PathLike[str],
    format: str,
    samples: int,
    sample_size: int,
    shards: int,
    seed: int = 0,
    compression: str = "none",
    size_jitter: float = 0.0,
    row_group_size: int | None = None,
    classes: int = 1000,
    progress: ProgressCallback | None = None,
    index: bool = False,
) -> GenResult:
    """Write ``samples`` samples of about ``sample_size`` bytes as ``shards`` files
    ``<out_dir>/<format>-NNNNN.<ext>[.gz|.zst]``, replacing files of those names
    (and removing those an earlier run numbered past them).

    ``compression`` wraps whole files for the stream formats; Parquet and Arrow
    compress their buffers instead (Arrow IPC: zstd only) and keep their names.
    ``row_group_size`` is in rows (Parquet row groups, Arrow record batches;
    default about 32 MiB each). ``npy`` and ``fixed`` hold equal-sized rows, so
    they take no ``size_jitter``. ``progress`` is called with payload bytes.
    With ``index``, the formats that index their shards (webdataset, tfrecord,
    jsonl) also get a dataset index beside them, from what the writers noted.
    Raises ValueError for an unknown format or compression or a bad size.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; choose from {', '.join(FORMATS)}")
    if compression not in COMPRESSIONS:
        raise ValueError(f"unknown compression {compression!r}; choose from none, gzip, zstd")
    if format in _FIXED_SIZE and size_jitter:
        raise ValueError(f"{format} rows all have sample_size bytes: size_jitter must be 0")
    if format == "arrow" and compression == "gzip":
        raise ValueError("Arrow IPC files compress with zstd (or lz4), not gzip")
    if row_group_size is not None and row_group_size < 1:
        raise ValueError(f"row_group_size must be positive, not {row_group_size}")
    # The formats load numpy, which the CLI does not at startup.
    from fastio.formats import DatasetIndexWriter, compressing

    plan = DatasetPlan(samples, sample_size, shards, seed, size_jitter, classes)
    if format in _SELF_COMPRESSED:
        default_rows = max(1, min(_ROW_GROUP_ROWS, _ROW_GROUP_BYTES // sample_size))
        block_samples = row_group_size or default_rows
    else:
        block_samples = max(1, _BLOCK_BYTES // sample_size)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths, url = shard_names(folder, format, shards, compression)
    payload = 0
    started = time.perf_counter()
    indexes = DatasetIndexWriter() if index and format in _INDEXED else None
    for shard, path in enumerate(paths):
        blocks = _Counted(plan.blocks(shard, block_samples), progress)
        with _replacing(path) as partial, open(partial, "wb", buffering=1 << 20) as file:
            if format in _SELF_COMPRESSED:
                _write_table(file, format, blocks, compression)
            else:
                with compressing(file, None if compression == "none" else compression) as handle:
                    writer = _STREAM_WRITERS[format](handle, blocks, plan, shard)
        if indexes is not None:
            indexes.add(writer, path)  # in place now, as the index records it
        payload += blocks.payload_bytes
    written_index = indexes.save() if indexes is not None else None
    _remove_earlier(folder, format, paths)
    seconds = time.perf_counter() - started
    on_disk = sum(os.path.getsize(path) for path in paths)
    return GenResult(format, compression, tuple(paths), url, samples, payload, on_disk, seconds,
                     written_index)  # fmt: skip


def _remove_earlier(folder: Path, format: str, paths: list[str]) -> None:
    """Shards of ``format`` an earlier run left in ``folder`` past those just
    written (named as they are, numbered after them): the folder holds the
    dataset just written, which a dataset of the folder reads."""
    written = {os.path.basename(path) for path in paths}
    suffix = paths[0][len(os.path.join(os.fspath(folder), f"{format}-")) :].lstrip("0123456789")
    named = re.compile(rf"{re.escape(format)}-\d{{5,}}{re.escape(suffix)}")
    for name in os.listdir(folder):
        if named.fullmatch(name) and name not in written:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(folder / name)


class _Counted(Iterator[Block]):
    """Passes blocks through, counting payload bytes (and reporting progress)."""

    def __init__(self, blocks: Iterator[Block], progress: ProgressCallback | None) -> None:
        self._blocks = blocks
        self._progress = progress
        self.payload_bytes = 0

    def __next__(self) -> Block:
        block = next(self._blocks)
        size = block.payload_bytes
        self.payload_bytes += size
        if self._progress is not None:
            self._progress(size)
        return block


@contextlib.contextmanager
def _replacing(path: str) -> Iterator[str]:
    """A temporary name beside ``path``, renamed to it once written: a reader
    that finds the file finds it whole (what a benchmark reusing data relies on)."""
    partial = f"{path}.partial"
    try:
        yield partial
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)


# Each takes a shard's synthetic samples to its format's writer.


def _write_webdataset(
    file: Writable, blocks: Iterator[Block], _: DatasetPlan, __: int
) -> RecordWriter:
    from fastio.formats import WebDatasetWriter

    with WebDatasetWriter(file) as writer:
        for block in blocks:
            for key, label, payload in block.samples():
                writer.write(key, {"bin": payload, "cls": str(label).encode()})
    return writer


def _write_tfrecord(
    file: Writable, blocks: Iterator[Block], _: DatasetPlan, __: int
) -> RecordWriter:
    from fastio.formats import TFRecordWriter, example_parts

    with TFRecordWriter(file) as writer:
        for block in blocks:
            for key, label, payload in block.samples():
                writer.write(*example_parts({"key": key.encode(), "label": label, "data": payload}))
    return writer


def _write_npy(
    file: Writable, blocks: Iterator[Block], plan: DatasetPlan, shard: int
) -> RecordWriter:
    import numpy as np

    from fastio.formats import NpyWriter

    rows = len(plan.shard_samples(shard))
    with NpyWriter(file, np.dtype(np.uint8), (plan.sample_size,), rows) as writer:
        for block in blocks:
            for payload in block.payloads:
                writer.write(payload)
    return writer


def _write_fixed(
    file: Writable, blocks: Iterator[Block], plan: DatasetPlan, _: int
) -> RecordWriter:
    from fastio.formats import FixedWriter

    with FixedWriter(file, plan.sample_size) as writer:
        for block in blocks:
            for payload in block.payloads:
                writer.write(payload)
    return writer


def _write_jsonl(file: Writable, blocks: Iterator[Block], _: DatasetPlan, __: int) -> RecordWriter:
    import numpy as np

    from fastio.formats import JsonLinesWriter

    alphabet = np.frombuffer(_TEXT_ALPHABET, dtype=np.uint8)
    with JsonLinesWriter(file) as writer:
        for block in blocks:
            for key, label, payload in block.samples():
                text = alphabet[np.frombuffer(payload, dtype=np.uint8) & 31].tobytes().decode()
                writer.write({"key": key, "label": label, "text": text})
    return writer


def _write_table(file: Writable, format: str, blocks: Iterator[Block], compression: str) -> None:
    """One Parquet row group / Arrow record batch per block."""
    from fastio._errors import import_extra
    from fastio.formats import TableWriter

    pa = import_extra("pyarrow", f"writing {format.capitalize()} files")

    schema = pa.schema([("key", pa.string()), ("label", pa.int64()), ("data", pa.binary())])
    codec = None if compression == "none" else compression
    with TableWriter(file, format, schema, codec) as writer:
        for block in blocks:
            writer.write(_record_batch(block, schema))


_INDEXED = ("webdataset", "tfrecord", "jsonl")
"""Formats whose shards a dataset indexes by a scan, unless given the index."""

_STREAM_WRITERS: dict[
    str, Callable[[Writable, Iterator[Block], DatasetPlan, int], RecordWriter]
] = {
    "webdataset": _write_webdataset,
    "tfrecord": _write_tfrecord,
    "npy": _write_npy,
    "fixed": _write_fixed,
    "jsonl": _write_jsonl,
}


def _record_batch(block: Block, schema: Any) -> Any:
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

    sizes = np.fromiter((p.nbytes for p in block.payloads), dtype=np.int64, count=len(block))
    if sizes.sum() >= 2**31:
        raise ValueError("a row group holds 2 GiB or more: choose a smaller row_group_size")
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int32)
    data = pa.Array.from_buffers(
        pa.binary(),
        len(block),
        [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(block.payloads))],
    )
    columns = [pa.array(block.keys, pa.string()), pa.array(block.labels, pa.int64()), data]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


# ---- the command -------------------------------------------------------------------


@click.command()
@click.argument("out_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "dataset_format",
    type=click.Choice(list(FORMATS)),
    default="webdataset",
    show_default=True,
)
@click.option("--samples", type=click.IntRange(1), default=10_000, show_default=True)
@click.option(
    "--sample-size",
    type=SIZE,
    default="100KB",
    show_default=True,
    help="Payload bytes per sample (characters of text for jsonl).",
)
@click.option("--shards", type=click.IntRange(1, 1_000_000), default=8, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--compression",
    type=click.Choice(list(COMPRESSIONS)),
    default="none",
    show_default=True,
    help="Whole files (.gz/.zst); Parquet and Arrow compress inside.",
)
@click.option(
    "--size-jitter",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=0.0,
    show_default=True,
    help="Sizes vary uniformly by up to this fraction of --sample-size.",
)
@click.option(
    "--row-group-size",
    type=click.IntRange(1),
    help="Rows per Parquet row group / Arrow batch [default: about 32 MiB of data].",
)
@click.option(
    "--classes",
    type=click.IntRange(1),
    default=1000,
    show_default=True,
    help="Labels are drawn from [0, classes).",
)
@click.option(
    "--index/--no-index",
    "with_index",
    default=True,
    show_default=True,
    help="webdataset, tfrecord, jsonl: write the dataset index beside the shards (from what "
    "the writers noted, no scan); --no-index leaves a dataset fastio has never seen.",
)
@output_options()
@config_option(
    "Take the format from a dataset config (unless --format is given) and, without "
    "OUT_DIR, the folder of its urls."
)
@click.pass_context
def gen(
    ctx: click.Context,
    out_dir: Path | None,
    dataset_format: str,
    samples: int,
    sample_size: int,
    shards: int,
    seed: int,
    compression: str,
    size_jitter: float,
    row_group_size: int | None,
    classes: int,
    with_index: bool,
    as_json: bool,
    out_path: str | None,
    config_file: Path | None,
) -> None:
    """Write a synthetic sharded dataset to OUT_DIR: SAMPLES samples of about
    SAMPLE_SIZE random bytes with integer labels, in SHARDS files.

    The same arguments write the same bytes; every format holds the same samples.
    Shards are named <format>-NNNNN.<ext>; the pattern printed last names them all.
    """
    if config_file is not None:
        out_dir, dataset_format = gen_target(ctx, config_file, out_dir, dataset_format)
    if out_dir is None:
        raise click.UsageError("give OUT_DIR, or --config FILE whose urls name a local folder")
    total = samples * sample_size
    try:
        with byte_progress(f"writing {dataset_format}", total, quiet=as_json) as advance:
            result = write_dataset(
                out_dir, dataset_format, samples, sample_size, shards, seed, compression,
                size_jitter, row_group_size, classes, advance, with_index,
            )  # fmt: skip
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    except ImportError as error:
        raise click.ClickException(str(error)) from None
    except OSError as error:
        raise click.ClickException(str(error)) from None

    def show() -> None:
        rate = result.payload_bytes / result.seconds / 1e6 if result.seconds else math.inf
        console().print(
            f"wrote {len(result.paths)} {result.format} shards: {result.samples:,} samples, "
            f"{result.payload_bytes / 1e9:.3f} GB of payload, {result.bytes / 1e9:.3f} GB on "
            f"disk, in {result.seconds:.2f} s ({rate:,.0f} MB/s)"
        )
        console().print(result.url, highlight=False, soft_wrap=True)
        if result.index is not None:
            console().print(f"dataset index: {result.index}", highlight=False, soft_wrap=True)

    emit(result.as_dict(), as_json, out_path, show)
