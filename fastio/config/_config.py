"""Config files: a dataset and every fastio knob in one YAML, TOML or JSON file.

A config names a dataset the way fsspec users already do and carries every
option of :class:`fastio.Dataset` and :class:`fastio.ReaderSettings`::

    urls: s3://bucket/train-{0000..1023}.tar  # a pattern or a list; `::` chains, globs
    format: webdataset                        # left out: from the first URL's extension
    format_options: {verify: true, example: true, record_size: null, columns: null}
    storage_options: {anon: true}             # handed to fsspec untouched
    reader: {outstanding_requests: 32, read_size: 4MiB}
    shuffle: {enabled: true, seed: 0, buffer: 64MiB, shards: 8}
    split: {rank: null, world_size: null, remainder: exact}
    on_error: raise
    cache: {dir: /scratch/fastio, max_bytes: 200GiB, policy: plan, prefetch: 2}
    tuner: {enabled: false}                   # fairness, tiering too: issues 5-7 fill them in

The extension picks the syntax (``.yaml``/``.yml``, ``.toml``, ``.json``). Sizes
take ``65536``, ``64KiB``, ``1MB`` or ``4m`` (bare k/m/g/t are binary, as in fio).

Precedence, as in fsspec, highest first:

1. explicit arguments: ``load_config(path, reader={"read_size": "4MiB"})`` or
   ``load_config(path, reader__read_size="4MiB")``; ``fastio-bench`` options given
   on the command line;
2. the config file;
3. ``FASTIO_*`` environment variables, ``__`` between section and key:
   ``FASTIO_READER__OUTSTANDING_REQUESTS=32``, ``FASTIO_SHUFFLE__SEED=3``,
   ``FASTIO_URLS=...``; lists and mappings as JSON
   (``FASTIO_STORAGE_OPTIONS='{"anon": true}'``);
4. the defaults (the reader's are those of :class:`ReaderSettings`).

Every problem found raises one :class:`fastio.ConfigError`, a line per problem
naming where it came from (the file, ``arguments`` or the environment
variable), the key path, what was expected and what was found; an unknown key
comes with the nearest known one.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import tomli_w
import yaml  # type: ignore[import-untyped, unused-ignore]
from pydantic import (
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    PlainSerializer,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from fastio._errors import ConfigError
from fastio.spec._dataset import Remainder  # noqa: TC001 - pydantic reads annotations at run time
from fastio.spec._reader import EngineKind, ReaderSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the backport, a dependency on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fastio.dataset._dataset import Dataset
    from fastio.spec._fairness import FairnessSettings

__all__ = ["DatasetConfig", "dumps", "load_config", "parse_size", "save_config"]

# ---- value types -------------------------------------------------------------------------

_BARE_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt])\s*$", re.IGNORECASE)
_BYTE_SIZE = TypeAdapter(ByteSize)
_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def parse_size(value: object) -> int:
    """Bytes from an integer or ``"65536"``, ``"64KiB"``, ``"1MB"`` (decimal) or
    ``"4m"`` (a bare k/m/g/t is binary, as fio and dd read it). Raises ValueError."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        bare = _BARE_UNIT.match(value)
        try:
            return int(_BYTE_SIZE.validate_python(f"{bare[1]}{bare[2]}iB" if bare else value))
        except ValidationError:
            pass
    raise ValueError(f"must be a size (65536, 64KiB, 4m or 1GiB), not {value!r}")


def _size_text(count: int) -> int | str:
    """``67108864`` as ``"64MiB"``: how sizes are written out (exact units only)."""
    for unit, scale in _UNITS:
        if count and count % scale == 0:
            return f"{count // scale}{unit}"
    return count


def _integer(value: object) -> object:
    # pydantic takes true for 1; in a config that is a mistake, not a count.
    if isinstance(value, bool):
        raise ValueError(f"must be an integer, not {value!r}")
    return value


