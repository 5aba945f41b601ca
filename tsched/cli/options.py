"""What several commands share, declared once: argparse types; the option groups to read a trace, to reach a
running service and to name the scheduler; and how those options become a trace, credentials and output.

Each group is a function (called when a command that uses it is chosen) because its choices and defaults
come from domain modules that a command not using it should not pay to import.
"""

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
from tsched.cli.spec import STDOUT, Group, Option

if TYPE_CHECKING:
    from predictor.service.client import Credentials
    from simulator.workloads.trace import Trace

#: `--trace -`: SWF lines on standard input (a scheduler's finished jobs piped to `tsched observe`).
STDIN = "-"


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


def memory_size(text: str) -> int:
    """An argparse type: a memory size in Slurm's syntax (`8G`, `4000M`, `1.5G`; no unit: MB), as MB."""
    from simulator.workloads.tres import memory_mb

    try:
        return memory_mb(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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


def json_target(text: str) -> str:
    """An argparse type: `-` (standard output) or a file the command may write."""
    return text if text == STDOUT else output_file(text)


def time_limit(text: str) -> int:
    """An argparse type: a job's time limit in Slurm's syntax (a bare number is minutes), as seconds.

    UNLIMITED is refused: a limit given here stands for one a job had, and a
    prediction needs a bound to scale.
    """
    from kernel.durations import SLURM_DURATION_HELP, slurm_duration

    try:
        seconds = slurm_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if seconds is None:
        raise argparse.ArgumentTypeError(f"{text}: give a bounded limit (e.g. the partition's MaxTime)")
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive time limit ({SLURM_DURATION_HELP})")
    return seconds


#: How a limit option says what it takes.
LIMIT_METAVAR = "LIMIT"


def json_option(what: str) -> Option:
    """`--json OUT`, the one meaning of `--json` in every command: write `what` as JSON to OUT; `-` prints it
    on standard output in place of the text."""
    return Option("--json", f"write {what} as JSON to OUT; -: print it instead of the text", json_target, kind="json")


def show(target: str | None, payload: Any, text: Callable[[], str]) -> None:
    """Print `text()`, or with `--json -` the JSON in its place; with `--json OUT`, write the JSON there too."""
    if target == STDOUT:
        print(json.dumps(payload, indent=2))
        return
    print(text())
    if target:
        Path(target).write_text(json.dumps(payload, indent=2) + "\n")


def machine_procs_option(without: str = "", default: int | None = None) -> Option:
    """The machine's size (`--machine-procs`; a job's size is `--procs`): its `default`, or in words what a
    command takes `without` it."""
    shown = f" (default: {without})" if without else ""
    return Option(
        "--machine-procs", f"the machine's size in processors{shown}", positive_int, default, "N", old=("--procs",)
    )


def max_dropped_share_option() -> Option:
    """`--max-dropped-share`: how many jobs larger than the machine a run may drop (`--max-fallback-share`'s
    twin)."""
    from simulator.experiment import DEFAULT_MAX_DROPPED_SHARE

    return Option(
        "--max-dropped-share",
        "fail if more than this share of the jobs are larger than the machine (a simulation drops them, counted "
        'as "larger than machine"); 1 runs anyway',
        fraction,
        DEFAULT_MAX_DROPPED_SHARE,
        "S",
    )


def machine_procs(trace: Trace, args: argparse.Namespace) -> int:
    """The machine's size for `trace` (`--machine-procs`, else its header's), with a warning line on standard error
    when it is only a guess from the log."""
    size = trace.machine_size(args.machine_procs)
    warning = size.warning(trace.path)
    if warning:
        print(f"tsched: warning: {warning}", file=sys.stderr)
    return size.procs


def format_options() -> tuple[Option, ...]:
    """How to read a trace file: its format, and what a site's own log (sacct, PBS) leaves open."""
    from simulator.workloads.formats import TRACE_FORMATS
    from simulator.workloads.sitelog import SIZE_UNITS

    return (
        Option("--format", "trace format (default: detected from the content)", choices=TRACE_FORMATS),
        Option("--lenient", "skip malformed lines (counted by reason) instead of failing", kind="flag"),
        Option(
            "--timezone", "sacct: the time zone of its local times, e.g. Europe/Berlin (default UTC)", metavar="ZONE"
        ),
        Option(
            "--size-unit",
            "sacct, PBS: what a job's size counts, cores or nodes (default: cores)",
            choices=SIZE_UNITS,
            old=("--size",),
        ),
        Option(
            "--default-request",
            "sacct, PBS: t_req of jobs without a time limit (UNLIMITED, the partition's), in Slurm's syntax "
            "(MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]; 1440 is a day); default: skip them",
            time_limit,
            metavar=LIMIT_METAVAR,
        ),
    )


TRACE_HELP = "SWF trace (.swf, .swf.gz), sacct --parsable2 output, or PBS accounting logs (a file or folder)"


def trace_group() -> Group:
    """`--trace` and how to read it, as every command that reads one trace takes them."""
    trace = Option(
        "--trace",
        f"{TRACE_HELP}; - for SWF lines on standard input; default: the built-in synthetic workload",
        metavar="PATH",
    )
    return Group("the trace", (trace, *format_options()))


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
    return read_trace(args.trace, args.format, **site_log_options(args))


def site_log_options(args: argparse.Namespace) -> dict[str, Any]:
    """`read_trace`'s keywords from the format options."""
    return {
        "lenient": args.lenient,
        "timezone": args.timezone,
        "size": args.size_unit,
        "default_request": args.default_request,
    }


#: The namespace of the commands that report a cluster's finished jobs.
CLUSTER_NAMESPACE_HELP = "the cluster's namespace (default: the server's default)"


def service_group(
    timeout_help: str = "seconds to wait for the answer",
    timeout: float | None = None,
    *,
    required: bool = True,
    namespace_help: str | None = "the namespace (default: the server's default one)",
    namespace_default: str | None = "",
    old_prefix: str | None = None,
) -> Group:
    """How every command that talks to a running service reaches it: its address, the namespace to work in
    (without `namespace_help`, none), the deadline, and the credentials. `old_prefix`: the spellings these
    replaced (`--predictor-address`, ...)."""
    from predictor.service.client import DEFAULT_TIMEOUT_SECONDS

    def old(name: str) -> tuple[str, ...]:
        return () if old_prefix is None else (f"{old_prefix}{name}",)

    address = Option(
        "--address",
        "the predictor service" + ("" if required else " to get predictions from (default: predict in-process)"),
        metavar="HOST:PORT|unix:PATH",
        required=required,
        old=old("address"),
    )
    namespace = Option(
        "--namespace", namespace_help or "", default=namespace_default, metavar="NS", old=old("namespace")
    )
    deadline = Option(
        "--timeout",
        timeout_help,
        positive_number,
        DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout,
        "SECONDS",
        old=old("timeout"),
    )
    chosen = (address, namespace, deadline) if namespace_help else (address, deadline)
    return Group("reaching the predictor service", (*chosen, *credential_options()))


def credential_options() -> tuple[Option, ...]:
    """How a client proves itself and checks the server."""
    return (
        Option("--token-file", "file holding the bearer token to send (its first line)", metavar="FILE"),
        Option("--tls", "connect with TLS, checking the server against the system's CAs", kind="flag"),
        Option("--tls-ca", "connect with TLS, checking the server against this CA", metavar="PEM"),
        Option("--tls-cert", "client certificate, for a server requiring them (with --tls-key)", metavar="PEM"),
        Option("--tls-key", "the client certificate's private key", metavar="PEM"),
        Option("--tls-server-name", "the name the server's certificate carries, if not the address's", metavar="NAME"),
    )


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


def scheduler_group(policy: Option, *more: Option, on_nodes: str = "") -> Group:
    """The scheduler a command simulates or forecasts for: its queue `policy` (a SPEC, or one of the plain
    policies), backfilling and backfill order, and `more` (how it uses predictions). `on_nodes`, where given,
    is one more backfilling, and what it does: a forecast's `slurm`, on the server's cluster."""
    from predictor.forecasting import ON_NODES, Scheduler
    from simulator.backfill import BACKFILL_ORDERS, BACKFILLS

    backfill = Option(
        "--backfill",
        "backfilling (replan: conservative with the whole plan rebuilt in the policy's order at every job end, "
        f"as Streit's CCS{on_nodes and '; ' + on_nodes})",
        default=None if on_nodes else Scheduler.backfill,
        choices=(*BACKFILLS, ON_NODES) if on_nodes else BACKFILLS,
    )
    order = Option(
        "--backfill-order",
        "the order backfill candidates are tried in: the queue's, or shortest estimate first (EASY-SJBF)",
        default=Scheduler.backfill_order,
        choices=BACKFILL_ORDERS,
    )
    return Group("the scheduler", (policy, backfill, order, *more))


def plain_policy_option() -> Option:
    """`--policy` where only the plain queue policies run (no dynP)."""
    from predictor.forecasting import Scheduler
    from simulator.policies import POLICIES

    return Option("--policy", "queue policy", default=Scheduler.policy, choices=POLICIES)
