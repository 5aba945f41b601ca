"""Every registered estimator passes the executable contract, and the contract catches estimators that break it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.estimators.base import Estimator
from predictor.estimators.baselines import OracleEstimator
from predictor.estimators.checks import (
    check_causality,
    check_estimator,
    check_fit,
    check_parameters,
    check_predict_effects,
    contract_workload,
)
from predictor.estimators.last2 import LastTwoEstimator
from predictor.estimators.percentile import PercentileEstimator
from predictor.registry import available, make_estimator

#: Every registered estimator with its defaults, plus variants whose checks bite harder: a fast lgbm that
#: trains on little history and swaps its model in at once (so it answers in the causality checks), and
#: the adjuster on other keys and windows.
SPECS = [
    *sorted(available()),
    "lgbm-quantile:min_train=200,trees=5,window=20d,retrain=5d,calibration=5d,swap=0s",
    "lgbm-sched:min_train=200,trees=5,window=20d,retrain=5d,calibration=5d,swap=0s",
    "percentile:key=user,window=all,q=60,floor=0,min_jobs=3",
    "mean-std:key=user+executable,window=all,k=0.5",
]
#: Checking an estimator that trains models takes seconds.
SLOW = {spec for spec in SPECS if spec.startswith("lgbm")}


@pytest.fixture(scope="module")
def workload():
    return contract_workload()


def test_every_registered_estimator_is_checked() -> None:
    assert {spec.partition(":")[0] for spec in SPECS} == set(available())


@pytest.mark.parametrize(
    "spec", [pytest.param(spec, marks=[pytest.mark.slow] if spec in SLOW else []) for spec in SPECS]
)
def test_estimator_passes_the_contract(spec: str, workload) -> None:
    check_estimator(make_estimator(spec), workload)


# --- the checks have teeth ---------------------------------------------------------------------


class Clairvoyant(OracleEstimator):
    """The oracle posing as a scheduler's estimator: it reads the future."""

    name = "oracle"
    evaluation_only = False


def test_causality_check_catches_an_estimator_that_reads_the_future(workload) -> None:
    with pytest.raises(AssertionError, match="reads the future"):
        check_causality(Clairvoyant(), workload)


class PositionalLastTwo(LastTwoEstimator):
    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale


@dataclass(kw_only=True, eq=False, repr=False)
class Unchecked(PercentileEstimator):
    """Skips the validation its parameters' declarations promise."""

    def __post_init__(self) -> None:
        self._initialise()


class RoundingPercentile(PercentileEstimator):
    """Stores a parameter other than it was given."""

    def __init__(self, *, q: float = 85.0) -> None:
        super().__init__(q=q)
        self.q = float(round(q))


def test_parameter_check_catches_positional_and_altered_parameters(workload) -> None:
    with pytest.raises(AssertionError, match="keyword-only: scale"):
        check_parameters(PositionalLastTwo(), workload)
    with pytest.raises(AssertionError, match=r"q=86\.861 is stored as 87\.0"):
        check_parameters(RoundingPercentile(q=85.5), workload)
    with pytest.raises(AssertionError, match=r"accepts q=nan, though it is declared in \[50, 100\]"):
        check_parameters(Unchecked(), workload)


class ForgetfulFit(LastTwoEstimator):
    """A fit that learns only the first half of what it is given."""

    def fit(self, jobs):  # type: ignore[no-untyped-def]
        jobs = sorted(jobs, key=lambda job: job.end)
        return super().fit(jobs[: len(jobs) // 2])


def test_fit_check_catches_a_fit_that_differs_from_observing(workload) -> None:
    with pytest.raises(AssertionError, match="fit\\(\\) answers differently"):
        check_fit(ForgetfulFit(), workload)


class Counting(LastTwoEstimator):
    """Its answers depend on how many questions it was asked: an undeclared effect of predict."""

    predict_effects: ClassVar = frozenset({"history"})

    def __init__(self) -> None:
        super().__init__()
        self._asked = 0

    def reset(self) -> None:
        super().reset()
        self._asked = 0

    def observe(self, job: FinishedJob) -> None:
        super().observe(job)

    def predict(self, job: JobRequest) -> Prediction:
        self._asked += 1
        answer = super().predict(job)
        return answer._replace(t_sched=max(1, answer.t_sched - self._asked % 2))


def test_effects_check_catches_an_undeclared_effect_of_predict(workload) -> None:
    with pytest.raises(AssertionError, match="no 'submissions' effect is declared"):
        check_predict_effects(Counting(), workload)


class NoHistoryDeclared(LastTwoEstimator):
    predict_effects: ClassVar = frozenset()


def test_effects_check_catches_an_undeclared_refusal(workload) -> None:
    with pytest.raises(AssertionError, match="no 'history' effect is declared"):
        check_predict_effects(NoHistoryDeclared(), workload)


def test_a_baseline_that_claims_to_learn_is_caught(workload) -> None:
    class Lazy(Estimator):
        name = "request"

        def reset(self) -> None:
            pass

        def observe(self, job: FinishedJob) -> None:
            pass

        def predict(self, job: JobRequest) -> Prediction:
            return Prediction(job.t_req, None, 0, True)

    with pytest.raises(AssertionError, match="does not answer from history"):
        check_fit(Lazy(), workload)