def _urls(value: object) -> object:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) and value:
        return value
    if isinstance(value, (list, tuple)) and value:
        urls = [os.fspath(url) if isinstance(url, os.PathLike) else url for url in value]
        if all(isinstance(url, str) and url for url in urls):
            return urls
    raise ValueError(f"must be a URL pattern or a non-empty list of them, not {value!r}")


Count = Annotated[int, BeforeValidator(_integer)]
Size = Annotated[int, BeforeValidator(parse_size), PlainSerializer(_size_text)]
Urls = Annotated[str | list[str], BeforeValidator(_urls)]
OnError = Literal["raise", "skip", "warn"]

# ---- sections ----------------------------------------------------------------------------


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FormatOptions(_Section):
    """Options of the shard format (see :class:`fastio.Dataset`)."""

    verify: bool = True
    example: bool = True
    record_size: Annotated[Size, Field(ge=1)] | None = None
    columns: list[str] | None = None
    index_dir: str | None = None


_READER = ReaderSettings()


class ReaderSection(_Section):
    """:class:`ReaderSettings` as a config section: its defaults, and its own checks."""

    outstanding_requests: Count = _READER.outstanding_requests
    read_size: Size = _READER.read_size
    engine: EngineKind = _READER.engine
    direct: bool = _READER.direct
    memory_budget: Size = _READER.memory_budget
    coalesce_gap: Size = _READER.coalesce_gap
    max_idle_files: Count = _READER.max_idle_files
    retries: Count = _READER.retries
    retry_seconds: float = _READER.retry_seconds
    request_timeout: float = _READER.request_timeout

    @field_validator("*")
    @classmethod
    def _within_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        # Each knob checked alone by ReaderSettings, the one home of the bounds.
        name = info.field_name or ""
        try:
            ReaderSettings(**{name: value})
        except (TypeError, ValueError) as error:
            raise ValueError(str(error).removeprefix(f"{name} ")) from None
        return value

    def to_settings(self) -> ReaderSettings:
        return ReaderSettings(**dict(self))


class ShuffleSection(_Section):
    enabled: bool = True
    seed: Annotated[Count, Field(ge=0)] = 0
    buffer: Annotated[Size, Field(ge=1)] = 64 << 20
    """Bytes of encoded samples mixed at once."""
    shards: Annotated[Count, Field(ge=1)] = 8
    """Shards mixed at once."""


class SplitSection(_Section):
    """This process's part; left out, ranks come from torch.distributed or RANK/WORLD_SIZE."""

    rank: Annotated[Count, Field(ge=0)] | None = None
    world_size: Annotated[Count, Field(ge=1)] | None = None
    remainder: Remainder = "exact"

    @model_validator(mode="after")
    def _rank_in_world(self) -> SplitSection:
        rank, world_size = self.rank, self.world_size
        if (rank is None) != (world_size is None):
            raise ValueError(
                f"must give rank and world_size together or neither, not rank={rank} "
                f"world_size={world_size}"
            )
        if rank is not None and world_size is not None and rank >= world_size:
            raise ValueError(
                f"must have rank < world_size, not rank={rank} world_size={world_size}"
            )
        return self


class CacheSection(_Section):
    """The local shard cache for remote data: remote shards are read from
    local copies under ``dir``, never more than ``max_bytes`` in all, with
    ``prefetch`` downloads of the plan's next shards running ahead of the reader."""

    dir: str | None = None
    max_bytes: Annotated[Size, Field(ge=1)] | None = None
    policy: Literal["plan", "lru"] = "plan"
    """``plan``: evict the shard whose next use in the epoch plan is furthest."""
    prefetch: Annotated[Count, Field(ge=0)] = 2
    """Shards the plan needs next, fetched ahead."""


