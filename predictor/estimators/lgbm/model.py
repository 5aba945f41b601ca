"""The model of R = t_act / t_req the lgbm estimators predict from: a LightGBM classifier over bins of R,
each bin represented by quantiles of its training jobs, read at candidate estimates.

`TrainedModel.distribution` turns a job's row (features and its key's R class
counts) into, per candidate estimate, the expected accuracy, P(under) and P(BE);
`runtime_interval` reads the runtime quantiles off the same P(under) row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kernel.jobs import INTERVAL_PROBABILITIES, RuntimeInterval, clamp_estimate
from predictor.estimators.lgbm.calibration import choose_quantile
from predictor.scoring import BAD_UNDERESTIMATE_SECONDS

if TYPE_CHECKING:
    import lightgbm as lgb

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
        bootstrap_levels: list[tuple[int, int]] | None = None,
    ) -> None:
        if class_ratios.shape != (CLASSES, CLASS_QUANTILES):
            raise ValueError(f"class ratios must be {CLASSES} x {CLASS_QUANTILES}, got {class_ratios.shape}")
        self.booster = booster
        self.class_ratios = class_ratios
        self.trained_at = trained_at
        self.first_end = first_end
        self.jobs = jobs
        #: What a fresh estimator's calibrations start from: (end, user, under, bad) and (end, level) scores.
        self.bootstrap_scores = bootstrap_scores or []
        self.bootstrap_levels = bootstrap_levels or []
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
        counts = rows[:, -CLASSES:]  # after the model's features
        predicted = np.asarray(self.booster.predict(rows[:, :-CLASSES], num_threads=1))
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

    def assess(
        self, rows: np.ndarray, t_req: np.ndarray, prior_jobs: float, be_weight: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Jobs x candidates: expected accuracy, P(under), and the penalty a calibration multiplier weighs
        (P(under) + `be_weight` x P(BE))."""
        accuracy, under, bad = self.distribution(rows, t_req, prior_jobs)
        return accuracy, under, under + be_weight * bad


def runtime_interval(
    under: np.ndarray,
    t_req: int,
    t_sched: int,
    levels: Sequence[float] = INTERVAL_PROBABILITIES,
    miss_share: Callable[[float], float] | None = None,
) -> RuntimeInterval:
    """The runtime quantiles of one job's distribution (`under`: its P(under) per candidate), and P(runtime >
    t_sched).

    Each quantile of `INTERVAL_PROBABILITIES` is the first candidate estimate
    at or above its level in `levels` (the probability itself, or a level
    calibrated to cover it), as the `alpha` quantile is read; P(runtime >
    t_sched) is the model's at the largest candidate whose estimate (in whole
    seconds) is not above t_sched, recalibrated by `miss_share` if given.
    """
    quantiles = tuple(
        (probability, clamp_estimate(t_req * CANDIDATES[choose_quantile(under, level)], t_req))
        for probability, level in zip(INTERVAL_PROBABILITIES, levels, strict=True)
    )
    estimates = candidate_estimates(np.array([t_req]))[0]
    below = max(int(np.searchsorted(estimates, t_sched, side="right")) - 1, 0)
    p_under = float(np.clip(under[below], 0.0, 1.0))
    if miss_share is not None:
        # A runtime between the candidate below t_sched and t_sched's own may fall either side: the
        # recalibrated share is read halfway between the two levels, not at the lower bound.
        p_under = miss_share(float(np.clip((under[max(below - 1, 0)] + under[below]) / 2, 0.0, 1.0)))
    return RuntimeInterval(quantiles, p_under)
