"""Sharded datasets written by the peers' own writers, with what was written.

Every sample carries a unique integer key, so tests can check exactly-once
delivery and order from what a dataset yields. ``key_of`` reads it back.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = ["webdataset", "tfrecord", "parquet", "arrow", "npy", "fixed", "jsonl", "lines"]
RECORD = 64  # bytes per fixed record / npy row


@dataclass
class Written:
    pattern: str  # brace pattern naming every shard
    urls: list[str]
    samples: list[dict[str, Any]]  # in stored order: key plus payload fields
    options: dict[str, Any]


def _payload(rng: random.Random, key: int, small: bool, large: bool = False) -> bytes:
    if large:
        size = rng.choice([30_000, 60_000, 110_000])
    else:
        size = rng.choice([0, 1, 37, 900]) if small else rng.choice([10, 3000, 20_000])
    return key.to_bytes(8, "little") + rng.randbytes(size)


def write(format_name: str, folder: Path, shards: int = 4, per_shard: int = 30, seed: int = 0,
          compression: str | None = None, index: bool = True, large: bool = False
          ) -> Written:  # fmt: skip
    """``shards`` shards of about ``per_shard`` samples (counts vary) of one
    format; with ``index``, and a dataset index beside them (as ``fastio-bench
    index`` writes it), else never seen by fastio. ``large``: payloads of 30
    to 110 KB (else up to 20 KB)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    counts = [
        max(1, per_shard + rng.randint(-per_shard // 3, per_shard // 3)) for _ in range(shards)
    ]
    samples: list[dict[str, Any]] = []
    urls: list[str] = []
    key = 0
    for shard, count in enumerate(counts):
        rows = []
        for _ in range(count):
            small = format_name in ("jsonl", "lines")
            rows.append({"key": key, "label": rng.randrange(1000),
                         "data": _payload(rng, key, small, large)})  # fmt: skip
            key += 1
        samples.extend(rows)
        urls.append(str(_WRITERS[format_name](folder, shard, rows)))
    options: dict[str, Any] = {"format": format_name}
    if format_name == "fixed":
        options["record_size"] = RECORD
    if compression:
        urls = [_compress(url, compression) for url in urls]
    pattern = _pattern(urls)
    if index and format_name in ("webdataset", "tfrecord", "jsonl", "lines"):
        import fastio

        with fastio.Dataset(pattern, fairness=False, **options) as dataset:
            dataset.save_index()
    return Written(pattern, urls, samples, options)


def _pattern(urls: list[str]) -> str:
    first = urls[0]
    stem, rest = first.rsplit("-", 1)
    digits, suffix = rest.split(".", 1)
    return f"{stem}-{{{'0' * len(digits)}..{len(urls) - 1:0{len(digits)}d}}}.{suffix}"


def _compress(url: str, codec: str) -> str:
    data = Path(url).read_bytes()
    os.unlink(url)
    if codec == "gzip":
        out = url + ".gz"
        Path(out).write_bytes(gzip.compress(data))
    else:
        import zstandard

        out = url + ".zst"
        Path(out).write_bytes(zstandard.ZstdCompressor().compress(data))
    return out


def _webdataset(folder: Path, shard: int, rows: list[dict[str, Any]]) -> Path:
    import webdataset

    # webdataset's own ShardWriter, one shard per call (start_shard numbers it).
    pattern = str(folder / "wds-%04d.tar")
    path = folder / f"wds-{shard:04d}.tar"
    with webdataset.ShardWriter(pattern, maxcount=len(rows) + 1, start_shard=shard,
                                verbose=0) as sink:  # fmt: skip
        for row in rows:
            sink.write({"__key__": f"sample{row['key']:07d}", "bin": row["data"],
                        "cls": row["label"]})  # fmt: skip
    return path


def _tfrecord(folder: Path, shard: int, rows: list[dict[str, Any]]) -> Path:
    from tfrecord.writer import TFRecordWriter

    path = folder / f"tf-{shard:04d}.tfrecord"
    writer = TFRecordWriter(str(path))
    for row in rows:
        writer.write({"key": (row["key"], "int"), "label": (row["label"], "int"),
                      "data": (row["data"], "byte")})  # fmt: skip
    writer.close()
    return path


def _table(rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    return pa.table({"key": pa.array([r["key"] for r in rows], pa.int64()),
                     "label": pa.array([r["label"] for r in rows], pa.int64()),
                     "data": pa.array([r["data"] for r in rows], pa.binary())})  # fmt: skip


def _parquet(folder: Path, shard: int, rows: list[dict[str, Any]]) -> Path:
    import pyarrow.parquet as pq

    path = folder / f"pq-{shard:04d}.parquet"
    pq.write_table(_table(rows), path, row_group_size=7)
    return path


def _arrow(folder: Path, shard: int, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa

    path = folder / f"ipc-{shard:04d}.arrow"
    table = _table(rows)
    with pa.ipc.new_file(path, table.schema) as sink:
        for batch in table.to_batches(max_chunksize=6):
            sink.write_batch(batch)
    return path


def _rows_array(rows: list[dict[str, Any]]) -> np.ndarray:
    out = np.zeros((len(rows), RECORD), np.uint8)
    for i, row in enumerate(rows):
        head = row["key"].to_bytes(8, "little") + row["label"].to_bytes(8, "little")
        out[i, :16] = np.frombuffer(head, np.uint8)
        out[i, 16:] = np.frombuffer(row["data"][8 : 8 + RECORD - 16].ljust(RECORD - 16, b"\0"),
                                    np.uint8)  # fmt: skip
    return out


def _npy(folder: Path, shard: int, rows: list[dict[str, Any]]) -> Path:
    path = folder / f"arr-{shard:04d}.npy"
    np.save(path, _rows_array(rows))
    return path


def _fixed(folder: Path, shard: int, rows: list[dict[str, Any]]) -> Path:
    path = folder / f"raw-{shard:04d}.bin"
    path.write_bytes(_rows_array(rows).tobytes())
    return path


def _jsonl(folder: Path, shard: int, rows: list[dict[str, Any]]) -> Path:
    path = folder / f"js-{shard:04d}.jsonl"
    with open(path, "w") as out:
        for i, row in enumerate(rows):
            out.write(json.dumps({"key": row["key"], "label": row["label"],
                                  "text": row["data"][8:].hex()}) + "\n")  # fmt: skip
            if i % 7 == 3:
                out.write("\n")  # blank lines are not samples
    return path


def _lines(folder: Path, shard: int, rows: list[dict[str, Any]]) -> Path:
    path = folder / f"txt-{shard:04d}.txt"
    path.write_text(
        "".join(f"{row['key']} {row['label']} {row['data'][8:].hex()}\n" for row in rows)
    )
    return path


_WRITERS = {
    "webdataset": _webdataset, "tfrecord": _tfrecord, "parquet": _parquet, "arrow": _arrow,
    "npy": _npy, "fixed": _fixed, "jsonl": _jsonl, "lines": _lines,
}  # fmt: skip


def key_of(format_name: str, sample: Any) -> int:
    """The key a sample of ``format_name`` carries."""
    if format_name == "webdataset":
        return int(sample["__key__"][len("sample") :])
    if format_name == "tfrecord":
        return int(sample["key"][0])
    if format_name in ("parquet", "arrow", "jsonl"):
        return int(sample["key"])
    if format_name == "npy":
        return int.from_bytes(sample[:8].tobytes(), "little")
    if format_name == "fixed":
        return int.from_bytes(sample[:8], "little")
    return int(sample.split(" ", 1)[0])


def batch_keys(format_name: str, batch: Any) -> list[int]:
    """Keys of a batch from ``Dataset.batches``."""
    if format_name in ("npy", "fixed"):
        return [int.from_bytes(row[:8].tobytes(), "little") for row in batch]
    if format_name == "webdataset":
        return [int(k[len("sample") :]) for k in batch.column("__key__").to_pylist()]
    if format_name == "tfrecord":
        return [int(v[0]) for v in batch.column("key").to_pylist()]
    if format_name == "lines":
        return [int(line.split(" ", 1)[0]) for line in batch.column("line").to_pylist()]
    return [int(k) for k in batch.column("key").to_pylist()]


def check_sample(format_name: str, sample: Any, row: dict[str, Any]) -> None:
    """Assert that ``sample`` holds what was written as ``row``."""
    data = row["data"]
    if format_name == "webdataset":
        assert sample["bin"] == data
        assert int(sample["cls"]) == row["label"]
    elif format_name == "tfrecord":
        assert sample["data"] == [data]
        assert list(sample["label"]) == [row["label"]]
    elif format_name in ("parquet", "arrow"):
        assert sample == {"key": row["key"], "label": row["label"], "data": data}
    elif format_name in ("npy", "fixed"):
        raw = bytes(sample) if format_name == "fixed" else sample.tobytes()
        assert raw == _rows_array([row])[0].tobytes()
    elif format_name == "jsonl":
        assert sample == {"key": row["key"], "label": row["label"], "text": data[8:].hex()}
    else:
        assert sample == f"{row['key']} {row['label']} {data[8:].hex()}"


def gnu_tar(folder: Path, members: dict[str, bytes], tar_format: str) -> Path:
    """A tar written by GNU tar (``--format=gnu`` or ``pax``) from real files."""
    source = folder / f"src-{tar_format}"
    for name, data in members.items():
        path = source / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    out = folder / f"gnu-{tar_format}.tar"
    subprocess.run(["tar", f"--format={tar_format}", "--sort=name", "-cf", str(out), "-C",
                    str(source), *sorted(members)], check=True)  # fmt: skip
    return out
