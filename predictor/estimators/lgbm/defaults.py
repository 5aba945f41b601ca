"""What `tsched train` does without options, apart from the model code: the command line shows these in
its help without importing LightGBM (about 1.2 s)."""

#: Without --until, the last this-many days of the trace are held out for evaluation.
DEFAULT_HELD_OUT_DAYS = 30
#: What `tsched train` trains without --estimator (the lgbm-quantile estimator's SPEC name).
TRAINED_ESTIMATOR = "lgbm-quantile"
