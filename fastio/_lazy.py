"""Names a package exports, each imported from its module at first use.

A training job's first sample should not wait for the formats it does not
read or the parts it does not turn on; a package's ``__init__`` names its
exports here instead of importing them (PEP 562), and keeps the imports under
``TYPE_CHECKING`` for type checkers.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["exports"]


def exports(package: str, modules: dict[str, tuple[str, ...]]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``, whose exports are the names
    ``modules`` lists by the module defining them, named relative to the
    package (``{"._webdataset": ("WebDatasetWriter", ...)}``). A name is
    imported once, then kept on the package."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
