"""``fastio-bench fairness``: read a dataset through DataLoader workers at a
training pace and show, window by window, each worker's delivery rate,
readiness, starved flag and outstanding requests; optionally with one
worker's shards behind injected latency (a drill for the monitor)."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import TYPE_CHECKING, Any

import click

from fastio.cli._config_cmd import command_spec, config_option
from fastio.cli._options import dataset_options, knob_option, output_options, reader_options
from fastio.cli._report import console, emit, pyplot
from fastio.spec import DatasetSpec, FairnessSettings

if TYPE_CHECKING:
    from pathlib import Path

    from fastio.dataset._dataset import Dataset


@click.command()
@click.argument("paths", nargs=-1)
@config_option("Read the dataset a config file describes (its fairness section included).")
@reader_options
@dataset_options
@click.option("--workers", type=click.IntRange(0, 64), default=2, show_default=True,
              help="DataLoader worker processes (0: the main process reads).")  # fmt: skip
@click.option("--batch-size", type=click.IntRange(1), default=8, show_default=True)
@click.option("--step-ms", type=float, default=5.0, show_default=True,
              help="Milliseconds the consumer spends per batch (a training step).")  # fmt: skip
@click.option("--epochs", type=click.IntRange(1), default=1, show_default=True)
@knob_option(FairnessSettings, "window_seconds")
@knob_option(FairnessSettings, "mitigate")
@click.option("--slow", multiple=True, help="Inject latency on URLs containing this (repeatable).")
@click.option("--slow-delay", type=float, default=0.04, show_default=True,
              help="Seconds added to each request of --slow URLs.")  # fmt: skip
@output_options(plot="each worker's rate per window (starved windows marked) and Jain's index")
@click.pass_context
def fairness(
    ctx: click.Context,
    /,
    paths: tuple[str, ...],
    config_file: Path | None,
    workers: int,
    batch_size: int,
    step_ms: float,
    epochs: int,
    slow: tuple[str, ...],
    slow_delay: float,
    as_json: bool,
    out_path: str | None,
    plot_path: str | None,
    **_knobs: Any,
) -> None:
    """Per-worker fairness of reading PATHS (or --config's dataset) as training
    does, in stored order (unshuffled)."""
    spec = command_spec(ctx, config_file, paths)
    if not spec.fairness.enabled:  # nothing would be watched, nor reported
        raise click.ClickException(
            "the config turns the fairness monitor off (fairness.enabled: false), which this "
            "command reports on: drop that, or set fairness.mitigate: false to watch the "
            "workers without moving their requests"
        )
    spec = spec.replace(split=dataclasses.replace(spec.split, batch_size=batch_size))
    dataset = _make_dataset(spec, slow, slow_delay)
    with dataset:
        seconds = [_epoch(dataset, workers, batch_size, step_ms / 1e3, epoch)
                   for epoch in range(epochs)]  # fmt: skip
        report = dataset.fairness.report(timeline=True)
    result = {"epochs": epochs, "epoch_seconds": seconds, "workers": workers,
              "slow": list(slow), "slow_delay": slow_delay if slow else 0.0,
              "settings": dataset.fairness.settings.as_dict(), "report": report}  # fmt: skip
    if plot_path is not None:
        plot_timeline(report, plot_path)
    emit(result, as_json, out_path, lambda: print_timeline(result), plot_path)


def _make_dataset(spec: DatasetSpec, slow: tuple[str, ...], slow_delay: float) -> Dataset:
    """The dataset of ``spec``, unshuffled; with ``slow``, its URLs that contain
    one of them read behind ``slow_delay`` seconds of latency per request."""
    from fastio.dataset._dataset import Dataset

    changes: dict[str, Any] = {"shuffle": dataclasses.replace(spec.shuffle, enabled=False)}
    if slow:
        import fastio.sources._throttled  # noqa: F401 - registers throttled://
        from fastio.sources._urls import expand_urls

        try:  # expanded where they are (folders, globs), then read behind the throttle
            urls = expand_urls(spec.urls, spec.storage_options)
        except (OSError, ValueError) as error:
            raise click.ClickException(str(error)) from None
        changes["urls"] = tuple(f"throttled://{url}" for url in urls)
        changes["storage_options"] = {"slow": list(slow), "slow_delay": slow_delay}
    try:
        return Dataset.from_spec(spec.replace(**changes))
    except (OSError, ValueError, TypeError) as error:
        raise click.ClickException(str(error)) from None


def _epoch(dataset: Dataset, workers: int, batch_size: int, step: float, epoch: int) -> float:
    dataset.set_epoch(epoch)
    if workers:
        try:
            from torch.utils.data import DataLoader
        except ImportError:
            raise click.ClickException(
                "--workers needs torch: pip install 'fastio[torch]' (or use --workers 0)"
            ) from None
        # An IterableDataset at run time (typed as a plain class where torch is optional).
        source: Any = dataset
        batches: Any = DataLoader(source, batch_size=batch_size, num_workers=workers,
                                  collate_fn=len)  # fmt: skip
    else:
        batches = dataset.batches(batch_size)
    started = time.perf_counter()
    for _ in batches:
        pace = time.perf_counter() + step
        while time.perf_counter() < pace:  # the consumer's step, on the CPU like training
            pass
    return time.perf_counter() - started


def print_timeline(result: dict[str, Any]) -> None:
    from rich.table import Table

    report = result["report"]
    table = Table(title="fastio-bench fairness: per-worker rate / readiness / requests")
    table.add_column("window", justify="right")
    table.add_column("Jain", justify="right")
    used = [w["worker"] for w in report["workers"]]
    for worker in used:
        table.add_column(f"worker {worker}", justify="right")
    for row in report["timeline"]:
        cells = []
        for entry in row["workers"]:
            if entry["rate"] is None:
                cells.append("idle")
                continue
            # A window can close with a rate but no readiness (no time asked yet): "-".
            flag = " [bold red]STARVED[/]" if entry["starved"] else ""
            cells.append(f"{_shown(entry['rate'], ',.0f')}/s {_shown(entry['readiness'], '.0%')} "
                         f"q={entry['outstanding_requests']}{flag}")  # fmt: skip
        table.add_row(str(row["window"]), _shown(row["jain_index"], ".3f"), *cells)
    console().print(table)
    seconds = ", ".join(f"{s:.2f}" for s in result["epoch_seconds"])
    console().print(f"epoch seconds: {seconds}  starved now: {report['starved_workers'] or 'none'}"
                    f"  mitigation: {'on' if report['mitigate'] else 'off'}")  # fmt: skip


def _shown(value: float | None, spec: str) -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


def plot_timeline(report: dict[str, Any], path: str) -> None:
    """Rates per worker over the windows, starved windows marked, Jain's index below."""
    plt = pyplot()
    rows = report["timeline"]
    figure, (rates, jain) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    for worker in [w["worker"] for w in report["workers"]]:
        points = [(r["window"], e["rate"], e["starved"]) for r in rows for e in r["workers"]
                  if e["worker"] == worker and e["rate"] is not None]  # fmt: skip
        if not points:
            continue
        line = rates.plot([p[0] for p in points], [p[1] for p in points],
                          label=f"worker {worker}")[0]  # fmt: skip
        starved = [p for p in points if p[2]]
        rates.scatter([p[0] for p in starved], [p[1] for p in starved], color=line.get_color(),
                      marker="x", s=60)  # fmt: skip
    rates.set_ylabel("samples/s when asked (x: starved)")
    rates.legend()
    jain.plot([r["window"] for r in rows], [r["jain_index"] for r in rows], color="black")
    jain.set_ylabel("Jain's index")
    jain.set_xlabel("window")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
