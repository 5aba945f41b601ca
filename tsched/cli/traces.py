"""`tsched trace info|convert|generate`: look at a trace, write one (sacct output, PBS logs) as SWF with its names
beside it, or write a synthetic workload."""

from __future__ import annotations

import argparse

from tsched.cli.options import (
    format_options,
    json_option,
    machine_procs_option,
    output_file,
    positive_int,
    read_trace_option,
    show,
)
from tsched.cli.spec import Command, Option, Table


def cmd_trace_info(args: argparse.Namespace) -> int:
    from simulator.workloads.info import format_trace_info, trace_info

    info = trace_info(read_trace_option(args))  # also a trace nothing of which can be replayed
    show(args.json, info, lambda: format_trace_info(info))
    return 0


def cmd_trace_generate(args: argparse.Namespace) -> int:
    from simulator.workloads.swf import write_swf
    from simulator.workloads.synthetic import generate_workload, offered_load

    procs = args.machine_procs
    trace = generate_workload(jobs=args.jobs, procs=procs, load=args.load, seed=args.seed)
    write_swf(trace, args.out)
    jobs = trace.jobs
    load = offered_load(jobs["submit"], jobs["procs"], jobs["t_act"], procs)
    print(f"wrote {args.out}: {len(jobs)} jobs on {procs} processors, offered load {load:.3f}, seed {args.seed}")
    return 0


def cmd_trace_convert(args: argparse.Namespace) -> int:
    from simulator.workloads.formats import convert_trace

    trace = read_trace_option(args)  # every record is converted, replayable or not
    names = convert_trace(trace, args.out, args.machine_procs)
    skipped = ", ".join(f"{count} {reason}" for reason, count in sorted(trace.skipped.items())) or "none"
    print(f"wrote {args.out}: {len(trace.records)} records ({len(trace.jobs)} replayable; skipped: {skipped})")
    if names is not None:
        print(f"wrote {names}: the names behind the user, group, queue, ... ids")
    return 0


def info_table() -> Table:
    trace = Option("trace", "trace (any format); default: the built-in synthetic workload", metavar="PATH", nargs="?")
    return (trace, *format_options(), json_option("the summary"))


def convert_table() -> Table:
    return (
        Option("trace", "the trace to convert: a file, or a folder of PBS logs", metavar="IN"),
        *format_options(),
        Option("--out", "where to write (.gz: compressed)", output_file, metavar="OUT.swf", required=True),
        machine_procs_option("the trace's, e.g. its peak use"),
    )


def generate_table() -> Table:
    from simulator.workloads import synthetic

    return (
        Option("--jobs", "number of jobs", positive_int, synthetic.DEFAULT_JOBS),
        machine_procs_option(default=synthetic.DEFAULT_PROCS),
        Option("--load", "target offered load", float, synthetic.DEFAULT_LOAD),
        Option("--seed", "random seed", int, synthetic.DEFAULT_SEED),
        Option("--out", "where to write (.gz: compressed)", output_file, metavar="FILE.swf", required=True),
    )


COMMANDS = (
    Command(
        "trace",
        "inspect, convert or generate traces",
        subcommands=(
            Command("info", "size, span, users, skipped jobs and request accuracy", cmd_trace_info, info_table),
            Command(
                "convert",
                "write a trace (sacct output, PBS logs, SWF) as SWF, with its names beside it",
                cmd_trace_convert,
                convert_table,
            ),
            Command("generate", "write a synthetic workload as SWF", cmd_trace_generate, generate_table),
        ),
    ),
)
