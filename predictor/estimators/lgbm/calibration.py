"""Choosing an estimate from a predicted runtime distribution, and calibrating that choice.

The model gives, for each job and each candidate estimate c x t_req, the
expected accuracy (Tang's Eq. 3) and a penalty: the probability of
underestimating, plus a weight times the probability of underestimating by
more than 30 minutes (a BE). The estimate maximises `accuracy - multiplier x
penalty`: a Lagrangian trade-off that spends the underestimation budget on the
jobs where it buys the most accuracy, instead of taking one quantile for every
job. A larger multiplier underestimates less.

The multiplier is calibrated conformal-style. For each finished job we record
two scores: the smallest multiplier on `MULTIPLIERS` at which the job would not
have been underestimated, and the smallest at which it would not have been a
BE (the choice moves to larger estimates as the multiplier grows, so these are
thresholds). The underestimation rate at a multiplier is then the fraction of
scores above it, and the calibrated multiplier is the smallest one whose
(finite-sample corrected) rates over the jobs that finished in a trailing
window of trace time are at most their targets. The window is a time span,
not a number of jobs: a few thousand jobs on a busy machine are only the last
hours, whose finished jobs are the short ones, and the long jobs, which are the
ones underestimated by hours, would never count.

A trailing window only estimates the next weeks' rates from the last ones:
on a bursty trace, a burst of surprises holds the multiplier up for a whole
window and the rate falls well below its target afterwards. So the rate each
window is held to (its level) adapts, as in adaptive conformal inference
(Gibbs and Candes, NeurIPS 2021): after every served estimate the level moves
by `adapt` x (target - missed), up when the served estimates miss less often
than the target, down when more often, so that the rate actually delivered
tracks the target over time. The level stays within a factor `LEVEL_RANGE` of
the target: a burst of late-reported misses cannot shut predictions off.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from predictor.scoring import BAD_UNDERESTIMATE_SECONDS

#: The multipliers a calibration can choose from (log-spaced; scores index into it).
MULTIPLIERS = np.geomspace(0.01, 1e5, 141)
#: How far adaptation may move a level from its target, as a factor either way (and never to 1 or beyond).
LEVEL_RANGE = 2.0
_SCORE_CHUNK = 64


def choose(expected_accuracy: np.ndarray, penalty: np.ndarray, multiplier: float | np.ndarray) -> np.ndarray:
    """Per row (job), the index of the candidate that maximises accuracy - multiplier x penalty.

    `multiplier` is one number, or a column with one per row.
    """
    chosen: np.ndarray = np.argmax(expected_accuracy - multiplier * penalty, axis=-1)
    return chosen


def choose_quantile(under_probability: np.ndarray, alpha: float) -> np.ndarray:
    """Per row, the first candidate whose predicted P(runtime <= estimate) reaches `alpha`.

    The last candidate (the request itself) never underestimates, so a choice always exists.
    """
    chosen: np.ndarray = np.argmax(1.0 - under_probability >= alpha - 1e-12, axis=-1)
    return chosen


def conformity_scores(
    expected_accuracy: np.ndarray, penalty: np.ndarray, estimates: np.ndarray, runtimes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per job, the indices in `MULTIPLIERS` of the smallest multipliers that do not underestimate it,
    and that do not underestimate it by more than 30 minutes (BE).

    `estimates[j, c]` is job j's estimate in seconds for candidate c. A job
    underestimated even at the largest multiplier scores len(MULTIPLIERS).
    """
    under = np.empty(len(runtimes), dtype=np.int64)
    bad = np.empty(len(runtimes), dtype=np.int64)
    for start in range(0, len(runtimes), _SCORE_CHUNK):  # bounded memory: chunk x multipliers x candidates
        rows = slice(start, start + _SCORE_CHUNK)
        objective = expected_accuracy[rows, None, :] - MULTIPLIERS[None, :, None] * penalty[rows, None, :]
        chosen = np.take_along_axis(estimates[rows], np.argmax(objective, axis=2), axis=1)  # jobs x multipliers
        for scores, shortfall in ((under, 0), (bad, BAD_UNDERESTIMATE_SECONDS)):
            safe = chosen >= runtimes[rows, None] - shortfall
            scores[rows] = np.where(safe.any(axis=1), np.argmax(safe, axis=1), len(MULTIPLIERS))
    return under, bad


