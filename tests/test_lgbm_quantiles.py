"""lgbm's quantile levels calibrated on finished jobs (`predictor.estimators.lgbm.quantiles`, `.conformal`)."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.estimators.lgbm.calibration import choose_quantile
from predictor.estimators.lgbm.conformal import AdaptiveLevel, TrailingScores
from predictor.estimators.lgbm.quantiles import LEVELS, LevelCalibrator, level_scores
from predictor.registry import make_estimator


def test_a_level_score_is_the_lowest_level_whose_quantile_covers_the_runtime() -> None:
    rng = np.random.default_rng(3)
    jobs, candidates = 300, 40
    # P(runtime > estimate) falls with the estimate, from near 1 to 0 at the request.
    under = np.sort(rng.random((jobs, candidates)), axis=1)[:, ::-1]
    under[:, -1] = 0.0
    estimates = np.cumsum(rng.integers(1, 50, (jobs, candidates)), axis=1)
    runtimes = rng.integers(1, int(estimates.max()) + 100, jobs)  # some beyond every candidate
    scores = level_scores(under, estimates, runtimes)
    rows = np.arange(jobs)
    for index in (0, 1, 100, 500, 900, 999, 1000):
        covered = estimates[rows, choose_quantile(under, LEVELS[index])] >= runtimes
        assert np.array_equal(covered, scores <= index), index
    assert (scores[runtimes > estimates[:, -1]] == len(LEVELS)).all()


def test_thresholds_are_the_finite_sample_conformal_quantiles() -> None:
    window = TrailingScores(1, 10, window=100)
    for end, score in enumerate((0, 2, 2, 5, 7, 9, 10, 3, 3, 1)):
        window.add(end, (score,))
    for level in (0.05, 0.1, 0.2, 0.35, 0.5, 0.9):
        brute = next((i for i in range(10) if ((window.counts[0, i + 1 :].sum()) + 1) / (len(window) + 1) <= level), 9)
        assert window.threshold(0, level) == brute
    assert window.thresholds(0, [0.5, 0.05]) == [window.threshold(0, 0.5), window.threshold(0, 0.05)]
    assert window.share_above(0, 4) == pytest.approx(0.4)  # 5, 7, 9 and 10


def test_level_calibrator_reads_each_probability_where_recent_jobs_were_covered() -> None:
    calibrator = LevelCalibrator((0.5, 0.9), window=1000, min_jobs=10, adapt=0.0)
    for end in range(9):
        calibrator.add(end, 100 * (end + 1))  # scores 100, 200, ..., 900
    assert calibrator.indices() is None and calibrator.miss_share(0.3) == 0.3  # too few: the model's own
    calibrator.add(9, 1000)
    # (above + 1) / 11 <= 0.5 from 4 scores above on (700 ... 1000): index 600; <= 0.1 with none: 1000.
    assert calibrator.indices() == {0.5: 600, 0.9: 1000}
    assert calibrator.miss_share(1 - LEVELS[450]) == pytest.approx(0.6)  # 500 ... 1000 lie above 450
    restored = LevelCalibrator((0.5, 0.9), window=1000, min_jobs=10, adapt=0.0)
    restored.restore(calibrator.state())
    assert restored.indices() == calibrator.indices()
    calibrator.add(1500, 0)  # the others ended before the window
    assert len(calibrator) == 1 and calibrator.indices() is None


def test_adaptive_level_tracks_misses_within_its_range() -> None:
    level = AdaptiveLevel(0.1, adapt=0.01)
    level.record(False)
    assert level.level == pytest.approx(0.1 + 0.01 * 0.1)
    for _ in range(200):
        level.record(True)
    assert level.level == pytest.approx(0.05)
    with pytest.raises(ValueError, match="target"):
        AdaptiveLevel(1.0, adapt=0.01)


def test_recalibrate_off_reads_the_nominal_levels() -> None:
    assert make_estimator("lgbm-quantile:recalibrate=false").quantile_levels() == (0.5, 0.9, 0.95)
    assert make_estimator("lgbm-quantile").quantile_levels() == (0.5, 0.9, 0.95)  # nothing learned yet
    assert make_estimator("lgbm-sched").get_params()["recalibrate"] is False
