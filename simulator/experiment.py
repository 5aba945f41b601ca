"""One simulation run as the CLI and the evaluation harness both need it.

Chooses the trace period (whole trace or one calendar month), builds the
prediction session (in-process estimator or the gRPC service), warms the
predictor up with jobs that finished before the period, runs the simulation
and returns the JSON-ready summary.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any

import pandas as pd

from predictor.estimators.baselines import OracleEstimator
from predictor.registry import make_estimator
from predictor.session import LocalSession, PredictionSession
from simulator.engine import SimulationConfig, SimulationResult, simulate
from simulator.metrics import prediction_metrics, scheduling_metrics
from simulator.traces.load import scale_load
from simulator.traces.swf import Trace


def open_session(
    spec: str, jobs: pd.DataFrame, address: str | None = None, namespace: str | None = None, timeout: float = 1.0
) -> PredictionSession:
    """An in-process session, or one served by the predictor at `address`.

    The oracle is the one estimator that is handed the actual runtimes, and
    only here, by the evaluation harness.
    """
    truth = None
    estimator = make_estimator(spec)  # validates the SPEC on both paths
    if estimator.evaluation_only:
        truth = dict(zip(jobs["job_id"].tolist(), jobs["t_act"].tolist(), strict=True))
    if address is None:
        if isinstance(estimator, OracleEstimator) and truth is not None:
            estimator.bind_truth(truth)
        return LocalSession(estimator)
    from predictor.service.client import RemoteSession  # grpc is only imported for the service path

    return RemoteSession(
        address, namespace or f"sim-{uuid.uuid4().hex[:12]}", spec, reset=True, truth=truth, timeout=timeout
    )


def run_simulation(
    trace: Trace,
    config: SimulationConfig,
    spec: str = "request",
    month: str | None = None,
    address: str | None = None,
    namespace: str | None = None,
    timeout: float = 1.0,
    load_factor: float = 1.0,
) -> tuple[dict[str, Any], SimulationResult]:
    """Simulate `trace` (or one `month` of it, warmed up with the jobs that finished before it).

    `load_factor` F divides the period's inter-arrival times by F (more load
    above 1): a month is scaled on its own, so the monthly protocol keeps its
    months and its warm-up. `timeout` is how long to wait for the service per
    call before a job gets t_req: short for a live-like run, long for an
    evaluation that must not fall back.
    """
    history = None
    period = trace.require_jobs()
    if month is not None:
        period = trace.select_month(month)
        month_start = next(start for name, start, _ in trace.month_bounds() if name == month)
        history = trace.jobs_before(month_start)
    if load_factor != 1.0:
        period = scale_load(period, load_factor)
    session = open_session(spec, trace.jobs, address, namespace, timeout)
    try:
        result = simulate(period.jobs, config, session, history)
    finally:
        session.close()
    summary: dict[str, Any] = {
        "trace": trace.path,
        "month": month,
        "estimator": spec,
        **asdict(config),
        "load_factor": load_factor,
        "jobs": len(result.jobs),
        "skipped": {**trace.skipped, **result.skipped},
        **scheduling_metrics(result.jobs, config.procs, config.policy),
        "dynp": result.dynp,
        "predictor_fallbacks": result.predictor_fallbacks,
        "prediction": prediction_metrics(result.jobs),
    }
    return summary, result
