"""Gaussier et al.'s E-loss as the estimate lgbm-sched reads from its runtime distribution (issue 28, item 2).

Gaussier et al. (SC'15) train a regression with an asymmetric squared loss
(E-loss: underestimates and overestimates squared, with different weights,
and a weight per job). For one job, the estimate that minimises the expected
asymmetric squared loss under a runtime distribution is its tau-expectile,
where tau / (1 - tau) is the ratio of the two weights (a job's own weight
scales its loss and does not move its minimiser); a model trained on the
E-loss estimates that same conditional expectile. lgbm-sched reads the
0.3 quantile of lgbm's distribution, which minimises the asymmetric linear
(pinball) loss; this reads the tau-expectile of the same distribution instead
(`ExpectileSched`, defined here: it is measured, not shipped) and replays
FCFS + EASY-SJBF, regular mode, correction to the request, on the four traces of
Gaussier et al., beside EASY with requests and lgbm-sched's quantile.

    python scripts/eloss_ablation.py [--traces DIR] [--trace NAME ...] [--workers N] [--out FILE]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from scheduling_baselines import TRACES, add_trace_options, chosen_traces

from predictor.estimators.base import Estimator
from predictor.estimators.lgbm.calibration import Calibration
from predictor.estimators.lgbm.model import CANDIDATES
from predictor.estimators.lgbm.sched import LGBMSchedEstimator
from predictor.registry import make_estimator
from predictor.session import LocalSession
from simulator.engine import SimulationConfig, simulate
from simulator.summary import RunSummary
from simulator.workloads.swf import read_swf

#: The expectile levels tried: the asymmetry tau / (1 - tau) of 1/19, 1/9 and 1/4.
TAUS = (0.05, 0.1, 0.2)


def expectile_choice(under_probability: np.ndarray, tau: float) -> np.ndarray:
    """Per row, the first candidate (fraction of t_req) at or above the tau-expectile of the distribution whose
    P(R > candidate) the row gives: where tau E[(R - e)+] no longer exceeds (1 - tau) E[(e - R)+]."""
    above = np.concatenate([np.ones((len(under_probability), 1)), under_probability[:, :-1]], axis=1)
    mass = np.clip(above - under_probability, 0.0, None)  # P(R in (previous candidate, candidate])
    mass[:, -1] += np.clip(under_probability[:, -1], 0.0, None)
    mass /= mass.sum(axis=1, keepdims=True)
    below, first_moment = np.cumsum(mass, axis=1), np.cumsum(mass * CANDIDATES, axis=1)
    estimate = CANDIDATES[None, :]
    over = first_moment[:, -1:] - first_moment - estimate * (1.0 - below)  # E[(R - e)+]
    short = estimate * below - first_moment  # E[(e - R)+]
    chosen: np.ndarray = np.argmax(tau * over - (1.0 - tau) * short <= 0.0, axis=1)
    return chosen


class _ExpectileCalibration(Calibration):
    """lgbm-sched's choice, the tau-expectile in place of the alpha quantile (tau is `alpha`)."""

    def choose(
        self, users: list[int], accuracy: np.ndarray, under: np.ndarray, penalty: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[float, int] | None]:
        return expectile_choice(under, self.alpha), np.zeros(len(users), dtype=bool), None


@dataclass(kw_only=True, eq=False, repr=False)
class ExpectileSched(LGBMSchedEstimator):
    """lgbm-sched reading the `alpha`-expectile of its distribution (uncalibrated, as lgbm-sched by default)."""

    name: ClassVar[str] = "lgbm-sched-expectile"

    def _initialise(self) -> None:
        super()._initialise()
        calibration = self._calibration
        expectile = _ExpectileCalibration.__new__(_ExpectileCalibration)
        expectile.__dict__.update(calibration.__dict__)
        self._calibration = expectile


def estimator(label: str) -> Estimator:
    if label.startswith("expectile "):
        return ExpectileSched(alpha=float(label.split()[1]))
    return make_estimator(label)


def _reading(label: str) -> str:
    """What the estimate reads of the distribution."""
    return "quantile 0.3 (its default)" if label == "lgbm-sched" else label


def run(path: Path, name: str, label: str) -> dict[str, object]:
    """One replay of `name` with the estimate `label` names: its AVEbsld and average wait."""
    trace = read_swf(path)
    requests = label == "request"
    mode, order = ("none", "queue") if requests else ("regular", "sjf")
    config = SimulationConfig(trace.machine_procs(), "fcfs", "easy", mode, "request", order)
    began = time.process_time()
    result = simulate(trace.require_jobs().jobs, config, LocalSession(estimator(label)))
    summary = RunSummary.of_run(trace.path, None, label, result, trace.skipped)
    return {
        "trace": name,
        "estimate": "EASY, requests" if requests else f"EASY++ lgbm-sched, {_reading(label)}",
        "avg_bounded_slowdown": summary.avg_bounded_slowdown,
        "avg_wait": summary.avg_wait,
        "cpu_seconds": time.process_time() - began,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_trace_options(parser)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("docs/eloss-ablation.csv"))
    args = parser.parse_args()
    names = chosen_traces(parser, args)
    labels = ["request", "lgbm-sched", *(f"expectile {tau}" for tau in TAUS)]
    tasks = [(args.traces / TRACES[name], name, label) for name in names for label in labels]
    began = time.perf_counter()
    rows = Parallel(n_jobs=args.workers)(delayed(run)(*task) for task in tasks)
    frame = pd.DataFrame(rows)
    frame.to_csv(args.out, index=False)
    print(f"{len(rows)} replays in {time.perf_counter() - began:.0f} s; wrote {args.out}\n")
    table = frame.pivot(index="estimate", columns="trace", values="avg_bounded_slowdown")[names]
    improvement = 1.0 - table / table.loc["EASY, requests"]
    print("| estimate | " + " | ".join(names) + " | mean improvement |")
    print("|---|" + "---|" * (len(names) + 1))
    for estimate in dict.fromkeys(frame["estimate"]):
        cells = [f"{table.loc[estimate, name]:.2f} ({improvement.loc[estimate, name]:+.1%})" for name in names]
        print(f"| {estimate} | " + " | ".join(cells) + f" | {improvement.loc[estimate].mean():+.1%} |")


if __name__ == "__main__":
    main()
