"""The history-based estimators against hand-computed values and brute-force numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.durations import SECONDS_PER_DAY, parse_duration
from kernel.errors import SpecError
from kernel.jobs import FinishedJob, JobRequest, Prediction, clamp_estimate
from predictor.estimators.last2 import LastTwoEstimator
from predictor.estimators.meanstd import MeanStdEstimator
from predictor.estimators.percentile import PercentileEstimator
from predictor.history import HistoryDiscardedError, interpolated_percentile
from predictor.registry import make_estimator

DAY = SECONDS_PER_DAY


def request(
    submit: int = 0,
    t_req: int = 1000,
    user: int = 1,
    group: int = 1,
    job_id: int = 0,
    procs: int = 1,
    executable: int = -1,
) -> JobRequest:
    return JobRequest(
        job_id=job_id, submit=submit, user=user, group=group, t_req=t_req, procs=procs, executable=executable
    )


def finished(end: int, runtime: int, t_req: int = 1000, **fields: int) -> FinishedJob:
    return FinishedJob(request(t_req=t_req, **fields), end, runtime)


# --- percentile -------------------------------------------------------------------------------


def test_percentile_needs_min_jobs_then_adjusts_by_the_interpolated_percentile() -> None:
    estimator = PercentileEstimator(key="user", window="all", q=50)
    for i in range(9):
        estimator.observe(finished(end=i, runtime=100 * (i + 1)))
    assert estimator.predict(request(submit=100)) == Prediction(1000, None, 9, True)
    estimator.observe(finished(end=9, runtime=1000))
    # R = 0.1 .. 1.0; median of ten = halfway between 0.5 and 0.6
    prediction = estimator.predict(request(submit=100))
    assert prediction.factor == pytest.approx(0.55)
    assert (prediction.t_sched, prediction.basis, prediction.fallback) == (550, 10, False)


def test_percentile_default_is_the_85th_percentile_of_the_triple_key_over_30_days() -> None:
    estimator = PercentileEstimator()
    for i in range(20):  # R = 0.05 .. 1.0
        estimator.observe(finished(end=DAY + i, runtime=50 * (i + 1)))
    prediction = estimator.predict(request(submit=2 * DAY))
    # virtual index 19 * 0.85 = 16.15 between R 0.85 and 0.90
    assert prediction.factor == pytest.approx(0.85 + 0.15 * 0.05)
    assert prediction.t_sched == round(1000 * (0.85 + 0.15 * 0.05))


def test_percentile_floor_bounds_the_factor_and_zero_disables_it() -> None:
    floored = PercentileEstimator(key="user", window="all", min_jobs=1)
    unfloored = PercentileEstimator(key="user", window="all", min_jobs=1, floor=0)
    for estimator in (floored, unfloored):
        estimator.observe(finished(end=0, runtime=100))
    assert floored.predict(request(submit=1)) == Prediction(500, 0.5, 1, False)
    assert unfloored.predict(request(submit=1)) == Prediction(100, 0.1, 1, False)


def test_percentile_window_includes_both_ends_and_nothing_that_ends_after_submission() -> None:
    estimator = PercentileEstimator(key="user", window="30d", q=100, min_jobs=1, floor=0)
    submit = 40 * DAY
    estimator.observe(finished(end=submit - 30 * DAY - 1, runtime=900))  # just too old
    estimator.observe(finished(end=submit - 30 * DAY, runtime=200))  # oldest eligible
    estimator.observe(finished(end=submit, runtime=300))  # ended at submission
    estimator.observe(finished(end=submit + 1, runtime=1000))  # not finished yet
    assert estimator.predict(request(submit=submit)) == Prediction(300, 0.3, 2, False)


def test_percentile_keys_separate_history() -> None:
    triple = PercentileEstimator(key="user+group+request", window="all", q=100, min_jobs=1, floor=0)
    group = PercentileEstimator(key="group", window="all", q=100, min_jobs=1, floor=0)
    history = [
        finished(end=1, runtime=100, user=1, group=1, t_req=1000),
        finished(end=2, runtime=400, user=1, group=1, t_req=2000),  # other request
        finished(end=3, runtime=900, user=2, group=1, t_req=1000),  # other user
    ]
    for estimator in (triple, group):
        estimator.fit(history)
    assert triple.predict(request(submit=10, user=1, group=1, t_req=1000)).factor == pytest.approx(0.1)
    assert group.predict(request(submit=10, user=1, group=1, t_req=1000)).factor == pytest.approx(0.9)
    assert group.predict(request(submit=10, group=2)).fallback


def test_percentile_ratio_is_capped_at_one_and_estimate_floored_at_one_second() -> None:
    estimator = PercentileEstimator(key="user", window="all", min_jobs=1, floor=0)
    estimator.observe(finished(end=0, runtime=0, t_req=10))
    assert estimator.predict(request(submit=1, t_req=10)) == Prediction(1, 0.0, 1, False)
    capped = PercentileEstimator(key="user", window="all", min_jobs=1)
    capped.observe(FinishedJob(request(t_req=10), 0, 50))  # a runtime above the request
    assert capped.predict(request(submit=1, t_req=10)).factor == 1.0


def test_interpolated_percentile_matches_numpy_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    for size in (1, 2, 3, 10, 37):
        values = sorted(rng.random(size).tolist())
        for q in (50, 60, 70, 80, 85, 90, 95, 100, 87.3):
            assert interpolated_percentile(values, q) == np.percentile(values, q)


# --- last2 ------------------------------------------------------------------------------------


def test_last2_averages_the_users_two_latest_finished_jobs() -> None:
    estimator = LastTwoEstimator()
    estimator.observe(finished(end=10, runtime=100))
    assert estimator.predict(request(submit=20)) == Prediction(1000, None, 1, True)
    estimator.observe(finished(end=15, runtime=201, user=2))  # another user
    estimator.observe(finished(end=20, runtime=200))
    estimator.observe(finished(end=30, runtime=400))  # ends after the submission below
    assert estimator.predict(request(submit=20)) == Prediction(150, None, 2, False)
    assert estimator.predict(request(submit=30)) == Prediction(300, None, 2, False)
    assert estimator.predict(request(submit=30, t_req=250)).t_sched == 250


# --- mean-std ---------------------------------------------------------------------------------


def test_mean_std_is_mean_plus_k_population_sigma() -> None:
    estimator = MeanStdEstimator()
    estimator.observe(finished(end=0, runtime=100))
    assert estimator.predict(request(submit=DAY)) == Prediction(1000, None, 1, True)
    estimator.observe(finished(end=1, runtime=200))
    estimator.observe(finished(end=2, runtime=300))
    # mean 200, population sigma sqrt(20000 / 3) = 81.65
    expected = round(200 + 1.5 * math.sqrt(20000 / 3))
    assert estimator.predict(request(submit=DAY)) == Prediction(expected, None, 3, False)
    assert estimator.predict(request(submit=DAY, t_req=250)).t_sched == 250
    # seven days later the first job has left the window: mean 250, sigma 50
    assert estimator.predict(request(submit=7 * DAY + 1)) == Prediction(325, None, 2, False)


def test_mean_std_key_and_k() -> None:
    estimator = MeanStdEstimator(key="user+executable", window="all", k=0)
    estimator.fit(
        [
            finished(end=0, runtime=100, executable=1),
            finished(end=1, runtime=300, executable=1),
            finished(end=2, runtime=900, executable=2),
        ]
    )
    assert estimator.predict(request(submit=5, executable=1)).t_sched == 200
    assert estimator.predict(request(submit=5, executable=2)).fallback


# --- brute force against numpy, with out-of-order queries and observations ----------------------

QUARTER_DAY = DAY // 4
moments = st.integers(0, 200).map(lambda t: t * QUARTER_DAY)  # 50 days, with exact window-edge hits
observation = st.tuples(
    st.just("observe"), st.integers(0, 1), moments, st.sampled_from([10, 100, 1000]), st.floats(0, 1)
)
query = st.tuples(st.just("predict"), st.integers(0, 1), moments, st.sampled_from([10, 100, 1000]))


@st.composite
def events(draw):
    """Observations (in end order or shuffled) with queries interleaved at random points."""
    observations = draw(st.lists(observation, min_size=30, max_size=120))
    if draw(st.booleans()):
        observations.sort(key=lambda event: event[2])
    queries = draw(st.lists(query, min_size=1, max_size=30))
    positions = draw(st.lists(st.integers(0, len(observations)), min_size=len(queries), max_size=len(queries)))
    script = list(observations)
    for position, event in sorted(zip(positions, queries, strict=True), key=lambda pair: pair[0], reverse=True):
        script.insert(position, event)
    return script


def drive(estimator, script):
    """Run a script of observe/predict events; yield (query, history so far, outcome) per query."""
    history: list[tuple[int, int, int, int]] = []  # (user, end, runtime, t_req) in observation order
    for event in script:
        if event[0] == "observe":
            _, user, end, t_req, fraction = event
            runtime = int(fraction * t_req)
            history.append((user, end, runtime, t_req))
            estimator.observe(finished(end=end, runtime=runtime, t_req=t_req, user=user))
        else:
            _, user, submit, t_req = event
            try:
                outcome = estimator.predict(request(submit=submit, t_req=t_req, user=user))
            except HistoryDiscardedError as error:
                outcome = error
            yield (user, submit, t_req), list(history), outcome


def assert_rejection_justified(asked, user, submit, window, history) -> None:
    """A query may be refused only after a later submission of the same key was answered
    and some history this query needs ended before that later query's window."""
    later = [s for u, s in asked if u == user and s > submit]
    assert window is not None and later, "refused a query no answered query could have discarded history for"
    needed = [end for u, end, _, _ in history if u == user and submit - window <= end < max(later) - window]
    assert needed, "refused a query whose history was all still there"


