"""The estimator contract, executable: `check_estimator(estimator)` (after scikit-learn's `check_estimator`).

Every registered estimator passes it (tests/test_contract.py), and a new one
must. Each check raises AssertionError naming the rule it found broken:

- parameters are keyword-only, stored unchanged, refused outside what they are declared to admit, and
  round-trip through the SPEC;
- a parameter changed after construction (`set_params`, or assigning it) is
  refused as the constructor refuses it, leaving the estimator as it was, or
  takes effect: the estimator starts again, and learns and answers as one
  built with the new value;
- scikit-learn's own tools work: `sklearn.base.clone`, and scikit-learn's
  checks of the parameter protocol (`sklearn.utils.estimator_checks`);
- `fit` equals `reset`, `observe` one by one in end order, then `ready`; after
  it the estimator answers from history at once;
- `predict_many` answers as `predict` one by one, and with `intervals` as
  `predict_with_interval` one by one;
- every estimate lies in [1 s, t_req];
- causality: no prediction depends on a job that ended after the submission
  (checked by changing the future, in a replay and with every job observed
  up front); skipped for evaluation-only estimators (the oracle reads the future by design);
- a clone, and an estimator rebuilt from the SPEC, answer identically;
- `predict` has no effect beyond those the estimator declares (`Estimator.predict_effects`);
- an interval, where given, is ordered, within [1, t_req], agrees with t_sched,
  and asking for it changes no answer.

The checks run on `contract_workload`, a small deterministic set of users
whose jobs use a steady share of their requests, so that every learning
estimator has history to answer from and a broken rule shows.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import product

import numpy as np

from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.estimators.base import Estimator, WithInterval, declarations
from predictor.estimators.baselines import OracleEstimator
from predictor.history import HistoryDiscardedError
from predictor.offline import causal_replay
from predictor.registry import make_estimator

#: How a question about a job was answered: a prediction, or a refusal to answer from part of the history.
Outcome = Prediction | str
REFUSED = "refused: history discarded"


@dataclass(frozen=True)
class Workload:
    """Jobs in submission order, the same jobs finished (in end order), and the jobs asked about."""

    requests: list[JobRequest]
    finished: list[FinishedJob]
    #: Positions in `requests` of the jobs the checks ask about: late ones, whose users have history.
    probes: list[int]

    @property
    def truth(self) -> dict[int, int]:
        return {job.request.job_id: job.runtime for job in self.finished}


def contract_workload(jobs: int = 1500, seed: int = 0) -> Workload:
    """Ten users over about 40 days, each with two habitual requests (and memory sizes) and a steady share of them
    used."""
    rng = np.random.default_rng(seed)
    users = rng.integers(0, 10, jobs)
    habits = rng.uniform(0.05, 0.9, (10, 2))
    choice = rng.integers(0, 2, jobs)
    t_req = np.array([3600, 14400])[choice] * (1 + users % 3)
    ratio = np.clip(habits[users, choice] * rng.lognormal(0.0, 0.25, jobs), 0.001, 1.0)
    runtime = np.maximum(0, np.rint(ratio * t_req)).astype(np.int64)
    submit = np.cumsum(rng.exponential(2300.0, jobs)).astype(np.int64) + 1
    wait = rng.integers(0, 7200, jobs)
    end = submit + wait + runtime
    procs = rng.integers(1, 65, jobs)
    requests = [
        JobRequest(
            job_id=index,
            submit=int(submit[index]),
            user=int(users[index]),
            group=int(users[index] % 3),
            t_req=int(t_req[index]),
            procs=int(procs[index]),
            queue=int(choice[index]),
            executable=int(users[index] * 2 + choice[index]),
            memory_mb=1024 << int(choice[index] + users[index] % 2),  # a site log's: one habit, one size
        )
        for index in range(jobs)
    ]
    finished = sorted(
        (FinishedJob(request, int(end[index]), int(runtime[index])) for index, request in enumerate(requests)),
        key=lambda job: (job.end, job.request.submit, job.request.job_id),
    )
    probes = list(range(jobs * 3 // 4, jobs, max(1, jobs // 24)))
    return Workload(requests, finished, probes)


def check_estimator(
    estimator: Estimator, workload: Workload | None = None, make: Callable[[str], Estimator] = make_estimator
) -> None:
    """Run every check of the contract on `estimator` (which is not changed: checks work on clones).

    `make` builds an estimator from its SPEC: a higher layer's registry, for an estimator this one cannot know.
    """
    workload = workload or contract_workload()
    for check in CHECKS:
        (partial(check, make=make) if check in _REBUILDING else check)(estimator, workload)


# --- helpers ---------------------------------------------------------------------------------


def _fresh(estimator: Estimator, workload: Workload) -> Estimator:
    """An unfitted clone; the oracle is handed the workload's actual runtimes, as an evaluation would."""
    clone = estimator.clone()
    if isinstance(clone, OracleEstimator):
        clone.bind_truth(workload.truth)
    return clone


