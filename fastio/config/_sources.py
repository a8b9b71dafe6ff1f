"""Where config values come from besides the file: ``FASTIO_*`` environment
variables and explicit arguments, each as nested data merged key by key.

A variable is ``FASTIO_`` and the key path with ``__`` between section and
key (``FASTIO_READER__READ_SIZE=4MiB``), in any case. Its text is read as its
knob's kind reads text: ``32`` for a count, ``true``/``false`` for a flag,
``4MiB`` for a size; lists and mappings as JSON (``FASTIO_STORAGE_OPTIONS=
'{"anon": true}'``), and a URL list too where the text starts with ``[``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from fastio.config._model import plain
from fastio.spec import DatasetSpec, knobs
from fastio.spec._knobs import shown

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fastio.spec import Knob

__all__ = ["Environment", "environment", "merged", "nested"]

PREFIX = "FASTIO_"
_JSON = ("mapping", "names", "section", "sections")
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
_FLAGS = {"true": True, "1": True, "yes": True, "on": True,
          "false": False, "0": False, "no": False, "off": False}  # fmt: skip


@dataclass(frozen=True)
class Environment:
    """The config data ``FASTIO_*`` variables hold."""

    data: dict[str, Any]
    variables: dict[tuple[str, ...], str]
    """Key path -> the variable that set it, as spelled."""
    problems: list[str]
    """Variables whose text does not parse (JSON), a line each."""


def environment() -> Environment:
    """The ``FASTIO_*`` variables whose first key is a config key; others
    (``FASTIO_TEST_...``) are not config and are left alone."""
    top = knobs(DatasetSpec)
    found = []
    problems = []
    for variable, text in os.environ.items():
        if variable.upper().startswith(PREFIX):
            path = tuple(variable[len(PREFIX) :].lower().split("__"))
            if path[0] in top:
                found.append((path, variable, text))
            elif (meant := _meant(path, top)) is not None:
                problems.append(f"environment variable {variable}: {meant}")
    data: dict[str, Any] = {}
    variables: dict[tuple[str, ...], str] = {}
    for path, variable, text in sorted(found):  # a whole section before its keys
        try:
            value = _value(text, _knob_at(path))
        except ValueError:
            problems.append(f"environment variable {variable}: {'.'.join(path)}: must be JSON, "
                            f"not {shown(text)}")  # fmt: skip
            continue
        data = merged(data, _nest(path, value))
        variables[path] = variable
    return Environment(data, variables, problems)


def _meant(path: tuple[str, ...], top: Mapping[str, Knob]) -> str | None:
    """What a variable whose first key is no config key was likely meant as:
    a section misspelt (``FASTIO_RAEDER__READ_SIZE``), or one underscore where
    two go (``FASTIO_READER_READ_SIZE``); None for a variable that is no
    config at all (``FASTIO_HTTP_CLIENT``, ``FASTIO_TEST_...``)."""
    if len(path) > 1:  # the separator of a key path: meant as config
        close = difflib.get_close_matches(path[0], sorted(top), n=1)
        return f"unknown key {path[0]!r}" + (f"; did you mean {close[0]!r}?" if close else "")
    for name, spec in top.items():
        if spec.kind == "section" and path[0].startswith(f"{name}_"):
            key = path[0][len(name) + 1 :]
            return (f"unknown key {path[0]!r}; did you mean {PREFIX}{name.upper()}__"
                    f"{key.upper()} (two underscores between section and key)?")  # fmt: skip
    return None


def _knob_at(path: tuple[str, ...]) -> Knob | None:
    settings: Any = DatasetSpec
    spec = None
    for part in path:
        spec = knobs(settings).get(part) if settings is not None else None
        if spec is None:
            return None
        settings = spec.of if spec.kind == "section" else None
    return spec


def _value(text: str, spec: Knob | None) -> Any:
    """``text`` read as the kind of ``spec`` reads it; what does not read as
    that kind stays text, for the knob's check to name. Raises ValueError
    for JSON that does not parse."""
    kind = spec.kind if spec is not None else "text"
    if kind in _JSON or (kind in ("urls", "paths") and text.lstrip().startswith("[")):
        return json.loads(text)
    if kind == "count" and _INTEGER.fullmatch(text):
        return int(text)
    if kind in ("seconds", "number"):
        try:
            return float(text)
        except ValueError:
            return text
    if kind == "flag":
        return _FLAGS.get(text.strip().lower(), text)
    return text


def nested(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Explicit arguments as config data: ``{"reader__read_size": x}`` as
    ``{"reader": {"read_size": x}}``; sections and settings as plain data."""
    result: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, BaseModel):
            value = value.model_dump()
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = plain(value)
        result = merged(result, _nest(tuple(key.split("__")), value))
    return result


def _nest(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    for key in reversed(path[1:]):
        value = {key: value}
    return {path[0]: value}


def merged(base: Any, top: Any) -> Any:
    """``top`` over ``base``, mappings merged key by key."""
    if not (isinstance(base, dict) and isinstance(top, dict)):
        return top
    return base | {key: merged(base[key], value) if key in base else value
                   for key, value in top.items()}  # fmt: skip
