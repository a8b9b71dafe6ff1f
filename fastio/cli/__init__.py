"""``fastio-bench``: measure, compare and tune reads.

Each subcommand lives in its own module and registers itself on :data:`main`.
"""

from __future__ import annotations

import click

from fastio.cli import (
    _compare,
    _config_cmd,
    _demo,
    _fairness,
    _gen,
    _index_cmd,
    _run,
    _sweep,
    _tiering,
    _tune,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="fastio")
def main() -> None:
    """Measure how fast fastio reads your storage, next to plain Python."""


main.add_command(_config_cmd.config)
main.add_command(_demo.demo)
main.add_command(_gen.gen)
main.add_command(_index_cmd.index)
main.add_command(_run.run)
main.add_command(_sweep.sweep)
main.add_command(_tune.tune)
main.add_command(_fairness.fairness)
main.add_command(_tiering.tiering)
main.add_command(_compare.compare)

__all__ = ["main"]
