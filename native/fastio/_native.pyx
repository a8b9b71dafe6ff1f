# cython: language_level=3, binding=False
"""Thin binding over the C code in native/: typed arguments, buffers kept
exported while C works on them, errno to OSError, results as small typed
classes. Policy (which engine, warnings, retries, errors with URLs) lives in
fastio, not here.

One extension, one file per concern (each declared in its own .pxd).

Its functions are built-in functions (``binding=False``), not Cython's
function objects: making those, each with a code object, took a quarter of
a millisecond of every process's import (a data loader's start); nothing
here is introspected.
"""

include "engine.pxi"
include "buffers.pxi"
include "framing.pxi"
include "columns.pxi"
include "net.pxi"
include "forks.pxi"
include "plan.pxi"
