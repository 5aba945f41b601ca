"""Causality: a job's prediction may not depend on any job that finished after its submission.

Checked for every registered estimator that may serve a scheduler, in two ways:
through the offline replay, and with the estimator told about every job of the
trace (as a remote predictor may be, when submissions reach it late), where
the estimator's own bounds must keep the future out.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from predictor.estimators.baselines import OracleEstimator
from predictor.frames import finished_from_frame, jobs_to_requests
from predictor.jobs import Prediction
from predictor.offline import replay
from predictor.registry import available, make_estimator
from simulator.traces.workload import generate_workload

SCHEDULER_ESTIMATORS = sorted(name for name, cls in available().items() if not cls.evaluation_only)
#: Estimators whose history-based answers are known to be real (not fallbacks) on this workload,
#: so that their check is known to have teeth.
HISTORY_BASED = {"percentile", "last2", "mean-std"}


@pytest.fixture(scope="module")
def jobs() -> pd.DataFrame:
    """A busy generated workload: few users, so that many of a user's jobs overlap in time."""
    rng = np.random.default_rng(11)
    count = 600
    table = generate_workload(jobs=count, procs=64, load=0.9, seed=11).jobs
    table["user"] = rng.integers(0, 4, count)
    table["group"] = table["user"] % 2
    table["submit"] = np.sort(rng.integers(0, 10 * 86_400, count))  # a job every 24 minutes on average
    table["end"] = table["submit"] + table["wait"] + table["t_act"]
    return table


def targets(jobs: pd.DataFrame) -> list[int]:
    """Row positions of every 25th job of the second half of the trace, where history exists."""
    return list(range(len(jobs) // 2, len(jobs), 25))


def with_new_future(jobs: pd.DataFrame, submit: int, seed: int) -> pd.DataFrame:
    """Every job still running at `submit` gets a new runtime; each still ends after `submit`.

    Odd seeds draw the runtimes at random; even seeds end every running job one
    second after `submit`, which catches an estimator that looks even a second ahead.
    """
    rng = np.random.default_rng(seed)
    changed = jobs.copy()
    future = changed["end"].to_numpy() > submit
    start = (changed["end"] - changed["t_act"]).to_numpy()[future]
    lowest = np.maximum(0, submit - start + 1)
    runtime = rng.integers(lowest, changed["t_req"].to_numpy()[future] + 1) if seed % 2 else lowest
    changed.loc[future, "t_act"] = runtime
    changed.loc[future, "run"] = runtime
    changed.loc[future, "end"] = start + runtime
    assert (changed.loc[future, "end"] > submit).all()
    return changed


def as_tuple(row: pd.Series | Prediction) -> tuple:
    factor = row.factor
    return (
        int(row.t_sched),
        None if factor is None or math.isnan(factor) else factor,
        int(row.basis),
        bool(row.fallback),
    )


def replayed(name: str, jobs: pd.DataFrame, position: int) -> tuple:
    return as_tuple(replay(make_estimator(name), jobs).iloc[position])


def told_everything(name: str, jobs: pd.DataFrame, position: int) -> tuple:
    estimator = make_estimator(name)
    if isinstance(estimator, OracleEstimator):
        estimator.bind_truth(dict(zip(jobs["job_id"].tolist(), jobs["t_act"].tolist(), strict=True)))
    estimator.fit(finished_from_frame(jobs))
    return as_tuple(estimator.predict(jobs_to_requests(jobs)[position]))


def future_leaks(name: str, jobs: pd.DataFrame, predict) -> list[tuple[int, tuple, tuple]]:
    """Jobs whose prediction changed when the future changed: (job_id, before, after)."""
    leaks = []
    for seed, position in enumerate(targets(jobs)):
        submit = int(jobs["submit"].iloc[position])
        before = predict(name, jobs, position)
        after = predict(name, with_new_future(jobs, submit, seed), position)
        if before != after:
            leaks.append((int(jobs["job_id"].iloc[position]), before, after))
    return leaks


@pytest.mark.parametrize("name", SCHEDULER_ESTIMATORS)
def test_replayed_predictions_ignore_jobs_that_finish_later(name: str, jobs: pd.DataFrame) -> None:
    assert future_leaks(name, jobs, replayed) == []
    if name in HISTORY_BASED:
        answered = [not replayed(name, jobs, position)[3] for position in targets(jobs)]
        assert sum(answered) >= len(answered) // 2  # mostly from history, not the t_req fallback


@pytest.mark.parametrize("name", SCHEDULER_ESTIMATORS)
def test_estimators_told_about_the_future_do_not_use_it(name: str, jobs: pd.DataFrame) -> None:
    assert future_leaks(name, jobs, told_everything) == []


def test_the_check_catches_an_estimator_that_reads_the_future(jobs: pd.DataFrame) -> None:
    assert len(future_leaks("oracle", jobs, replayed)) == len(targets(jobs))
    assert len(future_leaks("oracle", jobs, told_everything)) == len(targets(jobs))
