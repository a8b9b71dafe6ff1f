"""``fastio-bench config check FILE`` and ``config show``; ``--config FILE`` for
the other subcommands, whose options given on the command line override the
file (see :mod:`fastio.config._config` for the precedence)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fastio.config._config import DatasetConfig

F = TypeVar("F", bound=Callable[..., Any])

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_EXPLICIT = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def config_option(help: str) -> Callable[[F], F]:
    return click.option("--config", "config_file", type=_FILE, default=None, help=help)


def explicit_options(ctx: click.Context, keys: Mapping[str, str]) -> dict[str, Any]:
    """The options of ``keys`` (parameter name -> config key, ``section__key``)
    given on the command line, not left at their defaults, as config overrides."""
    return {
        key: ctx.params[name]
        for name, key in keys.items()
        if ctx.get_parameter_source(name) in _EXPLICIT
    }


def load(path: Path, overrides: Mapping[str, Any]) -> DatasetConfig:
    """The config in ``path`` with ``overrides``; an invalid one ends the command."""
    from fastio._errors import ConfigError
    from fastio.config._config import load_config

    try:
        return load_config(path, **overrides)
    except (ConfigError, OSError) as error:
        raise click.ClickException(str(error)) from None


def gen_target(
    ctx: click.Context, path: Path, out_dir: Path | None, dataset_format: str
) -> tuple[Path | None, str]:
    """``gen --config``: the config's format (unless --format is given) and, for
    a missing OUT_DIR, the folder its urls name (None if remote or a pattern)."""
    config = load(path, {})
    if config.format is not None and ctx.get_parameter_source("dataset_format") not in _EXPLICIT:
        dataset_format = config.format
    if out_dir is None:
        first = config.urls if isinstance(config.urls, str) else config.urls[0]
        folder = os.path.dirname(first) or "."
        local = not ({"{", "*", "?", "["} & set(folder) or "://" in first or "::" in first)
        out_dir = Path(folder) if local else None
    return out_dir, dataset_format


def _print(data: Mapping[str, Any], as_json: bool, comment: str = "") -> None:
    from fastio.config._config import dumps

    sys.stdout.write(dumps(data, "json") if as_json else comment + dumps(data, "yaml"))


@click.group()
def config() -> None:
    """Check dataset config files (YAML, TOML, JSON) and show the defaults.

    Precedence: options given on the command line > the config file >
    FASTIO_* environment variables (FASTIO_READER__READ_SIZE=4MiB) > defaults.
    """


@config.command()
@click.argument("file", type=_FILE)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
def check(file: Path, as_json: bool) -> None:
    """Validate FILE and print the effective config (FILE over FASTIO_* variables
    over defaults), every key. Exits 1 naming each problem."""
    _print(load(file, {}).to_dict(), as_json)


@config.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
def show(as_json: bool) -> None:
    """Print every key with its default (urls has none and must be given)."""
    from fastio.config._config import defaults

    _print(defaults(), as_json, "# urls: a URL pattern or a list of them (required)\n")
