"""`tsched evaluate`: every estimator x policy x backfilling x mode on every trace, as independent tasks.

The harness turns a plan into a flat list of tasks (the offline prediction
quality of each estimator, one simulation per configuration), runs them on
joblib worker processes or on a Dask cluster, and hands the results, in task
order, to the report. A task shares no state with any other (each simulation
has its own estimator, or its own namespace on the predictor service), so the
results are the same whatever the backend and however many workers run them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import ipaddress
import pickle
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np

from kernel.errors import TraceError, UsageError
from predictor.offline import scored_replay
from predictor.scoring import accuracy
from simulator.engine import SimulationConfig
from simulator.evaluation.plan import (
    BASELINE_ESTIMATOR,
    CDF_POINTS,
    Backend,
    EvaluationPlan,
    QualityResult,
    QualityTask,
    SimulationTask,
    Task,
    TaskError,
    TaskOutcome,
    TaskResult,
    TraceInput,
    build_tasks,
    clock,
    describe,
    task_costs,
)
from simulator.evaluation.report import ReportInputs, claim_report_folder, write_report
from simulator.experiment import DEFAULT_MAX_DROPPED_SHARE, refuse_oversized, run_simulation
from simulator.summary import RunSummary
from simulator.workloads.trace import Trace

if TYPE_CHECKING:
    from predictor.service.client import Credentials
    from predictor.service.launcher import ServerProcess

#: How long dropping a finished run's namespace may wait for a server busy with other runs.
FORGET_TIMEOUT_SECONDS = 120.0
#: An evaluation waits for the service rather than let a slow call (a model retraining) fall back to t_req.
EVALUATION_SERVICE_TIMEOUT = 600.0
#: Dask's scheduler port, when an address leaves it out.
DASK_PORT = 8786


def run_task(
    task: Task, trace: Trace, address: str | None, run_id: str, credentials: Credentials | None = None
) -> TaskOutcome:
    """Run one task on `trace`; `address` is the predictor service's (reached with `credentials`), or None."""
    started = time.perf_counter()
    result: TaskResult
    try:
        if isinstance(task, QualityTask):
            result = prediction_quality(trace, task.trace, task.estimator)
        else:
            result = _simulate(task, trace, address, run_id, credentials)
    except Exception as error:
        raise TaskError(f"{describe(task)}: {type(error).__name__}: {error}") from None
    return TaskOutcome(task, result, time.perf_counter() - started)


def prediction_quality(trace: Trace, label: str, spec: str) -> QualityResult:
    """The `predict-eval` scores of `spec` on `trace`, plus quantiles of its per-job accuracy."""
    if trace.jobs.empty:
        raise TraceError(f"trace {label}: no jobs to evaluate")
    row, frame = scored_replay(spec, trace.jobs)
    per_job = accuracy(frame["t_sched"].to_numpy(), frame["t_act"].to_numpy())
    cdf = np.quantile(per_job, np.linspace(0.0, 1.0, CDF_POINTS))
    return QualityResult(label, len(frame), row, tuple(cdf.tolist()))


def _simulate(
    task: SimulationTask, trace: Trace, address: str | None, run_id: str, credentials: Credentials | None
) -> RunSummary:
    config = SimulationConfig(
        task.procs,
        task.policy,
        task.backfill,
        task.mode,
        task.correction,
        task.backfill_order,
        task.max_reservation_delay,
    )
    namespace = f"evaluate-{run_id}-{task.index}"  # on the service; an in-process run has none
    summary, _ = run_simulation(
        trace,
        config,
        task.estimator,
        task.month,
        address,
        namespace,
        timeout=EVALUATION_SERVICE_TIMEOUT,
        credentials=credentials,
        load_factor=task.load_factor,
        replicate=task.replicate,
        jitter=task.jitter,
        max_dropped_share=1.0,  # the whole trace's share was checked before the evaluation started
    )
    if address is not None:
        _forget_namespace(address, namespace, credentials)
    return summary


def _forget_namespace(address: str, namespace: str, credentials: Credentials | None) -> None:
    """Drop a finished run's namespace: one server serves the whole evaluation, and would keep them all."""
    from predictor.service.client import PredictorClient

    with PredictorClient(address, timeout=FORGET_TIMEOUT_SECONDS, credentials=credentials) as client:
        client.reset_namespace(namespace, missing_ok=True)  # none for a run predicted in-process (the oracle)


# --- execution -------------------------------------------------------------------------------


