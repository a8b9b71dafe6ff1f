"""fastio.dataset: :class:`Dataset`, the drop-in iterable for training loops."""

from __future__ import annotations

from fastio.dataset._dataset import Batches, Dataset, MapStyle

__all__ = ["Batches", "Dataset", "MapStyle"]
