"""Columnar decoding: record batches built natively vs one Python object per sample.

    python benchmarks/bench_columnar.py                   # ~200 MB of ~1 KB samples, 3 repeats
    python benchmarks/bench_columnar.py --size 64MiB --repeats 1

Writes once (into ``--dir``) a WebDataset tar of ~1 KB samples (two members
each: ``.cls``, a few bytes, and ``.bin``, 1000 bytes; tarfile, GNU format) and
a TFRecord shard of ``tf.train.Example`` records, then reads them warm (page
cache), in one process:

* tar: ``columns_webdataset`` (record batches) vs ``decode_webdataset`` (dicts
  of views) vs webdataset's own iteration (``webdataset.WebDataset``, raw
  samples), each through its own reader; and ``columns_webdataset`` alone over
  chunks already in memory (decoding only, one thread);
* TFRecord: ``columns_tfrecord`` vs ``decode_tfrecord`` (both CRCs checked);
* ``parse_example``: the native parser vs the pure-Python one it replaced
  (kept as the tests' reference), records/s.

Per-sample consumers touch every sample (count it and its ``bin`` bytes);
columnar ones every batch. Prints samples/s and MB/s, medians of
``--repeats`` runs, then JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import fastio
from fastio.cli._options import parse_size
from fastio.formats import (
    columns_tfrecord,
    columns_webdataset,
    decode_tfrecord,
    decode_webdataset,
    parse_example,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = 1000  # bytes of each sample's .bin


def write_tar(path: Path, total: int) -> int:
    import numpy as np

    count = max(1, total // (SAMPLE + 1536))  # a member's header and padding: ~2.5 kB a sample
    if path.exists():
        return count
    payload = np.random.default_rng(0).bytes(SAMPLE)
    partial = path.with_suffix(".partial")
    with tarfile.open(partial, "w", format=tarfile.GNU_FORMAT) as archive:
        for index in range(count):
            for extension, data in (("cls", str(index % 1000).encode()), ("bin", payload)):
                info = tarfile.TarInfo(f"sample{index:08d}.{extension}")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    partial.rename(path)
    return count


def write_tfrecord(path: Path, count: int) -> None:
    import numpy as np
    from tfrecord.writer import TFRecordWriter

    if path.exists():
        return
    payload = np.random.default_rng(1).bytes(SAMPLE)
    partial = path.with_suffix(".partial")
    writer = TFRecordWriter(str(partial))
    for index in range(count):
        writer.write({
            "bin": (payload, "byte"),
            "cls": (index % 1000, "int"),
            "weights": ([0.25, 0.5, 0.75, 1.0], "float"),
        })  # fmt: skip
    writer.close()
    partial.rename(path)


def reader(args: argparse.Namespace) -> fastio.Reader:
    return fastio.Reader(read_size=args.read_size, outstanding_requests=args.outstanding)


def columns_tar(path: str, args: argparse.Namespace) -> tuple[int, int]:
    samples = nbytes = 0
    with reader(args) as source:
        for batch in columns_webdataset(source.stream([path]), path):
            samples += batch.num_rows
            nbytes += batch.column("bin").nbytes
    return samples, nbytes


def columns_tar_in_memory(chunks: list[fastio.Chunk], path: str) -> tuple[int, int]:
    samples = nbytes = 0
    for batch in columns_webdataset(chunks, path):
        samples += batch.num_rows
        nbytes += batch.column("bin").nbytes
    return samples, nbytes


def samples_tar(path: str, args: argparse.Namespace) -> tuple[int, int]:
    samples = nbytes = 0
    with reader(args) as source:
        for sample in decode_webdataset(source.stream([path]), path):
            samples += 1
            nbytes += sample["bin"].nbytes
    return samples, nbytes


def webdataset_tar(path: str) -> tuple[int, int]:
    import webdataset

    samples = nbytes = 0
    for sample in webdataset.WebDataset(path, shardshuffle=False):
        samples += 1
        nbytes += len(sample["bin"])
    return samples, nbytes


def columns_records(path: str, args: argparse.Namespace) -> tuple[int, int]:
    samples = nbytes = 0
    with reader(args) as source:
        for batch in columns_tfrecord(source.stream([path]), path):
            samples += batch.num_rows
            nbytes += batch.column("record").nbytes
    return samples, nbytes


def samples_records(path: str, args: argparse.Namespace) -> tuple[int, int]:
    samples = nbytes = 0
    with reader(args) as source:
        for record in decode_tfrecord(source.stream([path]), path):
            samples += 1
            nbytes += record.nbytes
    return samples, nbytes


def parsed(records: list[bytes], parse: Callable[[bytes], dict]) -> tuple[int, int]:
    nbytes = 0
    for record in records:
        nbytes += len(parse(record)["bin"][0])
    return len(records), nbytes


def python_parse_example() -> Callable[[bytes], dict]:
    """The pure-Python parser of fastio 0.1.0, which the tests keep as their reference."""
    sys.path.insert(0, str(ROOT))
    from tests.formats.test_tfrecord import reference_parse_example

    return reference_parse_example


def in_memory(path: str, read_size: int) -> list[fastio.Chunk]:
    data = memoryview(Path(path).read_bytes())
    return [
        fastio.Chunk(0, 0, path, offset, data[offset : offset + read_size], True, True)
        for offset in range(0, len(data), read_size)
    ]


def median_run(consume: Callable[[], tuple[int, int]], repeats: int) -> dict[str, float]:
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        samples, nbytes = consume()
        runs.append((time.perf_counter() - started, samples, nbytes))
    seconds = statistics.median(run[0] for run in runs)
    samples, nbytes = runs[0][1], runs[0][2]
    return {
        "samples": samples,
        "samples_per_s": samples / seconds,
        "mb_per_s": nbytes / seconds / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp/fastio-bench-columnar"))
    parser.add_argument("--size", type=parse_size, default=parse_size("200MB"),
                        help="bytes of the tar shard")  # fmt: skip
    parser.add_argument("--read-size", type=parse_size, default=parse_size("1MiB"))
    parser.add_argument("--outstanding", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    tar_path = args.dir / f"samples-{args.size}.tar"
    count = write_tar(tar_path, args.size)
    record_path = args.dir / f"examples-{count}.tfrecord"
    write_tfrecord(record_path, count)
    tar, records = str(tar_path), str(record_path)
    chunks = in_memory(tar, args.read_size)  # also warms the page cache
    Path(records).read_bytes()
    examples = [bytes(r) for r in decode_tfrecord(in_memory(records, 1 << 30), records)]
    reference = python_parse_example()
    methods: dict[str, Callable[[], tuple[int, int]]] = {
        "tar: columns_webdataset": lambda: columns_tar(tar, args),
        "tar: columns_webdataset, chunks in memory": lambda: columns_tar_in_memory(chunks, tar),
        "tar: decode_webdataset": lambda: samples_tar(tar, args),
        "tar: webdataset.WebDataset": lambda: webdataset_tar(tar),
        "tfrecord: columns_tfrecord": lambda: columns_records(records, args),
        "tfrecord: decode_tfrecord": lambda: samples_records(records, args),
        "parse_example: native": lambda: parsed(examples, parse_example),
        "parse_example: pure Python (0.1.0)": lambda: parsed(examples[: count // 10], reference),
    }
    results = {}
    for name, consume in methods.items():
        consume()  # warm up, untimed
        results[name] = median_run(consume, args.repeats)
        print(f"{name:45} {results[name]['samples_per_s']:12,.0f} samples/s "
              f"{results[name]['mb_per_s']:8,.0f} MB/s", file=sys.stderr)  # fmt: skip

    def ratio(ours: str, theirs: str) -> float:
        return results[ours]["samples_per_s"] / results[theirs]["samples_per_s"]

    columns = "tar: columns_webdataset"
    print(
        f"columns_webdataset: {ratio(columns, 'tar: decode_webdataset'):.1f}x decode_webdataset, "
        f"{ratio(columns, 'tar: webdataset.WebDataset'):.1f}x webdataset; parse_example: "
        f"{ratio('parse_example: native', 'parse_example: pure Python (0.1.0)'):.1f}x before",
        file=sys.stderr,
    )
    settings = {"read_size": args.read_size, "outstanding_requests": args.outstanding}
    print(json.dumps({"settings": settings, "results": results}, indent=1))


if __name__ == "__main__":
    main()
