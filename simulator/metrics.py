"""Scheduling metrics (docs/definitions.md), computed from a simulation's per-job table."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from predictor.scoring import summarize
from simulator.dynp import is_dynamic
from simulator.policies import POLICIES, wfp_score

SCHEDULING_METRICS = (
    "avg_wait",
    "avg_response",
    "avg_slowdown",
    "avg_bounded_slowdown",
    "weighted_wait",
    "weighted_wait_wfp",
    "utilization",
    "makespan",
    "artww",
    "sldwa",
    "awrt",
    "max_wait",
    "p95_wait_widest",
)
#: The share of the jobs, widest first, whose waits `p95_wait_widest` reads: the jobs a reservation protects
#: and that reordering starves first.
WIDEST_SHARE = 0.1


def _waited(wait: np.ndarray, t_req: np.ndarray, size: np.ndarray) -> np.ndarray:
    """FCFS: "the score of FCFS can be represented by the job's waiting time" (Tang et al.)."""
    return wait


def _shortness(wait: np.ndarray, t_req: np.ndarray, size: np.ndarray) -> np.ndarray:
    """SJF: the shorter the job, the higher its priority."""
    return 1.0 / t_req


def _length(wait: np.ndarray, t_req: np.ndarray, size: np.ndarray) -> np.ndarray:
    """LJF: the longer the job, the higher its priority."""
    return t_req


#: A job's priority score at its start under each policy, as Tang's Eq. 4 weighs waits with it.
#: Scores are computed from t_req, never from the estimate the scheduler planned with, so that runs
#: of one policy with different estimators weigh every job alike (Tang's Eq. 5 uses t_req too).
PRIORITY_AT_START: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "fcfs": _waited,
    "wfp": wfp_score,
    "sjf": _shortness,
    "ljf": _length,
}


def scheduling_metrics(jobs: pd.DataFrame, procs: int, policy: str) -> dict[str, float]:
    """Wait, response, slowdowns, weighted waits, utilization, makespan, ARTwW and SLDwA of a run under `policy`.

    `weighted_wait` is Tang's Eq. 4 with P_i the job's priority score at its
    start under the policy used (`PRIORITY_AT_START`): it says how well the
    jobs that policy favours were served. dynP switches between policies whose
    scores have different units (seconds waited, 1/t_req, t_req), so no one
    score weighs its jobs: its `weighted_wait` is NaN. `weighted_wait_wfp`
    weighs with the WFP score whatever the policy, so that runs of different
    policies compare. ARTwW and SLDwA are Streit's; AWRT is Feitelson's area-weighted response time;
    `max_wait` and `p95_wait_widest` are the tail that means hide (docs/definitions.md).
    """
    dynamic = is_dynamic(policy)
    if policy not in PRIORITY_AT_START and not dynamic:
        raise ValueError(f"no weighted wait for policy {policy!r}; choose one of {', '.join(POLICIES)} or dynp")
    if jobs.empty:
        return dict.fromkeys(SCHEDULING_METRICS, 0.0)
    wait = jobs["wait"].to_numpy(dtype=np.float64)
    run = jobs["run"].to_numpy(dtype=np.float64)
    size = jobs["size"].to_numpy(dtype=np.float64)
    t_req = jobs["t_req"].to_numpy(dtype=np.float64)
    response = wait + run
    first_submit = int(jobs["submit"].min())
    last_end = int(jobs["end"].max())
    span = max(last_end - first_submit, 1)
    return {
        "avg_wait": float(wait.mean()),
        "avg_response": float(response.mean()),
        "avg_slowdown": float((response / np.maximum(run, 1)).mean()),
        "avg_bounded_slowdown": float(np.maximum(1.0, response / np.maximum(run, 10)).mean()),
        "weighted_wait": np.nan if dynamic else _weighted_mean(wait, PRIORITY_AT_START[policy](wait, t_req, size)),
        "weighted_wait_wfp": _weighted_mean(wait, wfp_score(wait, t_req, size)),
        "utilization": float((size * run).sum() / (procs * span)),
        "makespan": float(last_end - first_submit),
        "artww": _weighted_mean(response, size),
        "sldwa": _weighted_mean(response / np.maximum(run, 1), size * run),
        "awrt": _weighted_mean(response, size * run),
        "max_wait": float(wait.max()),
        "p95_wait_widest": widest_wait_percentile(wait, size),
    }


def widest_wait_percentile(wait: np.ndarray, size: np.ndarray, percentile: float = 95.0) -> float:
    """The `percentile` of the waits of the widest tenth of the jobs (`WIDEST_SHARE`).

    The tenth is every job at least as wide as the ceil(n / 10)-th widest one, so that jobs of one width are
    all in or all out, whatever order they came in; the percentile is numpy's (linear interpolation).
    """
    rank = math.ceil(WIDEST_SHARE * len(size))
    threshold = np.partition(size, len(size) - rank)[len(size) - rank]
    return float(np.percentile(wait[size >= threshold], percentile))


def _weighted_mean(values: np.ndarray, weights: np.ndarray) -> float:
    """sum(values x weights) / sum(weights); 0 when every weight is 0 (no job waited under FCFS or WFP; no job
    ran for SLDwA)."""
    total = weights.sum()
    return float((values * weights).sum() / total) if total > 0 else 0.0


def prediction_metrics(jobs: pd.DataFrame) -> dict[str, float]:
    """Quality of the t_sched the simulation was given (run is t_act in a replay)."""
    return summarize(jobs["t_sched"].to_numpy(), jobs["run"].to_numpy(), jobs["t_req"].to_numpy())
