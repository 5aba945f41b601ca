"""Conformal thresholds on the jobs that finished in a trailing window, held to levels that adapt (ACI).

Both calibrations of the lgbm estimators (`predictor.estimators.lgbm.calibration`) have the same shape.
Each finished job gets an integer score per kind: the smallest index on a grid of answers (multipliers,
quantile levels) at which the answer would have covered it, `size` where none would. The calibrated
index for a miss rate m is then the smallest one whose finite-sample corrected share of scores above
it, (above + 1) / (n + 1), is at most m: split conformal prediction, with the most recent finished
jobs as the calibration set, so that it follows a site whose workload changes.

A trailing window only estimates the next weeks from the last ones, and on a bursty trace it misses:
a burst of surprises holds the threshold up for a whole window and the rate falls well below its
target afterwards. So the miss rate each threshold is held to (its level) adapts, as in adaptive
conformal inference (Gibbs and Candès, NeurIPS 2021): after every served answer whose outcome is
known (the job finished) it moves by `adapt` x (target - missed), so that the rate actually delivered
tracks the target. The level stays within a factor `level_range` of the target and below 1, so that
a burst of late-reported misses cannot shut predictions off.
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: How far adaptation may move a level from its target, as a factor either way (and never to 1 or beyond).
LEVEL_RANGE = 2.0


class AdaptiveLevel:
    """The miss rate a threshold is held to: starts at `target`, moved by `adapt` x (target - missed)."""

    def __init__(self, target: float, adapt: float, level_range: float = LEVEL_RANGE) -> None:
        if not 0.0 < target < 1.0:
            raise ValueError(f"a target miss rate must be in (0, 1), got {target}")
        if not 0.0 <= adapt < 1.0:
            raise ValueError(f"adapt must be in [0, 1), got {adapt}")
        if level_range < 1.0:
            raise ValueError(f"level_range must be at least 1, got {level_range}")
        self.target = target
        self.adapt = adapt
        self.level = target
        self._lowest = target / level_range
        self._highest = min(target * level_range, (1.0 + target) / 2)

    def record(self, missed: bool) -> None:
        """Adapt the level to the outcome of one served answer."""
        level = self.level + self.adapt * (self.target - missed)
        self.level = min(self._highest, max(self._lowest, level))

    def reset(self) -> None:
        self.level = self.target


class TrailingScores:
    """The scores of the jobs that ended in the trailing `window` seconds, counted per index, one count per kind.

    A score of a kind is in 0..size (`size`: no index of the grid covers the job).
    """

    def __init__(self, kinds: int, size: int, window: int) -> None:
        if window <= 0:
            raise ValueError(f"a calibration window must be positive, got {window}")
        self.size = size
        self.window = window
        self.counts = np.zeros((kinds, size + 1), dtype=np.int64)
        self._entries: deque[tuple[int, ...]] = deque()  # (end, score per kind), in the order added

    def __len__(self) -> int:
        return len(self._entries)

    def reset(self) -> None:
        self._entries.clear()
        self.counts[:] = 0

    def add(self, end: int, scores: tuple[int, ...]) -> None:
        """Count the scores of a job that ended at `end`; forget those that ended before the window."""
        if len(scores) != len(self.counts) or not all(0 <= score <= self.size for score in scores):
            raise ValueError(f"calibration scores {scores} must be {len(self.counts)} integers in 0..{self.size}")
        self._entries.append((end, *scores))
        self.counts[np.arange(len(scores)), scores] += 1
        self.expire(end - self.window)

    def expire(self, horizon: int) -> None:
        """Forget the scores of jobs that ended before `horizon`."""
        entries = self._entries
        while entries and entries[0][0] < horizon:
            old = entries.popleft()
            self.counts[np.arange(len(old) - 1), old[1:]] -= 1

    def threshold(self, kind: int, level: float) -> int:
        """The smallest index whose finite-sample corrected share of scores above it is at most `level`
        (the last index where none is)."""
        return self.thresholds(kind, [level])[0]

    def thresholds(self, kind: int, levels: list[float]) -> list[int]:
        """`threshold` of each of `levels` (one pass over the counts)."""
        total = len(self._entries)
        shares = (total - np.cumsum(self.counts[kind, :-1]) + 1) / (total + 1)  # non-increasing
        found = np.searchsorted(-shares, -np.asarray(levels), side="left")  # first share <= level
        return [int(index) if index < self.size else self.size - 1 for index in found]

    def share_above(self, kind: int, index: int) -> float:
        """The share of the window's scores of `kind` above `index` (jobs the answer at `index` would miss)."""
        total = len(self._entries)
        return float(self.counts[kind, index + 1 :].sum() / total) if total else 0.0

    def entries(self) -> list[list[int]]:
        """The [end, score per kind] entries in the window, oldest first."""
        return [list(entry) for entry in self._entries]
