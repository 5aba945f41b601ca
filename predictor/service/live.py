"""Live accuracy: each completion scored against the prediction the service made for it at submission.

Operators adopt a predictor after watching it on their own jobs, so a
namespace remembers, per estimator, the predictions it answered (Predict,
PredictBatch, Sync) until the job's completion arrives, then keeps the scores
of the last `window` completions (Tang's accuracy, underestimated, BE).

A scheduler often asks before it has numbered the job (Slurm's job_submit
runs before the job id exists), so a completion is matched to its prediction
by what both carry: user, group, request and size, and a submit time within
`SUBMIT_SLACK_SECONDS`. Predictions never matched (a job refused after the
question, a user's `tsched predict`) are dropped oldest first beyond
`pending` per namespace. Memory only: a restart starts the scores afresh.
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kernel.jobs import FinishedJob, JobRequest, Prediction
from kernel.specs import parse_spec
from predictor.forecasting import error_ratio
from predictor.scoring import BAD_UNDERESTIMATE_SECONDS

#: How far a completion's submit time may be from the submit time its prediction was asked for (seconds):
#: a scheduler's submit time is set just after its submission hook asked.
SUBMIT_SLACK_SECONDS = 5

#: What a completion and its prediction share: user, group, t_req, procs.
Key = tuple[int, int, int, int]


def _key(job: JobRequest) -> Key:
    return (job.user, job.group, job.t_req, job.procs)


def estimator_labels(specs: Sequence[str]) -> dict[str, str]:
    """A short label per canonical SPEC, for metric labels and tables: the estimator's name, or a trained model's
    (a canonical SPEC spells out every parameter: some 230 characters for a model). Two SPECs of one name in a
    namespace (percentile:q=85 and q=70) are told apart by a digest of their SPEC; `Status` gives it in full."""
    names = {spec: parse_spec(spec)[0] for spec in specs}
    shared = Counter(names.values())
    return {
        spec: name if shared[name] == 1 else f"{name}#{hashlib.sha256(spec.encode()).hexdigest()[:8]}"
        for spec, name in names.items()
    }


@dataclass(frozen=True)
class LiveSummary:
    """One estimator's scores over the last completions of a namespace (shares from 0 to 1)."""

    estimator: str
    scored: int
    accuracy: float
    underestimated: float
    bad_estimates: float
    fallbacks: float
    pending: int
    #: A self-tuning estimator's `Tuning` (empty, 0 and {} for the others).
    choice: str = ""
    retunings: int = 0
    replay_scores: Mapping[str, float] = field(default_factory=dict)


class _Scores:
    """One estimator's predictions awaiting completion and its last scores."""

    def __init__(self, window: int) -> None:
        #: key -> (submit, t_sched, fallback), oldest first; the keys in the order they were last asked about.
        self.waiting: OrderedDict[Key, deque[tuple[int, int, bool]]] = OrderedDict()
        self.count = 0
        #: per completion: accuracy, underestimated, badly, fallback, and actual / t_sched (the error a sampled
        #: forecast draws)
        self.window: deque[tuple[float, bool, bool, bool, float]] = deque(maxlen=window)

    def add(self, job: JobRequest, prediction: Prediction) -> None:
        key = _key(job)
        queue = self.waiting.get(key)
        if queue is None:
            queue = self.waiting[key] = deque()
        else:
            self.waiting.move_to_end(key)
        queue.append((job.submit, prediction.t_sched, prediction.fallback))
        self.count += 1

    def drop_oldest(self, count: int) -> None:
        """Forget `count` predictions, from the key asked about least recently (whole keys at once)."""
        while count > 0 and self.waiting:
            key, queue = next(iter(self.waiting.items()))
            if len(queue) <= count:
                del self.waiting[key]
                count -= len(queue)
                self.count -= len(queue)
            else:
                for _ in range(count):
                    queue.popleft()
                self.count -= count
                count = 0

    def score(self, job: FinishedJob) -> None:
        key = _key(job.request)
        queue = self.waiting.get(key)
        if queue is None:
            return
        submit = job.request.submit
        while queue and queue[0][0] < submit - SUBMIT_SLACK_SECONDS:  # never completed (refused, cancelled)
            queue.popleft()
            self.count -= 1
        if queue and queue[0][0] <= submit + SUBMIT_SLACK_SECONDS:
            _, t_sched, fallback = queue.popleft()
            self.count -= 1
            actual = job.runtime
            under = t_sched < actual
            accuracy = 1.0 if t_sched == actual else (t_sched / actual if under else actual / t_sched)
            bad = actual - t_sched > BAD_UNDERESTIMATE_SECONDS
            self.window.append((accuracy, under, bad, fallback, error_ratio(actual, t_sched)))
        if not queue:
            del self.waiting[key]

    def summary(self, estimator: str) -> LiveSummary:
        n = len(self.window)
        shares = [sum(row[column] for row in self.window) / n if n else 0.0 for column in range(4)]
        accuracy, under, bad, fallbacks = shares
        return LiveSummary(estimator, n, accuracy, under, bad, fallbacks, self.count)


class LiveScores:
    """A namespace's live scores, per estimator (canonical SPEC). The caller holds the namespace's lock."""

    def __init__(self, window: int, pending: int) -> None:
        self._window = window
        self._pending = pending
        self._by_estimator: dict[str, _Scores] = {}

    def predicted(self, estimator: str, jobs: Sequence[JobRequest], predictions: Sequence[Prediction]) -> None:
        """Remember what `estimator` answered for `jobs` (their submit times set)."""
        scores = self._by_estimator.get(estimator)
        if scores is None:
            scores = self._by_estimator[estimator] = _Scores(self._window)
        kept = min(len(jobs), self._pending)  # the earlier ones would be dropped at once
        for job, prediction in zip(jobs[len(jobs) - kept :], predictions[len(jobs) - kept :], strict=True):
            scores.add(job, prediction)
        excess = self.pending - self._pending
        while excess > 0:
            largest = max(self._by_estimator.values(), key=lambda held: held.count)
            dropped = min(excess, largest.count)
            largest.drop_oldest(dropped)
            excess -= dropped

    def completed(self, batch: Sequence[FinishedJob]) -> None:
        """Score each completion against every estimator's prediction for it."""
        for scores in self._by_estimator.values():
            if scores.count:
                for job in batch:
                    scores.score(job)

    @property
    def pending(self) -> int:
        return sum(scores.count for scores in self._by_estimator.values())

    def ratios(self, estimator: str) -> list[float]:
        """Actual runtime / t_sched of `estimator`'s last scored completions (`predictor.forecasting.error_draws`)."""
        scores = self._by_estimator.get(estimator)
        return [] if scores is None else [row[4] for row in scores.window]

    def summaries(self) -> list[LiveSummary]:
        return [scores.summary(name) for name, scores in sorted(self._by_estimator.items())]
