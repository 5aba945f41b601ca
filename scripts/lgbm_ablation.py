"""What each part of lgbm-quantile buys: the variants of docs/lgbm.md, walk-forward.

On the development traces and on the two generalisation traces whose failures
led to the key posterior (UniLu-Gaia, LPC-EGEE), every variant is held to
the underestimation rate of the paper's q=85 adjuster on each trace. The
variants switch off one part at a time (`prior_jobs=1e9`: the model's
distribution alone, without the key's own class counts; `adapt=0`: a fixed
calibration target; `be_weight=0`: no BE penalty; `per_user=true`: a
multiplier per user with enough jobs; `target_under=0,alpha=...`: the
uncalibrated alpha quantile of the predicted distribution), and `log-runtime quantile` is what we started
from: LightGBM's quantile objective on log runtime with the same features and
retraining schedule, shifted conformal-style (on the residuals of the jobs
that finished in the trailing 14 days) to the target rate.

With `--memory`, the traces that say what memory each job asked for (SWF
field 10) and KTH-SP2, which does not, are replayed with lgbm-quantile
without and with `memory=true`, held to the adjuster's rate the same way;
with `--application`, the traces whose jobs name their application (SWF
field 14, with fewer applications than jobs) and KTH-SP2, without and with
`application=true`.

    python scripts/lgbm_ablation.py [--traces DIR] [--workers N] [--out FILE] [--memory | --application]
"""

from __future__ import annotations

import argparse
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd
from joblib import Parallel, delayed

from kernel.jobs import FinishedJob, JobRequest, Prediction, clamp_estimate
from predictor.estimators.base import Estimator
from predictor.estimators.lgbm.features import FeatureHistory, feature_names
from predictor.offline import evaluate, scored_replay
from simulator.workloads.swf import read_swf

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
DEVELOPMENT = ("KTH-SP2-1996-2.1-cln.swf.gz", "CTC-SP2-1996-3.1-cln.swf.gz", "SDSC-SP2-1998-4.2-cln.swf.gz")
GENERALISATION = ("UniLu-Gaia-2014-1.swf.gz", "LPC-EGEE-2004-1.2-cln.swf.gz")
#: The public traces whose jobs say what memory they asked for (SWF field 10), and a control that does not.
MEMORY = (
    "LANL-CM5-1994-4.1-cln.swf.gz",
    "HPC2N-2002-2.2-cln.swf.gz",
    "RICC-2010-2.swf.gz",
    "KTH-SP2-1996-2.1-cln.swf.gz",
)
#: The public traces whose jobs name their application (SWF field 14: SDSC-SP2's are nearly one per job), and the
#: same control.
APPLICATION = (
    "LANL-CM5-1994-4.1-cln.swf.gz",
    "CTC-SP2-1996-3.1-cln.swf.gz",
    "Sandia-Ross-2001-1.1-cln.swf.gz",
    "LLNL-Atlas-2006-2.1-cln.swf.gz",
    "UniLu-Gaia-2014-1.swf.gz",
    "SDSC-DS-2004-2.1-cln.swf.gz",
    "KTH-SP2-1996-2.1-cln.swf.gz",
)
ADJUSTER = "percentile:q=85,key=user+group+request,window=30d,floor=0.5,min_jobs=10"
DAY = 86_400


class LogRuntimeQuantile(Estimator):
    """The starting point: LightGBM quantile regression on log(1 + runtime), conformally shifted."""

    name = "log-runtime-quantile"

    def __init__(
        self,
        target_under: float = 0.06,
        window_days: int = 90,
        retrain_days: int = 7,
        calibration_days: int = 14,
        min_train: int = 500,
    ) -> None:
        self.target_under = target_under
        self.window_days = window_days
        self.retrain_days = retrain_days
        self.calibration_days = calibration_days
        self.min_train = min_train
        self.reset()

    def reset(self) -> None:
        self._features = FeatureHistory()
        self._buffer: deque[tuple[int, list[float], float]] = deque()
        self._residuals: deque[tuple[int, float]] = deque()
        self._pending: dict[int, tuple[list[float], float | None]] = {}
        self._booster: lgb.Booster | None = None
        self._next_train: int | None = None

    def observe(self, job: FinishedJob) -> None:
        row, predicted = self._pending.pop(job.request.job_id, (None, None))
        if row is None:
            row = self._features.row(job.request)
        self._features.observe(job)
        target = math.log1p(job.runtime)
        self._buffer.append((job.end, row, target))
        while self._buffer[0][0] < job.end - self.window_days * DAY:
            self._buffer.popleft()
        if predicted is not None:
            self._residuals.append((job.end, target - predicted))
            while self._residuals[0][0] < job.end - self.calibration_days * DAY:
                self._residuals.popleft()

    def predict(self, job: JobRequest) -> Prediction:
        if len(self._buffer) >= self.min_train and (self._next_train is None or job.submit >= self._next_train):
            rows = np.asarray([entry[1] for entry in self._buffer])
            targets = np.asarray([entry[2] for entry in self._buffer])
            params = {
                "objective": "quantile",
                "alpha": 1 - self.target_under,
                "num_leaves": 15,
                "learning_rate": 0.2,
                "min_data_in_leaf": 40,
                "feature_fraction": 0.5,
                "max_bin": 63,
                "num_threads": 1,
                "deterministic": True,
                "seed": 1,
                "verbose": -1,
            }
            dataset = lgb.Dataset(rows, targets, feature_name=list(feature_names()))
            self._booster = lgb.train(params, dataset, num_boost_round=20)
            self._next_train = job.submit + self.retrain_days * DAY
        row = self._features.row(job)
        self._features.register(job)
        if self._booster is None:
            self._pending[job.job_id] = (row, None)
            return Prediction(job.t_req, None, 0, True)
        predicted = float(self._booster.predict(np.asarray([row]), num_threads=1)[0])
        self._pending[job.job_id] = (row, predicted)
        shift = 0.0
        if len(self._residuals) >= 200:  # conformal: the (1 - target) quantile of recent residuals
            shift = float(np.quantile([residual for _, residual in self._residuals], 1 - self.target_under))
        return Prediction(clamp_estimate(math.expm1(predicted + shift), job.t_req), None, len(self._buffer), False)


