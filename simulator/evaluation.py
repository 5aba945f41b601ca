"""`tsched evaluate`: every estimator x policy x backfilling x mode on every trace, as independent tasks.

The harness turns a plan into a flat list of tasks (the offline prediction
quality of each estimator, one simulation per configuration), runs them on
joblib worker processes or on a Dask cluster, and hands the results, in task
order, to the report. A task shares no state with any other (each simulation
has its own estimator, or its own namespace on the predictor service), so the
results are the same whatever the backend and however many workers run them.
"""
from __future__ import annotations

import functools
import hashlib
import ipaddress
import pickle
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from predictor.offline import scored_replay
from predictor.registry import SpecError, make_estimator
from predictor.scoring import accuracy
from simulator.backfill import BACKFILLS
from simulator.engine import SimulationConfig
from simulator.experiment import run_simulation
from simulator.machine import MODES
from simulator.policies import POLICIES
from simulator.swf import Trace, read_swf
from simulator.workload import DEFAULT_JOBS, DEFAULT_LOAD, DEFAULT_PROCS, DEFAULT_SEED, default_workload

if TYPE_CHECKING:
    from predictor.service import ServerProcess

#: The baseline every run is compared with: the users' requests, used as they are.
BASELINE_ESTIMATOR = "request"
BASELINE_MODE = "none"
#: Tang et al.'s three percentile schemes (triple key, 30-day window) and the other estimators.
DEFAULT_ESTIMATORS = ("request", "percentile:q=95", "percentile:q=85", "percentile:q=70", "last2", "mean-std",
                      "lgbm-quantile")
DEFAULT_POLICIES = ("wfp", "fcfs")
DEFAULT_BACKFILLS = ("easy",)
DEFAULT_MODES = ("regular", "selective")
PREDICTION_MODES = tuple(mode for mode in MODES if mode != BASELINE_MODE)
#: Quantiles kept of each estimator's per-job accuracy: enough for a smooth CDF (Tang's Figure 11).
CDF_POINTS = 201
BUILTIN_LABEL = "synthetic"
#: How long dropping a finished run's namespace may wait for a server busy with other runs.
FORGET_TIMEOUT_SECONDS = 120.0
#: An evaluation waits for the service rather than let a slow call (a model retraining) fall back to t_req.
EVALUATION_SERVICE_TIMEOUT = 600.0
#: Dask's scheduler port, when an address leaves it out.
DASK_PORT = 8786


def split_specs(texts: Iterable[str]) -> list[str]:
    """Estimator SPECs from comma-separated lists, e.g. `request,percentile:q=95,window=60d,last2`.

    A SPEC's own parameters are comma-separated too, so an item of the form
    `key=value` (with no `:`) continues the SPEC before it.
    """
    specs: list[str] = []
    for text in texts:
        first = len(specs)
        for item in (part.strip() for part in text.split(",")):
            if not item:
                raise SpecError(f"--estimators {text!r}: empty item")
            if "=" in item and ":" not in item:
                if len(specs) == first:
                    raise SpecError(f"--estimators {text!r}: parameter {item!r} follows no estimator name")
                specs[-1] += "," + item
            else:
                specs.append(item)
    return list(dict.fromkeys(specs))


def split_choices(text: str, allowed: Sequence[str], option: str) -> tuple[str, ...]:
    """A comma-separated list of names, each one of `allowed`, without repeats."""
    items = tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        named = ", ".join(repr(item) for item in unknown) or "nothing"
        raise ValueError(f"{option} {text!r}: {named} is not one of {', '.join(allowed)}")
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

    def check(self) -> None:
        """Refuse a bad SPEC, policy, backfilling or mode before anything runs."""
        for spec in self.estimators:
            make_estimator(spec)
        for values, allowed, option in ((self.policies, POLICIES, "--policies"),
                                        (self.backfills, BACKFILLS, "--backfill"),
                                        (self.modes, PREDICTION_MODES, "--modes")):
            split_choices(",".join(values), allowed, option)

    @property
    def quality_estimators(self) -> tuple[str, ...]:
        """Every estimator scored offline; the baseline too, as the reference (Figure 11's "original")."""
        return tuple(dict.fromkeys((BASELINE_ESTIMATOR, *self.estimators)))

    @property
    def predicting_estimators(self) -> tuple[str, ...]:
        """Estimators simulated in each mode; `request` in any mode is the baseline itself (t_sched = t_req)."""
        return tuple(spec for spec in self.estimators if spec != BASELINE_ESTIMATOR)

    def uses_oracle(self) -> bool:
        return any(make_estimator(spec).evaluation_only for spec in self.estimators)


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


