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
from dataclasses import dataclass

import numpy as np

from kernel.jobs import INTERVAL_PROBABILITIES
from predictor.estimators.lgbm.conformal import LEVEL_RANGE, AdaptiveLevel, TrailingScores
from predictor.estimators.lgbm.quantiles import LEVELS, LevelCalibrator, level_scores
from predictor.scoring import BAD_UNDERESTIMATE_SECONDS

#: The multipliers a calibration can choose from (log-spaced; scores index into it).
MULTIPLIERS = np.geomspace(0.01, 1e5, 141)
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


class TrailingCalibrator:
    """The multiplier that held the under- and bad-estimate rates at their targets over recent jobs.

    Scores of the jobs that ended in the last `window` seconds count; below
    `min_jobs` of them there is no calibration (`multiplier()` is None). The
    multiplier is the larger of the one for `target_under` and the one for
    `target_bad`, each adapted at rate `adapt` (0: not at all) by `record`,
    within a factor `LEVEL_RANGE` of its target.
    """

    def __init__(self, target_under: float, target_bad: float, window: int, min_jobs: int, adapt: float = 0.0) -> None:
        if not 0.0 < target_under < 1.0:
            raise ValueError(f"target_under must be in (0, 1), got {target_under}")
        if not 0.0 < target_bad <= target_under:
            raise ValueError(f"target_bad must be in (0, target_under], got {target_bad}")
        if min_jobs < 1 or window <= 0:
            raise ValueError(f"need min_jobs >= 1 and a positive window, got {min_jobs} and {window}")
        self.window = window
        self.min_jobs = min_jobs
        self._levels = (
            AdaptiveLevel(target_under, adapt, LEVEL_RANGE),
            AdaptiveLevel(target_bad, adapt, LEVEL_RANGE),
        )
        self._scores = TrailingScores(2, len(MULTIPLIERS), window)
        self._multiplier: float | None = None
        self._stale = False

    def __len__(self) -> int:
        return len(self._scores)

    def reset(self) -> None:
        self._scores.reset()
        for level in self._levels:
            level.reset()
        self._multiplier = None
        self._stale = False

    def add(self, end: int, under: int, bad: int) -> None:
        """Record the scores of a job that ended at `end`; forget those that ended before the window."""
        self._scores.add(end, (under, bad))
        self._stale = True

    def record(self, underestimated: bool, bad: bool) -> None:
        """Adapt the levels to a served estimate: did it underestimate its job, and by more than 30 min?"""
        self._levels[0].record(underestimated)
        self._levels[1].record(bad)
        self._stale = True

    def levels(self) -> tuple[float, float]:
        """The under- and bad-estimate rates currently aimed at."""
        return self._levels[0].level, self._levels[1].level

    def expire(self, horizon: int) -> None:
        """Forget the scores of jobs that ended before `horizon`."""
        self._scores.expire(horizon)
        self._stale = True

    def multiplier(self) -> float | None:
        """The calibrated multiplier, or None with fewer than `min_jobs` scores."""
        if self._stale:
            scores = self._scores
            index = max(scores.threshold(kind, level.level) for kind, level in enumerate(self._levels))
            self._multiplier = float(MULTIPLIERS[index]) if len(scores) >= self.min_jobs else None
            self._stale = False
        return self._multiplier

    def state(self) -> list[list[int]]:
        """The [end, under, bad] scores in the window, oldest first (for a model manifest)."""
        return self._scores.entries()

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


@dataclass(frozen=True)
class JobScores:
    """A finished job's calibration scores (None: the calibration that needs it is off).

    `under`, `bad`: indices on `MULTIPLIERS` (`conformity_scores`); `level`: an index on `LEVELS` (`level_scores`).
    """

    under: int | None
    bad: int | None
    level: int | None


def job_scores(
    accuracy: np.ndarray,
    under: np.ndarray,
    penalty: np.ndarray,
    estimates: np.ndarray,
    runtime: int,
    *,
    rates: bool,
    levels: bool,
) -> JobScores:
    """One finished job's scores from its row of the model's arrays and its candidate estimates."""
    runtimes = np.array([runtime])
    under_score = bad_score = level_score = None
    if rates:
        unders, bads = conformity_scores(accuracy[None], penalty[None], estimates[None], runtimes)
        under_score, bad_score = int(unders[0]), int(bads[0])
    if levels:
        level_score = int(level_scores(under[None], estimates[None], runtimes)[0])
    return JobScores(under_score, bad_score, level_score)


