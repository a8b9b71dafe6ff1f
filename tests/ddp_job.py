"""A training job for tests, run by torchrun: every rank trains a tiny model for
3 epochs over a fastio dataset, plainly under DDP or with the Lightning
Trainer, for each of {samples, batches} x {0, 2 DataLoader workers}, and
writes what it saw to ``<out>/rank-<r>.json``: per combination and epoch the
keys it trained on, the optimizer steps taken and ``len(loader)``.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/ddp_job.py \\
        {ddp,lightning} OUT PATTERN
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import fastio
from tests.shards import batch_keys, key_of

EPOCHS = 3
BATCH = 16
COMBINATIONS = [(mode, workers) for mode in ("samples", "batches") for workers in (0, 2)]


def keys(batch: list[Any]) -> torch.Tensor:
    return torch.tensor([key_of("webdataset", sample) for sample in batch])


def batch_of(batch: Any) -> torch.Tensor:
    return batch if isinstance(batch, torch.Tensor) else torch.tensor(
        batch_keys("webdataset", batch))  # fmt: skip


def loader_for(pattern: str, mode: str, workers: int) -> DataLoader[Any]:
    dataset = fastio.Dataset(pattern, seed=5, shuffle_buffer=40_000, batch_size=BATCH)
    if mode == "batches":
        return DataLoader(dataset.batches(BATCH), batch_size=None, num_workers=workers)
    return DataLoader(dataset, batch_size=BATCH, num_workers=workers, collate_fn=keys)


def with_ddp(pattern: str, mode: str, workers: int) -> list[dict[str, Any]]:
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loader = loader_for(pattern, mode, workers)
    epochs = []
    for _ in range(EPOCHS):
        got, steps = [], 0
        for batch in loader:
            values = batch_of(batch)
            got.extend(values.tolist())
            loss = model(values.float().unsqueeze(1)).sum()
            optimizer.zero_grad()
            loss.backward()  # an all-reduce: ranks must take the same number of steps
            optimizer.step()
            steps += 1
        epochs.append({"keys": got, "steps": steps, "len": len(loader)})
    return epochs


def with_lightning(pattern: str, mode: str, workers: int) -> list[dict[str, Any]]:
    import lightning

    class Model(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen: list[int] = []
            self.epochs: list[dict[str, Any]] = []
            self.steps_before = 0

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            values = batch_of(batch)
            self.seen.extend(values.tolist())
            return self.layer(values.float().unsqueeze(1)).sum()

        def on_train_epoch_end(self) -> None:
            steps = self.trainer.global_step - self.steps_before
            self.steps_before = self.trainer.global_step
            self.epochs.append({"keys": self.seen, "steps": steps,
                                "len": self.trainer.num_training_batches})  # fmt: skip
            self.seen = []

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.0)

    model = Model()
    trainer = lightning.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_epochs=EPOCHS, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model, train_dataloaders=loader_for(pattern, mode, workers))
    for epoch in model.epochs:  # what len(loader) promised, the DataLoader's own count
        epoch["loader_len"] = len(loader_for(pattern, mode, workers))
    return model.epochs


def main() -> None:
    kind, out, pattern = sys.argv[1:4]
    if kind == "ddp":
        dist.init_process_group("gloo")
    run = with_ddp if kind == "ddp" else with_lightning
    results = {f"{mode}-{workers}": run(pattern, mode, workers) for mode, workers in COMBINATIONS}
    rank = dist.get_rank()
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as file:
        json.dump(results, file)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
