"""fastio.config: config files, ``FASTIO_*`` variables and explicit arguments
merged into one validated config (see :mod:`fastio.config._config`)."""

from __future__ import annotations

from fastio.config._config import DatasetConfig, load_config, save_config

__all__ = ["DatasetConfig", "load_config", "save_config"]
