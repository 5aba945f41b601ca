"""Lazy public names for a package's `__init__` (PEP 562), so importing the package stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: dict[str, Any], exports: Mapping[str, str], public: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of a package whose `exports` map public names to their modules.

    A name's module is imported on first use and the value kept in the
    package's globals, so later uses cost nothing.
    """

    def getattr_(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        package[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*package, *public})

    return getattr_, dir_
