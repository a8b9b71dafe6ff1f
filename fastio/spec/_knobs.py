"""What a knob is: a dataclass field with one default, its bounds and its doc.

Every settings class in :mod:`fastio.spec` declares its fields with
:func:`knob` and calls :func:`check` in ``__post_init__``. The same metadata
drives the config file sections (:mod:`fastio.config`), the command-line
options (:mod:`fastio.cli`) and the keywords of :class:`fastio.Dataset`, so
one message and one size parser serve them all.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import types
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from fastio.spec._records import record

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "Knob",
    "KnobKind",
    "REQUIRED",
    "check",
    "check_value",
    "knob",
    "make_settings",
    "knob_defaults",
    "knobs",
    "parse_size",
    "shown",
    "size_text",
    "switchable",
    "unexpected_keyword",
]

T = TypeVar("T")

KnobKind = Literal[
    "count",  # an integer
    "size",  # bytes: an integer or "64MiB", "1MB", "4m"
    "seconds",  # a number of seconds
    "number",  # any other real number
    "flag",  # true or false (or one of `choices`, such as "auto")
    "choice",  # one of `choices`
    "text",  # a string
    "path",  # a path or a string
    "paths",  # a path, or a list of them
    "names",  # a list of strings
    "urls",  # a URL pattern, or a non-empty list of them
    "mapping",  # a dict with string keys, passed on untouched
    "callable",  # a function (given in code only)
    "section",  # a nested settings class (`of`), or a dict of its knobs
    "sections",  # a list of them
    "object",  # anything (checked by its consumer)
]

REQUIRED: Any = dataclasses.MISSING
"""The default of a knob that has none: it must be given."""


@record(frozen=True)
class Knob:
    """A field's metadata: see :func:`knob`."""

    doc: str
    kind: KnobKind
    low: float | None = None
    high: float | None = None
    above: float | None = None
    choices: tuple[Any, ...] = ()
    optional: bool = False
    keyword: str | None = None
    short: str | None = None
    in_config: bool = True
    of: type | None = None

    def __init__(self, doc: str, kind: KnobKind, low: float | None = None,
                 high: float | None = None, above: float | None = None,
                 choices: tuple[Any, ...] = (), optional: bool = False,
                 keyword: str | None = None, short: str | None = None, in_config: bool = True,
                 of: type | None = None) -> None:  # fmt: skip
        # Written out: the settings classes make one per knob as fastio is
        # imported, some seventy, where a record's own would be compiled then.
        set_ = object.__setattr__
        set_(self, "doc", doc)
        set_(self, "kind", kind)
        set_(self, "low", low)
        set_(self, "high", high)
        set_(self, "above", above)
        set_(self, "choices", choices)
        set_(self, "optional", optional)
        set_(self, "keyword", keyword)
        set_(self, "short", short)
        set_(self, "in_config", in_config)
        set_(self, "of", of)


def knob(
    default: Any,
    doc: str,
    kind: KnobKind,
    *,
    low: float | None = None,
    high: float | None = None,
    above: float | None = None,
    choices: tuple[Any, ...] = (),
    optional: bool = False,
    keyword: str | None = None,
    short: str | None = None,
    in_config: bool = True,
    of: type | None = None,
    factory: Any = None,
) -> Any:
    """A dataclass field with its knob metadata.

    ``default`` is :data:`REQUIRED` for a knob that must be given; ``factory``
    makes a fresh default instead (a section, a mapping). ``low``/``high``
    bound it inclusively, ``above`` exclusively from below; ``optional`` lets
    it be None (meaning "not set"); ``keyword`` is its name as a keyword of
    :class:`fastio.Dataset` where that differs from, or lives outside, its
    section; ``short`` its one-letter command-line flag; ``in_config=False``
    keeps it out of config files (a callback); ``of`` is the settings class of
    a section or of each of sections (a section's factory, unless given).
    """
    if kind == "section" and of is None:
        of = factory
    metadata = {"knob": Knob(doc, kind, low, high, above, choices, optional, keyword, short,
                             in_config, of)}  # fmt: skip
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def knobs(cls: Any) -> Mapping[str, Knob]:
    """The knobs of a settings class (or instance), in field order."""
    return _class_knobs(cls if isinstance(cls, type) else type(cls))


@functools.cache
def _class_knobs(cls: type) -> Mapping[str, Knob]:
    # Made once a class, read-only: a dataset's spec asks for them some fifty
    # times as it is made.
    return types.MappingProxyType(
        {f.name: f.metadata["knob"] for f in dataclasses.fields(cls) if "knob" in f.metadata}
    )


