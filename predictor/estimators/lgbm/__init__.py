"""The `lgbm-quantile` and `lgbm-sched` estimators: a LightGBM model of the distribution of R = t_act / t_req.

- `estimator`: the estimator (training schedule, choosing an estimate per job);
- `sched`: the same distribution turned into the estimate a backfilling scheduler plans best with;
- `features`: submit-time features from the request and finished-job history;
- `calibration`: choosing an estimate from a distribution, and calibrating that choice;
- `store`: training a model on a trace, saving it as a model folder, loading it back.
"""

from predictor.estimators.lgbm.estimator import LGBMQuantileEstimator
from predictor.estimators.lgbm.sched import LGBMSchedEstimator

__all__ = ["LGBMQuantileEstimator", "LGBMSchedEstimator"]
