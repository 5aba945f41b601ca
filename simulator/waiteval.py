"""`tsched wait-eval`: how well forecasters predict when jobs start, over a replayed trace.

The trace is replayed by the engine under the chosen scheduler, which plans
with the users' requests: its start times are the actual ones, as in Downey's
evaluation (the schedule is simulated, not the trace's own). The questions are
asked as the replay runs, by an observer of the event loop that reads the
scheduler's own state (its queue, in priority order, and its running jobs), and
at each question every forecaster is asked for the job's start:

- `submit`: when the job is submitted (before the pass at that instant);
- `head` (Downey's protocol): when the job is first at the head of the queue
  once the instant is settled, i.e. it is the first in priority order and
  could not start.

Forecasters learn each finished job at its end, before any question at that
instant, and never see a runtime otherwise (`simulator.forecasters`). The
scores compare predicted and actual queue times (start - the question's time);
docs/definitions.md gives their definitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.estimators.baselines import RequestEstimator
from predictor.forecasting import QueueState, Scheduler, StartedJob
from predictor.session import LocalSession
from simulator.engine import SimulationConfig, SimulationResult, TraceReplay
from simulator.forecasters import Forecaster
from simulator.jobs import WaitingJob
from simulator.loop import Observer

PROTOCOLS = ("submit", "head")
#: Queue times below this count as this much when judging "within a factor of 2": a forecast of 10 s for
#: a job that waited 40 s is as good as exact to a user.
WITHIN_FLOOR_SECONDS = 60
SCORES = ("correlation", "log_correlation", "median_abs_error", "mean_abs_error", "within_2x")


class Questions(Observer):
    """Asks every forecaster, as the replay runs, at each question of the protocol; learns them each round."""

    def __init__(self, replay: TraceReplay, forecasters: Sequence[Forecaster], protocol: str) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
        self.replay = replay
        self.forecasters = forecasters
        self.protocol = protocol
        self.asked: list[tuple[int, int]] = []  # (trace index, asked at)
        self.answers: list[list[float]] = [[] for _ in forecasters]
        self._heads: set[int] = set()

    def admitted(self, now: int, completed: Sequence[int], submitted: Sequence[WaitingJob]) -> None:
        """Forecasters learn the round's completions and submissions; under `submit`, the new jobs are asked."""
        if not (completed or submitted):
            return
        finished = [self.replay.finished_job(index) for index in completed]
        requests = [self.replay.requests[job.index] for job in submitted]
        for forecaster in self.forecasters:
            forecaster.learn(now, finished, requests)
        if self.protocol == "submit" and submitted:
            self._ask(now, [job.index for job in submitted])

    def settled(self, now: int) -> None:
        """Under `head`, the first job in priority order that could not start is asked, once."""
        if self.protocol != "head" or not len(self.replay.scheduler):
            return
        head = self.replay.scheduler.waiting(now)[0].index
        if head not in self._heads:
            self._heads.add(head)
            self._ask(now, [head])

    def _ask(self, now: int, targets: list[int]) -> None:
        replay = self.replay
        requests, machine = replay.requests, replay.scheduler.machine
        ordered = replay.scheduler.waiting(now)
        running = sorted(machine.running.values(), key=lambda job: (job.start, job.index))
        started = [StartedJob(requests[job.index], job.start) for job in running]
        state = QueueState(now, replay.config.procs, started, [requests[job.index] for job in ordered])
        where = {job.index: position for position, job in enumerate(ordered)}
        positions = [where[index] for index in targets]
        for column, forecaster in zip(self.answers, self.forecasters, strict=True):
            forecast = forecaster.forecast(state, positions)
            column.extend(float(forecast.get(position, np.nan)) for position in positions)
        self.asked.extend((index, now) for index in targets)

    def table(self) -> pd.DataFrame:
        """One row per question: job_id, asked_at, start (actual), and per forecaster its forecast start."""
        replay = self.replay
        rows = [(replay.requests[index].job_id, now, replay.start_at[index]) for index, now in self.asked]
        table = pd.DataFrame(rows, columns=["job_id", "asked_at", "start"])
        for forecaster, column in zip(self.forecasters, self.answers, strict=True):
            table[forecaster.spec] = np.asarray(column, dtype=np.float64)
        return table


def ask_forecasters(
    jobs: pd.DataFrame, procs: int, scheduler: Scheduler, forecasters: Sequence[Forecaster], protocol: str
) -> tuple[SimulationResult, pd.DataFrame]:
    """Replay `jobs` with the scheduler planning on requests, asking every forecaster at each question.

    The replay's starts are the actual ones, as in Downey's evaluation (the
    schedule is simulated, not the trace's own). One row per question: job_id,
    asked_at, start (actual), and per forecaster its forecast start (NaN
    where it gave none).
    """
    config = SimulationConfig(procs, scheduler.policy, scheduler.backfill, "none", "request", scheduler.backfill_order)
    replay = TraceReplay(jobs, config, LocalSession(RequestEstimator()))
    questions = Questions(replay, forecasters, protocol)
    replay.observers.append(questions)
    return replay.replay(), questions.table()