def option_variants(option: str) -> Callable[[float], dict[str, str | None]]:
    """lgbm-quantile at a target rate without and with a site-log option (`memory`, `application`)."""

    def variants(under: float) -> dict[str, str | None]:
        target = f"target_under={under:.4f}"
        return {
            "lgbm-quantile (all parts)": f"lgbm-quantile:{target}",
            f"with {option}=true": f"lgbm-quantile:{target},{option}=true",
        }

    return variants


def variants(under: float) -> dict[str, str | None]:
    target = f"target_under={under:.4f}"
    return {
        "lgbm-quantile (all parts)": f"lgbm-quantile:{target}",
        "without the key posterior (model alone)": f"lgbm-quantile:{target},prior_jobs=1e9",
        "without adaptive calibration": f"lgbm-quantile:{target},adapt=0",
        "without the BE penalty": f"lgbm-quantile:{target},be_weight=0",
        "with per-user multipliers": f"lgbm-quantile:{target},per_user=true",
        "uncalibrated alpha quantile of the distribution": f"lgbm-quantile:target_under=0,alpha={1 - under:.4f}",
        "log-runtime quantile regression, conformal shift": None,
    }


def run(path: Path, label: str, spec: str | None, under: float) -> dict:
    jobs = read_swf(path, lenient=True).jobs
    if spec is None:
        row, _ = scored_replay(label, jobs, LogRuntimeQuantile(target_under=under))
    else:
        row = evaluate(jobs, [spec], path.name)["results"][0]
    return {
        "trace": path.name.split("-cln")[0].removesuffix(".swf.gz"),
        "variant": label,
        "spec": spec or "scripts/lgbm_ablation.py",
        "target_under": under,
        **row,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--out", type=Path, default=None, help="default docs/lgbm-ablation.csv (--memory: -memory, ...)"
    )
    options = parser.add_mutually_exclusive_group()
    options.add_argument("--memory", action="store_true", help="what the memory asked for buys, where logs say it")
    options.add_argument("--application", action="store_true", help="what applications buy, where logs name them")
    args = parser.parse_args()
    option = "memory" if args.memory else "application" if args.application else None
    out = args.out or Path(f"docs/lgbm-{option}-ablation.csv" if option else "docs/lgbm-ablation.csv")
    traces = {"memory": MEMORY, "application": APPLICATION}.get(option or "", DEVELOPMENT + GENERALISATION)
    chosen = option_variants(option) if option else variants
    began = time.perf_counter()
    paths = [args.traces / name for name in traces]
    adjusters = Parallel(n_jobs=args.workers)(
        delayed(run)(path, "paper's adjuster, q=85", ADJUSTER, 0.0) for path in paths
    )
    tasks = [
        (path, label, spec, adjuster["underestimated"])
        for path, adjuster in zip(paths, adjusters, strict=True)
        for label, spec in chosen(adjuster["underestimated"]).items()
    ]
    rows = adjusters + Parallel(n_jobs=args.workers)(delayed(run)(*task) for task in tasks)
    frame = pd.DataFrame(rows)
    frame.to_csv(out, index=False)
    print(f"{len(rows)} replays in {time.perf_counter() - began:.0f} s; wrote {out}\n")
    print("| variant | " + " | ".join(frame["trace"].unique()) + " |")
    print("|---|" + "---|" * frame["trace"].nunique())
    for label, group in frame.groupby("variant", sort=False):
        cells = [f"{r.accuracy_mean:.3f} @ {r.underestimated:.1%} (BE {r.BE:.1%})" for r in group.itertuples()]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
