"""Imports made on fastio's background threads, kept apart from forks.

A module being imported is locked until its import ends. A process forked
while another of its threads imports a module inherits that lock held by a
thread it does not have: the child's own import of the module then waits for
ever. A DataLoader worker did, started while the dataset's first questions
about its remote objects were still on their way (their threads importing
``tenacity``). So fastio's background threads import under
:data:`BACKGROUND_IMPORTS`, and a fork waits until none of them is importing.
"""

from __future__ import annotations

import importlib
import os
import threading

__all__ = ["BACKGROUND_IMPORTS", "ready_request_imports"]

BACKGROUND_IMPORTS = threading.Lock()
os.register_at_fork(
    before=BACKGROUND_IMPORTS.acquire,
    after_in_parent=BACKGROUND_IMPORTS.release,
    after_in_child=BACKGROUND_IMPORTS.release,
)

_REQUEST_MODULES = ("tenacity",)
_ready = False


def ready_request_imports() -> None:
    """Import what remote requests use (their retries), once, under the
    lock: called first on a background thread that makes them."""
    global _ready
    if _ready:
        return
    with BACKGROUND_IMPORTS:
        for name in _REQUEST_MODULES:
            importlib.import_module(name)
        _ready = True
