"""Offline evaluation: replay a trace through an estimator and score every prediction.

The replay is causal by construction: before predicting a job submitted at s,
the estimator is fed exactly the jobs whose trace end is at or before s (and
that were submitted before s), in end order. The input is the job table of a
parsed trace (`simulator.workloads.trace.Trace.jobs`) as a DataFrame, so that this module
depends on no simulator code.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from kernel.errors import TraceError
from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.estimators.base import Estimator
from predictor.estimators.baselines import OracleEstimator
from predictor.estimators.percentile import (
    KEYS as PERCENTILE_KEYS,
)
from predictor.estimators.percentile import (
    WINDOWS as PERCENTILE_WINDOWS,
)
from predictor.estimators.percentile import (
    PercentileEstimator,
    adjusted_estimate,
)
from predictor.frames import finished_in_end_order, in_submission_order, jobs_to_requests
from predictor.history import interpolated_percentile
from predictor.registry import make_estimator
from predictor.scoring import prediction_scores

#: The percentiles and floors of Tang et al.'s Figures 4-10.
GRID_PERCENTILES = (50.0, 60.0, 70.0, 80.0, 85.0, 90.0, 95.0, 100.0)
GRID_FLOORS = (0.5, 0.0)

Answer = TypeVar("Answer")


def causal_replay(
    requests: Sequence[JobRequest],
    finished: Sequence[FinishedJob],
    observe: Callable[[FinishedJob], None],
    answer: Callable[[JobRequest], Answer],
) -> list[Answer]:
    """For each request in order, observe every job that ended by its submission, then answer it.

    `requests` must be in submission order and `finished` in (end, submit)
    order. A job that ends at the very second it was submitted (no wait, no
    runtime) is not fed to the predictions of that second: they are made on
    arrival, before anything submitted then can have run, and one of them is
    its own.
    """
    order = [(job.end, job.request.submit) for job in finished]
    total = len(finished)
    fed = 0
    answers = []
    for request in requests:
        now = (request.submit, request.submit)
        while fed < total and order[fed] < now:
            observe(finished[fed])
            fed += 1
        answers.append(answer(request))
    return answers


def _replay_timed(estimator: Estimator, df: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    ordered = in_submission_order(df)
    requests = jobs_to_requests(ordered)
    finished = finished_in_end_order(requests, ordered)
    if isinstance(estimator, OracleEstimator):
        estimator.bind_truth(dict(zip(ordered["job_id"].tolist(), ordered["t_act"].tolist(), strict=True)))
    estimator.reset()
    started = time.perf_counter()
    predictions: list[Prediction] = causal_replay(requests, finished, estimator.observe, estimator.predict)
    seconds = time.perf_counter() - started
    frame = pd.DataFrame(
        {
            "job_id": ordered["job_id"].to_numpy(),
            "t_req": ordered["t_req"].to_numpy(),
            "t_act": ordered["t_act"].to_numpy(),
            "t_sched": np.fromiter((p.t_sched for p in predictions), dtype=np.int64, count=len(predictions)),
            "factor": np.fromiter(
                (math.nan if p.factor is None else p.factor for p in predictions),
                dtype=np.float64,
                count=len(predictions),
            ),
            "basis": np.fromiter((p.basis for p in predictions), dtype=np.int64, count=len(predictions)),
            "fallback": np.fromiter((p.fallback for p in predictions), dtype=bool, count=len(predictions)),
        }
    )
    return frame, seconds


def replay(estimator: Estimator, df: pd.DataFrame) -> pd.DataFrame:
    """Predict every job of a trace in submission order, feeding the estimator only finished jobs.

    One row per job: job_id, t_req, t_act, t_sched, factor (NaN where the
    estimator has none), basis, fallback. The estimator is reset first.
    """
    return _replay_timed(estimator, df)[0]


def evaluate(df: pd.DataFrame, specs: list[str], trace_name: str) -> dict[str, Any]:
    """The `predict-eval` report: every estimator SPEC replayed over the trace and scored, in order.

    `us_per_prediction` is the replay's wall time (learning and predicting,
    not building the job objects) divided by the number of jobs.
    """
    if len(df) == 0:
        raise TraceError(f"trace {trace_name}: no jobs to evaluate")
    estimators = [make_estimator(spec) for spec in specs]  # reject every bad SPEC before the first replay
    results = [scored_replay(spec, df, estimator)[0] for spec, estimator in zip(specs, estimators, strict=True)]
    return {"trace": trace_name, "jobs": len(df), "results": results}


def scored_replay(
    spec: str, df: pd.DataFrame, estimator: Estimator | None = None
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Replay one estimator over a trace: its `predict-eval` result row, and the per-job frame behind it.

    The row's `fallback` is the share of jobs that got their request for want of history (1 for `request`
    itself; 1 for a model that never trained on a log too small for it)."""
    frame, seconds = _replay_timed(estimator or make_estimator(spec), df)
    scores = prediction_scores(frame["t_sched"].to_numpy(), frame["t_act"].to_numpy(), frame["t_req"].to_numpy())
    row = {"estimator": spec, **scores, "us_per_prediction": seconds / max(len(frame), 1) * 1e6}
    return row | {"fallback": float(frame["fallback"].mean()) if len(frame) else 0.0}, frame


def _percentile_factors(
    estimator: PercentileEstimator, requests: Sequence[JobRequest], finished: Sequence[FinishedJob]
) -> list[list[float] | None]:
    """Per job, the unfloored A for every grid percentile (None: too little history)."""

    def factors(request: JobRequest) -> list[float] | None:
        ratios = estimator.eligible_ratios(request)
        if len(ratios) < estimator.min_jobs:
            return None
        return [interpolated_percentile(ratios, q) for q in GRID_PERCENTILES]

    return causal_replay(requests, finished, estimator.observe, factors)


def percentile_grid(df: pd.DataFrame, trace_name: str) -> pd.DataFrame:
    """Tang's sweep (Figures 4-10): keys x windows x percentiles, with and without the 0.5 floor.

    One causal replay per key and window reads every percentile from the
    same eligible history; each row is scored as `evaluate` scores an estimator.
    """
    ordered = in_submission_order(df)
    requests = jobs_to_requests(ordered)
    finished = finished_in_end_order(requests, ordered)
    t_req = ordered["t_req"].to_numpy()
    t_act = ordered["t_act"].to_numpy()
    rows = []
    for key in PERCENTILE_KEYS:
        for window in PERCENTILE_WINDOWS:
            factors = _percentile_factors(PercentileEstimator(key=key, window=window), requests, finished)
            for column, q in enumerate(GRID_PERCENTILES):
                for floor in GRID_FLOORS:
                    t_sched = np.fromiter(
                        (
                            request.t_req
                            if job_factors is None
                            else adjusted_estimate(request.t_req, job_factors[column], floor)[0]
                            for request, job_factors in zip(requests, factors, strict=True)
                        ),
                        dtype=np.int64,
                        count=len(requests),
                    )
                    spec = f"percentile:key={key},window={window},q={q:g},floor={floor:g}"
                    rows.append(
                        {
                            "trace": trace_name,
                            "estimator": spec,
                            "key": key,
                            "window": window,
                            "q": q,
                            "floor": floor,
                            **prediction_scores(t_sched, t_act, t_req),
                        }
                    )
    return pd.DataFrame(rows)
