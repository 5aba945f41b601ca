"""Slurm's host lists: `n[1-4]`, `n[01-10,12]`, `gpu[1-2]x`, `rack[1-2]n[1-3]`, comma-separated.

The syntax of `src/common/hostlist.c`: a list of expressions separated by
commas outside brackets; each expression is a prefix, bracketed ranges and a
suffix, several bracket groups expanding as a product (`r[1-2]n[1-2]` is
r1n1, r1n2, r2n1, r2n2). A range `LO-HI` keeps the zero padding of `LO`
(`[08-10]` is 08, 09, 10).

Shared by the site readers (slurm.conf, gres.conf, sacct, reservations) and
the service, which reads a running job's nodes as Slurm prints them; a
`limit` on the names bounds what an expression may cost before it is expanded.
"""

from __future__ import annotations

import re
from itertools import product

#: A bracket group, or a run of anything else.
_PIECE = re.compile(r"\[([^\[\]]*)\]|([^\[\]]+)")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
#: More names than this from one expression is surely a typo (`n[1-100000000]`).
MAX_HOSTS = 1_000_000


def split_list(text: str) -> list[str]:
    """The comma-separated parts of `text`, commas inside brackets kept (ValueError on unbalanced brackets)."""
    parts, depth, start = [], 0, 0
    for position, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested '[' in {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"']' without '[' in {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:position])
            start = position + 1
    if depth:
        raise ValueError(f"'[' without ']' in {text!r}")
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _numbers(group: str, expression: str, limit: int) -> list[str]:
    """The numbers of one bracket group (`01-03,7`), as text with their padding."""
    numbers: list[str] = []
    for item in group.split(","):
        match = _RANGE.fullmatch(item.strip())
        if not match:
            raise ValueError(f"{item.strip()!r} in {expression!r} is not a number or a range LO-HI")
        low, high = match.group(1), match.group(2)
        if high is None:
            numbers.append(low)
            continue
        if int(high) < int(low):
            raise ValueError(f"range {item.strip()!r} in {expression!r} runs backwards")
        if len(numbers) + int(high) - int(low) >= limit:
            raise ValueError(f"range {item.strip()!r} in {expression!r} names over {limit} hosts")
        width = len(low)
        numbers.extend(str(number).zfill(width) for number in range(int(low), int(high) + 1))
    return numbers


def expand_expression(expression: str, limit: int = MAX_HOSTS) -> list[str]:
    """The host names of one expression without top-level commas (`n[1-2]x` -> n1x, n2x), at most `limit`."""
    choices: list[list[str]] = []
    position = 0
    for match in _PIECE.finditer(expression):
        if match.start() != position:
            raise ValueError(f"unbalanced brackets in {expression!r}")
        position = match.end()
        if match.group(1) is not None:
            choices.append(_numbers(match.group(1), expression, limit))
        else:
            choices.append([match.group(2)])
    if position != len(expression) or not choices:
        raise ValueError(f"unbalanced brackets in {expression!r}")
    count = 1
    for options in choices:
        count *= len(options)
    if count > limit:
        raise ValueError(f"{expression!r} names over {limit} hosts")
    return ["".join(parts) for parts in product(*choices)]


def expand_hostlist(text: str, limit: int = MAX_HOSTS) -> list[str]:
    """Every host name of a host list, in its order, at most `limit` (ValueError naming what is wrong)."""
    names: list[str] = []
    for expression in split_list(text):
        names += expand_expression(expression, limit)
        if len(names) > limit:
            raise ValueError(f"{text!r} names over {limit} hosts")
    if not names:
        raise ValueError(f"{text!r} names no host")
    return names
