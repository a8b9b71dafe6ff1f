"""tf.data fed by fastio beside tf.data's own TFRecord reader, on the same TFRecord files.

    python benchmarks/bench_tfdata.py                        # 200k x 1 KB and 20k x 100 KB
    python benchmarks/bench_tfdata.py --cases small --repeats 5

The data (``fastio-bench gen --format tfrecord``: a key, a label and a payload
per tf.train.Example) is written once into ``--data-dir``. Every method
delivers batches of ``--batch-size`` parsed Examples as tensors (``label``
int64, ``data`` string) and sums the labels, so each touches every sample;
a method whose count or label sum differs is reported as failed:

* ``tf.data TFRecordDataset``: ``TFRecordDataset(files, num_parallel_reads=
  AUTOTUNE).batch(n).map(tf.io.parse_example, AUTOTUNE).prefetch(AUTOTUNE)``,
  tf.data's own fastest path.
* ``fastio batches -> tf.data``: the fast path: ``Dataset.batches(n)`` (Examples
  parsed into Arrow columns in native code) handed to
  ``tf.data.Dataset.from_generator`` as numpy arrays, ``.prefetch(AUTOTUNE)``.
* ``fastio samples -> tf.data``: the slow path, one sample at a time through
  ``from_generator``, then ``.batch(n)``.
* ``fastio batches``: the same batches without TensorFlow (what the adapter costs).

Each run is a fresh process (TensorFlow's import, seconds, is not timed) on a
warm page cache; methods run in a shuffled order in each of ``--repeats``
rounds; the table shows medians and the ratio to tf.data's reader. Without
TensorFlow the tf methods are skipped with a message (``pip install
tensorflow-cpu``). Results go to benchmarks/results/ as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fastio.cli._gen import write_dataset

RESULTS = Path(__file__).parent / "results"
CASES = {"small": (200_000, 1_000, 16), "large": (20_000, 100_000, 16)}  # samples, bytes, shards


# ---- methods (each in a child process: samples and label sum) ----------------------------


def _signature(tf: Any) -> dict[str, Any]:
    return {"label": tf.TensorSpec((None,), tf.int64), "data": tf.TensorSpec((None,), tf.string)}


def tf_records(paths: list[str], batch: int) -> tuple[int, int]:
    import tensorflow as tf

    features = {"label": tf.io.FixedLenFeature([], tf.int64),
                "data": tf.io.FixedLenFeature([], tf.string)}  # fmt: skip
    dataset = (
        tf.data.TFRecordDataset(paths, num_parallel_reads=tf.data.AUTOTUNE)
        .batch(batch)
        .map(
            lambda records: tf.io.parse_example(records, features),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .prefetch(tf.data.AUTOTUNE)
    )
    return _consume(dataset)


def fastio_tf_batches(paths: list[str], batch: int) -> tuple[int, int]:
    """The fast path, as the README shows it."""
    import tensorflow as tf

    import fastio

    source = fastio.Dataset(paths, format="tfrecord", shuffle=False)

    def batches() -> Any:
        for columns in source.batches(batch):
            # One value per Example and feature: the list columns' values are the column.
            data = columns.column("data").flatten()
            yield {"label": columns.column("label").flatten().to_numpy(),
                   "data": data.to_numpy(zero_copy_only=False)}  # fmt: skip

    dataset = tf.data.Dataset.from_generator(batches, output_signature=_signature(tf))
    return _consume(dataset.prefetch(tf.data.AUTOTUNE))


def fastio_tf_samples(paths: list[str], batch: int) -> tuple[int, int]:
    import tensorflow as tf

    import fastio

    source = fastio.Dataset(paths, format="tfrecord", shuffle=False)
    signature = {"label": tf.TensorSpec((), tf.int64), "data": tf.TensorSpec((), tf.string)}
    dataset = tf.data.Dataset.from_generator(
        lambda: ({"label": s["label"][0], "data": s["data"][0]} for s in source),
        output_signature=signature,
    )
    return _consume(dataset.batch(batch).prefetch(tf.data.AUTOTUNE))


def fastio_batches(paths: list[str], batch: int) -> tuple[int, int]:
    import pyarrow.compute as pc

    import fastio

    samples = labels = 0
    with fastio.Dataset(paths, format="tfrecord", shuffle=False) as source:
        for columns in source.batches(batch):
            samples += columns.num_rows
            labels += pc.sum(columns.column("label").flatten()).as_py()
    return samples, labels


def _consume(dataset: Any) -> tuple[int, int]:
    samples = labels = 0
    for tensors in dataset:
        samples += int(tensors["label"].shape[0])
        labels += int(tensors["label"].numpy().sum())
    return samples, labels


METHODS = {
    "tf.data TFRecordDataset": (tf_records, True),
    "fastio batches -> tf.data": (fastio_tf_batches, True),
    "fastio samples -> tf.data": (fastio_tf_samples, True),
    "fastio batches": (fastio_batches, False),
}  # name -> (function, needs tensorflow)


def child(name: str, manifest_path: str, batch: int) -> None:
    manifest = json.loads(Path(manifest_path).read_text())
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    function, needs_tf = METHODS[name]
    import pyarrow.compute  # noqa: F401

    import fastio.dataset._dataset  # noqa: F401 - imports are not timed

    if needs_tf:
        import tensorflow  # noqa: F401
    started = time.perf_counter()
    samples, labels = function(manifest["paths"], batch)
    seconds = time.perf_counter() - started
    print(json.dumps({"samples": samples, "labels": labels, "seconds": seconds}))


# ---- driver ------------------------------------------------------------------------------


def prepare(case: str, data_dir: Path, scale: float) -> Path:
    samples, size, shards = CASES[case]
    samples = max(shards, round(samples * scale))
    folder = data_dir / f"{case}-{samples}x{size}"
    manifest = folder / "manifest.json"
    if manifest.exists():
        return manifest
    result = write_dataset(folder, "tfrecord", samples, size, shards, seed=0, classes=1000)
    import fastio

    with fastio.Dataset(list(result.paths), format="tfrecord", shuffle=False) as dataset:
        labels = sum(int(s["label"][0]) for s in dataset)  # also builds the indexes, untimed
    manifest.write_text(json.dumps({"paths": list(result.paths), "bytes": result.bytes,
                                    "samples": samples, "labels": labels}))  # fmt: skip
    return manifest


def warm(paths: list[str]) -> None:
    buffer = bytearray(1 << 20)
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/var/tmp/fastio-bench-tfdata"))
    parser.add_argument("--cases", type=lambda s: s.split(","), default=list(CASES))
    parser.add_argument("--scale", type=float, default=1.0, help="of the sample counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0, help="of the method order")
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/tfdata-*.json")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.batch_size)
        return
    import importlib.util

    has_tf = importlib.util.find_spec("tensorflow") is not None
    methods = [name for name, (_, needs_tf) in METHODS.items() if has_tf or not needs_tf]
    if not has_tf:
        print("tensorflow is not installed: only fastio's batches run "
              "(pip install tensorflow-cpu for the tf.data methods)", file=sys.stderr)  # fmt: skip
    order = random.Random(args.seed)
    cells: list[dict[str, Any]] = []
    for case in args.cases:
        manifest_path = prepare(case, args.data_dir, args.scale)
        manifest = json.loads(manifest_path.read_text())
        seconds: dict[str, list[float]] = {name: [] for name in methods}
        failures: dict[str, str] = {}
        for round_ in range(args.repeats):
            plan = list(methods)
            order.shuffle(plan)
            for name in plan:
                warm(manifest["paths"])
                done = subprocess.run([sys.executable, __file__, "--child", name,
                                       str(manifest_path), "--batch-size", str(args.batch_size)],
                                      capture_output=True, text=True, check=False)  # fmt: skip
                if done.returncode != 0:
                    failures[name] = done.stderr.strip().splitlines()[-1:][0]
                    continue
                report = json.loads(done.stdout.strip().splitlines()[-1])
                if (report["samples"], report["labels"]) != (manifest["samples"],
                                                             manifest["labels"]):  # fmt: skip
                    failures[name] = f"delivered {report['samples']} samples, labels summing " \
                                     f"to {report['labels']}"  # fmt: skip
                    continue
                seconds[name].append(report["seconds"])
                rate = manifest["samples"] / report["seconds"]
                print(f"{case} round {round_ + 1}: {name:28} {rate:12,.0f} samples/s",
                      file=sys.stderr)  # fmt: skip
        for name in methods:
            median = statistics.median(seconds[name]) if seconds[name] else None
            rate = manifest["samples"] / median if median else None
            mb_per_s = manifest["bytes"] / median / 1e6 if median else None
            cells.append({"case": case, "method": name, "seconds": seconds[name],
                          "median_seconds": median, "failed": failures.get(name),
                          "samples_per_s": rate, "mb_per_s": mb_per_s})  # fmt: skip
    for case in args.cases:
        rows = [c for c in cells if c["case"] == case]
        reference = next((c["samples_per_s"] for c in rows
                          if c["method"] == "tf.data TFRecordDataset"), None)  # fmt: skip
        size = CASES[case][1]
        samples = max(CASES[case][2], round(CASES[case][0] * args.scale))
        print(f"\n{case}: {samples:,} Examples of {size:,} B, batches of {args.batch_size}, "
              f"warm page cache (median of {args.repeats})")  # fmt: skip
        print("| method | samples/s | MB/s | vs tf.data TFRecordDataset |")
        print("| --- | ---: | ---: | ---: |")
        for cell in sorted(rows, key=lambda c: -(c["samples_per_s"] or 0.0)):
            if cell["samples_per_s"] is None:
                print(f"| {cell['method']} | failed: {cell['failed']} | | |")
                continue
            ratio = f"{cell['samples_per_s'] / reference:.2f}x" if reference else ""
            print(f"| {cell['method']} | {cell['samples_per_s']:,.0f} | "
                  f"{cell['mb_per_s']:,.0f} | {ratio} |")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    out = args.json or RESULTS / f"tfdata-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                               "cells": cells}, indent=1))  # fmt: skip
    print(f"results: {out}")


if __name__ == "__main__":
    main()
