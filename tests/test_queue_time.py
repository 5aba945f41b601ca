"""Queue-time forecasts: Downey's lifetime model and predictors, the forward simulation, wait-eval and ForecastStart."""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import SpecError
from kernel.jobs import FinishedJob, JobRequest
from predictor.downey import RunningAges, combined, downey_wait, predictor_a, predictor_b
from predictor.forecasting import (
    MAX_DRAWS,
    QueueState,
    Scheduler,
    StartedJob,
    error_draws,
    forecast_with_bounds,
    sampled_forecasts,
)
from predictor.lifetimes import LifetimeModel, QueueLifetimes, class_key, fit_lifetimes
from predictor.proto import pb, rpc
from predictor.registry import make_estimator
from predictor.service import forecasts
from predictor.service.client import PredictorClient, PredictorError
from predictor.service.codec import job_message
from predictor.service.server import start_server
from predictor.session import LocalSession
from simulator.engine import SimulationConfig, TraceReplay, simulate
from simulator.forecast import FORWARD_SIMULATION, ForwardSimulation, forecast_starts
from simulator.forecasters import make_forecaster
from simulator.jobs import WaitingJob
from simulator.loop import Observer
from simulator.policies import WFP, wfp_score
from simulator.waiteval import ask_forecasters
from simulator.workloads.swf import write_swf
from simulator.workloads.synthetic import generate_workload
from tsched.cli import main

#: t_min = 10 s, t_max = 10,000 s: cdf(t) = (ln t - ln 10) / ln 1000.
MODEL = LifetimeModel.uniform_log(-math.log(10) / math.log(1000), 1 / math.log(1000))


# --- Downey's conditional lifetime model, by hand ----------------------------------------------


def test_the_one_stage_model_gives_downeys_formulas() -> None:
    assert MODEL.t_min == pytest.approx(10) and MODEL.t_max == pytest.approx(10_000)
    assert float(MODEL.cdf(100.0)) == pytest.approx(1 / 3)
    # Eq. 3: Pr{L < t | L > a} = (ln t - ln a) / (ln t_max - ln a), as the predictors evaluate it
    assert running([100], [1]).completion(900.0)[0] == pytest.approx(0.5)
    # Eq. 4: the conditional median is sqrt(t_max * a)
    assert float(MODEL.conditional_median(100.0)) == pytest.approx(1000)
    assert float(MODEL.conditional_median(400.0)) == pytest.approx(2000)
    # a job past t_max ends at once; below t_min the age tells nothing
    assert running([20_000], [1]).completion(1.0)[0] == 1.0
    assert float(MODEL.conditional_median(1.0)) == pytest.approx(math.sqrt(10 * 10_000))


def test_a_fit_recovers_a_uniform_log_distribution_and_two_stages_fit_a_bimodal_one() -> None:
    levels = (np.arange(2000) + 0.5) / 2000
    one = fit_lifetimes(10 * 1000**levels)
    assert one is not None and one.stages == 1
    assert one.t_min == pytest.approx(10, rel=0.02) and one.t_max == pytest.approx(10_000, rel=0.02)
    assert one.r_squared > 0.999
    # 40% of jobs uniform in ln t on [10 s, 3 h], 60% on [3 h, 15 h]: Downey's long queue (his Figure 5)
    short, long = 0.4, 0.6
    bimodal = np.where(
        levels < short, 10 * (10_800 / 10) ** (levels / short), 10_800 * (54_000 / 10_800) ** ((levels - short) / long)
    )
    single, double = fit_lifetimes(bimodal), fit_lifetimes(bimodal, stages=2)
    assert single is not None and double is not None and double.stages == 2
    assert double.r_squared > 0.999 > single.r_squared
    assert math.exp(double.log_knots[1]) == pytest.approx(10_800, rel=0.15)
    assert float(double.cdf_knots[1]) == pytest.approx(short, abs=0.05)


