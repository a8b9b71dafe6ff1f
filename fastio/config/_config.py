"""Config files: a dataset and every fastio knob in one YAML, TOML or JSON file.

A config names a dataset the way fsspec users already do and holds the
sections of a :class:`fastio.spec.DatasetSpec` (``fastio-bench config show``
prints them all with their defaults)::

    urls: s3://bucket/train-{0000..1023}.tar  # a pattern or a list; `::` chains, globs
    format: webdataset                        # left out: from the first URL's extension
    format_options: {verify: true, example: true, record_size: null, columns: null}
    storage_options: {anon: true}             # handed to fsspec untouched
    reader: {outstanding_requests: 32, read_size: 4MiB}
    shuffle: {enabled: true, seed: 0, buffer: 32MiB, shards: 8}
    split: {rank: null, world_size: null, remainder: exact}
    on_error: raise
    cache: {dir: /scratch/fastio, max_bytes: 200GiB, policy: plan, prefetch: 2}
    tuner: {enabled: false}                   # fairness and tiering alike

The extension picks the syntax (``.yaml``/``.yml``, ``.toml``, ``.json``). Sizes
take ``65536``, ``64KiB``, ``1MB`` or ``4m`` (bare k/m/g/t are binary, as in fio).
Values are checked as :class:`fastio.Dataset` checks its keywords, with the
same messages.

Precedence, highest first (as in fsspec, whose ``FSSPEC_*`` variables win
over its config files):

1. explicit arguments: ``load_config(path, reader={"read_size": "4MiB"})`` or
   ``load_config(path, reader__read_size="4MiB")``; ``fastio-bench`` options given
   on the command line;
2. ``FASTIO_*`` environment variables, ``__`` between section and key:
   ``FASTIO_READER__OUTSTANDING_REQUESTS=32``, ``FASTIO_SHUFFLE__SEED=3``,
   ``FASTIO_URLS=...``; lists and mappings as JSON
   (``FASTIO_STORAGE_OPTIONS='{"anon": true}'``): a job changes a checked-in
   file's value without editing it;
3. the config file;
4. the defaults: those of :mod:`fastio.spec`.

Every problem found raises one :class:`fastio.ConfigError`, a line per problem
naming where it came from (the file, ``arguments`` or the environment
variable), the key path, what was expected and what was found; an unknown key
comes with the nearest known one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from fastio._errors import ConfigError
from fastio.config._files import dumps, file_kind, read
from fastio.config._model import DatasetConfig, defaults
from fastio.config._problems import Origins, explain
from fastio.config._sources import environment, merged, nested

if TYPE_CHECKING:
    import os

__all__ = ["DatasetConfig", "defaults", "dumps", "load_config", "save_config"]


def load_config(path: str | os.PathLike[str], **overrides: Any) -> DatasetConfig:
    """The :class:`DatasetConfig` in the YAML, TOML or JSON file ``path``.

    ``overrides`` win over the file: whole sections (``reader={"read_size":
    "4MiB"}``, or a section or settings object such as
    :class:`fastio.ReaderSettings`) or single keys with ``__``
    (``shuffle__seed=3``). ``FASTIO_*`` environment variables win over the
    file, which wins over the defaults. Raises :class:`fastio.ConfigError`
    (a ValueError) for a file that does not parse or does not describe a
    valid config, OSError where the file cannot be read.
    """
    path = Path(path)
    return _build(read(path), nested(overrides), str(path))


def _build(data: dict[str, Any], overrides: dict[str, Any], label: str) -> DatasetConfig:
    variables = environment()
    if variables.problems:
        raise ConfigError(*variables.problems, file=label)
    origins = Origins(label, data, overrides, variables.variables)
    merged_data = merged(merged(data, variables.data), overrides)
    try:
        return DatasetConfig.model_validate(merged_data)
    except ValidationError as error:
        raise ConfigError(*explain(error, origins), file=label) from None


def save_config(
    config: DatasetConfig, path: str | os.PathLike[str], *, only_changed: bool = False
) -> None:
    """Write ``config`` to ``path`` as YAML, TOML or JSON (by the extension), so
    that :func:`load_config` gives it back equal.

    Every key is written (a full snapshot: it loads back the same where no
    ``FASTIO_*`` variable is set then), except those unset as by default
    (null); with ``only_changed``, only what differs from the defaults.
    Raises :class:`fastio.ConfigError` for an unknown extension, or for a key
    unset where its default is a value (``tuner.seed``) in TOML, which has
    no null; OSError where the file cannot be written.
    """
    path = Path(path)
    text = dumps(config.to_dict(only_changed=only_changed), file_kind(path), str(path))
    path.write_text(text, encoding="utf-8")
