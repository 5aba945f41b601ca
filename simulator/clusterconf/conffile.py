"""Slurm's configuration file format, shared by slurm.conf and gres.conf.

As Slurm 22.05's `src/common/parse_config.c` reads it: `KEY=VALUE` pairs
separated by blanks (keys case-insensitive; a value in double quotes may hold
blanks; an operator such as `+=` is read as `=`), `#` starts a comment
unless escaped (`\\#`), a line ending in an odd number of backslashes
continues on the next, and `Include FILE` reads another file in place
(relative to the including file's folder; `%c` is the ClusterName set so far).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from simulator.clusterconf.settings import ClusterConfigError, Value, Where

#: One KEY=VALUE pair (Slurm's keyvalue_pattern: an optional operator before '=', a quoted or bare value).
_PAIR = re.compile(r'\s*([A-Za-z0-9_.]+)\s*[-*+/]?=\s*(?:"([^"]*)"|(\S+))(?=\s|$)')
_INCLUDE = re.compile(r"\s*include\s+(\S+)\s*$", re.IGNORECASE)
#: Line kinds decided by the line's first key; every other line holds global keys.
LINE_KINDS = ("nodename", "partitionname", "nodeset", "downnodes", "frontendname", "slurmctldhost")
_MAX_INCLUDE_DEPTH = 16


@dataclass
class Line:
    where: Where
    pairs: list[tuple[str, Value]]

    @property
    def kind(self) -> str:
        first = self.pairs[0][0].lower()
        return first if first in LINE_KINDS else "global"


def _logical_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each line after comments and continuations, escapes removed."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise ClusterConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    pending: list[str] = []
    first = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw)
        if not pending:
            first = number
        stripped = line.rstrip()
        backslashes = len(stripped) - len(stripped.rstrip("\\"))
        if backslashes % 2:
            pending.append(stripped[:-1])
            continue
        pending.append(line)
        yield first, _strip_escapes("".join(pending))
        pending = []
    if pending:
        yield first, _strip_escapes("".join(pending))


def _strip_comment(line: str) -> str:
    """Everything before a '#' preceded by an even number of backslashes."""
    backslashes = 0
    for position, char in enumerate(line):
        if char == "#" and backslashes % 2 == 0:
            return line[:position]
        backslashes = backslashes + 1 if char == "\\" else 0
    return line


def _strip_escapes(line: str) -> str:
    r"""Drop each escaping backslash (`\#` -> `#`, `\\` -> `\`)."""
    return re.sub(r"\\(.)", r"\1", line)


def _pairs(text: str, where: Where) -> list[tuple[str, Value]]:
    pairs: list[tuple[str, Value]] = []
    position = 0
    while position < len(text):
        if not text[position:].strip():
            break
        match = _PAIR.match(text, position)
        if not match:
            bad = text[position:].split(maxsplit=1)[0]
            raise where.error(bad, "is not KEY=VALUE")
        value = match.group(2) if match.group(2) is not None else match.group(3)
        pairs.append((match.group(1), Value(value, where)))
        position = match.end()
    return pairs


def read_lines(path: Path, cluster_name: str | None = None, depth: int = 0) -> Iterator[Line]:
    """Every line of a slurm.conf with its Include files read in place."""
    if depth > _MAX_INCLUDE_DEPTH:
        raise ClusterConfigError(f"{path}: Include nested over {_MAX_INCLUDE_DEPTH} deep (a loop?)")
    for number, text in _logical_lines(path):
        where = Where(str(path), number)
        include = _INCLUDE.match(text)
        if include:
            target = include.group(1)
            if "%c" in target:
                if cluster_name is None:
                    raise where.error("Include", f"{target!r} uses %c before ClusterName is set")
                target = target.replace("%c", cluster_name)
            yield from read_lines(path.parent / target, cluster_name, depth + 1)
            continue
        pairs = _pairs(text, where)
        if not pairs:
            continue
        for key, value in pairs:
            if key.lower() == "clustername":
                cluster_name = value.text
        yield Line(where, pairs)
