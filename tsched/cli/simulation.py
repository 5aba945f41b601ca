"""The simulator's commands: `simulate` (one replay), `evaluate` (the head-to-head of estimators x policies x
modes, with a report) and `wait-eval` (queue-time forecasters scored on a replay).

Every command that reads a trace uses the built-in synthetic workload when `--trace` is omitted, so a new
user can run everything with no data.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from kernel.errors import TraceError, UsageError
from tsched.cli.options import (
    STDIN,
    TRACE_HELP,
    credentials_from,
    format_options,
    fraction,
    json_option,
    load_trace,
    machine_procs,
    machine_procs_option,
    max_dropped_share_option,
    non_negative_int,
    output_file,
    plain_policy_option,
    positive_int,
    positive_number,
    scheduler_group,
    service_group,
    show,
    site_log_options,
    trace_group,
)
from tsched.cli.spec import Command, Group, Option, Table

#: What `wait-eval` compares without --forecasters: Downey's combined predictor, the forecast `squeue --start`
#: gives, and the forward simulation with a point estimate of runtimes (docs/queue-time.md: the mean of the
#: user's last two runtimes forecast best on SDSC-Par-1996 and within 0.05 of the LightGBM median model on
#: CTC-SP2, at a fraction of its cost).
DEFAULT_FORECASTERS = ("downey", "forward:estimator=request", "forward:estimator=last2")
EXIT_TASK_FAILED = 1


def policy_help() -> str:
    """How --policy and --policies describe a policy SPEC."""
    from simulator.dynp import DYNAMIC
    from simulator.policies import POLICIES

    return (
        f"{', '.join(POLICIES)}, or {DYNAMIC}[:key=value,...]: Streit's dynP, variant=self-tuning "
        "(decider=simple|advanced, quality=art|artww|sldwa|makespan; default advanced, artww) or variant=basic "
        "(lower, upper: seconds, default 7200, 9000)"
    )


def policy_spec(text: str) -> str:
    """An argparse type: a policy SPEC, checked and spelled out in full."""
    from simulator.dynp import canonical_policy

    try:
        return canonical_policy(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def reservation_delay(text: str) -> int | None:
    """An argparse type: a duration (`30m`, `2h`, `0s`) or `none` (no bound), in seconds."""
    from kernel.durations import parse_duration

    try:
        return parse_duration(text, "--max-reservation-delay", unbounded="none", zero=True)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def cmd_simulate(args: argparse.Namespace) -> int:
    from simulator.engine import SimulationConfig
    from simulator.experiment import run_simulation

    trace = load_trace(args)
    procs = machine_procs(trace, args)
    config = SimulationConfig(
        procs, args.policy, args.backfill, args.mode, args.correction, args.backfill_order, args.max_reservation_delay
    )
    credentials = credentials_from(args) if args.address else None
    cluster, requests = simulated_cluster(args, procs)
    accounting = site_accounting(args, cluster)
    calendar = site_calendar(args, cluster, trace)
    warn_unknown_reservations(requests, calendar)
    summary, result = run_simulation(
        trace,
        config,
        args.estimator,
        args.month,
        args.address,
        args.namespace,
        args.timeout,
        credentials=credentials,
        load_factor=args.load_factor,
        max_fallback_share=args.max_fallback_share,
        replicate=args.replicate,
        jitter=args.jitter,
        cluster=cluster,
        requests=requests,
        max_dropped_share=args.max_dropped_share,
        accounting=accounting,
        calendar=calendar,
    )
    show(args.json, summary.to_dict(), summary.describe)
    if args.jobs_csv:
        result.jobs.to_csv(args.jobs_csv, index=False)
    return 0


def simulated_cluster(args: argparse.Namespace, procs: int) -> tuple[Any, dict[int, Any]]:
    """The cluster `--scheduler slurm` runs on (`--cluster`, else `procs` one-CPU nodes) and the jobs' requests
    (a sacct trace's, by job id); (None, {}) for the queue schedulers, which run on a processor pool."""
    if args.scheduler != "slurm":
        if args.cluster:
            raise UsageError("--cluster: only --scheduler slurm schedules on nodes; the queue schedulers use a pool")
        return None, {}
    from simulator.clusterconf import read_cluster
    from simulator.clusterreplay import single_cpu_nodes
    from simulator.workloads.sacctrequests import read_sacct_requests

    cluster = read_cluster(args.cluster) if args.cluster else single_cpu_nodes(procs)
    return cluster, read_sacct_requests(args.trace, cluster) if _sacct_trace(args) else {}


def _sacct_trace(args: argparse.Namespace) -> bool:
    """Whether `--trace` is a sacct dump, the one format that says what jobs asked for and where they ran."""
    from simulator.workloads.formats import detect_format

    return args.trace not in (None, STDIN) and (args.format or detect_format(args.trace)) == "sacct"


def site_accounting(args: argparse.Namespace, cluster: Any) -> Any:
    """The associations (`--associations`) and QOS (`--qos-file`) of `--scheduler slurm`; None without either."""
    if not (args.associations or args.qos_file):
        return None
    if cluster is None:
        raise UsageError("--associations and --qos-file: only --scheduler slurm has accounts, shares and limits")
    from simulator.clusterconf.sacctmgr import read_associations, read_qos
    from simulator.slurmpolicy import SiteAccounting

    accounts = read_associations(args.associations, cluster.name) if args.associations else None
    return SiteAccounting(accounts, read_qos(args.qos_file) if args.qos_file else {})


def site_calendar(args: argparse.Namespace, cluster: Any, trace: Any) -> Any:
    """The reservations (`--reservations`) and node events (`--node-events`) of `--scheduler slurm`'s cluster,
    in the trace's time zone, a busy node's drain moved back to its request where a sacct trace says where its
    jobs ran (`Calendar.drains_as_requested`); None without either. What is read but not modelled is said on
    standard error."""
    if not (args.reservations or args.node_events):
        return None
    if cluster is None:
        raise UsageError("--reservations and --node-events: only --scheduler slurm has nodes to hold or take out")
    from simulator.calendar import node_runs
    from simulator.clusterconf.calendarfiles import read_calendar
    from simulator.workloads.sacctrequests import read_sacct_nodes

    calendar, notes = read_calendar(cluster, args.reservations, args.node_events, args.timezone or "UTC")
    if calendar.events and _sacct_trace(args):
        try:
            nodes = read_sacct_nodes(args.trace, cluster)
        except TraceError as error:
            nodes, notes = {}, [*notes, str(error)]
        if nodes:
            calendar = calendar.drains_as_requested(node_runs(trace.jobs, nodes))
        else:
            notes.append(f"{args.trace}: no job ran on the cluster's nodes (NodeList): drains start as recorded")
    for note in notes:
        print(f"tsched: warning: {note}", file=sys.stderr)
    return calendar


def warn_unknown_reservations(requests: dict[int, Any], calendar: Any) -> None:
    """Say on standard error how many jobs name a reservation the calendar does not hold: they go first in the
    queue, as in Slurm, but are placed as if they named none."""
    held = {reservation.name for reservation in calendar.reservations} if calendar is not None else set()
    unknown = sorted({request.reservation for request in requests.values()} - held - {None})
    if unknown:
        count = sum(request.reservation in unknown for request in requests.values())
        print(
            f"tsched: warning: {count} job(s) ran in reservation(s) {', '.join(unknown)}, which --reservations does "
            "not hold: they are placed as if they named none",
            file=sys.stderr,
        )


def cmd_evaluate(args: argparse.Namespace) -> int:
    from simulator.evaluation import plan as ev
    from simulator.evaluation.execution import run_evaluation

    plan = evaluation_plan(args)
    plan.check()  # a bad SPEC or choice fails before any trace is read
    options = site_log_options(args)
    traces = [ev.load_trace_input(path, args.format, **options) for path in args.traces or ()]
    for entry in traces:
        machine_procs(entry.trace, args)  # says when a trace's machine size is a guess
    backend = ev.Backend(args.workers, args.dask_scheduler, args.in_process)
    try:
        print(
            run_evaluation(
                traces or [ev.builtin_trace_input()], plan, Path(args.out), backend, force=args.force
            ).summary()
        )
    except ev.TaskError as error:
        print(f"tsched: error: {error}", file=sys.stderr)
        return EXIT_TASK_FAILED
    return 0


def evaluation_plan(args: argparse.Namespace) -> Any:
    """The `EvaluationPlan` evaluate's list options name (each list: values separated by spaces or commas)."""
    from simulator.backfill import BACKFILL_ORDERS, BACKFILLS
    from simulator.evaluation import plan as ev
    from simulator.machine import CORRECTIONS

    def joined(values: list[str]) -> str:
        return ",".join(values)

    return ev.EvaluationPlan(
        estimators=tuple(ev.split_specs(args.estimators)),
        policies=ev.split_policies(joined(args.policies)),
        backfills=ev.split_choices(joined(args.backfills), BACKFILLS, "--backfills"),
        modes=ev.split_choices(joined(args.modes), ev.PREDICTION_MODES, "--modes"),
        monthly=args.monthly,
        procs=args.machine_procs,
        backfill_orders=ev.split_choices(joined(args.backfill_orders), BACKFILL_ORDERS, "--backfill-orders"),
        corrections=ev.split_choices(joined(args.corrections), CORRECTIONS, "--corrections"),
        load_factors=ev.split_numbers(joined(args.load_factors), "--load-factors"),
        replicates=args.replicates,
        jitter=args.jitter,
        max_dropped_share=args.max_dropped_share,
        max_reservation_delay=args.max_reservation_delay,
    )


def cmd_wait_eval(args: argparse.Namespace) -> int:
    from predictor.forecasting import Scheduler
    from simulator.forecasters import make_forecaster
    from simulator.waiteval import format_report, run_wait_evaluation, scatter_plot

    scheduler = Scheduler(args.policy, args.backfill, args.backfill_order)
    for spec in args.forecasters:
        make_forecaster(spec, scheduler, {})  # a bad SPEC fails before the trace is read
    trace = load_trace(args)
    truth = dict(zip(trace.jobs["job_id"].tolist(), trace.jobs["t_act"].tolist(), strict=True))  # the oracle's
    forecasters = [make_forecaster(spec, scheduler, truth) for spec in args.forecasters]
    report, questions = run_wait_evaluation(
        trace.path, trace.jobs, machine_procs(trace, args), scheduler, forecasters, args.protocol
    )
    show(args.json, report, lambda: format_report(report))
    if args.plot:
        scatter_plot(questions, report, args.plot)
    if args.questions_csv:
        questions.to_csv(args.questions_csv, index=False)
    return 0


def jitter_option() -> Option:
    from simulator.workloads.replicates import DEFAULT_JITTER_SECONDS

    return Option(
        "--jitter",
        "how far a replicate moves each submission, at most",
        non_negative_int,
        DEFAULT_JITTER_SECONDS,
        "SECONDS",
    )


def simulate_table() -> Table:
    from simulator.evaluation.plan import BASELINE_ESTIMATOR
    from simulator.experiment import DEFAULT_MAX_FALLBACK_SHARE

    timeout_help = (
        "how long to wait for the service per call before jobs get t_req (a replay of a model that trains as it "
        "goes needs its trainings' time: a minute or more)"
    )
    return (
        trace_group(),
        machine_procs_option("the trace header's MaxProcs"),
        max_dropped_share_option(),
        simulated_scheduler(),
        cluster_group(),
        Option("--estimator", "NAME or NAME:key=value,...", default=BASELINE_ESTIMATOR, metavar="SPEC"),
        replay_group(),
        json_option("the summary"),
        Option("--jobs-csv", "write one row per job as CSV", output_file, metavar="OUT"),
        service_group(
            timeout_help,
            1.0,
            required=False,
            namespace_help="the service namespace (default: a fresh one)",
            namespace_default=None,
            old_prefix="--predictor-",
        ),
        Option(
            "--max-fallback-share",
            "with --address: fail if more than this share of the jobs got t_req because the service did not answer",
            fraction,
            DEFAULT_MAX_FALLBACK_SHARE,
            "S",
        ),
    )


def simulated_scheduler() -> Group:
    """The scheduler `simulate` runs: any policy SPEC (dynP too), and where it uses the predictions."""
    from simulator.engine import SimulationConfig
    from simulator.machine import CORRECTIONS, MODES

    default = SimulationConfig.policy
    policy = Option("--policy", f"queue policy (default: {default}): {policy_help()}", policy_spec, default, "SPEC")
    mode = Option(
        "--mode",
        "where the scheduler uses t_sched: none (t_req everywhere), regular (waiting and running jobs) or "
        "selective (waiting jobs only) (default: selective with an estimator, none with request)",
        choices=MODES,
    )
    correction = Option(
        "--correction",
        "regular mode: what a running job past its prediction is expected to run",
        default=SimulationConfig.correction,
        choices=CORRECTIONS,
    )
    return scheduler_group(policy, mode, correction, reservation_delay_option())


def reservation_delay_option() -> Option:
    """EASY's bound on the head job's delay, for `simulate` and `evaluate` alike."""
    from simulator.engine import SimulationConfig

    bound = SimulationConfig.max_reservation_delay
    return Option(
        "--max-reservation-delay",
        "easy: once backfilled jobs that outlive their estimates have pushed the head job's start this far past "
        "its first reservation, later candidates are judged with their requests, so none can push it further "
        "(a duration such as 30m or 2h; none: no bound, EASY++ as published)",
        reservation_delay,
        "none" if bound is None else f"{bound}s",
        "DURATION|none",
    )


def cluster_group() -> Group:
    """Slurm's scheduler on a cluster of nodes instead of a queue policy and backfilling on a processor pool."""
    scheduler = Option(
        "--scheduler",
        "queue: --policy and --backfill on a pool of processors; slurm: Slurm 22.05's main and backfill scheduler "
        "on the nodes of --cluster, as its SchedulerParameters say (--policy and --backfill do not apply; a sacct "
        "trace's jobs keep their nodes, CPUs, memory, GPUs and partitions)",
        default="queue",
        choices=("queue", "slurm"),
    )
    cluster = Option(
        "--cluster",
        "the cluster: a site's slurm.conf (gres.conf beside it) or a TOML cluster file (default with --scheduler "
        "slurm: --machine-procs nodes of one CPU)",
        metavar="PATH",
    )
    associations = Option(
        "--associations",
        "the site's accounts, users, shares and limits: `sacctmgr show assoc --parsable2` output (add ParentName "
        "to the format, or `tree`, for nested accounts; default with --scheduler slurm: the trace's accounts and "
        "users with equal shares); used by PriorityType=priority/multifactor and AccountingStorageEnforce=limits",
        metavar="FILE",
    )
    qos = Option(
        "--qos-file",
        "the site's QOS: `sacctmgr show qos --parsable2` output (priorities, usage factors and limits)",
        metavar="FILE",
    )
    reservations = Option(
        "--reservations",
        "the site's advance reservations: `scontrol show reservation` output (local times, see --timezone); their "
        "nodes are kept from every job whose limit would overlap them",
        metavar="FILE",
    )
    events = Option(
        "--node-events",
        "nodes that went down or drained: `sacctmgr show event --parsable2 start=YYYY-MM-DD` output; a node down "
        "ends its jobs (NODE_FAIL), a drained one lets them finish, neither takes new jobs until the event ends",
        metavar="FILE",
    )
    return Group("the cluster", (scheduler, cluster, associations, qos, reservations, events))


def replay_group() -> Group:
    """What of the trace `simulate` replays, and how changed: its load, a replicate, one month."""
    load_factor = Option(
        "--load-factor",
        "multiply the offered load by F (inter-arrival times divided by F; runtimes, sizes, users unchanged)",
        positive_number,
        1.0,
        "F",
    )
    replicate = Option(
        "--replicate",
        "0: the trace as it is; N > 0: every submit time moved by up to --jitter seconds, drawn with seed N "
        "(one more draw of a chaotic outcome: compare configurations over several)",
        non_negative_int,
        0,
        "N",
    )
    month = Option("--month", "simulate one calendar month, warmed up with earlier jobs", metavar="YYYY-MM")
    return Group("the replay", (load_factor, replicate, jitter_option(), month))


def evaluate_table() -> Table:
    from simulator.backfill import BACKFILL_ORDERS, BACKFILLS
    from simulator.evaluation import plan as ev
    from simulator.machine import CORRECTIONS

    def listed(name: str, help: str, default: tuple[str, ...], metavar: str, *old: str) -> Option:
        return Option(
            name, f"{help}; separated by spaces or commas", default=default, metavar=metavar, kind="list", old=old
        )

    traces = Option(
        "--traces",
        f"{TRACE_HELP}; several separated by spaces (default: the built-in synthetic workload)",
        metavar="PATH",
        kind="list",
        old=("--trace",),
    )
    return (
        Group("the traces", (traces, *format_options())),
        machine_procs_option("each trace header's MaxProcs"),
        max_dropped_share_option(),
        Group(
            "what to compare (every combination runs; the baseline, request in mode none, always does)",
            (
                listed("--estimators", "estimator SPECs", ev.DEFAULT_ESTIMATORS, "SPEC"),
                listed("--policies", f"queue policies: {policy_help()}", ev.DEFAULT_POLICIES, "SPEC"),
                listed("--backfills", f"from {', '.join(BACKFILLS)}", ev.DEFAULT_BACKFILLS, "B", "--backfill"),
                listed("--modes", "from regular, selective", ev.DEFAULT_MODES, "M"),
                listed(
                    "--backfill-orders",
                    f"from {', '.join(BACKFILL_ORDERS)} (sjf: EASY-SJBF; with predictions in regular mode, EASY++)",
                    ev.DEFAULT_BACKFILL_ORDERS,
                    "O",
                    "--backfill-order",
                ),
                listed(
                    "--corrections",
                    f"regular mode, a running job past its prediction: from {', '.join(CORRECTIONS)}",
                    ev.DEFAULT_CORRECTIONS,
                    "C",
                ),
                listed(
                    "--load-factors",
                    "offered load multiplied by each F (inter-arrival times divided by F)",
                    tuple(f"{factor:g}" for factor in ev.DEFAULT_LOAD_FACTORS),
                    "F",
                    "--load-factor",
                ),
                reservation_delay_option(),
            ),
        ),
        *evaluate_run_options(ev.DEFAULT_REPORT_FOLDER),
    )


def evaluate_run_options(report_folder: str) -> tuple[Option, ...]:
    """How `evaluate` runs: replicates, protocol, where the report goes, and where the tasks run."""
    return (
        Option(
            "--replicates",
            "simulate every period K times: as it is, then with submissions moved by up to --jitter seconds "
            "(seeds 1..K-1); tables give the mean and spread over them",
            positive_int,
            1,
            "K",
        ),
        jitter_option(),
        Option("--monthly", "Tang et al.'s protocol: each calendar month on its own", kind="flag"),
        Option("--out", "report folder (new or empty)", default=report_folder, metavar="DIR"),
        Option("--force", "replace the previous report in --out (only its own files are removed)", kind="flag"),
        Option("--workers", "joblib worker processes (default: one per CPU)", positive_int, os.cpu_count() or 1, "N"),
        Option("--dask-scheduler", "run the tasks on this Dask cluster instead", metavar="ADDRESS"),
        Option("--in-process", "predict in-process instead of through the service", kind="flag"),
    )


def wait_eval_table() -> Table:
    from simulator.waiteval import PROTOCOLS

    return (
        trace_group(),
        machine_procs_option("the trace header's MaxProcs"),
        scheduler_group(plain_policy_option()),
        Option(
            "--forecasters",
            "downey-a, downey-b, downey (combined), or forward:estimator=SPEC (estimator= last: the rest is the "
            "estimator's SPEC; forward:draws=N,estimator=SPEC: the median of N runs with drawn errors); several "
            "separated by spaces",
            default=DEFAULT_FORECASTERS,
            metavar="SPEC",
            kind="list",
            old=("--forecaster",),
        ),
        Option(
            "--protocol",
            "ask at each submission, or when a job is first at the head of the queue and cannot start (Downey's)",
            default="submit",
            choices=PROTOCOLS,
        ),
        json_option("the report"),
        Option("--plot", "draw Downey's Figure 4 per forecaster", output_file, metavar="OUT.png"),
        Option("--questions-csv", "write one row per question with every forecast", output_file, metavar="OUT"),
    )


COMMANDS = (
    Command("simulate", "replay a trace through a simulated scheduler", cmd_simulate, simulate_table),
    Command(
        "evaluate",
        "head-to-head evaluation of estimators x policies x modes, with a report",
        cmd_evaluate,
        evaluate_table,
    ),
    Command(
        "wait-eval",
        "replay a trace and score queue-time forecasters (when will each job start?)",
        cmd_wait_eval,
        wait_eval_table,
    ),
)