def score(predicted_wait: np.ndarray, actual_wait: np.ndarray) -> dict[str, float | None]:
    """Downey's correlation coefficient and the other scores (docs/definitions.md); None where undefined."""
    predicted = np.asarray(predicted_wait, dtype=np.float64)
    actual = np.asarray(actual_wait, dtype=np.float64)
    if len(predicted) == 0:
        return dict.fromkeys(SCORES)
    error = np.abs(predicted - actual)
    floor = float(WITHIN_FLOOR_SECONDS)
    ratio = np.maximum(predicted, floor) / np.maximum(actual, floor)
    return {
        "correlation": _pearson(predicted, actual),
        "log_correlation": _pearson(np.log1p(predicted), np.log1p(actual)),
        "median_abs_error": float(np.median(error)),
        "mean_abs_error": float(error.mean()),
        "within_2x": float(((ratio >= 0.5) & (ratio <= 2.0)).mean()),
    }


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def summarize(questions: pd.DataFrame, forecasters: Sequence[str], protocol: str) -> list[dict[str, Any]]:
    """One result per forecaster, in the order given: how many questions it answered, and its scores."""
    actual = (questions["start"] - questions["asked_at"]).to_numpy(dtype=np.float64)
    results = []
    for spec in forecasters:
        forecast = questions[spec].to_numpy()
        answered = ~np.isnan(forecast)
        predicted = forecast[answered] - questions["asked_at"].to_numpy()[answered]
        results.append(
            {
                "forecaster": spec,
                "protocol": protocol,
                "questions": len(questions),
                "predictions": int(answered.sum()),
                **score(predicted, actual[answered]),
            }
        )
    return results


def run_wait_evaluation(
    trace_path: str,
    jobs: pd.DataFrame,
    procs: int,
    scheduler: Scheduler,
    forecasters: Sequence[Forecaster],
    protocol: str,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Replay, ask, score: the JSON-ready report and the table of questions."""
    result, questions = ask_forecasters(jobs, procs, scheduler, forecasters, protocol)
    report = {
        "trace": trace_path,
        "jobs": len(result.jobs),
        "procs": procs,
        "policy": scheduler.policy,
        "backfill": scheduler.backfill,
        "backfill_order": scheduler.backfill_order,
        "protocol": protocol,
        "skipped": result.skipped,
        "results": summarize(questions, [forecaster.spec for forecaster in forecasters], protocol),
    }
    return report, questions


def format_report(report: dict[str, Any]) -> str:
    """The report as `tsched wait-eval` prints it."""
    lines = [
        f"trace      {report['trace']}: {report['jobs']} jobs on {report['procs']} processors",
        f"scheduler  {report['policy']} + {report['backfill']} backfilling ({report['backfill_order']} order), "
        f"planning with requests; questions at {report['protocol']}",
        f"{'forecaster':<52} {'answered':>9} {'CC':>6} {'log CC':>7} {'median |e|':>11} {'mean |e|':>10} {'2x':>6}",
    ]
    lines.extend(
        f"{row['forecaster']:<52} {row['predictions']:>9} {_number(row['correlation']):>6} "
        f"{_number(row['log_correlation']):>7} {_seconds(row['median_abs_error']):>11} "
        f"{_seconds(row['mean_abs_error']):>10} {_share(row['within_2x']):>6}"
        for row in report["results"]
    )
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def scatter_plot(questions: pd.DataFrame, report: dict[str, Any], path: str) -> None:
    """Downey's Figure 4 for every forecaster: predicted against actual queue times, one panel each.

    Log axes (queue times below 1 s drawn at 1 s), the identity as a white line over the points, and
    per column of predictions (a factor of 10^0.25 wide) the mean of the actual times (solid) and
    their median (dashed).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    results = report["results"]
    columns = min(len(results), 3)
    rows = -(-len(results) // columns)
    figure = Figure(figsize=(4.2 * columns, 4 * rows), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    actual_all = np.maximum((questions["start"] - questions["asked_at"]).to_numpy(dtype=np.float64), 1.0)
    asked = questions["asked_at"].to_numpy(dtype=np.float64)
    panels = []
    for result in results:
        forecast = questions[result["forecaster"]].to_numpy(dtype=np.float64)
        answered = ~np.isnan(forecast)
        panels.append((result, np.maximum(forecast[answered] - asked[answered], 1.0), actual_all[answered]))
    top = max([10.0, float(actual_all.max(initial=1.0))] + [float(p.max(initial=1.0)) for _, p, _ in panels])
    edges = 10 ** np.arange(0, np.log10(top) + 0.25, 0.25)
    for number, (result, predicted, actual) in enumerate(panels, start=1):
        ax = figure.add_subplot(rows, columns, number)
        ax.scatter(predicted, actual, s=2, alpha=0.15, color="#4c72b0", linewidths=0)
        column = np.digitize(predicted, edges)
        centres, means, medians = [], [], []
        for index in np.unique(column):
            members = actual[column == index]
            if len(members) >= 5:
                centres.append(np.sqrt(edges[index - 1] * edges[min(index, len(edges) - 1)]))
                means.append(members.mean())
                medians.append(np.median(members))
        ax.plot([1, top], [1, top], color="white", linewidth=2.5)
        ax.plot([1, top], [1, top], color="#555555", linewidth=0.8)
        ax.plot(centres, means, color="#c44e52", label="mean")
        ax.plot(centres, medians, color="#c44e52", linestyle="--", label="median")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(1, top)
        ax.set_ylim(1, top)
        correlation = "-" if result["correlation"] is None else f"{result['correlation']:.2f}"
        ax.set_title(f"{result['forecaster']}\nCC {correlation}, {result['predictions']} answers", fontsize=8)
        ax.set_xlabel("predicted queue time (s)", fontsize=8)
        ax.set_ylabel("actual queue time (s)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="upper left")
    figure.suptitle(
        f"{Path(report['trace']).name}: {report['policy']} + {report['backfill']}, questions at {report['protocol']}",
        fontsize=10,
    )
    figure.savefig(path)
