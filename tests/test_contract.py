"""Every registered estimator passes the executable contract, and the contract catches estimators that break it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.estimators.base import Estimator, declarations
from predictor.estimators.baselines import OracleEstimator
from predictor.estimators.checks import (
    check_causality,
    check_estimator,
    check_fit,
    check_intervals,
    check_parameter_changes,
    check_parameters,
    check_predict_effects,
    check_scikit_learn_protocol,
    contract_workload,
)
from predictor.estimators.last2 import LastTwoEstimator
from predictor.estimators.meanstd import MeanStdEstimator
from predictor.estimators.percentile import PercentileEstimator
from predictor.registry import available, make_estimator

#: Every registered estimator with its defaults, plus variants whose checks bite harder: a fast lgbm that
#: trains on little history and swaps its model in at once (so it answers in the causality checks), and
#: the adjuster on other keys and windows.
SPECS = [
    *sorted(available()),
    "lgbm-quantile:min_train=200,trees=5,window=20d,retrain=5d,calibration=5d,swap=0s",
    "lgbm-sched:min_train=200,trees=5,window=20d,retrain=5d,calibration=5d,swap=0s",
    "lgbm-quantile:memory=true,min_train=200,trees=5,window=20d,retrain=5d,calibration=5d,swap=0s",
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


@dataclass(kw_only=True, eq=False, repr=False)
class QUnchecked(PercentileEstimator):
    """Validates every parameter but q."""

    def _validate(self) -> None:
        for name, declaration in declarations(type(self)).items():
            if name != "q":
                declaration.validate(name, getattr(self, name))


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
    with pytest.raises(AssertionError, match=r"refuses window=1 with TypeError .*, not a ValueError naming it"):
        check_parameters(Unchecked(), workload)
    with pytest.raises(AssertionError, match=r"accepts q='1', though it is declared in \[50, 100\]"):
        check_parameters(QUnchecked(), workload)


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


# --- parameters changed after construction, and scikit-learn's machinery ----------------------


class PlainAttributes(MeanStdEstimator):
    """Parameters as plain attributes, as estimators had them before: an assigned window is neither
    validated nor read, the SPEC says one thing and the answers another."""

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)


class KeepsItsWindow(MeanStdEstimator):
    """Validates an assigned parameter and forgets its history, but keeps the window it parsed when built."""

    def __setattr__(self, name: str, value: object) -> None:
        built = not name.startswith("_") and "_constructed" in self.__dict__
        if built:
            declarations(type(self))[name].validate(name, value)
        object.__setattr__(self, name, value)
        if built:
            self.reset()


class StoringSetParams(PercentileEstimator):
    """A hand-written set_params that stores what it is given."""

    def set_params(self, **params):  # type: ignore[no-untyped-def]
        self.__dict__.update(params)
        return self


def test_a_changed_parameter_is_validated_and_takes_effect() -> None:
    history = contract_workload().finished
    estimator = make_estimator("mean-std:window=7d").fit(history)
    asked = JobRequest(99_999, history[-1].end + 60, 1, 1, 3600, 1)
    assert not estimator.predict(asked).fallback
    estimator.window = "all"
    assert estimator.spec == "mean-std:key=user,window=all,k=1.5"
    assert estimator.predict(asked).fallback  # it starts again: what it learned was learned with the old window
    assert estimator.fit(history).predict(asked) == make_estimator("mean-std:window=all").fit(history).predict(asked)
    percentile = make_estimator("percentile")
    with pytest.raises(ValueError, match=r"q must be in \[50, 100\]; got 500"):
        percentile.q = 500
    with pytest.raises(ValueError, match=r"q must be in \[50, 100\]; got 500"):
        percentile.set_params(floor=0.0, q=500)
    assert percentile.q == 85.0 and percentile.floor == 0.5  # a refused change changes nothing
    with pytest.raises(ValueError, match="has no parameter 'quantile'"):
        percentile.set_params(quantile=90)
    with pytest.raises(ValueError, match=r"max_train .* must be at least min_train"):
        make_estimator("lgbm-quantile").set_params(max_train=100)
    assert repr(percentile.set_params(q=90.0)) == "PercentileEstimator(q=90.0)"  # scikit-learn's: what differs


def test_the_change_check_catches_parameters_that_drift(workload) -> None:
    with pytest.raises(AssertionError, match="assigning accepts key=1"):
        check_parameter_changes(PlainAttributes(), workload)
    with pytest.raises(AssertionError, match=r"window='14d'.* assigned one by one, it learns and answers unlike"):
        check_parameter_changes(KeepsItsWindow(), workload)
    with pytest.raises(AssertionError, match="set_params accepts key=1"):
        check_parameter_changes(StoringSetParams(), workload)


def test_scikit_learns_clone_works_on_every_registered_estimator() -> None:
    from sklearn.base import clone

    for name in available():
        for spec in (name, *(s for s in SPECS if s.startswith(name + ":"))):
            original = make_estimator(spec)
            copy = clone(original)
            assert type(copy) is type(original) and copy is not original
            assert copy.get_params() == original.get_params() and copy.spec == original.spec


def test_scikit_learns_checks_catch_a_constructor_that_alters_a_parameter(workload) -> None:
    with pytest.raises(AssertionError, match=r"sklearn.base.clone: .*modifies parameter q"):
        check_scikit_learn_protocol(RoundingPercentile(q=85.5), workload)


def test_the_command_from_the_issue_clones_with_scikit_learn() -> None:
    import subprocess
    import sys

    command = (
        "from sklearn.base import clone; from predictor.registry import make_estimator; "
        "clone(make_estimator('percentile'))"
    )
    subprocess.run([sys.executable, "-c", command], check=True)


class BadInterval(PercentileEstimator):
    """Reports its quantiles in the wrong order."""

    def predict_with_interval(self, job):  # type: ignore[no-untyped-def]
        prediction, interval = super().predict_with_interval(job)
        return prediction, None if interval is None else interval._replace(quantiles=interval.quantiles[::-1])


def test_the_interval_check_catches_disordered_quantiles(workload) -> None:
    with pytest.raises(AssertionError, match=r"interval probabilities .* not increasing"):
        check_intervals(BadInterval(), workload)
