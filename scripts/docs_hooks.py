"""The docs site's generated pages: the command-line, estimator-parameter and API references, from the code.

A mkdocs hook (`hooks:` in mkdocs.yml). Pages hold markers that this hook replaces at build time, so the
reference is rebuilt from the code on every build and cannot drift from it:

- `<!-- cli -->`: every `tsched` command and subcommand, walked from `tsched.cli.build_parser()`, with its
  usage line and each option as `--help` shows it; then `tsched-slurm-jobcomp --help`.
- `<!-- estimators -->`: every registered estimator's SPEC name and parameters, with each default, the
  values it admits and what it does, from the parameters' declarations (`predictor.estimators.base`).
- `<!-- api: PACKAGE -->`: a mkdocstrings block for PACKAGE and for each of its modules (subpackages get a
  marker of their own). A package of the five layers that no page documents fails the strict build, so a
  package added by a later split cannot go undocumented.

Run as a script, it prints the command-line reference's Markdown:

    python scripts/docs_hooks.py
"""

from __future__ import annotations

import argparse
import contextlib
import html
import io
import logging
import os
import re
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
#: The layers, top first (pyproject.toml's import-linter contract).
LAYERS = ("tsched", "sites", "simulator", "predictor", "kernel")
#: Generated code, documented by its contract (protos/tsched/v1/predictor.proto) instead.
UNDOCUMENTED = ("predictor.proto",)
#: The width `--help` is rendered at, whatever terminal the build runs in.
HELP_COLUMNS = "88"

CLI_MARKER = "<!-- cli -->"
ESTIMATORS_MARKER = "<!-- estimators -->"
API_MARKER = re.compile(r"<!-- api: ([\w.]+) -->")
log = logging.getLogger("mkdocs.plugins.tsched")
_documented: set[str] = set()


# ---- the command line ----


def _escape(text: str) -> str:
    """Help text as literal Markdown: no HTML, emphasis or links made of what argparse prints."""
    return re.sub(r"([\\`*_\[\]])", r"\\\1", html.escape(text, quote=False))


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in the order `--help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """Each argument group of `parser` as a bold title and a list: the option as typed, then its help."""
    formatter = parser._get_formatter()
    lines = []
    for group in parser._action_groups:
        actions = [
            action
            for action in group._group_actions
            if not isinstance(action, argparse._SubParsersAction) and action.help != argparse.SUPPRESS
        ]
        if not actions:
            continue
        lines += ["", f"**{_escape(group.title or '')}**", ""]
        for action in actions:
            invocation = formatter._format_action_invocation(action)
            helped = formatter._expand_help(action) if action.help else ""
            lines.append(f"- `{invocation}`" + (f": {_escape(helped)}" if helped else ""))
    return lines


def _command_sections(parser: argparse.ArgumentParser, summary: str, level: int) -> list[str]:
    """One command's section (heading, what it does, usage, options), then its subcommands' sections."""
    lines = [f"{'#' * level} `{parser.prog}`", ""]
    if text := parser.description or summary:
        lines += [_escape(text), ""]
    lines += ["```text", parser.format_usage().rstrip(), "```"]
    subcommands = _subcommands(parser)
    if subcommands:
        lines += ["", "| subcommand | what it does |", "| --- | --- |"]
        lines += [f"| `{name}` | {_escape(text)} |" for name, text, _ in subcommands]
    lines += [*_options(parser), ""]
    for _name, text, sub in subcommands:
        lines += _command_sections(sub, text, min(level + 1, 4))
    return lines


def _jobcomp_help() -> str:
    """`tsched-slurm-jobcomp --help`: its parser is built inside its `main`, so ask it as a user would."""
    from tsched.cli import jobcomp

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.suppress(SystemExit):
        jobcomp.main(["--help"])
    return printed.getvalue().rstrip()


def cli_reference() -> str:
    """The Markdown of every command, from the parsers the entry points build."""
    from tsched.cli import build_parser

    # argparse wraps to the terminal's width and may colour its output: neither belongs in a page.
    with mock.patch.dict(os.environ, COLUMNS=HELP_COLUMNS, NO_COLOR="1"):
        lines = _command_sections(build_parser(), "", 2)
        lines += ["## `tsched-slurm-jobcomp`", "", "```text", _jobcomp_help(), "```", ""]
    return "\n".join(lines)


# ---- the estimators ----


def _spelled(value: Any) -> str:
    """A default as a SPEC spells it (`per_user=false`)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def estimator_reference() -> str:
    """A section per SPEC name: the estimator's class, its summary, and a table of its parameters."""
    from predictor.estimators.base import declarations
    from predictor.registry import available

    lines = []
    for name, cls in available().items():
        summary = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        lines += [f"### `{name}`", "", f"`{cls.__module__}.{cls.__qualname__}`: {summary}", ""]
        declared = declarations(cls)
        if not declared:
            lines += ["No parameters.", ""]
            continue
        lines += ["| parameter | default | admits | what it sets |", "| --- | --- | --- | --- |"]
        for parameter, declaration in declared.items():
            default = _spelled(cls.__dataclass_fields__[parameter].default)
            what = _escape(declaration.doc).replace("|", "\\|")
            lines.append(f"| `{parameter}` | `{default}` | {_escape(declaration.admits())} | {what} |")
        lines.append("")
    return "\n".join(lines)


# ---- the Python API ----


def _modules(package: str) -> tuple[list[str], list[str]]:
    """The modules directly in `package` (no `__main__`, nothing private) and its subpackages."""
    folder = ROOT.joinpath(*package.split("."))
    modules = sorted(f"{package}.{path.stem}" for path in folder.glob("*.py") if not path.stem.startswith("_"))
    # A folder of modules counts without `__init__.py` too, so that a namespace package is noticed (Griffe
    # cannot find its modules: it needs an `__init__.py`).
    subpackages = {f"{package}.{path.parent.name}" for path in folder.glob("*/*.py")}
    return modules, sorted(subpackages - set(UNDOCUMENTED))


def all_packages() -> set[str]:
    """Every package of the five layers that the API reference must cover."""
    found: set[str] = set()
    pending = list(LAYERS)
    while pending:
        package = pending.pop()
        found.add(package)
        pending += _modules(package)[1]
    return found


def api_blocks(package: str) -> str:
    """mkdocstrings blocks: the package's own docstring (its lazy exports are documented where they live),
    then each of its modules."""
    modules, subpackages = _modules(package)
    blocks = [f"::: {package}\n    options:\n      members: false\n"]
    if subpackages:
        blocks.append("Subpackages, documented on their own: " + ", ".join(f"`{name}`" for name in subpackages) + ".\n")
    blocks += [f"::: {module}\n" for module in modules]
    return "\n".join(blocks)


# ---- mkdocs events ----


def on_pre_build(**_: Any) -> None:
    _documented.clear()


def on_page_markdown(markdown: str, **_: Any) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if ESTIMATORS_MARKER in markdown:
        markdown = markdown.replace(ESTIMATORS_MARKER, estimator_reference())

    def expand(match: re.Match[str]) -> str:
        _documented.add(match.group(1))
        return api_blocks(match.group(1))

    return API_MARKER.sub(expand, markdown)


def on_post_build(**_: Any) -> None:
    missing = sorted(all_packages() - _documented)
    if missing:
        log.warning("the API reference documents no page for %s: add an `<!-- api: NAME -->` marker", missing)


if __name__ == "__main__":
    print(cli_reference())
