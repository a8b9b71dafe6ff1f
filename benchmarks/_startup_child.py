"""One run of ``bench_startup.py``: a fresh process that imports what its
clock is not to count, then times a dataset's construction to its first
sample and prints the report as JSON.

Kept apart from ``bench_startup.py``, whose own imports (fastio through
``bench_read``, yaml, asyncio, pydantic, ...) would otherwise be loaded before
the clock and make ``--imports`` count less than a training script waits for.
Before the clock: only the interpreter's start-up modules and what
:data:`BASE_IMPORTS` or :data:`IMPORTS` name.

    python benchmarks/_startup_child.py METHOD URL INDEX_DIR COUNTED
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Any

from _imports import FASTIO_IMPORTS, collect_imports

LOADER_BATCH = 256
WORKERS = 2
IMPORTS = (*FASTIO_IMPORTS, "webdataset")  # as bench_datasets.py's webdataset methods
BASE_IMPORTS = ("numpy", "pyarrow", "torch", "torch.utils.data")  # a training script's own


def first_item(method: str, url: str) -> tuple[Any, Any]:
    """Construct the method's dataset and return its first sample or batch,
    with the iterator that gave it (kept, so that the clock does not also run
    while the iteration is torn down: a user holding the first sample has
    not waited for that)."""
    if method.startswith("webdataset"):
        import webdataset

        dataset: Any = webdataset.WebDataset(url, shardshuffle=False)
    else:
        import fastio

        knobs: dict[str, Any] = {} if method == "fastio shuffled" else {"shuffle": False}
        dataset = fastio.Dataset(url, format="webdataset", **knobs)
    if "loader" in method:
        from torch.utils.data import DataLoader

        context = "spawn" if method.endswith("spawn") else None  # the dataset pickled to each
        dataset = DataLoader(dataset, batch_size=LOADER_BATCH, num_workers=WORKERS,
                             multiprocessing_context=context)  # fmt: skip
    iterator = iter(dataset)
    return next(iterator), iterator


def child(method: str, url: str, index_dir: str, counted: str) -> None:
    # With the imports counted, only what a training script has imported
    # already comes before the clock; the library's own import is timed.
    for module in BASE_IMPORTS if counted == "1" else IMPORTS:
        importlib.import_module(module)
    collect_imports()
    if method == "fastio never seen":  # where indexes go unless told: empty
        os.environ["XDG_CACHE_HOME"] = index_dir
    wall, cpu, main_cpu = time.perf_counter(), time.process_time(), time.thread_time()
    item, iterator = first_item(method, url)
    report = {"seconds": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
              "main_cpu": time.thread_time() - main_cpu, "ok": item is not None}  # fmt: skip
    # Then what leaving the iteration there costs (a `break` out of the loop).
    closing = time.perf_counter()
    del iterator
    report["close"] = time.perf_counter() - closing
    import json  # after the clock: the methods may need it, and find it loaded only if they load it

    print(json.dumps(report), flush=True)
    os._exit(0)  # no epoch, and no teardown of the process


if __name__ == "__main__":
    child(*sys.argv[1:])