def test_the_multistage_conditional_distribution_is_bayes_over_the_stages() -> None:
    two = LifetimeModel(np.log([10.0, 1000.0, 100_000.0]), np.array([0.0, 0.5, 1.0]))
    # past the first stage only the second is left: its own one-stage median
    assert float(two.conditional_median(5000.0)) == pytest.approx(math.sqrt(100_000 * 5000))
    # at age 100, a quarter of the mass is gone: Pr{L < 1000 | L > 100} = (0.5 - 0.25) / 0.75
    ages = RunningAges.of(np.array([100.0]), np.array([1]), [two])
    assert ages.completion(900.0)[0] == pytest.approx(1 / 3)


def test_classes_may_be_a_jobs_qos_and_whether_it_asks_for_gpus() -> None:
    """A partition's GPU jobs and its CPU jobs run for different times: their classes keep them apart."""
    key = class_key("queue+qos+gpu")
    cpu = JobRequest(1, 0, 1, 1, 3600, 4, queue=2, qos=5)
    assert key(cpu) == (2, 5, False) and key(cpu._replace(gpus=2)) == (2, 5, True)


def test_models_are_fitted_per_queue_on_a_trailing_window_of_finished_jobs() -> None:
    lifetimes = QueueLifetimes(window=1000, refit=1, min_jobs=2)

    def finished(job_id: int, queue: int, end: int, runtime: int) -> FinishedJob:
        return FinishedJob(JobRequest(job_id, 0, 1, 1, 100_000, 1, queue), end, runtime)

    short = [finished(i, 1, 10 + i, 10 + 10 * i) for i in range(20)]
    long = [finished(100 + i, 2, 40 + i, 1000 + 100 * i) for i in range(20)]
    for job in sorted(short + long, key=lambda job: job.end):
        lifetimes.observe(job)
    lifetimes.refresh(100)
    queue_one, queue_two = (lifetimes.model(JobRequest(0, 0, 1, 1, 1, 1, queue)) for queue in (1, 2))
    assert queue_one is not None and queue_two is not None and queue_one.t_max < queue_two.t_min
    assert lifetimes.model(JobRequest(0, 0, 1, 1, 1, 1, queue=9)) is not None  # the pooled model
    lifetimes.refresh(1045)  # the window has dropped queue 1's jobs and half of queue 2's
    assert lifetimes.model(JobRequest(0, 0, 1, 1, 1, 1, 1)) == lifetimes.model(JobRequest(0, 0, 1, 1, 1, 1, 9))
    with pytest.raises(ValueError, match="observe in end order"):
        lifetimes.observe(finished(999, 1, 5, 1))


# --- Downey's predictors, by hand --------------------------------------------------------------


def running(ages: list[float], sizes: list[int]) -> RunningAges:
    return RunningAges.of(np.array(ages), np.array(sizes), [MODEL] * len(ages))


def test_predictor_a_is_the_median_time_until_a_benefactor_ends() -> None:
    # one benefactor of age 100: its conditional median lifetime is 1000, 900 s from now
    assert predictor_a(running([100], [10]), 5) == pytest.approx(900, abs=1)
    # two: (1 - P(x))^2 = 1/2, P(x) = ln((100 + x) / 100) / ln 100
    expected = 100 * 100 ** (1 - 1 / math.sqrt(2)) - 100
    assert predictor_a(running([100, 100], [10, 10]), 5) == pytest.approx(expected, abs=1)
    assert predictor_a(running([100, 100], [4, 4]), 5) is None  # no benefactor
    assert predictor_a(running([100], [10]), 0) == 0.0


def test_predictor_b_releases_processors_continuously() -> None:
    # 20 processors at P(x) each: 20 P(x) = 10 at the median
    assert predictor_b(running([100, 100], [10, 10]), 10) == pytest.approx(900, abs=1)
    assert predictor_b(running([100], [10]), 11) is None  # not enough processors running


def test_the_combined_predictor_switches_at_32_processors() -> None:
    jobs = running([100, 400, 100], [40, 40, 8])
    assert combined(jobs, 31) == predictor_a(jobs, 31)
    assert combined(jobs, 32) == predictor_b(jobs, 32)
    assert combined(running([100, 100], [10, 10]), 12) == predictor_b(running([100, 100], [10, 10]), 12)  # A cannot


