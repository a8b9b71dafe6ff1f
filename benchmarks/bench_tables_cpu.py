"""Parquet and Arrow IPC: fastio's ``.batches(256)`` beside pyarrow's readers, as CPU per row.

    python benchmarks/bench_tables_cpu.py --case-dir /path/to/large-7273x110000

``--case-dir`` is one case of the datasets ``benchmarks/bench_datasets.py``
writes (it holds ``manifest.json`` and ``parquet/`` and ``arrow/`` copies).
fastio reads each copy as a Dataset's ``.batches(256)``: batches of exactly
256 rows, across row groups and files. pyarrow reads each file on its own:
``ParquetFile.iter_batches(256)`` and ``ipc.open_file(...).get_batch(i)``, which
yield a file's rows as they are (a file of 113 rows gives one batch of 113);
and the same cut into batches of exactly 256 rows across files (``... 256``),
as a training loop that wants equal batches does with them (:func:`rebatched`).
Every batch's ``data`` column lengths are summed, as a consumer would touch it.

Wall-clock rates swing on a shared machine; CPU time per row does much less,
and the thread split says which thread a change relieves. Every run is a
fresh process that reads the files once untimed first (warm page cache) and
times the next pass (a fresh Dataset, as a new epoch's would be); methods run
in a rotated order for ``--repeats`` rounds; medians are printed with each
fastio method's ratio to pyarrow's reader of the same files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _cpu_per_sample import main, timed_pass

METHODS = ("fastio parquet", "pyarrow parquet", "pyarrow parquet 256",
           "fastio arrow", "pyarrow ipc", "pyarrow ipc 256")  # fmt: skip
PEERS = {"fastio parquet": "pyarrow parquet", "pyarrow parquet": "pyarrow parquet",
         "pyarrow parquet 256": "pyarrow parquet", "fastio arrow": "pyarrow ipc",
         "pyarrow ipc": "pyarrow ipc", "pyarrow ipc 256": "pyarrow ipc"}  # fmt: skip
BATCH = 256


def rebatched(batches: Iterator[Any], size: int) -> Iterator[Any]:
    """Record batches of exactly ``size`` rows (the last may be short) from
    batches of any size: a batch within one is a zero-copy slice, one across
    several is copied together once (what fastio's ``.batches(size)`` does),
    with ``pyarrow.concat_batches`` where pyarrow has it (19 and newer)."""
    import pyarrow as pa

    def joined(pieces: list[Any]) -> Any:
        if len(pieces) == 1:
            return pieces[0]
        if hasattr(pa, "concat_batches"):
            return pa.concat_batches(pieces)
        return pa.Table.from_batches(pieces).combine_chunks().to_batches()[0]

    carry: list[Any] = []
    rows = 0
    for batch in batches:
        start = 0
        while rows + batch.num_rows - start >= size:
            take = size - rows
            yield joined([*carry, batch.slice(start, take)])
            carry, rows, start = [], 0, start + take
        if start < batch.num_rows:
            carry.append(batch.slice(start))
            rows += batch.num_rows - start
    if rows:
        yield joined(carry)


def _count(batches: Iterator[Any]) -> int:
    import pyarrow.compute as pc

    rows = 0
    for batch in batches:
        rows += batch.num_rows
        pc.sum(pc.binary_length(batch.column("data")))
    return rows


def _ipc_batches(path: str) -> Iterator[Any]:
    import pyarrow.ipc

    with pyarrow.ipc.open_file(path) as reader:
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def _rows(method: str, paths: list[str], url: str) -> int:
    if method.startswith("fastio"):
        import fastio

        with fastio.Dataset(url, format=method.split()[1], shuffle=False) as ds:
            return _count(ds.batches(BATCH))
    if method.startswith("pyarrow parquet"):
        import pyarrow.parquet as pq

        batches = (b for p in paths for b in pq.ParquetFile(p).iter_batches(batch_size=BATCH))
    else:
        batches = (b for p in paths for b in _ipc_batches(p))
    return _count(rebatched(batches, BATCH) if method.endswith(" 256") else batches)


def child(method: str, case_dir: str) -> dict[str, float]:
    manifest = json.loads(Path(case_dir, "manifest.json").read_text())
    copy = manifest["copies"]["parquet" if "parquet" in method else "arrow"]
    return timed_pass(lambda: _rows(method, copy["paths"], copy["url"]),
                      manifest["case"]["samples"], "rows")  # fmt: skip


if __name__ == "__main__":
    main(__doc__.split("\n")[0], __file__, METHODS, PEERS, child)
