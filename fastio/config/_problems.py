"""What is wrong with a config, a line per problem: where the value came from
(the file, ``arguments`` or a ``FASTIO_*`` variable), the key path, what was
expected and what was found; an unknown key comes with the nearest known one."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastio.config._model import DatasetConfig, sections
from fastio.spec._knobs import shown

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

__all__ = ["Origins", "explain", "holds", "unknown"]

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Origins:
    """Where each value of a merged config came from."""

    label: str
    """The config file (also named for problems of the config as a whole)."""
    file: dict[str, Any]
    overrides: dict[str, Any]
    variables: dict[tuple[str, ...], str] = field(default_factory=dict)
    """Key path -> the ``FASTIO_*`` variable that set it, as spelled."""

    def of(self, loc: Loc) -> str:
        """Who set the value at ``loc``: "arguments", the file, or a variable."""
        if not loc:
            return self.label
        if holds(self.overrides, loc):
            return "arguments"
        keys = tuple(str(part) for part in loc)
        for depth in range(len(keys), 0, -1):
            variable = self.variables.get(keys[:depth])
            if variable is not None:
                return f"environment variable {variable}"
        return self.label


def holds(data: Any, loc: Loc) -> bool:
    """Whether ``data`` has a value at the key path ``loc``."""
    for part in loc:
        listed = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if not (listed or (isinstance(data, dict) and part in data)):
            return False
        data = data[part]
    return True


def explain(error: ValidationError, origins: Origins) -> list[str]:
    """A line per problem pydantic found, each naming where it came from."""
    return [f"{origins.of(tuple(e['loc']))}: {_problem(e)}" for e in error.errors()]


_EXPECTED = {
    "model_type": "a section (a mapping of keys)",
    "model_attributes_type": "a section (a mapping of keys)",
    "tuple_type": "a list",
}


def _problem(error: Any) -> str:
    """One pydantic error as ``key.path: must be X, not Y``."""
    loc = tuple(error["loc"])
    kind, context = error["type"], error.get("ctx", {})
    if kind == "extra_forbidden":
        return unknown(loc)
    key = ".".join(str(part) for part in loc)
    if kind == "missing":
        return f"{key}: missing; must be given" + (
            " (a URL pattern or a list of them)" if key == "urls" else ""
        )
    if kind == "value_error":  # the spec's checks: "must be ..., not ..."
        message = str(context["error"])
    elif kind in _EXPECTED:
        message = f"must be {_EXPECTED[kind]}, not {shown(error['input'])}"
    else:
        message = f"{error['msg']}, not {shown(error['input'])}"
    return f"{key}: {message}" if key else message


def unknown(loc: Loc) -> str:
    """``unknown key 'shuffle.sead'; did you mean 'shuffle.seed'?``"""
    *parents, name = [str(part) for part in loc]
    model = _model_at(loc[:-1])
    known = list(model.model_fields) if model is not None else []
    prefix = "".join(f"{parent}." for parent in parents)
    # This section's keys (as close as difflib.get_close_matches asks), then
    # those of every section, closer (``seed`` or ``sead`` at the top are
    # ``shuffle.seed``): the closest name, this section's where as close.
    candidates = [(f"{prefix}{key}", key, 0.6) for key in known]
    candidates += [(f"{section}.{key}", key, 0.7)
                   for section, model in sections(DatasetConfig).items()
                   for key in model.model_fields]  # fmt: skip
    scored = [(ratio, -at, full) for at, (full, key, cutoff) in enumerate(candidates)
              if (ratio := difflib.SequenceMatcher(None, name, key).ratio()) >= cutoff]  # fmt: skip
    best = max(scored, default=None)
    section, _, key = name.partition(".")
    if key and section in sections(_model_at(loc[:-1]) or DatasetConfig):
        # A key path written as one key (``reader.read_size: 4MiB``): nested, it is the key.
        hint = f"write it nested, as {section}: {{{key}: ...}}"
    elif best is not None:
        hint = f"did you mean '{best[2]}'?"
    else:
        hint = "expected one of " + ", ".join(f"{prefix}{key}" for key in known)
    return f"unknown key '{prefix}{name}'; {hint}"


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The section at the key path ``loc`` (list positions skipped), if any."""
    model: type[BaseModel] = DatasetConfig
    for part in loc:
        if isinstance(part, int):
            continue
        inner = sections(model).get(part)
        if inner is None:
            return None
        model = inner
    return model
