"""Arrow IPC streams as Hugging Face ``datasets`` saves them: fastio beside
``datasets`` itself and pyarrow's stream reader, on the same files.

    python benchmarks/bench_arrow_streams.py --data-dir /work/data/hf-streams
    python benchmarks/bench_arrow_streams.py --data-dir /work/data/hf-streams --runs 5 --scale 0.2

``datasets`` writes each of its ``.arrow`` files (``save_to_disk``, its cache)
as an IPC stream: no footer, record batches of 1,000 rows. The benchmark
writes two such datasets with ``datasets`` itself (``Dataset.from_generator``,
then ``save_to_disk`` in 64 files): 1 KB rows and 110 KB rows of random
bytes, 200,000 and 7,273 rows at ``--scale 1``. Each method runs in a fresh
process that imports what it needs and reads the files once (warm) before
its clock, then touches every row's payload (its length, as Arrow compute
gives it for a batch, or ``len()`` for a row):

- ``fastio batches``: ``fastio.Dataset(files).batches(256)``;
- ``fastio samples``: iterating the ``fastio.Dataset``, one dict per row;
- ``datasets arrow``: ``load_from_disk(...).with_format("arrow").iter(256)``,
  the Arrow batches ``datasets`` gives without converting to Python;
- ``datasets rows``: iterating ``load_from_disk(...)``, one dict per row;
- ``pyarrow stream``: ``pyarrow.ipc.open_stream`` over each file
  memory-mapped (as ``datasets`` opens them), every record batch;
- ``fastio loader``, ``datasets loader``: the ``fastio.Dataset`` and the
  ``datasets`` dataset each in a torch DataLoader with 2 workers, batches of
  32 rows, the default collate.

``datasets`` and pyarrow map the files and hand out views of them: where the
consumer looks only at lengths, they never read the payloads at all, while
fastio's batches copy rows that span record batches into one. A training
job reads every byte (it decodes them): ``--read-payload`` makes every
method read every payload byte too (a sum of its 8-byte words).

Prints rows/s (medians of ``--runs``) and fastio's ratios to the others, and
writes the numbers as JSON to ``benchmarks/results``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from _imports import FASTIO_IMPORTS, collect_imports
from bench_read import warm_up

RESULTS = Path(__file__).parent / "results"
BATCH = 256
FILES = 64
CASES = {"1KB": (1_000, 200_000), "110KB": (110_000, 7_273)}
METHODS = ["fastio batches", "fastio samples", "datasets arrow", "datasets rows", "pyarrow stream",
           "fastio loader", "datasets loader"]  # fmt: skip
LOADER_BATCH, WORKERS = 32, 2


def write(folder: Path, row_bytes: int, rows: int) -> list[str]:
    """The dataset as ``datasets`` saves it (written once); its files."""
    done = folder / "files.json"
    if done.exists():
        return list(json.loads(done.read_text()))
    import datasets

    def generate() -> Any:
        rng = __import__("random").Random(row_bytes)
        for i in range(rows):
            yield {"key": f"{i:08d}", "label": i % 1000, "data": rng.randbytes(row_bytes)}

    features = datasets.Features({"key": datasets.Value("string"),
                                  "label": datasets.Value("int64"),
                                  "data": datasets.Value("binary")})  # fmt: skip
    made = datasets.Dataset.from_generator(generate, features=features,
                                           cache_dir=str(folder / "cache"))  # fmt: skip
    made.save_to_disk(str(folder / "saved"), num_shards=FILES)
    files = sorted(str(p) for p in (folder / "saved").glob("*.arrow"))
    done.write_text(json.dumps(files))
    return files


READ_PAYLOAD = os.environ.get("BENCH_READ_PAYLOAD") == "1"


def _payload(batch: Any) -> int:
    """The payload bytes of a batch (or table): their lengths, from the
    offsets; with ``--read-payload``, every byte read too (a sum of 8-byte
    words)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = batch.column("data")
    if READ_PAYLOAD:
        import numpy as np

        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        for chunk in chunks:
            offsets = np.frombuffer(chunk.buffers()[1], np.int32, len(chunk) + 1, 4 * chunk.offset)
            data = np.frombuffer(chunk.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
            _sum(data)
    return int(pc.sum(pc.binary_length(column)).as_py() or 0)


def _sum(data: Any) -> int:
    """Every byte of ``data`` (a numpy uint8 array) read: a sum of its 8-byte words."""
    import numpy as np

    whole = len(data) // 8 * 8
    return int(data[:whole].view(np.uint64).sum()) + int(data[whole:].sum())


def _row_payload(value: bytes) -> int:
    if READ_PAYLOAD:
        import numpy as np

        _sum(np.frombuffer(value, np.uint8))
    return len(value)


def _batches_read(batches: Iterable[Any]) -> tuple[int, int]:
    """Rows and payload bytes of ``batches`` (record batches or tables), each touched."""
    rows = payload = 0
    for batch in batches:
        rows += batch.num_rows
        payload += _payload(batch)
    return rows, payload


def _rows_read(samples: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """Rows and payload bytes of ``samples`` (dicts), each touched."""
    rows = payload = 0
    for sample in samples:
        rows += 1
        payload += _row_payload(sample["data"])
    return rows, payload


def _stream_batches(files: list[str]) -> Iterator[Any]:
    """Every record batch of the files, each read as a stream from its mapping."""
    import pyarrow as pa

    for path in files:
        with pa.memory_map(path) as source, pa.ipc.open_stream(source) as reader:
            yield from reader


def run(method: str, folder: Path, files: list[str]) -> tuple[int, int]:
    """Rows and payload bytes of one pass of ``method`` over the files."""
    if method.startswith("fastio"):
        import fastio

        with fastio.Dataset(files, format="arrow", shuffle=False) as dataset:
            if method == "fastio batches":
                return _batches_read(dataset.batches(BATCH))
            if method == "fastio loader":
                return _loader_read(dataset)
            return _rows_read(dataset)
    if method.startswith("datasets"):
        import datasets

        saved = datasets.load_from_disk(str(folder / "saved"))
        if method == "datasets arrow":
            return _batches_read(saved.with_format("arrow").iter(batch_size=BATCH))
        if method == "datasets loader":
            return _loader_read(saved)
        return _rows_read(saved)
    return _batches_read(_stream_batches(files))


def _loader_read(dataset: Any) -> tuple[int, int]:
    """Rows and payload bytes through a DataLoader with ``WORKERS`` workers
    and the default collate (a batch: a dict of lists), each payload touched."""
    from torch.utils.data import DataLoader

    rows = payload = 0
    for batch in DataLoader(dataset, batch_size=LOADER_BATCH, num_workers=WORKERS):
        rows += len(batch["data"])
        payload += sum(map(_row_payload, batch["data"]))
    return rows, payload


def child(method: str, folder: str) -> None:
    """One method in this fresh process: imports, a warm-up read, the clock."""
    import importlib

    for module in (*FASTIO_IMPORTS, "datasets", "pyarrow.ipc"):
        importlib.import_module(module)
    collect_imports()
    files = json.loads((Path(folder) / "files.json").read_text())
    warm_up(files)
    started = time.perf_counter()
    rows, payload = run(method, Path(folder), files)
    print(json.dumps({"rows": rows, "payload": payload,
                      "seconds": time.perf_counter() - started}))  # fmt: skip


def measure(method: str, folder: Path) -> dict[str, Any]:
    result = subprocess.run([sys.executable, __file__, "--child", method, str(folder)],
                            capture_output=True, text=True, check=False)  # fmt: skip
    if result.returncode:
        raise RuntimeError(f"{method} failed: {result.stderr[-2000:]}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/work/data/hf-streams"))
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--read-payload", action="store_true",
                        help="every method reads every payload byte (a training job decodes "
                             "them), not only the payloads' lengths")  # fmt: skip
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.read_payload:
        os.environ["BENCH_READ_PAYLOAD"] = "1"  # the children's consumer
    methods = args.methods.split(",")
    report: dict[str, Any] = {"scale": args.scale, "runs": args.runs,
                              "read_payload": args.read_payload, "cases": {}}  # fmt: skip
    for case in args.cases.split(","):
        row_bytes, rows = CASES[case]
        rows = max(int(rows * args.scale), FILES)
        folder = args.data_dir / f"{case}-{rows}"
        folder.mkdir(parents=True, exist_ok=True)
        print(f"{case}: {rows} rows of {row_bytes} bytes in {folder}", flush=True)
        write(folder, row_bytes, rows)
        seconds: dict[str, list[float]] = {m: [] for m in methods}
        for number in range(args.runs):
            # Alternated, so that the machine's state drifts under every method alike.
            for method in methods if number % 2 == 0 else methods[::-1]:
                got = measure(method, folder)
                if got["rows"] != rows:
                    raise RuntimeError(f"{method} read {got['rows']} rows of {rows}")
                seconds[method].append(got["seconds"])
                print(f"  run {number + 1}: {method:16} {rows / got['seconds']:>12,.0f} rows/s",
                      flush=True)  # fmt: skip
        rates = {m: rows / statistics.median(s) for m, s in seconds.items()}
        report["cases"][case] = {"rows": rows, "row_bytes": row_bytes, "seconds": seconds,
                                 "rows_per_s": rates}  # fmt: skip
        touched = "every payload byte read" if args.read_payload else "payload lengths"
        print(f"\n{case} rows, warm, {touched}, rows/s (medians of {args.runs})")
        ours = [m for m in rates if m.startswith("fastio")]  # each beside every method
        print("| method | rows/s |" + "".join(f" {m} / it |" for m in ours))
        print("| --- | ---: |" + " ---: |" * len(ours))
        for method, rate in rates.items():
            ratios = "".join(f" {rates[m] / rate:.2f} |" for m in ours)
            print(f"| {method} | {rate:,.0f} |{ratios}")
        print()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"arrow-streams-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    main()
