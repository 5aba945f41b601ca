"""The estimator interface every predictor implements.

Estimators follow scikit-learn's estimator protocol, so that scikit-learn's own
tools work on them (`sklearn.base.clone`, and its API checks, which
`predictor.estimators.checks` runs): parameters are keyword-only constructor
arguments stored unchanged under their own names, returned by `get_params` and
changed by `set_params` or by assigning one (`estimator.window = "all"`).
Learned state is built by `fit` (a batch of finished jobs, or a trace's job
table) or `observe` (one finished job, in order of end time); `predict`
answers for one submitted job, `predict_many` for several, each with its
runtime interval if asked. Estimators do no I/O and read no clock.
`predictor.estimators.checks.check_estimator` is the executable form of this
contract, and every registered estimator passes it.

A parameter changed after construction is validated as the constructor
validates it (ValueError naming it; the estimator is left as it was) and takes
effect at once: the estimator starts again from nothing learned, since what it
had learned was learned with the old value. Why not subclass scikit-learn's
`BaseEstimator`: importing it loads SciPy (about 2 s of CPU), which every
`tsched` command would pay at start-up; the protocol is small, and scikit-learn
is imported where it is used (`Estimator.clone`, the contract checks).

Causality contract: callers observe a job only once it has finished, in
non-decreasing order of end time, and `predict(job)` must use only observed jobs
whose end is at or before `job.submit`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeGuard, TypeVar, cast, overload

from kernel.jobs import FinishedJob, JobRequest, Prediction, RuntimeInterval

if TYPE_CHECKING:
    import pandas as pd

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
#: A prediction and the runtime interval behind it (None: the estimator has none for this answer).
WithInterval = tuple[Prediction, RuntimeInterval | None]

T = TypeVar("T")
#: Where a parameter's declaration is kept in its dataclass field's metadata.
_DECLARATION = "tsched.parameter"


@dataclasses.dataclass(frozen=True)
class Tuning:
    """A self-tuning estimator's state as a service shows it: the candidate it serves, how many times it has
    retuned, and each candidate's score on its latest replay (the objective it minimises; lower is better)."""

    choice: str
    retunings: int
    scores: dict[str, float]


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What a parameter admits: values of its default's type (an int for a float too), numbers finite and
    within [low, high] (open ends where said), or one of `choices`; `check` validates what bounds cannot say
    (a duration's grammar) by raising ValueError."""

    doc: str
    default: Any
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

    def refused(self) -> list[Any]:
        """Values that this declaration must refuse (for the contract check): one of another type, and
        those just outside its range or choices."""
        default = self.default
        numeric = isinstance(default, int | float) and not isinstance(default, bool)
        values: list[Any] = ["1" if isinstance(default, int | float) else 1]
        if self.choices is not None:
            return [*values, "no such choice"]
        if not numeric:
            return values
        step = 1 if isinstance(default, int) else 0.5
        values += [1.5] if isinstance(default, int) else [math.nan, math.inf]
        if self.low is not None:
            values.append(type(default)(self.low if self.low_open else self.low - step))
        if self.high is not None:
            values.append(type(default)(self.high if self.high_open else self.high + step))
        return values

    def validate(self, name: str, value: Any) -> None:
        """Raise ValueError naming the parameter if `value` is not admitted."""
        kind = _kind(self.default)
        if not _of_kind(value, kind):
            raise ValueError(f"{name} must be {kind}; got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{name} must be {self.admits()}; got {value!r}")
        if kind in (_INTEGER, _NUMBER):
            low_ok = self.low is None or (value > self.low if self.low_open else value >= self.low)
            high_ok = self.high is None or (value < self.high if self.high_open else value <= self.high)
            if not (math.isfinite(value) and low_ok and high_ok):
                raise ValueError(f"{name} must be {self.admits()}; got {value!r}")
        if self.check is not None:
            self.check(value)


_BOOLEAN, _INTEGER, _NUMBER = "true or false", "an integer", "a number"


def _kind(default: Any) -> str:
    """What a parameter with this default holds, in words."""
    if isinstance(default, bool):
        return _BOOLEAN
    if isinstance(default, int):
        return _INTEGER
    if isinstance(default, float):
        return _NUMBER
    return "a string" if isinstance(default, str) else f"a {type(default).__name__}"


def _of_kind(value: Any, kind: str) -> bool:
    """Whether `value` is of `kind`: numpy's integers and floats count, booleans are never numbers."""
    if kind == _BOOLEAN:
        return isinstance(value, bool)
    if kind in (_INTEGER, _NUMBER):
        number = numbers.Integral if kind == _INTEGER else numbers.Real
        return isinstance(value, number) and not isinstance(value, bool)
    return kind != "a string" or isinstance(value, str)


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
    estimator is built and whenever a parameter is changed, so a value out of
    range is refused with its name and the range, and no estimator can forget
    to check one.
    """
    declaration = Declaration(doc, default, low, high, low_open, high_open, choices, check)
    value: T = dataclasses.field(default=default, metadata={_DECLARATION: declaration})
    return value


def declarations(cls: type[Estimator]) -> dict[str, Declaration]:
    """Every declared parameter of an estimator class, in constructor order."""
    fields: dict[str, dataclasses.Field[Any]] = getattr(cls, "__dataclass_fields__", {})
    return {name: field.metadata[_DECLARATION] for name, field in fields.items() if _DECLARATION in field.metadata}


@functools.cache
def _parameter_names(cls: type[Estimator]) -> tuple[str, ...]:
    """Constructor parameter names, as scikit-learn's `BaseEstimator._get_param_names` finds them."""
    signature = inspect.signature(cls.__init__)
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in signature.parameters.values() if p.name != "self" and p.kind in kinds)