@settings(max_examples=150, deadline=None)
@given(
    script=events(),
    window=st.sampled_from(["30d", "all"]),
    q=st.floats(50, 100),
    floor=st.sampled_from([0.0, 0.5]),
    min_jobs=st.integers(1, 4),
)
@pytest.mark.slow
def test_percentile_equals_numpy_on_the_eligible_history(script, window, q, floor, min_jobs) -> None:
    estimator = PercentileEstimator(key="user", window=window, q=q, floor=floor, min_jobs=min_jobs)
    seconds = parse_duration(window, "window", unbounded="all")
    asked: list[tuple[int, int]] = []
    for (user, submit, t_req), history, outcome in drive(estimator, script):
        if isinstance(outcome, HistoryDiscardedError):
            assert_rejection_justified(asked, user, submit, seconds, history)
        else:
            ratios = [
                min(1.0, runtime / req)
                for u, end, runtime, req in history
                if u == user and end <= submit and (seconds is None or end >= submit - seconds)
            ]
            if len(ratios) < min_jobs:
                assert outcome == Prediction(t_req, None, len(ratios), True)
            else:
                factor = max(float(np.percentile(ratios, q)), floor)
                assert outcome == Prediction(clamp_estimate(t_req * factor, t_req), factor, len(ratios), False)
        asked.append((user, submit))


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(script=events(), window=st.sampled_from(["7d", "all"]), k=st.sampled_from([0.0, 1.5]))
def test_mean_std_equals_numpy_on_the_eligible_history(script, window, k) -> None:
    estimator = MeanStdEstimator(key="user", window=window, k=k)
    seconds = parse_duration(window, "window", unbounded="all")
    asked: list[tuple[int, int]] = []
    for (user, submit, t_req), history, outcome in drive(estimator, script):
        if isinstance(outcome, HistoryDiscardedError):
            assert_rejection_justified(asked, user, submit, seconds, history)
        else:
            runtimes = [
                runtime
                for u, end, runtime, _ in history
                if u == user and end <= submit and (seconds is None or end >= submit - seconds)
            ]
            assert outcome.basis == len(runtimes)
            if len(runtimes) < 2:
                assert outcome == Prediction(t_req, None, len(runtimes), True)
            else:
                expected = float(np.mean(runtimes) + k * np.std(runtimes))
                assert not outcome.fallback
                assert abs(outcome.t_sched - clamp_estimate(expected, t_req)) <= 1
        asked.append((user, submit))


