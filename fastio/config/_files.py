"""Config files as text: YAML, TOML or JSON by the extension; syntax errors
named by line and column."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import tomli_w
import yaml  # type: ignore[import-untyped, unused-ignore]

from fastio._errors import ConfigError
from fastio.spec._knobs import shown

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the backport, a dependency on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from pathlib import Path

__all__ = ["dumps", "file_kind", "read"]

_KINDS = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json"}
_TOML_WHERE = re.compile(r"^(.*) \(at line (\d+), column (\d+)\)$", re.DOTALL)


def file_kind(path: Path) -> str:
    """``"yaml"``, ``"toml"`` or ``"json"``, by the extension of ``path``.
    Raises :class:`fastio.ConfigError` for another extension."""
    kind = _KINDS.get(path.suffix.lower())
    if kind is None:
        raise ConfigError(
            f"{path}: unknown config file type {path.suffix or '(none)'!r}; "
            "use .yaml, .yml, .toml or .json",
            file=str(path),
        )
    return kind


def read(path: Path) -> dict[str, Any]:
    """The mapping of sections in the config file ``path``. Raises
    :class:`fastio.ConfigError` for a file that is not UTF-8, does not parse or
    holds no mapping; OSError where it cannot be read."""
    label = str(path)
    kind = file_kind(path)
    try:
        # A byte-order mark (editors on Windows write one) is no part of the text.
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{label}: not UTF-8 text ({error.reason} at byte {error.start})",
                          file=label) from None  # fmt: skip
    data = _parse(text, kind, label)
    if data is None:  # an empty YAML file
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{label}: must be a mapping of sections (urls, format, reader, ...), "
            f"not {type(data).__name__} {shown(data)}",
            file=label,
        )
    return data


class _UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc]
    """YAML's safe loader, refusing a key given twice in one mapping (the
    second would silently replace the first: a whole section lost)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):  # {{a: b}}: a mapping as a key
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    "a key must be text, not a "
                    + ("mapping" if isinstance(key, dict) else type(key).__name__),
                    key_node.start_mark,
                )  # fmt: skip
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"key {key!r} is given twice", key_node.start_mark,
                )  # fmt: skip
            seen.add(key)
        return super().construct_mapping(node, deep)


def _json_object(repeated: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A JSON object hook noting in ``repeated`` each key given twice in one
    object (see :class:`_UniqueKeyLoader`)."""

    def made(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                repeated.append(key)
            result[key] = value
        return result

    return made


def _parse(text: str, kind: str, label: str) -> object:
    """The data in ``text``; syntax errors (and a key given twice) name where."""
    try:
        if kind == "yaml":
            return yaml.load(text, Loader=_UniqueKeyLoader)  # a safe loader, subclassed
        if kind == "toml":
            return tomllib.loads(text)
        repeated: list[str] = []
        data = json.loads(text, object_pairs_hook=_json_object(repeated))
        if not repeated:
            return data
        problem = f"not valid JSON: key {repeated[0]!r} is given twice"
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = f"{where}not valid YAML: {error.problem}"
    except yaml.YAMLError as error:
        problem = f"not valid YAML: {error}"
    except tomllib.TOMLDecodeError as error:
        match = _TOML_WHERE.match(str(error))
        problem = (
            f"line {match[2]}, column {match[3]}: not valid TOML: {match[1]}"
            if match
            else f"not valid TOML: {error}"
        )
    except json.JSONDecodeError as error:
        problem = f"line {error.lineno}, column {error.colno}: not valid JSON: {error.msg}"
    raise ConfigError(f"{label}: {problem}", file=label)


def dumps(data: Mapping[str, Any], kind: str, label: str = "the config") -> str:
    """``data`` (see :meth:`DatasetConfig.to_dict`) as ``"yaml"``, ``"toml"`` or
    ``"json"``. Raises :class:`fastio.ConfigError` for a null (an unset key
    whose default is a value) in TOML, which has none, naming ``label``."""
    if kind == "yaml":
        return str(yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True))
    if kind == "toml":
        nulls = [".".join(path) for path in _null_paths(data)]
        if nulls:
            raise ConfigError(*(f"{label}: {key}: unset, which TOML cannot write (it has no "
                                "null); write YAML or JSON, or give it a value"
                                for key in nulls), file=label)  # fmt: skip
        return tomli_w.dumps(data)
    return json.dumps(data, indent=2) + "\n"


def _null_paths(data: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if data is None:
        yield path
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _null_paths(value, (*path, str(key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _null_paths(value, (*path, str(index)))
