"""Runtime estimators for HPC batch jobs, and the gRPC service that serves them.

The estimators are pure: they learn only from jobs they are told have finished
(`observe`) and answer for a job at its submission (`predict`).

For notebooks, the main objects are importable from here (docs/python-api.md):
`make_estimator` builds one from a SPEC, `replay` predicts every job of a
trace's job table causally, `evaluate` scores several SPECs as `tsched
predict-eval` does, `train` writes an lgbm-quantile model folder. They are
imported on first use, so `import predictor` stays light (no LightGBM, no gRPC).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel.lazy import lazy_exports

if TYPE_CHECKING:
    from kernel.errors import SpecError, TraceError, TschedError, UsageError
    from predictor.estimators.base import Estimator
    from predictor.estimators.lgbm.store import load_model, train
    from predictor.offline import evaluate, percentile_grid, replay, scored_replay
    from predictor.registry import available, make_estimator
    from predictor.scoring import prediction_scores

#: Public name -> the module that defines it.
_EXPORTS = {
    "make_estimator": "predictor.registry",
    "available": "predictor.registry",
    "Estimator": "predictor.estimators.base",
    "replay": "predictor.offline",
    "evaluate": "predictor.offline",
    "scored_replay": "predictor.offline",
    "percentile_grid": "predictor.offline",
    "prediction_scores": "predictor.scoring",
    "train": "predictor.estimators.lgbm.store",
    "load_model": "predictor.estimators.lgbm.store",
    "TschedError": "kernel.errors",
    "TraceError": "kernel.errors",
    "SpecError": "kernel.errors",
    "UsageError": "kernel.errors",
}
__all__ = [
    "Estimator",
    "SpecError",
    "TraceError",
    "TschedError",
    "UsageError",
    "available",
    "evaluate",
    "load_model",
    "make_estimator",
    "percentile_grid",
    "prediction_scores",
    "replay",
    "scored_replay",
    "train",
]


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS, __all__)