def load_trace_input(path: str) -> TraceInput:
    """A trace file, named by its file name and identified by its SHA-256."""
    trace = read_swf(path)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    label = Path(path).name.removesuffix(".gz").removesuffix(".swf")
    return TraceInput(label, trace, f"{path} (sha256 {digest})", path)


def builtin_trace_input() -> TraceInput:
    provenance = (f"built-in synthetic workload (simulator.workload.default_workload: {DEFAULT_JOBS} jobs, "
                  f"{DEFAULT_PROCS} processors, offered load {DEFAULT_LOAD}, seed {DEFAULT_SEED})")
    return TraceInput(BUILTIN_LABEL, default_workload(), provenance)


def months_with_jobs(trace: Trace) -> list[str]:
    """The calendar months in which at least one replayable job was submitted."""
    submit = trace.jobs["submit"].to_numpy()
    return [name for name, start, end in trace.month_bounds()
            if np.searchsorted(submit, end) > np.searchsorted(submit, start)]


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

    @property
    def is_baseline(self) -> bool:
        return self.estimator == BASELINE_ESTIMATOR and self.mode == BASELINE_MODE


Task = QualityTask | SimulationTask


def build_tasks(traces: Sequence[TraceInput], plan: EvaluationPlan) -> list[Task]:
    """Per trace: the quality replays, then per period x policy x backfilling the baseline and every run."""
    tasks: list[Task] = []
    for entry in traces:
        for spec in plan.quality_estimators:
            tasks.append(QualityTask(len(tasks), entry.label, spec))
        procs = entry.trace.machine_procs(plan.procs)
        periods: list[str | None] = list(months_with_jobs(entry.trace)) if plan.monthly else [None]
        for month in periods:
            for policy in plan.policies:
                for backfill in plan.backfills:
                    runs = [(BASELINE_ESTIMATOR, BASELINE_MODE)]
                    runs += [(spec, mode) for spec in plan.predicting_estimators for mode in plan.modes]
                    for spec, mode in runs:
                        tasks.append(SimulationTask(len(tasks), entry.label, month, spec, policy, backfill, mode, procs))
    return tasks


@dataclass(frozen=True)
class TaskOutcome:
    """What a task produced, and how long it took (kept apart: timings differ from run to run)."""

    task: Task
    result: dict[str, Any]
    seconds: float


class TaskError(RuntimeError):
    """A task that failed, named, with its cause's message (and picklable, to cross process boundaries)."""


def describe(task: Task) -> str:
    """A task in words, for error messages."""
    if isinstance(task, QualityTask):
        return f"prediction quality of {task.estimator} on {task.trace}"
    period = f" {task.month}" if task.month else ""
    return (f"simulation of {task.trace}{period}, {task.policy} + {task.backfill}, estimator {task.estimator}, "
            f"mode {task.mode}")


def run_task(task: Task, trace: Trace, address: str | None, run_id: str) -> TaskOutcome:
    """Run one task on `trace`; `address` is the predictor service's, or None for in-process."""
    started = time.perf_counter()
    try:
        if isinstance(task, QualityTask):
            result = prediction_quality(trace, task.trace, task.estimator)
        else:
            result = _simulate(task, trace, address, run_id)
    except Exception as error:  # noqa: BLE001 - any failure is reported with the task it broke
        raise TaskError(f"{describe(task)}: {type(error).__name__}: {error}") from None
    return TaskOutcome(task, result, time.perf_counter() - started)


def prediction_quality(trace: Trace, label: str, spec: str) -> dict[str, Any]:
    """The `predict-eval` scores of `spec` on `trace`, plus quantiles of its per-job accuracy."""
    if trace.jobs.empty:
        raise ValueError(f"trace {label}: no jobs to evaluate")
    row, frame = scored_replay(spec, trace.jobs)
    per_job = accuracy(frame["t_sched"].to_numpy(), frame["t_act"].to_numpy())
    cdf = np.quantile(per_job, np.linspace(0.0, 1.0, CDF_POINTS))
    return {"trace": label, "jobs": len(frame), **row, "accuracy_quantiles": cdf.tolist()}


def _simulate(task: SimulationTask, trace: Trace, address: str | None, run_id: str) -> dict[str, Any]:
    config = SimulationConfig(task.procs, task.policy, task.backfill, task.mode)
    if address is None:
        summary, _ = run_simulation(trace, config, task.estimator, task.month)
    else:
        namespace = f"evaluate-{run_id}-{task.index}"
        summary, _ = run_simulation(trace, config, task.estimator, task.month, address, namespace,
                                    timeout=EVALUATION_SERVICE_TIMEOUT)
        _forget_namespace(address, namespace)
    return result_row(task.trace, summary)