def test_downey_counts_the_jobs_ahead_and_the_free_processors() -> None:
    state = QueueState(
        1000,
        32,
        [StartedJob(JobRequest(1, 0, 1, 1, 9000, 24), 900)],
        [JobRequest(2, 950, 1, 1, 100, 4), JobRequest(3, 960, 1, 1, 100, 8)],
    )

    def lookup(job: JobRequest) -> LifetimeModel:
        return MODEL

    assert downey_wait(state, 0, lookup) == 0.0  # 8 free processors
    assert downey_wait(state, 1, lookup, "a") == pytest.approx(900, abs=1)  # n' = 4 + 8 - 8 = 4
    with pytest.raises(ValueError, match="choose one of a, b, combined"):
        downey_wait(state, 1, lookup, "c")


# --- the forward simulation --------------------------------------------------------------------


class StateAt(Observer):
    """The scheduler's state at `time`, before its pass, read from the replay as it runs (as wait-eval does)."""

    def __init__(self, replay: TraceReplay, time: int) -> None:
        self.replay, self.time = replay, time
        self.running: list[int] = []  # trace indexes
        self.waiting: list[int] = []

    def admitted(self, now: int, completed: Sequence[int], submitted: Sequence[WaitingJob]) -> None:
        if now == self.time:
            self.running = sorted(self.replay.scheduler.machine.running)
            self.waiting = [job.index for job in self.replay.scheduler.waiting(now)]


def state_at(jobs: pd.DataFrame, procs: int, scheduler: Scheduler, now: int) -> tuple[QueueState, list[int], list[int]]:
    """The engine's state at `now` (a submission, before its pass), the actual ends of the running jobs and the
    actual runtimes of the waiting ones."""
    config = SimulationConfig(procs, scheduler.policy, scheduler.backfill, backfill_order=scheduler.backfill_order)
    replay = TraceReplay(jobs, config, LocalSession(make_estimator("request")))
    observer = StateAt(replay, now)
    replay.observers.append(observer)
    replay.replay()
    requests, start, end = replay.requests, replay.start_at, replay.end_at
    assert all(start[index] < now < end[index] for index in observer.running)
    assert all(requests[index].submit <= now <= start[index] for index in observer.waiting)
    started = [StartedJob(requests[index], start[index]) for index in observer.running]
    state = QueueState(now, procs, started, [requests[index] for index in observer.waiting])
    return state, [end[index] for index in observer.running], [end[i] - start[i] for i in observer.waiting]


def engine_starts(jobs: pd.DataFrame, procs: int, scheduler: Scheduler) -> dict[int, int]:
    """Job id -> start in the engine's schedule, the scheduler planning with requests."""
    config = SimulationConfig(procs, scheduler.policy, scheduler.backfill, backfill_order=scheduler.backfill_order)
    result = simulate(jobs, config, LocalSession(make_estimator("request"))).jobs
    return dict(zip(result["job_id"].tolist(), result["start"].tolist(), strict=True))


@pytest.mark.parametrize(
    "scheduler",
    [Scheduler("fcfs", "easy"), Scheduler("wfp", "easy"), Scheduler("fcfs", "none"), Scheduler("sjf", "easy")],
    ids=lambda scheduler: f"{scheduler.policy}+{scheduler.backfill}",
)
def test_with_exact_runtimes_and_no_later_arrival_the_forecast_is_the_schedule(scheduler: Scheduler) -> None:
    trace = generate_workload(jobs=400, procs=64, load=0.95, seed=3)
    now = int(trace.jobs["submit"].max())  # every job has arrived
    state, ends, runtimes = state_at(trace.jobs, 64, scheduler, now)
    assert len(state.waiting) > 20 and state.running
    by_id = engine_starts(trace.jobs, 64, scheduler)
    assert forecast_starts(state, scheduler, ends, runtimes) == [by_id[job.job_id] for job in state.waiting]


