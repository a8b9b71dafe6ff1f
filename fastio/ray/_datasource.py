"""FastIODatasource: a fastio.Dataset read by Ray Data's read tasks.

Ray asks a datasource for read tasks (``get_read_tasks(parallelism)``), ships
each to a worker process and calls it there for blocks. The driver opens the
dataset (its layouts come from the indexes where there are any), then splits it
one of two ways:

* by samples, where every shard is indexed: the dataset goes into Ray's object
  store once, and task ``i`` of ``n`` reads the part that rank ``i`` of ``n``
  would (:meth:`fastio.Dataset.as_rank`): contiguous samples of the epoch's
  shard order, disjoint from every other task's, their count known up front;
* by shards, where some are not indexed yet (a dataset never seen): task ``i``
  reads whole shards of its own, streamed as a first epoch streams them, and
  leaves their indexes behind, so the driver never reads the data itself and
  the next read splits by samples.

Each task reads through its own fastio reader, in columnar batches that become
blocks without a Python object per sample.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fastio._errors import MissingExtraError

try:
    import ray
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockAccessor, BlockMetadata
except ImportError:
    raise MissingExtraError("Ray datasets", "ray", "ray") from None

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Iterator

    from fastio.dataset._dataset import Dataset

__all__ = ["FastIODatasource", "read"]

# Knobs that would make a task's part something other than 1/n of the samples
# exactly once: Ray's read tasks are the ranks.
_SPLIT_KNOBS = ("rank", "world_size")
# Rows per block when a block of the target size would be larger (tiny samples).
_MAX_BLOCK_ROWS = 1 << 16
# Rows per block of shards read before their sample sizes are known.
_SHARD_BLOCK_ROWS = 1024


class FastIODatasource(Datasource):  # type: ignore[misc]
    """The samples of ``fastio.Dataset(urls, format, **knobs)`` as Ray blocks.

    Every knob of :class:`fastio.Dataset` applies (formats, error policy,
    reader knobs, remote storage, cache), except ``rank`` and ``world_size``
    (the read tasks split the samples) and ``remainder`` other than
    ``"exact"`` (every sample is read once). ``shuffle`` defaults to False
    here, as Ray orders or shuffles rows itself; with ``shuffle=True`` the
    tasks read the shard order and windows of ``(seed, epoch)``. ``fairness``
    defaults to off (read tasks are not training ranks).

    ``split``: ``"samples"`` (contiguous samples per task, any number of
    tasks; shards not indexed yet are indexed on the driver first),
    ``"shards"`` (whole shards per task, at most one task per shard; nothing
    is read on the driver) or ``"auto"`` (samples where every shard is
    indexed, else shards). ``block_rows``: rows per block (default: about
    Ray's target block size of encoded bytes).

    Webdataset, TFRecord, Parquet, Arrow, JSONL and lines shards give Arrow
    tables with the columns of :meth:`fastio.Dataset.batches`; npy and fixed
    shards a tensor column ``data``.

    Raises ValueError for ``rank``/``world_size``/``remainder`` as above, and
    what :class:`fastio.Dataset` raises for its knobs and shards.
    """

    def __init__(
        self,
        urls: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        format: str | None = None,
        *,
        epoch: int = 0,
        split: Literal["auto", "samples", "shards"] = "auto",
        block_rows: int | None = None,
        **knobs: Any,
    ) -> None:
        super().__init__()
        if split not in ("auto", "samples", "shards"):
            raise ValueError(f"split must be 'auto', 'samples' or 'shards', not {split!r}")
        given = sorted(name for name in _SPLIT_KNOBS if knobs.get(name) is not None)
        if given:
            raise ValueError(f"{', '.join(given)}: Ray's read tasks split the samples; "
                             "split the Ray dataset instead (streaming_split)")  # fmt: skip
        if knobs.get("remainder", "exact") != "exact":
            raise ValueError(f"remainder={knobs['remainder']!r} would drop or repeat samples: "
                             "Ray's read tasks read each sample once")  # fmt: skip
        if block_rows is not None and block_rows < 1:
            raise ValueError(f"block_rows must be positive, not {block_rows}")
        knobs.setdefault("shuffle", False)
        knobs.setdefault("fairness", False)
        from fastio.dataset._dataset import Dataset

        self.dataset: Dataset = Dataset(urls, format, **knobs)
        self.dataset.close()  # its reader's threads: the tasks read with their own
        self.epoch = epoch
        self.block_rows = block_rows
        indexed = all(layout is not None for layout in self.dataset.layouts)
        self.split = split if split != "auto" else "samples" if indexed else "shards"
        self._stored: tuple[str, Any] | None = None  # its owner, the indexed dataset put

    def get_name(self) -> str:
        return f"FastIO({self.dataset.format})"

    def _index(self) -> Dataset:
        if not all(layout is not None for layout in self.dataset.layouts):
            self.dataset.index()
            self.dataset.close()
        return self.dataset

    def estimate_inmemory_data_size(self) -> int | None:
        layouts = self.dataset.layouts
        if any(layout is None for layout in layouts):
            return None  # not indexed: its size was never needed
        return sum(layout.size for layout in layouts if layout is not None)

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        if self.split == "shards":
            return self._shard_tasks(parallelism, per_task_row_limit)
        dataset = self._index()
        total = dataset.total
        if total == 0:
            return []
        tasks = max(1, min(parallelism, total))
        stored: Any = dataset
        if ray.is_initialized():
            # Once per driver connection: the put belongs to this driver, and a
            # datasource read again after ray.init() anew must not hand its
            # tasks a reference the old connection owned.
            context = ray.get_runtime_context()  # a new cluster has a new node id
            owner = f"{context.get_node_id()}/{context.get_worker_id()}"
            if self._stored is None or self._stored[0] != owner:
                self._stored = (owner, ray.put(dataset))
            stored = self._stored[1]
        encoded = max(1, sum(layout.size for layout in dataset.layouts if layout is not None))
        block_rows = self.block_rows or _rows_per_block(encoded, total, data_context)
        bases = dataset.bases
        read_tasks = []
        for task in range(tasks):
            samples = dataset.order(self.epoch, rank=task, world_size=tasks)
            shards = np.unique(np.searchsorted(bases, samples, side="right") - 1)
            metadata = BlockMetadata(
                num_rows=len(samples), size_bytes=encoded * len(samples) // total,
                input_files=[dataset.urls[shard] for shard in shards], exec_stats=None,
            )  # fmt: skip
            read_tasks.append(ReadTask(
                _read_fn(stored, task, tasks, self.epoch, block_rows), metadata,
                per_task_row_limit=per_task_row_limit,
            ))  # fmt: skip
        return read_tasks

    def _shard_tasks(self, parallelism: int, per_task_row_limit: int | None) -> list[ReadTask]:
        """Whole shards per task, contiguous runs of the URL list."""
        urls = self.dataset.urls
        tasks = max(1, min(parallelism, len(urls)))
        block_rows = self.block_rows or _SHARD_BLOCK_ROWS
        spec = self.dataset.spec
        read_tasks = []
        for task in range(tasks):
            mine = urls[len(urls) * task // tasks : len(urls) * (task + 1) // tasks]
            # One participant: neither torch.distributed nor RANK may split it further.
            part = dataclasses.replace(
                spec, urls=tuple(mine),
                split=dataclasses.replace(spec.split, rank=0, world_size=1),
            )  # fmt: skip
            metadata = BlockMetadata(num_rows=None, size_bytes=None, input_files=list(mine),
                                     exec_stats=None)  # fmt: skip
            read_tasks.append(ReadTask(
                _read_shards_fn(part, self.epoch, block_rows), metadata,
                per_task_row_limit=per_task_row_limit,
            ))  # fmt: skip
        return read_tasks


def _rows_per_block(encoded: int, total: int, data_context: Any) -> int:
    """Rows that hold about Ray's target block size of encoded bytes."""
    target = getattr(data_context, "target_max_block_size", None) or 128 << 20
    return max(1, min(_MAX_BLOCK_ROWS, target * total // encoded))


def _read_fn(stored: Any, task: int, tasks: int, epoch: int, block_rows: int) -> Any:
    def read_part() -> Iterator[Any]:
        base = ray.get(stored) if isinstance(stored, ray.ObjectRef) else stored
        yield from _blocks(base.as_rank(task, tasks), epoch, block_rows)

    return read_part


def _read_shards_fn(spec: Any, epoch: int, block_rows: int) -> Any:
    def read_shards() -> Iterator[Any]:
        from fastio.dataset._dataset import Dataset

        yield from _blocks(Dataset.from_spec(spec), epoch, block_rows)

    return read_shards


def _blocks(part: Dataset, epoch: int, block_rows: int) -> Iterator[Any]:
    """``part``'s samples of ``epoch`` as blocks; its reader closed at the end."""
    part.set_epoch(epoch)
    try:
        for batch in part.batches(block_rows):
            yield _block(batch)
    finally:
        part.close()


def _block(batch: Any) -> Any:
    """A Ray block of one fastio batch (an Arrow record batch or numpy array)."""
    if isinstance(batch, np.ndarray):
        return BlockAccessor.batch_to_block({"data": batch})
    import pyarrow as pa

    return pa.Table.from_batches([batch])


def read(
    urls: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    format: str | None = None,
    *,
    epoch: int = 0,
    split: Literal["auto", "samples", "shards"] = "auto",
    block_rows: int | None = None,
    override_num_blocks: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    **knobs: Any,
) -> Any:
    """``ray.data.read_datasource(FastIODatasource(urls, format, **knobs))``:
    a ``ray.data.Dataset`` of the samples (see :class:`FastIODatasource`).
    ``override_num_blocks`` sets the number of read tasks (default: Ray's
    choice for the cluster); ``ray_remote_args`` go to the read tasks."""
    source = FastIODatasource(urls, format, epoch=epoch, split=split, block_rows=block_rows,
                              **knobs)  # fmt: skip
    return ray.data.read_datasource(source, override_num_blocks=override_num_blocks,
                                    ray_remote_args=ray_remote_args)  # fmt: skip
