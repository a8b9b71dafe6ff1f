"""``fastio-bench config check FILE`` and ``config show``; ``--config FILE`` for
the other subcommands, whose options given on the command line override the
file (see :mod:`fastio.config._config` for the precedence)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from fastio.cli._options import given, knob_overrides, spec_from_options

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from fastio.config import DatasetConfig
    from fastio.spec import DatasetSpec

F = TypeVar("F", bound=Callable[..., Any])

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def config_option(help: str) -> Callable[[F], F]:
    return click.option("--config", "config_file", type=_FILE, default=None, help=help)


def load(path: Path, overrides: Mapping[str, Any]) -> DatasetConfig:
    """The config in ``path`` with ``overrides``; an invalid one ends the command."""
    from fastio._errors import ConfigError
    from fastio.config import load_config

    try:
        return load_config(path, **overrides)
    except (ConfigError, OSError) as error:
        raise click.ClickException(str(error)) from None


def command_spec(
    ctx: click.Context, config_file: Path | None, urls: Sequence[str], **top: Any
) -> DatasetSpec:
    """What a command reads: the ``--config`` file with the knob options given
    on the command line over it (and ``urls``, if any, over its urls), or else
    ``urls`` with the knob options. ``top``: further top-level knobs
    (``format``). A bad config, bad knobs or nothing to read end the command."""
    if config_file is not None:
        overrides = knob_overrides(ctx) | top | ({"urls": list(urls)} if urls else {})
        return load(config_file, overrides).to_spec()
    if not urls:
        raise click.UsageError("give PATHS to read, or --config FILE")
    try:
        return spec_from_options(ctx, list(urls), **top)
    except (TypeError, ValueError) as error:
        raise click.UsageError(str(error)) from None


def gen_target(
    ctx: click.Context, path: Path, out_dir: Path | None, dataset_format: str
) -> tuple[Path | None, str]:
    """``gen --config``: the config's format (unless --format is given) and, for
    a missing OUT_DIR, the folder its urls name (None if remote or a pattern)."""
    spec = load(path, {}).to_spec()
    first = spec.urls if isinstance(spec.urls, str) else spec.urls[0]
    if not given(ctx, "dataset_format"):
        # The config's format, else the one its first URL's extension names
        # (as a dataset of the config reads it).
        from fastio.formats._shards import format_for_url

        with contextlib.suppress(ValueError):
            dataset_format = spec.format or format_for_url(first)
    if out_dir is None:
        folder = first if _a_folder(first) else os.path.dirname(first) or "."
        local = not ({"{", "*", "?", "["} & set(folder) or "://" in first or "::" in first)
        out_dir = Path(folder) if local else None
    return out_dir, dataset_format


def _a_folder(url: str) -> bool:
    """Whether a config's URL names a local folder, as a dataset reads it (the
    configs tune writes name one so: ``/data/train``), made yet or not: one
    that is, or ends with a slash, or names no file of a shard format."""
    from fastio.formats._shards import format_for_url

    if url.endswith("/") or os.path.isdir(url):
        return True
    if os.path.exists(url) or {"{", "*", "?", "["} & set(url):
        return False  # (a remote URL is no local folder either way: gen_target says so)
    try:
        format_for_url(url)
    except ValueError:
        return True
    return False


def _print(data: Mapping[str, Any], as_json: bool, comment: str = "") -> None:
    from fastio.config._config import dumps

    sys.stdout.write(dumps(data, "json") if as_json else comment + dumps(data, "yaml"))


@click.group()
def config() -> None:
    """Check dataset config files (YAML, TOML, JSON) and show the defaults.

    Precedence, as in fsspec: options given on the command line > FASTIO_*
    environment variables (FASTIO_READER__READ_SIZE=4MiB) > the config file >
    defaults.
    """


@config.command()
@click.argument("file", type=_FILE)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
def check(file: Path, as_json: bool) -> None:
    """Validate FILE and print the effective config (FASTIO_* variables over
    FILE over defaults), every key. Exits 1 naming each problem."""
    _print(load(file, {}).to_dict(), as_json)


@config.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
def show(as_json: bool) -> None:
    """Print every key with its default (urls has none and must be given)."""
    from fastio.config._config import defaults

    _print(defaults(), as_json, "# urls: a URL pattern or a list of them (required)\n")
