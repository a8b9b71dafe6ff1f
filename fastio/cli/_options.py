"""Command-line options made from the knobs of :mod:`fastio.spec`.

:func:`knob_option` gives an option its flag, type, bounds, default and help
from one knob's metadata, so no subcommand restates them; the values of a
command's knob options then make a :class:`~fastio.spec.DatasetSpec`
(:func:`spec_from_options`) or override a config file (:func:`knob_overrides`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from fastio.spec import DatasetSpec, ReaderSettings, check_value, knob_defaults, knobs
from fastio.spec import parse_size as parse_bytes
from fastio.spec._dataset import sections
from fastio.spec._knobs import Knob, size_text

F = TypeVar("F", bound=Callable[..., Any])

_EXPLICIT = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
_READER_OPTIONS = ("outstanding_requests", "read_size", "engine", "direct", "memory_budget")


def parse_size(text: str) -> int:
    """Bytes from ``"65536"``, ``"64KiB"``, ``"1MB"`` (decimal) or ``"4m"`` (a
    bare k/m/g/t is binary), as :func:`fastio.spec.parse_size` reads them.
    Raises ValueError worded for a command line."""
    try:
        return parse_bytes(text)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (try 65536, 64KiB, 4m or 1GiB)") from None


class SizeType(click.ParamType[int]):
    """A size in bytes (``64KiB``, ``4m``); for a knob, within its bounds."""

    name = "size"

    def __init__(self, knob_name: str | None = None, knob: Knob | None = None) -> None:
        self.knob_name, self.knob = knob_name, knob

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            size = value if isinstance(value, int) else parse_size(str(value))
            if self.knob is not None and self.knob_name is not None:
                size = check_value(self.knob_name, self.knob, size)
        except ValueError as error:
            self.fail(str(error), param, ctx)
        return size


SIZE = SizeType()


class NamesType(click.ParamType[tuple[str, ...]]):
    """Comma-separated names, as a tuple."""

    name = "a,b,..."

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[str, ...]:  # fmt: skip
        if isinstance(value, tuple):
            return value
        return tuple(name.strip() for name in str(value).split(",") if name.strip())


class KnobOption(click.Option):
    """An option that sets the knob ``knob_name`` of the settings class ``settings``."""

    def __init__(self, decls: Any, *, settings: type[Any], knob_name: str, **attrs: Any) -> None:
        super().__init__(decls, **attrs)
        self.settings, self.knob_name = settings, knob_name


def knob_option(
    settings: type[Any], name: str, *decls: str, context: str | None = None
) -> Callable[[F], F]:
    """The option of the knob ``name`` of ``settings``: ``--outstanding-requests``
    ``-q`` from its name (or keyword) and short flag unless ``decls`` are given,
    ``--x/--no-x`` for a flag; a type with the knob's bounds or choices; the
    spec's default, shown as the spec writes it (``1MiB``); help from the doc,
    after ``context`` (``"Dataset mode"``). Raises TypeError for a knob that
    has no command-line form (a mapping, a callback)."""
    spec = knobs(settings)[name]
    default = knob_defaults(settings).get(name)
    if not decls:
        flag = "--" + (spec.keyword or name).replace("_", "-")
        decls = (f"{flag}/--no-{flag[2:]}" if spec.kind == "flag" else flag,
                 *([f"-{spec.short}"] if spec.short else []))  # fmt: skip
    if spec.kind == "size" and default is not None:
        default = size_text(default)  # shown as "1MiB"; the type reads it back
    doc = spec.doc
    if context:  # "Dataset mode: shuffle ..."; a doc that starts with a name keeps its case
        doc = f"{context}: {doc[0].lower() + doc[1:] if doc[1:2].islower() else doc}"
    attrs: dict[str, Any] = {"default": default, "show_default": default is not None,
                             "help": doc}  # fmt: skip
    if spec.kind != "flag":
        attrs["type"] = _click_type(name, spec)

    def decorate(function: F) -> F:
        option = click.option(*decls, cls=KnobOption, settings=settings, knob_name=name, **attrs)
        return option(function)

    return decorate


def _click_type(name: str, spec: Knob) -> click.ParamType[Any]:
    low, high, above = spec.low, spec.high, spec.above
    if spec.kind == "count":
        return click.IntRange(
            None if low is None else int(low), None if high is None else int(high)
        )
    if spec.kind == "size":
        return SizeType(name, spec)
    if spec.kind in ("seconds", "number"):
        return click.FloatRange(low if above is None else above, high, min_open=above is not None)
    if spec.kind == "choice":
        return click.Choice(spec.choices)
    if spec.kind in ("text", "path"):
        return click.STRING
    if spec.kind == "names":
        return NamesType()
    raise TypeError(f"{name}: a {spec.kind} knob has no command-line option")


def reader_options(function: F) -> F:
    """The reader's knobs a command offers, as options."""
    for name in reversed(_READER_OPTIONS):
        decls = ("--direct/--buffered",) if name == "direct" else ()
        function = knob_option(ReaderSettings, name, *decls)(function)
    return function


def given(ctx: click.Context, name: str) -> bool:
    """Whether the option ``name`` was given (not left at its default)."""
    return ctx.get_parameter_source(name) in _EXPLICIT


def knob_values(
    ctx: click.Context, *, only_given: bool = False
) -> dict[str | None, dict[str, Any]]:
    """The values of the command's knob options by section of a
    :class:`~fastio.spec.DatasetSpec` (None: its top level)."""
    section_of: dict[type[Any], str | None] = {cls: name for name, cls in sections().items()}
    section_of[DatasetSpec] = None
    values: dict[str | None, dict[str, Any]] = {}
    for param in ctx.command.params:
        if not isinstance(param, KnobOption) or param.name is None:
            continue
        if not only_given or given(ctx, param.name):
            section = section_of[param.settings]
            values.setdefault(section, {})[param.knob_name] = ctx.params[param.name]
    return values


def knob_overrides(ctx: click.Context) -> dict[str, Any]:
    """The knob options given on the command line as config overrides
    (``reader__read_size``): they win over a config file."""
    return {f"{section}__{name}" if section else name: value
            for section, values in knob_values(ctx, only_given=True).items()
            for name, value in values.items()}  # fmt: skip


def spec_from_options(ctx: click.Context, urls: Any, **top: Any) -> DatasetSpec:
    """The spec of ``urls`` with the command's knob options (``top``: further
    top-level knobs). Raises TypeError or ValueError as the spec does."""
    values = knob_values(ctx)
    return DatasetSpec(**({"urls": urls} | values.pop(None, {}) | top), **values)  # type: ignore[arg-type]


def reader_settings(ctx: click.Context) -> ReaderSettings:
    """The reader's knobs from the command's options (spec defaults elsewhere)."""
    return ReaderSettings(**knob_values(ctx).get("reader", {}))
