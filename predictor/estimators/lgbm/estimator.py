"""A LightGBM estimator that predicts the distribution of R = t_act / t_req and picks the estimate.

Why not a plain quantile regression: on the real traces a LightGBM quantile
model on log-runtime, shifted to the percentile adjuster's underestimation
rate, is no more accurate than the adjuster (docs/lgbm.md). What pays is
predicting the whole distribution of R (a multiclass model over bins of R,
each bin represented by quantiles of its training jobs), sharpening it with
the R classes of the same user's recent jobs with the same request (a
Dirichlet posterior with the model as prior worth `prior_jobs` jobs: a model
cannot be sure to one in a thousand, a key with a thousand regular jobs can),
and then choosing, per job, the estimate that maximises expected accuracy
minus a multiplier times a penalty: P(under) + `be_weight` x P(under by more
than 30 min) (`predictor.estimators.lgbm.calibration`). The multiplier is calibrated on the
jobs that finished in the trailing `calibration` window, with targets that
adapt (`adapt`) to the rates the served estimates actually reached, so that
the underestimation rate tracks `target_under` and the BE rate stays within
`be_share` of it; until there are enough jobs, or with `target_under=0`, the
estimate is the `alpha` quantile of the predicted runtime distribution.

Training and its schedule are `predictor.estimators.lgbm.training`'s; the model and the
distribution it predicts, `predictor.estimators.lgbm.model`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from kernel.durations import SECONDS_PER_DAY, parse_duration, required_duration
from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.estimators.base import Estimator, PredictEffect, WithInterval, parameter
from predictor.estimators.lgbm.calibration import Calibration, job_scores
from predictor.estimators.lgbm.features import FeatureHistory, feature_names
from predictor.estimators.lgbm.model import (
    CANDIDATES,
    CLASSES,
    RATIO_EDGES,
    TrainedModel,
    candidate_estimates,
    runtime_interval,
)
from predictor.estimators.lgbm.training import ModelSchedule, Trainer, TrainingData, TrainingWindow
from predictor.history import HistoryDiscardedError

#: Jobs whose candidate arrays are computed together in a batch prediction.
ANSWER_CHUNK = 256
#: Fewest recent finished jobs of a user for the user to get a multiplier of their own (with `per_user`).
MIN_USER_CALIBRATION_JOBS = 200
#: The largest values a client may ask for: a SPEC is a request, and the service must not take on unbounded work.
MAX_TREES = 1000
MAX_LEAVES = 255
MAX_THREADS = 8
MAX_TRAIN = 1_000_000
MAX_DURATION_SECONDS = 3650 * SECONDS_PER_DAY
#: Fewest finished jobs the calibration rests on before it overrides `alpha`.
MIN_CALIBRATION_JOBS = 200
#: A predicted job not yet finished: submit time, row, expected accuracy, P(under), penalty, the estimate
#: served if the multiplier chose it (None: the `alpha` quantile), and the level indices its quantiles
#: were read at (None: the nominal levels).
Pending = tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int | None, dict[float, int] | None]


def _duration(name: str, *, unbounded: str | None = None, zero: bool = False) -> Callable[[str], int | None]:
    """The check of a duration parameter (at most ten years: beyond that it is a mistake, not a window)."""

    def check(text: str) -> int | None:
        seconds = parse_duration(text, name, unbounded=unbounded, zero=zero)
        if seconds is not None and seconds > MAX_DURATION_SECONDS:
            raise ValueError(f"{name} must be at most {MAX_DURATION_SECONDS // SECONDS_PER_DAY}d; got {text!r}")
        return seconds

    return check


def quantile_level(default: float, doc: str) -> float:
    """The `alpha` parameter (a quantile level strictly inside (0, 1)), declared alike by every lgbm estimator."""
    return parameter(default, doc, low=0, high=1, low_open=True, high_open=True)


def underestimation_share(default: float, doc: str) -> float:
    """The `target_under` parameter (0: no calibration), declared alike by every lgbm estimator."""
    return parameter(default, doc, low=0, high=1, high_open=True)


@dataclass(kw_only=True, eq=False, repr=False)
class LGBMQuantileEstimator(Estimator):
    """Distributional LightGBM on submit-time and history features, calibrated to `target_under`."""

    name: ClassVar[str] = "lgbm-quantile"
    predict_effects: ClassVar[frozenset[PredictEffect]] = frozenset({"history", "submissions", "model"})

    alpha: float = quantile_level(0.9, "until calibrated, the estimate is this quantile of the runtime distribution")
    target_under: float = underestimation_share(
        0.06, "share of jobs the calibrated estimates may underestimate (0: no calibration)"
    )
    be_share: float = parameter(
        0.25, "share of target_under that may be underestimated by more than 30 min", low=0, high=1, low_open=True
    )
    be_weight: float = parameter(
        5.0, "weight of a bad estimate in the penalty, over a plain underestimate", low=0, high=1000
    )
    window: str = parameter("90d", "history the model is trained on", check=_duration("window"))
    retrain: str = parameter(
        "7d", "trace time between trainings (never: no retraining)", check=_duration("retrain", unbounded="never")
    )
    calibration: str = parameter(
        "14d", "trailing window the multiplier is calibrated on", check=_duration("calibration")
    )
    swap: str = parameter(
        "1h", "trace time from a training's snapshot until its model goes live", check=_duration("swap", zero=True)
    )
    per_user: bool = parameter(False, "a multiplier per user with enough recent jobs")
    recalibrate: bool = parameter(
        True, "read quantiles and P(under) at levels calibrated on the trailing calibration window"
    )
    prior_jobs: float = parameter(
        300.0, "how many jobs' worth the model's prediction weighs against a key's own", low=0, high=1e9, low_open=True
    )
    adapt: float = parameter(
        0.001, "how fast calibration targets adapt to the rates delivered (0: never)", low=0, high=1, high_open=True
    )
    trees: int = parameter(20, "LightGBM boosting rounds", low=1, high=MAX_TREES)
    leaves: int = parameter(15, "LightGBM leaves per tree", low=2, high=MAX_LEAVES)
    learning_rate: float = parameter(0.2, "LightGBM learning rate", low=0, high=1, low_open=True)
    min_train: int = parameter(500, "the fewest finished jobs a model is trained on", low=1, high=MAX_TRAIN)
    max_train: int = parameter(
        20000, "the most (evenly spaced) finished jobs a model is trained on", low=1, high=MAX_TRAIN
    )
    memory: bool = parameter(False, "learn from the memory each job asks for (a site log's; docs/lgbm.md)")
    application: bool = parameter(
        False, "learn from each user's jobs of the same application (a site log's job name, SWF field 14; docs/lgbm.md)"
    )
    threads: int = parameter(1, "LightGBM threads per training", low=1, high=MAX_THREADS)
    seed: int = parameter(1, "LightGBM seed (results are deterministic)", low=0, high=2**31 - 1)

    def __post_init__(self) -> None:
        self._executor: Executor | None = None  # where trainings run: kept when a parameter changes
        super().__post_init__()

    def _check_together(self) -> None:
        if self.max_train < self.min_train:
            raise ValueError(f"max_train ({self.max_train}) must be at least min_train ({self.min_train})")

    def _initialise(self) -> None:
        calibration_seconds = required_duration(self.calibration, "calibration")
        self._calibration_seconds = calibration_seconds
        self._features = FeatureHistory(ratio_edges=RATIO_EDGES, memory=self.memory, application=self.application)
        self._window = TrainingWindow(required_duration(self.window, "window"))
        self._trainer = Trainer(
            self.trees,
            self.leaves,
            self.learning_rate,
            self.threads,
            self.seed,
            self.min_train,
            self.prior_jobs,
            self.be_weight,
            feature_names(self.memory, self.application),
        )
        self._schedule = ModelSchedule(
            parse_duration(self.retrain, "retrain", unbounded="never"), required_duration(self.swap, "swap", zero=True)
        )
        #: What every chosen fraction of t_req is multiplied by (lgbm-sched's safety margin; here none).
        self._scale = 1.0
        self._calibration = Calibration(
            alpha=self.alpha,
            target_under=self.target_under,
            be_share=self.be_share,
            window=calibration_seconds,
            min_jobs=MIN_CALIBRATION_JOBS,
            min_user_jobs=MIN_USER_CALIBRATION_JOBS if self.per_user else None,
            adapt=self.adapt,
            recalibrate=self.recalibrate,
        )
        #: Predicted jobs not yet finished, by job id.
        self._pending: dict[int, Pending] = {}

    @classmethod
    def from_model(
        cls,
        model: TrainedModel,
        params: dict[str, Any],
        calibration_scores: list[list[int]] | None = None,
        level_scores: list[list[int]] | None = None,
    ) -> Self:
        """An estimator that starts with a trained model (and its calibrations), e.g. one loaded from disk."""
        estimator = cls(**params)
        estimator.install(model)
        calibration = estimator._calibration
        if calibration.rates is not None and calibration_scores:
            calibration.rates.restore(calibration_scores)
        if calibration.levels is not None and level_scores:
            calibration.levels.restore(level_scores)
        return estimator

    @property
    def model(self) -> TrainedModel | None:
        """The live model (None before the first training)."""
        return self._schedule.live

    def lightgbm_params(self) -> dict[str, Any]:
        """LightGBM settings: modest and deterministic, so that runs reproduce."""
        return self._trainer.lightgbm_params()

    def reset(self) -> None:
        self._initialise()

    def _row(self, job: JobRequest) -> list[float]:
        """The model's features of `job`, then its key's R class counts (see `TrainedModel.distribution`)."""
        return self._features.row(job) + self._features.ratio_counts(job)

    def ready(self) -> None:
        """Train a model on the jobs observed so far, as of the latest end, and put it live now."""
        latest = self._window.latest_end()
        if latest is None:
            return
        data = self.training_data(latest)
        if len(data) >= self.min_train:
            self._schedule.cancel()
            self.install(self.train(data))

    def train_on(self, executor: Executor | None) -> None:
        self._executor = executor

    def _assess(
        self, model: TrainedModel, rows: np.ndarray, t_req: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Jobs x candidates: expected accuracy, P(under), and the penalty the multiplier weighs."""
        return model.assess(rows, t_req, self.prior_jobs, self.be_weight)

    # -- learning ---------------------------------------------------------------------------------

    def observe(self, job: FinishedJob) -> None:
        request = job.request
        pending = self._pending.pop(request.job_id, None)
        calibration = self._calibration
        served: tuple[int | None, dict[float, int] | None] = (None, None)
        assessed: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if pending is not None and pending[0] == request.submit:
            row, assessed, served = pending[1], pending[2:5], pending[5:]
        else:
            row = np.asarray(self._row(request), dtype=np.float64)
            model = self.model
            if calibration.active and model is not None:
                # The live model was trained before this job ended: scoring it is still out of sample.
                accuracies, unders, penalties = self._assess(model, row[None], np.array([request.t_req]))
                assessed = accuracies[0], unders[0], penalties[0]
        self._features.observe(job)
        self._window.add(job, row)
        if calibration.active and assessed is not None:
            estimates = candidate_estimates(np.array([request.t_req]))[0]
            scores = job_scores(
                *assessed,
                estimates,
                job.runtime,
                rates=calibration.rates is not None,
                levels=calibration.levels is not None,
            )
            calibration.learn(job.end, request.user, scores, job.runtime, *served)

    def training_data(self, now: int) -> TrainingData:
        """Snapshot the jobs that ended in [now - window, now], at most `max_train` of them.

        Cheap: call it where history is locked, then `train` outside the lock.
        """
        needs_bootstrap = self._calibration.needs_bootstrap()
        bootstrap_from = now - self._calibration_seconds if needs_bootstrap else None
        return self._window.snapshot(now, self.max_train, bootstrap_from, self._trainer.width)

    def train(self, data: TrainingData) -> TrainedModel:
        """Fit a model on `data`; touches no state of this estimator, so it may run in another thread."""
        return self._trainer.train(data)

    def install(self, model: TrainedModel) -> None:
        """Make `model` the live one (an atomic reference swap) and take its bootstrap calibration."""
        self._calibration.bootstrap(model.bootstrap_scores, model.bootstrap_levels)
        self._schedule.put_live(model)
        horizon = model.trained_at - self._features.horizon
        stale = [job_id for job_id, entry in self._pending.items() if entry[0] < horizon]
        for job_id in stale:  # predicted long ago and never reported finished
            del self._pending[job_id]

    def calibration_state(self) -> list[list[int]]:
        """The calibration scores of the jobs in the calibration window, to save with a model."""
        rates = self._calibration.rates
        return rates.state() if rates is not None else []

    def level_state(self) -> list[list[int]]:
        """The [end, level score] entries of the quantile levels' calibration window, to save with a model."""
        levels = self._calibration.levels
        return levels.state() if levels is not None else []

    def quantile_levels(self) -> tuple[float, ...]:
        """The levels the quantiles of `INTERVAL_PROBABILITIES` are read at now (the nominal ones until
        calibrated, or with `recalibrate=false`)."""
        calibration = self._calibration
        return calibration.quantile_levels(calibration.level_indices())

    def multiplier(self, user: int | None = None) -> float | None:
        """The calibrated multiplier for `user`'s jobs, or everybody's (None: the `alpha` quantile is used)."""
        return self._calibration.multiplier(user)

    def _advance(self, now: int) -> None:
        """At trace time `now`: start a training that is due, and put a model whose time has come live.

        A time before what is already learned is refused first: training on a
        window that ends before the history would find nothing to train on.
        """
        schedule = self._schedule
        known = max(self._features.latest_end, schedule.live.trained_at if schedule.live is not None else 0)
        if now < known:
            raise HistoryDiscardedError(
                f"a job submitted at {now} cannot be predicted once completions up to {known} have been "
                "learned (the model, its calibration and the jobs in flight would know its future); predict jobs "
                "at their submission, in order"
            )
        if schedule.retrain_due(now, len(self._window), self.min_train):
            data = self.training_data(now)
            schedule.start(now, data if len(data) >= self.min_train else None, self.train, self._executor)
        model = schedule.due(now)
        if model is not None:
            self.install(model)

    # -- predicting -------------------------------------------------------------------------------

    def predict(self, job: JobRequest) -> Prediction:
        self._advance(job.submit)
        return self._answer([job], False)[0][0]

    def predict_with_interval(self, job: JobRequest) -> WithInterval:
        """The prediction, with quantiles of the runtime distribution it was read from (the live model's,
        sharpened by the key's recent jobs) and P(runtime > t_sched)."""
        self._advance(job.submit)
        return self._answer([job], True)[0]

    def _predict_batch(self, jobs: list[JobRequest], intervals: bool) -> list[WithInterval]:
        """Predict a batch (in submission order) with one booster call per model in force.

        The answers are those of `predict` called job by job: the batch is cut
        where a job's submission makes a retraining or a model swap due.
        """
        answers: list[WithInterval] = []
        schedule = self._schedule
        start = 0
        while start < len(jobs):
            self._advance(jobs[start].submit)
            stop = start + 1
            while stop < len(jobs) and not (
                schedule.retrain_due(jobs[stop].submit, len(self._window), self.min_train)
                or schedule.swap_due(jobs[stop].submit)
            ):
                stop += 1
            answers += self._answer(jobs[start:stop], intervals)
            start = stop
        return answers

    def _answer(self, jobs: list[JobRequest], intervals: bool) -> list[WithInterval]:
        model = self.model
        features = self._features
        rows = []
        for job in jobs:  # each job is in flight for the rows of the jobs after it, as one by one
            if model is not None:
                rows.append(self._row(job))
            features.register(job)
        if model is None:
            return [(Prediction(t_sched=job.t_req, factor=None, basis=0, fallback=True), None) for job in jobs]
        answers: list[WithInterval] = []
        for start in range(0, len(jobs), ANSWER_CHUNK):  # jobs x candidates arrays stay in cache
            chunk = slice(start, start + ANSWER_CHUNK)
            answers += self._answer_rows(model, jobs[chunk], rows[chunk], intervals)
        return answers

    def _answer_rows(
        self, model: TrainedModel, jobs: list[JobRequest], rows: list[list[float]], intervals: bool
    ) -> list[WithInterval]:
        t_req = np.array([job.t_req for job in jobs], dtype=np.float64)
        matrix = np.asarray(rows, dtype=np.float64)
        accuracy, under, penalty = self._assess(model, matrix, t_req)
        calibration = self._calibration
        chosen, by_multiplier, levels = calibration.choose([job.user for job in jobs], accuracy, under, penalty)
        factors = np.minimum(1.0, CANDIDATES[chosen] * self._scale)
        estimates = np.clip(np.rint(t_req * factors), 1.0, t_req).astype(np.int64).tolist()
        pending = self._pending
        answers: list[WithInterval] = []
        calibrated = by_multiplier.tolist()
        quantile_levels = calibration.quantile_levels(levels)
        similar = matrix[:, -CLASSES:].sum(axis=1).astype(np.int64).tolist()  # the key's finished jobs
        for index, (job, factor) in enumerate(zip(jobs, factors.tolist(), strict=True)):
            estimate = estimates[index]
            pending[job.job_id] = (
                job.submit,
                matrix[index],
                accuracy[index],
                under[index],
                penalty[index],
                estimate if calibrated[index] else None,
                levels,
            )
            # P(runtime > t_sched) is recalibrated for the alpha quantile only: the recalibration holds over
            # all jobs, not over those a multiplier picked as predictable (on KTH-SP2 it said 0.090 of them
            # would run longer, 6.0% did; the model's own said 0.060).
            miss_share = None if calibrated[index] or levels is None else calibration.miss_share
            interval = (
                runtime_interval(under[index], job.t_req, estimate, quantile_levels, miss_share) if intervals else None
            )
            answers.append((Prediction(estimate, factor, similar[index], False), interval))
        return answers