def _forget_namespace(address: str, namespace: str) -> None:
    """Drop a finished run's namespace: one server serves the whole evaluation, and would keep them all."""
    from predictor.client import PredictorClient

    with PredictorClient(address, timeout=FORGET_TIMEOUT_SECONDS) as client:
        client.reset_namespace(namespace)


def result_row(label: str, summary: Mapping[str, Any]) -> dict[str, Any]:
    """One flat results.csv row from `run_simulation`'s summary: parameters, then every metric."""
    row = {key: value for key, value in summary.items() if key not in ("trace", "skipped", "prediction")}
    row["trace"] = label
    row["month"] = summary["month"] or ""
    row["skipped"] = "; ".join(f"{reason}: {count}" for reason, count in summary["skipped"].items())
    row.update({f"prediction_{key}": value for key, value in summary["prediction"].items()})
    order = ["trace", "month", "estimator", "policy", "backfill", "mode", "correction", "procs", "jobs", "skipped"]
    return {key: row[key] for key in order} | {key: value for key, value in row.items() if key not in order}


# --- execution -------------------------------------------------------------------------------

class Progress:
    """One line on a stream, redrawn in place with `\\r`: runs done, elapsed time, estimated time left."""

    WIDTH = 30

    def __init__(self, total: int, stream: TextIO | None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream
        self.started = time.monotonic()
        self._draw()

    def advance(self) -> None:
        self.done += 1
        self._draw()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self) -> None:
        if self.stream is None:
            return
        elapsed = time.monotonic() - self.started
        left = "?" if self.done == 0 else clock(elapsed / self.done * (self.total - self.done))
        filled = self.WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(f"\r[{bar}] {self.done}/{self.total} runs  elapsed {clock(elapsed)}  left {left} ")
        self.stream.flush()


def clock(seconds: float) -> str:
    """`m:ss`, or `h:mm:ss` from an hour up."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def execute(tasks: Sequence[Task], traces: Mapping[str, Trace], backend: Backend, address: str | None,
            progress: Progress | None = None) -> list[TaskOutcome]:
    """Run every task on the backend; outcomes come back in task order whatever order they finished in."""
    run_id = uuid.uuid4().hex[:12]
    if backend.dask_scheduler:
        stream = _dask_outcomes(tasks, traces, backend.dask_scheduler, address, run_id)
    else:
        stream = _joblib_outcomes(tasks, traces, backend.workers, address, run_id)
    outcomes = []
    for outcome in stream:
        outcomes.append(outcome)
        if progress is not None:
            progress.advance()
    return sorted(outcomes, key=lambda outcome: outcome.task.index)


@functools.lru_cache(maxsize=2)
def _trace_from_file(path: str) -> Trace:
    """A worker process unpickles each trace once, not once per task (tasks come grouped by trace)."""
    with open(path, "rb") as source:
        return pickle.load(source)


def _run_task_from_file(task: Task, trace_file: str, address: str | None, run_id: str) -> TaskOutcome:
    return run_task(task, _trace_from_file(trace_file), address, run_id)


def _joblib_outcomes(tasks: Sequence[Task], traces: Mapping[str, Trace], workers: int, address: str | None,
                     run_id: str) -> Iterator[TaskOutcome]:
    """Tasks on `workers` processes (1: in this process); traces reach workers through files, once each."""
    from joblib import Parallel, delayed

    with tempfile.TemporaryDirectory(prefix="tsched-evaluate-") as folder:
        files: dict[str, str] = {}
        for number, (label, trace) in enumerate(traces.items()):
            files[label] = str(Path(folder) / f"trace-{number}.pickle")
            with open(files[label], "wb") as sink:
                pickle.dump(trace, sink, protocol=pickle.HIGHEST_PROTOCOL)
        parallel = Parallel(n_jobs=workers, return_as="generator_unordered")
        yield from parallel(delayed(_run_task_from_file)(task, files[task.trace], address, run_id) for task in tasks)


def _dask_outcomes(tasks: Sequence[Task], traces: Mapping[str, Trace], scheduler: str, address: str | None,
                   run_id: str) -> Iterator[TaskOutcome]:
    """Tasks on an existing Dask cluster; each trace is sent to every worker once."""
    from distributed import Client, as_completed

    with Client(scheduler) as client:
        shipped = dict(zip(traces, client.scatter(list(traces.values()), broadcast=True)))
        futures = [client.submit(run_task, task, shipped[task.trace], address, run_id, pure=False) for task in tasks]
        for future in as_completed(futures):
            yield future.result()


def service_host(dask_scheduler: str | None) -> str:
    """The address the predictor service listens on: loopback, unless Dask workers on other hosts need it.

    For a remote scheduler, it is this machine's address on the route to it.
    """
    if not dask_scheduler:
        return "127.0.0.1"
    scheme, _, location = dask_scheduler.rpartition("://")
    if scheme == "inproc":
        return "127.0.0.1"
    if location.startswith("["):  # [IPv6]:port
        host, _, rest = location[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = location.partition(":")
    family, _, _, _, scheduler = socket.getaddrinfo(host, int(port) if port.isdigit() else DASK_PORT,
                                                    type=socket.SOCK_DGRAM)[0]
    if ipaddress.ip_address(scheduler[0]).is_loopback:
        return "127.0.0.1"
    with socket.socket(family, socket.SOCK_DGRAM) as probe:  # a UDP "connect" sends nothing: it only picks the route
        probe.connect(scheduler)
        own = probe.getsockname()[0]
    return f"[{own}]" if family == socket.AF_INET6 else own


def _stop_service(server: ServerProcess) -> None:
    """Stop the evaluation's server; one still busy (training a model for a run now abandoned) is killed."""
    try:
        server.stop()
    except subprocess.TimeoutExpired:
        server.stop(signal.SIGKILL)