def knob_defaults(cls: Any) -> dict[str, Any]:
    """The knobs of a settings class with their defaults (factories called);
    required knobs are left out."""
    result = {}
    for field in dataclasses.fields(cls):
        if "knob" not in field.metadata:
            continue
        if field.default is not dataclasses.MISSING:
            result[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            result[field.name] = field.default_factory()
    return result


def switchable(cls: type[T], value: Any, keyword: str) -> T:
    """Settings with an ``enabled`` knob from what a keyword takes: settings,
    a dict of them (enabled unless it says otherwise), True (enabled, the
    defaults), False (off) or None (the class's defaults). Raises TypeError
    naming ``keyword`` otherwise."""
    if isinstance(value, cls):
        return value
    make: Any = cls
    if value is None:
        return cast("T", make())
    if isinstance(value, bool):
        return cast("T", make(enabled=value))
    if isinstance(value, dict):
        try:
            return make_settings(cls, {"enabled": True, **value})
        except TypeError as error:
            raise TypeError(f"{keyword}: {error}") from None
    raise TypeError(f"{keyword} must be {cls.__name__}, a dict of it, True or False, "
                    f"not {shown(value)}")  # fmt: skip


def unexpected_keyword(owner: str, name: str, known: Iterable[str]) -> TypeError:
    """Python's own message for a keyword ``owner`` does not take, with the
    closest one it does (as a config file's unknown key gets)."""
    message = f"{owner} got an unexpected keyword argument {name!r}"
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return TypeError(f"{message}; did you mean {close[0]!r}?" if close else message)


def make_settings(cls: type[T], values: dict[str, Any]) -> T:
    """``cls(**values)``; a key that is none of its knobs raises TypeError
    naming the closest knob."""
    fields = knobs(cls)
    for name in values:
        if name not in fields:
            raise unexpected_keyword(f"{cls.__name__}()", name, fields)
    return cls(**values)


def check(instance: Any) -> None:
    """Check every knob of a (frozen) settings instance, storing the normal form
    of values that have one (``"64MiB"`` becomes 67108864, a path a string).
    Raises TypeError or ValueError: ``"<name> must be ..., not ..."``."""
    for name, spec in knobs(instance).items():
        value = getattr(instance, name)
        normal = check_value(name, spec, value)
        if normal is not value:
            object.__setattr__(instance, name, normal)


def check_value(name: str, spec: Knob, value: Any) -> Any:
    """``value`` checked against ``spec``, in its normal form: sizes in bytes,
    paths as strings, lists as tuples, a section's dict as its settings.
    Raises TypeError (a value of the wrong type) or ValueError (out of bounds,
    not a choice), as ``"<name> must be ..., not <value>"``."""
    if value is None:
        if spec.optional:
            return None
        if spec.kind == "mapping":  # no options
            return {}
        raise TypeError(f"{name} must be given, not None")
    kind = spec.kind
    if kind == "size":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise TypeError(f"{name} {_must_be_size(value)}")
        try:
            value = parse_size(value)
        except ValueError:
            # Text that is no size is a bad value; anything else (1.5, True) a bad type.
            error = ValueError if isinstance(value, str) else TypeError
            raise error(f"{name} {_must_be_size(value)}") from None
        return _bounded(name, spec, value)
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an integer, not {shown(value)}")
        return _bounded(name, spec, value)
    if kind in ("seconds", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise TypeError(f"{name} must be a number, not {shown(value)}")
        return _bounded(name, spec, value)
    if kind == "flag":
        if not isinstance(value, bool) and value not in spec.choices:
            words = ["true", "false", *(repr(choice) for choice in spec.choices)]
            listed = f"{', '.join(words[:-1])} or {words[-1]}"
            raise TypeError(f"{name} must be {listed}, not {shown(value)}")
        return value
    if kind == "choice":
        if value not in spec.choices:
            raise ValueError(f"{name} must be {_alternatives(spec.choices)}, not {shown(value)}")
        return value
    if kind in ("text", "path"):
        if kind == "path" and isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a {'path' if kind == 'path' else 'string'}, "
                            f"not {shown(value)}")  # fmt: skip
        return _home_expanded(value) if kind == "path" else value
    if kind == "paths":
        if isinstance(value, (str, os.PathLike)):
            return _home_expanded(os.fspath(value))
        if isinstance(value, (list, tuple)) and value:
            return tuple(check_value(name, Knob(spec.doc, "path"), one) for one in value)
        raise TypeError(f"{name} must be a path or a list of paths, not {shown(value)}")
    if kind == "names":
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list of names, not {shown(value)}")
        if not all(isinstance(one, str) for one in value):
            raise TypeError(f"{name} must be a list of names, not {shown(value)}")
        return tuple(value)
    if kind == "urls":
        return _urls(name, value)
    if kind in ("section", "sections"):
        return _sections(name, spec, value)
    if kind == "mapping":
        if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
            raise TypeError(f"{name} must be a mapping, not {shown(value)}")
        return value
    if kind == "callable":
        if not callable(value):
            raise TypeError(f"{name} must be callable, not {shown(value)}")
        return value
    return value


def _home_expanded(path: Any) -> Any:
    """A local path that starts with ``~`` (a config file's ``~/data``, which
    no shell expanded) in the home folder it names; anything else as it is."""
    return os.path.expanduser(path) if isinstance(path, str) and path[:1] == "~" else path


def _urls(name: str, value: Any) -> str | tuple[str, ...]:
    urls: Any = value
    if isinstance(urls, os.PathLike):
        urls = os.fspath(urls)
    elif isinstance(urls, (list, tuple)):
        urls = tuple(os.fspath(url) if isinstance(url, os.PathLike) else url for url in urls)
    if isinstance(urls, str) and urls:
        return cast("str", _home_expanded(urls))
    if isinstance(urls, tuple) and urls and all(isinstance(url, str) and url for url in urls):
        return tuple(map(_home_expanded, urls))
    raise ValueError(f"{name} must be a URL pattern or a non-empty list of them, "
                     f"not {shown(value)}")  # fmt: skip


def _sections(name: str, spec: Knob, value: Any) -> Any:
    settings = spec.of
    assert settings is not None, f"{name}: a section knob names its settings class (of=)"
    if spec.kind == "sections":
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list of {settings.__name__} or of dicts of it, "
                            f"not {shown(value)}")  # fmt: skip
        return tuple(_sections(name, Knob(spec.doc, "section", of=settings), one)
                     for one in value)  # fmt: skip
    if isinstance(value, dict):
        return make_settings(settings, value)
    if not isinstance(value, settings):
        raise TypeError(f"{name} must be {settings.__name__} or a dict of it, not {shown(value)}")
    return value


