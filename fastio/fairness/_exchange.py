"""Ranks exchange their totals through files in a shared folder.

Each rank writes a small JSON summary (``rank-<r>.json``, replaced atomically)
when it closes a window and when it is asked for a report, and reads the
others'. The folder works wherever the ranks see the same files: one node's
temporary folder, or a shared filesystem named by ``exchange_dir`` for jobs on
many nodes. Unlike a collective (``all_gather``) it never blocks and needs no
lockstep between ranks, so it can run inside DataLoader workers, which are not
part of the process group.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["FileExchange", "job_folder"]

# Variables that name one run of a distributed job (torchrun, SLURM, MPI launchers).
_JOB_VARIABLES = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_ADDR", "MASTER_PORT",
                  "OMPI_COMM_WORLD_SIZE")  # fmt: skip


def job_folder(urls: Iterable[str], seed: int, exchange_dir: str | None) -> str:
    """``exchange_dir``, or a folder under the temporary folder named after the
    job (its launcher's run variables) and the dataset (its URLs and seed), the
    same for every rank of one job on a node."""
    if exchange_dir is not None:
        return exchange_dir
    key = hashlib.sha256()
    for name in _JOB_VARIABLES:
        key.update(f"{name}={os.environ.get(name, '')};".encode())
    key.update(f"seed={seed};".encode())
    for url in urls:
        key.update(url.encode() + b"\0")
    user = os.getuid()
    return os.path.join(tempfile.gettempdir(), f"fastio-fairness-{user}-{key.hexdigest()[:16]}")


class FileExchange:
    """Rank summaries in ``folder`` (made on first write)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def _path(self, rank: int) -> str:
        return os.path.join(self.folder, f"rank-{rank}.json")

    def publish(self, rank: int, summary: dict[str, Any]) -> None:
        """Replace this rank's summary (readers never see a half-written one)."""
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        final = self._path(rank)
        temporary = f"{final}.{os.getpid()}.tmp"
        with open(temporary, "w") as handle:
            json.dump({**summary, "rank": rank, "time": time.time()}, handle)
        os.replace(temporary, final)

    def gather(self, world_size: int, max_age: float) -> dict[int, dict[str, Any]]:
        """Summaries of ranks ``0..world_size-1`` written within ``max_age`` seconds
        (older files are of ranks that stopped, or of an earlier run)."""
        now = time.time()
        found: dict[int, dict[str, Any]] = {}
        try:  # one listing, then only the files that are there
            with os.scandir(self.folder) as entries:
                names = [entry.name for entry in entries]
        except OSError:
            return found
        for name in names:
            number = name.removeprefix("rank-").removesuffix(".json")
            if not (name.endswith(".json") and number.isdigit() and int(number) < world_size):
                continue
            try:
                with open(os.path.join(self.folder, name)) as handle:
                    summary = json.load(handle)
            except (OSError, ValueError):
                continue
            if isinstance(summary, dict) and now - float(summary.get("time", 0)) <= max_age:
                found[int(number)] = summary
        return found

    def remove(self, rank: int) -> None:
        """Remove this rank's summary, and the folder once it is empty."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(rank))
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)