# --- the command -----------------------------------------------------------------------------

@dataclass
class EvaluationOutcome:
    """Where the report is and what went into it, for the closing summary line."""

    report: Path
    simulations: int
    quality_replays: int
    traces: int
    seconds: float
    fallbacks: int = 0

    def summary(self) -> str:
        line = (f"tsched evaluate: {self.simulations} simulations and {self.quality_replays} prediction-quality "
                f"replays on {self.traces} trace(s) in {clock(self.seconds)}; report: {self.report}")
        return line if not self.fallbacks else f"{line} (WARNING: {self.fallbacks} predictions fell back to t_req)"


def equivalent_command(traces: Sequence[TraceInput], plan: EvaluationPlan, backend: Backend, out: Path) -> str:
    """The full command line that repeats this evaluation, every parameter spelled out."""
    words = ["tsched", "evaluate"]
    for entry in traces:
        if entry.path is not None:
            words += ["--trace", entry.path]
    if plan.procs is not None:
        words += ["--procs", str(plan.procs)]
    words += ["--estimators", ",".join(plan.estimators), "--policies", ",".join(plan.policies),
              "--backfill", ",".join(plan.backfills), "--modes", ",".join(plan.modes)]
    if plan.monthly:
        words.append("--monthly")
    words += ["--out", str(out)]
    words += ["--dask-scheduler", backend.dask_scheduler] if backend.dask_scheduler else ["--workers", str(backend.workers)]
    if backend.in_process:
        words.append("--in-process")
    return shlex.join(words)


def run_evaluation(traces: Sequence[TraceInput], plan: EvaluationPlan, out: Path, backend: Backend = Backend(),
                   show_progress: bool = True) -> EvaluationOutcome:
    """Run the whole evaluation and write the report in `out`; the progress bar goes to stderr."""
    plan.check()
    labels = [entry.label for entry in traces]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"two traces share the name {repeated[0]!r}; rename one of the files")
    if backend.workers < 1:
        raise ValueError(f"--workers must be at least 1, not {backend.workers}")
    tasks = build_tasks(traces, plan)
    started = time.monotonic()
    server = None
    if not backend.in_process:
        from predictor.service import ServerProcess

        server = ServerProcess(listen=f"{service_host(backend.dask_scheduler)}:0",
                               default_estimators=[BASELINE_ESTIMATOR], allow_oracle=plan.uses_oracle())
    progress = Progress(len(tasks), sys.stderr if show_progress else None)
    try:
        outcomes = execute(tasks, {entry.label: entry.trace for entry in traces}, backend,
                           None if server is None else server.address, progress)
    finally:
        progress.close()
        if server is not None:
            _stop_service(server)
    seconds = time.monotonic() - started

    from simulator.report import ReportInputs, write_report

    inputs = ReportInputs(traces=list(traces), plan=plan, backend=backend, outcomes=outcomes, seconds=seconds,
                          command=equivalent_command(traces, plan, backend, out))
    report_path = write_report(out, inputs)
    simulations = [outcome for outcome in outcomes if isinstance(outcome.task, SimulationTask)]
    return EvaluationOutcome(report_path, len(simulations), len(outcomes) - len(simulations), len(traces), seconds,
                             sum(int(outcome.result["predictor_fallbacks"]) for outcome in simulations))
