"""The commands that talk to a running predictor service: `predict`, `forecast`, `status`, `observe`,
`namespaces list|show|reset` and `pbs-report`. Each reaches it with the same options (`service_group`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel.errors import UsageError
from tsched.cli.options import (
    CLUSTER_NAMESPACE_HELP,
    LIMIT_METAVAR,
    credentials_from,
    json_option,
    load_trace,
    memory_size,
    non_negative_int,
    plain_policy_option,
    scheduler_group,
    service_group,
    show,
    time_limit,
    trace_group,
)
from tsched.cli.spec import Command, Option, Table

if TYPE_CHECKING:
    from kernel.jobs import JobRequest
    from kernel.resources import ResourceRequest
    from predictor.forecasting import QueueState
    from predictor.service.client import JobResources, PredictorClient
    from sites.seeding import Seeded
    from sites.squeue import SlurmQueue


def connect(args: argparse.Namespace) -> PredictorClient:
    """A client of the service the options name."""
    from predictor.service.client import PredictorClient

    return PredictorClient(args.address, args.timeout, credentials_from(args))


def cmd_predict(args: argparse.Namespace) -> int:
    from predictor.service.client import PredictorError, predict_once

    try:
        served = predict_once(
            args.address,
            args.namespace,
            args.estimator or "",
            args.user,
            args.group,
            args.request,
            args.procs,
            submit_time(args.submit),
            args.timeout,
            credentials_from(args),
            args.account,
            -1 if args.partition is None else args.partition,
            _asked(args),
            -1 if args.job_name is None else args.job_name,
        )
    except PredictorError as error:
        if args.submit == "now" and "ahead of namespace" in error.details:
            raise UsageError(
                f"{error}. This namespace is not on Unix time (a trace fed on its own clock): "
                "ask with --submit clock, or --submit SECONDS"
            ) from None
        raise
    answer = served.plain()
    show(args.json, answer, lambda: _format_prediction(answer))
    return 0


def _asked(args: argparse.Namespace) -> JobResources:
    """What `tsched predict` says the job asks of the cluster, as Slurm's options say it: --mem per node,
    --mem-per-cpu per CPU, --gpus in all."""
    from predictor.service.client import JobResources

    if args.mem is not None and args.mem_per_cpu is not None:
        raise UsageError("--mem and --mem-per-cpu are both given; give one (as Slurm takes one)")
    memory = 0
    if args.mem is not None:
        memory = args.mem * max(args.nodes, 1)
    elif args.mem_per_cpu is not None:
        memory = args.mem_per_cpu * args.procs
    return JobResources(args.nodes, memory, args.gpus, -1 if args.qos is None else args.qos, args.exclusive)


def _format_prediction(answer: dict[str, Any]) -> str:
    factor = "-" if answer["factor"] is None else f"{answer['factor']:.4f}"
    text = (
        f"t_sched {answer['t_sched']}  factor {factor}  estimator {answer['estimator']}  "
        f"basis {answer['basis']}  fallback {str(answer['fallback']).lower()}"
    )
    if answer["quantiles"] is not None:
        shown = "  ".join(f"p{float(p) * 100:g} {runtime}" for p, runtime in answer["quantiles"].items())
        text += f"\nruntime quantiles: {shown}  P(runtime > t_sched) {answer['p_underestimate']:.2f}"
    return text


def cmd_status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        status = dataclasses.asdict(client.status(args.namespace))
    show(args.json, status, lambda: _format_status(status))
    return 0


def _format_status(status: dict[str, Any]) -> str:
    lines = [f"server: {status['namespaces']} namespace(s), {status['training_runs']} training run(s) since it started"]
    if not status["namespace_exists"]:
        lines.append(f"namespace {status['namespace']}: does not exist (nothing predicted or learned in it yet)")
    else:
        lines.append(
            f"namespace {status['namespace']}: {status['completions']} completions held, clock {status['clock']}, "
            f"{status['predictions']} predictions answered ({status['fallbacks']} fallbacks to t_req)"
        )
        lines.append(
            f"{'estimator':<48} {'scored':>7} {'acc mean':>8} {'under':>7} {'BE':>7} {'fallback':>8} {'pending':>8}"
        )
        lines += _estimator_rows(status["estimators"])
    lines.append(f"{'calls: rpc':<24} {'code':<20} {'count':>9}")
    lines += [
        f"{row['rpc']:<24} {row['code']:<20} {row['count']:>9}"
        for row in sorted(status["calls"], key=lambda call: (call["rpc"], call["code"]))
    ]
    return "\n".join(lines)


def _estimator_rows(rows: list[dict[str, Any]]) -> list[str]:
    """`status`'s table: an estimator by its short label (`--json` gives its full SPEC), its scores "-" until a
    completion is scored (0.000 would read as a useless estimator)."""
    from predictor.service.live import estimator_labels

    labels = estimator_labels([row["estimator"] for row in rows])

    def score(row: dict[str, Any], key: str, form: str, width: int) -> str:
        return f"{row[key]:>{width}{form}}" if row["scored"] else f"{'-':>{width}}"

    table = [
        f"{labels[row['estimator']]:<48} {row['scored']:>7} {score(row, 'accuracy', '.3f', 8)} "
        f"{score(row, 'underestimated', '.1%', 7)} {score(row, 'bad_estimates', '.1%', 7)} "
        f"{score(row, 'fallbacks', '.1%', 8)} {row['pending']:>8}"
        for row in rows
    ]
    return table + [_tuning_line(labels[row["estimator"]], row) for row in rows if row["choice"]]


def _tuning_line(label: str, row: dict[str, Any]) -> str:
    """A self-tuning estimator's choice and its latest replay's scores, best first."""
    scores = sorted(row["replay_scores"].items(), key=lambda item: item[1])
    shown = ", ".join(f"{name} {value:.4g}" for name, value in scores) or "none yet"
    return f"{label}: serves {row['choice']} after {row['retunings']} retuning(s); latest replay: {shown}"


def cmd_observe(args: argparse.Namespace) -> int:
    from sites.seeding import seed, trace_completions

    if args.trace is None:
        raise UsageError("observe needs --trace FILE, or --trace - for SWF lines on standard input")
    trace = load_trace(args)
    finished, names = trace_completions(trace.jobs, trace.names)
    with connect(args) as client:
        done = seed(client, args.namespace, finished, names, Progress("observe"))
        held = client.status(args.namespace)
    print(f"{done.line()}; now {held.completions} held, clock {held.clock}")
    return 0


def cmd_pbs_report(args: argparse.Namespace) -> int:
    from sites.pbs import report_accounting

    with connect(args) as client:
        done = report_accounting(args.accounting, client, args.namespace, Progress("pbs-report"))
    print(done.line())
    return 0


class Progress:
    """A long load's progress on standard error: a line at most every `EVERY` seconds, and the last one."""

    EVERY = 2.0

    def __init__(self, command: str) -> None:
        self.command = command
        self.shown = time.monotonic()

    def __call__(self, done: Seeded) -> None:
        now = time.monotonic()
        if now - self.shown >= self.EVERY or done.sent + done.skipped == done.total:
            self.shown = now
            print(f"{self.command}: namespace {done.namespace}: {done.progress()}", file=sys.stderr, flush=True)


