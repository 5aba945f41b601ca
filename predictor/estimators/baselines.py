"""Baselines: the user's own request, and the oracle that knows the future."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.estimators.base import Estimator


class Baseline(Estimator):
    """An estimator that learns nothing from history: the reference every learning estimator is measured by."""

    learns: ClassVar[bool] = False

    def reset(self) -> None:
        """Nothing to forget."""

    def observe(self, job: FinishedJob) -> None:
        """Nothing to learn."""


@dataclass(kw_only=True, eq=False, repr=False)
class RequestEstimator(Baseline):
    """t_sched = t_req: what a scheduler does without predictions."""

    name: ClassVar[str] = "request"

    def predict(self, job: JobRequest) -> Prediction:
        return Prediction(t_sched=job.t_req, factor=None, basis=0, fallback=True)


@dataclass(kw_only=True, eq=False, repr=False)
class OracleEstimator(Baseline):
    """t_sched = t_act, for evaluation only: the upper bound of what prediction can give.

    The actual runtimes are handed over explicitly with `bind_truth` by an
    evaluation harness; nothing else in the project sees a job's future.
    """

    name: ClassVar[str] = "oracle"
    evaluation_only: ClassVar[bool] = True

    def _initialise(self) -> None:
        self._truth: Mapping[int, int] = {}

    def bind_truth(self, runtimes: Mapping[int, int]) -> None:
        """Give the oracle the actual runtime of every job by job id."""
        self._truth = runtimes

    def predict(self, job: JobRequest) -> Prediction:
        runtime = self._truth.get(job.job_id)
        if runtime is None:
            raise KeyError(f"oracle: no actual runtime bound for job {job.job_id}")
        return Prediction(t_sched=max(1, min(job.t_req, runtime)), factor=None, basis=0, fallback=False)