def test_bounds_enclose_the_forecast_and_requests_give_the_upper_bound() -> None:
    trace = generate_workload(jobs=400, procs=64, load=0.95, seed=3)
    scheduler = Scheduler()
    state, _, _ = state_at(trace.jobs, 64, scheduler, int(trace.jobs["submit"].max()))
    requests = ([started.job.t_req for started in state.running], [job.t_req for job in state.waiting])
    for forecast in forecast_with_bounds(FORWARD_SIMULATION, state, scheduler, requests, lambda job: MODEL):
        assert forecast.lower <= forecast.start == forecast.upper


class RecordingRuns(ForwardSimulation):
    """The forward simulation, keeping what each run was given (the ends and runtimes a draw made)."""

    def __init__(self) -> None:
        self.runs: list[tuple[list[int], list[int], list[int]]] = []

    def starts(self, *given: Any) -> list[int]:  # type: ignore[override]
        state, scheduler, running_ends, waiting_runtimes, check = given
        starts = forecast_starts(state, scheduler, running_ends, waiting_runtimes, check)
        self.runs.append((list(running_ends), list(waiting_runtimes), starts))
        return starts


def loaded_state() -> tuple[QueueState, tuple[list[int], list[int]]]:
    """A loaded machine's state after its last submission, and the jobs' requests as their estimates."""
    trace = generate_workload(jobs=400, procs=64, load=0.95, seed=3)
    state, _, _ = state_at(trace.jobs, 64, Scheduler(), int(trace.jobs["submit"].max()))
    return state, ([started.job.t_req for started in state.running], [job.t_req for job in state.waiting])


#: Errors (actual / estimate) from 5% to twice the estimate, evenly in ln.
ERRORS = np.geomspace(0.05, 2.0, 40).tolist()


def test_a_sampled_forecast_without_errors_is_the_point_forecast() -> None:
    state, requests = loaded_state()
    point = forecast_with_bounds(FORWARD_SIMULATION, state, Scheduler(), requests, None)
    sampled = sampled_forecasts(FORWARD_SIMULATION, state, Scheduler(), requests, None, ([], 3))
    assert [(forecast.start, forecast.lower, forecast.upper) for forecast in sampled] == [
        (forecast.start, forecast.start, forecast.start) for forecast in point
    ]


def test_a_sampled_forecast_is_the_median_of_runs_with_errors_drawn_within_the_requests() -> None:
    state, requests = loaded_state()
    recorder = RecordingRuns()
    answer = sampled_forecasts(recorder, state, Scheduler(), requests, None, (ERRORS, 9), quantile=0.2)
    assert len(recorder.runs) == 9 and len(state.waiting) > 20
    for ends, runtimes, _ in recorder.runs:
        assert all(
            state.now < end <= started.start + started.job.t_req
            for started, end in zip(state.running, ends, strict=True)
        )
        assert all(1 <= runtime <= job.t_req for job, runtime in zip(state.waiting, runtimes, strict=True))
    assert len({tuple(runtimes) for _, runtimes, _ in recorder.runs}) == 9  # each run draws anew
    for position, forecast in enumerate(answer):
        starts = sorted(run[2][position] for run in recorder.runs)
        # inverted cdf: the 5th of 9 runs is the median, the 2nd (0.2 x 9 = 1.8, rounded up) the lower bound
        assert (forecast.lower, forecast.start, forecast.upper) == (starts[1], starts[4], starts[7])
    assert len({forecast.start for forecast in answer}) > 1
    again = sampled_forecasts(FORWARD_SIMULATION, state, Scheduler(), requests, None, (ERRORS, 9), 0.2)
    assert again == answer  # seeded by the state's time: one question, one answer


