"""Tiering: every intermediate file on the tier its predicted I/O density earns.

Shard cache copies, shuffle spill and users' own temporaries are placed on
tiers (directories on RAM, SSD or HDD, each with a byte budget) by a policy
that ranks files by predicted I/O density (operations per byte per second),
learned online from the recorded outcomes of earlier files. See
:mod:`fastio.tiering._placement` for the mechanics, ``_model`` for the
prediction, ``_policies`` and ``_simulate`` for the trace-driven comparison
with simple baselines (``fastio-bench tiering``).
"""

from __future__ import annotations

from fastio.tiering._compare import compare
from fastio.tiering._model import DensityModel, Features, Outcome
from fastio.tiering._placement import TieredFile, Tiering
from fastio.tiering._policies import DensityPolicy, knapsack_cutoff
from fastio.tiering._simulate import BUDGETS, Result, peak_bytes, replay
from fastio.tiering._tiers import MEDIA, Media, Profile, Tier, media_kind, probe
from fastio.tiering._trace import Trace, TraceFile, make_trace

__all__ = [
    "BUDGETS",
    "DensityModel",
    "DensityPolicy",
    "Features",
    "MEDIA",
    "Media",
    "Outcome",
    "Profile",
    "Result",
    "Tier",
    "TieredFile",
    "Tiering",
    "Trace",
    "TraceFile",
    "compare",
    "knapsack_cutoff",
    "make_trace",
    "media_kind",
    "peak_bytes",
    "probe",
    "replay",
]
