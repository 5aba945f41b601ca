"""The `lgbm-quantile` and `lgbm-sched` estimators: a LightGBM model of the distribution of R = t_act / t_req.

- `estimator`: the estimator (what it learns from each finished job, choosing an estimate per job);
- `sched`: the same distribution turned into the estimate a backfilling scheduler plans best with;
- `model`: the trained model, the distribution of R it predicts, and the runtime interval read off it;
- `training`: the jobs kept for training, the LightGBM fit, and the schedule of retrainings and model swaps;
- `features`: submit-time features from the request and finished-job history;
- `calibration`: choosing an estimate from a distribution, and calibrating that choice;
- `store`: training a model on a trace, saving it as a model folder, loading it back;
- `defaults`: what `tsched train` does without options (no LightGBM import).

The estimators are imported on first use, so that importing a light module of this package (`defaults`)
does not import LightGBM.
"""

from typing import TYPE_CHECKING

from kernel.lazy import lazy_exports

if TYPE_CHECKING:
    from predictor.estimators.lgbm.estimator import LGBMQuantileEstimator
    from predictor.estimators.lgbm.sched import LGBMSchedEstimator

_EXPORTS = {
    "LGBMQuantileEstimator": "predictor.estimators.lgbm.estimator",
    "LGBMSchedEstimator": "predictor.estimators.lgbm.sched",
}
__all__ = ["LGBMQuantileEstimator", "LGBMSchedEstimator"]

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS, __all__)