def test_a_running_job_draws_only_errors_that_outlive_its_age() -> None:
    """Errors x0.5 and x1.5: a job estimated at twice its age can only have run x1.5; one estimated at half its
    age has outlived both and keeps its point end."""
    state, (_, waiting) = loaded_state()
    ages = [state.now - started.start for started in state.running]
    estimates = [2 * age if position % 2 else max(1, age // 2) for position, age in enumerate(ages)]
    point_ends = [state.now + 1 + position for position in range(len(ages))]
    checked = 0
    for ends, _ in error_draws(state, (point_ends, estimates), waiting, [0.5, 1.5], 5):
        for position, (started, end, age) in enumerate(zip(state.running, ends, ages, strict=True)):
            if age < 2:  # both errors outlive an age of 0 or 1
                continue
            checked += 1
            if position % 2:
                assert end == max(started.start + min(3 * age, started.job.t_req), state.now + 1)
            else:
                assert end == point_ends[position]
    assert checked >= 10


@pytest.mark.parametrize(
    ("draws", "quantile", "words"), [(0, 0.1, "draws must be in"), (MAX_DRAWS + 1, 0.1, "draws"), (5, 0.5, "quantile")]
)
def test_a_sampled_forecast_refuses_work_and_bounds_out_of_range(draws: int, quantile: float, words: str) -> None:
    state, requests = loaded_state()
    with pytest.raises(ValueError, match=words):
        sampled_forecasts(FORWARD_SIMULATION, state, Scheduler(), requests, None, (ERRORS, draws), quantile)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(1, 500), st.integers(1, 16)), min_size=1, max_size=40),
    st.lists(st.integers(0, 39), max_size=30),
    st.integers(0, 200),
)
def test_wfp_orders_as_a_full_sort(jobs: list[tuple[int, int, int]], removals: list[int], extra: int) -> None:
    """WFP keeps arrays between passes; its order is still the stable sort of the arrival order by score."""
    queue, kept = WFP(), []
    for index, (submit, t_est, size) in enumerate(sorted(jobs)):
        job = WaitingJob(index, index, submit, size, t_est, t_est)
        queue.add(job)
        kept.append(job)
        if index % 3 == 2:
            queue.ordered(60)  # extends the arrays between arrivals
    for position in removals:
        if position < len(kept):
            queue.remove(kept.pop(position))
            queue.ordered(60)
    now = 60 + extra
    submit, t_est, size = np.array([[job.submit, job.t_est, job.size] for job in kept]).reshape(-1, 3).T
    scores = wfp_score(now - submit, t_est, size)
    assert queue.ordered(now) == [kept[i] for i in np.argsort(-scores, kind="stable")]
    assert len(queue) == len(kept)


# --- wait-eval ---------------------------------------------------------------------------------