def _is_job_table(jobs: object) -> TypeGuard[pd.DataFrame]:
    """Whether `jobs` is a trace's job table. pandas is looked up, not imported: a DataFrame exists only once
    pandas is loaded, and start-up must not pay for it."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(jobs, pandas.DataFrame)


def _finished_jobs(jobs: Iterable[FinishedJob] | pd.DataFrame) -> list[FinishedJob]:
    """`jobs` as finished jobs: a job table (the DataFrame of `read_trace(...).jobs`) is converted."""
    if _is_job_table(jobs):
        from predictor.frames import finished_from_frame

        return finished_from_frame(jobs)
    finished = list(cast(Iterable[FinishedJob], jobs))
    wrong = next((job for job in finished if not isinstance(job, FinishedJob)), None)
    if wrong is not None:
        raise TypeError(
            f"fit takes finished jobs (kernel.jobs.FinishedJob) or a job table (a pandas DataFrame such as "
            f"read_trace(...).jobs); got a {type(wrong).__name__} among them"
        )
    return finished


def _requests(jobs: Iterable[JobRequest] | pd.DataFrame) -> list[JobRequest]:
    """`jobs` as requests: a job table's rows are converted, in its row order."""
    if _is_job_table(jobs):
        from predictor.frames import jobs_to_requests

        return jobs_to_requests(jobs)
    return list(cast(Iterable[JobRequest], jobs))


