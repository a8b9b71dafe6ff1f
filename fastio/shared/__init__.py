"""fastio.shared: small arrays shared by the processes of one rank.

A file under ``/dev/shm`` (a RAM-backed tmpfs; the temporary folder where it is
missing), mapped by every process: the dataset's epoch ledger, the fairness
board and its claim table. Nothing is pickled or queued: a forked DataLoader
worker inherits the name, a spawned one gets it with the pickled dataset.
"""

from __future__ import annotations

from fastio.shared._mapped import SharedArray, remove_owned, shared_folder, shared_path

__all__ = ["SharedArray", "remove_owned", "shared_folder", "shared_path"]