def _bounded(name: str, spec: Knob, value: float) -> Any:
    low, high, above = spec.low, spec.high, spec.above
    if low is not None and high is not None and not low <= value <= high:
        raise ValueError(f"{name} must be in {_number(low)}..{_number(high)}, not {value}")
    if low is not None and high is None and value < low:
        raise ValueError(f"{name} must be at least {_number(low)}, not {value}")
    if high is not None and low is None and value > high:
        raise ValueError(f"{name} must be at most {_number(high)}, not {value}")
    if above is not None and not value > above:
        raise ValueError(f"{name} must be more than {_number(above)}, not {value}")
    return value


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _alternatives(choices: tuple[Any, ...]) -> str:
    texts = [repr(choice) for choice in choices]
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " or " + texts[-1]


def shown(value: object) -> str:
    """``value`` as a message shows it: its repr, cut at 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- sizes -------------------------------------------------------------------------------

# Compiled, by re, at the first size given as text (the defaults are numbers).
_SIZE = r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)(b?)\s*$"
_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def parse_size(value: object) -> int:
    """Bytes from an integer or ``"65536"``, ``"64KiB"``, ``"1MB"`` (decimal),
    ``"4m"`` or ``"4k"`` (a bare k/m/g/t is binary, as fio and dd read it).
    Raises ValueError."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        match = re.match(_SIZE, value, re.IGNORECASE)
        if match is not None and not (match[3] and not (match[2] and match[4])):
            number, prefix, binary, unit = match.groups()
            power = "kmgtp".find(prefix.lower()) + 1 if prefix else 0
            # KiB and a bare k are binary; kB and KB are decimal.
            base = 1024 if binary or (prefix and not unit) else 1000
            result = float(number) * base**power
            if result.is_integer():
                return int(result)
    raise ValueError(_must_be_size(value))


def _must_be_size(value: object) -> str:
    return f"must be a size (65536, 64KiB, 4m or 1GiB), not {shown(value)}"


def size_text(count: int) -> int | str:
    """``67108864`` as ``"64MiB"``: how sizes are written out (exact units only)."""
    for unit, scale in _UNITS:
        if count and count % scale == 0:
            return f"{count // scale}{unit}"
    return count