class TunerSection(_Section):
    """The online tuner (see :mod:`fastio.reader._tuning`): with ``enabled``, the
    reader's outstanding requests and read size are tuned while data flows."""

    enabled: bool = False
    storage: str | None = None
    """Trials persist here: a journal file, a ``.db`` SQLite file or an RDB URL."""
    memory_budget: Annotated[Size, Field(ge=16 << 10)] | None = None
    """Bytes in flight the tuner may use; unset: half of ``reader.memory_budget``."""
    window_seconds: Annotated[float, Field(gt=0)] = 2.0
    window_bytes: Annotated[Size, Field(ge=0)] = 0
    warmup_seconds: Annotated[float, Field(ge=0)] = 0.5
    max_trials: Annotated[Count, Field(ge=1)] = 30
    seed: Annotated[Count, Field(ge=0)] | None = 0

    def to_options(self) -> Any:
        """The :class:`fastio.spec.TunerSettings`."""
        from fastio.spec._tuner import TunerSettings

        return TunerSettings(**dict(self))  # the values, not their serialized forms ("8MiB")


class FairnessSection(_Section):
    """The fairness monitor: :class:`fastio.fairness.FairnessSettings` as a config
    section (its defaults and checks; the callback is given in code only)."""

    enabled: bool = True
    mitigate: bool = True
    balance: Literal["budget", "steal"] = "budget"
    window_seconds: float = 1.0
    rate_threshold: float = 0.6
    readiness_gap: float = 0.3
    readiness_floor: float = 0.5
    flag_after: Count = 2
    clear_after: Count = 2
    max_share: float = 4.0
    exchange_dir: str | None = None

    @field_validator("*")
    @classmethod
    def _within_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        from fastio.spec._fairness import FairnessSettings

        try:
            FairnessSettings(**{info.field_name or "": value})
        except (TypeError, ValueError) as error:
            raise ValueError(str(error).removeprefix(f"{info.field_name} ")) from None
        return value

    def to_settings(self) -> FairnessSettings:
        from fastio.spec._fairness import FairnessSettings

        return FairnessSettings(**dict(self))


class TierEntry(_Section):
    """One tier: a directory, its medium (left out: detected) and its byte budget."""

    name: str
    path: str
    capacity: Annotated[Size, Field(ge=1)]
    media: Literal["ram", "ssd", "hdd"] | None = None


class TieringSection(_Section):
    """Tiering of intermediate files (:mod:`fastio.tiering`): ``tiers`` to place
    shuffle spill on, by predicted I/O density learned online."""

    enabled: bool = False
    tiers: list[TierEntry] = Field(default_factory=list)
    shuffle_memory: Annotated[Size, Field(ge=1)] | None = None
    """Shuffle windows larger than this spill to a tier file (None: stay in memory)."""
    prior_strength: Annotated[float, Field(gt=0)] = 20.0
    """Outcomes' worth of belief in the model's prior."""
    prior_seconds: Annotated[float, Field(gt=0)] = 60.0
    """Seconds of observed I/O it takes to overrule a file's predicted density."""

    def to_tiering(self) -> Any:
        """The :class:`fastio.tiering.Tiering` of ``tiers`` (None when not enabled)."""
        if not self.enabled:
            return None
        from fastio.tiering import DensityModel, Tier, Tiering

        if not self.tiers:
            raise ValueError("tiering is enabled but lists no tiers")
        tiers = [Tier(t.name, t.path, t.capacity, t.media) for t in self.tiers]
        return Tiering(tiers, DensityModel(self.prior_strength), prior_seconds=self.prior_seconds)


# ---- the config --------------------------------------------------------------------------