class _ScoreHistogram:
    """Scores of one kind in the window, counted per multiplier, and the level their rate is held to."""

    def __init__(self, target: float, adapt: float) -> None:
        self.target = target
        self.adapt = adapt
        self.level = target
        self._lowest = target / LEVEL_RANGE
        self._highest = min(target * LEVEL_RANGE, (1.0 + target) / 2)
        self.counts = np.zeros(len(MULTIPLIERS) + 1, dtype=np.int64)

    def record(self, missed: bool) -> None:
        """Adapt the level to the outcome of one served estimate."""
        level = self.level + self.adapt * (self.target - missed)
        self.level = min(self._highest, max(self._lowest, level))

    def multiplier_index(self, total: int) -> int:
        """The smallest multiplier whose finite-sample corrected rate of scores above it is <= the level."""
        above = total - np.cumsum(self.counts[:-1])
        acceptable = np.flatnonzero((above + 1) / (total + 1) <= self.level)
        return int(acceptable[0]) if len(acceptable) else len(MULTIPLIERS) - 1


class TrailingCalibrator:
    """The multiplier that held the under- and bad-estimate rates at their targets over recent jobs.

    Scores of the jobs that ended in the last `window` seconds count; below
    `min_jobs` of them there is no calibration (`multiplier()` is None). The
    multiplier is the larger of the one for `target_under` and the one for
    `target_bad`, each adapted at rate `adapt` (0: not at all) by `record`.
    """

    def __init__(self, target_under: float, target_bad: float, window: int, min_jobs: int, adapt: float = 0.0) -> None:
        if not 0.0 < target_under < 1.0:
            raise ValueError(f"target_under must be in (0, 1), got {target_under}")
        if not 0.0 < target_bad <= target_under:
            raise ValueError(f"target_bad must be in (0, target_under], got {target_bad}")
        if not 0.0 <= adapt < 1.0:
            raise ValueError(f"adapt must be in [0, 1), got {adapt}")
        if min_jobs < 1 or window <= 0:
            raise ValueError(f"need min_jobs >= 1 and a positive window, got {min_jobs} and {window}")
        self.window = window
        self.min_jobs = min_jobs
        self._under = _ScoreHistogram(target_under, adapt)
        self._bad = _ScoreHistogram(target_bad, adapt)
        self._scores: deque[tuple[int, int, int]] = deque()  # (end, under, bad), in the order added
        self._multiplier: float | None = None
        self._stale = False

    def __len__(self) -> int:
        return len(self._scores)

    def reset(self) -> None:
        self._scores.clear()
        for histogram in (self._under, self._bad):
            histogram.counts[:] = 0
            histogram.level = histogram.target
        self._multiplier = None
        self._stale = False

    def add(self, end: int, under: int, bad: int) -> None:
        """Record the scores of a job that ended at `end`; forget those that ended before the window."""
        for score in (under, bad):
            if not 0 <= score <= len(MULTIPLIERS):
                raise ValueError(f"calibration score {score} out of range 0..{len(MULTIPLIERS)}")
        self._scores.append((end, under, bad))
        self._under.counts[under] += 1
        self._bad.counts[bad] += 1
        self.expire(end - self.window)

    def record(self, underestimated: bool, bad: bool) -> None:
        """Adapt the levels to a served estimate: did it underestimate its job, and by more than 30 min?"""
        self._under.record(underestimated)
        self._bad.record(bad)
        self._stale = True

    def levels(self) -> tuple[float, float]:
        """The under- and bad-estimate rates currently aimed at."""
        return self._under.level, self._bad.level

    def expire(self, horizon: int) -> None:
        """Forget the scores of jobs that ended before `horizon`."""
        scores = self._scores
        while scores and scores[0][0] < horizon:
            _, old_under, old_bad = scores.popleft()
            self._under.counts[old_under] -= 1
            self._bad.counts[old_bad] -= 1
        self._stale = True

    def multiplier(self) -> float | None:
        """The calibrated multiplier, or None with fewer than `min_jobs` scores."""
        if self._stale:
            total = len(self._scores)
            index = max(self._under.multiplier_index(total), self._bad.multiplier_index(total))
            self._multiplier = float(MULTIPLIERS[index]) if total >= self.min_jobs else None
            self._stale = False
        return self._multiplier

    def state(self) -> list[list[int]]:
        """The [end, under, bad] scores in the window, oldest first (for a model manifest)."""
        return [list(entry) for entry in self._scores]

    def restore(self, scores: list[list[int]]) -> None:
        """Reload `state()`."""
        self.reset()
        for end, under, bad in scores:
            self.add(int(end), int(under), int(bad))