class Recorder:
    """A forecaster that answers nothing and logs what it learns and the state of each question."""

    spec = "recorder"

    def __init__(self) -> None:
        self.learnt: list[tuple[int, list[int], list[int]]] = []  # (now, ended job ids, submitted job ids)
        self.asked: list[tuple[QueueState, list[int], int]] = []  # (state, positions, learn calls before it)

    def learn(self, now: int, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> None:
        self.learnt.append((now, [job.request.job_id for job in finished], [job.job_id for job in submitted]))

    def forecast(self, state: QueueState, positions: Collection[int]) -> dict[int, int]:
        self.asked.append((state, list(positions), len(self.learnt)))
        return {}


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
@pytest.mark.parametrize("protocol", ["submit", "head"])
def test_wait_eval_asks_with_the_scheduler_s_own_state_as_the_schedule_has_it(protocol: str, backfill: str) -> None:
    """Each question's state is the replay's at that instant: before its pass (submit) or after (head)."""
    trace = generate_workload(jobs=300, procs=64, load=0.95, seed=7)
    recorder = Recorder()
    result, questions = ask_forecasters(trace.jobs, 64, Scheduler("fcfs", backfill), [recorder], protocol)
    jobs = result.jobs.set_index("job_id")
    submit, start, end = (jobs[column].to_dict() for column in ("submit", "start", "end"))
    after = protocol == "head"
    for state, positions, learnt in recorder.asked:
        now = state.now
        waiting = [job.job_id for job in state.waiting]
        assert {(job.job.job_id, job.start) for job in state.running} == {
            (j, start[j]) for j in start if start[j] < now < end[j] or (after and start[j] == now < end[j])
        }
        assert set(waiting) == {j for j in start if submit[j] <= now and (now < start[j] if after else now <= start[j])}
        asked = [waiting[position] for position in positions]
        assert asked == [waiting[0]] if after else {submit[j] for j in asked} == {now}
        ended_before = {j for _, ended, _ in recorder.learnt[:learnt] for j in ended}
        assert {j for j in end if end[j] <= now and start[j] < now} <= ended_before  # learnt before the question
    ended = [j for _, finished, _ in recorder.learnt for j in finished]
    assert sorted(ended) == sorted(start) and [end[j] for j in ended] == sorted(end.values())
    assert [j for _, _, submitted in recorder.learnt for j in submitted] == list(start)  # submit order
    assert questions["job_id"].is_unique and len(questions) > (100 if after else 299)
    assert (questions["start"] == questions["job_id"].map(start)).all()


def test_forecasters_see_no_future() -> None:
    """Changing every job submitted after T leaves every forecast asked before T unchanged."""
    trace = generate_workload(jobs=700, procs=64, load=0.9, seed=11)
    cut = int(trace.jobs["submit"].iloc[450])
    changed = trace.jobs.copy()
    later = changed["submit"] > cut
    changed.loc[later, "t_act"] = np.maximum(1, changed.loc[later, "t_act"] // 3)
    changed.loc[later, "procs"] = np.minimum(64, changed.loc[later, "procs"] * 2)
    specs = [
        "downey",
        "downey-a:by=none,stages=2",
        "forward:estimator=percentile",
        "forward:estimator=last2",
        "forward:draws=3,estimator=last2",
    ]
    scheduler = Scheduler()
    tables = []
    for jobs in (trace.jobs, changed):
        forecasters = [make_forecaster(spec, scheduler) for spec in specs]
        tables.append(ask_forecasters(jobs, 64, scheduler, forecasters, "submit")[1])
    before = [table.loc[table["asked_at"] < cut].drop(columns="start") for table in tables]
    assert len(before[0]) > 300
    assert before[0][specs].notna().to_numpy().mean() > 0.5
    pd.testing.assert_frame_equal(before[0], before[1])


@pytest.mark.slow
def test_wait_eval_writes_the_report_and_the_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = generate_workload(jobs=500, procs=64, load=0.9, seed=5)
    path = tmp_path / "small.swf"
    write_swf(trace, path)
    specs = ["downey", "forward:estimator=request", "forward:estimator=oracle"]
    arguments = ["wait-eval", "--trace", str(path), "--policy", "fcfs", "--backfill", "none", "--protocol", "head"]
    out, plot = tmp_path / "report.json", tmp_path / "scatter.png"
    assert main([*arguments, *(f"--forecaster={spec}" for spec in specs), "--json", str(out), "--plot", str(plot)]) == 0
    report = json.loads(out.read_text())
    assert {"trace", "jobs", "results"} <= set(report) and report["jobs"] == 500
    assert [result["forecaster"] for result in report["results"]] == specs
    keys = {"forecaster", "protocol", "predictions", "correlation", "log_correlation", "median_abs_error"}
    for result in report["results"]:
        assert keys | {"mean_abs_error", "within_2x"} <= set(result) and result["protocol"] == "head"
    oracle = report["results"][2]
    assert oracle["correlation"] == pytest.approx(1) and oracle["median_abs_error"] == 0  # FCFS: no later job counts
    assert plot.stat().st_size > 10_000
    assert "forward:estimator=oracle" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("nope", "unknown forecaster 'nope'"),
        ("downey:q=1", "has no parameter 'q'"),
        ("downey:stages=0", "stages must be a whole number from 1"),
        ("downey:by=size", "by must be none or distinct fields"),
        ("forward:overrun=never", "overrun must be one of downey, request"),
        ("forward:estimator=nope", "estimator= comes last"),
        ("forward:estimator=oracle", "only an evaluation has"),
        ("forward:draws=0", "draws must be a whole number from 1 to 32"),
        ("forward:draws=many", "draws must be a whole number from 1 to 32"),
        ("downey:window", "expected key=value"),
    ],
)
def test_bad_forecaster_specs_are_refused_with_the_choices(spec: str, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        make_forecaster(spec, Scheduler())


# --- ForecastStart ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    running_server, port = start_server(
        "127.0.0.1:0", default_estimators=["request", "percentile"], start_forecaster=FORWARD_SIMULATION
    )
    yield f"127.0.0.1:{port}"
    running_server.stop(0).wait()


