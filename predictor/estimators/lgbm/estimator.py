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

The model is trained on the jobs that finished in the trailing `window` and
retrained every `retrain` of trace time, when a prediction is asked past the
next retraining point: a cheap snapshot of the training jobs is taken then
(`training_data`), the model is fitted by a pure step that never touches the
live model (`train`, inline or on the executor given to `train_on`), and it
goes live (`install`, an atomic swap) at the first prediction `swap` of trace
time after the snapshot. On a live cluster, where trace time is wall time, the
training is long done by then and no prediction waits for it; in a replay,
where trace time runs far faster, that prediction waits for the model. Either
way the answers depend only on the trace, never on how fast training ran, so a
simulation through the service equals one in-process.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import lightgbm as lgb
import numpy as np

from kernel.durations import SECONDS_PER_DAY, parse_duration, required_duration
from kernel.jobs import (
    INTERVAL_PROBABILITIES,
    FinishedJob,
    JobRequest,
    Prediction,
    RuntimeInterval,
    clamp_estimate,
)
from predictor.estimators.base import Estimator, PredictEffect, parameter
from predictor.estimators.lgbm.calibration import UserCalibrator, choose, choose_quantile, conformity_scores
from predictor.estimators.lgbm.features import FeatureHistory, feature_names
from predictor.history import HistoryDiscardedError
from predictor.scoring import BAD_UNDERESTIMATE_SECONDS

#: Upper edges of the R bins the classifier predicts; the last class is "ran to its request".
RATIO_EDGES = (0.01, 0.03, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 0.999)
CLASSES = len(RATIO_EDGES) + 1
#: Candidate estimates as fractions of t_req, ascending (about 6% apart); the last is t_req itself.
CANDIDATES = np.geomspace(1e-4, 1.0, 160)
#: Quantiles of R kept per class to represent the jobs inside a bin.
CLASS_QUANTILES = 64
#: Weight of a uniform distribution over the classes mixed into the model's: no class is ever
#: impossible, so a large enough multiplier always reaches the calibration target (a model sure of
#: itself to 1e-8 on a trace like LPC-EGEE otherwise defeats any multiplier).
HEDGE = 0.01
#: Jobs whose candidate arrays are computed together in a batch prediction.
ANSWER_CHUNK = 256
#: Model features at the head of a row; the key's R class counts follow.
N_FEATURES = len(feature_names())
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


def candidate_estimates(t_req: np.ndarray) -> np.ndarray:
    """Jobs x candidates: every candidate factor applied to each job's request, clamped like every estimate."""
    t_req = np.asarray(t_req, dtype=np.float64)
    return np.clip(np.rint(t_req[:, None] * CANDIDATES[None, :]), 1.0, t_req[:, None]).astype(np.int64)


def bad_shift(t_req: np.ndarray) -> np.ndarray:
    """Per request, per candidate c: the index of the first candidate >= c + 1800 s / t_req.

    len(CANDIDATES) where that is beyond the request: such a candidate cannot be a BE.
    """
    thresholds = CANDIDATES[None, :] + BAD_UNDERESTIMATE_SECONDS / np.asarray(t_req, dtype=np.float64)[:, None]
    return np.searchsorted(CANDIDATES, thresholds)


def class_of(ratios: np.ndarray) -> np.ndarray:
    """The bin index of each R."""
    classes: np.ndarray = np.searchsorted(np.asarray(RATIO_EDGES), ratios, side="right")
    return classes


