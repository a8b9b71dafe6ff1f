"""fastio.tuners: online tuning of named knobs against a measured objective.

This package never imports the rest of fastio: it knows knobs and numbers, not
files or storage. :class:`OnlineTuner` runs Optuna's ask-and-tell from windows
of live traffic; :class:`HillClimber` and :class:`FixedConfig` are the
baselines it is measured against; :class:`StorageSimulator` stands in for a
storage in tests and benchmarks.
"""

from __future__ import annotations

from ._baselines import FixedConfig, HillClimber
from ._drift import PageHinkley
from ._simulator import PROFILES, SimulatedRun, StorageProfile, StorageSimulator, drive
from ._space import Categorical, Config, IntKnob, Knob, ProductBudget, SearchSpace
from ._store import fingerprint, machine_identity, open_storage
from ._tuner import Decision, OnlineTuner, Phase
from ._window import MeasurementWindow

__all__ = [
    "PROFILES",
    "Categorical",
    "Config",
    "Decision",
    "FixedConfig",
    "HillClimber",
    "IntKnob",
    "Knob",
    "OnlineTuner",
    "PageHinkley",
    "Phase",
    "ProductBudget",
    "SearchSpace",
    "SimulatedRun",
    "StorageProfile",
    "StorageSimulator",
    "MeasurementWindow",
    "drive",
    "fingerprint",
    "machine_identity",
    "open_storage",
]
