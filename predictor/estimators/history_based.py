"""What the history-based estimators share: one value kept per finished job, per key.

Tang's adjuster keeps R, mean + k sigma and last-two keep the runtime; each
answers from the same key's jobs in a window (`predictor.history`). Moving a
window discards history no later submission needs, hence their declared
"history" effect.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Generic, TypeVar

from kernel.jobs import FinishedJob
from predictor.estimators.base import Estimator, PredictEffect
from predictor.history import KeyedHistory

V = TypeVar("V")


class HistoryEstimator(Estimator, Generic[V]):
    """An estimator that learns one value per finished job into a `KeyedHistory` built by `_initialise`."""

    predict_effects: ClassVar[frozenset[PredictEffect]] = frozenset({"history"})
    _history: KeyedHistory[V]

    @abstractmethod
    def _value(self, job: FinishedJob) -> V:
        """What the estimator keeps of a finished job."""

    def reset(self) -> None:
        self._history.clear()

    def observe(self, job: FinishedJob) -> None:
        self._history.add(job, self._value(job))
