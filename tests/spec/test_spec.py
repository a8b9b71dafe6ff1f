"""fastio.spec: the one checker of every knob, the size parser, the mapping of
Dataset keywords to sections, and required knobs."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from fastio.spec import (
    REQUIRED,
    CacheSettings,
    DatasetSpec,
    FairnessSettings,
    FormatSettings,
    Knob,
    ReaderSettings,
    ShuffleSettings,
    SplitSettings,
    TieringSettings,
    TierSettings,
    TunerSettings,
    check_value,
    knob,
    knob_defaults,
    knobs,
    parse_size,
    size_text,
)
from fastio.spec._dataset import flat_keywords, keyword_defaults, sections

# ---- check_value, kind by kind -------------------------------------------------------------

# (knob, value, normal form)
GOOD: list[tuple[Knob, Any, Any]] = [
    (Knob("", "count", low=1, high=4), 4, 4),
    (Knob("", "count", low=0), 10**12, 10**12),
    (Knob("", "size", low=1), "64KiB", 65536),
    (Knob("", "size", low=1), "4m", 4 << 20),
    (Knob("", "size", low=1), "1MB", 1_000_000),
    (Knob("", "size", low=1), 7, 7),
    (Knob("", "seconds", above=0), 0.5, 0.5),
    (Knob("", "seconds", above=0), 2, 2),
    (Knob("", "number", low=0, high=1), 1.0, 1.0),
    (Knob("", "flag"), False, False),
    (Knob("", "choice", choices=("a", "b")), "b", "b"),
    (Knob("", "text"), "x", "x"),
    (Knob("", "path"), Path("/tmp/x"), "/tmp/x"),
    (Knob("", "paths"), [Path("/a"), "/b"], ("/a", "/b")),
    (Knob("", "paths"), "/a", "/a"),
    (Knob("", "names"), ["a", "b"], ("a", "b")),
    (Knob("", "urls"), Path("a.tar"), "a.tar"),
    (Knob("", "urls"), ["a.tar", Path("b.tar")], ("a.tar", "b.tar")),
    (Knob("", "mapping"), None, {}),
    (Knob("", "mapping"), {"anon": True}, {"anon": True}),
    (Knob("", "callable"), print, print),
    (Knob("", "count", optional=True), None, None),
    (Knob("", "section", of=ShuffleSettings), {"seed": 3}, ShuffleSettings(seed=3)),
    (Knob("", "sections", of=TierSettings), [{"name": "a", "path": "/a", "capacity": "1KiB"}],
     (TierSettings("a", "/a", 1024),)),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "value", "normal"), GOOD)
def test_good_values_in_their_normal_form(spec: Knob, value: Any, normal: Any) -> None:
    assert check_value("knob", spec, value) == normal


# (knob, value, exception, the exact message)
BAD: list[tuple[Knob, Any, type[Exception], str]] = [
    (Knob("", "count", low=1, high=4), 5, ValueError, "k must be in 1..4, not 5"),
    (Knob("", "count", low=1), 0, ValueError, "k must be at least 1, not 0"),
    (Knob("", "count", high=9), 10, ValueError, "k must be at most 9, not 10"),
    (Knob("", "count"), True, TypeError, "k must be an integer, not True"),
    (Knob("", "count"), "3", TypeError, "k must be an integer, not '3'"),
    (Knob("", "count"), 3.0, TypeError, "k must be an integer, not 3.0"),
    (Knob("", "count"), None, TypeError, "k must be given, not None"),
    (Knob("", "size", low=4096), "1KiB", ValueError, "k must be at least 4096, not 1024"),
    (Knob("", "size"), "lots", ValueError,
     "k must be a size (65536, 64KiB, 4m or 1GiB), not 'lots'"),
    (Knob("", "size"), "1.5B", ValueError,
     "k must be a size (65536, 64KiB, 4m or 1GiB), not '1.5B'"),
    (Knob("", "size"), 1.5, TypeError, "k must be a size (65536, 64KiB, 4m or 1GiB), not 1.5"),
    (Knob("", "size"), True, TypeError, "k must be a size (65536, 64KiB, 4m or 1GiB), not True"),
    (Knob("", "seconds", above=0), 0, ValueError, "k must be more than 0, not 0"),
    (Knob("", "seconds"), math.nan, TypeError, "k must be a number, not nan"),
    (Knob("", "number"), False, TypeError, "k must be a number, not False"),
    (Knob("", "flag"), "yes", TypeError, "k must be true or false, not 'yes'"),
    (Knob("", "choice", choices=("a", "b", "c")), "d", ValueError,
     "k must be 'a', 'b' or 'c', not 'd'"),
    (Knob("", "text"), 3, TypeError, "k must be a string, not 3"),
    (Knob("", "path"), 3, TypeError, "k must be a path, not 3"),
    (Knob("", "paths"), [], TypeError, "k must be a path or a list of paths, not []"),
    (Knob("", "names"), "a,b", TypeError, "k must be a list of names, not 'a,b'"),
    (Knob("", "names"), ["a", 1], TypeError, "k must be a list of names, not ['a', 1]"),
    (Knob("", "urls"), [], ValueError,
     "k must be a URL pattern or a non-empty list of them, not []"),
    (Knob("", "urls"), ["a", ""], ValueError,
     "k must be a URL pattern or a non-empty list of them, not ['a', '']"),
    (Knob("", "mapping"), {1: 2}, TypeError, "k must be a mapping, not {1: 2}"),
    (Knob("", "callable"), 3, TypeError, "k must be callable, not 3"),
    (Knob("", "section", of=ShuffleSettings), 3, TypeError,
     "k must be ShuffleSettings or a dict of it, not 3"),
    (Knob("", "sections", of=TierSettings), {}, TypeError,
     "k must be a list of TierSettings or of dicts of it, not {}"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "value", "kind", "message"), BAD)
def test_bad_values_are_named_with_what_they_must_be(
    spec: Knob, value: Any, kind: type[Exception], message: str
) -> None:
    with pytest.raises(kind) as caught:
        check_value("k", spec, value)
    assert type(caught.value) is kind
    assert str(caught.value) == message


def test_long_values_are_cut_in_messages() -> None:
    with pytest.raises(TypeError) as caught:
        check_value("k", Knob("", "count"), "x" * 100)
    assert str(caught.value) == f"k must be an integer, not '{'x' * 56}..."


# ---- sizes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count"),
    [("65536", 65536), ("64KiB", 65536), ("64kib", 65536), ("4k", 4096), ("4m", 4 << 20),
     ("1MB", 1_000_000), ("1kB", 1000), ("1.5GiB", 3 << 29), (" 2 MiB ", 2 << 20), (12, 12)],
)  # fmt: skip
def test_parse_size(text: Any, count: int) -> None:
    assert parse_size(text) == count


@pytest.mark.parametrize("text", ["lots", "", "1.5", "4Mi", True, 4.0, "-1"])
def test_parse_size_refuses(text: Any) -> None:
    with pytest.raises(ValueError, match="must be a size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("count", "text"),
    [(64 << 20, "64MiB"), (4096, "4KiB"), (3 << 30, "3GiB"), (1 << 40, "1TiB"), (1000, 1000),
     (0, 0), (65537, 65537)],
)  # fmt: skip
def test_size_text_writes_exact_units(count: int, text: Any) -> None:
    assert size_text(count) == text
    assert parse_size(text) == count


# ---- settings classes ------------------------------------------------------------------------


def test_settings_store_normal_forms() -> None:
    shuffle = ShuffleSettings(buffer="4MiB")
    assert shuffle.buffer == 4 << 20
    assert FormatSettings(columns=["a"]).columns == ("a",)
    assert CacheSettings(dir=Path("/c"), max_bytes="1GiB").dir == "/c"


def test_required_knobs_must_be_given() -> None:
    assert "urls" not in knob_defaults(DatasetSpec)
    with pytest.raises(TypeError, match="urls"):
        DatasetSpec()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="capacity"):
        TierSettings("fast", "/tmp")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="a tier needs a name and a path"):
        TierSettings("", "/tmp", 1)


def test_knob_defaults_are_the_fields_defaults() -> None:
    assert knob_defaults(ReaderSettings) == ReaderSettings().as_dict()
    defaults = knob_defaults(DatasetSpec)
    assert defaults["shuffle"] == ShuffleSettings()
    assert defaults["storage_options"] == {}


def test_a_required_knob_is_declared_with_required() -> None:
    @dataclasses.dataclass(frozen=True)
    class Example:
        must: int = knob(REQUIRED, "Must be given.", "count")
        may: int = knob(3, "May be given.", "count")

    assert [f.name for f in dataclasses.fields(Example)] == ["must", "may"]
    assert knob_defaults(Example) == {"may": 3}
    assert knobs(Example)["must"].doc == "Must be given."


def test_cross_knob_rules() -> None:
    with pytest.raises(ValueError, match="rank < world_size"):
        SplitSettings(rank=2, world_size=2)
    with pytest.raises(ValueError, match="cache_dir needs cache_bytes"):
        CacheSettings(dir="/c")
    with pytest.raises(ValueError, match="lists no tiers"):
        TieringSettings(enabled=True)
    tier = {"name": "fast", "path": "/tmp", "capacity": "1GiB"}
    with pytest.raises(ValueError, match="give shuffle_memory, cache_bytes or both"):
        DatasetSpec("a.tar", tiering={"enabled": True, "tiers": [tier]})
    with pytest.raises(ValueError, match="give cache_bytes, not cache_dir"):
        DatasetSpec("a.tar", tiering={"enabled": True, "tiers": [tier]},
                    cache={"dir": "/c", "max_bytes": 1})  # fmt: skip


# ---- Dataset keywords --------------------------------------------------------------------------

# A value other than the default for every flat keyword, and where it lands.
FLAT: dict[str, tuple[Any, str | None, str, Any]] = {
    "format": ("fixed", None, "format", "fixed"),
    "storage_options": ({"anon": True}, None, "storage_options", {"anon": True}),
    "on_error": ("skip", None, "on_error", "skip"),
    "verify": (False, "format_options", "verify", False),
    "example": (False, "format_options", "example", False),
    "record_size": ("1KiB", "format_options", "record_size", 1024),
    "columns": (["a"], "format_options", "columns", ("a",)),
    "index": ("s3://b/d.fastio-index.npz", "format_options", "index", "s3://b/d.fastio-index.npz"),
    "index_dir": (Path("/i"), "format_options", "index_dir", "/i"),
    "shuffle": (False, "shuffle", "enabled", False),
    "seed": (5, "shuffle", "seed", 5),
    "shuffle_buffer": ("1MiB", "shuffle", "buffer", 1 << 20),
    "shuffle_shards": (3, "shuffle", "shards", 3),
    "rank": (1, "split", "rank", 1),
    "world_size": (2, "split", "world_size", 2),
    "remainder": ("pad", "split", "remainder", "pad"),
    "batch_size": (32, "split", "batch_size", 32),
    "handoff_memory": ("16MiB", "split", "handoff_memory", 16 << 20),
    "cache_dir": ("/c", "cache", "dir", "/c"),
    "cache_bytes": ("2GiB", "cache", "max_bytes", 2 << 30),
    "cache_policy": ("lru", "cache", "policy", "lru"),
    "cache_prefetch": (0, "cache", "prefetch", 0),
    "shuffle_memory": ("1GiB", "tiering", "shuffle_memory", 1 << 30),
}


def test_every_flat_keyword_lands_in_its_section() -> None:
    assert set(FLAT) == set(flat_keywords())
    spec = DatasetSpec.from_keywords("a.tar", **{k: given for k, (given, *_) in FLAT.items()})
    for keyword, (_, section, field, stored) in FLAT.items():
        holder = spec if section is None else getattr(spec, section)
        assert getattr(holder, field) == stored, keyword


def test_further_keywords_are_reader_knobs_over_the_reader_given() -> None:
    reader = ReaderSettings(engine="threads", read_size=8192)
    spec = DatasetSpec.from_keywords("a.tar", reader=reader, outstanding_requests=3,
                                     memory_budget="1MiB")  # fmt: skip
    assert spec.reader == reader.replace(outstanding_requests=3, memory_budget=1 << 20)


def test_whole_sections_as_settings_dicts_or_switches() -> None:
    spec = DatasetSpec.from_keywords("a.tar", tune=True, fairness=False,
                                     tiering={"tiers": [{"name": "t", "path": "/t",
                                                         "capacity": 1}]})  # fmt: skip
    assert spec.tuner == TunerSettings(enabled=True)
    assert spec.fairness == FairnessSettings(enabled=False)
    assert spec.tiering.tiers == (TierSettings("t", "/t", 1),)
    tuned = DatasetSpec.from_keywords("a.tar", tune={"window_seconds": 0.5})
    assert tuned.tuner == TunerSettings(enabled=True, window_seconds=0.5)
    assert DatasetSpec.from_keywords("a.tar") == DatasetSpec("a.tar")


def test_a_whole_section_keeps_what_it_holds_beside_keywords_left_at_their_defaults() -> None:
    """``Dataset()`` passes every keyword; one at its default does not undo
    what a whole section given holds (tiering's ``shuffle_memory``), one
    given otherwise still goes over it."""
    tiering = {"enabled": True, "shuffle_memory": "8MiB",
               "tiers": [{"name": "t", "path": "/t", "capacity": "1GiB"}]}  # fmt: skip
    keywords = {**keyword_defaults(), "tiering": tiering}
    assert DatasetSpec.from_keywords("a.tar", **keywords).tiering.shuffle_memory == 8 << 20
    keywords["shuffle_memory"] = "4MiB"
    assert DatasetSpec.from_keywords("a.tar", **keywords).tiering.shuffle_memory == 4 << 20


def test_unknown_keyword_raises_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'shuffle_seed'"):
        DatasetSpec.from_keywords("a.tar", shuffle_seed=3)
    with pytest.raises(TypeError, match="reader must be ReaderSettings or a dict of it, not 3"):
        DatasetSpec.from_keywords("a.tar", reader=3)


def test_keyword_values_are_checked_as_knobs() -> None:
    with pytest.raises(ValueError, match=r"^shuffle_buffer must be a size"):
        DatasetSpec.from_keywords("a.tar", shuffle_buffer="lots")
    with pytest.raises(TypeError, match=r"^seed must be an integer, not True$"):
        DatasetSpec.from_keywords("a.tar", seed=True)


def test_sections_and_keywords_are_consistent() -> None:
    spec_sections = sections()
    assert list(spec_sections) == [name for name, k in knobs(DatasetSpec).items()
                                   if k.kind == "section"]  # fmt: skip
    assert all(knobs(DatasetSpec)[name].of is cls for name, cls in spec_sections.items())
    defaults = keyword_defaults()
    assert set(defaults) == set(flat_keywords()) | {"reader", "tune", "fairness", "tiering"}