def small_state() -> QueueState:
    return QueueState(
        10_000,
        64,
        [
            StartedJob(JobRequest(1, 8_000, 1, 1, 7_200, 48), 8_500),
            StartedJob(JobRequest(2, 9_000, 2, 1, 600, 8), 9_100),
        ],
        [
            JobRequest(3, 9_500, 1, 1, 3_600, 32),
            JobRequest(4, 9_600, 3, 1, 300, 8),
            JobRequest(5, 9_700, 2, 1, 900, 64),
        ],
    )


def test_forecast_start_answers_each_waiting_job_with_bounds(server: str) -> None:
    with PredictorClient(server, timeout=10) as client:
        answer = client.forecast_start(small_state(), estimator="request", namespace="forecasts")
    assert [forecast.job_id for forecast in answer.forecasts] == [3, 4, 5]
    assert answer.estimator == "request" and answer.namespace == "forecasts"
    # requests as runtimes: job 3 (32 processors) waits for job 1's end at 15,700, job 4 backfills now, and
    # job 5 needs the whole machine once job 3 has run its hour
    assert [(forecast.start, forecast.upper) for forecast in answer.forecasts] == [
        (15_700, 15_700),
        (10_000, 10_000),
        (19_300, 19_300),
    ]
    assert all(forecast.lower <= forecast.start for forecast in answer.forecasts)


def test_forecast_start_draws_the_errors_the_estimator_made_on_the_namespaces_completions(server: str) -> None:
    """Through the service, the sampled forecast is the in-process one with the errors of the namespace's live
    scores: each completion's runtime over the request the service answered for it at submission."""
    asked = [JobRequest(100 + i, 10 * i, 1 + i % 3, 1, 7_200, 8) for i in range(60)]
    finished = [FinishedJob(job, job.submit + 3_100, 60 + 50 * i) for i, job in enumerate(asked)]
    lifetimes = QueueLifetimes()
    for job in finished:
        lifetimes.observe(job)
    lifetimes.refresh(small_state().now)
    state = small_state()
    requests = ([started.job.t_req for started in state.running], [job.t_req for job in state.waiting])
    errors = [job.runtime / 7_200 for job in finished]
    expected = sampled_forecasts(FORWARD_SIMULATION, state, Scheduler(), requests, lifetimes.frozen(), (errors, 7))
    with PredictorClient(server, timeout=10) as client:
        client.sync([], asked, namespace="sampled", estimator="request")
        client.observe(finished, namespace="sampled")
        before = client.status("sampled")
        answer = client.forecast_start(state, estimator="request", namespace="sampled", draws=7)
        point = client.forecast_start(state, estimator="request", namespace="sampled")
        unscored = client.forecast_start(state, estimator="percentile", namespace="sampled", draws=7)
        unscored_point = client.forecast_start(state, estimator="percentile", namespace="sampled")
        after = client.status("sampled")
    assert answer.forecasts == expected
    assert [forecast.start for forecast in answer.forecasts] != [forecast.start for forecast in point.forecasts]
    # an estimator the namespace has not scored has no errors to draw: the answer is its point forecast and bounds
    assert unscored.forecasts == unscored_point.forecasts
    # a forecast's questions are no submissions: nothing of them waits in the live scores
    assert (after.predictions, after.estimators) == (before.predictions, before.estimators)


