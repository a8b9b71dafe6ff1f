"""Shuffle spill: a shuffle window bigger than its memory bound goes to a tier file.

A shuffled epoch delivers each window (see :mod:`fastio.plan._windows`) in a
permutation, so the whole window must be at hand before its first sample
leaves. In memory that costs the window's bytes; with ``shuffle_memory`` set,
a window larger than it is written, sample by sample as it is decoded, to a
spill file placed by the tiering policy (kind ``spill``, random access, read
once), then read back in the permutation's order, one positioned read per
sample, and removed. The order, and so exactly-once delivery and resume, is
the same either way: only where the window waits changes.

Samples are stored pickled (protocol 5): whatever a format decodes to (dicts
of bytes, arrays, records) comes back equal.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from typing import TYPE_CHECKING, Any

from fastio.dataset._reads import SKIPPED

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    import numpy as np

    from fastio.tiering import Tiering

__all__ = ["MISSING", "ShuffleSpill", "make_spill"]

MISSING = object()
"""Stands for a sample of the window that a failed read never produced."""


class ShuffleSpill:
    """Spills windows over ``memory`` bytes to files placed by ``tiering`` (by
    default one tier: the temporary directory, as large as its free space)."""

    def __init__(self, memory: int, tiering: Tiering | None = None) -> None:
        if isinstance(memory, bool) or not isinstance(memory, int) or memory < 1:
            raise ValueError(f"shuffle_memory must be a positive byte count, not {memory!r}")
        self.memory = memory
        self._tiering = tiering
        self.windows_spilled = 0

    @property
    def tiering(self) -> Tiering:
        if self._tiering is None:
            from fastio.tiering import Tier, Tiering

            folder = tempfile.gettempdir()
            free = os.statvfs(folder)
            self._tiering = Tiering([Tier("tmp", folder, max(1, free.f_bavail * free.f_frsize))])
        return self._tiering

    def applies(self, nbytes: int, columnar: bool) -> bool:
        """Whether a window of ``nbytes`` spills (columnar windows stay tables)."""
        return not columnar and nbytes > self.memory

    def window(
        self, decoded: Iterable[tuple[int, Iterable[Any]]], count: int, sequence: np.ndarray,
        nbytes: int,
    ) -> Iterator[Any]:  # fmt: skip
        """The window's samples in ``sequence`` order (positions in the window),
        :data:`MISSING` for those no read produced. ``decoded`` gives each read's
        samples with the window position of its first."""
        import numpy as np

        offsets = np.full(count, -1, np.int64)
        lengths = np.zeros(count, np.int64)
        with self.tiering.temporary("spill", nbytes, access="random", reuse=1.0,
                                    producer="fastio.shuffle") as file:  # fmt: skip
            for at, samples in decoded:
                for slot, sample in enumerate(samples, at):
                    if sample is SKIPPED:  # a damaged record: its slot stays missing
                        continue
                    blob = pickle.dumps(sample, protocol=5)
                    offsets[slot], lengths[slot] = file.tell(), len(blob)
                    file.write(blob)
            self.windows_spilled += 1
            for slot in sequence:
                offset = int(offsets[slot])
                if offset < 0:
                    yield MISSING
                    continue
                yield pickle.loads(file.pread(int(lengths[slot]), offset))


def make_spill(memory: int | None, tiering: Tiering | None) -> ShuffleSpill | None:
    """The dataset's spill: None (windows stay in memory) without ``memory``."""
    if memory is None:
        return None
    return ShuffleSpill(memory, tiering)
