"""What one simulation run amounts to: its parameters, its scheduling metrics and its estimates' quality.

`RunSummary` is what `run_simulation` returns, in the three forms its readers
need: `to_dict()` is `tsched simulate --json`'s document, `to_row(label)` a
row of `tsched evaluate`'s results.csv, `describe()` the block `tsched
simulate` prints. Its fields are named, and ordered, as the JSON keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from simulator.engine import SimulationResult
from simulator.metrics import prediction_metrics, scheduling_metrics

#: The results.csv columns that come first, in this order: the run's parameters, then its size.
ROW_PARAMETERS = (
    "trace",
    "month",
    "load_factor",
    "replicate",
    "jitter",
    "estimator",
    "policy",
    "backfill",
    "backfill_order",
    "mode",
    "correction",
    "max_reservation_delay",
    "procs",
    "jobs",
    "skipped",
)
#: The scheduler's configuration (`SimulationConfig`) a summary gives, in its order.
_CONFIG_FIELDS = ("procs", "policy", "backfill", "mode", "correction", "backfill_order", "max_reservation_delay")
#: Fields results.csv spells out in columns of their own (`trace` becomes the trace's label there).
_NESTED = ("trace", "skipped", "prediction", "dynp")


@dataclass(frozen=True)
class RunSummary:
    """One run: where and how it was simulated, what the jobs saw, and how good the estimates were.

    The scheduling metrics are `simulator.metrics.SCHEDULING_METRICS`; `dynp`
    is what a dynP policy did (None under the others); `prediction` scores the
    t_sched the scheduler was given (`simulator.metrics.prediction_metrics`).
    """

    trace: str
    month: str | None
    estimator: str
    procs: int
    policy: str
    backfill: str
    mode: str
    correction: str
    backfill_order: str
    max_reservation_delay: int | None
    load_factor: float
    replicate: int
    jitter: int
    jobs: int
    skipped: dict[str, int]
    avg_wait: float
    avg_response: float
    avg_slowdown: float
    avg_bounded_slowdown: float
    weighted_wait: float
    weighted_wait_wfp: float
    utilization: float
    makespan: float
    artww: float
    sldwa: float
    awrt: float
    max_wait: float
    p95_wait_widest: float
    dynp: dict[str, Any] | None
    node_failures: int
    predictor_fallbacks: int
    predictor_fallback_share: float
    prediction: dict[str, float]

    @classmethod
    def of_run(
        cls,
        trace: str,
        month: str | None,
        estimator: str,
        result: SimulationResult,
        skipped: Mapping[str, int],
        load_factor: float = 1.0,
        replicate: int = 0,
        jitter: int = 0,
    ) -> RunSummary:
        """The summary of `result`, a run of `estimator` on `trace` (its `month`) that left `skipped` jobs out."""
        config = result.config
        metrics: dict[str, Any] = scheduling_metrics(result.jobs, config.procs, config.policy)
        jobs = len(result.jobs)
        return cls(
            trace=trace,
            month=month,
            estimator=estimator,
            **{name: getattr(config, name) for name in _CONFIG_FIELDS},
            load_factor=load_factor,
            replicate=replicate,
            jitter=jitter if replicate else 0,
            jobs=jobs,
            skipped={**skipped, **result.skipped},
            **metrics,
            dynp=result.dynp,
            node_failures=node_failures(result.jobs),
            predictor_fallbacks=result.predictor_fallbacks,
            predictor_fallback_share=result.predictor_fallbacks / max(jobs, 1),
            prediction=prediction_metrics(result.jobs),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of `tsched simulate --json`."""
        return asdict(self)

    def to_row(self, label: str) -> dict[str, Any]:
        """One flat results.csv row, the trace named by `label`: the parameters, then every metric, the
        estimates' quality (`prediction_*`) and dynP's counts (`dynp_*`)."""
        row = {key: value for key, value in self.to_dict().items() if key not in _NESTED}
        row["trace"] = label
        row["month"] = self.month or ""
        row["skipped"] = "; ".join(f"{reason}: {count}" for reason, count in self.skipped.items())
        row |= {f"prediction_{key}": value for key, value in self.prediction.items()}
        row |= flat_columns("dynp", self.dynp or {})
        return {key: row[key] for key in ROW_PARAMETERS} | {
            key: value for key, value in row.items() if key not in ROW_PARAMETERS
        }

    def describe(self) -> str:
        """The readable block `tsched simulate` prints."""
        return "\n".join(
            [
                f"trace      {self.trace}" + (f"  month {self.month}" if self.month else ""),
                f"scheduler  {self._scheduler()}",
                f"jobs       {self.jobs}"
                + (f"  (skipped: {self._skipped()})" if self.skipped else "")
                + (f"  ({self.node_failures} run(s) ended by a node failure)" if self.node_failures else ""),
                f"wait       {self.avg_wait:.0f} s average   weighted wait {self.weighted_wait:.0f} s   "
                f"longest {self.max_wait:.0f} s   widest tenth's 95th percentile {self.p95_wait_widest:.0f} s",
                f"response   {self.avg_response:.0f} s average   weighted by width (ARTwW) {self.artww:.0f} s   "
                f"by area (AWRT) {self.awrt:.0f} s",
                f"slowdown   {self.avg_slowdown:.2f} average   bounded {self.avg_bounded_slowdown:.2f}   "
                f"weighted by area (SLDwA) {self.sldwa:.2f}",
                f"machine    utilization {self.utilization:.3f}   makespan {self.makespan / 86400:.1f} days",
                *self._dynp_lines(),
                self._estimates(),
                *self._fallback_lines(),
            ]
        )

    def _scheduler(self) -> str:
        scheduler = (
            f"Slurm's main and backfill scheduler on nodes of {self.procs} CPUs"
            if self.backfill == "slurm"
            else f"{self.policy} + {self.backfill} backfilling ({self.backfill_order} order), {self.procs} processors"
        )
        return (
            f"{scheduler}, "
            f"mode {self.mode} (correction {self.correction}), estimator {self.estimator}"
            + (f", {self._delay_bound()}" if self.backfill == "easy" else "")
            + (f", load x{self.load_factor:g}" if self.load_factor != 1 else "")
            + (f", replicate {self.replicate} (±{self.jitter} s)" if self.replicate else "")
        )

    def _delay_bound(self) -> str:
        delay = self.max_reservation_delay
        return "no reservation delay bound" if delay is None else f"reservation delay bound {delay} s"

    def _skipped(self) -> str:
        return ", ".join(f"{reason} {count}" for reason, count in self.skipped.items())

    def _dynp_lines(self) -> list[str]:
        dynp = self.dynp
        if dynp is None:
            return []
        return [
            f"dynP       {dynp['decisions']} decisions (kept {dynp['kept']}, mean backlog {dynp['mean_backlog']:.1f}), "
            f"switches to {_per_policy(dynp['switches'])}; jobs started with {_per_policy(dynp['jobs_started'])}"
        ]

    def _estimates(self) -> str:
        p = self.prediction
        line = (
            f"estimates  accuracy mean {p['accuracy_mean']:.3f} median {p['accuracy_median']:.3f}, "
            f"underestimated {p['underestimated']:.1%} (NA {p['NA']:.1%} OE {p['OE']:.1%} "
            f"UE {p['UE']:.1%} BE {p['BE']:.1%})"
        )
        if p["NA"] == 1.0 and self.estimator.partition(":")[0] != "request":
            line += (
                f"\n           every estimate was the request: {self.estimator} never predicted on this trace (too "
                "little history; lgbm-* trains once min_train jobs have finished), so this run is the request's"
            )
        return line

    def _fallback_lines(self) -> list[str]:
        if not self.predictor_fallbacks:
            return []
        return [
            f"predictor  {self.predictor_fallbacks} job(s) ({self.predictor_fallback_share:.2%}) got "
            "t_req: the service did not answer"
        ]


def _per_policy(counts: Mapping[str, int]) -> str:
    return " / ".join(f"{policy} {count}" for policy, count in counts.items())


def flat_columns(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Nested values as flat CSV columns: {"switches": {"sjf": 3}} under `dynp` is `dynp_switches_sjf`."""
    columns: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}_{key}"
        columns |= flat_columns(name, value) if isinstance(value, Mapping) else {name: value}
    return columns


def node_failures(jobs: pd.DataFrame) -> int:
    """Runs a node going down ended: the jobs left ended (NODE_FAIL) and every run of a job requeued after one."""
    if "state" not in jobs:
        return 0
    requeued = int(jobs["requeues"].sum()) if "requeues" in jobs else 0
    return int((jobs["state"] == "NODE_FAIL").sum()) + requeued