def _ask(estimator: Estimator, job: JobRequest) -> Outcome:
    try:
        return estimator.predict(job)
    except HistoryDiscardedError:
        return REFUSED


def _replay(estimator: Estimator, workload: Workload) -> list[Prediction]:
    """Every job predicted at its submission from the jobs that ended by then (as `tsched predict-eval`)."""
    return causal_replay(workload.requests, workload.finished, estimator.observe, estimator.predict)


def _ended_by(workload: Workload, moment: int) -> list[FinishedJob]:
    return [job for job in workload.finished if job.end <= moment]


def _later(workload: Workload) -> list[JobRequest]:
    """Jobs submitted after every job of the workload ended, in submission order, like the probes."""
    last = max(job.end for job in workload.finished)
    return [
        job._replace(submit=last + 60 * number)
        for number, job in enumerate(workload.requests[p] for p in workload.probes)
    ]


def _fail(estimator: Estimator, rule: str) -> AssertionError:
    return AssertionError(f"{estimator.spec}: {rule}")


# --- the checks ------------------------------------------------------------------------------


def _variants(value: object) -> list[object]:
    """The value and a neighbour of the same type: a constructor that alters what it stores shows on one of them."""
    if isinstance(value, bool):
        return [value, not value]
    if isinstance(value, int):
        return [value, value + 1]
    if isinstance(value, float):
        return [value, value * 1.01 + 0.001]
    return [value]


def _check_refused(estimator: Estimator, name: str, value: object, how: str, attempt: Callable[[], object]) -> None:
    """`attempt` (giving `name` a value its declaration refuses) raises a ValueError that names the parameter."""
    declared = declarations(type(estimator))[name].admits()
    try:
        attempt()
    except ValueError as error:
        if name in str(error):
            return
        raise _fail(estimator, f"{how} refuses {name}={value!r} without naming it: {error}") from None
    except Exception as error:
        rule = f"{how} refuses {name}={value!r} with {type(error).__name__} ({error}), not a ValueError naming it"
        raise _fail(estimator, rule) from None
    raise _fail(estimator, f"{how} accepts {name}={value!r}, though it is declared {declared}")


def check_parameters(
    estimator: Estimator, workload: Workload, make: Callable[[str], Estimator] = make_estimator
) -> None:
    """Keyword-only constructor parameters, stored unchanged under their names, rebuilt from the SPEC."""
    signature = inspect.signature(type(estimator).__init__)
    named = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = [p.name for p in signature.parameters.values() if p.name != "self" and p.kind in named]
    positional = [p.name for p in signature.parameters.values() if p.name != "self" and p.kind in named[:2]]
    if positional:
        raise _fail(estimator, f"constructor parameters must be keyword-only: {', '.join(positional)}")
    params = estimator.get_params()
    if list(params) != parameters:
        raise _fail(estimator, f"get_params() names {list(params)}, the constructor {parameters}")
    for name, value in params.items():
        for given in _variants(value):
            try:
                stored = type(estimator)(**{**params, name: given}).get_params()[name]
            except ValueError:
                continue  # out of the parameter's range
            if type(stored) is not type(given) or stored != given:
                raise _fail(estimator, f"parameter {name}={given!r} is stored as {stored!r}")
    for name, declaration in declarations(type(estimator)).items():
        for value in declaration.refused():
            build = partial(type(estimator), **{**params, name: value})
            _check_refused(estimator, name, value, "the constructor", build)
    from_spec = make(estimator.spec).get_params()
    for name, value in params.items():
        if type(from_spec[name]) is not type(value) or from_spec[name] != value:
            raise _fail(estimator, f"parameter {name}={value!r} comes back from the SPEC as {from_spec[name]!r}")


