"""``fastio-bench tiering``: replay intermediate-file traces through the placement
policies; ``fastio-bench tiering probe``: detect and measure the configured tiers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fastio.cli._config_cmd import config_option, load
from fastio.cli._report import console, error_console
from fastio.spec import TierSettings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fastio.tiering import Result, Tier


@click.group(invoke_without_command=True)
@click.option("--files", type=click.IntRange(10), default=2000, show_default=True,
              help="Files per period of the synthetic trace.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Trace seed.")
@click.option("--hours", type=float, default=24.0, show_default=True, help="Hours per period.")
@click.option("--budget", "budgets", type=click.FloatRange(0.001, 1.0), multiple=True,
              help="SSD budget as a fraction of the peak live bytes (repeat; default "
                   "0.1, 0.2, 0.5).")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the results as JSON here.")  # fmt: skip
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Save a plot here (needs the 'plot' extra).")  # fmt: skip
@click.pass_context
def tiering(
    ctx: click.Context, files: int, seed: int, hours: float, budgets: tuple[float, ...],
    json_path: Path | None, plot_path: Path | None,
) -> None:  # fmt: skip
    """Replay a trace of intermediate files (train on one period, score on the
    next) through each policy: the fraction of all I/O the SSD serves and the
    bytes written to it, at each SSD budget."""
    if ctx.invoked_subcommand is not None:
        return
    from fastio.tiering import BUDGETS, compare, make_trace

    with error_console().status("making the trace"):
        trace = make_trace(files, seed, hours)
    status = error_console().status("replaying")
    with status:
        results = compare(trace, budgets or BUDGETS, progress=lambda text: status.update(text))
    _print(results)
    if json_path is not None:
        data = {"files_per_period": files, "seed": seed, "hours": hours,
                "results": [result.as_dict() for result in results]}  # fmt: skip
        json_path.write_text(json.dumps(data, indent=1) + "\n")
    if plot_path is not None:
        plot(results, plot_path)


def _print(results: Sequence[Result]) -> None:
    from rich.table import Table

    table = Table(title="Tiering: held-out period")
    for column in ("SSD budget", "policy", "I/O from SSD", "vs oracle", "SSD written",
                   "demotions"):  # fmt: skip
        table.add_column(column, justify="left" if column == "policy" else "right")
    oracle = {r.budget_fraction: r.ssd_fraction for r in results if r.policy == "oracle"}
    for result in results:
        best = oracle.get(result.budget_fraction) or 0.0
        share = f"{result.ssd_fraction / best:.2f}" if best else "-"
        table.add_row(f"{result.budget_fraction:.0%}", result.policy,
                      f"{result.ssd_fraction:.1%}", share,
                      f"{result.ssd_bytes_written / (1 << 30):,.0f} GiB",
                      str(result.demotions))  # fmt: skip
    console().print(table)


def plot(results: Sequence[Result], path: Path) -> None:
    """Bars of the SSD's share of I/O and its bytes written, per policy and budget."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise click.ClickException(
            "plotting needs matplotlib: pip install 'fastio[plot]'"
        ) from None
    policies = list(dict.fromkeys(r.policy for r in results))
    budgets = sorted({r.budget_fraction for r in results})
    figure, (served, written) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(policies)
    for i, policy in enumerate(policies):
        mine = {r.budget_fraction: r for r in results if r.policy == policy}
        xs = [b + 0 for b in range(len(budgets))]
        served.bar([x + i * width for x in xs], [mine[b].ssd_fraction for b in budgets],
                   width, label=policy)  # fmt: skip
        written.bar([x + i * width for x in xs],
                    [mine[b].ssd_bytes_written / (1 << 30) for b in budgets], width)  # fmt: skip
    for axis, label in ((served, "fraction of I/O served by SSD"), (written, "GiB written to SSD")):
        axis.set_xticks([x + 0.4 - width / 2 for x in range(len(budgets))],
                        [f"{b:.0%} budget" for b in budgets])  # fmt: skip
        axis.set_ylabel(label)
    served.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


@tiering.command()
@config_option("Probe the tiers of this config's tiering section.")
@click.option("--tier", "tier_specs", multiple=True,
              help="NAME=PATH:CAPACITY[:MEDIA], e.g. fast=/nvme/tmp:50GiB (repeat).")  # fmt: skip
@click.option("--refresh", is_flag=True, help="Measure again instead of using cached profiles.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def probe(config_file: Path | None, tier_specs: tuple[str, ...], refresh: bool,
          as_json: bool) -> None:  # fmt: skip
    """Show each tier's medium (detected or given), capacity and measured speed."""
    from fastio.tiering import probe as measure

    tiers = _tiers(config_file, tier_specs)
    rows: list[dict[str, Any]] = []
    with error_console().status("probing tiers"):
        for tier in tiers:
            profile = measure(tier, refresh=refresh)
            rows.append({"name": tier.name, "path": tier.path, "media": tier.media,
                         "detected": tier.detected, "capacity": tier.capacity,
                         **profile.as_dict()})  # fmt: skip
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    from rich.table import Table

    table = Table(title="Tiers")
    for column in ("name", "path", "media", "capacity", "random 4 KiB reads/s", "sequential MB/s"):
        table.add_column(column)
    for row in rows:
        media = row["media"] + (" (detected)" if row["detected"] else " (given)")
        capacity = f"{row['capacity'] / (1 << 30):,.1f} GiB"
        speeds = f"{row['random_read_iops']:,.0f}", f"{row['sequential_mb_s']:,.0f}"
        table.add_row(row["name"], row["path"], media, capacity, *speeds)
    console().print(table)


def _tiers(config_file: Path | None, specs: Sequence[str]) -> list[Tier]:
    from fastio.tiering import Tier

    settings: list[TierSettings] = []
    if config_file is not None:
        settings += load(config_file, {}).to_spec().tiering.tiers
    for spec in specs:
        name, _, rest = spec.partition("=")
        path, _, sizing = rest.partition(":")
        capacity, _, media = sizing.partition(":")
        if not (name and path and capacity):
            raise click.BadParameter(f"{spec!r}: expected NAME=PATH:CAPACITY[:MEDIA]")
        try:
            settings.append(TierSettings(name, path, capacity, media or None))  # type: ignore[arg-type]
        except (TypeError, ValueError) as error:
            raise click.BadParameter(str(error)) from None
    if not settings:
        raise click.UsageError("give --tier NAME=PATH:CAPACITY or --config FILE with tiers")
    return [Tier(t.name, t.path, t.capacity, t.media) for t in settings]
