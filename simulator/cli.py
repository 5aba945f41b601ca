"""The `tsched` command line: thin wrappers that parse arguments and print results.

Every command that reads a trace uses the built-in synthetic workload when
`--trace` is omitted, so a new user can run everything with no data. Errors a
user can fix (a malformed trace, a bad estimator SPEC, a refused request) are
printed as one line naming what is wrong, with exit status 2.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simulator.backfill import BACKFILLS
from simulator.machine import CORRECTIONS, MODES
from simulator.policies import POLICIES


class UsageError(Exception):
    """A problem with what the user asked for; printed without a traceback."""


def load_trace(path: str | None, lenient: bool = False):
    """The trace at `path`, or the built-in synthetic workload."""
    from simulator.swf import read_swf
    from simulator.workload import default_workload

    return default_workload() if path is None else read_swf(path, lenient=lenient)


def _write_json(path: str | None, payload: Any) -> None:
    if path:
        Path(path).write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def _format_summary(summary: dict[str, Any]) -> str:
    """A readable block for `tsched simulate`."""
    lines = [
        f"trace      {summary['trace']}" + (f"  month {summary['month']}" if summary["month"] else ""),
        f"scheduler  {summary['policy']} + {summary['backfill']} backfilling, {summary['procs']} processors, "
        f"mode {summary['mode']} (correction {summary['correction']}), estimator {summary['estimator']}",
        f"jobs       {summary['jobs']}" + (f"  (skipped: {', '.join(f'{k} {v}' for k, v in summary['skipped'].items())})"
                                          if summary["skipped"] else ""),
        f"wait       {summary['avg_wait']:.0f} s average   weighted wait {summary['weighted_wait']:.0f} s",
        f"response   {summary['avg_response']:.0f} s average",
        f"slowdown   {summary['avg_slowdown']:.2f} average   bounded {summary['avg_bounded_slowdown']:.2f}",
        f"machine    utilization {summary['utilization']:.3f}   makespan {summary['makespan'] / 86400:.1f} days",
    ]
    p = summary["prediction"]
    lines.append(f"estimates  accuracy mean {p['accuracy_mean']:.3f} median {p['accuracy_median']:.3f}, "
                 f"underestimated {p['underestimated']:.1%} (NA {p['NA']:.1%} OE {p['OE']:.1%} "
                 f"UE {p['UE']:.1%} BE {p['BE']:.1%})")
    if summary["predictor_fallbacks"]:
        lines.append(f"predictor  {summary['predictor_fallbacks']} job(s) got t_req: the service did not answer")
    return "\n".join(lines)


def cmd_simulate(args: argparse.Namespace) -> int:
    from simulator.engine import SimulationConfig
    from simulator.experiment import run_simulation

    trace = load_trace(args.trace, args.lenient)
    config = SimulationConfig(trace.machine_procs(args.procs), args.policy, args.backfill, args.mode, args.correction)
    summary, result = run_simulation(trace, config, args.estimator, args.month,
                                     args.predictor_address, args.predictor_namespace)
    print(_format_summary(summary))
    _write_json(args.json, summary)
    if args.jobs_csv:
        result.jobs.to_csv(args.jobs_csv, index=False)
    return 0


def cmd_trace_info(args: argparse.Namespace) -> int:
    from simulator.swf import format_trace_info, trace_info

    info = trace_info(load_trace(args.path, args.lenient))
    print(format_trace_info(info))
    _write_json(args.json, info)
    return 0


def cmd_trace_generate(args: argparse.Namespace) -> int:
    from simulator.swf import write_swf
    from simulator.workload import generate_workload, offered_load

    trace = generate_workload(jobs=args.jobs, procs=args.procs, load=args.load, seed=args.seed)
    write_swf(trace, args.out)
    jobs = trace.jobs
    load = offered_load(jobs["submit"], jobs["procs"], jobs["t_act"], args.procs)
    print(f"wrote {args.out}: {len(jobs)} jobs on {args.procs} processors, offered load {load:.3f}, seed {args.seed}")
    return 0


def cmd_predict_eval(args: argparse.Namespace) -> int:
    from predictor.offline import evaluate, percentile_grid

    trace = load_trace(args.trace, args.lenient)
    if args.grid:
        table = percentile_grid(trace.jobs, trace.path)
        print(table.to_string(index=False))
        if args.csv:
            table.to_csv(args.csv, index=False)
        return 0
    report = evaluate(trace.jobs, args.estimator or ["request", "percentile"], trace.path)
    header = f"{'estimator':<48} {'acc mean':>8} {'acc med':>8} {'under':>7} {'BE':>7} {'lambda':>7} {'us/pred':>8}"
    print(f"{report['trace']}: {report['jobs']} jobs")
    print(header)
    for row in report["results"]:
        print(f"{row['estimator']:<48} {row['accuracy_mean']:>8.3f} {row['accuracy_median']:>8.3f} "
              f"{row['underestimated']:>7.1%} {row['BE']:>7.1%} {_num(row['lambda']):>7} {row['us_per_prediction']:>8.1f}")
    _write_json(args.json, report)
    if args.csv:
        import pandas as pd

        pd.DataFrame(report["results"]).to_csv(args.csv, index=False)
    return 0


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def cmd_serve(args: argparse.Namespace) -> int:
    from predictor.service import serve
    from predictor.training import estimator_factory

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(listen=args.listen, state=args.state, default_estimators=args.estimator or None,
          models_dir=args.models, allow_oracle=args.allow_oracle, load_models=estimator_factory)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from predictor.training import file_sha256, parse_until, train

    trace = load_trace(args.trace, args.lenient)
    epoch = trace.header.unix_start_time or 0
    until = None if args.until is None else parse_until(args.until, epoch)
    manifest = train(trace, args.out, args.estimator, until, epoch,
                     file_sha256(args.trace) if args.trace else None)
    training = manifest["training"]
    print(f"trained {manifest['estimator']} on {training['jobs']} jobs that finished "
          f"{training['first_end_utc']} .. {training['until_utc']}; wrote {args.out}")
    print("held out: " + json.dumps(manifest["held_out"]))
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from predictor.client import predict_once

    answer = predict_once(args.address, args.namespace, args.estimator or "", args.user, args.group,
                          args.request, args.procs, args.submit, args.timeout)
    if args.json:
        print(json.dumps(answer))
    else:
        factor = "-" if answer["factor"] is None else f"{answer['factor']:.4f}"
        print(f"t_sched {answer['t_sched']}  factor {factor}  estimator {answer['estimator']}  "
              f"basis {answer['basis']}  fallback {str(answer['fallback']).lower()}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from simulator import evaluation as ev

    plan = ev.EvaluationPlan(
        estimators=tuple(ev.split_specs(args.estimators)) if args.estimators else ev.DEFAULT_ESTIMATORS,
        policies=ev.split_choices(args.policies, POLICIES, "--policies"),
        backfills=ev.split_choices(args.backfill, BACKFILLS, "--backfill"),
        modes=ev.split_choices(args.modes, ev.PREDICTION_MODES, "--modes"),
        monthly=args.monthly, procs=args.procs)
    plan.check()  # a bad SPEC or choice fails before any trace is read
    traces = [ev.load_trace_input(path) for path in args.trace] if args.trace else [ev.builtin_trace_input()]
    backend = ev.Backend(args.workers, args.dask_scheduler, args.in_process)
    try:
        print(ev.run_evaluation(traces, plan, Path(args.out), backend).summary())
    except ev.TaskError as error:
        print(f"tsched: error: {error}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tsched", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def trace_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--trace", help="SWF trace (.swf or .swf.gz); default: the built-in synthetic workload")
        p.add_argument("--lenient", action="store_true", help="skip malformed lines (counted by reason) instead of failing")

    sim = commands.add_parser("simulate", help="replay a trace through a simulated scheduler")
    trace_options(sim)
    sim.add_argument("--procs", type=int, help="machine size (default: the trace header's MaxProcs)")
    sim.add_argument("--policy", choices=POLICIES, default="fcfs")
    sim.add_argument("--backfill", choices=BACKFILLS, default="easy")
    sim.add_argument("--estimator", default="request", metavar="SPEC", help="NAME or NAME:key=value,...")
    sim.add_argument("--mode", choices=MODES, default="none")
    sim.add_argument("--correction", choices=CORRECTIONS, default="request")
    sim.add_argument("--month", metavar="YYYY-MM", help="simulate one calendar month, warmed up with earlier jobs")
    sim.add_argument("--json", metavar="OUT", help="write the summary as JSON")
    sim.add_argument("--jobs-csv", metavar="OUT", help="write one row per job as CSV")
    sim.add_argument("--predictor-address", metavar="HOST:PORT", help="get predictions from a tsched service")
    sim.add_argument("--predictor-namespace", metavar="NS", help="service namespace (default: a fresh one)")
    sim.set_defaults(handler=cmd_simulate)

    trace = commands.add_parser("trace", help="inspect or generate SWF traces")
    trace_commands = trace.add_subparsers(dest="trace_command", required=True, metavar="SUBCOMMAND")
    info = trace_commands.add_parser("info", help="size, span, users, skipped jobs and request accuracy")
    info.add_argument("path", nargs="?", help="SWF trace; default: the built-in synthetic workload")
    info.add_argument("--lenient", action="store_true")
    info.add_argument("--json", metavar="OUT")
    info.set_defaults(handler=cmd_trace_info)
    gen = trace_commands.add_parser("generate", help="write a synthetic workload as SWF")
    gen.add_argument("--jobs", type=int, default=13000)
    gen.add_argument("--procs", type=int, default=256)
    gen.add_argument("--load", type=float, default=0.75, help="target offered load")
    gen.add_argument("--seed", type=int, default=2)
    gen.add_argument("--out", required=True, metavar="FILE.swf")
    gen.set_defaults(handler=cmd_trace_generate)

    ev = commands.add_parser("predict-eval", help="score estimators offline on a trace, in submission order")
    trace_options(ev)
    ev.add_argument("--estimator", action="append", metavar="SPEC", help="repeat for several (default: request, percentile)")
    ev.add_argument("--grid", action="store_true", help="sweep the percentile adjuster over keys x windows x q")
    ev.add_argument("--json", metavar="OUT")
    ev.add_argument("--csv", metavar="OUT")
    ev.set_defaults(handler=cmd_predict_eval)

    evl = commands.add_parser("evaluate", help="head-to-head evaluation of estimators x policies x modes, with a report")
    evl.add_argument("--trace", action="append", metavar="PATH", help="SWF trace; repeat for several "
                     "(default: the built-in synthetic workload)")
    evl.add_argument("--procs", type=int, help="machine size (default: each trace header's MaxProcs)")
    evl.add_argument("--estimators", action="append", metavar="SPEC,...",
                     help="comma-separated estimator SPECs; repeatable (default: request, Tang's three "
                     "percentile schemes and every other real-time estimator)")
    evl.add_argument("--policies", default="wfp,fcfs", metavar="P,...", help=f"from {', '.join(POLICIES)}")
    evl.add_argument("--backfill", default="easy", metavar="B,...", help=f"from {', '.join(BACKFILLS)}")
    evl.add_argument("--modes", default="regular,selective", metavar="M,...", help="from regular, selective "
                     "(the baseline, request in mode none, always runs)")
    evl.add_argument("--monthly", action="store_true", help="Tang et al.'s protocol: each calendar month on its own")
    evl.add_argument("--out", default="tsched-report", metavar="DIR", help="report folder (default: ./tsched-report)")
    evl.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="joblib worker processes "
                     "(default: one per CPU)")
    evl.add_argument("--dask-scheduler", metavar="ADDRESS", help="run the tasks on this Dask cluster instead")
    evl.add_argument("--in-process", action="store_true", help="predict in-process instead of through the service")
    evl.set_defaults(handler=cmd_evaluate)

    srv = commands.add_parser("serve", help="run the gRPC predictor service")
    srv.add_argument("--listen", default="127.0.0.1:50051", metavar="HOST:PORT")
    srv.add_argument("--state", metavar="FILE", help="SQLite file that makes acknowledged completions durable")
    srv.add_argument("--estimator", action="append", metavar="SPEC", help="default estimator(s); the first answers requests naming none")
    srv.add_argument("--models", metavar="DIR", help="folder of trained models to serve by name")
    srv.add_argument("--allow-oracle", action="store_true", help="serve the evaluation-only oracle (needs actual runtimes)")
    srv.set_defaults(handler=cmd_serve)

    tr = commands.add_parser("train", help="train an lgbm-quantile model and write it with its manifest")
    trace_options(tr)
    tr.add_argument("--estimator", default="lgbm-quantile", metavar="SPEC")
    tr.add_argument("--until", metavar="DATE", help="train on the window before this UTC date (default: 30 days before the end)")
    tr.add_argument("--out", required=True, metavar="models/NAME")
    tr.set_defaults(handler=cmd_train)

    pr = commands.add_parser("predict", help="ask a running service for one job's t_sched")
    pr.add_argument("--address", required=True, metavar="HOST:PORT")
    pr.add_argument("--namespace", default="")
    pr.add_argument("--estimator", metavar="SPEC")
    pr.add_argument("--user", type=int, required=True)
    pr.add_argument("--group", type=int, required=True)
    pr.add_argument("--request", type=int, required=True, metavar="SECONDS")
    pr.add_argument("--procs", type=int, required=True)
    pr.add_argument("--submit", type=int, help="submit time (default: the namespace's clock)")
    pr.add_argument("--timeout", type=float, default=5.0)
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(handler=cmd_predict)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that carry a message for the user rather than a bug."""
    from predictor.registry import SpecError
    from simulator.swf import TraceError

    errors: list[type[BaseException]] = [UsageError, SpecError, TraceError, ValueError, OSError]
    try:
        from predictor.client import PredictorError

        errors.append(PredictorError)
    except ImportError:  # grpc missing: the service commands cannot run anyway
        pass
    return tuple(errors)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except _user_errors() as error:
        print(f"tsched: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
