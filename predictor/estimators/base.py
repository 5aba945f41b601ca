"""The estimator interface every predictor implements.

Modelled on scikit-learn's conventions: parameters are keyword-only
constructor arguments stored unchanged under their own names and returned by
`get_params`; learned state is built by `fit` (a batch of finished jobs) or
`observe` (one finished job, in order of end time); `predict` answers for one
submitted job. Estimators do no I/O and read no clock.
`predictor.estimators.checks.check_estimator` is the executable form of this
contract, and every registered estimator passes it.

Causality contract: callers observe a job only once it has finished, in
non-decreasing order of end time, and `predict(job)` must use only observed jobs
whose end is at or before `job.submit`.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any, ClassVar, Literal, Self, TypeVar

from kernel.jobs import FinishedJob, JobRequest, Prediction, RuntimeInterval

#: What a call to `predict` may change, besides caches that never change an answer:
#: - "history": it discards history that no later submission needs, so jobs must be predicted in
#:   non-decreasing submission order; a question about an earlier submission afterwards raises
#:   `predictor.history.HistoryDiscardedError` (it is never answered from part of its history);
#: - "submissions": it records the job as submitted and in flight until it is observed finished, and
#:   later predictions take that into account (a second question about the same job may be answered
#:   differently);
#: - "model": when the submission time passes a retraining point it snapshots the history and starts a
#:   training, and it puts a trained model live once the submission time reaches the model's swap time.
PredictEffect = Literal["history", "submissions", "model"]

T = TypeVar("T")
#: Where a parameter's declaration is kept in its dataclass field's metadata.
_DECLARATION = "tsched.parameter"


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What a parameter admits: numbers finite and within [low, high] (open ends where said), or one of `choices`;
    `check` validates what bounds cannot say (a duration's grammar) by raising ValueError."""

    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], object] | None = None

    def admits(self) -> str:
        """The values admitted, in words, for error messages and listings."""
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'above' if self.low_open else 'at least'} {low}"
        if self.high is not None:
            return f"{'below' if self.high_open else 'at most'} {high}"
        return "any value"

    def refused(self, default: Any) -> list[Any]:
        """Values of the default's type that this declaration must refuse (for the contract check)."""
        if self.choices is not None:
            return ["no such choice"]
        if isinstance(default, bool) or not isinstance(default, int | float):
            return []
        step = 1 if isinstance(default, int) else 0.5
        values: list[Any] = [] if isinstance(default, int) else [math.nan, math.inf]
        if self.low is not None:
            values.append(type(default)(self.low if self.low_open else self.low - step))
        if self.high is not None:
            values.append(type(default)(self.high if self.high_open else self.high + step))
        return values

    def validate(self, name: str, value: Any) -> None:
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{name} must be {self.admits()}; got {value!r}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            low_ok = self.low is None or (value > self.low if self.low_open else value >= self.low)
            high_ok = self.high is None or (value < self.high if self.high_open else value <= self.high)
            if not (math.isfinite(value) and low_ok and high_ok):
                raise ValueError(f"{name} must be {self.admits()}; got {value!r}")
        if self.check is not None:
            self.check(value)


def _number(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def parameter(
    default: T,
    doc: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    choices: tuple[str, ...] | None = None,
    check: Callable[[T], object] | None = None,
) -> T:
    """A constructor parameter of an estimator (a dataclass field), declared once with what it admits.

    The estimator's base class validates every declared parameter when the
    estimator is built, so a value out of range is refused with its name and
    the range, and no estimator can forget to check one.
    """
    declaration = Declaration(doc, low, high, low_open, high_open, choices, check)
    value: T = dataclasses.field(default=default, metadata={_DECLARATION: declaration})
    return value


def declarations(cls: type[Estimator]) -> dict[str, Declaration]:
    """Every declared parameter of an estimator class, in constructor order."""
    fields: dict[str, dataclasses.Field[Any]] = getattr(cls, "__dataclass_fields__", {})
    return {name: field.metadata[_DECLARATION] for name, field in fields.items() if _DECLARATION in field.metadata}


class Estimator(ABC):
    """Base class: subclasses set `name` and implement `reset`, `observe`, `predict`.

    A subclass is a dataclass (`@dataclass(kw_only=True, eq=False, repr=False)`)
    whose fields are its parameters, each declared with `parameter`; it builds
    its learned state in `_initialise`, called once the parameters are validated.
    """

    name: ClassVar[str]
    #: True for estimators that are not allowed in a real scheduler (the oracle).
    evaluation_only: ClassVar[bool] = False
    #: False for the baselines, whose answers do not depend on what they have observed.
    learns: ClassVar[bool] = True
    #: The effects `predict` may have (see `PredictEffect`); `check_estimator` checks that no other occurs.
    predict_effects: ClassVar[frozenset[PredictEffect]] = frozenset()

    def __post_init__(self) -> None:
        for name, declaration in declarations(type(self)).items():
            declaration.validate(name, getattr(self, name))
        self._initialise()

    def _initialise(self) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Build what the estimator learns into, from its (validated) parameters."""

    @abstractmethod
    def reset(self) -> None:
        """Forget all history."""

    @abstractmethod
    def observe(self, job: FinishedJob) -> None:
        """Learn from a job that has finished."""

    @abstractmethod
    def predict(self, job: JobRequest) -> Prediction:
        """Estimate the runtime of a job at its submission."""

    def interval(self, job: JobRequest, prediction: Prediction) -> RuntimeInterval | None:
        """The runtime distribution behind `prediction`, just made for `job` with nothing observed since.

        None (the default) for an estimator without one, and for a fallback.
        Changes nothing: the contract checks that answers stay the same.
        """
        return None

    def ready(self) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Bring what `observe` has learned into force now.

        An estimator that trains models trains one on the jobs observed so far
        and puts it live; the others learn as they observe and have nothing to do.
        """

    def fit(self, jobs: Iterable[FinishedJob]) -> Self:
        """Reset, observe `jobs` in order of end time, then `ready`: the estimator can predict at once."""
        self.reset()
        for job in sorted(jobs, key=lambda j: (j.end, j.request.submit, j.request.job_id)):
            self.observe(job)
        self.ready()
        return self

    def predict_many(self, jobs: Iterable[JobRequest]) -> list[Prediction]:
        """Predict several jobs, in submission order, as `predict` would one by one."""
        return [self.predict(job) for job in jobs]

    def train_on(self, executor: Executor | None) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Where an estimator that trains models runs its training (None: inline); others ignore it.

        A service passes a background executor so that no call waits for a
        training; the answers are the same either way (see the lgbm estimator).
        """

    @classmethod
    def param_names(cls) -> list[str]:
        """Constructor parameter names, as scikit-learn's `_get_param_names`."""
        signature = inspect.signature(cls.__init__)
        kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return [p.name for p in signature.parameters.values() if p.name != "self" and p.kind in kinds]

    def get_params(self) -> dict[str, Any]:
        """The constructor parameters of this instance, as they were given."""
        return {name: getattr(self, name) for name in self.param_names()}

    def clone(self) -> Self:
        """A new, unfitted estimator with the same parameters (as scikit-learn's `clone`)."""
        return type(self)(**self.get_params())

    @property
    def spec(self) -> str:
        """A SPEC string that rebuilds this estimator (`NAME:key=value,...`)."""
        params = self.get_params()
        if not params:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in params.items())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.get_params().items())})"