def submit_time(text: str) -> int | None:
    """`--submit`: Unix seconds; `now` (the default): this host's clock; `clock`: the namespace's clock (a
    replayed trace's time), None."""
    if text == "now":
        return int(time.time())
    if text == "clock":
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--submit {text!r}: Unix seconds, now or clock") from None


def _namespace_line(info: dict[str, Any]) -> str:
    return (
        f"{info['name']}  completions {info['completions']}  clock {info['clock']}  "
        f"estimators {', '.join(info['estimators']) or '-'}"
    )


def cmd_namespaces_list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        listing = [dataclasses.asdict(view) for view in client.list_namespaces()]
    show(args.json, listing, lambda: "\n".join(map(_namespace_line, listing)) if listing else "no namespaces")
    return 0


def cmd_namespaces_show(args: argparse.Namespace) -> int:
    from predictor.service.namespaces import DEFAULT_NAMESPACE

    with connect(args) as client:
        held = client.list_estimators(args.name)
    default = args.name == DEFAULT_NAMESPACE
    if not held.namespace_exists and not default:
        raise UsageError(f"namespace {args.name!r} does not exist on {args.address}")
    # The default namespace answers requests that name none even before it holds anything: it is shown as it
    # is then, empty, with the estimators it will build.
    specs = held.namespace_specs if held.namespace_exists else held.default_specs
    info = {**dataclasses.asdict(held), "name": args.name, "default": default, "estimators": list(specs)}
    show(args.json, info, lambda: _namespace_line(info) + _default_note(held.namespace_exists) * default)
    return 0


def _default_note(exists: bool) -> str:
    """What `namespaces show default` adds: which namespace this is, and what it holds so far."""
    said = "\nthe server's default namespace: it answers requests that name no namespace"
    if exists:
        return said
    return said + "; nothing observed into it yet, so its estimators answer with their fallback (the request)"


