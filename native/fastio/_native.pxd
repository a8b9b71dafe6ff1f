# Declarations for fastio._native, one file per concern as the .pyx includes them.
include "engine.pxd"
include "buffers.pxd"
include "framing.pxd"
include "columns.pxd"
include "net.pxd"
