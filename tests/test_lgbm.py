"""The lgbm-quantile estimator, its features and its calibration, on small generated traces."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from kernel.errors import SpecError
from kernel.jobs import FinishedJob, JobRequest
from predictor.estimators.lgbm.calibration import (
    LEVEL_RANGE,
    MULTIPLIERS,
    TrailingCalibrator,
    UserCalibrator,
    choose_quantile,
    conformity_scores,
)
from predictor.estimators.lgbm.estimator import LGBMQuantileEstimator
from predictor.estimators.lgbm.features import FeatureHistory, feature_names
from predictor.estimators.lgbm.model import CANDIDATES, CLASSES, RATIO_EDGES, class_of
from predictor.frames import finished_from_frame, jobs_to_requests
from predictor.offline import causal_replay, replay
from predictor.registry import make_estimator
from simulator.workloads.synthetic import generate_workload

DAY = 86_400
#: Small enough to train in a blink on a few thousand jobs.
SMALL = {"window": "10d", "retrain": "2d", "calibration": "5d", "min_train": 200, "trees": 5}


@pytest.fixture(scope="module")
def jobs() -> pd.DataFrame:
    """3000 generated jobs over about 17 days."""
    return generate_workload(jobs=3000, procs=128, load=0.7, seed=7).jobs


def small_estimator(**overrides: object) -> LGBMQuantileEstimator:
    params = {**SMALL, **overrides}
    estimator = make_estimator("lgbm-quantile:" + ",".join(f"{key}={value}" for key, value in params.items()))
    assert isinstance(estimator, LGBMQuantileEstimator)
    return estimator


@pytest.mark.parametrize(
    "spec",
    [
        "lgbm-quantile:alpha=1.5",
        "lgbm-quantile:target_under=1",
        "lgbm-quantile:window=90",
        "lgbm-quantile:window=never",
        "lgbm-quantile:retrain=weekly",
        "lgbm-quantile:min_train=600,max_train=500",
        "lgbm-quantile:trees=0",
        "lgbm-quantile:depth=3",
        "lgbm-quantile:prior_jobs=inf",
        "lgbm-quantile:prior_jobs=0",
        "lgbm-quantile:adapt=1",
    ],
)
def test_bad_parameters_are_rejected(spec: str) -> None:
    with pytest.raises(SpecError):
        make_estimator(spec)


def test_spec_round_trips() -> None:
    estimator = make_estimator("lgbm-quantile:target_under=0.05,retrain=never")
    assert make_estimator(estimator.spec).get_params() == estimator.get_params()


def test_answers_the_request_until_trained() -> None:
    job = JobRequest(job_id=1, submit=100, user=1, group=1, t_req=3600, procs=4)
    prediction = make_estimator("lgbm-quantile").predict(job)
    assert (prediction.t_sched, prediction.fallback) == (3600, True)


@pytest.mark.slow
def test_trains_on_schedule_and_estimates_within_the_request(jobs: pd.DataFrame) -> None:
    estimator = small_estimator()
    frame = replay(estimator, jobs)
    assert frame["t_sched"].between(1, frame["t_req"]).all()
    modelled = frame.loc[~frame["fallback"]]
    assert len(modelled) > 0.8 * len(frame)
    assert np.isin(modelled["factor"], CANDIDATES).all()
    last_submit = int(jobs["submit"].max())
    assert last_submit - 2 * DAY <= estimator.model.trained_at <= last_submit
    # basis: the job's user+request jobs that ended in the 30 days before its submission (the key posterior's evidence)
    ordered = jobs.sort_values(["submit", "job_id"], kind="stable").reset_index(drop=True)
    for position in modelled.index[-50:]:
        job = ordered.iloc[position]
        similar = (
            (ordered["user"] == job["user"])
            & (ordered["t_req"] == job["t_req"])
            & (ordered["end"] <= job["submit"])
            & (ordered["end"] >= job["submit"] - 30 * DAY)
        )
        assert frame["basis"].iloc[position] == similar.sum()
    assert modelled["basis"].max() > 10


@pytest.mark.slow
def test_a_key_with_a_long_regular_history_outweighs_the_model(jobs: pd.DataFrame) -> None:
    estimator = small_estimator(prior_jobs=30)
    replay(estimator, jobs)
    model = estimator.model
    features = np.random.default_rng(2).uniform(0, 5, size=(1, len(feature_names())))
    t_req = np.array([36_000])
    short = CANDIDATES.searchsorted(0.02)  # an estimate of 2% of the request

    def under_at_short(counts: list[int]) -> float:
        row = np.concatenate([features, np.array([counts], dtype=np.float64)], axis=1)
        return float(model.distribution(row, t_req, estimator.prior_jobs)[1][0, short])

    alone = under_at_short([0] * CLASSES)
    regular = under_at_short([3000] + [0] * (CLASSES - 1))  # 3000 recent jobs, all below R 0.01
    erratic = under_at_short([0] * (CLASSES - 1) + [3000])  # 3000 recent jobs, all to their request
    assert regular < alone / 5 and regular < 0.02
    assert erratic > 0.9


def test_no_retraining_when_retrain_is_never(jobs: pd.DataFrame) -> None:
    estimator = small_estimator(retrain="never")
    assert replay(estimator, jobs)["fallback"].all()


@pytest.mark.slow
def test_causality_future_runtimes_do_not_change_earlier_predictions(jobs: pd.DataFrame) -> None:
    cutoff = int(jobs["submit"].quantile(0.6))
    changed = jobs.copy()
    later = changed["end"] > cutoff
    longer = np.minimum(changed["t_req"], changed["t_act"] * 2 + 10)
    changed.loc[later, "t_act"] = longer[later]
    changed.loc[later, "end"] = (changed["submit"] + changed["wait"].clip(lower=0) + changed["t_act"])[later]
    assert (changed.loc[later, "end"] > cutoff).all()
    first = replay(small_estimator(), jobs)
    second = replay(small_estimator(), changed)
    before = (jobs.sort_values(["submit", "job_id"], kind="stable")["submit"] <= cutoff).to_numpy()
    assert (~first["fallback"].to_numpy()[before]).any()
    pd.testing.assert_frame_equal(first.loc[before, ["t_sched", "factor"]], second.loc[before, ["t_sched", "factor"]])
    assert not first["t_sched"].equals(second["t_sched"])  # the change is visible after the cutoff


def test_predict_many_equals_predict_one_by_one(jobs: pd.DataFrame) -> None:
    ordered = jobs.sort_values(["submit", "job_id"], kind="stable")
    split = int(ordered["submit"].quantile(0.5))
    history = [job for job in finished_from_frame(ordered) if job.end <= split]
    batch = [request for request in jobs_to_requests(ordered) if split < request.submit <= split + 3 * DAY]
    one, many = small_estimator(), small_estimator()
    for job in history:
        one.observe(job)
        many.observe(job)
    singles = [one.predict(request) for request in batch]
    assert many.predict_many(batch) == singles
    assert one.model.trained_at > batch[0].submit  # the batch crossed a retraining point


@pytest.mark.slow
def test_background_training_gives_the_answers_of_inline_training(jobs: pd.DataFrame) -> None:
    inline = replay(small_estimator(), jobs)
    background = small_estimator()
    with ThreadPoolExecutor(max_workers=1) as executor:
        background.train_on(executor)
        threaded = replay(background, jobs)
    assert (~inline["fallback"]).mean() > 0.8
    pd.testing.assert_frame_equal(inline, threaded)


def test_a_retrained_model_goes_live_swap_after_its_snapshot(jobs: pd.DataFrame) -> None:
    ordered = jobs.sort_values(["submit", "job_id"], kind="stable")
    split = int(ordered["submit"].quantile(0.5))
    estimator = small_estimator(swap="6h")
    for job in finished_from_frame(ordered):
        if job.end <= split:
            estimator.observe(job)

    def probe(at: int) -> JobRequest:
        return JobRequest(job_id=10**9 + at, submit=at, user=1, group=1, t_req=3600, procs=4)

    assert estimator.predict(probe(split)).fallback  # the first training starts here...
    assert estimator.model is None
    assert estimator.predict(probe(split + 6 * 3600 - 1)).fallback
    assert not estimator.predict(probe(split + 6 * 3600)).fallback  # ...and goes live 6 h of trace time later
    assert estimator.model.trained_at == split


@pytest.mark.slow
def test_training_leaves_the_live_model_until_installed(jobs: pd.DataFrame) -> None:
    estimator = small_estimator()
    replay(estimator, jobs)
    live = estimator.model
    now = int(jobs["end"].max())
    fresh = estimator.train(estimator.training_data(now))
    assert estimator.model is live
    estimator.install(fresh)
    assert estimator.model is fresh


def test_feature_row_is_the_same_at_submission_and_later(jobs: pd.DataFrame) -> None:
    ordered = jobs.sort_values(["submit", "job_id"], kind="stable")
    requests = jobs_to_requests(ordered)
    finished = finished_from_frame(ordered)
    history = FeatureHistory()
    at_submission = causal_replay(requests, finished, history.observe, history.row)
    for job in finished:
        if job.end > requests[-1].submit:
            history.observe(job)
    for index in range(0, len(requests), 97):
        later = history.row(requests[index])
        assert len(later) == len(feature_names())
        assert all(
            a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(at_submission[index], later, strict=True)
        )


def test_ratio_counts_are_the_key_jobs_that_ended_in_the_window(jobs: pd.DataFrame) -> None:
    ordered = jobs.sort_values(["submit", "job_id"], kind="stable")
    requests = jobs_to_requests(ordered)
    finished = finished_from_frame(ordered)
    history = FeatureHistory(ratio_edges=RATIO_EDGES)
    counted = causal_replay(requests, finished, history.observe, history.ratio_counts)
    for index in range(0, len(requests), 53):
        job = requests[index]
        mine = [
            other
            for other in finished
            if (other.request.user, other.request.t_req) == (job.user, job.t_req)
            and job.submit - history.window <= other.end <= job.submit
        ]
        expected = np.bincount(class_of(np.array([other.ratio for other in mine])), minlength=len(RATIO_EDGES) + 1)
        assert counted[index] == expected.tolist()


def test_ratio_counts_stay_exact_for_jobs_reported_out_of_end_order() -> None:
    history = FeatureHistory(ratio_edges=(0.5,))
    request = JobRequest(job_id=1, submit=0, user=1, group=1, t_req=100, procs=1)
    for job_id, end, runtime in ((1, 50, 90), (2, 70, 10), (3, 60, 80), (4, 10, 20)):
        history.observe(FinishedJob(request._replace(job_id=job_id), end=end, runtime=runtime))
    probe = request._replace(job_id=9, submit=65)
    assert history.ratio_counts(probe) == [1, 2]  # ended by 65: R 0.2 (end 10), 0.9 (50), 0.8 (60)


def test_jobs_in_flight_count_until_they_finish(jobs: pd.DataFrame) -> None:
    finished = finished_from_frame(jobs.sort_values(["submit", "job_id"], kind="stable"))
    first, second = finished[0].request, finished[1].request
    history = FeatureHistory()
    names = feature_names()
    probe = JobRequest(
        job_id=-1,
        submit=max(first.submit, second.submit) + 3600,
        user=first.user,
        group=first.group,
        t_req=first.t_req,
        procs=first.procs,
    )
    history.register(first)
    row = dict(zip(names, history.row(probe), strict=True))
    assert row["user_inflight"] == 1 and row["user_req_inflight"] == 1
    assert row["user_req_inflight_age"] == min(1.0, (probe.submit - first.submit) / first.t_req)
    history.observe(finished[0])
    row = dict(zip(names, history.row(probe), strict=True))
    assert row["user_inflight"] == 0 and row["user_req_inflight"] == 0
    assert math.isnan(row["user_req_inflight_age"])


@pytest.mark.slow
def test_calibration_tracks_target_under() -> None:
    jobs = generate_workload(jobs=6000, procs=128, load=0.5, seed=3).jobs
    target = 0.10
    estimator = small_estimator(target_under=target)
    requests = jobs_to_requests(jobs.sort_values(["submit", "job_id"], kind="stable"))
    finished = finished_from_frame(jobs)
    calibrated: list[bool] = []

    def answer(request: JobRequest) -> int:
        prediction = estimator.predict(request)
        calibrated.append(estimator.multiplier() is not None and not prediction.fallback)
        return prediction.t_sched

    t_sched = np.array(causal_replay(requests, finished, estimator.observe, answer))
    t_act = jobs.sort_values(["submit", "job_id"], kind="stable")["t_act"].to_numpy()
    mask = np.array(calibrated)
    assert mask.sum() > 0.6 * len(mask)
    achieved = np.mean(t_sched[mask] < t_act[mask])
    assert abs(achieved - target) < 0.04, achieved


@pytest.mark.slow
def test_everybody_shares_one_multiplier_unless_per_user(jobs: pd.DataFrame) -> None:
    shared, own = small_estimator(min_train=100), small_estimator(per_user="true", min_train=100)
    replay(shared, jobs)
    replay(own, jobs)
    users = jobs["user"].value_counts().index[:5].tolist()
    assert shared.multiplier() is not None
    assert {shared.multiplier(user) for user in users} == {shared.multiplier()}
    assert len({own.multiplier(user) for user in users} | {own.multiplier()}) > 1


def test_trailing_calibrator_takes_the_conformal_quantile() -> None:
    calibrator = TrailingCalibrator(target_under=0.25, target_bad=0.25, window=100, min_jobs=4)
    for end in (1, 2, 3):
        calibrator.add(end, 0, 0)
    assert calibrator.multiplier() is None
    calibrator.add(4, 10, 0)
    # Below multiplier 10, one job of four is under: (1 + 1) / 5 > 0.25; from 10 on, 1 / 5 <= 0.25.
    assert calibrator.multiplier() == MULTIPLIERS[10]
    calibrator.add(103, 0, 0)  # the scores of jobs that ended before 3 are forgotten
    assert len(calibrator) == 3
    assert calibrator.multiplier() is None


def test_trailing_calibrator_honours_the_stricter_target() -> None:
    calibrator = TrailingCalibrator(target_under=0.5, target_bad=0.25, window=100, min_jobs=4)
    for end, under, bad in ((1, 7, 0), (2, 0, 0), (3, 0, 0), (4, 9, 9)):
        calibrator.add(end, under, bad)
    # Under: from 7 on one job of four is above, (1 + 1) / 5 <= 0.5; bad: only from 9 on is none above.
    assert calibrator.multiplier() == MULTIPLIERS[9]
    restored = TrailingCalibrator(target_under=0.5, target_bad=0.25, window=100, min_jobs=4)
    restored.restore(calibrator.state())
    assert restored.state() == [[1, 7, 0], [2, 0, 0], [3, 0, 0], [4, 9, 9]]
    assert restored.multiplier() == calibrator.multiplier()


def test_adaptation_raises_the_level_after_hits_and_lowers_it_after_misses() -> None:
    calibrator = TrailingCalibrator(target_under=0.2, target_bad=0.1, window=100, min_jobs=1, adapt=0.01)
    calibrator.add(1, 5, 0)
    for _ in range(10):
        calibrator.record(underestimated=False, bad=False)
    assert calibrator.levels() == pytest.approx((0.2 + 10 * 0.01 * 0.2, 0.1 + 10 * 0.01 * 0.1))
    for _ in range(1000):
        calibrator.record(underestimated=True, bad=True)
    assert calibrator.levels() == pytest.approx((0.2 / LEVEL_RANGE, 0.1 / LEVEL_RANGE))  # bounded
    fixed = TrailingCalibrator(target_under=0.2, target_bad=0.1, window=100, min_jobs=1)
    fixed.record(underestimated=True, bad=True)
    assert fixed.levels() == (0.2, 0.1)
    lenient = TrailingCalibrator(target_under=0.8, target_bad=0.8, window=100, min_jobs=1, adapt=0.5)
    for _ in range(10):
        lenient.record(underestimated=False, bad=False)
    assert lenient.levels() == (0.9, 0.9)  # never 1: some scores must still count


@pytest.mark.slow
def test_adaptation_delivers_the_target_rate_when_the_window_misleads() -> None:
    """Scores alternate between calm and stormy weeks: a trailing window alone misses the target."""
    rng = np.random.default_rng(5)
    target = 0.1
    delivered = {}
    for adapt in (0.0, 0.002):
        calibrator = TrailingCalibrator(target_under=target, target_bad=target, window=2000, min_jobs=100, adapt=adapt)
        misses = served = 0
        for end in range(40_000):
            stormy = (end // 3000) % 2 == 1
            score = int(rng.integers(0, 120 if stormy else 60))
            multiplier = calibrator.multiplier()
            if multiplier is not None:
                missed = score > np.searchsorted(MULTIPLIERS, multiplier)
                misses += missed
                served += 1
                calibrator.record(bool(missed), bool(missed))
            calibrator.add(end, score, score)
        delivered[adapt] = misses / served
    assert abs(delivered[0.002] - target) < 0.015, delivered
    assert abs(delivered[0.002] - target) < abs(delivered[0.0] - target) / 2, delivered


def test_users_with_enough_jobs_get_their_own_multiplier() -> None:
    calibrator = UserCalibrator(target_under=0.25, target_bad=0.25, window=1000, min_jobs=4, min_user_jobs=4)
    for end in range(4):
        calibrator.add(end, 1, 0, 0)  # user 1: never underestimated
    assert calibrator.multiplier(1) == MULTIPLIERS[0]
    calibrator.add(10, 2, 20, 20)  # user 2: one job, underestimated up to multiplier 20
    assert calibrator.multiplier(2) == calibrator.multiplier(3) == MULTIPLIERS[20]  # everybody's
    assert calibrator.multiplier(1) == MULTIPLIERS[0]
    restored = UserCalibrator(target_under=0.25, target_bad=0.25, window=1000, min_jobs=4, min_user_jobs=4)
    restored.restore(calibrator.state())
    assert [restored.multiplier(user) for user in (1, 2)] == [calibrator.multiplier(user) for user in (1, 2)]
    for end in range(2000, 2004):
        calibrator.add(end, 3, 0, 0)  # user 1's jobs left the window with everybody's
    assert calibrator.multiplier(1) == calibrator.multiplier(3) == MULTIPLIERS[0]
    assert calibrator.state() == [[end, 3, 0, 0] for end in range(2000, 2004)]


def test_conformity_score_is_the_switching_multiplier() -> None:
    accuracy = np.array([[0.9, 0.5]])
    penalty = np.array([[0.3, 0.0]])
    estimates = np.array([[50, 4000]])
    # Candidate 0 wins while 0.9 - 0.3 m > 0.5, i.e. m < 4/3; with it a job of 80 s is under, not bad.
    under, bad = conformity_scores(accuracy, penalty, estimates, np.array([80]))
    assert MULTIPLIERS[under[0] - 1] < 4 / 3 <= MULTIPLIERS[under[0]]
    assert bad[0] == 0
    under, bad = conformity_scores(accuracy, penalty, estimates, np.array([3000]))
    assert under[0] == bad[0] and MULTIPLIERS[bad[0] - 1] < 4 / 3 <= MULTIPLIERS[bad[0]]
    assert conformity_scores(accuracy, penalty, estimates, np.array([40]))[0][0] == 0


def test_quantile_choice_is_the_first_candidate_reaching_alpha() -> None:
    assert choose_quantile(np.array([[0.5, 0.2, 0.05, 0.0]]), 0.9)[0] == 2