def cmd_namespaces_reset(args: argparse.Namespace) -> int:
    with connect(args) as client:
        forgotten = client.reset_namespace(args.name)
    answer = {"namespace": args.name, "forgotten": forgotten}
    show(args.json, answer, lambda: f"namespace {args.name}: reset, {forgotten} completion(s) forgotten")
    return 0


def id_or_name(text: str) -> int | str:
    """An argparse type: a user or group as a number (an id the scheduler uses) or a name (the service maps
    names to ids of its own, per namespace)."""
    try:
        return int(text)
    except ValueError:
        return text


def read_queue_state(path: str) -> QueueState:
    """A scheduler's state from a JSON file (docs/queue-time.md): `now`, `machine_procs`, `running` (jobs with
    their `start`) and `waiting` (jobs in queue order); a job has the fields of the contract's Job, and may
    name its `partition` and, running, its `node_list` (for a forecast on a cluster's nodes)."""
    from predictor.forecasting import QueueState, StartedJob

    state = _QueueStateFile(path)
    running_items, waiting_items = state.listed("running"), state.listed("waiting")
    running = [
        StartedJob(state.job(f"running[{index}].", item), state.number(f"running[{index}].", item, "start"))
        for index, item in enumerate(running_items)
    ]
    waiting = [state.job(f"waiting[{index}].", item) for index, item in enumerate(waiting_items)]
    places = [f"running[{index}]." for index in range(len(running))] + [f"waiting[{i}]." for i in range(len(waiting))]
    items = running_items + waiting_items
    named = [state.text(where, item, "partition", "a name") for where, item in zip(places, items, strict=True)]
    names = [(index, "queue", name) for index, name in enumerate(named) if name]
    jobs = [started.job for started in running] + waiting
    requests = [
        state.request(where, item, asked, partition)
        for where, item, asked, partition in zip(places, items, jobs, named, strict=True)
    ]
    now, procs = state.number("", state.data, "now"), state.number("", state.data, "machine_procs")
    return QueueState(now, procs, running, waiting, requests, names)


