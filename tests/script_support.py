"""Importing a script of scripts/ in a test, as the script runs: from scripts/, its siblings importable by name."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@contextmanager
def imported_script(name: str) -> Iterator[ModuleType]:
    """The script `name` (scripts/NAME.py) as a module, with scripts/ on the path while the block runs."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPTS))