def class_ratio_quantiles(ratios: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Classes x CLASS_QUANTILES: evenly spaced quantiles of the R values in each class.

    A class with no jobs is represented by the middle of its bin.
    """
    levels = (np.arange(CLASS_QUANTILES) + 0.5) / CLASS_QUANTILES
    lower = (0.0, *RATIO_EDGES)
    upper = (*RATIO_EDGES, 1.0)
    table = np.empty((CLASSES, CLASS_QUANTILES))
    for index in range(CLASSES):
        members = ratios[classes == index]
        table[index] = np.quantile(members, levels) if len(members) else (lower[index] + upper[index]) / 2
    return table


@dataclass(frozen=True)
class TrainingData:
    """A snapshot of the finished jobs a model is trained on (rows as of each job's submission)."""

    rows: np.ndarray  # jobs x (features + key class counts), in end order
    ends: np.ndarray
    runtimes: np.ndarray
    t_req: np.ndarray
    users: np.ndarray
    now: int  # trace time of the snapshot: every job ended at or before it
    bootstrap_from: int | None  # score the jobs that ended after this with a model trained on the others

    def __len__(self) -> int:
        return len(self.ends)

    @property
    def ratios(self) -> np.ndarray:
        ratios: np.ndarray = np.minimum(1.0, self.runtimes / self.t_req)
        return ratios

    def head(self, count: int) -> TrainingData:
        """The first `count` jobs (in end order), as a snapshot taken when the last of them ended."""
        return TrainingData(
            self.rows[:count],
            self.ends[:count],
            self.runtimes[:count],
            self.t_req[:count],
            self.users[:count],
            int(self.ends[count - 1]),
            None,
        )


class TrainedModel:
    """A booster and the R quantiles of each class: everything a prediction needs besides features."""

    def __init__(
        self,
        booster: lgb.Booster,
        class_ratios: np.ndarray,
        trained_at: int,
        first_end: int,
        jobs: int,
        bootstrap_scores: list[tuple[int, int, int, int]] | None = None,
    ) -> None:
        if class_ratios.shape != (CLASSES, CLASS_QUANTILES):
            raise ValueError(f"class ratios must be {CLASSES} x {CLASS_QUANTILES}, got {class_ratios.shape}")
        self.booster = booster
        self.class_ratios = class_ratios
        self.trained_at = trained_at
        self.first_end = first_end
        self.jobs = jobs
        self.bootstrap_scores = bootstrap_scores or []
        samples = class_ratios[:, :, None]
        candidates = CANDIDATES[None, None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            accuracy = np.where(samples > candidates, candidates / samples, samples / candidates)
        #: Per class and candidate: mean accuracy, and the fraction of jobs the candidate underestimates.
        self._class_accuracy = accuracy.mean(axis=1)
        self._class_under = (samples > candidates).mean(axis=1)

    def distribution(
        self, rows: np.ndarray, t_req: np.ndarray, prior_jobs: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Jobs x candidates: expected accuracy, P(under) and P(BE), from hedged class probabilities.

        A row is the model's features followed by the job's key's R class
        counts (`FeatureHistory.ratio_counts`). The class probabilities are the
        posterior mean of a Dirichlet whose prior is the model's prediction
        weighing as much as `prior_jobs` jobs, updated with those counts: a
        key with a long, regular history is judged by it (the model alone
        cannot be sure to one in a thousand), a new key by the model.

        P(BE) at c is P(R > c + 1800 s / t_req), read off each class's
        P(R > .) at the next candidate; jobs are grouped by request so that
        this costs one small matrix product per distinct request.
        """
        counts = rows[:, N_FEATURES:]
        predicted = np.asarray(self.booster.predict(rows[:, :N_FEATURES], num_threads=1))
        posterior = (prior_jobs * predicted + counts) / (prior_jobs + counts.sum(axis=1, keepdims=True))
        probabilities = (1 - HEDGE) * posterior + HEDGE / CLASSES
        under_padded = np.concatenate([self._class_under, np.zeros((CLASSES, 1))], axis=1)
        bad = np.empty((len(rows), len(CANDIDATES)))
        requests, inverse = np.unique(np.asarray(t_req, dtype=np.float64), return_inverse=True)
        shifts = bad_shift(requests)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(requests) + 1))
        for index in range(len(requests)):
            members = order[bounds[index] : bounds[index + 1]]
            bad[members] = probabilities[members] @ under_padded[:, shifts[index]]
        return probabilities @ self._class_accuracy, probabilities @ self._class_under, bad


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
    threads: int = parameter(1, "LightGBM threads per training", low=1, high=MAX_THREADS)
    seed: int = parameter(1, "LightGBM seed (results are deterministic)", low=0, high=2**31 - 1)

    def _initialise(self) -> None:
        if self.max_train < self.min_train:
            raise ValueError(f"max_train ({self.max_train}) must be at least min_train ({self.min_train})")
        self._window_seconds = required_duration(self.window, "window")
        self._retrain_seconds = parse_duration(self.retrain, "retrain", unbounded="never")
        self._swap_seconds = required_duration(self.swap, "swap", zero=True)
        self._features = FeatureHistory(ratio_edges=RATIO_EDGES)
        #: What every chosen fraction of t_req is multiplied by (lgbm-sched's safety margin; here none).
        self._scale = 1.0
        self._calibration_seconds = required_duration(self.calibration, "calibration")
        self._calibrator = (
            UserCalibrator(
                self.target_under,
                self.be_share * self.target_under,
                self._calibration_seconds,
                MIN_CALIBRATION_JOBS,
                MIN_USER_CALIBRATION_JOBS if self.per_user else None,
                self.adapt,
            )
            if self.target_under > 0
            else None
        )
        self._model: TrainedModel | None = None
        # Rows are kept as arrays: unlike lists of floats, the garbage collector need not scan them.
        self._buffer: deque[tuple[int, np.ndarray, int, int, int]] = deque()  # end, row, runtime, t_req, user
        #: Predicted jobs not yet finished: submit time, row, expected accuracy, penalty, and the estimate
        #: served if the calibration chose it (None: the `alpha` quantile or no model).
        self._pending: dict[int, tuple[int, np.ndarray, np.ndarray, np.ndarray, int | None]] = {}
        #: The last batch answered and its P(runtime > candidate) rows: what `interval` reads.
        self._latest_answers: tuple[list[JobRequest], np.ndarray] = ([], np.empty((0, len(CANDIDATES))))
        self._next_retrain: int | None = None
        self._executor: Executor | None = None
        #: A model in training (or trained) and the trace time from which it goes live.
        self._training: tuple[int, Future[TrainedModel]] | None = None

    @classmethod
    def from_model(
        cls, model: TrainedModel, params: dict[str, Any], calibration_scores: list[list[int]] | None = None
    ) -> Self:
        """An estimator that starts with a trained model (and its calibration), e.g. one loaded from disk."""
        estimator = cls(**params)
        estimator.install(model)
        if estimator._calibrator is not None and calibration_scores:
            estimator._calibrator.restore(calibration_scores)
        return estimator

    @property
    def model(self) -> TrainedModel | None:
        """The live model (None before the first training)."""
        return self._model

    def lightgbm_params(self) -> dict[str, Any]:
        """LightGBM settings: modest and deterministic, so that runs reproduce."""
        return {
            "objective": "multiclass",
            "num_class": CLASSES,
            "num_leaves": self.leaves,
            "learning_rate": self.learning_rate,
            "min_data_in_leaf": 40,
            "feature_fraction": 0.5,
            "max_bin": 63,
            "num_threads": self.threads,
            "deterministic": True,
            "force_col_wise": True,
            "seed": self.seed,
            "verbose": -1,
        }

    def reset(self) -> None:
        self._features.reset()
        if self._calibrator is not None:
            self._calibrator.reset()
        self._model = None
        self._buffer.clear()
        self._pending.clear()
        self._latest_answers = ([], np.empty((0, len(CANDIDATES))))
        self._next_retrain = None
        self._training = None

    def _row(self, job: JobRequest) -> list[float]:
        """The model's features of `job`, then its key's R class counts (see `TrainedModel.distribution`)."""
        return self._features.row(job) + self._features.ratio_counts(job)

    def ready(self) -> None:
        """Train a model on the jobs observed so far, as of the latest end, and put it live now."""
        if not self._buffer:
            return
        data = self.training_data(max(entry[0] for entry in self._buffer))
        if len(data) >= self.min_train:
            self._training = None
            self.install(self.train(data))

    def train_on(self, executor: Executor | None) -> None:
        self._executor = executor

    def _assess(
        self, model: TrainedModel, rows: np.ndarray, t_req: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Jobs x candidates: expected accuracy, P(under), and the penalty the multiplier weighs."""
        accuracy, under, bad = model.distribution(rows, t_req, self.prior_jobs)
        return accuracy, under, under + self.be_weight * bad

    # -- learning ---------------------------------------------------------------------------------

    def observe(self, job: FinishedJob) -> None:
        request = job.request
        pending = self._pending.pop(request.job_id, None)
        served = None
        accuracy: np.ndarray | None = None
        penalty: np.ndarray | None = None
        if pending is not None and pending[0] == request.submit:
            _, row, accuracy, penalty, served = pending
        else:
            row = np.asarray(self._row(request), dtype=np.float64)
            if self._calibrator is not None and self._model is not None:
                # The live model was trained before this job ended: scoring it is still out of sample.
                accuracies, _, penalties = self._assess(self._model, row[None], np.array([request.t_req]))
                accuracy, penalty = accuracies[0], penalties[0]
        self._features.observe(job)
        buffer = self._buffer
        buffer.append((job.end, row, job.runtime, request.t_req, request.user))
        while buffer[0][0] < job.end - self._window_seconds:
            buffer.popleft()
        if self._calibrator is not None and accuracy is not None and penalty is not None:
            under, bad = conformity_scores(
                accuracy[None], penalty[None], candidate_estimates(np.array([request.t_req])), np.array([job.runtime])
            )
            self._calibrator.add(job.end, request.user, int(under[0]), int(bad[0]))
        if self._calibrator is not None and served is not None:
            self._calibrator.record(
                request.user, served < job.runtime, served < job.runtime - BAD_UNDERESTIMATE_SECONDS
            )

    def training_data(self, now: int) -> TrainingData:
        """Snapshot the jobs that ended in [now - window, now], at most `max_train` of them.

        Cheap: call it where history is locked, then `train` outside the lock.
        """
        first = now - self._window_seconds
        chosen = sorted((entry for entry in self._buffer if first <= entry[0] <= now), key=lambda entry: entry[0])
        if len(chosen) > self.max_train:  # a busy trace: evenly spaced jobs keep the whole window's span
            chosen = [chosen[i] for i in np.linspace(0, len(chosen) - 1, self.max_train).round().astype(int)]
        rows = np.asarray([entry[1] for entry in chosen], dtype=np.float64).reshape(len(chosen), -1)
        needs_bootstrap = self._calibrator is not None and len(self._calibrator) < MIN_CALIBRATION_JOBS
        return TrainingData(
            rows,
            np.array([entry[0] for entry in chosen], dtype=np.int64),
            np.array([entry[2] for entry in chosen], dtype=np.int64),
            np.array([entry[3] for entry in chosen], dtype=np.int64),
            np.array([entry[4] for entry in chosen], dtype=np.int64),
            now,
            now - self._calibration_seconds if needs_bootstrap else None,
        )

    def train(self, data: TrainingData) -> TrainedModel:
        """Fit a model on `data`; touches no state of this estimator, so it may run in another thread.

        When the snapshot asks for it, a second model trained on the jobs that
        ended before the calibration window scores the jobs in it, so that a
        fresh estimator is calibrated from its first prediction.
        """
        if len(data) < self.min_train:
            raise ValueError(f"training needs at least {self.min_train} finished jobs, got {len(data)}")
        model = self._fit(data)
        earlier = (
            int(np.searchsorted(data.ends, data.bootstrap_from, side="right")) if data.bootstrap_from is not None else 0
        )
        if earlier >= self.min_train:
            accuracy, _, penalty = self._assess(
                self._fit(data.head(earlier)), data.rows[earlier:], data.t_req[earlier:]
            )
            under, bad = conformity_scores(
                accuracy, penalty, candidate_estimates(data.t_req[earlier:]), data.runtimes[earlier:]
            )
            model.bootstrap_scores = list(
                zip(
                    data.ends[earlier:].tolist(),
                    data.users[earlier:].tolist(),
                    under.tolist(),
                    bad.tolist(),
                    strict=True,
                )
            )
        return model

    def _fit(self, data: TrainingData) -> TrainedModel:
        ratios = data.ratios
        classes = class_of(ratios)
        dataset = lgb.Dataset(
            data.rows[:, :N_FEATURES], classes, feature_name=list(feature_names()), free_raw_data=True
        )
        booster = lgb.train(self.lightgbm_params(), dataset, num_boost_round=self.trees)
        return TrainedModel(booster, class_ratio_quantiles(ratios, classes), data.now, int(data.ends.min()), len(data))

    def install(self, model: TrainedModel) -> None:
        """Make `model` the live one (an atomic reference swap) and take its bootstrap calibration."""
        if self._calibrator is not None and len(self._calibrator) < MIN_CALIBRATION_JOBS:
            for end, user, under, bad in model.bootstrap_scores:
                self._calibrator.add(end, user, under, bad)
        self._model = model
        if self._retrain_seconds is not None:
            self._next_retrain = model.trained_at + self._retrain_seconds
        horizon = model.trained_at - self._features.horizon
        stale = [job_id for job_id, entry in self._pending.items() if entry[0] < horizon]
        for job_id in stale:  # predicted long ago and never reported finished
            del self._pending[job_id]

    def calibration_state(self) -> list[list[int]]:
        """The calibration scores of the jobs in the calibration window, to save with a model."""
        return self._calibrator.state() if self._calibrator is not None else []

    def multiplier(self, user: int | None = None) -> float | None:
        """The calibrated multiplier for `user`'s jobs, or everybody's (None: the `alpha` quantile is used)."""
        if self._calibrator is None:
            return None
        return self._calibrator.multiplier(user) if user is not None else self._calibrator.everybody.multiplier()

    def _retrain_due(self, now: int) -> bool:
        if self._retrain_seconds is None or self._training is not None:
            return False
        if self._next_retrain is not None:
            return now >= self._next_retrain
        return len(self._buffer) >= self.min_train

    def _swap_due(self, now: int) -> bool:
        return self._training is not None and now >= self._training[0]

    def _advance(self, now: int) -> None:
        """At trace time `now`: start a training that is due, and put a model whose time has come live.

        A time before what is already learned is refused first: training on a
        window that ends before the history would find nothing to train on.
        """
        live = self._model
        known = max(self._features.latest_end, live.trained_at if live is not None else 0)
        if now < known:
            raise HistoryDiscardedError(
                f"a job submitted at {now} cannot be predicted once completions up to {known} have been "
                "learned (the model, its calibration and the jobs in flight would know its future); predict jobs "
                "at their submission, in order"
            )
        if self._retrain_due(now):
            assert self._retrain_seconds is not None  # a retraining is never due with retrain=never
            self._next_retrain = now + self._retrain_seconds  # also when there is too little to train on
            data = self.training_data(now)
            if len(data) >= self.min_train:
                model: Future[TrainedModel]
                if self._executor is not None:
                    model = self._executor.submit(self.train, data)
                else:
                    model = Future()
                    model.set_result(self.train(data))
                self._training = (now + self._swap_seconds, model)
        training = self._training
        if training is not None and now >= training[0]:
            self._training = None
            self.install(training[1].result())  # waits only where trace time outruns training: a replay

    # -- predicting -------------------------------------------------------------------------------

    def predict(self, job: JobRequest) -> Prediction:
        self._advance(job.submit)
        return self._answer([job])[0]

    def interval(self, job: JobRequest, prediction: Prediction) -> RuntimeInterval | None:
        """Quantiles of the runtime distribution the estimate was read from, and P(runtime > t_sched).

        The distribution is the one `predict` just read the estimate from (the live model's,
        sharpened by the key's recent jobs), kept for the last batch answered, so asking costs no
        second model call; each quantile is the first candidate estimate at or above it, as the
        `alpha` quantile is read.
        """
        answered, unders = self._latest_answers
        index = next((i for i, asked in enumerate(answered) if asked == job), None)
        if prediction.fallback or index is None:
            return None
        under = unders[index]
        quantiles = tuple(
            (probability, clamp_estimate(job.t_req * CANDIDATES[choose_quantile(under, probability)], job.t_req))
            for probability in INTERVAL_PROBABILITIES
        )
        # P(runtime > t_sched), read at the largest candidate whose estimate (in whole seconds) is not above it.
        estimates = candidate_estimates(np.array([job.t_req]))[0]
        below = max(int(np.searchsorted(estimates, prediction.t_sched, side="right")) - 1, 0)
        return RuntimeInterval(quantiles, float(np.clip(under[below], 0.0, 1.0)))

    def predict_many(self, jobs: Iterable[JobRequest]) -> list[Prediction]:
        """Predict a batch (in submission order) with one booster call per model in force.

        The answers are those of `predict` called job by job: the batch is cut
        where a job's submission makes a retraining or a model swap due.
        """
        jobs = list(jobs)
        answers: list[Prediction] = []
        start = 0
        while start < len(jobs):
            self._advance(jobs[start].submit)
            stop = start + 1
            while stop < len(jobs) and not (self._retrain_due(jobs[stop].submit) or self._swap_due(jobs[stop].submit)):
                stop += 1
            answers += self._answer(jobs[start:stop])
            start = stop
        return answers

    def _answer(self, jobs: list[JobRequest]) -> list[Prediction]:
        model = self._model
        features = self._features
        rows = []
        for job in jobs:  # each job is in flight for the rows of the jobs after it, as one by one
            if model is not None:
                rows.append(self._row(job))
            features.register(job)
        if model is None:
            return [Prediction(t_sched=job.t_req, factor=None, basis=0, fallback=True) for job in jobs]
        answers: list[Prediction] = []
        for start in range(0, len(jobs), ANSWER_CHUNK):  # jobs x candidates arrays stay in cache
            answers += self._answer_rows(model, jobs[start : start + ANSWER_CHUNK], rows[start : start + ANSWER_CHUNK])
        return answers

    def _answer_rows(self, model: TrainedModel, jobs: list[JobRequest], rows: list[list[float]]) -> list[Prediction]:
        t_req = np.array([job.t_req for job in jobs], dtype=np.float64)
        matrix = np.asarray(rows, dtype=np.float64)
        accuracy, under, penalty = self._assess(model, matrix, t_req)
        self._latest_answers = (jobs, under)
        users = [job.user for job in jobs]
        by_user = {user: self.multiplier(user) for user in set(users)}
        multipliers = np.array([np.nan if by_user[user] is None else by_user[user] for user in users])
        uncalibrated = np.isnan(multipliers)
        chosen = choose(accuracy, penalty, np.where(uncalibrated, 0.0, multipliers)[:, None])
        if uncalibrated.any():
            chosen = np.where(uncalibrated, choose_quantile(under, self.alpha), chosen)
        factors = np.minimum(1.0, CANDIDATES[chosen] * self._scale)
        estimates = np.clip(np.rint(t_req * factors), 1.0, t_req).astype(np.int64).tolist()
        pending = self._pending
        answers = []
        calibrated = (~uncalibrated).tolist()
        similar = matrix[:, N_FEATURES:].sum(axis=1).astype(np.int64).tolist()  # the key's finished jobs
        for index, (job, factor) in enumerate(zip(jobs, factors.tolist(), strict=True)):
            pending[job.job_id] = (
                job.submit,
                matrix[index],
                accuracy[index],
                penalty[index],
                estimates[index] if calibrated[index] else None,
            )
            answers.append(Prediction(estimates[index], factor, similar[index], False))
        return answers
