"""Scheduling metrics (paper-decisions.md), computed from a simulation's per-job table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.scoring import summarize
from simulator.policies import wfp_score


def scheduling_metrics(jobs: pd.DataFrame, procs: int) -> dict[str, float]:
    """Wait, response, slowdowns, weighted wait, utilization and makespan.

    weighted wait is Tang's Eq. 4 with P_i the WFP score at start computed
    from t_req, whatever the policy, so that runs compare.
    """
    if jobs.empty:
        return dict.fromkeys(
            (
                "avg_wait",
                "avg_response",
                "avg_slowdown",
                "avg_bounded_slowdown",
                "weighted_wait",
                "utilization",
                "makespan",
            ),
            0.0,
        )
    wait = jobs["wait"].to_numpy(dtype=np.float64)
    run = jobs["run"].to_numpy(dtype=np.float64)
    size = jobs["size"].to_numpy(dtype=np.float64)
    response = wait + run
    weight = wfp_score(wait, jobs["t_req"].to_numpy(), size)
    total_weight = weight.sum()
    first_submit = int(jobs["submit"].min())
    last_end = int(jobs["end"].max())
    span = max(last_end - first_submit, 1)
    return {
        "avg_wait": float(wait.mean()),
        "avg_response": float(response.mean()),
        "avg_slowdown": float((response / np.maximum(run, 1)).mean()),
        "avg_bounded_slowdown": float(np.maximum(1.0, response / np.maximum(run, 10)).mean()),
        "weighted_wait": float((wait * weight).sum() / total_weight) if total_weight > 0 else 0.0,
        "utilization": float((size * run).sum() / (procs * span)),
        "makespan": float(last_end - first_submit),
    }


def prediction_metrics(jobs: pd.DataFrame) -> dict[str, float]:
    """Quality of the t_sched the simulation was given (run is t_act in a replay)."""
    return summarize(jobs["t_sched"].to_numpy(), jobs["run"].to_numpy(), jobs["t_req"].to_numpy())
