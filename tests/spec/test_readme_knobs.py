"""The README's table of knobs is the spec's: every knob of a dataset, with
its keyword, its config key, its default and its doc, as fastio.spec has them.
Print the table to paste with ``python -m tests.spec.test_readme_knobs``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from fastio.spec import DatasetSpec, knobs
from fastio.spec._knobs import shown, size_text

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- knobs: generated from fastio.spec -->"
# Sections documented in their own README sections rather than row by row.
OWN_SECTIONS = {"fairness", "tiering"}


def _default(field: dataclasses.Field[Any], kind: str) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if value is None:
        return "unset"
    if kind == "size":
        return f"`{size_text(value)}`"
    return f"`{shown(value)}`"


def rows() -> list[str]:
    lines = ["| keyword | config key | default | meaning |", "| --- | --- | --- | --- |"]
    for field in dataclasses.fields(DatasetSpec):
        meta = knobs(DatasetSpec)[field.name]
        if meta.kind != "section":
            lines.append(f"| `{meta.keyword or field.name}` | `{field.name}` | "
                         f"{_default(field, meta.kind)} | {meta.doc} |")  # fmt: skip
            continue
        if field.name in OWN_SECTIONS:
            continue
        assert meta.of is not None
        for inner in dataclasses.fields(meta.of):
            knob = knobs(meta.of).get(inner.name)
            if knob is None or not knob.in_config:
                continue
            keyword = knob.keyword
            if keyword is None and field.name in ("reader",):
                keyword = inner.name  # the reader's knobs are keywords as they are named
            if keyword is None and field.name == "tuner":
                keyword = (
                    "tune=True" if inner.name == "enabled" else f"tune={{'{inner.name}': ...}}"
                )
            name = f"`{keyword}`" if keyword else ""
            lines.append(f"| {name} | `{field.name}.{inner.name}` | {_default(inner, knob.kind)} | "
                         f"{knob.doc} |")  # fmt: skip
    return lines


def readme_table() -> list[str]:
    text = README.read_text()
    assert MARKER in text, f"README.md has no {MARKER!r} before its knob table"
    after = text.split(MARKER, 1)[1].lstrip("\n").splitlines()
    table = []
    for line in after:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


def test_the_readme_knob_table_is_the_specs() -> None:
    expected, found = rows(), readme_table()
    missing = [row for row in expected if row not in found]
    stale = [row for row in found if row not in expected]
    hint = (
        "README.md's knob table differs from fastio.spec: paste the output of "
        "`python -m tests.spec.test_readme_knobs`"
    )
    assert not missing, hint + "; missing:\n" + "\n".join(missing)
    assert not stale, hint + "; stale:\n" + "\n".join(stale)
    assert re.search(r"\| `shuffle_buffer` \| `shuffle.buffer` \| `64MiB` \|", "\n".join(found))


if __name__ == "__main__":
    print("\n".join(rows()))
