"""What a benchmark's child process does between its imports and its clock."""

from __future__ import annotations

import gc


def collect_imports() -> None:
    """Collect what the imports left, as a training process has long before
    its first epoch: in a fresh process the first full collection after
    importing torch (about 0.1 s) would land in whichever method runs."""
    gc.collect()
