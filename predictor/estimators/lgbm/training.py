"""Training the lgbm estimators' model: the finished jobs kept for it, their snapshot, the LightGBM fit, and
the schedule that retrains it and puts each new model live.

The model is trained on the jobs that finished in the trailing `window` and
retrained every `retrain` of trace time, when a prediction is asked past the
next retraining point: a cheap snapshot of the training jobs is taken then
(`TrainingWindow.snapshot`), the model is fitted by a pure step that never
touches the live model (`Trainer.train`, inline or on an executor), and it goes
live at the first prediction `swap` of trace time after the snapshot
(`ModelSchedule`). On a live cluster, where trace time is wall time, the
training is long done by then and no prediction waits for it; in a replay,
where trace time runs far faster, that prediction waits for the model. Either
way the answers depend only on the trace, never on how fast training ran, so a
simulation through the service equals one in-process.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernel.jobs import FinishedJob
from predictor.estimators.lgbm.calibration import conformity_scores
from predictor.estimators.lgbm.features import feature_names
from predictor.estimators.lgbm.model import (
    CLASSES,
    TrainedModel,
    candidate_estimates,
    class_of,
    class_ratio_quantiles,
)
from predictor.estimators.lgbm.quantiles import level_scores


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


class TrainingWindow:
    """The finished jobs that ended in the trailing `seconds`, each with its row as of its submission.

    Rows are kept as arrays: unlike lists of floats, the garbage collector need not scan them.
    """

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds
        self._jobs: deque[tuple[int, np.ndarray, int, int, int]] = deque()  # end, row, runtime, t_req, user

    def __len__(self) -> int:
        return len(self._jobs)

    def latest_end(self) -> int | None:
        """When the last of the kept jobs ended (None: none kept)."""
        return max(entry[0] for entry in self._jobs) if self._jobs else None

    def add(self, job: FinishedJob, row: np.ndarray) -> None:
        """Keep a job that has just finished (in end order), and let go of those now out of the window."""
        jobs = self._jobs
        jobs.append((job.end, row, job.runtime, job.request.t_req, job.request.user))
        while jobs[0][0] < job.end - self.seconds:
            jobs.popleft()

    def snapshot(self, now: int, most: int, bootstrap_from: int | None, width: int) -> TrainingData:
        """The jobs that ended in [now - window, now], at most `most` of them (evenly spaced), copied out.

        Cheap: take it where history is locked, and train outside the lock.
        """
        first = now - self.seconds
        chosen = sorted((entry for entry in self._jobs if first <= entry[0] <= now), key=lambda entry: entry[0])
        if len(chosen) > most:  # a busy trace: evenly spaced jobs keep the whole window's span
            chosen = [chosen[i] for i in np.linspace(0, len(chosen) - 1, most).round().astype(int)]
        rows = np.asarray([entry[1] for entry in chosen], dtype=np.float64).reshape(len(chosen), width)
        return TrainingData(
            rows,
            np.array([entry[0] for entry in chosen], dtype=np.int64),
            np.array([entry[2] for entry in chosen], dtype=np.int64),
            np.array([entry[3] for entry in chosen], dtype=np.int64),
            np.array([entry[4] for entry in chosen], dtype=np.int64),
            now,
            bootstrap_from,
        )


@dataclass(frozen=True)
class Trainer:
    """How a model is fitted (LightGBM's settings), and how the jobs a bootstrap calibration needs are scored.

    Pure: training touches no estimator's state, so it may run in another thread.
    """

    trees: int
    leaves: int
    learning_rate: float
    threads: int
    seed: int
    min_train: int
    prior_jobs: float
    be_weight: float
    #: The model's features, in row order (a class default for a trainer restored from an older snapshot).
    features: tuple[str, ...] = feature_names()

    @property
    def width(self) -> int:
        """A row's length: the features, then the key's R class counts."""
        return len(self.features) + CLASSES

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

    def train(self, data: TrainingData) -> TrainedModel:
        """Fit a model on `data`.

        When the snapshot asks for it, a second model trained on the jobs that
        ended before the calibration window scores the jobs in it, so that a
        fresh estimator is calibrated from its first prediction.
        """
        if len(data) < self.min_train:
            raise ValueError(f"training needs at least {self.min_train} finished jobs, got {len(data)}")
        model = self.fit(data)
        earlier = (
            int(np.searchsorted(data.ends, data.bootstrap_from, side="right")) if data.bootstrap_from is not None else 0
        )
        if earlier >= self.min_train:
            accuracy, p_under, penalty = self.fit(data.head(earlier)).assess(
                data.rows[earlier:], data.t_req[earlier:], self.prior_jobs, self.be_weight
            )
            estimates, runtimes = candidate_estimates(data.t_req[earlier:]), data.runtimes[earlier:]
            under, bad = conformity_scores(accuracy, penalty, estimates, runtimes)
            ends = data.ends[earlier:].tolist()
            model.bootstrap_scores = list(
                zip(ends, data.users[earlier:].tolist(), under.tolist(), bad.tolist(), strict=True)
            )
            model.bootstrap_levels = list(zip(ends, level_scores(p_under, estimates, runtimes).tolist(), strict=True))
        return model

    def fit(self, data: TrainingData) -> TrainedModel:
        """The booster, and the R quantiles of each class, of one snapshot."""
        import lightgbm as lgb  # here, not at the top: its import (scikit-learn's with it) takes seconds

        ratios = data.ratios
        classes = class_of(ratios)
        dataset = lgb.Dataset(data.rows[:, :-CLASSES], classes, feature_name=list(self.features), free_raw_data=True)
        booster = lgb.train(self.lightgbm_params(), dataset, num_boost_round=self.trees)
        return TrainedModel(booster, class_ratio_quantiles(ratios, classes), data.now, int(data.ends.min()), len(data))


class ModelSchedule:
    """The live model, the training under way and the trace time it goes live, and when the next is due."""

    def __init__(self, retrain_seconds: int | None, swap_seconds: int) -> None:
        self.retrain_seconds = retrain_seconds
        self.swap_seconds = swap_seconds
        #: The model predictions are read from (None before the first training).
        self.live: TrainedModel | None = None
        self._next_retrain: int | None = None
        #: A model in training (or trained) and the trace time from which it goes live.
        self._training: tuple[int, Future[TrainedModel]] | None = None

    def retrain_due(self, now: int, jobs: int, min_train: int) -> bool:
        """Whether a training starts at `now`: the first once `jobs` reach `min_train`, then every `retrain`."""
        if self.retrain_seconds is None or self._training is not None:
            return False
        if self._next_retrain is not None:
            return now >= self._next_retrain
        return jobs >= min_train

    def swap_due(self, now: int) -> bool:
        return self._training is not None and now >= self._training[0]

    def start(
        self,
        now: int,
        data: TrainingData | None,
        train: Callable[[TrainingData], TrainedModel],
        executor: Executor | None,
    ) -> None:
        """The retraining due at `now`: train on `data` (None: too few jobs, the next retraining is due all
        the same), on `executor` or inline."""
        assert self.retrain_seconds is not None  # a retraining is never due with retrain=never
        if data is not None:
            model: Future[TrainedModel]
            if executor is not None:
                model = executor.submit(train, data)  # an executor that refuses (raises) leaves the schedule as is
            else:
                model = Future()
                model.set_result(train(data))
            self._training = (now + self.swap_seconds, model)
        self._next_retrain = now + self.retrain_seconds

    def due(self, now: int) -> TrainedModel | None:
        """The model whose time to go live has come at `now`, if any, taken off the schedule.

        Waits for its training only where trace time outruns training: a replay. A wait its executor's
        future gives up (the service bounds it by the call's deadline) leaves the training on the schedule.
        """
        training = self._training
        if training is None or now < training[0]:
            return None
        try:
            return training[1].result()
        finally:
            if training[1].done():
                self._training = None

    def put_live(self, model: TrainedModel) -> None:
        """Make `model` the live one (an atomic reference swap); the next retraining is due `retrain` after it."""
        self.live = model
        if self.retrain_seconds is not None:
            self._next_retrain = model.trained_at + self.retrain_seconds

    def cancel(self) -> None:
        """Drop the training under way: a model trained now supersedes it."""
        self._training = None
