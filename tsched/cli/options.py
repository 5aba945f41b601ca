"""What several commands share: argparse types, the help formatter, the options to read a trace and to reach a
running service, and how those options become a trace and credentials."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel.errors import UsageError

if TYPE_CHECKING:
    from predictor.service.client import Credentials
    from simulator.workloads.trace import Trace


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in `--help`, except where there is none to show (no value, a flag off) or its
    help already says it in words: a hidden default is how `--mode` once misled."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return text + " (default: %(default)s)"


def write_json(path: str | None, payload: Any) -> None:
    """Write `payload` as indented JSON to `path`, if one was given."""
    if path:
        Path(path).write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """How a command that calls a predictor service proves itself and checks the server."""
    group = parser.add_argument_group("connecting to the predictor service")
    group.add_argument("--token-file", metavar="FILE", help="file holding the bearer token to send (its first line)")
    group.add_argument(
        "--tls", action="store_true", help="connect with TLS, checking the server against the system's CAs"
    )
    group.add_argument("--tls-ca", metavar="PEM", help="connect with TLS, checking the server against this CA")
    group.add_argument(
        "--tls-cert", metavar="PEM", help="client certificate, for a server requiring them (with --tls-key)"
    )
    group.add_argument("--tls-key", metavar="PEM", help="the client certificate's private key")
    group.add_argument(
        "--tls-server-name", metavar="NAME", help="the name the server's certificate carries, if not the address's"
    )


def service_options(parser: argparse.ArgumentParser, timeout_help: str, namespace: bool = True) -> None:
    """The address, deadline and credentials of every command that calls a running service, and (with
    `namespace`) the namespace it works in."""
    from predictor.service.client import DEFAULT_TIMEOUT_SECONDS

    parser.add_argument("--address", required=True, metavar="HOST:PORT|unix:PATH", help="the predictor service")
    parser.add_argument("--timeout", type=positive_number, default=DEFAULT_TIMEOUT_SECONDS, help=timeout_help)
    if namespace:
        parser.add_argument("--namespace", default="", help="the namespace (default: the server's default one)")
    add_connection_options(parser)


def credentials_from(args: argparse.Namespace) -> Credentials:
    from predictor.service.client import Credentials

    return Credentials.from_files(
        token_file=args.token_file,
        tls=args.tls,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_server_name=args.tls_server_name,
    )


def positive_number(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, a factor)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def _whole_number_from(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be {low} or more, not {text}")
        return value

    return parse


#: argparse types: a seed or seconds (0 allowed), a count (at least 1).
non_negative_int = _whole_number_from(0)


positive_int = _whole_number_from(1)


def fraction(text: str) -> float:
    """An argparse type: a number from 0 to 1 (a share of jobs)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, not {text}")
    return value


def output_file(text: str) -> str:
    """An argparse type: a file the command may write, checked before any work (its folder exists and is
    writable; it is not a folder)."""
    path = Path(text)
    folder = path.parent
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: the folder {folder} is not writable")
    return text


#: `--trace -`: SWF lines on standard input (a scheduler's finished jobs piped to `tsched observe`).
STDIN = "-"


def load_trace(args: argparse.Namespace) -> Trace:
    """The trace to replay: `read_trace_option`'s, refused with the reasons when no job of it can be replayed."""
    return read_trace_option(args).require_jobs()


def read_trace_option(args: argparse.Namespace) -> Trace:
    """The trace `--trace` names (in `--format`, with `--lenient` and the site-log options), or the built-in one."""
    from simulator.workloads.formats import read_trace
    from simulator.workloads.synthetic import default_workload

    if args.trace is None:
        return default_workload()
    if args.trace == STDIN:
        from simulator.workloads.swf import parse_swf

        if args.format not in (None, "swf"):
            raise UsageError(f"--trace - reads SWF lines from standard input, not --format {args.format}")

        return parse_swf(sys.stdin.buffer.read(), "<stdin>", lenient=args.lenient)
    return read_trace(
        args.trace,
        args.format,
        lenient=args.lenient,
        timezone=args.timezone,
        size=args.size,
        default_request=args.default_request,
    )


def request_seconds(text: str) -> int:
    """An argparse type: a time limit as seconds or [D-]HH:MM:SS."""
    from simulator.workloads.sitelog import parse_duration

    seconds = parse_duration(text)
    if seconds is None or seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive time limit (seconds or [D-]HH:MM:SS)")
    return seconds


def format_options(parser: argparse.ArgumentParser) -> None:
    """How to read a trace file: its format, and what a site's own log (sacct, PBS) leaves open."""
    from simulator.workloads.formats import TRACE_FORMATS
    from simulator.workloads.sitelog import SIZE_UNITS

    parser.add_argument("--format", choices=TRACE_FORMATS, help="trace format (default: detected from the content)")
    parser.add_argument(
        "--lenient", action="store_true", help="skip malformed lines (counted by reason) instead of failing"
    )
    parser.add_argument(
        "--timezone", metavar="ZONE", help="sacct: the time zone of its local times, e.g. Europe/Berlin (default UTC)"
    )
    parser.add_argument("--size", choices=SIZE_UNITS, help="sacct, PBS: job size in cores (default) or nodes")
    parser.add_argument(
        "--default-request",
        type=request_seconds,
        metavar="LIMIT",
        help="sacct, PBS: t_req of jobs without a time limit (UNLIMITED, the partition's); default: skip them",
    )


def trace_options(parser: argparse.ArgumentParser) -> None:
    """`--trace` and how to read it, as every command that reads one trace takes them."""
    parser.add_argument(
        "--trace",
        metavar="PATH",
        help="SWF trace (.swf, .swf.gz), sacct --parsable2 output, or PBS accounting logs (a file or folder); "
        "- for SWF lines on standard input; default: the built-in synthetic workload",
    )
    format_options(parser)
