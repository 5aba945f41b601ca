"""Choosing an estimate from a predicted runtime distribution, and calibrating that choice.

The model gives, for each job and each candidate estimate c x t_req, the
expected accuracy (Tang's Eq. 3) and a penalty: the probability of
underestimating, plus a weight times the probability of underestimating by
more than 30 minutes (a BE). The estimate maximises `accuracy - multiplier x
penalty`: a Lagrangian trade-off that spends the underestimation budget on the
jobs where it buys the most accuracy, instead of taking one quantile for every
job. A larger multiplier underestimates less.

The multiplier is calibrated conformal-style. For each finished job we record
its score: the smallest multiplier on `MULTIPLIERS` at which the job would
not have been underestimated (the choice moves to larger estimates as the
multiplier grows, so this is a threshold). Then the underestimation rate at a
multiplier is the fraction of scores above it, and the calibrated multiplier is
the smallest one whose (finite-sample corrected) rate over the latest finished
jobs is at most `target_under`. The window is a number of jobs, not a time
span, so that the calibration follows a burst of one user's jobs quickly.
"""
from __future__ import annotations

from collections import deque

import numpy as np

#: The multipliers a calibration can choose from (log-spaced; scores index into it).
MULTIPLIERS = np.geomspace(0.01, 100.0, 121)
_SCORE_CHUNK = 64


def choose(expected_accuracy: np.ndarray, penalty: np.ndarray, multiplier: float) -> np.ndarray:
    """Per row (job), the index of the candidate that maximises accuracy - multiplier x penalty."""
    return np.argmax(expected_accuracy - multiplier * penalty, axis=-1)


def choose_quantile(under_probability: np.ndarray, alpha: float) -> np.ndarray:
    """Per row, the first candidate whose predicted P(runtime <= estimate) reaches `alpha`.

    The last candidate (the request itself) never underestimates, so a choice always exists.
    """
    return np.argmax(1.0 - under_probability >= alpha - 1e-12, axis=-1)


def conformity_scores(expected_accuracy: np.ndarray, penalty: np.ndarray,
                      estimates: np.ndarray, runtimes: np.ndarray) -> np.ndarray:
    """Per job, the index in `MULTIPLIERS` of the smallest multiplier that does not underestimate it.

    `estimates[j, c]` is job j's estimate in seconds for candidate c. A job
    underestimated even at the largest multiplier scores len(MULTIPLIERS).
    """
    scores = np.empty(len(runtimes), dtype=np.int64)
    for start in range(0, len(runtimes), _SCORE_CHUNK):  # bounded memory: chunk x multipliers x candidates
        rows = slice(start, start + _SCORE_CHUNK)
        objective = (expected_accuracy[rows, None, :]
                     - MULTIPLIERS[None, :, None] * penalty[rows, None, :])
        chosen = np.argmax(objective, axis=2)                       # jobs x multipliers
        safe = np.take_along_axis(estimates[rows], chosen, axis=1) >= runtimes[rows, None]
        scores[rows] = np.where(safe.any(axis=1), np.argmax(safe, axis=1), len(MULTIPLIERS))
    return scores


class TrailingCalibrator:
    """The multiplier that held the underestimation rate at `target_under` over the latest finished jobs.

    Scores of the last `jobs` finished jobs count; below `min_jobs` of them
    there is no calibration (`multiplier()` is None).
    """

    def __init__(self, target_under: float, jobs: int, min_jobs: int) -> None:
        if not 0.0 < target_under < 1.0:
            raise ValueError(f"target_under must be in (0, 1), got {target_under}")
        if not 0 < min_jobs <= jobs:
            raise ValueError(f"need 0 < min_jobs <= jobs, got min_jobs={min_jobs}, jobs={jobs}")
        self.target_under = target_under
        self.jobs = jobs
        self.min_jobs = min_jobs
        self._scores: deque[int] = deque()
        self._counts = np.zeros(len(MULTIPLIERS) + 1, dtype=np.int64)
        self._multiplier: float | None = None
        self._stale = False

    def __len__(self) -> int:
        return len(self._scores)

    def reset(self) -> None:
        self._scores.clear()
        self._counts[:] = 0
        self._multiplier = None
        self._stale = False

    def add(self, score: int) -> None:
        """Record the score of a job that just finished; forget the oldest beyond `jobs`."""
        if not 0 <= score <= len(MULTIPLIERS):
            raise ValueError(f"calibration score {score} out of range 0..{len(MULTIPLIERS)}")
        self._scores.append(score)
        self._counts[score] += 1
        if len(self._scores) > self.jobs:
            self._counts[self._scores.popleft()] -= 1
        self._stale = True

    def multiplier(self) -> float | None:
        """The calibrated multiplier, or None with fewer than `min_jobs` scores."""
        if self._stale:
            self._multiplier = self._calibrate()
            self._stale = False
        return self._multiplier

    def _calibrate(self) -> float | None:
        total = len(self._scores)
        if total < self.min_jobs:
            return None
        above = total - np.cumsum(self._counts[:-1])           # scores above each multiplier
        rate = (above + 1) / (total + 1)
        acceptable = np.flatnonzero(rate <= self.target_under)
        return float(MULTIPLIERS[acceptable[0] if len(acceptable) else -1])

    def state(self) -> list[int]:
        """The scores in the window, oldest first (for a model manifest)."""
        return list(self._scores)

    def restore(self, scores: list[int]) -> None:
        """Reload `state()`."""
        self.reset()
        for score in scores:
            self.add(int(score))