def _alternative(estimator: Estimator, name: str) -> object | None:
    """Another value the parameter admits, with the others as they are (None: none found).

    The next choice; the other boolean; a neighbouring number either side; a
    duration doubled (`7d`: `14d`), or `all` or `never` where admitted.
    """
    value = estimator.get_params()[name]
    declaration = declarations(type(estimator)).get(name)
    candidates: list[object]
    if declaration is not None and declaration.choices is not None:
        at = declaration.choices.index(value) if value in declaration.choices else -1
        candidates = [declaration.choices[(at + 1) % len(declaration.choices)]]
    elif isinstance(value, str):
        duration = re.fullmatch(r"(\d+)([a-z]*)", value)
        doubled = [f"{int(duration[1]) * 2 or 1}{duration[2] or 's'}"] if duration else []
        candidates = [*doubled, "all", "never"]
    elif isinstance(value, int | float) and not isinstance(value, bool):
        candidates = [
            *_variants(value)[1:],
            value - 1 if isinstance(value, int) else value * 0.99 - 0.001,
        ]
    else:
        candidates = _variants(value)[1:]
    for candidate in candidates:
        try:
            type(estimator)(**{**estimator.get_params(), name: candidate})
        except ValueError:
            continue
        if candidate != value:
            return candidate
    return None


def _answers(estimator: Estimator, questions: list[JobRequest]) -> list[Prediction]:
    return [estimator.predict(job) for job in questions]


def _change(estimator: Estimator, how: str, name: str, value: object) -> None:
    if how == "set_params":
        estimator.set_params(**{name: value})
    else:
        setattr(estimator, name, value)


def _check_refused_changes(estimator: Estimator, workload: Workload, fitted: Estimator) -> None:
    """Every value the constructor must refuse is refused by `set_params` and by assignment, naming the
    parameter, and `fitted` is left as it was: its parameters the very objects, and still fitted."""
    params = fitted.get_params()
    for name, declaration in declarations(type(estimator)).items():
        for value, how in product(declaration.refused(), ("set_params", "assigning")):
            _check_refused(estimator, name, value, how, partial(_change, fitted, how, name, value))
            if any(fitted.get_params()[key] is not given for key, given in params.items()):
                raise _fail(estimator, f"refusing {name}={value!r} ({how}) changed its parameters")
    questions = _later(workload)
    if _answers(fitted, questions) != _answers(_fresh(estimator, workload).fit(workload.finished), questions):
        raise _fail(estimator, "a refused parameter change altered what the fitted estimator had learned")


#: Parameters that say how the work is done, not what is computed: the check of changes that take effect leaves
#: them as they are (two LightGBM threads on a shared, loaded machine make each training many times slower);
#: their refusals are checked like any other's.
HOW_NOT_WHAT = frozenset({"threads"})


def check_parameter_changes(estimator: Estimator, workload: Workload) -> None:
    """A parameter changed after construction is refused as the constructor refuses it (ValueError naming it,
    the estimator left as it was) or takes effect: the estimator starts again from nothing learned, then
    learns and answers as one built with the new values. Both with `set_params` and by assignment."""
    history = workload.finished
    questions = _later(workload)
    _check_refused_changes(estimator, workload, _fresh(estimator, workload).fit(history))
    params = estimator.get_params()
    changed = {
        name: value
        for name in params
        if name not in HOW_NOT_WHAT and (value := _alternative(estimator, name)) is not None
    }
    if not changed:
        return
    assigned = _fresh(estimator, workload).fit(history)
    for name, value in changed.items():
        try:
            setattr(assigned, name, value)
        except ValueError:  # admitted alone, not with an alternative already assigned: keep the value
            changed[name] = params[name]
            setattr(assigned, name, params[name])
    at_once = _fresh(estimator, workload).fit(history).set_params(**changed)
    reference = type(estimator)(**{**params, **changed})
    changes = ", ".join(f"{name}={value!r}" for name, value in changed.items())
    for how, other in (("assigned one by one", assigned), ("given to set_params", at_once), ("built", reference)):
        if isinstance(other, OracleEstimator):
            other.bind_truth(workload.truth)
        if any(other.get_params()[name] is not value for name, value in changed.items()):
            raise _fail(estimator, f"{changes} {how} are not stored as given")
    untaught = _answers(reference, questions)
    taught = _answers(reference.fit(history), questions)
    for how, other in (("assigned one by one", assigned), ("given to set_params", at_once)):
        if _answers(other, questions) != untaught:
            raise _fail(estimator, f"with {changes} {how}, it still answers from what it had learned before")
        if _answers(other.fit(history), questions) != taught:
            raise _fail(estimator, f"with {changes} {how}, it learns and answers unlike an estimator built with them")


