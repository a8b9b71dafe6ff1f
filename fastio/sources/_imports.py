"""Imports made on fastio's background threads, kept apart from forks; and
the attributes a package gives from submodules imported at first use.

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
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["BACKGROUND_IMPORTS", "lazy_attributes", "ready_request_imports"]

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


def lazy_attributes(
    package: str, modules: dict[str, list[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` that give the
    attributes of its submodules (``modules``: a submodule's name, the
    attributes it gives), each submodule imported when one of its
    attributes is first asked for, and the attribute kept in the package."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__
