"""fastio.spec: every knob, with its one default, its bounds and its doc.

Dataclasses only (no I/O, no heavy imports). :class:`DatasetSpec` holds a
dataset and all its sections; :class:`fastio.Dataset` keywords, config file
sections (:mod:`fastio.config`) and ``fastio-bench`` options are derived from
the knobs declared here (:func:`knob`), so they cannot drift apart.
"""

from __future__ import annotations

from fastio.spec._dataset import (
    CacheSettings,
    DatasetSpec,
    FormatSettings,
    OnError,
    Remainder,
    ShuffleSettings,
    SplitSettings,
    TieringSettings,
    TierSettings,
)
from fastio.spec._fairness import FairnessSettings
from fastio.spec._knobs import (
    REQUIRED,
    Knob,
    check_value,
    knob,
    knob_defaults,
    knobs,
    parse_size,
    size_text,
)
from fastio.spec._reader import ReaderSettings
from fastio.spec._tuner import TunerSettings

__all__ = [
    "REQUIRED",
    "CacheSettings",
    "DatasetSpec",
    "FairnessSettings",
    "FormatSettings",
    "Knob",
    "OnError",
    "ReaderSettings",
    "Remainder",
    "ShuffleSettings",
    "SplitSettings",
    "TierSettings",
    "TieringSettings",
    "TunerSettings",
    "check_value",
    "knob",
    "knob_defaults",
    "knobs",
    "parse_size",
    "size_text",
]
