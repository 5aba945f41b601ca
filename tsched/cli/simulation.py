"""The `tsched` command line: thin wrappers that parse arguments and print results.

This is the one entry point: the simulator's commands (`simulate`, `trace`,
`evaluate`) live here, the predictor's (`serve`, `predict`, `predict-eval`,
`train`) in `tsched.cli.service`, mounted below. Every command that reads a trace
uses the built-in synthetic workload when `--trace` is omitted, so a new user
can run everything with no data. Errors a user can fix (`kernel.errors.
TschedError`: a malformed trace, a bad SPEC, a refused request) and file-system
errors are printed as one line with exit status 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from simulator.backfill import BACKFILL_ORDERS, BACKFILLS
from simulator.dynp import DYNAMIC, canonical_policy
from simulator.engine import SimulationConfig
from simulator.evaluation import plan as ev
from simulator.experiment import DEFAULT_MAX_FALLBACK_SHARE
from simulator.machine import CORRECTIONS, MODES
from simulator.policies import POLICIES
from simulator.waiteval import PROTOCOLS
from simulator.workloads.replicates import DEFAULT_JITTER_SECONDS
from tsched.cli.options import (
    HelpFormatter,
    add_connection_options,
    credentials_from,
    format_options,
    fraction,
    load_trace,
    non_negative_int,
    output_file,
    positive_int,
    positive_number,
    read_trace_option,
    trace_options,
    write_json,
)

#: How --policy and --policies describe a policy SPEC.
POLICY_HELP = (
    f"{', '.join(POLICIES)}, or {DYNAMIC}[:key=value,...]: Streit's dynP, variant=self-tuning "
    "(decider=simple|advanced, quality=art|artww|sldwa|makespan; default advanced, artww) or variant=basic "
    "(lower, upper: seconds, default 7200, 9000)"
)
#: What `wait-eval` compares without --forecaster: Downey's combined predictor, the forecast `squeue --start`
#: gives, and the forward simulation with a point estimate of runtimes (docs/queue-time.md: the mean of the
#: user's last two runtimes forecast best on SDSC-Par-1996 and within 0.05 of the LightGBM median model on
#: CTC-SP2, at a fraction of its cost).
DEFAULT_FORECASTERS = ("downey", "forward:estimator=request", "forward:estimator=last2")
EXIT_USER_ERROR = 2
EXIT_TASK_FAILED = 1
_DEFAULTS = SimulationConfig(procs=1)


def policy_spec(text: str) -> str:
    """An argparse type: a policy SPEC, checked and spelled out in full."""
    try:
        return canonical_policy(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def default_mode(estimator: str) -> str:
    """An estimator without --mode is used where the product uses it (waiting jobs: selective); the users'
    requests need no mode."""
    return "none" if estimator == ev.BASELINE_ESTIMATOR else "selective"


def cmd_simulate(args: argparse.Namespace) -> int:
    from simulator.experiment import run_simulation

    trace = load_trace(args)
    procs = trace.machine_procs(args.procs)
    mode = args.mode or default_mode(args.estimator)
    config = SimulationConfig(procs, args.policy, args.backfill, mode, args.correction, args.backfill_order)
    credentials = credentials_from(args) if args.predictor_address else None
    summary, result = run_simulation(
        trace,
        config,
        args.estimator,
        args.month,
        args.predictor_address,
        args.predictor_namespace,
        args.predictor_timeout,
        credentials=credentials,
        load_factor=args.load_factor,
        max_fallback_share=args.max_fallback_share,
        replicate=args.replicate,
        jitter=args.jitter,
    )
    print(summary.describe())
    write_json(args.json, summary.to_dict())
    if args.jobs_csv:
        result.jobs.to_csv(args.jobs_csv, index=False)
    return 0


def cmd_pbs_report(args: argparse.Namespace) -> int:
    from predictor.service.client import PredictorClient
    from sites.pbs import report_accounting

    with PredictorClient(args.address, args.timeout, credentials_from(args)) as client:
        sent, new = report_accounting(args.accounting, client, args.namespace)
    print(f"{sent} completions sent: {new} new, {sent - new} already held")
    return 0


def cmd_trace_info(args: argparse.Namespace) -> int:
    from simulator.workloads.info import format_trace_info, trace_info

    info = trace_info(read_trace_option(args))  # also a trace nothing of which can be replayed
    print(format_trace_info(info))
    write_json(args.json, info)
    return 0


def cmd_trace_generate(args: argparse.Namespace) -> int:
    from simulator.workloads.swf import write_swf
    from simulator.workloads.synthetic import generate_workload, offered_load

    trace = generate_workload(jobs=args.jobs, procs=args.procs, load=args.load, seed=args.seed)
    write_swf(trace, args.out)
    jobs = trace.jobs
    load = offered_load(jobs["submit"], jobs["procs"], jobs["t_act"], args.procs)
    print(f"wrote {args.out}: {len(jobs)} jobs on {args.procs} processors, offered load {load:.3f}, seed {args.seed}")
    return 0


def cmd_trace_convert(args: argparse.Namespace) -> int:
    from simulator.workloads.formats import convert_trace

    trace = read_trace_option(args)  # every record is converted, replayable or not
    names = convert_trace(trace, args.out, args.procs)
    skipped = ", ".join(f"{count} {reason}" for reason, count in sorted(trace.skipped.items())) or "none"
    print(f"wrote {args.out}: {len(trace.records)} records ({len(trace.jobs)} replayable; skipped: {skipped})")
    if names is not None:
        print(f"wrote {names}: the names behind the user, group, queue, ... ids")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from simulator.evaluation.execution import run_evaluation

    plan = ev.EvaluationPlan(
        estimators=tuple(ev.split_specs(args.estimators)) if args.estimators else ev.DEFAULT_ESTIMATORS,
        policies=ev.split_policies(args.policies),
        backfills=ev.split_choices(args.backfill, BACKFILLS, "--backfill"),
        modes=ev.split_choices(args.modes, ev.PREDICTION_MODES, "--modes"),
        monthly=args.monthly,
        procs=args.procs,
        backfill_orders=ev.split_choices(args.backfill_order, BACKFILL_ORDERS, "--backfill-order"),
        corrections=ev.split_choices(args.corrections, CORRECTIONS, "--corrections"),
        load_factors=ev.split_numbers(args.load_factor, "--load-factor"),
        replicates=args.replicates,
        jitter=args.jitter,
    )
    plan.check()  # a bad SPEC or choice fails before any trace is read
    traces = (
        [
            ev.load_trace_input(
                path,
                args.format,
                lenient=args.lenient,
                timezone=args.timezone,
                size=args.size,
                default_request=args.default_request,
            )
            for path in args.trace
        ]
        if args.trace
        else [ev.builtin_trace_input()]
    )
    backend = ev.Backend(args.workers, args.dask_scheduler, args.in_process)
    try:
        print(run_evaluation(traces, plan, Path(args.out), backend, force=args.force).summary())
    except ev.TaskError as error:
        print(f"tsched: error: {error}", file=sys.stderr)
        return EXIT_TASK_FAILED
    return 0


def cmd_wait_eval(args: argparse.Namespace) -> int:
    from predictor.forecasting import Scheduler
    from simulator.forecasters import make_forecaster
    from simulator.waiteval import format_report, run_wait_evaluation, scatter_plot

    scheduler = Scheduler(args.policy, args.backfill, args.backfill_order)
    specs = args.forecaster or list(DEFAULT_FORECASTERS)
    for spec in specs:
        make_forecaster(spec, scheduler, {})  # a bad SPEC fails before the trace is read
    trace = load_trace(args)
    truth = dict(zip(trace.jobs["job_id"].tolist(), trace.jobs["t_act"].tolist(), strict=True))  # the oracle's
    forecasters = [make_forecaster(spec, scheduler, truth) for spec in specs]
    report, questions = run_wait_evaluation(
        trace.path, trace.jobs, trace.machine_procs(args.procs), scheduler, forecasters, args.protocol
    )
    print(format_report(report))
    write_json(args.json, report)
    if args.plot:
        scatter_plot(questions, report, args.plot)
    if args.questions_csv:
        questions.to_csv(args.questions_csv, index=False)
    return 0


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Mount the simulator's commands (and `pbs-report`) on the `tsched` parser."""
    from simulator.workloads import synthetic

    formatter = HelpFormatter

    sim = commands.add_parser(
        "simulate", help="replay a trace through a simulated scheduler", formatter_class=formatter
    )
    trace_options(sim)
    sim.add_argument("--procs", type=int, help="machine size (default: the trace header's MaxProcs)")
    sim.add_argument(
        "--policy", type=policy_spec, default=_DEFAULTS.policy, metavar="SPEC", help=f"queue policy: {POLICY_HELP}"
    )
    sim.add_argument(
        "--backfill",
        choices=BACKFILLS,
        default=_DEFAULTS.backfill,
        help="backfilling (replan: conservative with the whole plan rebuilt in the policy's order at every job end, "
        "as Streit's CCS)",
    )
    sim.add_argument("--estimator", default=ev.BASELINE_ESTIMATOR, metavar="SPEC", help="NAME or NAME:key=value,...")
    sim.add_argument(
        "--mode",
        choices=MODES,
        help="where the scheduler uses t_sched: none (t_req everywhere), regular (waiting and running jobs) or "
        "selective (waiting jobs only) (default: selective with an estimator, none with request)",
    )
    sim.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default=_DEFAULTS.correction,
        help="regular mode: what a running job past its prediction is expected to run",
    )
    sim.add_argument(
        "--backfill-order",
        choices=BACKFILL_ORDERS,
        default=_DEFAULTS.backfill_order,
        help="the order backfill candidates are tried in: the queue's, or shortest estimate first (EASY-SJBF)",
    )
    sim.add_argument(
        "--load-factor",
        type=positive_number,
        default=1.0,
        metavar="F",
        help="multiply the offered load by F (inter-arrival times divided by F; runtimes, sizes, users unchanged)",
    )
    sim.add_argument(
        "--replicate",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="0: the trace as it is; N > 0: every submit time moved by up to --jitter seconds, drawn with seed N "
        "(one more draw of a chaotic outcome: compare configurations over several)",
    )
    sim.add_argument(
        "--jitter",
        type=non_negative_int,
        default=DEFAULT_JITTER_SECONDS,
        metavar="SECONDS",
        help="how far a replicate moves each submission, at most",
    )
    sim.add_argument("--month", metavar="YYYY-MM", help="simulate one calendar month, warmed up with earlier jobs")
    sim.add_argument("--json", type=output_file, metavar="OUT", help="write the summary as JSON")
    sim.add_argument("--jobs-csv", type=output_file, metavar="OUT", help="write one row per job as CSV")
    sim.add_argument("--predictor-address", metavar="HOST:PORT|unix:PATH", help="get predictions from a tsched service")
    sim.add_argument("--predictor-namespace", metavar="NS", help="service namespace (default: a fresh one)")
    add_connection_options(sim)
    sim.add_argument(
        "--max-fallback-share",
        type=fraction,
        default=DEFAULT_MAX_FALLBACK_SHARE,
        metavar="S",
        help="with --predictor-address: fail if more than this share of the jobs got t_req because the service "
        "did not answer",
    )
    sim.add_argument(
        "--predictor-timeout",
        type=positive_number,
        default=1.0,
        metavar="SECONDS",
        help="how long to wait for the service per call before jobs get t_req (a replay of a model that "
        "trains as it goes needs its trainings' time: a minute or more)",
    )
    sim.set_defaults(handler=cmd_simulate)

    trace = commands.add_parser("trace", help="inspect, convert or generate traces", formatter_class=formatter)
    trace_commands = trace.add_subparsers(dest="trace_command", required=True, metavar="SUBCOMMAND")
    info = trace_commands.add_parser(
        "info", help="size, span, users, skipped jobs and request accuracy", formatter_class=formatter
    )
    info.add_argument(
        "trace", nargs="?", metavar="PATH", help="trace (any format); default: the built-in synthetic workload"
    )
    format_options(info)
    info.add_argument("--json", type=output_file, metavar="OUT", help="write the summary as JSON")
    info.set_defaults(handler=cmd_trace_info)
    convert = trace_commands.add_parser(
        "convert",
        help="write a trace (sacct output, PBS logs, SWF) as SWF, with its names beside it",
        formatter_class=formatter,
    )
    convert.add_argument("trace", metavar="IN", help="the trace to convert: a file, or a folder of PBS logs")
    format_options(convert)
    convert.add_argument(
        "--out", required=True, type=output_file, metavar="OUT.swf", help="where to write (.gz: compressed)"
    )
    convert.add_argument("--procs", type=int, help="MaxProcs to write (default: the trace's, e.g. its peak use)")
    convert.set_defaults(handler=cmd_trace_convert)
    gen = trace_commands.add_parser("generate", help="write a synthetic workload as SWF", formatter_class=formatter)
    gen.add_argument("--jobs", type=int, default=synthetic.DEFAULT_JOBS, help="number of jobs")
    gen.add_argument("--procs", type=int, default=synthetic.DEFAULT_PROCS, help="machine size")
    gen.add_argument("--load", type=float, default=synthetic.DEFAULT_LOAD, help="target offered load")
    gen.add_argument("--seed", type=int, default=synthetic.DEFAULT_SEED, help="random seed")
    gen.add_argument(
        "--out", required=True, type=output_file, metavar="FILE.swf", help="where to write (.gz: compressed)"
    )
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
        help="trace (SWF, sacct output, PBS logs); repeat for several (default: the built-in synthetic workload)",
    )
    format_options(evl)
    evl.add_argument("--procs", type=int, help="machine size (default: each trace header's MaxProcs)")
    evl.add_argument(
        "--estimators",
        action="append",
        metavar="SPEC,...",
        help=f"comma-separated estimator SPECs; repeatable (default: {','.join(ev.DEFAULT_ESTIMATORS)})",
    )
    evl.add_argument(
        "--policies",
        default=",".join(ev.DEFAULT_POLICIES),
        metavar="SPEC,...",
        help=f"comma-separated queue policies: {POLICY_HELP}",
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
    evl.add_argument(
        "--backfill-order",
        default=",".join(ev.DEFAULT_BACKFILL_ORDERS),
        metavar="O,...",
        help=f"from {', '.join(BACKFILL_ORDERS)} (sjf: EASY-SJBF; with predictions in regular mode, EASY++)",
    )
    evl.add_argument(
        "--corrections",
        default=",".join(ev.DEFAULT_CORRECTIONS),
        metavar="C,...",
        help=f"regular mode, a running job past its prediction: from {', '.join(CORRECTIONS)}",
    )
    evl.add_argument(
        "--load-factor",
        default=",".join(f"{factor:g}" for factor in ev.DEFAULT_LOAD_FACTORS),
        metavar="F,...",
        help="offered load multiplied by each F (inter-arrival times divided by F)",
    )
    evl.add_argument(
        "--replicates",
        type=positive_int,
        default=1,
        metavar="K",
        help="simulate every period K times: as it is, then with submissions moved by up to --jitter seconds "
        "(seeds 1..K-1); tables give the mean and spread over them",
    )
    evl.add_argument(
        "--jitter",
        type=non_negative_int,
        default=DEFAULT_JITTER_SECONDS,
        metavar="SECONDS",
        help="how far a replicate moves each submission, at most",
    )
    evl.add_argument("--monthly", action="store_true", help="Tang et al.'s protocol: each calendar month on its own")
    evl.add_argument("--out", default=ev.DEFAULT_REPORT_FOLDER, metavar="DIR", help="report folder (new or empty)")
    evl.add_argument(
        "--force", action="store_true", help="replace the previous report in --out (only its own files are removed)"
    )
    evl.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="joblib worker processes (default: one per CPU)"
    )
    evl.add_argument("--dask-scheduler", metavar="ADDRESS", help="run the tasks on this Dask cluster instead")
    evl.add_argument("--in-process", action="store_true", help="predict in-process instead of through the service")
    evl.set_defaults(handler=cmd_evaluate)

    wait = commands.add_parser(
        "wait-eval",
        help="replay a trace and score queue-time forecasters (when will each job start?)",
        formatter_class=formatter,
    )
    trace_options(wait)
    wait.add_argument("--procs", type=int, help="machine size (default: the trace header's MaxProcs)")
    wait.add_argument("--policy", choices=POLICIES, default=_DEFAULTS.policy, help="queue policy")
    wait.add_argument("--backfill", choices=BACKFILLS, default=_DEFAULTS.backfill, help="backfilling")
    wait.add_argument(
        "--backfill-order", choices=BACKFILL_ORDERS, default=_DEFAULTS.backfill_order, help="backfill candidates' order"
    )
    wait.add_argument(
        "--forecaster",
        action="append",
        metavar="SPEC",
        help="downey-a, downey-b, downey (combined), or forward:estimator=SPEC (estimator= last: the rest is the "
        f"estimator's SPEC); repeat for several (default: {' '.join(DEFAULT_FORECASTERS)})",
    )
    wait.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="submit",
        help="ask at each submission, or when a job is first at the head of the queue and cannot start (Downey's)",
    )
    wait.add_argument("--json", type=output_file, metavar="OUT", help="write the report as JSON")
    wait.add_argument("--plot", type=output_file, metavar="OUT.png", help="draw Downey's Figure 4 per forecaster")
    wait.add_argument(
        "--questions-csv", type=output_file, metavar="OUT", help="write one row per question with every forecast"
    )
    wait.set_defaults(handler=cmd_wait_eval)

    report = commands.add_parser(
        "pbs-report",
        help="report the jobs of PBS accounting logs to a predictor service (cron it: those already held are skipped)",
        formatter_class=formatter,
    )
    report.add_argument("accounting", nargs="+", metavar="PATH", help="accounting log files or folders")
    report.add_argument("--address", required=True, metavar="HOST:PORT|unix:PATH", help="the predictor service")
    report.add_argument("--namespace", default="", help="the cluster's namespace (default: the server's default)")
    report.add_argument("--timeout", type=positive_number, default=60.0, help="seconds each batch may take")
    add_connection_options(report)
    report.set_defaults(handler=cmd_pbs_report)
