"""The `tsched` command line: thin wrappers that parse arguments and print results.

This is the one entry point: the simulator's commands (`simulate`, `trace`,
`evaluate`) live here, the predictor's (`serve`, `predict`, `predict-eval`,
`train`) in `predictor.cli`, mounted below. Every command that reads a trace
uses the built-in synthetic workload when `--trace` is omitted, so a new user
can run everything with no data. Errors a user can fix (`predictor.errors.
TschedError`: a malformed trace, a bad SPEC, a refused request) and file-system
errors are printed as one line with exit status 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from predictor import cli as predictor_cli
from predictor.cli import write_json
from predictor.errors import TschedError
from simulator.backfill import BACKFILLS
from simulator.engine import SimulationConfig
from simulator.machine import CORRECTIONS, MODES
from simulator.policies import POLICIES
from simulator.traces.swf import Trace

EXIT_USER_ERROR = 2
EXIT_TASK_FAILED = 1
_DEFAULTS = SimulationConfig(procs=1)


def load_trace(args: argparse.Namespace) -> Trace:
    """The trace `--trace` names (read with `--lenient` if given), or the built-in synthetic workload."""
    from simulator.traces.swf import read_swf
    from simulator.traces.workload import default_workload

    return default_workload() if args.trace is None else read_swf(args.trace, lenient=args.lenient)


def _format_summary(summary: dict[str, Any]) -> str:
    """A readable block for `tsched simulate`."""
    skipped = ", ".join(f"{k} {v}" for k, v in summary["skipped"].items())
    lines = [
        f"trace      {summary['trace']}" + (f"  month {summary['month']}" if summary["month"] else ""),
        f"scheduler  {summary['policy']} + {summary['backfill']} backfilling, {summary['procs']} processors, "
        f"mode {summary['mode']} (correction {summary['correction']}), estimator {summary['estimator']}",
        f"jobs       {summary['jobs']}" + (f"  (skipped: {skipped})" if skipped else ""),
        f"wait       {summary['avg_wait']:.0f} s average   weighted wait {summary['weighted_wait']:.0f} s",
        f"response   {summary['avg_response']:.0f} s average",
        f"slowdown   {summary['avg_slowdown']:.2f} average   bounded {summary['avg_bounded_slowdown']:.2f}",
        f"machine    utilization {summary['utilization']:.3f}   makespan {summary['makespan'] / 86400:.1f} days",
    ]
    p = summary["prediction"]
    lines.append(
        f"estimates  accuracy mean {p['accuracy_mean']:.3f} median {p['accuracy_median']:.3f}, "
        f"underestimated {p['underestimated']:.1%} (NA {p['NA']:.1%} OE {p['OE']:.1%} "
        f"UE {p['UE']:.1%} BE {p['BE']:.1%})"
    )
    if summary["predictor_fallbacks"]:
        lines.append(f"predictor  {summary['predictor_fallbacks']} job(s) got t_req: the service did not answer")
    return "\n".join(lines)


def cmd_simulate(args: argparse.Namespace) -> int:
    from simulator.experiment import run_simulation

    trace = load_trace(args)
    config = SimulationConfig(trace.machine_procs(args.procs), args.policy, args.backfill, args.mode, args.correction)
    credentials = predictor_cli.credentials_from(args) if args.predictor_address else None
    summary, result = run_simulation(
        trace,
        config,
        args.estimator,
        args.month,
        args.predictor_address,
        args.predictor_namespace,
        credentials=credentials,
    )
    print(_format_summary(summary))
    write_json(args.json, summary)
    if args.jobs_csv:
        result.jobs.to_csv(args.jobs_csv, index=False)
    return 0


def cmd_trace_info(args: argparse.Namespace) -> int:
    from simulator.traces.swf import format_trace_info, trace_info

    info = trace_info(load_trace(args))
    print(format_trace_info(info))
    write_json(args.json, info)
    return 0


def cmd_trace_generate(args: argparse.Namespace) -> int:
    from simulator.traces.swf import write_swf
    from simulator.traces.workload import generate_workload, offered_load

    trace = generate_workload(jobs=args.jobs, procs=args.procs, load=args.load, seed=args.seed)
    write_swf(trace, args.out)
    jobs = trace.jobs
    load = offered_load(jobs["submit"], jobs["procs"], jobs["t_act"], args.procs)
    print(f"wrote {args.out}: {len(jobs)} jobs on {args.procs} processors, offered load {load:.3f}, seed {args.seed}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from simulator.evaluation import plan as ev
    from simulator.evaluation.execution import run_evaluation

    plan = ev.EvaluationPlan(
        estimators=tuple(ev.split_specs(args.estimators)) if args.estimators else ev.DEFAULT_ESTIMATORS,
        policies=ev.split_choices(args.policies, POLICIES, "--policies"),
        backfills=ev.split_choices(args.backfill, BACKFILLS, "--backfill"),
        modes=ev.split_choices(args.modes, ev.PREDICTION_MODES, "--modes"),
        monthly=args.monthly,
        procs=args.procs,
    )
    plan.check()  # a bad SPEC or choice fails before any trace is read
    traces = [ev.load_trace_input(path) for path in args.trace] if args.trace else [ev.builtin_trace_input()]
    backend = ev.Backend(args.workers, args.dask_scheduler, args.in_process)
    try:
        print(run_evaluation(traces, plan, Path(args.out), backend).summary())
    except ev.TaskError as error:
        print(f"tsched: error: {error}", file=sys.stderr)
        return EXIT_TASK_FAILED
    return 0


def trace_options(parser: argparse.ArgumentParser) -> None:
    """`--trace` and `--lenient`, as every command that reads one trace takes them."""
    parser.add_argument("--trace", help="SWF trace (.swf or .swf.gz); default: the built-in synthetic workload")
    parser.add_argument(
        "--lenient", action="store_true", help="skip malformed lines (counted by reason) instead of failing"
    )


def build_parser() -> argparse.ArgumentParser:
    from simulator.evaluation import plan as ev
    from simulator.traces import workload

    formatter = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(prog="tsched", description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sim = commands.add_parser(
        "simulate", help="replay a trace through a simulated scheduler", formatter_class=formatter
    )
    trace_options(sim)
    sim.add_argument("--procs", type=int, help="machine size (default: the trace header's MaxProcs)")
    sim.add_argument("--policy", choices=POLICIES, default=_DEFAULTS.policy, help="queue policy")
    sim.add_argument("--backfill", choices=BACKFILLS, default=_DEFAULTS.backfill, help="backfilling")
    sim.add_argument("--estimator", default=ev.BASELINE_ESTIMATOR, metavar="SPEC", help="NAME or NAME:key=value,...")
    sim.add_argument("--mode", choices=MODES, default=_DEFAULTS.mode, help="where the scheduler uses t_sched")
    sim.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default=_DEFAULTS.correction,
        help="regular mode: what a running job past its prediction is expected to run",
    )
    sim.add_argument("--month", metavar="YYYY-MM", help="simulate one calendar month, warmed up with earlier jobs")
    sim.add_argument("--json", metavar="OUT", help="write the summary as JSON")
    sim.add_argument("--jobs-csv", metavar="OUT", help="write one row per job as CSV")
    sim.add_argument("--predictor-address", metavar="HOST:PORT|unix:PATH", help="get predictions from a tsched service")
    sim.add_argument("--predictor-namespace", metavar="NS", help="service namespace (default: a fresh one)")
    predictor_cli.add_connection_options(sim)
    sim.set_defaults(handler=cmd_simulate)

    trace = commands.add_parser("trace", help="inspect or generate SWF traces")
    trace_commands = trace.add_subparsers(dest="trace_command", required=True, metavar="SUBCOMMAND")
    info = trace_commands.add_parser(
        "info", help="size, span, users, skipped jobs and request accuracy", formatter_class=formatter
    )
    info.add_argument("trace", nargs="?", metavar="PATH", help="SWF trace; default: the built-in synthetic workload")
    info.add_argument("--lenient", action="store_true", help="skip malformed lines (counted by reason)")
    info.add_argument("--json", metavar="OUT", help="write the summary as JSON")
    info.set_defaults(handler=cmd_trace_info)
    gen = trace_commands.add_parser("generate", help="write a synthetic workload as SWF", formatter_class=formatter)
    gen.add_argument("--jobs", type=int, default=workload.DEFAULT_JOBS, help="number of jobs")
    gen.add_argument("--procs", type=int, default=workload.DEFAULT_PROCS, help="machine size")
    gen.add_argument("--load", type=float, default=workload.DEFAULT_LOAD, help="target offered load")
    gen.add_argument("--seed", type=int, default=workload.DEFAULT_SEED, help="random seed")
    gen.add_argument("--out", required=True, metavar="FILE.swf", help="where to write (.gz: compressed)")
    gen.set_defaults(handler=cmd_trace_generate)

    evl = commands.add_parser(
        "evaluate",
        help="head-to-head evaluation of estimators x policies x modes, with a report",
        formatter_class=formatter,
    )
    evl.add_argument(
        "--trace",
        action="append",
        metavar="PATH",
        help="SWF trace; repeat for several (default: the built-in synthetic workload)",
    )
    evl.add_argument("--procs", type=int, help="machine size (default: each trace header's MaxProcs)")
    evl.add_argument(
        "--estimators",
        action="append",
        metavar="SPEC,...",
        help=f"comma-separated estimator SPECs; repeatable (default: {','.join(ev.DEFAULT_ESTIMATORS)})",
    )
    evl.add_argument(
        "--policies", default=",".join(ev.DEFAULT_POLICIES), metavar="P,...", help=f"from {', '.join(POLICIES)}"
    )
    evl.add_argument(
        "--backfill", default=",".join(ev.DEFAULT_BACKFILLS), metavar="B,...", help=f"from {', '.join(BACKFILLS)}"
    )
    evl.add_argument(
        "--modes",
        default=",".join(ev.DEFAULT_MODES),
        metavar="M,...",
        help="from regular, selective (the baseline, request in mode none, always runs)",
    )
    evl.add_argument("--monthly", action="store_true", help="Tang et al.'s protocol: each calendar month on its own")
    evl.add_argument("--out", default=ev.DEFAULT_REPORT_FOLDER, metavar="DIR", help="report folder")
    evl.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="joblib worker processes (default: one per CPU)"
    )
    evl.add_argument("--dask-scheduler", metavar="ADDRESS", help="run the tasks on this Dask cluster instead")
    evl.add_argument("--in-process", action="store_true", help="predict in-process instead of through the service")
    evl.set_defaults(handler=cmd_evaluate)

    predictor_cli.add_commands(commands, load_trace, trace_options)
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


if __name__ == "__main__":
    sys.exit(main())