def request_of(**changes: object) -> pb.ForecastStartRequest:
    state = small_state()
    request = pb.ForecastStartRequest(now=state.now, machine_procs=state.procs)
    for started in state.running:
        request.running.add(job=job_message(started.job), start=started.start)
    request.waiting.extend(job_message(job) for job in state.waiting)
    for name, value in changes.items():
        if value is None:
            request.ClearField(name)
        else:
            setattr(request, name, value)
    return request


@pytest.mark.parametrize(
    ("request_message", "words"),
    [
        (request_of(now=None), "now is required"),
        (request_of(machine_procs=0), "machine_procs must be in [1,"),
        (request_of(machine_procs=40), "running jobs hold 56 processors"),
        (request_of(now=9_050), "running[1].start (9100) must lie between"),
        (request_of(policy="lifo"), "policy: 'lifo' is not one of fcfs, wfp, sjf"),
        (request_of(backfill="none", backfill_order="sjf"), "backfill_order"),
        (request_of(lower_quantile=1.0), "lower_quantile must be in (0, 1)"),
        (request_of(draws=33), "draws must be in [0, 32]"),
        (request_of(draws=-1), "draws must be in [0, 32]"),
        (request_of(draws=5, lower_quantile=0.5), "lower_quantile must be in (0, 0.5) with draws"),
        (request_of(estimator="nope"), "unknown estimator"),
    ],
)
def test_bad_forecast_requests_are_invalid_arguments(
    server: str, request_message: pb.ForecastStartRequest, words: str
) -> None:
    with grpc.insecure_channel(server) as channel, pytest.raises(grpc.RpcError) as raised:
        rpc.PredictorStub(channel).ForecastStart(request_message, timeout=5)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in raised.value.details()


def test_forecast_work_is_bounded(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forecasts, "MAX_FORECAST_WAITING", 2)
    with PredictorClient(server, timeout=10) as client, pytest.raises(PredictorError) as raised:
        client.forecast_start(small_state())
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "waiting holds 3 jobs; at most 2 per forecast" in raised.value.details


def test_a_server_without_the_forward_simulation_refuses_forecasts() -> None:
    running_server, port = start_server("127.0.0.1:0", default_estimators=["request"])
    try:
        with PredictorClient(f"127.0.0.1:{port}", timeout=10) as client, pytest.raises(PredictorError) as raised:
            client.forecast_start(small_state())
        assert raised.value.code == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        running_server.stop(0).wait()


def test_tsched_forecast_reads_a_state_file(server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = small_state()
    path = tmp_path / "state.json"
    path.write_text(
        json.dumps(
            {
                "now": state.now,
                "machine_procs": state.procs,
                "running": [{**started.job._asdict(), "start": started.start} for started in state.running],
                "waiting": [job._asdict() for job in state.waiting],
            }
        )
    )
    arguments = ["forecast", "--address", server, "--state", str(path), "--estimator", "request"]
    assert main([*arguments, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [row["start"] for row in answer["forecasts"]] == [15_700, 10_000, 19_300]
    assert main(arguments) == 0
    assert "2.6h" in capsys.readouterr().out  # job 5 waits 9,300 s
    # a namespace without a finished job has no model to draw from: every run is the point forecast's
    assert main([*arguments, "--draws", "3", "--json"]) == 0
    assert [row["start"] for row in json.loads(capsys.readouterr().out)["forecasts"]] == [15_700, 10_000, 19_300]
    assert main([*arguments, "--draws", "40"]) != 0
    assert "draws must be in [0, 32]" in capsys.readouterr().err
    path.write_text(json.dumps({"now": 5, "machine_procs": 8, "waiting": [{"job_id": 1, "submit": "x"}]}))
    assert main(arguments) == 2
    assert "waiting[0].submit must be a whole number, got 'x'" in capsys.readouterr().err
    path.write_text("[1, 2]")
    assert main(arguments) == 2
    assert "expected a JSON object with now, machine_procs, running and waiting" in capsys.readouterr().err
    assert main(["forecast", "--address", server, "--state", str(tmp_path / "absent.json")]) == 2
    assert "absent.json: cannot read it: No such file or directory" in capsys.readouterr().err
