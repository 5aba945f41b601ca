"""How the docs site reads the code's docstrings: a Griffe extension that the API reference loads (mkdocs.yml).

The docstrings are plain prose written to read well in a terminal, with two habits Markdown does not
share: a list starts on the line right after the sentence that introduces it, and a literal block is
introduced by reST's `::`. This turns both into Markdown when the reference is built (a blank line before
the list; `:` for `::`) and leaves the source as it is.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

LIST_ITEM = re.compile(r"\s*([-*+]|\d+[.)])\s")


def as_markdown(docstring: str) -> str:
    """`docstring` with a blank line before each list that follows a line of text, and `::` read as `:`."""
    lines: list[str] = []
    for line in docstring.splitlines():
        previous = lines[-1] if lines else ""
        if LIST_ITEM.match(line) and previous.strip() and not LIST_ITEM.match(previous) and previous[:1] != " ":
            lines.append("")
        lines.append(line[:-1] if line.endswith("::") else line)
    return "\n".join(lines)


class ProseDocstrings(griffe.Extension):
    """Applies `as_markdown` to every docstring Griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_markdown(obj.docstring.value)
