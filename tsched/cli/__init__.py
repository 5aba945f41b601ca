"""The `tsched` command line: thin adapters that parse arguments, call the domain code and print results.

Each command is declared as data (`tsched.cli.spec`) in the module of its concern: `simulation` (simulate,
evaluate, wait-eval), `traces` (trace info|convert|generate), `prediction` (predict-eval, train), `serving`
(serve) and `client` (the commands that talk to a running service), over the groups of options they share
(`tsched.cli.options`). Errors a user can fix (`kernel.errors.TschedError`: a malformed trace, a bad SPEC, a
refused request) and file-system errors are printed as one line with exit status 2; anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import metadata

from kernel.errors import TschedError
from tsched.cli import client, prediction, serving, simulation, traces
from tsched.cli.spec import HelpFormatter, mount

EXIT_USER_ERROR = 2
#: Every command, in the order `tsched --help` lists them.
COMMANDS = (
    *simulation.COMMANDS[:1],
    *traces.COMMANDS,
    *simulation.COMMANDS[1:],
    *prediction.COMMANDS,
    *serving.COMMANDS,
    *client.COMMANDS,
)


def build_parser(lazy: bool = False) -> argparse.ArgumentParser:
    """The whole `tsched` parser; `lazy`: each command's options mounted only when the command is chosen."""
    parser = argparse.ArgumentParser(
        prog="tsched",
        description="Runtime prediction for HPC batch schedulers, and the simulator that measures what it is worth.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {metadata.version('tsched')}")
    mount(parser, COMMANDS, "command", lazy)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser(lazy=True).parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (TschedError, OSError) as error:
        print(f"tsched: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
