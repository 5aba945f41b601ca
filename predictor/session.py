"""A prediction session: how a scheduler talks to a predictor, in-process or remote.

A scheduler, at each scheduling instant, reports the jobs that finished since
the last call and asks for the t_sched of the jobs just submitted. Batching both
in one `sync` call keeps the predictor causal (completions are learned before
the submissions that follow them are predicted) and makes the remote path one
round trip per instant. `LocalSession` runs an estimator in-process; the gRPC
client offers the same method, so the simulator cannot tell them apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.estimators.base import Estimator


class PredictionSession(Protocol):
    """What the simulator needs from a predictor."""

    #: Jobs that got t_req because the predictor could not answer.
    fallbacks: int
    #: Whether a replay should ask, with an instant's arrivals, about later ones that come before any job can
    #: end (`simulator.lookahead`): the answers are the same, and a remote session saves round trips.
    asks_ahead: bool

    def sync(self, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> list[Prediction]:
        """Learn `finished` (in end order), then predict `submitted` (in submit order)."""
        ...

    def close(self) -> None:
        """Release whatever the session holds."""
        ...


class LocalSession:
    """An estimator called in-process: the fast path for experiment sweeps."""

    def __init__(self, estimator: Estimator, asks_ahead: bool = False) -> None:
        self.estimator = estimator
        self.fallbacks = 0
        self.asks_ahead = asks_ahead

    def sync(self, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> list[Prediction]:
        observe = self.estimator.observe
        for job in finished:
            observe(job)
        predict = self.estimator.predict
        return [predict(job) for job in submitted]

    def close(self) -> None:
        pass