class Progress:
    """One line on a stream, redrawn in place with `\\r`: runs done, elapsed time, estimated time left.

    `costs` are the tasks' expected costs, in task order (`plan.task_costs`),
    and the time left weighs each task by its cost: counting tasks alike, a
    sweep whose first runs are cheap (baselines, EASY) and last ones dear
    (lgbm-quantile, conservative) was promised a quarter of its real time.
    """

    WIDTH = 30

    def __init__(
        self, costs: Sequence[float], stream: TextIO | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.costs = list(costs)
        self.total = len(costs)
        self.total_cost = float(sum(costs))
        self.done = 0
        self.done_cost = 0.0
        self.stream = stream
        self._clock = clock
        self.started = clock()
        self._draw()

    def advance(self, index: int) -> None:
        """Task `index` (its place in the task list, whose costs this was made with) is done."""
        self.done += 1
        self.done_cost += self.costs[index]
        self._draw()

    def seconds_left(self) -> float | None:
        """Elapsed time scaled by the expected cost still to run; None before any task is done."""
        if self.done_cost <= 0:
            return None
        return (self._clock() - self.started) * max(self.total_cost - self.done_cost, 0.0) / self.done_cost

    def close(self) -> None:
        if self.stream is not None:
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self) -> None:
        if self.stream is None:
            return
        elapsed = self._clock() - self.started
        seconds = self.seconds_left()
        left = "?" if seconds is None else clock(seconds)
        filled = int(self.WIDTH * self.done_cost // max(self.total_cost, 1e-9))
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(f"\r[{bar}] {self.done}/{self.total} runs  elapsed {clock(elapsed)}  left {left} ")
        self.stream.flush()


def execute(
    tasks: Sequence[Task],
    traces: Mapping[str, Trace],
    backend: Backend,
    address: str | None,
    progress: Progress | None = None,
    credentials: Credentials | None = None,
) -> list[TaskOutcome]:
    """Run every task on the backend; outcomes come back in task order whatever order they finished in."""
    run_id = uuid.uuid4().hex[:12]
    if backend.dask_scheduler:
        stream = _dask_outcomes(tasks, traces, backend.dask_scheduler, address, run_id, credentials)
    else:
        stream = _joblib_outcomes(tasks, traces, backend.workers, address, run_id, credentials)
    outcomes = []
    for outcome in stream:
        outcomes.append(outcome)
        if progress is not None:
            progress.advance(outcome.task.index)
    return sorted(outcomes, key=lambda outcome: outcome.task.index)


@functools.lru_cache(maxsize=2)
def _trace_from_file(path: str) -> Trace:
    """A worker process unpickles each trace once, not once per task (tasks come grouped by trace)."""
    with open(path, "rb") as source:
        trace: Trace = pickle.load(source)
    return trace


def _run_task_from_file(
    task: Task, trace_file: str, address: str | None, run_id: str, credentials: Credentials | None
) -> TaskOutcome:
    return run_task(task, _trace_from_file(trace_file), address, run_id, credentials)


def _joblib_outcomes(
    tasks: Sequence[Task],
    traces: Mapping[str, Trace],
    workers: int,
    address: str | None,
    run_id: str,
    credentials: Credentials | None,
) -> Iterator[TaskOutcome]:
    """Tasks on `workers` processes (1: in this process); traces reach workers through files, once each."""
    from joblib import Parallel, delayed

    with tempfile.TemporaryDirectory(prefix="tsched-evaluate-") as folder:
        files: dict[str, str] = {}
        for number, (label, trace) in enumerate(traces.items()):
            files[label] = str(Path(folder) / f"trace-{number}.pickle")
            with open(files[label], "wb") as sink:
                pickle.dump(trace, sink, protocol=pickle.HIGHEST_PROTOCOL)
        parallel = Parallel(n_jobs=workers, return_as="generator_unordered")
        yield from parallel(
            delayed(_run_task_from_file)(task, files[task.trace], address, run_id, credentials) for task in tasks
        )


def _dask_outcomes(
    tasks: Sequence[Task],
    traces: Mapping[str, Trace],
    scheduler: str,
    address: str | None,
    run_id: str,
    credentials: Credentials | None,
) -> Iterator[TaskOutcome]:
    """Tasks on an existing Dask cluster; each trace is sent to every worker once."""
    from distributed import Client, as_completed

    with Client(scheduler) as client:
        shipped = dict(zip(traces, client.scatter(list(traces.values()), broadcast=True), strict=True))
        futures = [
            client.submit(run_task, task, shipped[task.trace], address, run_id, credentials, pure=False)
            for task in tasks
        ]
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
    family, _, _, _, scheduler = socket.getaddrinfo(
        host, int(port) if port.isdigit() else DASK_PORT, type=socket.SOCK_DGRAM
    )[0]
    if ipaddress.ip_address(scheduler[0]).is_loopback:
        return "127.0.0.1"
    with socket.socket(family, socket.SOCK_DGRAM) as probe:  # a UDP "connect" sends nothing: it only picks the route
        probe.connect(scheduler)
        own = probe.getsockname()[0]
    return f"[{own}]" if family == socket.AF_INET6 else own


def _start_service(
    backend: Backend, plan: EvaluationPlan, folder: Path, launcher: type[ServerProcess]
) -> tuple[ServerProcess, Credentials]:
    """The evaluation's predictor service, admitting only this run: a fresh token, handed to the tasks.

    On a Dask cluster the service listens on the network; the token keeps other users of it out.
    """
    from predictor.service.client import Credentials
    from predictor.service.server import Security

    token = secrets.token_hex(32)
    tokens = folder / "tokens"
    tokens.touch(mode=0o600)
    tokens.write_text(f"{token} * reset\n")
    server = launcher(
        listen=f"{service_host(backend.dask_scheduler)}:0",
        default_estimators=[BASELINE_ESTIMATOR],
        security=Security(tokens=str(tokens)),
    )
    return server, Credentials(token=token)


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
        line = (
            f"tsched evaluate: {self.simulations} simulations and {self.quality_replays} prediction-quality "
            f"replays on {self.traces} trace(s) in {clock(self.seconds)}; report: {self.report}"
        )
        return line if not self.fallbacks else f"{line} (WARNING: {self.fallbacks} predictions fell back to t_req)"


def equivalent_command(traces: Sequence[TraceInput], plan: EvaluationPlan, backend: Backend, out: Path) -> str:
    """The full command line that repeats this evaluation, every parameter spelled out."""
    words = ["tsched", "evaluate"]
    for entry in traces:
        if entry.path is not None:
            words += ["--traces", entry.path]
    words += next((entry.reading for entry in traces if entry.reading), ())  # one set of options reads them all
    if plan.procs is not None:
        words += ["--machine-procs", str(plan.procs)]
    if plan.max_dropped_share != DEFAULT_MAX_DROPPED_SHARE:
        words += ["--max-dropped-share", f"{plan.max_dropped_share:g}"]
    axes = {
        "--estimators": plan.estimators,
        "--policies": plan.policies,
        "--backfills": plan.backfills,
        "--modes": plan.modes,
        "--backfill-orders": plan.backfill_orders,
        "--corrections": plan.corrections,
        "--load-factors": [f"{factor:g}" for factor in plan.load_factors],
    }
    for option, values in axes.items():
        words += [option, ",".join(values)]
    if plan.replicates > 1:
        words += ["--replicates", str(plan.replicates), "--jitter", str(plan.jitter)]
    if plan.max_reservation_delay is not None:
        words += ["--max-reservation-delay", f"{plan.max_reservation_delay}s"]
    if plan.monthly:
        words.append("--monthly")
    words += ["--out", str(out)]
    words += (
        ["--dask-scheduler", backend.dask_scheduler] if backend.dask_scheduler else ["--workers", str(backend.workers)]
    )
    if backend.in_process:
        words.append("--in-process")
    return shlex.join(words)


def run_evaluation(
    traces: Sequence[TraceInput],
    plan: EvaluationPlan,
    out: Path,
    backend: Backend | None = None,
    show_progress: bool = True,
    force: bool = False,
) -> EvaluationOutcome:
    """Run the whole evaluation and write the report in `out`; the progress bar goes to stderr.

    Everything that can be refused is refused before the first task runs: the
    plan, the backend, and the report folder (`force` replaces a previous report).
    """
    backend = backend or Backend()
    _refuse_before_running(traces, plan, backend, out, force)
    tasks = build_tasks(traces, plan)
    started = time.monotonic()
    by_label = {entry.label: entry.trace for entry in traces}
    with _prediction_service(backend, plan) as (address, credentials):
        progress = Progress(task_costs(tasks, by_label), sys.stderr if show_progress else None)
        try:
            outcomes = execute(tasks, by_label, backend, address, progress, credentials)
        finally:
            progress.close()
    seconds = time.monotonic() - started
    command = equivalent_command(traces, plan, backend, out)
    report = write_report(out, ReportInputs(list(traces), plan, backend, outcomes, seconds, command))
    summaries = [outcome.result for outcome in outcomes if isinstance(outcome.result, RunSummary)]
    return EvaluationOutcome(
        report,
        len(summaries),
        len(outcomes) - len(summaries),
        len(traces),
        seconds,
        sum(summary.predictor_fallbacks for summary in summaries),
    )


def _refuse_before_running(
    traces: Sequence[TraceInput], plan: EvaluationPlan, backend: Backend, out: Path, force: bool
) -> None:
    """Refuse a bad plan, a backend that cannot run, an occupied report folder or two traces of one name."""
    plan.check()
    if backend.dask_scheduler and importlib.util.find_spec("distributed") is None:
        raise UsageError("--dask-scheduler needs Dask: pip install 'tsched[dask]'")
    for entry in traces:  # the whole trace, once: every task of it then runs with what this admitted
        refuse_oversized(entry.trace.jobs, entry.trace.machine_procs(plan.procs), plan.max_dropped_share, entry.label)
    claim_report_folder(out, force)
    labels = [entry.label for entry in traces]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise UsageError(f"two traces share the name {repeated[0]!r}; rename one of the files")
    if backend.workers < 1:
        raise UsageError(f"--workers must be at least 1, not {backend.workers}")


@contextlib.contextmanager
def _prediction_service(backend: Backend, plan: EvaluationPlan) -> Iterator[tuple[str | None, Credentials | None]]:
    """The address of the evaluation's predictor service and the credentials it admits, while the tasks run;
    (None, None) when the tasks predict in-process."""
    if backend.in_process:
        yield None, None
        return
    from predictor.service.launcher import ServerProcess

    with tempfile.TemporaryDirectory(prefix="tsched-evaluate-service-") as secrets_folder:
        server, credentials = _start_service(backend, plan, Path(secrets_folder), ServerProcess)
        try:
            yield server.address, credentials
        finally:
            _stop_service(server)
