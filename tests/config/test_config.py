"""Config files: round trips through YAML, TOML and JSON, precedence, the exact
messages bad configs give, and fastio-bench --config / config check."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import yaml

import fastio
import fastio.spec
from fastio.config._config import DatasetConfig, defaults, load_config, save_config
from fastio.config._model import ReaderSection
from tests.cli.test_cli import bench
from tests.shards import key_of, write

# Something other than the default in every section.
EVERY_SECTION: dict[str, Any] = {
    "urls": ["data/train-{0000..0127}.tar", "simplecache::s3://bucket/val-*.tar"],
    "format": "webdataset",
    "format_options": {"index_dir": "/tmp/indexes"},
    "storage_options": {"anon": True, "client_kwargs": {"region_name": "eu-west-1"}},
    "reader": {
        "outstanding_requests": 32,
        "read_size": "4MiB",
        "engine": "threads",
        "direct": True,
        "memory_budget": 100_000,
        "coalesce_gap": 0,
        "max_idle_files": 7,
    },
    "shuffle": {"enabled": False, "seed": 7, "buffer": "1GiB", "shards": 3},
    "split": {"rank": 1, "world_size": 4, "remainder": "pad"},
    "on_error": "warn",
    "cache": {"dir": "/scratch/fastio", "max_bytes": "200GiB", "policy": "lru", "prefetch": 5},
    "tuner": {"enabled": True},
    "fairness": {"enabled": True},
    # Listed but not enabled: enabled tiering keeps the cache in the tiers, not in cache.dir.
    "tiering": {"tiers": [{"name": "fast", "path": "/dev/shm/fastio", "capacity": "8GiB"}],
                "shuffle_memory": "256MiB"},
}  # fmt: skip
DUMP = {".yaml": yaml.safe_dump, ".yml": yaml.safe_dump, ".toml": tomli_w.dumps,
        ".json": json.dumps}  # fmt: skip


@pytest.fixture(autouse=True)
def no_fastio_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("FASTIO_"):
            monkeypatch.delenv(name)


def config_file(folder: Path, data: dict[str, Any], suffix: str = ".yaml") -> Path:
    path = folder / f"config{suffix}"
    path.write_text(DUMP[suffix](data))
    return path


# ---- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("suffix", list(DUMP))
def test_every_format_reads_the_same_config(tmp_path, suffix) -> None:
    config = load_config(config_file(tmp_path, EVERY_SECTION, suffix))
    assert config.reader.read_size == 4 << 20
    assert config.cache.max_bytes == 200 << 30
    assert config.storage_options == EVERY_SECTION["storage_options"]
    assert config == load_config(config_file(tmp_path, EVERY_SECTION, ".yaml"))


@pytest.mark.parametrize("only_changed", [False, True], ids=["full", "only-changed"])
@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_load_save_load_gives_an_equal_config(tmp_path, suffix, only_changed) -> None:
    for data in (EVERY_SECTION, {"urls": "train-{0..3}.tar"}):
        original = load_config(config_file(tmp_path, data))
        saved = tmp_path / f"saved{suffix}"
        save_config(original, saved, only_changed=only_changed)
        again = load_config(saved)
        assert again == original
        resaved = tmp_path / f"resaved{suffix}"
        save_config(again, resaved, only_changed=only_changed)
        assert resaved.read_text() == saved.read_text()


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_an_infinite_value_and_an_unset_seed_load_back(tmp_path, suffix) -> None:
    data = {"urls": "a.tar", "reader": {"request_timeout": math.inf},
            "tuner": {"enabled": True, "seed": None}}  # fmt: skip
    original = load_config(config_file(tmp_path, data))
    assert original.reader.request_timeout == math.inf
    assert original.tuner.seed is None  # random, where the default is 0
    saved = tmp_path / f"saved{suffix}"
    if suffix == ".toml":  # which has no null: said, not written as the default
        with pytest.raises(fastio.ConfigError, match=r"tuner\.seed: unset"):
            save_config(original, saved)
        assert not saved.exists()
        original = load_config(config_file(tmp_path, {**data, "tuner": {"enabled": True}}))
    save_config(original, saved)
    assert load_config(saved) == original


def test_only_changed_writes_what_differs_from_the_defaults(tmp_path) -> None:
    config = load_config(config_file(tmp_path, {"urls": "a.tar", "reader": {"read_size": "2m"}}))
    save_config(config, tmp_path / "small.yaml", only_changed=True)
    assert yaml.safe_load((tmp_path / "small.yaml").read_text()) == {
        "urls": "a.tar",
        "reader": {"read_size": "2MiB"},
    }
    save_config(config, tmp_path / "full.json")
    written = json.loads((tmp_path / "full.json").read_text())
    expected = {"urls": "a.tar", **defaults()}
    expected["reader"] = expected["reader"] | {"read_size": "2MiB"}
    assert written == without_nulls(expected)  # what is unset by default is left out


def without_nulls(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: without_nulls(value) for key, value in data.items() if value is not None}
    return [without_nulls(value) for value in data] if isinstance(data, list) else data


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
@pytest.mark.parametrize("format_name", ["webdataset", "fixed", "parquet"])
def test_dataset_from_a_config_reads_what_keyword_arguments_read(
    tmp_path, format_name, suffix
) -> None:
    written = write(format_name, tmp_path / "data", shards=4, per_shard=20)
    data: dict[str, Any] = {
        "urls": written.pattern,
        "format": format_name,
        "shuffle": {"seed": 11, "buffer": "4KiB", "shards": 2},
        "split": {"rank": 1, "world_size": 2, "remainder": "drop"},
        "reader": {"engine": "threads", "outstanding_requests": 3, "read_size": "64KiB"},
    }
    options = {
        "fixed": {"record_size": written.options.get("record_size")},
        "parquet": {"columns": ["key", "data"]},
    }.get(format_name, {})
    data["format_options"] = options
    save_config(load_config(config_file(tmp_path, data)), tmp_path / f"saved{suffix}")
    keywords = fastio.Dataset(
        written.pattern,
        format_name,
        seed=11,
        shuffle_buffer=4096,
        shuffle_shards=2,
        rank=1,
        world_size=2,
        remainder="drop",
        **options,
        reader=fastio.ReaderSettings(engine="threads", outstanding_requests=3, read_size=65536),
    )
    with load_config(tmp_path / f"saved{suffix}").to_dataset() as dataset, keywords:
        assert dataset.settings == keywords.settings
        for epoch in (0, 1):
            dataset.set_epoch(epoch)
            keywords.set_epoch(epoch)
            expected = [key_of(format_name, sample) for sample in keywords]
            assert [key_of(format_name, sample) for sample in dataset] == expected
            assert len(expected) == len(keywords) > 0


def test_reader_section_is_reader_settings() -> None:
    names = [field.name for field in dataclasses.fields(fastio.ReaderSettings)]
    assert list(ReaderSection.model_fields) == names
    assert ReaderSection().to_settings() == fastio.ReaderSettings()


def test_defaults_are_the_datasets() -> None:
    config = DatasetConfig.model_construct(urls="a.tar")
    signature = inspect.signature(fastio.Dataset.__init__).parameters
    given = {
        "shuffle": config.shuffle.enabled, "seed": config.shuffle.seed,
        "shuffle_buffer": config.shuffle.buffer, "shuffle_shards": config.shuffle.shards,
        "rank": config.split.rank, "world_size": config.split.world_size,
        "remainder": config.split.remainder, "on_error": config.on_error,
        "columns": config.format_options.columns,
        "record_size": config.format_options.record_size,
        "verify": config.format_options.verify, "example": config.format_options.example,
        "index_dir": config.format_options.index_dir, "format": config.format,
    }  # fmt: skip
    assert given == {name: signature[name].default for name in given}


# ---- precedence --------------------------------------------------------------------------

KEYS = [("reader", "outstanding_requests", 16), ("shuffle", "seed", 0)]


@pytest.mark.parametrize(("section", "key", "default"), KEYS, ids=["reader", "shuffle"])
@pytest.mark.parametrize(
    ("explicit", "in_file", "in_environment", "expected"),
    [
        (None, None, None, "default"),
        (None, None, 9, 9),  # environment > default
        (None, 5, None, 5),  # file > default
        (None, 5, 9, 9),  # environment > file, as in fsspec
        (3, None, 9, 3),  # explicit > environment
        (3, 5, None, 3),  # explicit > file
        (3, 5, 9, 3),
    ],
)
def test_explicit_over_environment_over_file_over_default(
    tmp_path, monkeypatch, section, key, default, explicit, in_file, in_environment, expected
) -> None:
    data: dict[str, Any] = {"urls": "a.tar"}
    if in_file is not None:
        data[section] = {key: in_file}
    if in_environment is not None:
        monkeypatch.setenv(f"FASTIO_{section.upper()}__{key.upper()}", str(in_environment))
    overrides = {} if explicit is None else {f"{section}__{key}": explicit}
    config = load_config(config_file(tmp_path, data), **overrides)
    value = getattr(getattr(config, section), key)
    assert value == (default if expected == "default" else expected)


def test_sources_merge_key_by_key(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FASTIO_READER__OUTSTANDING_REQUESTS", "32")
    monkeypatch.setenv("fastio_storage_options", '{"anon": true}')
    monkeypatch.setenv("FASTIO_URLS", "from-the-environment.tar")
    path = config_file(tmp_path, {"urls": "a.tar", "reader": {"read_size": "2MiB"}})
    config = load_config(path, reader={"engine": "threads"}, shuffle__seed=4)
    assert config.urls == "from-the-environment.tar"
    assert config.reader.to_settings() == fastio.ReaderSettings(
        outstanding_requests=32, read_size=2 << 20, engine="threads"
    )
    assert config.shuffle.seed == 4
    assert config.storage_options == {"anon": True}
    settings = fastio.ReaderSettings(read_size=8192)
    assert load_config(path, reader=settings).reader.to_settings() == settings


# ---- bad configs -------------------------------------------------------------------------

# (file name, contents, the exact message; {file} stands for the file's path)
BAD_CONFIGS = [
    ("typo.yaml", "urls: a.tar\nshufle: {seed: 1}\n",
     "{file}: unknown key 'shufle'; did you mean 'shuffle'?"),
    ("typo-in-section.yaml", "urls: a.tar\nshuffle:\n  sead: 1\n",
     "{file}: unknown key 'shuffle.sead'; did you mean 'shuffle.seed'?"),
    ("wrong-section.toml", "urls = 'a.tar'\nseed = 1\n",
     "{file}: unknown key 'seed'; did you mean 'shuffle.seed'?"),
    # Closer to a key of another section than to one of its own ('reader').
    ("typo-in-wrong-section.yaml", "urls: a.tar\nsead: 1\n",
     "{file}: unknown key 'sead'; did you mean 'shuffle.seed'?"),
    # A key path as one key, as messages name them: nested, it is the key.
    ("dotted-key.yaml", "urls: a.tar\nreader.outstanding_requests: 4\n",
     "{file}: unknown key 'reader.outstanding_requests'; write it nested, as reader: "
     "{{outstanding_requests: ...}}"),
    # The extension names the format, as the dataset then reads it.
    ("options-of-another-format.yaml", "urls: data/train-{0..3}.tar\n"
     "format_options: {columns: [label]}\n",
     "{file}: format_options: columns= applies to parquet and arrow, not webdataset"),
    ("tfrecord-options-for-tar.yaml", "urls: a.tar\nformat_options: {verify: false}\n",
     "{file}: format_options: verify=False applies to tfrecord, not webdataset"),
    ("cache-without-folder.yaml", "urls: a.tar\ncache: {max_bytes: 1GiB}\n",
     "{file}: cache_bytes needs cache_dir (the cache's folder), or tiering to place the cache"),
    ("mapping-as-key.yaml", "urls: a.tar\nreader: {{read_size: 1MiB}}\n",
     "{file}: line 2, column 10: not valid YAML: a key must be text, not a mapping"),
    ("no-close-key.json", '{"urls": "a.tar", "cache": {"size": "1GiB"}}',
     "{file}: unknown key 'cache.size'; expected one of cache.dir, cache.max_bytes, "
     "cache.policy, cache.prefetch"),
    ("wrong-type.yaml", "urls: a.tar\nreader: {outstanding_requests: many}\n",
     "{file}: reader.outstanding_requests: must be an integer, not 'many'"),
    ("bool-for-int.yaml", "urls: a.tar\nshuffle: {seed: true}\n",
     "{file}: shuffle.seed: must be an integer, not True"),
    ("section-not-mapping.yaml", "urls: a.tar\nreader: 16\n",
     "{file}: reader: must be a section (a mapping of keys), not 16"),
    ("out-of-bounds.yaml", "urls: a.tar\nreader: {read_size: 100}\n",
     "{file}: reader.read_size: must be in 4096..268435456, not 100"),
    ("below-minimum.toml", "urls = 'a.tar'\n[shuffle]\nshards = 0\n",
     "{file}: shuffle.shards: must be at least 1, not 0"),
    ("bad-size.yaml", "urls: a.tar\nshuffle: {buffer: lots}\n",
     "{file}: shuffle.buffer: must be a size (65536, 64KiB, 4m or 1GiB), not 'lots'"),
    ("unknown-format.yaml", "urls: a.csv\nformat: csv\n",
     "{file}: format: must be one of arrow, fixed, jsonl, lines, npy, parquet, tfrecord, "
     "webdataset, not 'csv'"),
    ("unknown-choice.yaml", "urls: a.tar\non_error: ignore\n",
     "{file}: on_error: must be 'raise', 'skip' or 'warn', not 'ignore'"),
    ("option-of-another-format.yaml",
     "urls: a.tar\nformat: webdataset\nformat_options: {record_size: 64}\n",
     "{file}: format_options: record_size= applies to format 'fixed', not webdataset"),
    ("half-a-split.yaml", "urls: a.tar\nsplit: {rank: 1}\n",
     "{file}: split: must give rank and world_size together or neither, not rank=1 "
     "world_size=None"),
    ("bad-syntax.yaml", "urls: a.tar\nreader:\n  read_size: 1MiB\n   engine: threads\n",
     "{file}: line 4, column 10: not valid YAML: mapping values are not allowed here"),
    ("bad-syntax.toml", "urls = 'a.tar'\n[reader]\nread_size =\n",
     "{file}: line 3, column 12: not valid TOML: Invalid value"),
    ("bad-syntax.json", '{"urls": "a.tar",\n}',
     "{file}: line 2, column 1: not valid JSON: Expecting property name enclosed in "
     "double quotes"),
    ("missing-urls.yaml", "format: tfrecord\n",
     "{file}: urls: missing; must be given (a URL pattern or a list of them)"),
    ("empty.yaml", "",
     "{file}: urls: missing; must be given (a URL pattern or a list of them)"),
    ("no-urls.json", '{"urls": []}',
     "{file}: urls: must be a URL pattern or a non-empty list of them, not []"),
    ("a-list.yaml", "- a.tar\n",
     "{file}: must be a mapping of sections (urls, format, reader, ...), not list ['a.tar']"),
    ("config.ini", "urls = a.tar\n",
     "{file}: unknown config file type '.ini'; use .yaml, .yml, .toml or .json"),
    ("several.yaml", "urls: a.tar\nreader: {engine: uring, direct: maybe}\n",
     "{file}: reader.engine: must be 'auto', 'io_uring' or 'threads', not 'uring'\n"
     "{file}: reader.direct: must be true, false or 'auto', not 'maybe'"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "message"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_message(tmp_path, name, text, message) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(fastio.ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == message.format(file=path)
    assert caught.value.file == str(path)


@pytest.mark.parametrize("name", ["bom.yaml", "bom.toml", "bom.json"])
def test_a_config_saved_with_a_byte_order_mark_reads_as_without(tmp_path, name) -> None:
    plain = tmp_path / f"plain{Path(name).suffix}"
    save_config(load_config(config_file(tmp_path, {"urls": "a.tar", "shuffle": {"seed": 3}})),
                plain)  # fmt: skip
    marked = tmp_path / name
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert load_config(marked).to_spec() == load_config(plain).to_spec()
    assert load_config(marked).to_spec().shuffle.seed == 3


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("FASTIO_READER__READ_SIZE", "lots", "environment variable FASTIO_READER__READ_SIZE: "
         "reader.read_size: must be a size (65536, 64KiB, 4m or 1GiB), not 'lots'"),
        ("fastio_shuffle__sead", "1",
         "environment variable fastio_shuffle__sead: unknown key 'shuffle.sead'; "
         "did you mean 'shuffle.seed'?"),
        ("FASTIO_STORAGE_OPTIONS", "{anon: true}", "environment variable "
         "FASTIO_STORAGE_OPTIONS: storage_options: must be JSON, not '{anon: true}'"),
        ("FASTIO_RAEDER__READ_SIZE", "1MiB", "environment variable FASTIO_RAEDER__READ_SIZE: "
         "unknown key 'raeder'; did you mean 'reader'?"),
        ("FASTIO_READER_READ_SIZE", "1MiB", "environment variable FASTIO_READER_READ_SIZE: "
         "unknown key 'reader_read_size'; did you mean FASTIO_READER__READ_SIZE (two "
         "underscores between section and key)?"),
        ("FASTIO_FORMAT_OPTIONS_COLUMNS", '["a"]', "environment variable "
         "FASTIO_FORMAT_OPTIONS_COLUMNS: unknown key 'format_options_columns'; did you mean "
         "FASTIO_FORMAT_OPTIONS__COLUMNS (two underscores between section and key)?"),
    ],
)  # fmt: skip
def test_bad_environment_variable_is_named(tmp_path, monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(fastio.ConfigError) as caught:
        load_config(config_file(tmp_path, {"urls": "a.tar"}))
    assert str(caught.value) == message


def test_bad_explicit_argument_is_named(tmp_path) -> None:
    path = config_file(tmp_path, {"urls": "a.tar", "reader": {"read_size": "1MiB"}})
    with pytest.raises(fastio.ConfigError) as caught:
        load_config(path, reader__read_size=3, shuffle={"sead": 1})
    assert caught.value.problems == (
        "arguments: reader.read_size: must be in 4096..268435456, not 3",
        "arguments: unknown key 'shuffle.sead'; did you mean 'shuffle.seed'?",
    )


def test_config_error_is_a_value_error_that_pickles(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("urls: a.tar\nreader: {read_size: lots, engine: x}\n")
    with pytest.raises(ValueError, match="read_size") as caught:
        load_config(path)
    error = caught.value
    assert isinstance(error, fastio.ConfigError)
    assert isinstance(error, fastio.FastIOError)
    again = pickle.loads(pickle.dumps(error))
    assert (str(again), again.problems, again.file) == (str(error), error.problems, error.file)
    assert len(error.problems) == 2


# ---- fastio-bench ------------------------------------------------------------------------


def test_config_check_prints_the_effective_config(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FASTIO_SHUFFLE__SEED", "5")
    path = config_file(tmp_path, {"urls": "a.tar", "reader": {"read_size": 2 << 20}})
    effective = load_config(path)
    assert effective.shuffle.seed == 5
    shown = yaml.safe_load(bench("config", "check", str(path)).stdout)
    assert shown == effective.to_dict()
    assert shown["reader"]["read_size"] == "2MiB"
    assert json.loads(bench("config", "check", "--json", str(path)).stdout) == shown


def test_config_check_names_each_problem(tmp_path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("urls = 'a.tar'\n[reader]\nread_sise = '1m'\n")
    result = bench("config", "check", str(path), check=False)
    assert result.returncode == 1
    assert result.stderr == (
        f"Error: {path}: unknown key 'reader.read_sise'; did you mean 'reader.read_size'?\n"
    )


def test_config_show_prints_the_defaults(tmp_path) -> None:
    shown = bench("config", "show").stdout
    assert shown.startswith("# urls:")
    # Every key, those unset by default too.
    assert yaml.safe_load(shown)["format"] is None
    assert yaml.safe_load(shown)["format_options"]["record_size"] is None
    assert yaml.safe_load(shown)["split"]["world_size"] is None
    assert (
        yaml.safe_load(shown) == defaults() == json.loads(bench("config", "show", "--json").stdout)
    )
    path = config_file(tmp_path, {**yaml.safe_load(shown), "urls": "a.tar"})
    assert load_config(path) == load_config(config_file(tmp_path, {"urls": "a.tar"}, ".json"))


def test_gen_and_run_with_a_config(tmp_path) -> None:
    folder = tmp_path / "data"
    path = config_file(tmp_path, {
        "urls": f"{folder}/fixed-{{00000..00002}}.bin", "format": "fixed",
        "format_options": {"record_size": 64}, "shuffle": {"seed": 3},
        "reader": {"engine": "threads", "outstanding_requests": 5, "read_size": "64KiB"},
    })  # fmt: skip
    written = json.loads(bench("gen", "--config", str(path), "--samples", "90", "--shards", "3",
                               "--sample-size", "64", "--json").stdout)  # fmt: skip
    assert (written["format"], written["files"]) == ("fixed", 3)
    assert sorted(p.name for p in folder.iterdir()) == [f"fixed-0000{i}.bin" for i in range(3)]

    report = json.loads(bench("run", "--config", str(path), "--json").stdout)
    assert (report["format"], report["samples"], report["seed"]) == ("fixed", 90, 3)
    assert report["settings"]["outstanding_requests"] == 5
    assert report["settings"]["read_size"] == 65536
    # Options given on the command line win; those left at their defaults do not.
    report = json.loads(bench("run", "--config", str(path), "--json", "--seed", "0", "-q", "2",
                              "--no-shuffle").stdout)  # fmt: skip
    assert (report["seed"], report["shuffle"]) == (0, False)
    assert report["settings"]["outstanding_requests"] == 2
    assert report["settings"]["read_size"] == 65536
    # PATHS replace the config's urls.
    report = json.loads(bench("run", "--config", str(path), "--json",
                              str(folder / "fixed-00000.bin")).stdout)  # fmt: skip
    assert report["samples"] == 30


def test_run_with_a_bad_config_or_nothing_to_read(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("urls: a.tar\nshuffle: {buffer: lots}\n")
    result = bench("run", "--config", str(path), check=False)
    assert result.returncode == 1
    assert f"{path}: shuffle.buffer: must be a size" in result.stderr
    result = bench("run", check=False)
    assert result.returncode == 2
    assert "give PATHS to read, or --config FILE" in result.stderr


# ---- made from the spec --------------------------------------------------------------------


def test_environment_text_is_read_as_each_knob_reads_text(tmp_path, monkeypatch) -> None:
    for name, text in {
        "FASTIO_READER__DIRECT": "true", "FASTIO_SHUFFLE__ENABLED": "0",
        "FASTIO_SHUFFLE__BUFFER": "4m", "FASTIO_TUNER__WINDOW_SECONDS": "0.5",
        "FASTIO_FORMAT_OPTIONS__COLUMNS": '["key", "data"]', "FASTIO_CACHE__DIR": "/c",
        "FASTIO_CACHE__MAX_BYTES": "1GiB", "FASTIO_URLS": '["a.tar", "b.tar"]',
        "FASTIO_TEST_SOMETHING_ELSE": "not a config key",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, text)
    spec = load_config(config_file(tmp_path, {"format": "parquet"})).to_spec()
    assert spec.urls == ("a.tar", "b.tar")
    assert (spec.reader.direct, spec.shuffle.enabled, spec.shuffle.buffer) == (True, False, 4 << 20)
    assert spec.tuner.window_seconds == 0.5
    assert spec.format_options.columns == ("key", "data")
    assert (spec.cache.dir, spec.cache.max_bytes) == ("/c", 1 << 30)


def test_a_config_no_dataset_can_be_made_from_is_refused_at_load(tmp_path) -> None:
    # Tiering keeps the shard cache in its tiers: a cache.dir beside it is a mistake.
    tiers = [{"name": "fast", "path": "/dev/shm/fastio", "capacity": "8GiB"}]
    data = {"urls": "a.tar", "cache": {"dir": "/c", "max_bytes": "1GiB"},
            "tiering": {"enabled": True, "tiers": tiers}}  # fmt: skip
    path = config_file(tmp_path, data)
    with pytest.raises(fastio.ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: with tiering, the shard cache lives in the tiers' directories: "
        "give cache_bytes, not cache_dir"
    )
    config = load_config(path, cache={"dir": None})
    assert config.to_spec().tiering.tiers[0].capacity == 8 << 30


def test_tiers_are_sections_too(tmp_path) -> None:
    path = tmp_path / "tiers.toml"
    path.write_text(
        "urls = 'a.tar'\n[[tiering.tiers]]\nname = 'fast'\npath = '/t'\ncapacity = '1GiB'\n"
        "medai = 'ssd'\n[[tiering.tiers]]\nname = 'slow'\n"
    )
    with pytest.raises(fastio.ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == (
        f"{path}: unknown key 'tiering.tiers.0.medai'; did you mean 'tiering.tiers.0.media'?",
        f"{path}: tiering.tiers.1.path: missing; must be given",
        f"{path}: tiering.tiers.1.capacity: missing; must be given",
    )


def test_a_config_is_its_spec_both_ways(tmp_path) -> None:
    config = load_config(config_file(tmp_path, EVERY_SECTION))
    spec = config.to_spec()
    assert isinstance(spec, fastio.spec.DatasetSpec)
    assert spec.reader == config.reader.to_settings()
    assert DatasetConfig.from_spec(spec) == config
    assert pickle.loads(pickle.dumps(config)) == config


def test_a_callback_stays_out_of_the_file_and_the_section() -> None:
    assert "callback" not in DatasetConfig.model_fields["fairness"].annotation.model_fields
    spec = fastio.spec.DatasetSpec("a.tar", fairness={"callback": print})
    assert DatasetConfig.from_spec(spec).to_spec().fairness.callback is None


@pytest.mark.parametrize(
    ("suffix", "text"),
    [(".yaml", "urls: a.tar\nreader: {read_size: 1MiB}\nreader: {outstanding_requests: 4}\n"),
     (".json", '{"urls": "a.tar", "reader": {"read_size": "1MiB"},'
               ' "reader": {"outstanding_requests": 4}}'),
     (".toml", 'urls = "a.tar"\n[reader]\nread_size = "1MiB"\n'
               '[reader]\noutstanding_requests = 4\n'),
     (".yaml", "urls: a.tar\nreader:\n  read_size: 1MiB\n  read_size: 2MiB\n")],
    ids=["yaml", "json", "toml", "yaml key"],
)  # fmt: skip
def test_a_key_given_twice_is_refused_not_lost(tmp_path, suffix, text) -> None:
    path = tmp_path / f"train{suffix}"
    path.write_text(text)
    with pytest.raises(fastio.ConfigError, match="twice") as caught:
        load_config(path)
    assert str(path) in str(caught.value)
