"""Arrivals asked ahead of their instant (`simulator.lookahead`): a replay through the service made one round trip
per instant with arrivals; it now asks, with an instant's arrivals, the later ones that come before any job can
end. The answers, and so the schedule, must be exactly those of asking each instant at its time, and no
prediction may be made before a completion it should have seen (issue 25: a replay through the service costs
at most 0.5 ms per job over in-process)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import pytest

from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.registry import make_estimator
from predictor.session import LocalSession
from simulator.engine import SimulationConfig, TraceReplay
from simulator.workloads.synthetic import generate_workload


class Calls(LocalSession):
    """A local session that asks ahead when told to and keeps, per call, what it learned and what it predicted."""

    def __init__(self, spec: str, asks_ahead: bool) -> None:
        super().__init__(make_estimator(spec), asks_ahead=asks_ahead)
        self.calls: list[tuple[list[FinishedJob], list[JobRequest]]] = []

    def sync(self, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> list[Prediction]:
        self.calls.append((list(finished), list(submitted)))
        return super().sync(finished, submitted)


def _replay(jobs: pd.DataFrame, config: SimulationConfig, session: Calls) -> pd.DataFrame:
    return TraceReplay(jobs, config, session).replay().jobs


@pytest.mark.parametrize(
    ("spec", "policy", "backfill", "mode"),
    [
        ("percentile", "fcfs", "easy", "selective"),
        ("last2", "wfp", "easy", "regular"),
        ("mean-std", "sjf", "conservative", "selective"),
        ("percentile", "fcfs", "replan", "regular"),
    ],
)
def test_asking_ahead_changes_no_answer_and_saves_calls(spec: str, policy: str, backfill: str, mode: str) -> None:
    trace = generate_workload(jobs=1500, procs=64, load=0.9, seed=3)
    config = SimulationConfig(64, policy, backfill, mode)
    each, ahead = Calls(spec, asks_ahead=False), Calls(spec, asks_ahead=True)
    pd.testing.assert_frame_equal(_replay(trace.jobs, config, ahead), _replay(trace.jobs, config, each))
    asking = [call for call in each.calls if call[1]]
    asked_ahead = [call for call in ahead.calls if call[1]]
    assert len(asked_ahead) < 0.9 * len(asking)
    assert sum(len(submitted) for _, submitted in asked_ahead) == sum(len(submitted) for _, submitted in asking)


def test_no_job_is_asked_about_before_a_completion_it_would_have_seen() -> None:
    """Every job ended by a job's submit time was learned in or before the call that predicted it."""
    trace = generate_workload(jobs=1500, procs=64, load=0.95, seed=5)
    session = Calls("percentile", asks_ahead=True)
    result = _replay(trace.jobs, SimulationConfig(64, "wfp", "easy", "regular"), session)
    ends = sorted(zip(result["end"], result["job_id"], strict=True))
    learned: set[int] = set()
    checked = 0
    for finished, submitted in session.calls:
        learned.update(job.request.job_id for job in finished)
        for job in submitted:
            seen = {job_id for end, job_id in ends if end <= job.submit}
            assert seen <= learned, f"job {job.job_id} asked before the end of {sorted(seen - learned)[:5]}"
            checked += 1
    assert checked == len(result)
