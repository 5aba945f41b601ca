"""Interchangeable runtime estimators behind one interface (`base.Estimator`)."""

from predictor.estimators.base import Estimator

__all__ = ["Estimator"]
