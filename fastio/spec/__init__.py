"""fastio.spec: every knob, with its one default, its bounds and its doc.

Dataclasses only (no I/O, no heavy imports): the dataset, the config files and
the command line are derived from these.
"""

from __future__ import annotations

from fastio.spec._fairness import FairnessSettings
from fastio.spec._reader import ReaderSettings

__all__ = ["FairnessSettings", "ReaderSettings"]