@settings(max_examples=100, deadline=None)
@given(script=events())
def test_last2_equals_brute_force_on_the_finished_history(script) -> None:
    asked: list[tuple[int, int]] = []
    for (user, submit, t_req), history, outcome in drive(LastTwoEstimator(), script):
        if isinstance(outcome, HistoryDiscardedError):
            assert [s for u, s in asked if u == user and s > submit]
        else:
            done = sorted(
                ((end, runtime) for u, end, runtime, _ in history if u == user and end <= submit),
                key=lambda pair: pair[0],
            )
            if len(done) < 2:
                assert outcome == Prediction(t_req, None, len(done), True)
            else:
                mean = (done[-1][1] + done[-2][1]) / 2
                assert outcome == Prediction(clamp_estimate(mean, t_req), None, 2, False)
        asked.append((user, submit))


def test_long_monotone_replay_matches_brute_force_through_compaction() -> None:
    rng = np.random.default_rng(3)
    estimator = PercentileEstimator(key="user", window="30d", q=85, min_jobs=3)
    ends = np.sort(rng.integers(0, 400 * DAY, 2000))
    runtimes = rng.integers(0, 1001, 2000)
    for i, (end, runtime) in enumerate(zip(ends.tolist(), runtimes.tolist(), strict=True)):
        estimator.observe(finished(end=end, runtime=runtime))
        if i % 50 == 49:
            eligible = runtimes[(ends <= end) & (ends >= end - 30 * DAY)] / 1000
            factor = max(float(np.percentile(eligible, 85)), 0.5)
            assert estimator.predict(request(submit=end)) == Prediction(
                clamp_estimate(1000 * factor, 1000), factor, len(eligible), False
            )