class Calibration:
    """Everything the lgbm estimators calibrate: the multiplier that holds `target_under` (None: off), and
    the levels their quantiles and P(runtime > t_sched) are read at (`recalibrate`; else the nominal ones).

    `choose` picks each job's candidate and says what was served; `learn` takes a finished job's scores
    and the outcome of what was served for it. Both calibrations rest on the jobs that ended in the
    trailing `window` seconds, at least `min_jobs` of them, and adapt at rate `adapt`.
    """

    def __init__(
        self,
        *,
        alpha: float,
        target_under: float,
        be_share: float,
        window: int,
        min_jobs: int,
        min_user_jobs: int | None,
        adapt: float,
        recalibrate: bool,
    ) -> None:
        self.alpha = alpha
        self.min_jobs = min_jobs
        self.rates = (
            UserCalibrator(target_under, be_share * target_under, window, min_jobs, min_user_jobs, adapt)
            if target_under > 0
            else None
        )
        probabilities = dict.fromkeys((alpha, *INTERVAL_PROBABILITIES))
        self.levels = LevelCalibrator(probabilities, window, min_jobs, adapt) if recalibrate else None

    @property
    def active(self) -> bool:
        """Whether finished jobs are scored at all."""
        return self.rates is not None or self.levels is not None

    def needs_bootstrap(self) -> bool:
        """Whether a calibration has too few jobs, so that a training should score some for it."""
        return any(part is not None and len(part) < self.min_jobs for part in (self.rates, self.levels))

    def bootstrap(self, scores: list[tuple[int, int, int, int]], levels: list[tuple[int, int]]) -> None:
        """Take a new model's bootstrap scores into each calibration that still has too few jobs."""
        if self.rates is not None and len(self.rates) < self.min_jobs:
            for end, user, under, bad in scores:
                self.rates.add(end, user, under, bad)
        if self.levels is not None and len(self.levels) < self.min_jobs:
            for end, level in levels:
                self.levels.add(end, level)

    def multiplier(self, user: int | None = None) -> float | None:
        """The multiplier for `user`'s jobs, or everybody's (None: uncalibrated, the `alpha` quantile is used)."""
        if self.rates is None:
            return None
        return self.rates.multiplier(user) if user is not None else self.rates.everybody.multiplier()

    def level_indices(self) -> dict[float, int] | None:
        """Per probability, the index on `LEVELS` its quantile is read at now (None: the nominal level)."""
        return self.levels.indices() if self.levels is not None else None

    def quantile_levels(self, indices: dict[float, int] | None) -> tuple[float, ...]:
        """The levels the quantiles of `INTERVAL_PROBABILITIES` are read at, given `level_indices()`."""
        if indices is None:
            return INTERVAL_PROBABILITIES
        return tuple(float(LEVELS[indices[probability]]) for probability in INTERVAL_PROBABILITIES)

    def miss_share(self, model_under: float) -> float:
        """P(runtime > t_sched), recalibrated where the levels are, from the model's."""
        return self.levels.miss_share(model_under) if self.levels is not None else model_under

    def choose(
        self, users: list[int], accuracy: np.ndarray, under: np.ndarray, penalty: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[float, int] | None]:
        """Per job (row): the chosen candidate, whether the multiplier chose it (else the `alpha` quantile),
        and the level indices the quantiles were read at (None: nominal levels)."""
        indices = self.level_indices()
        alpha = self.alpha if indices is None else float(LEVELS[indices[self.alpha]])
        by_user = {user: self.multiplier(user) for user in set(users)}
        multipliers = np.array([np.nan if by_user[user] is None else by_user[user] for user in users])
        calibrated = ~np.isnan(multipliers)
        chosen = choose(accuracy, penalty, np.where(calibrated, multipliers, 0.0)[:, None])
        if not calibrated.all():
            chosen = np.where(calibrated, chosen, choose_quantile(under, alpha))
        return chosen, calibrated, indices

    def learn(
        self,
        end: int,
        user: int,
        scores: JobScores,
        runtime: int,
        estimate: int | None,
        levels: dict[float, int] | None,
    ) -> None:
        """Learn from a finished job: its scores, and whether what was served for it missed (`estimate`: the
        multiplier's choice, None if the `alpha` quantile was served; `levels`: the indices read at)."""
        if self.rates is not None:
            if scores.under is not None and scores.bad is not None:
                self.rates.add(end, user, scores.under, scores.bad)
            if estimate is not None:
                self.rates.record(user, estimate < runtime, estimate < runtime - BAD_UNDERESTIMATE_SECONDS)
        if self.levels is not None and scores.level is not None:
            self.levels.add(end, scores.level)
            for probability, index in (levels or {}).items():
                self.levels.record(probability, scores.level > index)
