"""SHA-256 of what a user handed in (a trace file, a folder of logs, a model file), to identify it in reports."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

#: Bytes read at a time: a digest never holds a whole multi-gigabyte log in memory.
_BLOCK = 1 << 20


def sha256_of(path: str | Path | Sequence[str | Path]) -> str:
    """The SHA-256 of a file's bytes, or of a folder's (or a list's) files one after another, in name order."""
    digest = hashlib.sha256()
    for file in files_of(path):
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(_BLOCK), b""):
                digest.update(block)
    return digest.hexdigest()


def files_of(path: str | Path | Sequence[str | Path]) -> list[Path]:
    """A path's files: itself, a folder's (not hidden) files in name order, or a list's files in its order."""
    if isinstance(path, str | Path):
        target = Path(path)
        if target.is_dir():
            return sorted(item for item in target.iterdir() if item.is_file() and not item.name.startswith("."))
        return [target]
    return [Path(item) for item in path]
