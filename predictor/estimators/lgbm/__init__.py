"""The `lgbm-quantile` estimator: a LightGBM model of the distribution of R = t_act / t_req.

- `estimator`: the estimator (training schedule, choosing an estimate per job);
- `features`: submit-time features from the request and finished-job history;
- `calibration`: choosing an estimate from a distribution, and calibrating that choice;
- `store`: training a model on a trace, saving it as a model folder, loading it back.
"""

from predictor.estimators.lgbm.estimator import LGBMQuantileEstimator

__all__ = ["LGBMQuantileEstimator"]
