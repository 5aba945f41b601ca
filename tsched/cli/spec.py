"""Commands as data: a command is a name, a help line, a handler and a table of `Option`s, mounted on argparse
by one function, so that what several commands share (reading a trace, reaching a service, the scheduler) is
declared once and spelled the same everywhere.

A command's table is built only when the command is chosen (`Commands`): `tsched --version`, `tsched --help`
and a `tsched predict` from a submit hook import none of the modules other commands' tables name. A spelling
an option replaced (`Option.old`) is a hidden alias that still works for one release and says, once, on
standard error, what replaced it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsers = argparse._SubParsersAction

Handler = Callable[[argparse.Namespace], int]
#: How an option takes its value: one value (`type`), a flag, a list (several values, separated by spaces, and
#: repeatable), or where to write JSON (`--json OUT`, `-` for standard output).
Kind = Literal["value", "flag", "list", "json"]
#: `--json -`: the JSON on standard output, in place of the text.
STDOUT = "-"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in `--help`, except where there is none to show (no value, a flag off) or its
    help already says it in words: a hidden default is how `--mode` once misled."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return text + " (default: %(default)s)"


@dataclass(frozen=True)
class Option:
    """One option of a command: its name (`--machine-procs`; without dashes, a positional), what it means, how
    its value is read, and the spellings it replaced (`old`: hidden, deprecated, still working)."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str | None = None
    choices: Sequence[Any] | None = None
    kind: Kind = "value"
    required: bool = False
    #: A positional's count: `?` (optional) or `+` (one or more); None: exactly one.
    nargs: str | None = None
    old: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The option's name without dashes (`machine-procs`), as a `tsched serve --config` file spells it."""
        return self.name.lstrip("-")

    def arguments(self, defaults: bool = True) -> dict[str, Any]:
        """`add_argument`'s keywords. Without `defaults`, argparse records only what was given (the default
        is still shown in the help): a config file fills in the rest."""
        shown = self.help.replace("%", "%%")  # argparse formats help with %
        spelled = (not defaults or self.kind == "list") and self.default not in (None, False)
        if spelled and "default" not in self.help:  # what HelpFormatter would not show, or not readably
            shown += f" (default: {show_default(self.default)})"
        default = argparse.SUPPRESS if not defaults else False if self.kind == "flag" else self.default
        if self.kind == "flag":
            return {"action": "store_true", "help": shown, "default": default}
        if self.kind == "json":
            return {"action": JsonTarget, "nargs": "?", "type": self.type, "metavar": "OUT|-", "help": shown}
        if self.kind == "list":
            words = {"action": ListAction, "nargs": "+", "default": default, "help": shown}
        else:
            words = {"default": default, "help": shown, "nargs": self.nargs}
            if self.name.startswith("-"):
                words["required"] = self.required
        keys = ("type", "metavar", "choices")
        return {**words, **{key: getattr(self, key) for key in keys if getattr(self, key) is not None}}


def show_default(value: Any) -> str:
    """A default as `--help` shows it: a list's items space-separated, as they are given."""
    if isinstance(value, tuple | list):
        return " ".join(str(item) for item in value)
    return str(value)


@dataclass(frozen=True)
class Group:
    """Options shown together under a title in `--help`. A group with a `section` is what `tsched serve
    --config` reads from that table of its file ("": the top level): argparse records only what was given."""

    title: str
    options: tuple[Option, ...]
    section: str | None = None


Table = Sequence[Option | Group]


@dataclass(frozen=True)
class Command:
    """A command: its name and help line, and either a handler with a table of options (built when the command
    is chosen, so its imports are paid only then) or subcommands."""

    name: str
    help: str
    handler: Handler | None = None
    table: Callable[[], Table] = tuple
    subcommands: tuple[Command, ...] = ()


class ListAction(argparse.Action):
    """A list option: the values after it, and after each repetition, add up; they replace the default."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        current = getattr(namespace, self.dest, None)
        items = [] if current is None or current is self.default else list(current)
        items.extend(values if isinstance(values, list) else [values])
        setattr(namespace, self.dest, items)


class JsonTarget(argparse.Action):
    """`--json OUT`: write the JSON to OUT, `-` for standard output; a bare `--json` (once a flag) still
    means `-`."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        if values is None:
            warn_deprecated(parser, namespace, f"{option_string} without a value", f"{option_string} {STDOUT}")
            values = STDOUT
        setattr(namespace, self.dest, values)


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option, hidden from `--help`: it warns once, then does what the new one does."""

    def __init__(self, option_strings: list[str], dest: str, *, target: argparse.Action, **_: Any) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=target.nargs,
            const=target.const,
            default=argparse.SUPPRESS,
            type=target.type,  # type: ignore[arg-type]  # an action's own type: never a registry name
            choices=target.choices,
            help=argparse.SUPPRESS,
            metavar=target.metavar,
        )
        self.target = target

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        warn_deprecated(parser, namespace, str(option_string), self.target.option_strings[0])
        self.target(parser, namespace, values, option_string)


#: Where a parse keeps the old spellings it has warned about (not an identifier: no option can clash with it).
_WARNED = "deprecated spellings warned"


def warn_deprecated(parser: argparse.ArgumentParser, namespace: argparse.Namespace, old: str, new: str) -> None:
    """One line on standard error, once per parse and spelling, naming what replaced it."""
    warned: set[str] = vars(namespace).setdefault(_WARNED, set())
    if old not in warned:
        warned.add(old)
        print(f"{parser.prog}: warning: {old} is deprecated and goes in the next release: use {new}", file=sys.stderr)


def add_options(parser: argparse.ArgumentParser, table: Table) -> None:
    """Mount a command's table: each option, grouped as the table groups them, with its hidden old spellings."""
    for entry in table:
        if isinstance(entry, Option):
            add_option(parser, entry)
            continue
        group = parser.add_argument_group(entry.title)
        for option in entry.options:
            add_option(group, option, defaults=entry.section is None)


def add_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, option: Option, defaults: bool = True
) -> None:
    arguments = option.arguments(defaults)
    if option.old and option.required:  # argparse would miss a required option given by its old spelling
        parser = parser.add_mutually_exclusive_group(required=True)
        arguments["required"] = False
    action = parser.add_argument(option.name, **arguments)
    if option.old:
        parser.add_argument(*option.old, action=DeprecatedAlias, target=action, dest=action.dest)


class Commands(_SubParsers):
    """Subcommands whose options are mounted when one is chosen, not when the parser is built."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pending: dict[str, Command] = {}

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        self.complete(values[0])
        super().__call__(parser, namespace, values, option_string)

    def complete(self, name: str) -> None:
        """Mount command `name`'s options (once; an unknown name is argparse's to refuse)."""
        command = self.pending.pop(name, None)
        if command is not None:
            add_options(self.choices[name], command.table())


def mount(parent: argparse.ArgumentParser, commands: Sequence[Command], dest: str, lazy: bool = True) -> None:
    """Mount `commands` as `parent`'s subcommands; `lazy`: their options when one is chosen, else at once."""
    action = parent.add_subparsers(dest=dest, required=True, metavar=dest.upper(), action=Commands)
    assert isinstance(action, Commands)
    for command in commands:
        parser = action.add_parser(
            command.name, help=command.help, description=command.help, formatter_class=HelpFormatter
        )
        if command.subcommands:
            mount(parser, command.subcommands, "subcommand", lazy)
            continue
        parser.set_defaults(handler=command.handler)
        action.pending[command.name] = command
        if not lazy:
            action.complete(command.name)
