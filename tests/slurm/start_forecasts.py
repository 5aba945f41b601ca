"""Forecasts of start times against Slurm's own (`squeue --start`) on the live runs (issue 26, item 5).

A pending job's planned start, which `squeue --start` prints, is set by
Slurm's backfill scheduler in each cycle and, with `DebugFlags=Backfill`, logged
(`_dump_job_sched: JobId=N to start at T`, in the captured `backfill.log.gz`).
Every job the backfill scheduler planned is asked about at the first cycle
that planned it (within a second or two of its submission): Slurm's answer is
that line's start. tsched's is a forward run of its `slurm` scheduler on the
run's nodes (`simulator.clusterforecast`, as `ForecastStart` runs it) from the state at that
moment, as a scheduler would send it to `ForecastStart`:

- the jobs running then (sacct's starts and ends), each to end as the service
  expects (`predictor.forecasting.running_ends`: at its start plus its
  estimate, or once it has outlived it at the conditional median of Downey's
  lifetime model of the jobs ended before, `predictor.lifetimes`);
- the jobs pending then in submission order, those the cycle planned put in
  its order (Slurm's priority order) in the places they hold, each to run for
  its estimate; nothing arrives after.

The jobs' requests are sacct's reading of them (`read_sacct_requests`), which
uses what the job was given (AllocTRES, NodeList) to tell what it asked for
(an exclusive job, memory per node or per CPU): what Slurm knew at submission,
and sacct records only afterwards. The forward run plans with the requests, as Slurm does; only the runtimes it
plays out are the estimates, from an estimator that has seen the jobs that
ended before the question and nothing else (causal). Its priority is the order
given (the queue as it stood), with no fair-share or limit of its own. With
`request` as the estimator this is `squeue --start` on tsched's model.

Run it on captured runs::

    cd tests && python -m slurm.start_forecasts data/slurm-22.05-cluster/fcfs ...
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.forecasting import (
    LifetimeLookup,
    QueueState,
    Scheduler,
    StartedJob,
    error_ratio,
    running_ends,
    sampled_forecasts,
)
from predictor.frames import finished_from_frame, jobs_to_requests
from predictor.lifetimes import QueueLifetimes
from predictor.registry import make_estimator
from simulator.clusterconf import read_slurm_conf
from simulator.clusterforecast import ClusterForwardSimulation
from simulator.forecasters import ERROR_WINDOW
from simulator.waiteval import score
from simulator.workloads.formats import read_trace
from simulator.workloads.sacctrequests import read_sacct_nodes, read_sacct_requests

_PLANNED = re.compile(r"^\[(\S+)\] sched/backfill: _dump_job_sched: JobId=(\d+) to start at (\S+),")
#: Dump lines this far apart (s) belong to two backfill cycles.
CYCLE_GAP = 0.5
#: The estimators compared: the requests (squeue's assumption, on tsched's model), two that learn, and the
#: jobs' actual runtimes (`ACTUAL`: the ceiling of any estimator, what the forward run itself can reach).
ACTUAL = "actual"
ESTIMATORS = ("request", "last2", "percentile", ACTUAL)
#: The forward run: the slurm scheduler on the run's nodes, the queue in the order given.
SLURM_ON_NODES = Scheduler("fcfs", "slurm", "queue")


def _seconds(text: str) -> float:
    form = "%Y-%m-%dT%H:%M:%S.%f" if "." in text else "%Y-%m-%dT%H:%M:%S"
    return datetime.strptime(text, form).replace(tzinfo=UTC).timestamp()


@dataclass(frozen=True)
class Question:
    """A job asked about at the first backfill cycle that planned it: when, Slurm's answer, the cycle's order."""

    job_id: int
    asked_at: int  # whole seconds, rounded up: the state is the one after that instant's log line
    slurm_start: int
    order: tuple[int, ...]  # the jobs that cycle planned, in its (priority) order


def questions(log: Path) -> list[Question]:
    """Every job the backfill scheduler planned, at the first cycle that planned it.

    A cycle is a run of dump lines that names no job twice and has no gap of `CYCLE_GAP` seconds or more (with
    `bf_interval=1` one cycle can follow the last without another line between them).
    """
    cycles: list[list[tuple[float, int, int]]] = []
    previous_was_dump = False
    for line in gzip.decompress(log.read_bytes()).decode().splitlines():
        found = _PLANNED.search(line)
        if found is None:
            previous_was_dump = False
            continue
        entry = (_seconds(found.group(1)), int(found.group(2)), int(_seconds(found.group(3))))
        current = cycles[-1] if cycles and previous_was_dump else None
        if current is None or entry[1] in {job for _, job, _ in current} or entry[0] - current[-1][0] >= CYCLE_GAP:
            cycles.append([entry])
        else:
            current.append(entry)
        previous_was_dump = True
    asked: dict[int, Question] = {}
    for cycle in cycles:
        order = tuple(job for _, job, _ in cycle)
        for logged, job, start in cycle:
            if job not in asked:
                asked[job] = Question(job, int(np.ceil(logged)), start, order)
    return sorted(asked.values(), key=lambda question: (question.asked_at, question.job_id))


def _in_priority_order(pending: Sequence[int], cycle: Sequence[int]) -> list[int]:
    """The `pending` jobs (in submission order) with those the `cycle` planned in its order, in the places they
    hold in submission order: a cycle may plan only some of the queue (one it cut short, a job held by a limit),
    and under priority/basic its order is the submission order."""
    order = list(pending)
    planned = [job for job in dict.fromkeys(cycle) if job in set(order)]
    slots = [position for position, job in enumerate(order) if job in set(planned)]
    for position, job in zip(slots, planned, strict=True):
        order[position] = job
    return order


class Forecaster:
    """tsched's forecasts on one captured run (its sacct, slurm.conf and the requests sacct gives); the running
    jobs on the nodes sacct's NodeList says they ran on, as squeue shows them (`pinned`), or placed again."""

    def __init__(self, folder: Path, pinned: bool = True) -> None:
        self.forward = ClusterForwardSimulation(read_slurm_conf(folder / "slurm.conf"))
        trace = read_trace(folder / "jobs.sacct")
        self.jobs = trace.jobs.set_index("job_id", drop=False)
        self.requests = read_sacct_requests(folder / "jobs.sacct", self.forward.cluster)
        self.running_requests = dict(self.requests)
        if pinned:
            names = [node.name for node in self.forward.cluster.nodes]
            for job, nodes in read_sacct_nodes(folder / "jobs.sacct", self.forward.cluster).items():
                listed = tuple(names[index] for index in nodes)
                count = len(listed)
                self.running_requests[job] = replace(self.requests[job], nodes=count, max_nodes=count, nodelist=listed)
        self.starts = self.jobs["submit"] + self.jobs["wait"]
        self._at_submission: dict[str, dict[int, int]] = {}  # estimator -> each job's estimate at its submission

    def estimates(self, spec: str, now: int, jobs: pd.DataFrame) -> np.ndarray:
        """`spec`'s runtime estimates for `jobs`, trained on the jobs that ended at or before `now`; `ACTUAL`: their
        actual runtimes (clairvoyant, the reference)."""
        if spec == ACTUAL:
            return jobs["t_act"].to_numpy(dtype=np.int64)
        estimator = make_estimator(spec)
        estimator.fit(self.jobs.loc[self.jobs["end"] <= now].reset_index(drop=True))
        # asked now: what ended before now is known, whenever the job was submitted
        predictions = estimator.predict_many(jobs.reset_index(drop=True).assign(submit=now))
        return np.array([prediction.t_sched for prediction in predictions], dtype=np.int64)

    def errors(self, spec: str, now: int) -> list[float]:
        """`spec`'s errors on the last `ERROR_WINDOW` jobs that ended at or before `now` (runtime over its estimate
        at the job's submission, from the jobs ended before that): what the service's live scores hold for a
        sampled forecast (`error_draws`)."""
        at_submission = self._at_submission.get(spec)
        if at_submission is None:
            at_submission = self._at_submission[spec] = {
                job: int(self.estimates(spec, int(submit), self.jobs.loc[[job]])[0])
                for job, submit in self.jobs["submit"].items()
            }
        ended = self.jobs.loc[self.jobs["end"] <= now].sort_values("end", kind="stable").tail(ERROR_WINDOW)
        return [error_ratio(runtime, at_submission[job]) for job, runtime in ended["t_act"].items()]

    def lifetimes(self, now: int) -> LifetimeLookup:
        """Downey's lifetime models of the jobs that ended at or before `now`, as the service keeps them for
        `ForecastStart` (a running job that has outlived its estimate ends at its conditional median)."""
        models = QueueLifetimes()
        for job in finished_from_frame(self.jobs.loc[self.jobs["end"] <= now].reset_index(drop=True)):
            models.observe(job)
        models.refresh(now)
        return models.frozen()

    def forecast(self, question: Question, spec: str, draws: int = 0) -> int:
        """tsched's start of the job asked about, from the state at the question (see the module's docstring); with
        `draws`, the median of that many runs with the estimates' errors drawn (`sampled_forecasts`)."""
        now, jobs, starts = question.asked_at, self.jobs, self.starts
        running = jobs.loc[(starts <= now) & (jobs["end"] > now)]
        if question.job_id in running.index:  # asked at the cycle that started it: it starts now
            return now
        pending = jobs.loc[(jobs["submit"] <= now) & (starts > now)]
        waiting = pending.loc[_in_priority_order(pending.sort_values("submit", kind="stable").index, question.order)]
        state = QueueState(
            now,
            self.forward.cluster.procs,
            [
                StartedJob(job, int(start))
                for job, start in zip(jobs_to_requests(running), starts.loc[running.index], strict=True)
            ],
            jobs_to_requests(waiting),
            [self.running_requests[job] for job in running.index] + [self.requests[job] for job in waiting.index],
        )
        estimates = (self.estimates(spec, now, running).tolist(), self.estimates(spec, now, waiting).tolist())
        asked = waiting.index.get_loc(question.job_id)
        if draws:
            errors = (self.errors(spec, now), draws)
            sampled = sampled_forecasts(self.forward, state, SLURM_ON_NODES, estimates, self.lifetimes(now), errors)
            return sampled[asked].start
        ends = running_ends(state, estimates[0], self.lifetimes(now))
        return self.forward.starts(state, SLURM_ON_NODES, ends, estimates[1])[asked]