class DatasetConfig(BaseSettings):
    """A dataset and every knob fastio has: what a config file holds.

    Build it with :func:`load_config`; :meth:`to_dataset` makes the
    :class:`fastio.Dataset`, :func:`save_config` writes it out. Frozen: change
    it with explicit arguments to :func:`load_config`.
    """

    model_config = SettingsConfigDict(
        env_prefix="FASTIO_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    urls: Urls
    format: str | None = None
    format_options: FormatOptions = Field(default_factory=FormatOptions)
    storage_options: dict[str, Any] = Field(default_factory=dict)
    reader: ReaderSection = Field(default_factory=ReaderSection)
    shuffle: ShuffleSection = Field(default_factory=ShuffleSection)
    split: SplitSection = Field(default_factory=SplitSection)
    on_error: OnError = "raise"
    cache: CacheSection = Field(default_factory=CacheSection)
    tuner: TunerSection = Field(default_factory=TunerSection)
    fairness: FairnessSection = Field(default_factory=FairnessSection)
    tiering: TieringSection = Field(default_factory=TieringSection)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file and the explicit arguments arrive merged as init values, so
        # both rank above the environment; no .env or secrets files.
        return (init_settings, env_settings)

    @field_validator("format")
    @classmethod
    def _known_format(cls, name: str | None) -> str | None:
        from fastio.formats._shards import FORMATS

        if name is not None and name not in FORMATS:
            raise ValueError(f"must be one of {', '.join(sorted(FORMATS))}, not {name!r}")
        return name

    @field_validator("format_options")
    @classmethod
    def _options_fit_format(cls, options: FormatOptions, info: ValidationInfo) -> FormatOptions:
        name = info.data.get("format")
        if name is not None:  # else the extension decides, when the dataset is made
            from fastio.formats._shards import format_options

            format_options(name, options.columns, options.record_size, options.verify,
                           options.example, options.index_dir)  # fmt: skip
        return options

    def to_dict(self, *, only_changed: bool = False) -> dict[str, Any]:
        """Plain data as a config file holds it: sizes as ``"64MiB"`` where exact,
        unset (null) keys left out (TOML has no null), and with ``only_changed``
        only what differs from the defaults."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=only_changed)

    def to_dataset(self) -> Dataset:
        """The :class:`fastio.Dataset` this config describes.

        ``storage_options`` go to fsspec for remote URLs; ``cache`` (with
        ``dir`` and ``max_bytes``) puts remote shards in a shard cache. Raises
        what ``Dataset`` raises.
        """
        from fastio.dataset._dataset import Dataset

        options, shuffle, split = self.format_options, self.shuffle, self.split
        return Dataset(
            self.urls,
            self.format,
            shuffle=shuffle.enabled,
            seed=shuffle.seed,
            shuffle_buffer=shuffle.buffer,
            shuffle_shards=shuffle.shards,
            rank=split.rank,
            world_size=split.world_size,
            remainder=split.remainder,
            on_error=self.on_error,
            columns=options.columns,
            record_size=options.record_size,
            verify=options.verify,
            example=options.example,
            index_dir=options.index_dir,
            storage_options=self.storage_options,
            cache_dir=self.cache.dir if not self.tiering.enabled else None,
            cache_bytes=self.cache.max_bytes,
            cache_policy=self.cache.policy,
            cache_prefetch=self.cache.prefetch,
            reader=self.reader.to_settings(),
            fairness=self.fairness.to_settings(),
            tune=self.tuner.to_options(),
            tiering=self.tiering.to_tiering(),
            shuffle_memory=self.tiering.shuffle_memory,
        )


def defaults() -> dict[str, Any]:
    """Every key but ``urls`` (which has none) with its default, as files hold them."""
    data = DatasetConfig.model_construct(urls="").to_dict()  # no validation: no environment
    del data["urls"]
    return data


# ---- files -------------------------------------------------------------------------------

_KINDS = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json"}
_TOML_WHERE = re.compile(r"^(.*) \(at line (\d+), column (\d+)\)$", re.DOTALL)


def _kind(path: Path) -> str:
    kind = _KINDS.get(path.suffix.lower())
    if kind is None:
        raise ConfigError(
            f"{path}: unknown config file type {path.suffix or '(none)'!r}; "
            "use .yaml, .yml, .toml or .json",
            file=str(path),
        )
    return kind


def _parse(text: str, kind: str, label: str) -> object:
    """The data in ``text``; syntax errors name the line and column."""
    try:
        if kind == "yaml":
            return yaml.safe_load(text)
        if kind == "toml":
            return tomllib.loads(text)
        return json.loads(text)
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


def load_config(path: str | os.PathLike[str], **overrides: Any) -> DatasetConfig:
    """The :class:`DatasetConfig` in the YAML, TOML or JSON file ``path``.

    ``overrides`` win over the file: whole sections (``reader={"read_size":
    "4MiB"}``, or a section or :class:`ReaderSettings` object) or single keys
    with ``__`` (``shuffle__seed=3``). The file wins over ``FASTIO_*``
    environment variables, which win over the defaults. Raises
    :class:`fastio.ConfigError` (a ValueError) for a file that does not parse or
    does not describe a valid config, OSError where the file cannot be read.
    """
    path = Path(path)
    label = str(path)
    kind = _kind(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{label}: not UTF-8 text ({error.reason} at byte {error.start})",
                          file=label) from None  # fmt: skip
    data = _parse(text, kind, label)
    if data is None:  # an empty YAML file
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{label}: must be a mapping of sections (urls, format, reader, ...), "
            f"not {type(data).__name__} {_shown(data)}",
            file=label,
        )
    return _build(data, _nested(overrides), label)


def _build(data: dict[str, Any], overrides: dict[str, Any], label: str) -> DatasetConfig:
    def origin(loc: tuple[str | int, ...]) -> str:
        if _holds(overrides, loc):
            return "arguments"
        variable = None if _holds(data, loc) else _variable(loc)
        return label if variable is None else f"environment variable {variable}"

    merged = _merged(data, overrides)
    # Keys with a leading underscore would reach BaseSettings as its own options.
    private = [key for key in merged if key.startswith("_")]
    if private:
        raise ConfigError(*(f"{origin((key,))}: {_unknown((key,))}" for key in private),
                          file=label)  # fmt: skip
    try:
        return DatasetConfig(**merged)
    except ValidationError as error:
        problems = [f"{origin(tuple(e['loc']))}: {_problem(e)}" for e in error.errors()]
        raise ConfigError(*problems, file=label) from None
    except SettingsError as error:  # a FASTIO_* list or mapping that is not JSON
        raise ConfigError(_unparsed(error), file=label) from None


def dumps(data: Mapping[str, Any], kind: str) -> str:
    """``data`` (see :meth:`DatasetConfig.to_dict`) as ``"yaml"``, ``"toml"`` or ``"json"``."""
    if kind == "yaml":
        return str(yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True))
    if kind == "toml":
        return tomli_w.dumps(data)
    return json.dumps(data, indent=2) + "\n"


def save_config(
    config: DatasetConfig, path: str | os.PathLike[str], *, only_changed: bool = False
) -> None:
    """Write ``config`` to ``path`` as YAML, TOML or JSON (by the extension), so
    that :func:`load_config` gives it back equal.

    Every key is written (a full snapshot: it loads back the same whatever
    ``FASTIO_*`` variables are set then), except unset ones (null); with
    ``only_changed``, only what differs from the defaults. Raises
    :class:`fastio.ConfigError` for an unknown extension, OSError where the
    file cannot be written.
    """
    path = Path(path)
    text = dumps(config.to_dict(only_changed=only_changed), _kind(path))
    path.write_text(text, encoding="utf-8")


# ---- merging overrides and explaining errors ---------------------------------------------


def _nested(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``{"reader__read_size": x}`` as ``{"reader": {"read_size": x}}``; section
    objects as plain data."""
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        *sections, name = key.split("__")
        target = nested
        for section in sections:
            target = target.setdefault(section, {})
        if isinstance(value, BaseModel):
            value = dict(value)
        elif isinstance(value, ReaderSettings):
            value = value.as_dict()
        target[name] = _merged(target[name], value) if name in target else value
    return nested


def _merged(base: Any, top: Any) -> Any:
    if not (isinstance(base, dict) and isinstance(top, dict)):
        return top
    return base | {key: _merged(base[key], value) if key in base else value
                   for key, value in top.items()}  # fmt: skip


def _holds(data: Any, loc: tuple[str | int, ...]) -> bool:
    for part in loc:
        listed = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if not (listed or (isinstance(data, dict) and part in data)):
            return False
        data = data[part]
    return True


def _variable(loc: tuple[str | int, ...]) -> str | None:
    """The FASTIO_* variable set for ``loc`` or a section above it, as spelled."""
    names = {name.upper(): name for name in os.environ if name.upper().startswith("FASTIO_")}
    keys = [str(part) for part in loc]
    for depth in range(len(keys), 0, -1):
        name = names.get("FASTIO_" + "__".join(keys[:depth]).upper())
        if name is not None:
            return name
    return None


def _unparsed(error: SettingsError) -> str:
    field = re.search(r'field "(\w+)"', str(error))
    variable = _variable((field[1],)) if field else None
    if field is None or variable is None:
        return f"environment: {error}"
    found = _shown(os.environ[variable])
    return f"environment variable {variable}: {field[1]}: must be JSON, not {found}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a section (a mapping of keys)",
    "model_attributes_type": "a section (a mapping of keys)",
}
_BOUNDS = {"greater_than_equal": ("ge", "at least"), "less_than_equal": ("le", "at most"),
           "greater_than": ("gt", "more than"), "less_than": ("lt", "less than")}  # fmt: skip


