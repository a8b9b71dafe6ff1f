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

from fastio.plan._participant import job_run

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["FileExchange", "job_exchange"]


def job_exchange(urls: Iterable[str], seed: int, exchange_dir: str | None) -> FileExchange:
    """The exchange in ``exchange_dir``, or in a folder under the temporary
    folder named after the job (its launcher's run variables) and the dataset
    (its URLs and seed), the same for every rank of one job on a node."""
    if exchange_dir is not None:
        return FileExchange(exchange_dir)
    listed = urls if isinstance(urls, (list, tuple)) else list(urls)
    return FileExchange(None, (job_run(), seed, listed))


def _folder_name(job: list[str], seed: int, urls: Sequence[str]) -> str:
    key = hashlib.sha256()
    for variable in job:
        key.update(f"{variable};".encode())
    key.update(f"seed={seed};".encode())
    if urls:  # each URL ended by a NUL, hashed at once (a dataset may have thousands)
        key.update(("\0".join(urls) + "\0").encode())
    return f"fastio-fairness-{os.getuid()}-{key.hexdigest()[:16]}"


class FileExchange:
    """Rank summaries in ``folder`` (made on first write); None: a folder in
    the temporary folder named after ``job`` (the job's run variables, the
    seed and the URLs), found when first used (the first question for the
    temporary folder writes a file to try it, and a digest of thousands of
    URLs takes a while: a dataset need not wait for either before its first
    sample). Pickled as its folder."""

    def __init__(self, folder: str | None,
                 job: tuple[list[str], int, Sequence[str]] | None = None) -> None:  # fmt: skip
        self._folder = folder
        self._job = job

    @property
    def folder(self) -> str:
        if self._folder is None:
            assert self._job is not None
            self._folder = os.path.join(tempfile.gettempdir(), _folder_name(*self._job))
            self._job = None
        return self._folder

    def __getstate__(self) -> dict[str, Any]:
        return {"_folder": self.folder, "_job": None}

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