def evaluate(folder: Path, estimators: Sequence[str] = ESTIMATORS, pinned: bool = True, draws: int = 0) -> pd.DataFrame:
    """Per question: when asked, the actual start, Slurm's planned start and each estimator's forecast (with
    `draws`, also each one's sampled forecast, as the column `sampled_column(spec, draws)`)."""
    forecaster = Forecaster(folder, pinned)
    rows = []
    for question in questions(folder / "backfill.log.gz"):
        if question.job_id not in forecaster.jobs.index:
            continue
        row = {
            "job_id": question.job_id,
            "asked_at": question.asked_at,
            "start": int(forecaster.starts.loc[question.job_id]),
            "squeue": question.slurm_start,
        }
        row.update({spec: forecaster.forecast(question, spec) for spec in estimators})
        if draws:
            sampled = [spec for spec in estimators if spec != ACTUAL]
            row.update({sampled_column(spec, draws): forecaster.forecast(question, spec, draws) for spec in sampled})
        rows.append(row)
    return pd.DataFrame(rows)


def sampled_column(spec: str, draws: int) -> str:
    """The column of `spec`'s sampled forecasts (its estimates serve the jobs of a class without a model)."""
    return f"sampled ({draws}), {spec}"


def scores(table: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Per forecaster, `tsched wait-eval`'s scores (docs/definitions.md) of the forecast wait from the question
    against the actual one: Downey's correlation, of the logs too, the median and mean absolute error (s), and
    the share within a factor of 2."""
    actual = (table["start"] - table["asked_at"]).to_numpy()
    return pd.DataFrame({column: score((table[column] - table["asked_at"]).to_numpy(), actual) for column in columns}).T


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="captured runs (jobs.sacct, slurm.conf, backfill.log.gz)")
    parser.add_argument(
        "--place-again", action="store_true", help="place the running jobs again instead of on their nodes"
    )
    parser.add_argument(
        "--estimator",
        action="append",
        metavar="SPEC",
        help=f"forecast with this estimator (repeatable; default: {', '.join(ESTIMATORS)}; {ACTUAL}: the runtimes)",
    )
    parser.add_argument(
        "--draws",
        type=int,
        default=0,
        metavar="N",
        help="also forecast each estimator sampled: the median of N runs, each estimate times one of its errors",
    )
    args = parser.parse_args(argv)
    estimators = tuple(args.estimator or ESTIMATORS)
    for folder in args.folders:
        table = evaluate(folder, estimators, pinned=not args.place_again, draws=args.draws)
        waited = (table["start"] - table["asked_at"]).mean()
        print(f"{folder}: {len(table)} questions, mean wait from the question {waited:.0f} s")
        print(scores(table, ("squeue", *table.columns[4:])).round(3).to_string())


if __name__ == "__main__":
    main()
