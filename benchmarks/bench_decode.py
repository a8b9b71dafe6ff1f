"""Shard decoding throughput: fastio's reader + decoders vs the peers' own readers.

    python benchmarks/bench_decode.py                  # ~1 GiB of 110 KB samples, ~128 MiB of 1 KB
    python benchmarks/bench_decode.py --large 256MiB --small 32MiB --repeats 1

The same samples are written once as WebDataset tar (tarfile) and TFRecord
(the tfrecord package's writer), then read warm (page cache) in one process:

* tar: fastio ``decode_webdataset`` vs ``webdataset.WebDataset`` (raw samples);
* TFRecord: fastio ``decode_tfrecord`` (both CRCs verified) vs
  ``tfrecord.reader.tfrecord_loader`` (no CRC checks, it parses each Example),
  and fastio with ``parse_example`` for a like-for-like comparison.

Each consumer touches every sample (counts it and its bytes). Prints samples/s,
MB/s and ratios; medians of ``--repeats`` runs. This measures decoding, not a
whole dataset pipeline (no shuffle, no DataLoader workers: bench_datasets.py).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tarfile
import time
from pathlib import Path

import fastio
from fastio.cli._options import parse_size
from fastio.formats import decode_tfrecord, decode_webdataset, parse_example


def write_shards(
    folder: Path, label: str, total: int, sample_size: int
) -> tuple[list[str], list[str]]:
    import numpy as np
    from tfrecord.writer import TFRecordWriter

    folder.mkdir(parents=True, exist_ok=True)
    count = max(1, total // sample_size)
    shards = 8
    tars, records = [], []
    generator = np.random.default_rng(0)
    payload = generator.bytes(sample_size)
    for shard in range(shards):
        tar_path = folder / f"{label}-{shard:03d}.tar"
        tf_path = folder / f"{label}-{shard:03d}.tfrecord"
        tars.append(str(tar_path))
        records.append(str(tf_path))
        if tar_path.exists() and tf_path.exists():
            continue
        writer = TFRecordWriter(str(tf_path))
        with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as archive:
            for index in range(shard * count // shards, (shard + 1) * count // shards):
                key = f"sample{index:08d}"
                for extension, data in (("bin", payload), ("cls", str(index % 1000).encode())):
                    info = tarfile.TarInfo(f"{key}.{extension}")
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
                writer.write({"bin": (payload, "byte"), "cls": (index % 1000, "int")})
        writer.close()
    return tars, records


def timed(consume) -> tuple[float, int, int]:
    started = time.perf_counter()
    samples, nbytes = consume()
    return time.perf_counter() - started, samples, nbytes


def fastio_tar(paths: list[str]) -> tuple[int, int]:
    samples = nbytes = 0
    with fastio.Reader() as reader:
        for path in paths:
            for sample in decode_webdataset(reader.stream([path]), path):
                samples += 1
                nbytes += sample["bin"].nbytes
    return samples, nbytes


def webdataset_tar(paths: list[str]) -> tuple[int, int]:
    import webdataset

    samples = nbytes = 0
    for sample in webdataset.WebDataset(paths, shardshuffle=False):
        samples += 1
        nbytes += len(sample["bin"])
    return samples, nbytes


def fastio_tfrecord(paths: list[str], parse: bool) -> tuple[int, int]:
    samples = nbytes = 0
    with fastio.Reader() as reader:
        for path in paths:
            for record in decode_tfrecord(reader.stream([path]), path):
                samples += 1
                if parse:
                    nbytes += len(parse_example(record)["bin"][0])
                else:
                    nbytes += record.nbytes
    return samples, nbytes


def tfrecord_package(paths: list[str]) -> tuple[int, int]:
    from tfrecord.reader import tfrecord_loader

    samples = nbytes = 0
    for path in paths:
        for example in tfrecord_loader(path, None, {"bin": "byte", "cls": "int"}):
            samples += 1
            nbytes += len(example["bin"])
    return samples, nbytes


def warm(paths: list[str]) -> None:
    for path in paths:
        Path(path).read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp/fastio-bench-decode"))
    parser.add_argument(
        "--large", type=parse_size, default=parse_size("1GiB"), help="bytes of ~110 KB samples"
    )
    parser.add_argument(
        "--small", type=parse_size, default=parse_size("128MiB"), help="bytes of ~1 KB samples"
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = {}
    for label, total, size in (("large", args.large, 110_000), ("small", args.small, 1_000)):
        tars, records = write_shards(args.dir, label, total, size)
        methods = {
            "fastio tar": lambda t=tars: fastio_tar(t),
            "webdataset tar": lambda t=tars: webdataset_tar(t),
            "fastio tfrecord (records, CRC checked)": lambda r=records: fastio_tfrecord(r, False),
            "fastio tfrecord + parse_example": lambda r=records: fastio_tfrecord(r, True),
            "tfrecord package (parsed)": lambda r=records: tfrecord_package(r),
        }
        warm(tars + records)
        for name, consume in methods.items():
            runs = [timed(consume) for _ in range(args.repeats)]
            seconds = statistics.median(run[0] for run in runs)
            samples, nbytes = runs[0][1], runs[0][2]
            results[f"{label}: {name}"] = {"samples": samples, "samples_per_s": samples / seconds,
                                           "mb_per_s": nbytes / seconds / 1e6}  # fmt: skip
            print(f"{label:5} {name:40} {samples / seconds:12,.0f} samples/s "
                  f"{nbytes / seconds / 1e6:9,.0f} MB/s", file=sys.stderr)  # fmt: skip
    for label in ("large", "small"):
        ours = results[f"{label}: fastio tar"]["samples_per_s"]
        theirs = results[f"{label}: webdataset tar"]["samples_per_s"]
        parsed = results[f"{label}: fastio tfrecord + parse_example"]["samples_per_s"]
        package = results[f"{label}: tfrecord package (parsed)"]["samples_per_s"]
        print(
            f"{label}: tar fastio/webdataset {ours / theirs:.1f}x; "
            f"tfrecord parsed fastio/tfrecord package {parsed / package:.1f}x"
        )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
