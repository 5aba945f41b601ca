"""`adaptive`: an estimate that chooses itself, by replaying the site's recent past through its own scheduler.

No one estimate is best for every site (issue 28): lgbm-sched's low quantile gains most on Gaussier et al.'s
traces and makes a lightly loaded machine's waits explode; last2 beats it on HPC2N; the users' requests are what
a scheduler uses when the others do harm. `AdaptiveEstimator` keeps several candidate estimates running side by
side (the request itself, last2, lgbm's runtime distribution read at several levels) and records what each
answered for every job at its submission. Every `retrain` of trace time it replays the jobs submitted in the
trailing `window` (with their actual runtimes where they have finished) through the scheduler the estimates are for
(policy, backfilling, order, planning mode, correction, machine: the run's), once per candidate and per replicate
(the first as submitted, the others with every submission moved by up to `jitter` seconds: the replay's own
noise), and scores each by the `objective` (AVEbsld, average wait or AWRT over the replayed jobs). It then serves
the candidate that did best, with two rules:

- it keeps its current choice unless the challenger wins, on the mean over replicates, by more than the spread of
  the paired differences over the replicates (and at least `min_gain` of the current score): a choice does not
  flap on the replay's noise;
- it never serves a candidate that did worse than the request on the replay; a current choice that did is dropped
  at once.

Causal: the replay holds the jobs submitted in the window, each with the estimates the candidates gave at its
submission; those that have finished (been observed) with their runtime, those still waiting or running with their
request, the most they can run, which is known at submission. Leaving the unfinished ones out would hide exactly
the harm an aggressive estimate does: the wide jobs it starves are the ones still waiting at the retuning (a first
version did, and chose lgbm's lowest levels on SDSC-SP2, where the longest wait then reached 39 days). Even so,
on SDSC-SP2 the run as a whole builds a backlog no 28-day replay shows and adaptive does worse than last2
(docs/scheduling-value.md): the rule "never worse than the request" holds on each replay, not on the run.

Why here, in the simulator: the estimator is a consumer of the simulator (its replay is `simulator.engine`'s), so
it cannot live in `predictor`, which the simulator builds on. It is an `Estimator` all the same (scikit-learn's
conventions, the contract `predictor.estimators.checks` runs), built from a SPEC by `simulator.estimators`, the
registry of what a simulation can run: the predictor's registry plus this one. The scheduler it tunes for is
plain parameters of its SPEC (`procs`, `policy`, `backfill`, ...), so a clone or the service builds the same
estimator from the same SPEC; a simulation fills in the ones its SPEC leaves out from the run's own scheduler
(`simulator.estimators.bind_scheduler`), and the `tsched serve` command hands the service a factory that builds it
(dependency injection through the factory the service already takes, not a global hook).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
import pandas as pd

from kernel.durations import parse_duration, required_duration
from kernel.errors import UsageError
from kernel.jobs import JOB_FIELD_NAMES, FinishedJob, JobRequest, Prediction
from predictor.estimators.base import Estimator, PredictEffect, Tuning, parameter
from predictor.estimators.last2 import LastTwoEstimator
from predictor.estimators.lgbm.calibration import choose_quantile
from predictor.estimators.lgbm.model import TrainedModel, candidate_estimates
from predictor.estimators.lgbm.sched import LGBMSchedEstimator
from predictor.offline import causal_replay
from simulator.backfill import BACKFILL_ORDERS, BACKFILLS
from simulator.engine import SimulationConfig, TraceReplay
from simulator.machine import CORRECTIONS, MODES
from simulator.metrics import scheduling_metrics
from simulator.policies import POLICIES

#: What each `objective` minimises: a column of `simulator.metrics.scheduling_metrics`.
OBJECTIVES = {"bsld": "avg_bounded_slowdown", "wait": "avg_wait", "awrt": "awrt"}
#: The levels of lgbm's runtime distribution read as candidates (lgbm-sched's default, 0.3, among them).
LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5)
#: The candidate families besides the request, which is always one: the reference no choice may do worse than.
FAMILIES = ("last2", "lgbm")
REQUEST = "request"
#: Fewer finished jobs in the window than this and the replay says too little: the choice stays as it is.
MIN_REPLAY_JOBS = 50


def _families(text: str) -> None:
    """The check of `candidates`: families from FAMILIES joined by '+', each once."""
    parts = text.split("+") if text else []
    if len(set(parts)) != len(parts) or any(part not in FAMILIES for part in parts):
        raise ValueError(f"candidates must be families from {', '.join(FAMILIES)} joined by '+'; got {text!r}")


def _delay(text: str) -> None:
    parse_duration(text, "max_reservation_delay", unbounded="none", zero=True)


def _duration(name: str) -> Any:
    """The check of a bounded duration parameter (`window`, `retrain`)."""
    return lambda text: required_duration(text, name)


@dataclass(kw_only=True, eq=False, repr=False)
class DistributionLevels(LGBMSchedEstimator):
    """lgbm-sched that also reads each answer's runtime distribution at every level of LEVELS: one model and one
    booster call per job serve all the lgbm candidates."""

    def _initialise(self) -> None:
        super()._initialise()
        #: P(under) per candidate of the latest answered job, as `_assess` computed it.
        self._under: list[np.ndarray] = []

    def _assess(
        self, model: TrainedModel, rows: np.ndarray, t_req: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assessed = super()._assess(model, rows, t_req)
        self._under[:] = [assessed[1][-1]]
        return assessed

    def levels(self, job: JobRequest) -> tuple[Prediction, list[int]]:
        """Predict `job` as lgbm-sched does, and its estimates at LEVELS (t_req each until a model is live)."""
        self._under.clear()
        prediction = self.predict(job)
        if prediction.fallback or not self._under:
            return prediction, [job.t_req] * len(LEVELS)
        estimates = candidate_estimates(np.array([job.t_req]))[0]
        return prediction, [int(estimates[choose_quantile(self._under[0], level)]) for level in LEVELS]


class Replayed(NamedTuple):
    """A finished job as the replay needs it: as submitted, what each candidate estimated, when it ended, its
    runtime."""

    request: JobRequest
    estimates: tuple[int, ...]
    end: int
    runtime: int


@dataclass(frozen=True)
class Decision:
    """One retuning: when, on how many jobs, each candidate's mean score over the replicates it was replayed on, the
    noise margin, and the choice."""

    time: int
    jobs: int
    scores: dict[str, float]
    noise: float
    choice: str


class _Recorded:
    """A prediction session that answers each job with one candidate's recorded estimate (a replay's)."""

    def __init__(self, estimates: dict[int, int]) -> None:
        self._estimates = estimates
        self.fallbacks = 0
        self.asks_ahead = False

    def sync(self, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> list[Prediction]:
        return [Prediction(self._estimates[job.job_id], None, 0, False) for job in submitted]

    def close(self) -> None:
        pass


class WindowReplay:
    """The trailing window's jobs, replayable under any candidate's estimates and any replicate.

    Replicate 0 replays the jobs as submitted; replicate k > 0 moves every submission by up to `jitter` seconds
    (drawn with seeds (k, `seed`)). Candidates whose estimates are all alike share one replay.
    """

    def __init__(self, jobs: list[Replayed], config: SimulationConfig, metric: str, jitter: int, seed: int) -> None:
        self._frame = pd.DataFrame([job.request for job in jobs], columns=list(JOB_FIELD_NAMES))
        self._frame["t_act"] = [job.runtime for job in jobs]
        self._estimates = np.array([job.estimates for job in jobs], dtype=np.int64)
        self._ids = self._frame["job_id"].tolist()
        self._config, self._metric, self._jitter, self._seed = config, metric, jitter, seed
        self._done: dict[tuple[bytes, int], float] = {}

    @property
    def candidates(self) -> int:
        return int(self._estimates.shape[1])

    def _replicate(self, replicate: int) -> pd.DataFrame:
        if not replicate:
            return self._frame
        submit = self._frame["submit"].to_numpy(dtype=np.int64)
        offsets = np.random.default_rng([replicate, self._seed]).integers(-self._jitter, self._jitter + 1, len(submit))
        return self._frame.assign(submit=np.maximum(submit.min(), submit + offsets))

    def score(self, candidate: int, replicate: int) -> float:
        """The objective's metric of one candidate's replay of one replicate."""
        column = self._estimates[:, candidate]
        key = (column.tobytes(), replicate)
        if key not in self._done:
            session = _Recorded(dict(zip(self._ids, column.tolist(), strict=True)))
            result = TraceReplay(self._replicate(replicate), self._config, session).replay()
            self._done[key] = scheduling_metrics(result.jobs, self._config.procs, self._config.policy)[self._metric]
        return self._done[key]

    def scores(self, current: int, replicates: int) -> np.ndarray:
        """Candidates x replicates: every candidate on replicate 0, then the other replicates for the contenders
        only (the request, the current choice and replicate 0's best eligible); NaN where not replayed."""
        scores = np.full((self.candidates, replicates), np.nan)
        scores[:, 0] = [self.score(candidate, 0) for candidate in range(self.candidates)]
        first = scores[:, 0]
        best = int(np.argmin(np.where(first <= first[0], first, np.inf)))
        for candidate in sorted({0, current, best}):
            scores[candidate, 1:] = [self.score(candidate, replicate) for replicate in range(1, replicates)]
        return scores


def decide(scores: np.ndarray, current: int, min_gain: float) -> tuple[int, float]:
    """The candidate to serve after a replay (row 0 of `scores` is the request), and the noise margin used.

    Only candidates replayed on every replicate (no NaN) whose mean score is no worse than the request's are
    eligible; the current choice, if it still is, stays unless the best beats it on the mean paired difference by
    more than that difference's standard deviation over the replicates, and by at least `min_gain` of its own mean.
    """
    means = scores.mean(axis=1)
    eligible = ~np.isnan(means) & (means <= means[0])
    best = int(np.argmin(np.where(eligible, means, np.inf)))
    if best == current or not eligible[current]:
        return best, 0.0
    difference = scores[current] - scores[best]
    spread = float(difference.std(ddof=1)) if len(difference) > 1 else 0.0
    noise = max(spread, min_gain * float(means[current]))
    return (best if float(difference.mean()) > noise else current), noise


@dataclass(kw_only=True, eq=False, repr=False)
class AdaptiveEstimator(Estimator):
    """The candidate estimate that did best when the recent past was replayed through the run's scheduler."""

    name: ClassVar[str] = "adaptive"
    predict_effects: ClassVar[frozenset[PredictEffect]] = frozenset({"history", "submissions", "model"})

    objective: str = parameter("bsld", "what the replay minimises", choices=tuple(OBJECTIVES))
    candidates: str = parameter(
        "last2+lgbm",
        "candidate families besides the request, joined by '+' (lgbm: its distribution at 0.1-0.5)",
        check=_families,
    )
    window: str = parameter("28d", "trailing trace time whose submissions are replayed", check=_duration("window"))
    retrain: str = parameter("7d", "trace time between retunings (and lgbm's trainings)", check=_duration("retrain"))
    replicates: int = parameter(3, "replays per candidate: as submitted, then jittered", low=1, high=20)
    jitter: int = parameter(10, "seconds a jittered replay moves each submission by, at most", low=0, high=3600)
    min_gain: float = parameter(0.01, "the least relative gain that replaces the current choice", low=0, high=1)
    trees: int = parameter(20, "LightGBM boosting rounds of the lgbm candidates", low=1, high=1000)
    min_train: int = parameter(500, "the fewest finished jobs lgbm's model is trained on", low=1, high=1_000_000)
    procs: int = parameter(0, "processors of the machine replayed (0: not bound; a simulation binds its own)", low=0)
    policy: str = parameter("fcfs", "the replayed queue policy", choices=tuple(POLICIES))
    backfill: str = parameter("easy", "the replayed backfilling", choices=tuple(BACKFILLS))
    backfill_order: str = parameter("sjf", "the replayed backfill order", choices=tuple(BACKFILL_ORDERS))
    mode: str = parameter("regular", "where the replayed scheduler uses the estimates", choices=tuple(MODES))
    correction: str = parameter("request", "the replayed correction", choices=tuple(CORRECTIONS))
    max_reservation_delay: str = parameter("none", "the replayed EASY bound (a duration, or none)", check=_delay)

    def _initialise(self) -> None:
        self._window = required_duration(self.window, "window")
        self._retrain = required_duration(self.retrain, "retrain")
        families = self.candidates.split("+") if self.candidates else []
        self._last2 = LastTwoEstimator() if "last2" in families else None
        self._lgbm = (
            DistributionLevels(trees=self.trees, min_train=self.min_train, retrain=self.retrain)
            if "lgbm" in families
            else None
        )
        self._names = (REQUEST, *(["last2"] if self._last2 else []), *(f"lgbm@{q}" for q in LEVELS if self._lgbm))
        self._choice = 0
        self._next_tuning: int | None = None
        self._pending: dict[int, tuple[JobRequest, tuple[int, ...]]] = {}
        self._finished: deque[Replayed] = deque()
        self._unpredicted: list[FinishedJob] = []
        self._decisions: list[Decision] = []

    @property
    def decisions(self) -> list[Decision]:
        """Every retuning so far, oldest first."""
        return self._decisions

    @property
    def choice(self) -> str:
        """The candidate served now."""
        return self._names[self._choice]

    def scheduler(self) -> SimulationConfig:
        """The scheduler the replays run; UsageError while the machine is not bound (procs=0)."""
        if self.procs == 0:
            raise UsageError(
                "adaptive: procs=0, the machine to replay on is not bound: give procs=N (and the scheduler's "
                "policy, backfill, ... if not EASY-SJBF in regular mode), or run it through `tsched simulate`, "
                "which binds the run's"
            )
        delay = parse_duration(self.max_reservation_delay, "max_reservation_delay", unbounded="none", zero=True)
        return SimulationConfig(
            self.procs, self.policy, self.backfill, self.mode, self.correction, self.backfill_order, delay
        )

    def reset(self) -> None:
        self._initialise()

    # -- learning ---------------------------------------------------------------------------------

    def observe(self, job: FinishedJob) -> None:
        request = job.request
        entry = self._pending.pop(request.job_id, None)
        if entry is not None and entry[0].submit == request.submit:
            self._finished.append(Replayed(request, entry[1], job.end, job.runtime))
            horizon = job.end - self._window
            while self._finished and self._finished[0].end < horizon:  # submitted before any window still to come
                self._finished.popleft()
        else:
            self._unpredicted.append(job)
        for candidate in (self._last2, self._lgbm):
            if candidate is not None:
                candidate.observe(job)

    def ready(self) -> None:
        """Learn the jobs observed without having been predicted (a warm-up, a `fit`) as if they had been: replay
        them causally through fresh candidates, which record what they would have answered at each submission;
        then train lgbm on everything and retune on the trailing window."""
        if not self._unpredicted:
            return
        history = sorted(self._unpredicted, key=lambda job: (job.end, job.request.submit, job.request.job_id))
        pending = self._pending
        self._initialise()
        requests = sorted((job.request for job in history), key=lambda request: (request.submit, request.job_id))
        causal_replay(requests, history, self.observe, self.predict)
        last = (requests[-1].submit, requests[-1].submit)
        for job in history:  # what ended after the last submission, which the replay did not feed
            if (job.end, job.request.submit) >= last:
                self.observe(job)
        self._pending.update(pending)
        if self._lgbm is not None:
            self._lgbm.ready()
        self._retune(history[-1].end)
        self._next_tuning = history[-1].end + self._retrain

    # -- predicting -------------------------------------------------------------------------------

    def predict(self, job: JobRequest) -> Prediction:
        config = self.scheduler()
        if self._next_tuning is None:
            self._next_tuning = job.submit + self._retrain
        elif job.submit >= self._next_tuning:
            self._retune(job.submit, config)
            self._next_tuning = job.submit + self._retrain
        # The request by choice, once a replay chose it, is no fallback: it answers from the replayed history.
        replayed = self._decisions[-1].jobs if self._decisions else 0
        answers: list[Prediction] = [Prediction(job.t_req, None, replayed, not replayed)]
        if self._last2 is not None:
            answers.append(self._last2.predict(job))
        if self._lgbm is not None:
            distribution, levels = self._lgbm.levels(job)
            answers += [distribution._replace(t_sched=level, factor=level / job.t_req) for level in levels]
        self._pending[job.job_id] = (job, tuple(answer.t_sched for answer in answers))
        return answers[self._choice]

    def _retune(self, now: int, config: SimulationConfig | None = None) -> None:
        """Replay the jobs submitted in the trailing window under every candidate and choose (see `decide`)."""
        config = config or self.scheduler()
        first = now - self._window
        jobs = [job for job in self._finished if job.request.submit >= first and job.end <= now]
        jobs += [  # still waiting or running: replayed with the most they can run, their request
            Replayed(request, estimates, now, request.t_req)
            for request, estimates in self._pending.values()
            if first <= request.submit <= now
        ]
        if len(jobs) < MIN_REPLAY_JOBS:
            return
        replay = WindowReplay(jobs, config, OBJECTIVES[self.objective], self.jitter, now)
        scores = replay.scores(self._choice, self.replicates)
        self._choice, noise = decide(scores, self._choice, self.min_gain)
        means = dict(zip(self._names, np.nanmean(scores, axis=1).tolist(), strict=True))
        self._decisions.append(Decision(now, len(jobs), means, noise, self.choice))

    def tuning(self) -> Tuning:
        """The candidate served now, and the latest retuning's scores (the objective's, lower is better)."""
        latest = self._decisions[-1] if self._decisions else None
        return Tuning(self.choice, len(self._decisions), {} if latest is None else dict(latest.scores))
