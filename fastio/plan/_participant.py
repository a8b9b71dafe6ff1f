"""Who is reading: this process's rank and DataLoader worker.

The rank is the dataset's explicit ``rank=``/``world_size=`` where given, else
``torch.distributed``'s when it is initialized, else the ``RANK``/``WORLD_SIZE``
environment variables, else rank 0 of 1. The worker comes from
``torch.utils.data.get_worker_info()`` (fastio never imports torch for this).
"""

from __future__ import annotations

import os
import sys

from fastio.spec._records import record

__all__ = ["Participant", "current_rank", "current_worker", "job_run"]


# Variables that name one run of a distributed job (torchrun, SLURM, MPI launchers).
_JOB_VARIABLES = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_ADDR", "MASTER_PORT",
                  "OMPI_COMM_WORLD_SIZE")  # fmt: skip


def job_run() -> list[str]:
    """``name=value`` of each variable that names this run of a job (empty
    values where unset): the same on every rank of one run, another run's
    differ."""
    return [f"{name}={os.environ.get(name, '')}" for name in _JOB_VARIABLES]


@record(frozen=True, slots=True)
class Participant:
    """One reader of an epoch: DataLoader worker ``worker`` of ``num_workers``
    on rank ``rank`` of ``world_size``."""

    rank: int
    world_size: int
    worker: int = 0
    num_workers: int = 1

    @classmethod
    def current(cls, explicit_rank: tuple[int, int] | None = None) -> Participant:
        """This process: ``explicit_rank`` (rank, world_size) where given."""
        rank, world_size = explicit_rank if explicit_rank is not None else current_rank()
        worker, num_workers = current_worker()
        return cls(rank, world_size, worker, num_workers)

    def describe(self) -> str:
        return (f"rank {self.rank}/{self.world_size}, worker "
                f"{self.worker}/{self.num_workers}")  # fmt: skip


def current_rank() -> tuple[int, int]:
    """``(rank, world_size)``: from torch.distributed when it is initialized, else
    the RANK and WORLD_SIZE environment variables, else ``(0, 1)``."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return int(distributed.get_rank()), int(distributed.get_world_size())
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return 0, 1


def current_worker() -> tuple[int, int]:
    """``(worker, num_workers)`` inside a torch DataLoader worker, else ``(0, 1)``.
    Looks only if torch is already imported: fastio never imports it for this."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    if info is None:
        return 0, 1
    return int(info.id), int(info.num_workers)
