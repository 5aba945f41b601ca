"""One simulation run as the CLI and the evaluation harness both need it.

Chooses the trace period (whole trace or one calendar month), builds the
prediction session (in-process estimator or the gRPC service), warms the
predictor up with jobs that finished before the period, runs the simulation
and returns its summary (`simulator.summary.RunSummary`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import pandas as pd

from kernel.errors import PredictorUnavailable, UsageError
from kernel.specs import parse_spec
from predictor.estimators.baselines import OracleEstimator, RequestEstimator
from predictor.session import LocalSession, PredictionSession
from simulator.calendar import Calendar
from simulator.cluster import Cluster
from simulator.engine import SimulationConfig, SimulationResult, simulate
from simulator.estimators import available, bind_scheduler, make_estimator
from simulator.summary import RunSummary
from simulator.workloads.load import scale_load
from simulator.workloads.replicates import DEFAULT_JITTER_SECONDS, replicate_trace
from simulator.workloads.trace import Trace

if TYPE_CHECKING:
    from kernel.resources import ResourceRequest
    from predictor.service.client import Credentials
    from predictor.service.remote import RemoteSession
    from simulator.slurmpolicy import SiteAccounting

#: The share of a run's jobs that may get t_req because the service did not answer before the run is refused:
#: past it, the summary would report mostly the request's schedule under the estimator's name.
DEFAULT_MAX_FALLBACK_SHARE = 0.01
#: The share of a period's jobs that may be larger than the machine (dropped, counted as "larger than machine")
#: before a run is refused: past it the machine's size is more likely wrong than a few jobs odd, and the metrics
#: would describe another workload.
DEFAULT_MAX_DROPPED_SHARE = 0.01


def refuse_oversized(jobs: pd.DataFrame, procs: int, max_dropped_share: float, where: str) -> int:
    """How many of `jobs` are larger than a machine of `procs` processors (a simulation drops them); refused
    (UsageError) when they are more than `max_dropped_share` of them."""
    dropped = int((jobs["procs"].to_numpy() > procs).sum())
    share = dropped / max(len(jobs), 1)
    if share > max_dropped_share:
        raise UsageError(
            f"{where}: {dropped} of {len(jobs)} jobs ({share:.1%}) need more than the machine's {procs} processors "
            f"and would be dropped, more than the {max_dropped_share:.1%} allowed (--max-dropped-share): is the "
            "machine's size right (--machine-procs)? --max-dropped-share 1 runs anyway"
        )
    return dropped


def mode_for(config: SimulationConfig, spec: str) -> SimulationConfig:
    """`config`, its mode chosen when left unset (None) as the CLI chooses it: the users' requests need none, an
    estimator is used where the product uses it, for waiting jobs (selective)."""
    if config.mode is not None:
        return config
    return replace(config, mode="none" if parse_spec(spec)[0] == RequestEstimator.name else "selective")


def open_session(
    spec: str,
    jobs: pd.DataFrame,
    address: str | None = None,
    namespace: str | None = None,
    timeout: float = 1.0,
    credentials: Credentials | None = None,
) -> PredictionSession:
    """An in-process session, or one served by the predictor at `address` (with `credentials`: token, TLS).

    The oracle is the one estimator that is handed the actual runtimes, and
    only here, by the evaluation harness: being evaluation-only it is never
    served, so it runs in-process even when the run goes through the service.
    """
    if address is not None:
        from predictor.service.records import EPHEMERAL_PREFIX
        from predictor.service.remote import RemoteSession  # grpc is only imported for the service path

        session = RemoteSession(
            address,
            namespace or f"{EPHEMERAL_PREFIX}{uuid.uuid4().hex[:12]}",
            spec,
            reset=True,
            timeout=timeout,
            credentials=credentials,
            ephemeral=namespace is None,
        )
        try:
            if not _evaluation_only(spec, session):
                return session
        except BaseException:
            session.close()
            raise
        session.close()
    estimator = make_estimator(spec)
    if isinstance(estimator, OracleEstimator):
        estimator.bind_truth(_runtimes(jobs))
    return LocalSession(estimator)


def _evaluation_only(spec: str, session: RemoteSession) -> bool:
    """Whether the estimator is evaluation-only (the oracle). A built-in's SPEC is checked here (a bad one fails
    before the run, even with the service down); any other name is asked of the service, the judge of which
    trained models it serves."""
    if parse_spec(spec)[0] in available():
        return make_estimator(spec).evaluation_only
    return session.client.served_estimator(spec).evaluation_only


def _runtimes(jobs: pd.DataFrame) -> dict[int, int]:
    return dict(zip(jobs["job_id"].tolist(), jobs["t_act"].tolist(), strict=True))


def run_simulation(
    trace: Trace,
    config: SimulationConfig,
    spec: str = "request",
    month: str | None = None,
    address: str | None = None,
    namespace: str | None = None,
    timeout: float = 1.0,
    credentials: Credentials | None = None,
    load_factor: float = 1.0,
    max_fallback_share: float = DEFAULT_MAX_FALLBACK_SHARE,
    replicate: int = 0,
    jitter: int = DEFAULT_JITTER_SECONDS,
    cluster: Cluster | None = None,
    requests: Mapping[int, ResourceRequest] | None = None,
    max_dropped_share: float = DEFAULT_MAX_DROPPED_SHARE,
    accounting: SiteAccounting | None = None,
    calendar: Calendar | None = None,
) -> tuple[RunSummary, SimulationResult]:
    """Simulate `trace` (or one `month` of it, warmed up with the jobs that finished before it).

    `load_factor` F divides the period's inter-arrival times by F (more load
    above 1): a month is scaled on its own, so the monthly protocol keeps its
    months and its warm-up. `replicate` N > 0 then moves every submission by up
    to `jitter` seconds (seed N): one more draw of a chaotic outcome
    (`simulator.workloads.replicates`). `timeout` is how long to wait for the service per
    call before a job gets t_req: short for a live-like run, long for an
    evaluation that must not fall back; a run where more than
    `max_fallback_share` of the jobs fell back is refused (PredictorUnavailable).
    With a `cluster`, the `slurm` scheduler replays the jobs on its nodes, each
    job with its request from `requests` (by job id; `simulator.clusterreplay`), its
    account's shares and limits from `accounting` (`simulator.slurmpolicy`), its
    reservations and node events from `calendar` (`simulator.calendar`).
    A `config` without a mode gets the CLI's default (`mode_for`: selective, or
    none for `request`). A period whose jobs larger than the machine (dropped) are more than
    `max_dropped_share` of it is refused before it runs (UsageError).
    """
    config = mode_for(config, spec)
    period, history = _period(trace, month)
    refuse_oversized(period.jobs, config.procs, max_dropped_share, trace.path + (f", {month}" if month else ""))
    if load_factor != 1.0:
        period = scale_load(period, load_factor)
    period = replicate_trace(period, replicate, jitter)
    session = open_session(bind_scheduler(spec, config), trace.jobs, address, namespace, timeout, credentials)
    try:
        if cluster is None:
            result = simulate(period.jobs, config, session, history)
        else:
            from simulator.clusterreplay import simulate_cluster

            result = simulate_cluster(
                period.jobs, config, session, cluster, requests or {}, history, accounting, trace.names, calendar
            )
    finally:
        session.close()
    _refuse_fallbacks(result, address, max_fallback_share)
    summary = RunSummary.of_run(trace.path, month, spec, result, trace.skipped, load_factor, replicate, jitter)
    return summary, result


def _period(trace: Trace, month: str | None) -> tuple[Trace, pd.DataFrame | None]:
    """The jobs to simulate (the whole trace, or one month of it) and the history that warms the predictor up."""
    whole = trace.require_jobs()
    if month is None:
        return whole, None
    month_start = next(start for name, start, _ in trace.month_bounds() if name == month)
    return trace.select_month(month), trace.jobs_before(month_start)


def _refuse_fallbacks(result: SimulationResult, address: str | None, max_fallback_share: float) -> None:
    """Refuse a run in which too many jobs got t_req because the service did not answer."""
    fallback_share = result.predictor_fallbacks / max(len(result.jobs), 1)
    if fallback_share > max_fallback_share:
        raise PredictorUnavailable(
            f"{result.predictor_fallbacks} of {len(result.jobs)} jobs ({fallback_share:.1%}) got t_req because the "
            f"predictor service at {address} did not answer, more than the {max_fallback_share:.1%} allowed "
            "(--max-fallback-share): the numbers would be mostly the request's, not the estimator's. "
            "Check the service or the network, give it longer (--timeout), or run in-process"
        )
