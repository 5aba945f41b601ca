"""Quantiles of the predicted runtime distribution that cover what they claim: recalibrated levels.

The model's distribution is not calibrated: on KTH-SP2 the runtime is at or below its 0.9 quantile
for 96% of the jobs (the uniform hedge and the key posterior spread it out), and how far off it is
differs between sites and drifts over time. So the level a quantile is read at is calibrated on the
jobs that finished recently (Kuleshov et al., ICML 2018, done conformally): each finished job's score
is the level of the model's distribution its runtime fell at (the probability integral transform, as
of its submission: F(the largest candidate estimate below its runtime)); the p quantile is then read
at the smallest level on `LEVELS` that covered a share p of the trailing window's jobs (finite-sample
corrected), with the miss rate 1 - p adapted to the coverage actually delivered
(`predictor.estimators.lgbm.conformal`). P(runtime > t_sched) is recalibrated the same way: the share
of the window's jobs whose score lay above the model's level at t_sched.

A job is covered by the quantile read at level g iff its score is below g (the first candidate whose
P(runtime <= estimate) reaches g is then at or above its runtime), so each score is stored as the
index of the first grid level above it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from predictor.estimators.lgbm.conformal import AdaptiveLevel, TrailingScores

#: The levels a quantile can be read at (0.001 apart).
LEVELS = np.linspace(0.0, 1.0, 1001)


def level_scores(under_probability: np.ndarray, estimates: np.ndarray, runtimes: np.ndarray) -> np.ndarray:
    """Per job, the index on `LEVELS` of the lowest level whose quantile covers its runtime.

    `under_probability[j, c]` is P(runtime > estimates[j, c]), candidates ascending. A job that
    ran longer than every candidate (beyond its request) scores len(LEVELS): no level covers it.
    """
    runtimes = np.asarray(runtimes)[:, None]
    reached = estimates >= runtimes
    first = np.argmax(reached, axis=1)
    rows = np.arange(len(first))
    below = 1.0 - under_probability[rows, np.maximum(first - 1, 0)]
    pit = np.where(first == 0, -1.0, below)  # the smallest candidate covers it: every level does
    pit = np.where(reached.any(axis=1), pit, np.inf)
    scores: np.ndarray = np.searchsorted(LEVELS, pit, side="right")
    return scores


class LevelCalibrator:
    """The level each probability's quantile is read at, from the scores of the jobs that ended recently.

    Below `min_jobs` scores in the `window` (seconds of trace time), the levels are the probabilities
    themselves and P(runtime > t_sched) is the model's.
    """

    def __init__(
        self,
        probabilities: Iterable[float],
        window: int,
        min_jobs: int,
        adapt: float,
    ) -> None:
        if min_jobs < 1:
            raise ValueError(f"need min_jobs >= 1, got {min_jobs}")
        self.min_jobs = min_jobs
        self._targets = {probability: AdaptiveLevel(1.0 - probability, adapt) for probability in probabilities}
        self._scores = TrailingScores(1, len(LEVELS), window)
        self._indices: dict[float, int] | None = None

    def __len__(self) -> int:
        return len(self._scores)

    def reset(self) -> None:
        self._scores.reset()
        for target in self._targets.values():
            target.reset()
        self._indices = None

    def add(self, end: int, score: int) -> None:
        """Count the score of a job that ended at `end` (forgetting those that ended before the window)."""
        self._scores.add(end, (score,))
        self._indices = None

    def record(self, probability: float, missed: bool) -> None:
        """Adapt the miss rate of `probability`'s quantile to whether the one served missed its job."""
        self._targets[probability].record(missed)
        self._indices = None

    def indices(self) -> dict[float, int] | None:
        """Per probability, the index on `LEVELS` its quantile is read at (None: too few jobs yet)."""
        if len(self._scores) < self.min_jobs:
            return None
        if self._indices is None:
            found = self._scores.thresholds(0, [target.level for target in self._targets.values()])
            self._indices = dict(zip(self._targets, found, strict=True))
        return self._indices

    def miss_share(self, model_under: float) -> float:
        """P(runtime > t) recalibrated: the share of recent jobs the model's quantile at t would have missed.

        `model_under` is the model's own P(runtime > t); with too few jobs it is returned as it is.
        """
        if len(self._scores) < self.min_jobs:
            return model_under
        level = int(np.searchsorted(LEVELS, 1.0 - model_under - 1e-12))
        return self._scores.share_above(0, level)

    def state(self) -> list[list[int]]:
        """The [end, score] entries in the window, oldest first (for a model manifest)."""
        return self._scores.entries()

    def restore(self, scores: list[list[int]]) -> None:
        """Reload `state()`."""
        self.reset()
        for end, score in scores:
            self.add(int(end), int(score))
