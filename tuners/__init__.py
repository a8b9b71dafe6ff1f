"""fastio.tuners: online tuning of named knobs against a measured objective.

This package never imports the rest of fastio: it knows knobs and numbers, not
files or storage. The tuner itself arrives with the tuner issue (#5); until then
the package holds only the knob vocabulary the reader already exposes.
"""

from __future__ import annotations

__all__: list[str] = []
