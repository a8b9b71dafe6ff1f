"""Everything made from fastio.spec stays the spec: Dataset's keywords, the
config file's sections, fastio-bench's options, and the messages a wrong
value gets from a keyword and from a config file."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import click
import pytest

import fastio
from fastio.cli import main
from fastio.cli._options import FlagOrWord, GridType, KnobOption, NamesType, SizeType, option_name
from fastio.config._model import DatasetConfig, Section, sections
from fastio.spec import DatasetSpec, ReaderSettings, knob_defaults, knobs
from fastio.spec._dataset import keyword_defaults
from fastio.spec._dataset import sections as spec_sections

# ---- Dataset(...) ------------------------------------------------------------------------------


def test_dataset_keywords_are_the_specs_with_the_same_defaults() -> None:
    parameters = dict(inspect.signature(fastio.Dataset.__init__).parameters)
    del parameters["self"]
    first, *middle, last = parameters
    assert first == "urls"
    assert parameters["urls"].default is inspect.Parameter.empty
    assert (last, parameters[last].kind) == ("reader_knobs", inspect.Parameter.VAR_KEYWORD)
    assert {name: parameters[name].default for name in middle} == keyword_defaults()


def test_further_dataset_keywords_are_exactly_the_reader_knobs() -> None:
    for name, value in ReaderSettings().as_dict().items():
        assert getattr(DatasetSpec.from_keywords("a.tar", **{name: value}).reader, name) == value
    flat = set(keyword_defaults())
    assert not flat & set(knobs(ReaderSettings)), "a reader knob would shadow a flat keyword"


# ---- config sections ---------------------------------------------------------------------------


def _sections_of(model: type[Section], settings: type[Any], where: str) -> list[tuple[Any, ...]]:
    found = [(model, settings, where)]
    for name, inner in sections(model).items():
        found += _sections_of(inner, knobs(settings)[name].of, f"{where}.{name}")
    return found


CONFIG_SECTIONS = _sections_of(DatasetConfig, DatasetSpec, "config")


@pytest.mark.parametrize(("model", "settings", "where"), CONFIG_SECTIONS,
                         ids=[where for *_, where in CONFIG_SECTIONS])  # fmt: skip
def test_config_section_is_its_settings_knobs(model: Any, settings: Any, where: str) -> None:
    in_config = [name for name, spec in knobs(settings).items() if spec.in_config]
    assert list(model.model_fields) == in_config
    assert model.settings is settings
    defaults = knob_defaults(settings)
    for name, field in model.model_fields.items():
        assert field.is_required() == (name not in defaults), f"{where}.{name}"
        if name in defaults:
            default = field.get_default(call_default_factory=True)
            if isinstance(default, Section):
                default = default.to_settings()
            assert default == defaults[name], f"{where}.{name}"
        assert field.description == knobs(settings)[name].doc


def test_the_config_sections_are_the_specs() -> None:
    assert {name: model.settings for name, model in sections(DatasetConfig).items()} == (
        spec_sections()
    )
    # A config of nothing but urls is the spec of those urls, in every knob.
    assert DatasetConfig(urls="a.tar").to_spec() == DatasetSpec("a.tar")


def test_knobs_kept_out_of_config_files_are_out() -> None:
    kept_out = [(settings, name) for _, settings, _ in CONFIG_SECTIONS
                for name, spec in knobs(settings).items() if not spec.in_config]  # fmt: skip
    assert kept_out, "the fairness callback is kept out of config files"
    for settings, name in kept_out:
        model = next(m for m, s, _ in CONFIG_SECTIONS if s is settings)
        assert name not in model.model_fields


# ---- fastio-bench options ----------------------------------------------------------------------


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        if name == "gen":  # its options describe the data it writes, not knobs
            continue
        found.append((prefix + name, command))
        if isinstance(command, click.Group):
            found += _commands(command, f"{prefix}{name} ")
    return found


COMMANDS = _commands(main)
KNOB_OPTIONS = [(f"{name} {option.opts[0]}", option) for name, command in COMMANDS
                for option in command.params if isinstance(option, KnobOption)]  # fmt: skip


@pytest.mark.parametrize(("where", "option"), KNOB_OPTIONS, ids=[w for w, _ in KNOB_OPTIONS])
def test_knob_option_has_the_knobs_default_bounds_and_choices(where: str, option: Any) -> None:
    spec = knobs(option.settings)[option.knob_name]
    default = knob_defaults(option.settings).get(option.knob_name)
    kind, option_type = spec.kind, option.type
    assert option.help.endswith(spec.doc[1:])  # after a context, its first letter may be lower
    if option.grid:  # values to try: each read as the knob's own option reads one
        assert isinstance(option_type, GridType)
        assert option.default is None
        option_type = option_type.item
        if kind == "flag":  # a flag whose default is a word (direct: auto) takes it too
            assert option_type is click.BOOL or (
                isinstance(option_type, FlagOrWord) and option_type.words == (default,)
            )
            return
    elif kind == "flag" and not isinstance(default, bool):
        # Left unset unless given (the spec's default, such as "auto", applies), shown as it.
        assert (option.default, option.show_default) == (None, str(default))
    else:
        shown = option.default if default is None else option_type.convert(option.default, None,
                                                                          None)  # fmt: skip
        assert shown == default
    if kind == "flag":
        assert option.is_flag
    elif kind == "count":
        assert isinstance(option_type, click.IntRange)
        assert (option_type.min, option_type.max) == (spec.low, spec.high)
    elif kind in ("seconds", "number"):
        assert isinstance(option_type, click.FloatRange)
        low = spec.low if spec.above is None else spec.above
        assert (option_type.min, option_type.max) == (low, spec.high)
        assert option_type.min_open == (spec.above is not None)
    elif kind == "size":
        assert isinstance(option_type, SizeType)
        assert option_type.knob is spec
    elif kind == "choice":
        assert isinstance(option_type, click.Choice)
        assert tuple(option_type.choices) == spec.choices
    elif kind == "names":
        assert isinstance(option_type, NamesType)
    else:
        assert kind in ("text", "path"), where


def test_one_knob_has_one_flag_in_every_command() -> None:
    flags: dict[tuple[type, str], set[str]] = {}
    for _, option in KNOB_OPTIONS:
        flags.setdefault((option.settings, option.knob_name), set()).add(option.opts[0])
    for (settings, name), seen in flags.items():
        # Its Dataset keyword, or its config key path: --tuner-max-trials.
        wanted = "--" + option_name(settings, name).replace("_", "-")
        assert seen == {wanted}, (settings.__name__, name, seen)


def test_every_command_that_reads_offers_the_reader_knobs() -> None:
    for name in ("run", "tune", "fairness", "compare"):
        command = dict(COMMANDS)[name]
        offered = {o.knob_name for o in command.params
                   if isinstance(o, KnobOption) and o.settings is ReaderSettings}  # fmt: skip
        assert {"outstanding_requests", "read_size", "engine", "direct"} <= offered, name


# Options named like a knob that are not that knob, and why.
NOT_KNOBS = {
    ("run", "--format"): "also 'auto', and without it files are read whole",
    ("run", "--batch-size"): "reads dataset.batches(n), which splits workers in whole batches too",
    ("fairness", "--batch-size"): "the DataLoader's; the dataset's split is set to follow it",
    ("compare", "--batch-size"): "rows per batch of each loader compared, fastio's batches(n) too",
    ("index", "--format"): "only the formats that have shard indexes",
    ("demo", "--shards"): "how many files the demo writes",
    ("demo", "--batch-size"): "the DataLoader rows' batch size, the same for every loader",
    ("tiering", "--seed"): "the seed of the synthetic trace",
}


def test_no_option_restates_a_knob() -> None:
    names = {name for _, settings, _ in CONFIG_SECTIONS for name in knobs(settings)}
    names |= set(keyword_defaults()) | {k.keyword for _, s, _ in CONFIG_SECTIONS
                                        for k in knobs(s).values() if k.keyword}  # fmt: skip
    for command_name, command in COMMANDS:
        for option in command.params:
            if isinstance(option, click.Option) and not isinstance(option, KnobOption):
                for flag in option.opts + option.secondary_opts:
                    name = flag.lstrip("-").replace("-", "_")
                    if name in names:
                        assert (command_name, flag) in NOT_KNOBS, f"{command_name} {flag}"


def test_run_offers_the_format_registrys_names() -> None:
    from fastio.cli._run import _FORMATS
    from fastio.formats._shards import FORMATS

    assert sorted(_FORMATS[1:]) == sorted(FORMATS)


# ---- one message for one mistake ---------------------------------------------------------------

# (config file text, its key path, Dataset keywords, the message's tail)
SAME_MISTAKES = [
    ("reader: {read_size: 100}", "reader.read_size", {"read_size": 100},
     "must be in 4096..268435456, not 100"),
    ("reader: {engine: uring}", "reader.engine", {"engine": "uring"},
     "must be 'auto', 'io_uring' or 'threads', not 'uring'"),
    ("shuffle: {buffer: lots}", "shuffle.buffer", {"shuffle_buffer": "lots"},
     "must be a size (65536, 64KiB, 4m or 1GiB), not 'lots'"),
    ("shuffle: {seed: true}", "shuffle.seed", {"seed": True}, "must be an integer, not True"),
    ("on_error: ignore", "on_error", {"on_error": "ignore"},
     "must be 'raise', 'skip' or 'warn', not 'ignore'"),
    ("cache: {prefetch: -1}", "cache.prefetch", {"cache_prefetch": -1},
     "must be at least 0, not -1"),
    ("tuner: {max_trials: 0}", "tuner.max_trials", {"tune": {"max_trials": 0}},
     "must be in 1..10000, not 0"),
    ("fairness: {window_seconds: 0}", "fairness.window_seconds",
     {"fairness": {"window_seconds": 0}}, "must be in 0.01..3600, not 0"),
    ("split: {rank: 1}", "split", {"rank": 1},
     "must give rank and world_size together or neither, not rank=1 world_size=None"),
    ("cache: {dir: /c}", "cache", {"cache_dir": "/c"},
     "cache_dir needs cache_bytes (the cache's byte limit)"),
    ("tiering: {enabled: true}", "tiering", {"tiering": {"enabled": True}},
     "tiering is enabled but lists no tiers"),
    ("format: webdataset\nformat_options: {record_size: 64}", "format_options",
     {"format": "webdataset", "record_size": 64},
     "record_size= applies to format 'fixed', not webdataset"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "key", "keywords", "tail"), SAME_MISTAKES,
                         ids=[key for _, key, *_ in SAME_MISTAKES])  # fmt: skip
def test_a_keyword_and_a_config_value_get_the_same_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, key: str,
    keywords: dict[str, Any], tail: str,
) -> None:  # fmt: skip
    for name in [name for name in os.environ if name.upper().startswith("FASTIO_")]:
        monkeypatch.delenv(name)
    path = tmp_path / "config.yaml"
    path.write_text(f"urls: absent.tar\n{text}\n")
    with pytest.raises(fastio.ConfigError) as from_file:
        fastio.load_config(path)
    assert str(from_file.value) == f"{path}: {key}: {tail}"
    with pytest.raises((TypeError, ValueError)) as from_keywords:
        fastio.Dataset(str(tmp_path / "absent.tar"), **keywords)
    # Named as the keyword was (a section's dict: its knob), or not at all across knobs.
    names = (next(iter(keywords)), key.rsplit(".", 1)[-1])
    assert str(from_keywords.value) in (tail, *(f"{name} {tail}" for name in names))


def test_an_environment_variable_gets_the_same_message_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("urls: absent.tar\n")
    monkeypatch.setenv("FASTIO_SHUFFLE__SHARDS", "0")
    with pytest.raises(fastio.ConfigError) as caught:
        fastio.load_config(path)
    assert str(caught.value) == (
        "environment variable FASTIO_SHUFFLE__SHARDS: shuffle.shards: must be at least 1, not 0"
    )
    with pytest.raises(ValueError, match=r"^shuffle_shards must be at least 1, not 0$"):
        fastio.Dataset("absent.tar", shuffle_shards=0)


# (config file text, its message after the path, Dataset keywords, their message)
SAME_TYPOS = [
    ("shuffle: {bufer: 64MiB}", "unknown key 'shuffle.bufer'; did you mean 'shuffle.buffer'?",
     {"shuffle_bufer": "64MiB"},
     "Dataset() got an unexpected keyword argument 'shuffle_bufer'; did you mean "
     "'shuffle_buffer'?"),
    ("reader: {outstanding_request: 4}",
     "unknown key 'reader.outstanding_request'; did you mean 'reader.outstanding_requests'?",
     {"outstanding_request": 4},
     "Dataset() got an unexpected keyword argument 'outstanding_request'; did you mean "
     "'outstanding_requests'?"),
    ("tuner: {max_trails: 3}", "unknown key 'tuner.max_trails'; did you mean 'tuner.max_trials'?",
     {"tune": {"max_trails": 3}},
     "tune: TunerSettings() got an unexpected keyword argument 'max_trails'; did you mean "
     "'max_trials'?"),
    ("reader: {read_sise: 1MiB}",
     "unknown key 'reader.read_sise'; did you mean 'reader.read_size'?",
     {"reader": {"read_sise": "1MiB"}},
     "ReaderSettings() got an unexpected keyword argument 'read_sise'; did you mean "
     "'read_size'?"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "from_file", "keywords", "from_keywords"), SAME_TYPOS,
                         ids=[text.split(":")[0] + "." + text.split("{")[1].split(":")[0]
                              for text, *_ in SAME_TYPOS])  # fmt: skip
def test_a_typo_gets_the_closest_knob_from_a_keyword_and_a_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, from_file: str,
    keywords: dict[str, Any], from_keywords: str,
) -> None:  # fmt: skip
    for name in [name for name in os.environ if name.upper().startswith("FASTIO_")]:
        monkeypatch.delenv(name)
    path = tmp_path / "config.yaml"
    path.write_text(f"urls: absent.tar\n{text}\n")
    with pytest.raises(fastio.ConfigError) as file_error:
        fastio.load_config(path)
    assert str(file_error.value) == f"{path}: {from_file}"
    with pytest.raises(TypeError) as keyword_error:
        fastio.Dataset(str(tmp_path / "absent.tar"), **keywords)
    assert str(keyword_error.value) == from_keywords


@pytest.mark.parametrize("size", ["64MiB", "64 mib", "64MB", "4m", "65536", 65536])
def test_a_size_reads_the_same_from_a_keyword_and_a_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: str | int
) -> None:
    for name in [name for name in os.environ if name.upper().startswith("FASTIO_")]:
        monkeypatch.delenv(name)
    path = tmp_path / "config.yaml"
    path.write_text(f"urls: absent.tar\nshuffle: {{buffer: {size}}}\ncache: "
                    f"{{dir: {tmp_path}, max_bytes: {size}}}\n")  # fmt: skip
    spec = fastio.load_config(path).to_spec()
    keywords = DatasetSpec.from_keywords("absent.tar", shuffle_buffer=size, cache_dir=tmp_path,
                                         cache_bytes=size)  # fmt: skip
    assert spec.shuffle.buffer == keywords.shuffle.buffer == spec.cache.max_bytes
    assert keywords.cache.max_bytes == spec.cache.max_bytes
    assert spec.shuffle.buffer in (64 << 20, 64_000_000, 4 << 20, 65536)