def check_scikit_learn_protocol(estimator: Estimator, workload: Workload) -> None:
    """scikit-learn's `clone` works, and the estimator passes scikit-learn's checks of the parameter protocol."""
    from sklearn.base import clone
    from sklearn.utils import estimator_checks

    try:
        copy = clone(estimator)
    except RuntimeError as error:  # what clone raises for a constructor that alters a parameter
        raise _fail(estimator, f"sklearn.base.clone: {error}") from error
    if type(copy) is not type(estimator) or copy is estimator or copy.get_params() != estimator.get_params():
        raise _fail(estimator, "sklearn.base.clone does not give an estimator of the same class and parameters")
    name = type(estimator).__name__
    for check in SCIKIT_LEARN_CHECKS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                getattr(estimator_checks, check)(name, estimator)
            except (AssertionError, AttributeError, TypeError, ValueError, RuntimeError) as error:
                raise _fail(estimator, f"scikit-learn's {check}: {error or type(error).__name__}") from error
        changed = [str(warning.message) for warning in caught if "parameters changed" in str(warning.message)]
        if changed:
            raise _fail(estimator, f"scikit-learn's {check}: {changed[0]}")


#: scikit-learn's checks of what every estimator of its own must do with parameters, whatever it learns from
#: (its other checks fit arrays X, y). Its check that neither construction nor set_params validates is left
#: out: here both validate, so that a SPEC or a changed parameter is refused at once with its name.
SCIKIT_LEARN_CHECKS = (
    "check_estimator_cloneable",
    "check_estimator_repr",
    "check_no_attributes_set_in_init",
    "check_parameters_default_constructible",
    "check_get_params_invariance",
    "check_set_params",
)


def _alike(one: WithInterval, other: WithInterval) -> bool:
    """The same prediction and interval quantiles, and P(underestimate) to 1e-9: a probability computed in a
    batch is a matrix product whose last bits depend on the batch's size."""
    (prediction, interval), (other_prediction, other_interval) = one, other
    if prediction != other_prediction or (interval is None) != (other_interval is None):
        return False
    return (
        interval is None
        or other_interval is None
        or (
            interval.quantiles == other_interval.quantiles
            and abs(interval.p_underestimate - other_interval.p_underestimate) <= 1e-9
        )
    )


