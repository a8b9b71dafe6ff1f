"""``fastio-bench run --format F PATTERN...``: read a dataset as training does
(samples or batches, shuffled or not) and report samples/s, MB/s and how well
the order is mixed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastio.dataset._dataset import Dataset


@dataclass
class DatasetRun:
    """One timed epoch of a dataset."""

    samples: int
    bytes: int
    seconds: float
    skipped: int
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


def read_epoch(
    dataset: Dataset, batch_size: int | None, advance: Callable[[int], None] | None = None
) -> DatasetRun:
    """Time one epoch: every sample (or batch) taken, nothing else done with it."""
    reader = dataset.reader
    next(iter(reader.stream([])), None)  # start the reader's loop before the clock
    before = reader.stats()
    skipped_before = dataset.stats()["skipped"]
    samples = 0
    start = time.perf_counter()
    if batch_size:
        for batch in dataset.batches(batch_size):
            rows = len(batch) if hasattr(batch, "__len__") else batch.num_rows
            samples += rows
            if advance is not None:
                advance(rows)
    else:
        for _ in dataset:
            samples += 1
            if advance is not None and not samples % 1024:
                advance(1024)
    seconds = time.perf_counter() - start
    window = reader.stats().since(before)
    skipped = dataset.stats()["skipped"] - skipped_before
    return DatasetRun(samples, window.bytes_delivered, seconds, skipped, window.as_dict())


def describe(dataset: Dataset) -> dict[str, Any]:
    """The dataset's options as they show in reports (one home: the dataset)."""
    return {
        "format": dataset.format,
        "shards": len(dataset.urls),
        "total_samples": dataset.total,
        "shuffle": dataset.shuffle,
        "seed": dataset.seed,
        "shuffle_buffer": dataset.spec.shuffle.buffer,
        "shuffle_shards": dataset.spec.shuffle.shards,
        "remainder": dataset.remainder,
        "on_error": dataset.on_error,
    }