def _problem(error: Any) -> str:
    """One pydantic error as ``key.path: must be X, not Y``."""
    loc = tuple(error["loc"])
    kind, context = error["type"], error.get("ctx", {})
    if kind == "extra_forbidden":
        return _unknown(loc)
    key = ".".join(str(part) for part in loc)
    if kind == "missing":
        return f"{key}: missing; must be given" + (
            " (a URL pattern or a list of them)" if key == "urls" else ""
        )
    if kind == "value_error":
        message = str(context["error"])
    elif kind == "literal_error":
        message = f"must be {context['expected']}, not {_shown(error['input'])}"
    elif kind in _BOUNDS:
        bound, words = _BOUNDS[kind]
        message = f"must be {words} {context[bound]}, not {_shown(error['input'])}"
    elif kind in _EXPECTED:
        message = f"must be {_EXPECTED[kind]}, not {_shown(error['input'])}"
    else:
        message = f"{error['msg']}, not {_shown(error['input'])}"
    return f"{key}: {message}" if key else message


def _sections() -> dict[str, type[BaseModel]]:
    return {
        name: field.annotation
        for name, field in DatasetConfig.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, _Section)
    }


def _unknown(loc: tuple[str | int, ...]) -> str:
    """``unknown key 'shuffle.sead'; did you mean 'shuffle.seed'?``"""
    *parents, name = [str(part) for part in loc]
    sections = _sections()
    model = sections.get(parents[0]) if len(parents) == 1 else DatasetConfig
    known = list(model.model_fields) if model is not None and len(parents) < 2 else []
    prefix = "".join(f"{parent}." for parent in parents)
    close = difflib.get_close_matches(name, known, n=1)
    # A key of another section (``seed`` at the top, ``read_size`` under shuffle).
    elsewhere = [f"{section}.{name}" for section, cls in sections.items()
                 if name in cls.model_fields]  # fmt: skip
    if close:
        hint = f"did you mean '{prefix}{close[0]}'?"
    elif elsewhere:
        hint = f"did you mean '{elsewhere[0]}'?"
    else:
        hint = "expected one of " + ", ".join(f"{prefix}{key}" for key in known)
    return f"unknown key '{prefix}{name}'; {hint}"
