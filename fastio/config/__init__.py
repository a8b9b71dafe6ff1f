"""fastio.config: config files, ``FASTIO_*`` variables and explicit arguments
merged into one :class:`DatasetConfig`, whose sections are made from the knobs
of :mod:`fastio.spec` (see :mod:`fastio.config._config` for the precedence).

Modules: ``_model`` (the sections, generated from the spec), ``_files`` (YAML,
TOML, JSON), ``_sources`` (environment variables, explicit arguments),
``_problems`` (a message per problem), ``_config`` (load and save).
"""

from __future__ import annotations

from fastio.config._config import load_config, save_config
from fastio.config._model import DatasetConfig

__all__ = ["DatasetConfig", "load_config", "save_config"]
