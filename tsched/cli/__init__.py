"""The `tsched` command line: thin wrappers that parse arguments, call the domain code and print results.

The simulator's commands (`simulate`, `trace`, `evaluate`, `wait-eval`) live in
`tsched.cli.simulation`, the predictor's (`serve`, `predict`, `forecast`,
`status`, `observe`, `namespaces`, `predict-eval`, `train`) and the sites'
(`pbs-report`) in `tsched.cli.service`. Errors a user can fix
(`kernel.errors.TschedError`: a malformed trace, a bad SPEC, a refused request)
and file-system errors are printed as one line with exit status 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import metadata

from kernel.errors import TschedError
from tsched.cli import service, simulation
from tsched.cli.options import HelpFormatter

EXIT_USER_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    """The whole `tsched` parser, every command mounted."""
    parser = argparse.ArgumentParser(
        prog="tsched",
        description="Runtime prediction for HPC batch schedulers, and the simulator that measures what it is worth.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {metadata.version('tsched')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    simulation.add_commands(commands)
    service.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (TschedError, OSError) as error:
        print(f"tsched: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
