"""DatasetSpec: a dataset and every knob it has, in sections.

The sections are those of a config file (``shuffle:``, ``split:``, ...).
:class:`fastio.Dataset` takes the same knobs as flat keywords: each knob that
has one names it (``shuffle_buffer`` is ``shuffle.buffer``), and
:meth:`DatasetSpec.from_keywords` maps them back.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

from fastio.spec._fairness import FairnessSettings
from fastio.spec._knobs import REQUIRED, check, check_value, knob, knobs, unexpected_keyword
from fastio.spec._reader import ReaderSettings
from fastio.spec._records import record
from fastio.spec._tuner import TunerSettings

__all__ = [
    "ON_ERROR",
    "REMAINDERS",
    "CacheSettings",
    "DatasetSpec",
    "FormatSettings",
    "OnError",
    "Remainder",
    "ShuffleSettings",
    "SplitSettings",
    "TierSettings",
    "TieringSettings",
]

OnError = Literal["raise", "skip", "warn"]
ON_ERROR: tuple[OnError, ...] = ("raise", "skip", "warn")
Remainder = Literal["exact", "drop", "pad"]
REMAINDERS: tuple[Remainder, ...] = ("exact", "drop", "pad")
MiB = 1 << 20


@record(frozen=True)
class ShuffleSettings:
    """How an epoch is shuffled: windows of ``buffer`` bytes mixing ``shards``
    shards, delivered in a permutation of ``(seed, epoch)``."""

    enabled: bool = knob(True, "Shuffle (else stored order).", "flag", keyword="shuffle")
    seed: int = knob(0, "Seed of every order drawn.", "count", low=0, keyword="seed")
    buffer: int = knob(32 * MiB, "Bytes of encoded samples mixed at once (the shuffle buffer).",
                       "size", low=1, keyword="shuffle_buffer")  # fmt: skip
    shards: int = knob(8, "Shards mixed at once.", "count", low=1, keyword="shuffle_shards")

    def __post_init__(self) -> None:
        check(self)


@record(frozen=True)
class SplitSettings:
    """This process's part of the data. Left unset, ranks come from
    torch.distributed or RANK/WORLD_SIZE."""

    rank: int | None = knob(None, "This process's rank.", "count", low=0, optional=True,
                            keyword="rank")  # fmt: skip
    world_size: int | None = knob(None, "Ranks in all.", "count", low=1, optional=True,
                                  keyword="world_size")  # fmt: skip
    remainder: Remainder = knob(
        "exact",
        "exact: ranks' counts differ by at most one; drop or pad: every rank gets the same "
        "count (the last samples left out, or samples repeated).",
        "choice", choices=REMAINDERS, keyword="remainder",
    )  # fmt: skip
    batch_size: int | None = knob(
        None,
        "The DataLoader's batch size: each worker's part is whole batches (but the rank's last "
        "one), so that len(loader) is the number of batches it yields.",
        "count", low=1, optional=True, keyword="batch_size",
    )  # fmt: skip
    handoff_memory: int = knob(
        32 * MiB,
        "Shared memory through which each DataLoader worker hands samples' bytes and Arrow "
        "batches to the main process, instead of pickling them through its queue (0: pickle); "
        "a payload of 1 MiB or more that does not fit goes in a file of its own.",
        "size", low=0, keyword="handoff_memory",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check(self)
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


@record(frozen=True)
class FormatSettings:
    """Options of the shard format; each applies to some formats only."""

    verify: bool = knob(True, "tfrecord: check both CRC-32Cs of every record.", "flag",
                        keyword="verify")  # fmt: skip
    example: bool = knob(True, "tfrecord: decode tf.train.Example (else raw bytes).", "flag",
                         keyword="example")  # fmt: skip
    record_size: int | None = knob(None, "fixed: bytes per record.", "size", low=1,
                                   optional=True, keyword="record_size")  # fmt: skip
    columns: tuple[str, ...] | None = knob(None, "parquet, arrow: the columns to read.", "names",
                                           optional=True, keyword="columns")  # fmt: skip
    index: str | None = knob(
        None,
        "A dataset index (fastio-bench index): one file with every shard's index, read with "
        "one request; unset: dataset.fastio-index.npz in the shards' folder, if it is there.",
        "path", optional=True, keyword="index",
    )  # fmt: skip
    index_dir: str | None = knob(
        None,
        "Where the index of each shard is kept once found (never beside the shard); unset: "
        "where tiering puts it, else $XDG_CACHE_HOME/fastio/index.",
        "path", optional=True, keyword="index_dir",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check(self)


@record(frozen=True)
class CacheSettings:
    """The local shard cache for remote data: remote shards are read from
    local copies under ``dir``, never more than ``max_bytes`` in all (the
    cache's own index included)."""

    dir: str | tuple[str, ...] | None = knob(
        None, "Folder (or folders) of the local copies.", "paths", optional=True,
        keyword="cache_dir",
    )  # fmt: skip
    max_bytes: int | None = knob(None, "Bytes the cache folder may take, index included.",
                                 "size", low=1, optional=True, keyword="cache_bytes")  # fmt: skip
    policy: Literal["plan", "lru"] = knob(
        "plan",
        "plan: evict the shard whose next use in the epoch plan is furthest; lru: the one "
        "used longest ago.",
        "choice", choices=("plan", "lru"), keyword="cache_policy",
    )  # fmt: skip
    prefetch: int = knob(2, "Shards the plan needs next, downloaded ahead.", "count", low=0,
                         keyword="cache_prefetch")  # fmt: skip

    def __post_init__(self) -> None:
        check(self)
        if self.dir is not None and self.max_bytes is None:
            raise ValueError("cache_dir needs cache_bytes (the cache's byte limit)")


@record(frozen=True)
class TierSettings:
    """One tier: a directory, its byte budget and its medium (unset: detected)."""

    name: str = knob(REQUIRED, "The tier's name.", "text")
    path: str = knob(REQUIRED, "Its directory.", "path")
    capacity: int = knob(REQUIRED, "Bytes it may hold.", "size", low=1)
    media: Literal["ram", "ssd", "hdd"] | None = knob(
        None, "ram, ssd or hdd; unset: detected from the block device.", "choice",
        choices=("ram", "ssd", "hdd"), optional=True,
    )  # fmt: skip

    def __post_init__(self) -> None:
        check(self)
        if not self.name or not self.path:
            raise ValueError("a tier needs a name and a path")


@record(frozen=True)
class TieringSettings:
    """Tiering of intermediate files: ``tiers`` to place shuffle spill and
    shard cache copies on, by predicted I/O density learned online."""

    enabled: bool = knob(False, "Place intermediate files on the tiers.", "flag")
    tiers: tuple[TierSettings, ...] = knob((), "The tiers, fastest first.", "sections",
                                           of=TierSettings, factory=tuple)  # fmt: skip
    shuffle_memory: int | None = knob(
        None, "Shuffle windows larger than this spill to a tier file (unset: stay in memory).",
        "size", low=1, optional=True, keyword="shuffle_memory",
    )  # fmt: skip
    prior_strength: float = knob(20.0, "Outcomes' worth of belief in the model's prior.",
                                 "number", above=0)  # fmt: skip
    prior_seconds: float = knob(
        60.0, "Seconds of observed I/O it takes to overrule a file's predicted density.",
        "seconds", above=0,
    )  # fmt: skip

    def __post_init__(self) -> None:
        check(self)
        if self.enabled and not self.tiers:
            raise ValueError("tiering is enabled but lists no tiers")


_SECTIONS: dict[str, type[Any]] = {}


@record(frozen=True)
class DatasetSpec:
    """A dataset and every knob fastio has: what :class:`fastio.Dataset` is made
    from and what a config file holds. Raises TypeError or ValueError naming
    the knob."""

    urls: str | tuple[str, ...] = knob(
        REQUIRED,
        "A URL pattern (braces, globs, fsspec chains), a folder, or a list of them.",
        "urls",
    )  # fmt: skip
    format: str | None = knob(
        None, "The shard format; unset: from the first URL's extension.", "text",
        optional=True, keyword="format",
    )  # fmt: skip
    storage_options: dict[str, Any] = knob(
        None, "Options handed to fsspec for remote URLs, untouched.", "mapping",
        keyword="storage_options", factory=dict,
    )  # fmt: skip
    on_error: OnError = knob(
        "raise",
        "raise: at the first problem, naming URL, offset and sample; skip: go on, counting "
        "skipped samples; warn: as skip, with a warning per failure.",
        "choice", choices=ON_ERROR, keyword="on_error",
    )  # fmt: skip
    format_options: FormatSettings = knob(None, "Options of the shard format.", "section",
                                          factory=FormatSettings)  # fmt: skip
    reader: ReaderSettings = knob(None, "The reader's knobs.", "section", keyword="reader",
                                  factory=ReaderSettings)  # fmt: skip
    shuffle: ShuffleSettings = knob(None, "Shuffling.", "section", factory=ShuffleSettings)
    split: SplitSettings = knob(None, "Ranks.", "section", factory=SplitSettings)
    cache: CacheSettings = knob(None, "The shard cache.", "section", factory=CacheSettings)
    tuner: TunerSettings = knob(None, "The online tuner.", "section", keyword="tune",
                                factory=TunerSettings)  # fmt: skip
    fairness: FairnessSettings = knob(None, "The fairness monitor.", "section",
                                      keyword="fairness", factory=FairnessSettings)  # fmt: skip
    tiering: TieringSettings = knob(None, "Tiering of intermediate files.", "section",
                                    keyword="tiering", factory=TieringSettings)  # fmt: skip

    def __post_init__(self) -> None:
        check(self)
        tiering, cache = self.tiering, self.cache
        if tiering.enabled and tiering.shuffle_memory is None and cache.max_bytes is None:
            raise ValueError("tiering places shuffle spill and shard cache copies: give "
                             "shuffle_memory, cache_bytes or both")  # fmt: skip
        if tiering.enabled and cache.dir is not None:
            raise ValueError("with tiering, the shard cache lives in the tiers' directories: "
                             "give cache_bytes, not cache_dir")  # fmt: skip
        if not tiering.enabled and cache.max_bytes is not None and cache.dir is None:
            raise ValueError("cache_bytes needs cache_dir (the cache's folder), or tiering "
                             "to place the cache")  # fmt: skip

    def replace(self, **changes: Any) -> DatasetSpec:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_keywords(cls, urls: Any, **keywords: Any) -> DatasetSpec:
        """The spec of ``Dataset(urls, **keywords)``: flat keywords go to their
        sections, whole sections may be given as settings, dicts, or (``tune``,
        ``fairness``) True/False; further keywords are reader knobs. Raises
        TypeError for an unknown keyword."""
        changes: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
        top: dict[str, Any] = {"urls": urls}
        given: dict[str, Any] = {}
        flat, defaults = _flat_and_defaults()
        for keyword, value in keywords.items():
            if _is_default(value, defaults.get(keyword, _NO_DEFAULT)):
                continue  # what the section holds already (``Dataset()`` passes every knob)
            if keyword in flat:
                section_name, field = flat[keyword]
                holder = _SECTIONS[section_name] if section_name else cls
                # Checked here, so that a message names the keyword given.
                value = check_value(keyword, knobs(holder)[field], value)
                (changes[section_name] if section_name else top)[field] = value
            elif keyword in _WHOLE:
                given[_WHOLE[keyword]] = value
            elif keyword in knobs(ReaderSettings):
                changes["reader"][keyword] = value
            else:
                raise unexpected_keyword("Dataset()", keyword,
                                         [*flat, *_WHOLE, *knobs(ReaderSettings)])  # fmt: skip
        for name, settings_class in _SECTIONS.items():
            value = given.get(name)
            base: Any
            if value is None:
                base = _default_section(settings_class)
            elif name == "tuner":
                base = TunerSettings.coerce(value)
            elif name == "fairness":
                base = FairnessSettings.coerce(value)
            else:
                base = check_value(_keyword_of(name), knobs(cls)[name], value)
            top[name] = dataclasses.replace(base, **changes[name]) if changes[name] else base
        return cls(**top)


_NO_DEFAULT = object()


@functools.cache
def _flat_and_defaults() -> tuple[dict[str, tuple[str | None, str]], dict[str, Any]]:
    """:func:`flat_keywords` and :func:`keyword_defaults`, worked out once."""
    flat = flat_keywords()
    return flat, keyword_defaults(flat)


def _is_default(value: Any, default: Any) -> bool:
    """Whether ``value`` is a keyword's default as its knob declares it (a
    plain value of the same type: it needs no check, and changes nothing)."""
    if value is default:
        return True
    return type(value) is type(default) and type(value) in (int, float, str) and value == default


_DEFAULT_SECTIONS: dict[type[Any], Any] = {}


def _default_section(settings_class: type[Any]) -> Any:
    """A section's defaults, made (and checked) once: settings are frozen."""
    made = _DEFAULT_SECTIONS.get(settings_class)
    if made is None:
        made = _DEFAULT_SECTIONS[settings_class] = settings_class()
    return made


def flat_keywords() -> dict[str, tuple[str | None, str]]:
    """``Dataset`` keyword -> (section or None for the top, field)."""
    result: dict[str, tuple[str | None, str]] = {}
    for name, spec in knobs(DatasetSpec).items():
        if spec.kind == "section":
            for field, inner in knobs(_SECTIONS[name]).items():
                if inner.keyword is not None:
                    result[inner.keyword] = (name, field)
        elif spec.keyword is not None:
            result[spec.keyword] = (None, name)
    return result


def keyword_defaults(flat: dict[str, tuple[str | None, str]] | None = None) -> dict[str, Any]:
    """Every keyword of ``Dataset`` but ``urls`` with its default: the flat
    knobs (``flat``: :func:`flat_keywords`, where made already), then the
    whole sections (None: the section's defaults)."""
    defaults = DatasetSpec.__dataclass_fields__
    result: dict[str, Any] = {}
    for keyword, (section, field) in (flat_keywords() if flat is None else flat).items():
        if section is None:
            result[keyword] = _default(defaults[field])
        else:
            result[keyword] = _default(_SECTIONS[section].__dataclass_fields__[field])
    for keyword in _WHOLE:
        result[keyword] = None
    return result


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return None  # a section or a mapping: made fresh


def sections() -> dict[str, type]:
    """The config sections of a spec: name -> settings class."""
    return dict(_SECTIONS)


def _keyword_of(section: str) -> str:
    return next((k for k, s in _WHOLE.items() if s == section), section)


_SECTIONS.update(
    {name: spec.of for name, spec in knobs(DatasetSpec).items() if spec.of is not None}
)
_WHOLE: dict[str, str] = {
    spec.keyword: name
    for name, spec in knobs(DatasetSpec).items()
    if spec.kind == "section" and spec.keyword is not None
}
"""Keywords that take a whole section (``reader``, ``tune``, ``fairness``, ``tiering``)."""
