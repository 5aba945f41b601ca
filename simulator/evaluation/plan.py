"""What `tsched evaluate` runs: the plan, its tasks, the inputs they name and what they produce.

A leaf of the evaluation package: the execution, the tables and the report
read these definitions, and nothing here imports any of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernel.durations import slurm_clock
from kernel.errors import SpecError, UsageError
from predictor.digests import sha256_of
from simulator.backfill import BACKFILL_ORDERS, BACKFILLS, DEFAULT_MAX_RESERVATION_DELAY, ORDERLESS
from simulator.dynp import canonical_policy
from simulator.estimators import make_estimator
from simulator.experiment import DEFAULT_MAX_DROPPED_SHARE
from simulator.machine import CORRECTIONS, MODES
from simulator.summary import RunSummary
from simulator.workloads.formats import detect_format, read_trace
from simulator.workloads.replicates import DEFAULT_JITTER_SECONDS
from simulator.workloads.sitelog import SizeUnit
from simulator.workloads.synthetic import DEFAULT_JOBS, DEFAULT_LOAD, DEFAULT_PROCS, DEFAULT_SEED, default_workload
from simulator.workloads.trace import Trace

#: The baseline every run is compared with: the users' requests, used as they are.
BASELINE_ESTIMATOR = "request"
BASELINE_MODE = "none"
#: Tang et al.'s three percentile schemes (triple key, 30-day window) and the other estimators.
DEFAULT_ESTIMATORS = (
    "request",
    "percentile:q=95",
    "percentile:q=85",
    "percentile:q=70",
    "last2",
    "mean-std",
    "lgbm-quantile",
)
DEFAULT_POLICIES = ("wfp", "fcfs")
DEFAULT_BACKFILLS = ("easy",)
DEFAULT_MODES = ("regular", "selective")
DEFAULT_BACKFILL_ORDERS = ("queue",)
DEFAULT_CORRECTIONS = ("request",)
DEFAULT_LOAD_FACTORS = (1.0,)
#: The backfill order every other is compared with when it runs too: plain EASY (Gaussier et al.'s reference).
REFERENCE_ORDER = "queue"
PREDICTION_MODES = tuple(mode for mode in MODES if mode != BASELINE_MODE)
#: The one mode that shows the scheduler a running job's prediction, and so the one that runs once per
#: correction of a running job past it (the others never correct one).
CORRECTED_MODE = "regular"
#: Quantiles kept of each estimator's per-job accuracy: enough for a smooth CDF (Tang's Figure 11).
CDF_POINTS = 201
BUILTIN_LABEL = "synthetic"
#: Where `tsched evaluate` writes its report without --out.
DEFAULT_REPORT_FOLDER = "tsched-report"


def split_specs(texts: Iterable[str], option: str = "--estimators", what: str = "estimator") -> list[str]:
    """SPECs from comma-separated lists, e.g. `request,percentile:q=95,window=60d,last2` (estimators) or
    `fcfs,dynp:decider=simple,quality=sldwa` (policies).

    A SPEC's own parameters are comma-separated too, so an item of the form
    `key=value` (with no `:`) continues the SPEC before it.
    """
    specs: list[str] = []
    for text in texts:
        first = len(specs)
        for item in (part.strip() for part in text.split(",")):
            if not item:
                raise SpecError(f"{option} {text!r}: empty item")
            if "=" in item and ":" not in item:
                if len(specs) == first:
                    raise SpecError(f"{option} {text!r}: parameter {item!r} follows no {what} name")
                specs[-1] += "," + item
            else:
                specs.append(item)
    return list(dict.fromkeys(specs))


def split_policies(text: str) -> tuple[str, ...]:
    """Policy SPECs from a comma-separated list, each checked and spelled out in full (simulator.dynp), without
    repeats: `dynp` and `dynp:decider=advanced` are one policy."""
    specs = split_specs([text], "--policies", "policy")
    try:
        return tuple(dict.fromkeys(canonical_policy(spec) for spec in specs))
    except ValueError as error:
        raise UsageError(f"--policies: {error}") from None


def split_numbers(text: str, option: str) -> tuple[float, ...]:
    """A comma-separated list of positive numbers, without repeats (e.g. load factors `1,1.2`)."""
    try:
        numbers = tuple(dict.fromkeys(float(item) for item in text.split(",") if item.strip()))
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected comma-separated numbers such as 1,1.2") from None
    if not numbers or not all(0 < number < float("inf") for number in numbers):
        raise UsageError(f"{option} {text!r}: expected positive numbers such as 1,1.2")
    return numbers


def split_choices(text: str, allowed: Sequence[str], option: str) -> tuple[str, ...]:
    """A comma-separated list of names, each one of `allowed`, without repeats."""
    items = tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        named = ", ".join(repr(item) for item in unknown) or "nothing"
        raise UsageError(f"{option} {text!r}: {named} is not one of {', '.join(allowed)}")
    return items


@dataclass(frozen=True)
class EvaluationPlan:
    """What to run on every trace. The baseline (request, mode none) always runs."""

    estimators: tuple[str, ...] = DEFAULT_ESTIMATORS
    policies: tuple[str, ...] = DEFAULT_POLICIES
    backfills: tuple[str, ...] = DEFAULT_BACKFILLS
    modes: tuple[str, ...] = DEFAULT_MODES
    monthly: bool = False
    procs: int | None = None
    backfill_orders: tuple[str, ...] = DEFAULT_BACKFILL_ORDERS
    #: Only regular mode runs once per correction: the others never correct a running job.
    corrections: tuple[str, ...] = DEFAULT_CORRECTIONS
    load_factors: tuple[float, ...] = DEFAULT_LOAD_FACTORS
    #: Replicates 0..K-1 of every period (0: the trace itself; `simulator.workloads.replicates`).
    replicates: int = 1
    jitter: int = DEFAULT_JITTER_SECONDS
    #: A trace whose jobs larger than the machine are more than this share is refused before any task runs.
    max_dropped_share: float = DEFAULT_MAX_DROPPED_SHARE
    #: EASY's bound on how far backfilled jobs that outlive their estimates may push the head (seconds; None: none).
    max_reservation_delay: int | None = DEFAULT_MAX_RESERVATION_DELAY

    def check(self) -> None:
        """Refuse a bad SPEC, policy, backfilling, order, correction, mode or load before anything runs."""
        for spec in self.estimators:
            make_estimator(spec)
        if not self.policies:
            raise UsageError("--policies: no policy given")
        for policy in self.policies:
            split_policies(policy)
        for values, allowed, option in (
            (self.backfills, BACKFILLS, "--backfills"),
            (self.modes, PREDICTION_MODES, "--modes"),
            (self.backfill_orders, BACKFILL_ORDERS, "--backfill-orders"),
            (self.corrections, CORRECTIONS, "--corrections"),
        ):
            split_choices(",".join(values), allowed, option)
        orderless = [backfill for backfill in self.backfills if backfill in ORDERLESS]
        if orderless and "sjf" in self.backfill_orders:
            raise UsageError(f"--backfills {orderless[0]} has no backfill order: leave sjf out of --backfill-orders")
        if not self.load_factors or not all(0 < factor < float("inf") for factor in self.load_factors):
            raise UsageError(f"--load-factors: every factor must be a positive number, not {self.load_factors}")
        if self.replicates < 1 or self.jitter < 0:
            raise UsageError(
                f"--replicates must be 1 or more and --jitter 0 or more, not {self.replicates} and {self.jitter}"
            )
        if self.replicates > 1 and self.monthly:
            raise UsageError(
                "--replicates with --monthly: the monthly protocol already averages one draw per month; "
                "run replicates on whole traces"
            )

    @property
    def quality_estimators(self) -> tuple[str, ...]:
        """Every estimator scored offline; the baseline too, as the reference (Figure 11's "original")."""
        return tuple(dict.fromkeys((BASELINE_ESTIMATOR, *self.estimators)))

    @property
    def predicting_estimators(self) -> tuple[str, ...]:
        """Estimators simulated in each mode; `request` in any mode is the baseline itself (t_sched = t_req)."""
        return tuple(spec for spec in self.estimators if spec != BASELINE_ESTIMATOR)


@dataclass(frozen=True)
class Backend:
    """Where tasks run: `workers` joblib processes, or the Dask cluster at `dask_scheduler`."""

    workers: int = 1
    dask_scheduler: str | None = None
    in_process: bool = False

    def describe(self) -> str:
        where = f"Dask cluster at {self.dask_scheduler}" if self.dask_scheduler else f"joblib, {self.workers} worker(s)"
        return f"{where}; predictions {'in-process' if self.in_process else 'through the gRPC service'}"


@dataclass(frozen=True)
class TraceInput:
    """A workload to evaluate: its short name in tables and file names, and how to get it again."""

    label: str
    trace: Trace
    provenance: str
    path: str | None = None  # the --trace argument; None for a workload made in memory
    #: How it was read, as the command line says it (--format, --timezone, ...): the reproduce line repeats them.
    reading: tuple[str, ...] = ()


def load_trace_input(
    path: str,
    format: str | None = None,
    *,
    lenient: bool = False,
    timezone: str | None = None,
    size: SizeUnit | None = None,
    default_request: int | None = None,
) -> TraceInput:
    """A trace in any format (`read_trace`'s arguments), named by its file name and identified by its SHA-256."""
    trace = read_trace(path, format, lenient=lenient, timezone=timezone, size=size, default_request=default_request)
    trace.require_jobs()
    label = Path(path).name.removesuffix(".gz").removesuffix(".swf")
    site_log = (format or detect_format(path)) != "swf"
    options = {
        "--format": format,
        "--timezone": timezone or (trace.header.time_zone_string if site_log else None),  # the zone read in, always
        "--size-unit": size,
        "--default-request": None if default_request is None else slurm_clock(default_request),
    }
    reading = tuple(word for option, value in options.items() if value for word in (option, value))
    reading += ("--lenient",) * lenient
    return TraceInput(label, trace, f"{path} (sha256 {sha256_of(path)})", path, reading)


def builtin_trace_input() -> TraceInput:
    provenance = (
        f"built-in synthetic workload (simulator.workloads.synthetic.default_workload: {DEFAULT_JOBS} jobs, "
        f"{DEFAULT_PROCS} processors, offered load {DEFAULT_LOAD}, seed {DEFAULT_SEED})"
    )
    return TraceInput(BUILTIN_LABEL, default_workload(), provenance)


def months_with_jobs(trace: Trace) -> list[str]:
    """The calendar months in which at least one replayable job was submitted."""
    submit = trace.jobs["submit"].to_numpy()
    return [
        name
        for name, start, end in trace.month_bounds()
        if np.searchsorted(submit, end) > np.searchsorted(submit, start)
    ]


# --- tasks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class QualityTask:
    """Offline prediction quality of one estimator on one whole trace (as `predict-eval`)."""

    index: int
    trace: str
    estimator: str


@dataclass(frozen=True)
class SimulationTask:
    """One simulation: a trace (or one month of it) under one scheduler configuration and estimator."""

    index: int
    trace: str
    month: str | None
    estimator: str
    policy: str
    backfill: str
    mode: str
    procs: int
    backfill_order: str = "queue"
    correction: str = "request"
    load_factor: float = 1.0
    replicate: int = 0
    jitter: int = 0
    max_reservation_delay: int | None = DEFAULT_MAX_RESERVATION_DELAY

    @property
    def is_baseline(self) -> bool:
        return self.estimator == BASELINE_ESTIMATOR and self.mode == BASELINE_MODE


Task = QualityTask | SimulationTask

#: A task's expected cost per job of its period, relative to a simulation with EASY and a history estimator,
#: from the timings of README's evaluations (timings.csv): conservative backfilling re-plans every
#: reservation at each event; lgbm-quantile trains; an offline replay skips the scheduler.
BACKFILL_COST = {"conservative": 12.0}
ESTIMATOR_COST = {"lgbm-quantile": 15.0}
QUALITY_COST = 0.5


def expected_cost(task: Task, jobs: int) -> float:
    """What `task` is expected to cost (in units of one job simulated with EASY and a history estimator)."""
    extra = ESTIMATOR_COST.get(task.estimator.partition(":")[0], 0.0)
    if isinstance(task, QualityTask):
        return jobs * (QUALITY_COST + extra)
    return jobs * (1.0 + BACKFILL_COST.get(task.backfill, 0.0) + extra)


def task_costs(tasks: Sequence[Task], traces: Mapping[str, Trace]) -> list[float]:
    """Every task's `expected_cost`, from the jobs of its period (a month's, or the whole trace's)."""
    jobs: dict[tuple[str, str | None], int] = {}
    for label, trace in traces.items():
        jobs[(label, None)] = len(trace.jobs)
        submits = np.sort(trace.jobs["submit"].to_numpy())
        for month, start, end in trace.month_bounds():
            jobs[(label, month)] = int(np.searchsorted(submits, end) - np.searchsorted(submits, start))
    return [
        expected_cost(task, jobs[(task.trace, task.month if isinstance(task, SimulationTask) else None)])
        for task in tasks
    ]


def _runs(plan: EvaluationPlan) -> list[tuple[str, str, str]]:
    """(estimator, mode, correction) of one scheduler configuration: the baseline first, regular mode once per
    correction, the other modes once (they never correct a running job)."""
    runs = [(BASELINE_ESTIMATOR, BASELINE_MODE, plan.corrections[0])]
    for spec in plan.predicting_estimators:
        for mode in plan.modes:
            corrections = plan.corrections if mode == CORRECTED_MODE else plan.corrections[:1]
            runs += [(spec, mode, correction) for correction in corrections]
    return runs


def build_tasks(traces: Sequence[TraceInput], plan: EvaluationPlan) -> list[Task]:
    """Per trace: the quality replays, then per period x load x replicate x policy x backfilling x order the
    baseline and every run."""
    tasks: list[Task] = []
    for entry in traces:
        for spec in plan.quality_estimators:
            tasks.append(QualityTask(len(tasks), entry.label, spec))
        procs = entry.trace.machine_procs(plan.procs)
        periods: list[str | None] = list(months_with_jobs(entry.trace)) if plan.monthly else [None]
        configurations = itertools.product(
            periods, plan.load_factors, range(plan.replicates), plan.policies, plan.backfills, plan.backfill_orders
        )
        for month, load_factor, replicate, policy, backfill, order in configurations:
            if backfill in ORDERLESS and order != REFERENCE_ORDER:
                continue
            for spec, mode, correction in _runs(plan):
                tasks.append(
                    SimulationTask(
                        len(tasks),
                        entry.label,
                        month,
                        spec,
                        policy,
                        backfill,
                        mode,
                        procs,
                        order,
                        correction,
                        load_factor,
                        replicate,
                        plan.jitter if replicate else 0,
                        plan.max_reservation_delay,
                    )
                )
    return tasks


@dataclass(frozen=True)
class QualityResult:
    """One estimator's offline prediction quality on one trace (`QualityTask`'s result)."""

    trace: str
    jobs: int
    #: `predict-eval`'s row: the estimator's SPEC, then its scores.
    scores: dict[str, Any]
    #: `CDF_POINTS` evenly spaced quantiles of the per-job accuracy (a CDF, Tang's Figure 11).
    accuracy_quantiles: tuple[float, ...]

    def to_row(self) -> dict[str, Any]:
        """The quality.csv row: the trace, its jobs, then `predict-eval`'s row."""
        return {"trace": self.trace, "jobs": self.jobs, **self.scores}


#: What a task produces: a quality replay's scores, or a simulation's summary.
TaskResult = QualityResult | RunSummary


@dataclass(frozen=True)
class TaskOutcome:
    """What a task produced, and how long it took (kept apart: timings differ from run to run)."""

    task: Task
    result: TaskResult
    seconds: float


class TaskError(RuntimeError):
    """A task that failed, named, with its cause's message (and picklable, to cross process boundaries)."""


def describe(task: Task) -> str:
    """A task in words, for error messages."""
    if isinstance(task, QualityTask):
        return f"prediction quality of {task.estimator} on {task.trace}"
    period = f" {task.month}" if task.month else ""
    load = f", load x{task.load_factor:g}" if task.load_factor != 1 else ""
    load += f", replicate {task.replicate}" if task.replicate else ""
    return (
        f"simulation of {task.trace}{period}{load}, {task.policy} + {task.backfill} ({task.backfill_order} order), "
        f"estimator {task.estimator}, mode {task.mode}, correction {task.correction}"
    )


def clock(seconds: float) -> str:
    """`m:ss`, or `h:mm:ss` from an hour up."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