def check_fit(estimator: Estimator, workload: Workload) -> None:
    """`fit` = reset + observe in end order + ready; a fitted estimator answers from history at once."""
    fitted = _fresh(estimator, workload)
    fitted.fit(workload.finished[::-1])  # fit orders the jobs itself
    stepwise = _fresh(estimator, workload)
    stepwise.fit(workload.finished[: len(workload.finished) // 2])  # fit starts from scratch
    stepwise.reset()
    for job in workload.finished:
        stepwise.observe(job)
    stepwise.ready()
    questions = _later(workload)
    answers = [fitted.predict(job) for job in questions]
    if answers != [stepwise.predict(job) for job in questions]:
        raise _fail(estimator, "fit() answers differently from reset(), observe() one by one and ready()")
    if "model" not in estimator.predict_effects:
        observed = _fresh(estimator, workload)
        for job in workload.finished:
            observed.observe(job)
        if answers != [observed.predict(job) for job in questions]:
            raise _fail(estimator, "ready() changed the answers of an estimator that declares no model")
    if estimator.learns and all(answer.fallback for answer in answers):
        raise _fail(estimator, "after fit() every answer is a fallback: it does not answer from history")
    many = _fresh(estimator, workload).fit(workload.finished).predict_many(questions)
    if many != answers:
        raise _fail(estimator, "predict_many() answers differently from predict() one by one")
    asked = _fresh(estimator, workload).fit(workload.finished)
    one_by_one = [asked.predict_with_interval(job) for job in questions]
    with_intervals = _fresh(estimator, workload).fit(workload.finished).predict_many(questions, intervals=True)
    if not all(_alike(one, other) for one, other in zip(one_by_one, with_intervals, strict=True)):
        raise _fail(estimator, "predict_many(intervals=True) answers differently from predict_with_interval()")
    if [prediction for prediction, _ in one_by_one] != answers:
        raise _fail(estimator, "predict_with_interval() predicts differently from predict()")


def check_estimates_within_request(estimator: Estimator, workload: Workload) -> None:
    """Every estimate is an integer number of seconds in [1, t_req]; learning estimators learn."""
    answers = _replay(_fresh(estimator, workload), workload)
    for job, answer in zip(workload.requests, answers, strict=True):
        if not (isinstance(answer.t_sched, int) and 1 <= answer.t_sched <= job.t_req):
            raise _fail(estimator, f"job {job.job_id}: t_sched {answer.t_sched!r} outside [1, t_req={job.t_req}]")
        if answer.basis < 0:
            raise _fail(estimator, f"job {job.job_id}: negative basis {answer.basis}")
    if estimator.learns and all(answer.fallback for answer in answers):
        raise _fail(estimator, "a whole replay fell back to t_req: it never answers from history")


def with_new_future(workload: Workload, position: int, seed: int) -> Workload:
    """The workload with every job still running at the submission of `requests[position]` given a new
    runtime (each still ending after that submission).

    Odd seeds draw the runtimes at random; even seeds end every running job
    one second after the submission, which catches an estimator that looks
    even a second ahead.
    """
    rng = np.random.default_rng(seed)
    moment = workload.requests[position].submit
    changed = []
    for job in workload.finished:
        if job.end <= moment:
            changed.append(job)
            continue
        start = job.end - job.runtime
        lowest = max(0, moment - start + 1)
        runtime = (
            int(rng.integers(lowest, job.request.t_req + 1)) if seed % 2 and lowest <= job.request.t_req else lowest
        )
        changed.append(FinishedJob(job.request, start + runtime, runtime))
    changed.sort(key=lambda job: (job.end, job.request.submit, job.request.job_id))
    return Workload(workload.requests, changed, workload.probes)


def _replayed_answer(estimator: Estimator, workload: Workload, position: int) -> Outcome:
    """The answer a replay gives job `position` (the jobs after it cannot matter, so they are not replayed)."""
    estimator = _fresh(estimator, workload)
    asked = workload.requests[: position + 1]
    return causal_replay(asked, workload.finished, estimator.observe, estimator.predict)[position]


def _answer_after_observing_everything(estimator: Estimator, workload: Workload, position: int) -> Outcome:
    """As a service answers a late question: every completion already observed, the future included."""
    told = _fresh(estimator, workload)
    for job in workload.finished:
        told.observe(job)
    return _ask(told, workload.requests[position])


def future_leaks(
    estimator: Estimator, workload: Workload, answer: Callable[[Estimator, Workload, int], Outcome]
) -> list[int]:
    """Positions of the probes whose answer changed when the future changed."""
    return [
        position
        for seed, position in enumerate(workload.probes)
        if answer(estimator, workload, position)
        != answer(estimator, with_new_future(workload, position, seed), position)
    ]


def check_causality(estimator: Estimator, workload: Workload) -> None:
    """No prediction depends on a job that ended after the submission (evaluation-only estimators exempt)."""
    if estimator.evaluation_only:
        return
    for answer, how in ((_replayed_answer, "in a replay"), (_answer_after_observing_everything, "told the future")):
        leaks = future_leaks(estimator, workload, answer)
        if leaks:
            job = workload.requests[leaks[0]]
            rule = (
                f"{how}, the answer for job {job.job_id} changed when jobs ending after its submission "
                f"({job.submit}) changed: it reads the future"
            )
            raise _fail(estimator, rule)


def check_clones_answer_alike(
    estimator: Estimator, workload: Workload, make: Callable[[str], Estimator] = make_estimator
) -> None:
    """A clone and an estimator rebuilt from the SPEC give the same answers as the original."""
    reference = _replay(_fresh(estimator, workload), workload)
    rebuilt = make(estimator.spec)
    if isinstance(rebuilt, OracleEstimator):
        rebuilt.bind_truth(workload.truth)
    for other, how in ((_fresh(estimator, workload), "a clone"), (rebuilt, "the estimator its SPEC builds")):
        if _replay(other, workload) != reference:
            raise _fail(estimator, f"{how} answers differently")


def check_predict_effects(estimator: Estimator, workload: Workload) -> None:
    """`predict` changes nothing beyond the effects the estimator declares."""
    effects = estimator.predict_effects
    moment = workload.finished[len(workload.finished) // 2].end
    earlier = [job for job in workload.requests if job.submit <= moment][-5:]
    later = [job for job in workload.requests if job.submit > moment][:40]
    history = _ended_by(workload, later[0].submit)

    def fitted() -> Estimator:
        return _fresh(estimator, workload).fit(history)

    before = [_ask(fitted(), job) for job in earlier]
    asked = fitted()
    for job in later:
        asked.predict(job)
    after = [_ask(asked, job) for job in earlier]
    for job, first, second in zip(earlier, before, after, strict=True):
        if second == REFUSED and "history" not in effects:
            rule = (
                f"job {job.job_id}: refused after later submissions were predicted, but no 'history' effect is declared"
            )
            raise _fail(estimator, rule)
        if second not in (first, REFUSED) and "submissions" not in effects:
            rule = (
                f"job {job.job_id}: answered {second} after later submissions were predicted, {first} before, "
                "but no 'submissions' effect is declared (a 'history' effect may refuse, never answer from part "
                "of the history)"
            )
            raise _fail(estimator, rule)
    if "submissions" not in effects:
        probe = later[-1]
        alone = fitted().predict(probe)
        crowded = fitted()
        answers = [crowded.predict(job) for job in [*later, probe]]
        if answers[-1] != alone or answers[-1] != answers[-2]:
            rule = f"job {probe.job_id}: the answer depends on what else was predicted, but no 'submissions' effect"
            raise _fail(estimator, rule + " is declared")


def check_intervals(estimator: Estimator, workload: Workload) -> None:
    """An interval, where given, is ordered, within [1, t_req], agrees with t_sched, and changes no answer."""
    asked = _fresh(estimator, workload)

    def answer(job: JobRequest) -> Outcome:
        try:
            prediction, interval = asked.predict_with_interval(job)
        except HistoryDiscardedError:
            return REFUSED
        if interval is None:
            return prediction
        if prediction.fallback:
            raise _fail(estimator, f"job {job.job_id}: an interval for a fallback, which has no distribution")
        runtimes = [runtime for _, runtime in interval.quantiles]
        probabilities = [probability for probability, _ in interval.quantiles]
        if probabilities != sorted(probabilities) or not all(0 < p < 1 for p in probabilities):
            raise _fail(estimator, f"job {job.job_id}: interval probabilities {probabilities} not increasing in (0, 1)")
        if runtimes != sorted(runtimes) or not all(1 <= runtime <= job.t_req for runtime in runtimes):
            raise _fail(estimator, f"job {job.job_id}: interval runtimes {runtimes} not increasing in [1, t_req]")
        if not 0 <= interval.p_underestimate <= 1:
            raise _fail(estimator, f"job {job.job_id}: P(underestimate) {interval.p_underestimate} not in [0, 1]")
        return prediction

    if causal_replay(workload.requests, workload.finished, asked.observe, answer) != _replay(
        _fresh(estimator, workload), workload
    ):
        raise _fail(estimator, "answers change when intervals are asked for")


CHECKS: Sequence[Callable[[Estimator, Workload], None]] = (
    check_parameters,
    check_parameter_changes,
    check_scikit_learn_protocol,
    check_fit,
    check_estimates_within_request,
    check_causality,
    check_clones_answer_alike,
    check_predict_effects,
    check_intervals,
)
#: The checks that rebuild the estimator from its SPEC.
_REBUILDING = (check_parameters, check_clones_answer_alike)