def test_query_needing_discarded_history_is_refused_and_others_stay_exact() -> None:
    estimator = PercentileEstimator(key="user", window="30d", q=100, min_jobs=1, floor=0)
    estimator.observe(finished(end=0, runtime=500))
    estimator.observe(finished(end=40 * DAY, runtime=100))
    assert estimator.predict(request(submit=50 * DAY)) == Prediction(100, 0.1, 1, False)
    with pytest.raises(HistoryDiscardedError, match="submitted at 2160000"):
        estimator.predict(request(submit=25 * DAY))
    assert estimator.predict(request(submit=45 * DAY)) == Prediction(100, 0.1, 1, False)
    assert estimator.predict(request(submit=39 * DAY)) == Prediction(1000, None, 0, True)


# --- SPECs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("percentil", "unknown estimator 'percentil'"),
        ("percentile:quantile=85", "has no parameter 'quantile'"),
        ("percentile:q=high", "parameter 'q' must be float"),
        ("percentile:q=45", r"q must be in \[50, 100\]; got 45.0"),
        ("percentile:q=nan", r"q must be in \[50, 100\]; got nan"),
        ("percentile:floor=1.5", r"floor must be in \[0, 1\]"),
        ("percentile:min_jobs=0", r"min_jobs must be in \[1, 1000000\]; got 0"),
        ("percentile:window=7d", "window must be one of 30d, 60d, 90d, 180d, 365d, all"),
        ("percentile:key=project", "key must be one of user, group, user+group, user+group+request"),
        ("mean-std:window=week", "window must be a whole number of days"),
        ("mean-std:key=user+request", "key must be one of user, group, user+group, user+executable"),
        ("mean-std:k=-1", r"k must be in \[0, 100\]; got -1.0"),
        ("mean-std:k=inf", r"k must be in \[0, 100\]; got inf"),
        ("last2:key=user", "has no parameter 'key'"),
    ],
)
def test_bad_specs_are_rejected_with_the_reason(spec: str, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("+", r"\+")):
        make_estimator(spec)


@pytest.mark.parametrize(
    ("spec", "params"),
    [
        ("percentile", {"key": "user+group+request", "window": "30d", "q": 85.0, "floor": 0.5, "min_jobs": 10}),
        (
            "percentile:key=user+group,window=all,q=90,floor=0,min_jobs=5",
            {"key": "user+group", "window": "all", "q": 90.0, "floor": 0.0, "min_jobs": 5},
        ),
        ("mean-std", {"key": "user", "window": "7d", "k": 1.5}),
        (
            "mean-std:key=user+executable+procs,window=30d,k=2",
            {"key": "user+executable+procs", "window": "30d", "k": 2.0},
        ),
        ("last2", {}),
    ],
)
def test_specs_build_estimators_that_describe_themselves(spec: str, params: dict) -> None:
    estimator = make_estimator(spec)
    assert estimator.get_params() == params
    assert make_estimator(estimator.spec).get_params() == params


def test_one_duration_grammar_for_windows_and_periods() -> None:
    assert parse_duration("30d", "window", unbounded="all") == 30 * DAY
    assert parse_duration("12h", "retrain") == 12 * 3600
    assert parse_duration("30m", "swap") == 1800
    assert parse_duration("0s", "swap", zero=True) == 0
    assert parse_duration("all", "window", unbounded="all") is None
    assert parse_duration("never", "retrain", unbounded="never") is None
    with pytest.raises(ValueError, match=r"window must be a whole number of days, hours.*or all; got '0d'"):
        parse_duration("0d", "window", unbounded="all")
    with pytest.raises(ValueError, match="retrain must be a whole number"):
        parse_duration("all", "retrain", unbounded="never")
    with pytest.raises(ValueError, match="window must be one of 30d, 60d"):
        parse_duration("7d", "window", unbounded="all", allowed=("30d", "60d", "all"))


def test_fit_takes_a_traces_job_table_as_users_pass_it() -> None:
    """Issue #27: `fit(read_trace(...).jobs)` raised "'str' object has no attribute 'end'"."""
    from pathlib import Path

    from predictor.frames import finished_from_frame, jobs_to_requests
    from simulator.workloads.formats import read_trace

    jobs = read_trace(Path(__file__).parent / "data" / "slurm-22.05.sacct", timezone="UTC").jobs
    asked = [job._replace(submit=int(jobs["end"].max()) + 1) for job in jobs_to_requests(jobs)]
    from_table = make_estimator("percentile:key=user,min_jobs=3").fit(jobs)
    from_jobs = make_estimator("percentile:key=user,min_jobs=3").fit(finished_from_frame(jobs))
    answers = from_table.predict_many(asked)
    assert answers == from_jobs.predict_many(asked) and not all(answer.fallback for answer in answers)
    later = jobs.assign(submit=jobs["end"].max() + 1)  # predict_many takes a job table's rows as well
    assert from_table.predict_many(later) == answers
    with pytest.raises(TypeError, match=r"fit takes finished jobs .* got a JobRequest among them"):
        from_table.fit(asked)