class Estimator(ABC):
    """Base class: subclasses set `name` and implement `reset`, `observe`, `predict`.

    A subclass is a dataclass (`@dataclass(kw_only=True, eq=False, repr=False)`)
    whose fields are its parameters, each declared with `parameter`; it builds
    its learned state in `_initialise`, called once the parameters are validated,
    at construction and again whenever a parameter changes.
    """

    name: ClassVar[str]
    #: True for estimators that are not allowed in a real scheduler (the oracle).
    evaluation_only: ClassVar[bool] = False
    #: False for the baselines, whose answers do not depend on what they have observed.
    learns: ClassVar[bool] = True
    #: The effects `predict` may have (see `PredictEffect`); `check_estimator` checks that no other occurs.
    predict_effects: ClassVar[frozenset[PredictEffect]] = frozenset()

    def __post_init__(self) -> None:
        self._validate()
        self._initialise()
        self._constructed = True

    def _validate(self) -> None:
        """Raise ValueError naming the parameter if one is not admitted, alone or with the others."""
        for name, declaration in declarations(type(self)).items():
            declaration.validate(name, getattr(self, name))
        self._check_together()

    def _check_together(self) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Refuse (ValueError naming them) parameters that are admitted each alone but not together."""

    def _initialise(self) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Build what the estimator learns into, from its (validated) parameters."""

    def __setattr__(self, name: str, value: Any) -> None:
        """Assigning a parameter of a built estimator is `set_params`: validated, and it takes effect.

        A constructor's first assignments (a dataclass's, or a subclass's own `__init__` after it) only store.
        """
        held = self.__dict__
        if name[0] == "_" or "_constructed" not in held or name not in held or name not in _parameter_names(type(self)):
            object.__setattr__(self, name, value)
        else:
            self.set_params(**{name: value})

    @abstractmethod
    def reset(self) -> None:
        """Forget all history."""

    @abstractmethod
    def observe(self, job: FinishedJob) -> None:
        """Learn from a job that has finished."""

    @abstractmethod
    def predict(self, job: JobRequest) -> Prediction:
        """Estimate the runtime of a job at its submission."""

    def predict_with_interval(self, job: JobRequest) -> WithInterval:
        """`predict`, and the runtime distribution the prediction was read from, from the same call.

        The interval is None (the default) for an estimator without one, and for a fallback.
        """
        return self.predict(job), None

    def tuning(self) -> Tuning | None:
        """What a self-tuning estimator serves now and why (`tsched status`, the metrics); None for the others."""
        return None

    def ready(self) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Bring what `observe` has learned into force now.

        An estimator that trains models trains one on the jobs observed so far
        and puts it live; the others learn as they observe and have nothing to do.
        """

    def fit(self, jobs: Iterable[FinishedJob] | pd.DataFrame) -> Self:
        """Reset, observe `jobs` in order of end time, then `ready`: the estimator can predict at once.

        `jobs` are finished jobs, or a trace's job table (`read_trace(path).jobs`, every job finished).
        """
        self.reset()
        for job in sorted(_finished_jobs(jobs), key=lambda j: (j.end, j.request.submit, j.request.job_id)):
            self.observe(job)
        self.ready()
        return self

    @overload
    def predict_many(self, jobs: Iterable[JobRequest] | pd.DataFrame) -> list[Prediction]: ...

    @overload
    def predict_many(
        self, jobs: Iterable[JobRequest] | pd.DataFrame, *, intervals: Literal[True]
    ) -> list[WithInterval]: ...

    def predict_many(
        self, jobs: Iterable[JobRequest] | pd.DataFrame, *, intervals: bool = False
    ) -> list[Prediction] | list[WithInterval]:
        """Predict several jobs (requests, or a job table's rows), in submission order, as `predict` would one
        by one; with `intervals`, each with its interval as `predict_with_interval` gives it."""
        answers = self._predict_batch(_requests(jobs), intervals)
        return answers if intervals else [prediction for prediction, _ in answers]

    def _predict_batch(self, jobs: list[JobRequest], intervals: bool) -> list[WithInterval]:
        """What `predict_many` answers (intervals None unless asked); estimators that batch override it."""
        if intervals:
            return [self.predict_with_interval(job) for job in jobs]
        return [(self.predict(job), None) for job in jobs]

    def train_on(self, executor: Executor | None) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Where an estimator that trains models runs its training (None: inline); others ignore it.

        A service passes a background executor so that no call waits for a
        training; the answers are the same either way (see the lgbm estimator).
        """

    # --- scikit-learn's estimator protocol ---------------------------------------------------------

    @classmethod
    def param_names(cls) -> list[str]:
        """Constructor parameter names, as scikit-learn's `_get_param_names`."""
        return list(_parameter_names(cls))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters of this instance, as they were given.

        `deep` is scikit-learn's (parameters of nested estimators); no parameter here is an estimator.
        """
        return {name: getattr(self, name) for name in _parameter_names(type(self))}

    def set_params(self, **params: Any) -> Self:
        """Change parameters: all are validated first (ValueError naming the first refused, and nothing
        changes), then stored as given, and the estimator starts again from nothing learned."""
        if not params:
            return self
        names = _parameter_names(type(self))
        unknown = [name for name in params if name not in names]
        if unknown:
            known = ", ".join(names) or "none"
            raise ValueError(f"{type(self).__name__} has no parameter {unknown[0]!r} (parameters: {known})")
        previous = {name: getattr(self, name) for name in params}
        self.__dict__.update(params)
        try:
            self._validate()
        except ValueError:
            self.__dict__.update(previous)
            raise
        self._initialise()
        return self

    def clone(self) -> Self:
        """A new, unfitted estimator with the same parameters: scikit-learn's `clone`."""
        from sklearn.base import clone  # imported here: it loads SciPy, which start-up must not pay

        cloned: Self = clone(self)
        return cloned

    @property
    def spec(self) -> str:
        """A SPEC string that rebuilds this estimator (`NAME:key=value,...`)."""
        params = self.get_params()
        if not params:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in params.items())

    def __repr__(self) -> str:
        """As scikit-learn shows an estimator: its class and the parameters that differ from their defaults."""
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = (f"{k}={v!r}" for k, v in self.get_params().items() if repr(v) != repr(defaults[k]))
        return f"{type(self).__name__}({', '.join(changed)})"
