"""Ray Data over WebDataset shards: fastio's datasource beside Ray's own reader.

    python benchmarks/bench_ray.py                   # 40,000 samples of 4 KB in 16 shards
    python benchmarks/bench_ray.py --samples 100000 --size 1000 --repeats 5

The shards (``fastio-bench gen --format webdataset``: members ``bin`` and
``cls`` per sample) are written once into ``--data-dir`` and indexed there
(untimed). One local Ray instance (``--cpus``, default every core) serves
every method; each method delivers every sample as Arrow batches of
``--batch-size`` rows and sums the byte lengths of the ``bin`` column, so each
touches every sample; a method whose rows or bytes differ is reported as failed:

* ``ray.data.read_webdataset``: Ray's own reader, ``decoder=None`` (raw bytes,
  as fastio gives them), one read task per shard.
* ``fastio.ray.read``: :class:`fastio.ray.FastIODatasource`, as many read tasks,
  each a contiguous run of samples (the shards are indexed).
* ``fastio.ray.read(split=shards)``: the same, each task whole shards (how a
  dataset not indexed yet is split; here the indexes are there).
* ``fastio.Dataset.batches``: the same batches in this process, without Ray
  (what Ray's tasks and object store cost).
* ``file read (limit)``: every shard's bytes read once with ``readinto``: the
  page cache's speed for one reader, the most any method can reach per core.

The page cache is warm (each run reads the files first); every method runs
once untimed (Ray's workers start, modules import), then in a shuffled order
in each of ``--repeats`` rounds. The table shows medians and the ratio to
Ray's reader. Results go to benchmarks/results/ as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from fastio.cli._gen import write_dataset

RESULTS = Path(__file__).parent / "results"


def prepare(data_dir: Path, samples: int, size: int, shards: int) -> dict[str, Any]:
    folder = data_dir / f"wds-{samples}x{size}x{shards}"
    manifest = folder / "manifest.json"
    if not manifest.exists():
        result = write_dataset(folder, "webdataset", samples, size, shards, seed=0)
        import fastio

        with fastio.Dataset(list(result.paths), shuffle=False, fairness=False) as dataset:
            dataset.index()
            payload = sum(len(sample["bin"]) for sample in dataset)
        manifest.write_text(json.dumps({"paths": list(result.paths), "samples": samples,
                                        "payload": payload, "bytes": result.bytes}))  # fmt: skip
    answer: dict[str, Any] = json.loads(manifest.read_text())
    return answer


def warm(paths: list[str]) -> int:
    buffer = bytearray(1 << 20)
    read = 0
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while count := handle.readinto(buffer):
                read += count
    return read


def _consume(batches: Any) -> tuple[int, int]:
    import pyarrow.compute as pc

    rows = payload = 0
    for batch in batches:
        rows += batch.num_rows
        payload += pc.sum(pc.binary_length(batch.column("bin"))).as_py() or 0
    return rows, payload


def ray_webdataset(paths: list[str], batch: int) -> tuple[int, int]:
    import ray

    ds = ray.data.read_webdataset(paths, decoder=None, override_num_blocks=len(paths))
    return _consume(ds.iter_batches(batch_size=batch, batch_format="pyarrow"))


def fastio_ray(paths: list[str], batch: int) -> tuple[int, int]:
    import fastio.ray

    ds = fastio.ray.read(paths, override_num_blocks=len(paths))
    return _consume(ds.iter_batches(batch_size=batch, batch_format="pyarrow"))


def fastio_ray_shards(paths: list[str], batch: int) -> tuple[int, int]:
    import fastio.ray

    ds = fastio.ray.read(paths, split="shards", override_num_blocks=len(paths))
    return _consume(ds.iter_batches(batch_size=batch, batch_format="pyarrow"))


def fastio_batches(paths: list[str], batch: int) -> tuple[int, int]:
    import fastio

    with fastio.Dataset(paths, shuffle=False, fairness=False) as dataset:
        return _consume(dataset.batches(batch))


METHODS = {
    "ray.data.read_webdataset": ray_webdataset,
    "fastio.ray.read": fastio_ray,
    "fastio.ray.read(split=shards)": fastio_ray_shards,
    "fastio.Dataset.batches": fastio_batches,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/var/tmp/fastio-bench-ray"))
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--size", type=int, default=4_000, help="payload bytes per sample")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--cpus", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0, help="of the method order")
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/ray-*.json")
    args = parser.parse_args()
    try:
        import ray
    except ImportError:
        sys.exit("Ray is not installed: pip install 'fastio[ray]'")
    manifest = prepare(args.data_dir, args.samples, args.size, args.shards)
    paths = manifest["paths"]
    expected = (manifest["samples"], manifest["payload"])
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    seconds: dict[str, list[float]] = {name: [] for name in [*METHODS, "file read (limit)"]}
    failures: dict[str, str] = {}
    for name, method in METHODS.items():  # untimed: workers start, modules import
        got = method(paths, args.batch_size)
        if got != expected:
            failures[name] = f"delivered {got[0]} rows, {got[1]} payload bytes; want {expected}"
    order = random.Random(args.seed)
    for round_ in range(args.repeats):
        plan = [name for name in seconds if name not in failures]
        order.shuffle(plan)
        for name in plan:
            warm(paths)
            started = time.perf_counter()
            if name == "file read (limit)":
                warm(paths)
            else:
                METHODS[name](paths, args.batch_size)
            seconds[name].append(time.perf_counter() - started)
            rate = manifest["samples"] / seconds[name][-1]
            print(f"round {round_ + 1}: {name:30} {rate:12,.0f} samples/s", file=sys.stderr)
    ray.shutdown()
    cells = []
    for name, runs in seconds.items():
        median = statistics.median(runs) if runs else None
        cells.append({
            "method": name, "seconds": runs, "median_seconds": median,
            "failed": failures.get(name),
            "samples_per_s": manifest["samples"] / median if median else None,
            "mb_per_s": manifest["bytes"] / median / 1e6 if median else None,
        })  # fmt: skip
    reference = next(c["samples_per_s"] for c in cells
                     if c["method"] == "ray.data.read_webdataset")  # fmt: skip
    print(f"\n{manifest['samples']:,} samples of {args.size:,} B in {len(paths)} shards "
          f"({manifest['bytes'] / 1e6:,.0f} MB), {args.cpus} Ray CPUs, batches of "
          f"{args.batch_size}, warm page cache (median of {args.repeats})")  # fmt: skip
    print("| method | samples/s | MB/s | vs ray.data.read_webdataset |")
    print("| --- | ---: | ---: | ---: |")
    for cell in cells:
        if cell["samples_per_s"] is None:
            print(f"| {cell['method']} | failed: {cell['failed']} | | |")
            continue
        ratio = f"{cell['samples_per_s'] / reference:.2f}x" if reference else ""
        print(f"| {cell['method']} | {cell['samples_per_s']:,.0f} | {cell['mb_per_s']:,.0f} "
              f"| {ratio} |")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    out = args.json or RESULTS / f"ray-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                               "cells": cells}, indent=1))  # fmt: skip
    print(f"results: {out}")


if __name__ == "__main__":
    main()
