"""Command-line options shared by subcommands: the reader knobs, sizes, output."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from fastio.spec._reader import ENGINE_KINDS, ReaderSettings

F = TypeVar("F", bound=Callable[..., Any])

_BARE_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt])\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``"65536"``, ``"64KiB"``, ``"1MB"`` (decimal) or ``"4m"``.

    A bare ``k``/``m``/``g``/``t`` means binary units, as fio and dd read them.
    """
    from fastio.spec import parse_size as parse

    try:
        return parse(text)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (try 65536, 64KiB, 4m or 1GiB)") from None


class SizeType(click.ParamType[int]):
    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


SIZE = SizeType()
_DEFAULTS = ReaderSettings()


def reader_options(function: F) -> F:
    """The reader's knobs as options; defaults come from ReaderSettings."""
    options = [
        click.option(
            "--outstanding-requests",
            "-q",
            type=click.IntRange(1, 256),
            default=_DEFAULTS.outstanding_requests,
            show_default=True,
            help="Reads kept in flight.",
        ),
        click.option(
            "--read-size",
            "-b",
            type=SIZE,
            default=str(_DEFAULTS.read_size),
            show_default="1MiB",
            help="Largest single read (e.g. 64KiB, 4m).",
        ),
        click.option(
            "--engine",
            type=click.Choice(ENGINE_KINDS),
            default=_DEFAULTS.engine,
            show_default=True,
            help="I/O engine: io_uring, a pread thread pool, or auto.",
        ),
        click.option(
            "--direct/--buffered",
            default=_DEFAULTS.direct,
            show_default=True,
            help="O_DIRECT (bypass the page cache) or buffered reads.",
        ),
        click.option(
            "--memory-budget",
            type=SIZE,
            default=str(_DEFAULTS.memory_budget),
            show_default="64MiB",
            help="Bytes in flight plus read ahead.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def settings_from(options: dict[str, Any]) -> ReaderSettings:
    try:
        return ReaderSettings(
            outstanding_requests=options["outstanding_requests"],
            read_size=options["read_size"],
            engine=options["engine"],
            direct=options["direct"],
            memory_budget=options["memory_budget"],
        )
    except (TypeError, ValueError) as error:
        raise click.BadParameter(str(error)) from None
