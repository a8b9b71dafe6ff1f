"""``fastio-bench tiering``: replay intermediate-file traces through the placement
policies; ``fastio-bench tiering probe``: detect and measure the configured tiers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from fastio.cli._config_cmd import config_option, load
from fastio.cli._options import NumberRange, knob_option, output_options
from fastio.cli._report import console, emit, error_console, pyplot
from fastio.spec import TieringSettings, TierSettings

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from fastio.tiering import Result, Tier, TraceFile
    from fastio.tiering._policies import Policy


@click.group(invoke_without_command=True)
@click.option("--files", type=click.IntRange(10), default=2000, show_default=True,
              help="Files per period of the synthetic trace.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Trace seed.")
@click.option("--hours", type=NumberRange(0, min_open=True, infinite=False), default=24.0,
              show_default=True, help="Hours per period.")  # fmt: skip
@click.option("--budget-fraction", "budgets", type=NumberRange(0.001, 1.0), multiple=True,
              help="SSD budget as a fraction of the peak live bytes (repeat; default "
                   "0.1, 0.2, 0.5).")  # fmt: skip
@config_option("Replay with the learned policy's prior from this config's tiering section.")
@knob_option(TieringSettings, "prior_strength")
@output_options(plot="each policy's share of I/O served by SSD and bytes written to it")
@click.pass_context
def tiering(
    ctx: click.Context, /, files: int, seed: int, hours: float, budgets: tuple[float, ...],
    config_file: Path | None, as_json: bool, out_path: str | None, plot_path: str | None,
    **_knobs: Any,
) -> None:  # fmt: skip
    """Replay a trace of intermediate files (train on one period, score on the
    next) through each policy: the fraction of all I/O the SSD serves and the
    bytes written to it, at each SSD budget."""
    if ctx.invoked_subcommand is not None:
        return
    from fastio.tiering import BUDGETS, DensityModel, DensityPolicy, compare, make_trace
    from fastio.tiering._compare import default_policies

    settings = _tiering_settings(ctx, config_file)

    def policies(future: Sequence[TraceFile]) -> list[Policy]:
        # The learned policy with the config's (or option's) prior; the rest as always.
        return [DensityPolicy(DensityModel(settings.prior_strength))
                if isinstance(p, DensityPolicy) and not p.oracle else p
                for p in default_policies(future)]  # fmt: skip

    with error_console().status("making the trace") as status:
        if as_json:
            status.stop()
        trace = make_trace(files, seed, hours)
    with error_console().status("replaying") as status:
        if as_json:
            status.stop()
        results = compare(trace, budgets or BUDGETS, policies,
                          progress=lambda text: status.update(text))  # fmt: skip
    data = {"files_per_period": files, "seed": seed, "hours": hours,
            "prior_strength": settings.prior_strength,
            "results": [result.as_dict() for result in results]}  # fmt: skip
    if plot_path is not None:
        plot(results, plot_path)
    emit(data, as_json, out_path, lambda: _print(results), plot_path)


def _tiering_settings(ctx: click.Context, config_file: Path | None) -> TieringSettings:
    """The tiering section: the config's with the options given over it, else the options'."""
    from fastio.cli._options import knob_overrides

    if config_file is not None:
        return load(config_file, knob_overrides(ctx)).to_spec().tiering
    return TieringSettings(prior_strength=ctx.params["tiering_prior_strength"])


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


def plot(results: Sequence[Result], path: str) -> None:
    """Bars of the SSD's share of I/O and its bytes written, per policy and budget."""
    plt = pyplot()
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
@output_options()
def probe(config_file: Path | None, tier_specs: tuple[str, ...], refresh: bool,
          as_json: bool, out_path: str | None) -> None:  # fmt: skip
    """Show each tier's medium (detected or given), capacity and measured speed."""
    from fastio.tiering import probe as measure

    tiers = _tiers(config_file, tier_specs)
    rows: list[dict[str, Any]] = []
    with error_console().status("probing tiers") as status:
        if as_json:
            status.stop()
        for tier in tiers:
            try:
                profile = measure(tier, refresh=refresh)
            except OSError as error:  # a tier too small for the probe's file, or unwritable
                raise click.ClickException(f"tier {tier.name} ({tier.path}) cannot be probed: "
                                           f"{error}") from None  # fmt: skip
            rows.append({"name": tier.name, "path": tier.path, "media": tier.media,
                         "detected": tier.detected, "capacity": tier.capacity,
                         **profile.as_dict()})  # fmt: skip
    emit({"tiers": rows}, as_json, out_path, lambda: _print_tiers(rows))


def _print_tiers(rows: list[dict[str, Any]]) -> None:
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
    try:
        return [Tier(t.name, t.path, t.capacity, t.media) for t in settings]
    except OSError as error:  # its folder cannot be made (a file there, no permission)
        raise click.ClickException(f"a tier's folder cannot be made: {error}") from None
