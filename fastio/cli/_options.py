"""Command-line options made from the knobs of :mod:`fastio.spec`, and the
options every command shares.

:func:`knob_option` gives an option its flag, type, bounds, default and help
from one knob's metadata, so no subcommand restates them; the values of a
command's knob options then make a :class:`~fastio.spec.DatasetSpec`
(:func:`spec_from_options`) or override a config file (:func:`knob_overrides`).
A knob's flag is its :class:`fastio.Dataset` keyword (a reader knob's name),
else its config key path (``tuner.max_trials``: ``--tuner-max-trials``): one
name for one knob in every command. ``grid=True`` makes the option take a
comma-separated list of values to try (``sweep -q 1,4,16``), each checked as
the knob is.

The options of results (:func:`output_options`): ``--json`` prints one JSON
object on stdout and nothing else, ``--out FILE`` writes it to a file,
``--plot FILE`` draws a picture (checked for matplotlib before any work), and
``--repeat N`` runs N times and reports the median.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from fastio._errors import MissingExtraError, import_extra
from fastio.spec import (
    DatasetSpec,
    FormatSettings,
    ReaderSettings,
    check_value,
    knob_defaults,
    knobs,
)
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
    """An option that sets the knob ``knob_name`` of the settings class
    ``settings`` (with ``grid``: lists values of it to try)."""

    def __init__(self, decls: Any, *, settings: type[Any], knob_name: str, grid: bool = False,
                 **attrs: Any) -> None:  # fmt: skip
        super().__init__(decls, **attrs)
        self.settings, self.knob_name, self.grid = settings, knob_name, grid


class GridType(click.ParamType[tuple[Any, ...]]):
    """Comma-separated values of one knob, each read by ``item`` (the knob's type)."""

    def __init__(self, item: click.ParamType[Any]) -> None:
        self.item = item
        self.name = f"{item.name},..."

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[Any, ...]:  # fmt: skip
        if isinstance(value, tuple):
            return value
        items = [text.strip() for text in str(value).split(",") if text.strip()]
        if not items:
            self.fail("give at least one value", param, ctx)
        return tuple(self.item.convert(text, param, ctx) for text in items)


class FlagOrWord(click.ParamType[Any]):
    """A flag's value that may also be a word (``direct``: true, false or auto)."""

    def __init__(self, words: tuple[str, ...]) -> None:
        self.words = words
        self.name = f"boolean or {' or '.join(words)}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:  # fmt: skip
        if isinstance(value, str) and value.strip().lower() in self.words:
            return value.strip().lower()
        return click.BOOL.convert(value, param, ctx)


def _lowered(doc: str) -> str:
    """A doc's first letter lowered to follow other words, unless it starts a
    name (``O_DIRECT``, ``URLs``)."""
    return doc[0].lower() + doc[1:] if doc[1:2].islower() else doc


def option_name(settings: type[Any], name: str) -> str:
    """The flag of a knob without dashes: its Dataset keyword (a reader knob's
    name), else ``section_name`` (``tuner_max_trials``)."""
    spec = knobs(settings)[name]
    if spec.keyword:
        return spec.keyword
    section = {cls: key for key, cls in sections().items()}.get(settings)
    return name if section in (None, "reader") else f"{section}_{name}"


def knob_option(
    settings: type[Any], name: str, *decls: str, context: str | None = None,
    grid: bool = False, shown: str | None = None,
) -> Callable[[F], F]:  # fmt: skip
    """The option of the knob ``name`` of ``settings``: ``--outstanding-requests``
    ``-q`` from :func:`option_name` and its short flag unless ``decls`` are
    given, ``--x/--no-x`` for a flag; a type with the knob's bounds or choices;
    the spec's default, shown as the spec writes it (``1MiB``); help from the
    doc, after ``context`` (``"Dataset mode"``). With ``grid``, the option takes
    comma-separated values to try (a flag's as true/false) and has no default
    (``shown`` tells the help what stands in for it).
    Raises TypeError for a knob that has no command-line form (a mapping, a
    callback)."""
    spec = knobs(settings)[name]
    default = None if grid else knob_defaults(settings).get(name)
    if not decls:
        flag = "--" + option_name(settings, name).replace("_", "-")
        decls = (f"{flag}/--no-{flag[2:]}" if spec.kind == "flag" and not grid else flag,
                 *([f"-{spec.short}"] if spec.short else []))  # fmt: skip
    if spec.kind == "size" and default is not None:
        default = size_text(default)  # shown as "1MiB"; the type reads it back
    doc = spec.doc
    if context:  # "Dataset mode: shuffle ..."; a doc that starts with a name keeps its case
        doc = f"{context}: {_lowered(doc)}"
    attrs: dict[str, Any] = {"default": default, "show_default": default is not None,
                             "help": doc}  # fmt: skip
    if spec.kind == "flag" and not grid and not isinstance(default, bool | None):
        # A flag whose default is neither (direct's "auto"): left out unless
        # given, so the spec's default applies.
        attrs.update(default=None, show_default=str(default))
    if grid:
        item: click.ParamType[Any] = _click_type(name, spec) if spec.kind != "flag" else (
            click.BOOL if isinstance(knob_defaults(settings).get(name), bool | None)
            else FlagOrWord((str(knob_defaults(settings)[name]),))  # direct: also "auto"
        )  # fmt: skip
        attrs["type"] = GridType(item)
        attrs["help"] = f"Values to try, comma-separated: {_lowered(doc)}"
        attrs["show_default"] = shown or False
    elif spec.kind != "flag":
        attrs["type"] = _click_type(name, spec)

    def decorate(function: F) -> F:
        option = click.option(*decls, cls=KnobOption, settings=settings, knob_name=name,
                              grid=grid, **attrs)  # fmt: skip
        return option(function)

    return decorate


class NumberRange(click.FloatRange):
    """A float in a range, never NaN (which compares as in any range), nor
    infinite unless ``infinite``."""

    def __init__(self, *args: Any, infinite: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.infinite = infinite

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:  # fmt: skip
        number = super().convert(value, param, ctx)
        if math.isnan(number) or (not self.infinite and math.isinf(number)):
            self.fail(f"{value!r} is not a number this takes", param, ctx)
        return number


def _click_type(name: str, spec: Knob) -> click.ParamType[Any]:
    low, high, above = spec.low, spec.high, spec.above
    if spec.kind == "count":
        return click.IntRange(
            None if low is None else int(low), None if high is None else int(high)
        )
    if spec.kind == "size":
        return SizeType(name, spec)
    if spec.kind in ("seconds", "number"):
        return NumberRange(low if above is None else above, high, min_open=above is not None)
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


def dataset_options(function: F) -> F:
    """``--format`` (the format knob) and the format options a command offers."""
    function = knob_option(FormatSettings, "columns")(function)
    function = knob_option(FormatSettings, "record_size")(function)
    return knob_option(DatasetSpec, "format", "--format", "format_name")(function)


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
        if not isinstance(param, KnobOption) or param.name is None or param.grid:
            continue
        if ctx.params[param.name] is None and not given(ctx, param.name):
            continue  # the spec's default applies (see knob_option)
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


# ---- the options of results --------------------------------------------------------------


def writable_file(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A file option's value, once its folder is there: checked while the
    command line is read, not after the run whose result it would hold."""
    if value is not None:
        folder = os.path.dirname(os.path.abspath(value))
        if not os.path.isdir(folder):
            raise click.BadParameter(f"no folder {folder} to write {value} in", ctx, param)
    return value


def _needs_matplotlib(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    # Checked while the command line is read: before a sweep or a tuning run, not after.
    if value is not None:
        try:
            import_extra("matplotlib", "--plot")
        except MissingExtraError as error:
            raise click.UsageError(str(error), ctx) from None
    return writable_file(ctx, param, value)


def output_options(*, plot: str | None = None, repeat: str | None = None,
                   repeat_default: int = 1) -> Callable[[F], F]:  # fmt: skip
    """``--json`` (``as_json``), ``--out FILE`` (``out_path``) and, given their
    help, ``--plot FILE`` (``plot_path``: what the picture shows) and
    ``--repeat N`` (``repeat``: what is run N times)."""

    def decorate(function: F) -> F:
        if repeat is not None:
            function = click.option(
                "--repeat", type=click.IntRange(1, 100), default=repeat_default, show_default=True,
                help=f"{repeat} this many times; the median run is reported.",
            )(function)  # fmt: skip
        if plot is not None:
            function = click.option(
                "--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
                expose_value=True, callback=_needs_matplotlib,
                help=f"Draw {plot} as a PNG here (needs the plot extra).",
            )(function)  # fmt: skip
        function = click.option(
            "--out", "out_path", type=click.Path(dir_okay=False), default=None,
            callback=writable_file, help="Also write the result as JSON to this file.",
        )(function)  # fmt: skip
        return click.option("--json", "as_json", is_flag=True,
                            help="Print the result as one JSON object on stdout (no table, "
                            "no progress).")(function)  # fmt: skip

    return decorate