class UserCalibrator:
    """A multiplier per user where the user's own recent jobs suffice, else one for everybody.

    Group-conditional (Mondrian) calibration: each user with at least
    `min_user_jobs` scores in the window is held to the targets on their own
    jobs, so a user with regular jobs is not made timid by another user's
    surprises, nor the reverse. With `min_user_jobs=None` everybody shares one
    multiplier and no per-user windows are kept.
    """

    def __init__(
        self,
        target_under: float,
        target_bad: float,
        window: int,
        min_jobs: int,
        min_user_jobs: int | None,
        adapt: float = 0.0,
    ) -> None:
        self._settings = (target_under, target_bad, window, min_jobs, adapt)
        self.everybody = self._make()
        self.min_user_jobs = min_user_jobs
        self._users: dict[int, TrailingCalibrator] = {}
        self._entries: deque[tuple[int, int, int, int]] = deque()  # (end, user, under, bad)
        self.window = window

    def _make(self) -> TrailingCalibrator:
        return TrailingCalibrator(*self._settings)

    def __len__(self) -> int:
        return len(self.everybody)

    def reset(self) -> None:
        self.everybody.reset()
        self._users.clear()
        self._entries.clear()

    def add(self, end: int, user: int, under: int, bad: int) -> None:
        self.everybody.add(end, under, bad)
        entries = self._entries
        entries.append((end, user, under, bad))
        horizon = end - self.window
        if self.min_user_jobs is None:
            while entries[0][0] < horizon:
                entries.popleft()
            return
        calibrator = self._users.get(user)
        if calibrator is None:
            calibrator = self._users[user] = self._make()
        calibrator.add(end, under, bad)
        while entries[0][0] < horizon:  # keep every user's window in step with everybody's
            expired = entries.popleft()[1]
            calibrator = self._users.get(expired)
            if calibrator is not None:  # None: an earlier entry of this user already emptied it
                calibrator.expire(horizon)
                if not len(calibrator):
                    del self._users[expired]

    def record(self, user: int, underestimated: bool, bad: bool) -> None:
        """Adapt the levels of the calibrator that serves `user` now (theirs or everybody's) to one outcome.

        Now, not when the estimate was served: the user may have crossed
        `min_user_jobs` in between, which only shifts one outcome between two
        calibrators that both aim at the same targets.
        """
        self._serving(user).record(underestimated, bad)

    def _serving(self, user: int) -> TrailingCalibrator:
        calibrator = self._users.get(user)  # None without per-user windows
        if calibrator is not None and self.min_user_jobs is not None and len(calibrator) >= self.min_user_jobs:
            return calibrator
        return self.everybody

    def multiplier(self, user: int) -> float | None:
        """The user's multiplier if they have enough recent jobs, else everybody's (None: uncalibrated)."""
        return self._serving(user).multiplier()

    def state(self) -> list[list[int]]:
        """The [end, user, under, bad] scores in the window, oldest first (for a model manifest)."""
        return [list(entry) for entry in self._entries]

    def restore(self, scores: list[list[int]]) -> None:
        """Reload `state()`."""
        self.reset()
        for end, user, under, bad in scores:
            self.add(int(end), int(user), int(under), int(bad))