class _QueueStateFile:
    """The fields of a `--queue-state` JSON file, each refused naming the file and the field when it is bad."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            data = json.loads(Path(path).read_text())
        except OSError as error:
            raise UsageError(f"--queue-state {path}: cannot read it: {error.strerror}") from None
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}: not JSON: {error}") from None
        if not isinstance(data, dict):
            raise UsageError(f"{path}: expected a JSON object with now, machine_procs, running and waiting")
        self.data: dict[str, Any] = data

    def number(self, where: str, mapping: Any, key: str, default: int | None = None) -> int:
        value = mapping.get(key, default)
        if value is None:
            raise UsageError(f"{self.path}: {where}{key} is required")
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError(f"{self.path}: {where}{key} must be a whole number, got {value!r}")
        return value

    def text(self, where: str, item: dict[str, Any], key: str, what: str) -> str:
        named = item.get(key, "")
        if not isinstance(named, str):
            raise UsageError(f"{self.path}: {where}{key} must be {what}, got {named!r}")
        return named

    def listed(self, key: str) -> list[Any]:
        items = self.data.get(key, [])
        if not isinstance(items, list):
            raise UsageError(f"{self.path}: {key} must be a list of jobs")
        return items

    def job(self, where: str, item: Any) -> JobRequest:
        from kernel.jobs import JOB_FIELDS, JobRequest

        if not isinstance(item, dict):
            raise UsageError(f"{self.path}: {where.rstrip('.')} must be a JSON object (a job), got {item!r}")
        return JobRequest(*(self.number(where, item, field.name, field.unset) for field in JOB_FIELDS))

    def request(self, where: str, item: dict[str, Any], asked: JobRequest, partition: str) -> ResourceRequest:
        """What the job asks of a cluster, as the service reads its totals; a running job on its listed nodes."""
        from kernel.hostlist import expand_hostlist
        from kernel.resources import ResourceRequest

        listed = self.text(where, item, "node_list", "a host list")
        try:
            nodes = expand_hostlist(listed, asked.procs) if listed else []
            return ResourceRequest.from_totals(
                asked.procs, asked.nodes, asked.memory_mb, asked.gpus, bool(asked.exclusive), partition, "", nodes
            )
        except ValueError as error:
            raise UsageError(f"{self.path}: {where}node_list: {error}") from None


def queue_to_forecast(args: argparse.Namespace) -> SlurmQueue | QueueState:
    """The queue `--squeue` shows (with Slurm's plan and the jobs left out), or the state `--queue-state` gives."""
    if (args.queue_state is None) == (args.squeue is None):
        raise UsageError("give the queue as one of --queue-state FILE.json or --squeue FILE")
    if args.queue_state is not None:
        if args.cluster is not None or args.now is not None:
            raise UsageError("--cluster and --now go with --squeue: a --queue-state file gives its machine and now")
        return read_queue_state(args.queue_state)
    if args.cluster is None:
        raise UsageError("--squeue needs --cluster slurm.conf: the jobs' partitions and the machine's CPUs")
    from simulator.clusterconf import read_cluster
    from sites.squeue import read_squeue

    if args.squeue == "-":
        text, now = sys.stdin.read(), int(time.time())
    else:
        try:
            text, now = Path(args.squeue).read_text(), int(Path(args.squeue).stat().st_mtime)
        except OSError as error:
            raise UsageError(f"--squeue {args.squeue}: cannot read it: {error.strerror}") from None
    return read_squeue(text, args.squeue, args.now if args.now is not None else now, read_cluster(args.cluster))


def cmd_forecast(args: argparse.Namespace) -> int:
    from predictor.forecasting import ON_NODES, QueueState, Scheduler

    queue = queue_to_forecast(args)
    state = queue if isinstance(queue, QueueState) else queue.state
    with connect(args) as client:
        answer = client.forecast_start(
            state,
            Scheduler(
                args.policy, args.backfill or (ON_NODES if args.squeue else Scheduler.backfill), args.backfill_order
            ),
            namespace=args.namespace,
            estimator=args.estimator or "",
            lower_quantile=args.lower_quantile,
            draws=args.draws,
        )
    rows = [forecast._asdict() for forecast in answer.forecasts]
    left_out: dict[str, str] = {}
    if not isinstance(queue, QueueState):  # squeue's names for the jobs, and Slurm's own plan
        rows = [
            {**row, "job": label, "slurm": slurm}
            for row, label, slurm in zip(rows, queue.labels, queue.planned, strict=True)
        ]
        left_out = queue.left_out
    payload = {"estimator": answer.estimator, "namespace": answer.namespace, "now": answer.now, "forecasts": rows}
    if not isinstance(queue, QueueState):
        payload["left_out"] = left_out
    show(args.json, payload, lambda: _format_forecast(answer.now, answer.namespace, answer.estimator, rows, left_out))
    return 0


def _format_forecast(
    now: int, namespace: str, estimator: str, rows: list[dict[str, Any]], left_out: dict[str, str]
) -> str:
    """The forecasts as a table; from squeue, with the start Slurm planned (`squeue --start`) and the jobs left
    out."""
    slurm = bool(rows) and "slurm" in rows[0]
    lines = [f"now {now}  namespace {namespace}  estimator {estimator}"]
    lines.append(f"{'job':>10} {'start':>12} {'wait':>10} {'lower':>10} {'upper':>10}" + f" {'slurm':>10}" * slurm)
    for row in rows:
        waits = [_duration(row[key] - now) for key in ("start", "lower", "upper")]
        if slurm:
            waits.append("-" if row["slurm"] is None else _duration(row["slurm"] - now))
        name = row.get("job", row["job_id"])
        lines.append(f"{name:>10} {row['start']:>12} " + " ".join(f"{wait:>10}" for wait in waits))
    lines += [f"left out: job {job} ({reason})" for job, reason in left_out.items()]
    return "\n".join(lines)


def _duration(seconds: int) -> str:
    """A wait as people read it: 45s, 12m, 3.5h, 2.1d."""
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86_400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"


def predict_table() -> Table:
    return (
        service_group(),
        Option("--estimator", "estimator SPEC (default: the server's first)", metavar="SPEC"),
        Option("--user", "user: a number, or a name (alice)", id_or_name, required=True),
        Option("--group", "group (project): a number, or a name; -1: unknown", id_or_name, -1),
        Option("--account", "the account charged, instead of --group", metavar="NAME"),
        Option(
            "--request",
            "the job's time limit t_req, in Slurm's syntax: MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]] (60 or 1:00:00 is "
            "an hour)",
            time_limit,
            metavar=LIMIT_METAVAR,
            required=True,
        ),
        Option("--procs", "the job's size in processors", int, required=True),
        Option("--partition", "the partition (queue) it is submitted to, by name", metavar="NAME"),
        Option("--qos", "its QOS, by name", metavar="NAME"),
        Option(
            "--job-name", "its name (Slurm's --job-name), which lgbm's application=true learns from", metavar="NAME"
        ),
        Option("--nodes", "the fewest nodes it asks for (0: not said)", non_negative_int, 0, metavar="N"),
        Option("--mem", "memory per node, in Slurm's syntax (8G, 4000M; no unit: MB)", memory_size, metavar="SIZE"),
        Option("--mem-per-cpu", "memory per CPU, in Slurm's syntax", memory_size, metavar="SIZE"),
        Option("--gpus", "GPUs it asks for in all", non_negative_int, 0, metavar="N"),
        Option("--exclusive", "it takes whole nodes", kind="flag"),
        Option(
            "--submit",
            "submit time in Unix seconds; now: this host's clock; clock: the namespace's (a replayed trace's time)",
            default="now",
            metavar="SECONDS|now|clock",
        ),
        json_option("the answer"),
    )


def forecast_table() -> Table:
    return (
        service_group(),
        Option(
            "--queue-state",
            "the scheduler's state: now, machine_procs, running, waiting (or --squeue)",
            metavar="FILE.json",
            old=("--state",),
        ),
        Option(
            "--squeue",
            "the queue as a running Slurm shows it: the output of the command in docs/service.md (- reads it from "
            "standard input); with --cluster",
            metavar="FILE|-",
        ),
        Option(
            "--cluster", "--squeue: the site's slurm.conf (gres.conf beside it), for the machine's CPUs", metavar="FILE"
        ),
        Option(
            "--now",
            "--squeue: when squeue ran, Unix seconds (default: now, for standard input; the file's time, for a file)",
            int,
            metavar="SECONDS",
        ),
        scheduler_group(
            plain_policy_option(),
            on_nodes="slurm: tsched's Slurm scheduler on the nodes of the server's --cluster, in the given order; "
            "default: slurm with --squeue, else easy",
        ),
        Option("--estimator", "estimator SPEC for the runtimes (default: the server's first)", metavar="SPEC"),
        Option(
            "--lower-quantile", "lifetime quantile of the lower bound (default: the server's, 0.1)", float, metavar="Q"
        ),
        Option(
            "--draws",
            "a sampled forecast: the median of N runs (1-32), each estimate times an error the estimator made on the "
            "namespace's completions; bounds at the runs' --lower-quantile and 1 minus it (default, and while the "
            "estimator has no scored completion: one run with the estimates, and its bounds)",
            int,
            metavar="N",
        ),
        json_option("the answer"),
    )


def namespace_table(named: bool) -> Table:
    """A `namespaces` action's options: the service, and the namespace it acts on when `named`."""
    name = (Option("name", "the namespace", metavar="NAMESPACE"),) if named else ()
    return (*name, service_group(namespace_help=None), json_option("the answer"))


def pbs_report_table() -> Table:
    return (
        Option("accounting", "accounting log files or folders", metavar="PATH", nargs="+"),
        service_group("seconds each batch may take", 60.0, namespace_help=CLUSTER_NAMESPACE_HELP),
    )


COMMANDS = (
    Command("predict", "ask a running service for one job's t_sched", cmd_predict, predict_table),
    Command("forecast", "ask a running service when each waiting job will start", cmd_forecast, forecast_table),
    Command(
        "status",
        "a running service's live accuracy per estimator, history and calls (the metrics, as a table)",
        cmd_status,
        lambda: (service_group(), json_option("the answer")),
    ),
    Command(
        "observe",
        "feed finished jobs (a trace file, or SWF lines on standard input) to a namespace of a running service",
        cmd_observe,
        lambda: (service_group("seconds to wait for each call (more for large batches)"), trace_group()),
    ),
    Command(
        "namespaces",
        "list, show or reset a running service's namespaces",
        subcommands=(
            Command(
                "list",
                "every namespace your token may use: sizes, clocks, estimators",
                cmd_namespaces_list,
                lambda: namespace_table(named=False),
            ),
            Command(
                "show",
                "one namespace's size, clock and estimators",
                cmd_namespaces_show,
                lambda: namespace_table(named=True),
            ),
            Command(
                "reset",
                "forget a namespace (its stored history too)",
                cmd_namespaces_reset,
                lambda: namespace_table(named=True),
            ),
        ),
    ),
    Command(
        "pbs-report",
        "report the jobs of PBS accounting logs to a predictor service (cron it: those already held are skipped)",
        cmd_pbs_report,
        pbs_report_table,
    ),
)
