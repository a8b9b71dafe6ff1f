"""What a benchmark's child process imports before its clock, and does between
its imports and its clock."""

from __future__ import annotations

import gc

# fastio and the frameworks it feeds: a once-per-process cost, kept out of
# the clock of every method that runs fastio.
FASTIO_IMPORTS = (
    "fastio",
    "fastio.dataset._batching",  # and what a dataset loads where it is used: batches,
    "fastio.dataset._dataset",
    "fastio.dataset._stream",  # a streamed first epoch
    "fastio.formats._arrays",  # the formats load where a dataset reads them: all here
    "fastio.formats._lines",
    "fastio.formats._tables",
    "fastio.formats._tfrecord",
    "fastio.formats._webdataset",
    "fastio.plan._stream",
    "numpy",
    "pyarrow",
    "pyarrow.compute",
    "torch",
    "torch.utils.data",
    "uvloop",
)


def collect_imports() -> None:
    """Collect what the imports left, as a training process has long before
    its first epoch: in a fresh process the first full collection after
    importing torch (about 0.1 s) would land in whichever method runs."""
    gc.collect()
