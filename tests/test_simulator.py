"""The simulator against schedules worked out by hand, and against the properties every schedule must have.

Hand-worked scenarios pin each policy x backfilling combination, the modes and
the overrun corrections to exact start times (the reasoning is in comments).
Hypothesis checks the invariants on random workloads; the same invariants are
checked over a real trace when ../shared/traces is present. Unless a test says
otherwise the machine has 10 processors, the estimator is `request` and the
mode is `none`, so the scheduler plans with t_req.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator.backfill
import simulator.dynp
import simulator.jobs
import simulator.loop
import simulator.machine
import simulator.policies
import simulator.scheduler
from kernel.jobs import FinishedJob, JobRequest, Prediction, clamp_estimate
from predictor.estimators.base import Estimator
from predictor.registry import make_estimator
from predictor.session import LocalSession
from simulator.backfill import Backfill, ConservativeBackfill, EasyBackfill, make_backfill
from simulator.dynp import make_queue_policy
from simulator.engine import SimulationConfig, SimulationResult, TraceReplay, simulate
from simulator.experiment import run_simulation
from simulator.jobs import RunningJob, WaitingJob
from simulator.machine import Machine, ProcessorPool, make_correction, planning_mode
from simulator.scheduler import QueueScheduler
from simulator.workloads.swf import read_swf

#: One job: (submit, procs, t_req, t_act). Job ids are 1, 2, ... in the order given.
Spec = tuple[int, int, int, int]

COMBINATIONS = [
    (policy, backfill) for policy in ("fcfs", "wfp", "sjf") for backfill in ("none", "easy", "conservative")
]
#: Every (backfilling, backfill order) that exists: without backfilling there is nothing to order.
BACKFILL_ORDERS = [("none", "queue")] + [
    (backfill, order) for backfill in ("easy", "conservative") for order in ("queue", "sjf")
]
CORRECTIONS = ["request", "tsafrir", "cobalt", "double"]


# ---------------------------------------------------------------------------------------------
# Helpers


def job_table(specs: Sequence[Spec], job_ids: Sequence[int] | None = None) -> pd.DataFrame:
    """The engine's input table for `specs`, sorted by submit then job id."""
    ids = list(job_ids) if job_ids is not None else list(range(1, len(specs) + 1))
    submit, procs, t_req, t_act = (list(column) for column in zip(*specs, strict=True))
    table = pd.DataFrame(
        {
            "job_id": ids,
            "submit": submit,
            "procs": procs,
            "t_req": t_req,
            "t_act": t_act,
            "user": 1,
            "group": 1,
            "queue": -1,
            "executable": -1,
        }
    )
    return table.sort_values(["submit", "job_id"], kind="stable").reset_index(drop=True)


class FixedEstimator(Estimator):
    """Answers a given prediction per job id, capped at t_req and floored at 1 s like every estimator."""

    name = "fixed"

    def __init__(self, predictions: dict[int, int]) -> None:
        self.predictions = predictions

    def reset(self) -> None:
        pass

    def observe(self, job: FinishedJob) -> None:
        pass

    def predict(self, job: JobRequest) -> Prediction:
        return Prediction(clamp_estimate(self.predictions[job.job_id], job.t_req), None, 0, False)


class RecordingSession(LocalSession):
    """A local session that keeps, in order, every completion it learns and every submission it predicts."""

    def __init__(self, estimator: Estimator) -> None:
        super().__init__(estimator)
        self.finished: list[FinishedJob] = []
        self.events: list[tuple[str, int]] = []

    def sync(self, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> list[Prediction]:
        self.finished.extend(finished)
        self.events += [("finished", job.request.job_id) for job in finished]
        self.events += [("submitted", job.job_id) for job in submitted]
        return super().sync(finished, submitted)


def run(
    specs: Sequence[Spec],
    *,
    procs: int = 10,
    policy: str = "fcfs",
    backfill: str = "easy",
    mode: str = "none",
    correction: str = "request",
    backfill_order: str = "queue",
    predictions: dict[int, int] | None = None,
    job_ids: Sequence[int] | None = None,
    max_reservation_delay: int | None = SimulationConfig.max_reservation_delay,
) -> pd.DataFrame:
    """Simulate `specs` and return the per-job table indexed by job id."""
    estimator = make_estimator("request") if predictions is None else FixedEstimator(predictions)
    config = SimulationConfig(procs, policy, backfill, mode, correction, backfill_order, max_reservation_delay)
    return simulate(job_table(specs, job_ids), config, LocalSession(estimator)).jobs.set_index("job_id")


def starts(specs: Sequence[Spec], **options) -> list[int]:
    """Start times of the jobs, in the order of `specs`."""
    jobs = run(specs, **options)
    ids = options.get("job_ids") or range(1, len(specs) + 1)
    return [int(jobs.at[job_id, "start"]) for job_id in ids]


def simulate_with(
    strategy: Backfill, table: pd.DataFrame, config: SimulationConfig, session: RecordingSession
) -> SimulationResult:
    """Simulate with an instrumented backfilling object in place of the one the engine would build."""
    assert strategy.name == config.backfill
    machine = ProcessorPool(config.procs, planning_mode(config.mode), make_correction(config.correction))
    scheduler = QueueScheduler(make_queue_policy(config.policy), strategy, machine)
    replay = TraceReplay(table, config, session, scheduler=scheduler)
    assert replay.scheduler.backfill is strategy
    return replay.replay()


# ---------------------------------------------------------------------------------------------
# Hand-worked scenarios: every policy x backfilling

# J1 (6 procs) runs [0, 100). J2 (8) cannot start: its shadow is 100, with 10 - 8 = 2 extra processors.
# J3 (9) waits behind it. J4 (2 procs, 1000 s) fits now and ends long after the shadow, but 2 <= extra:
# EASY backfills it at 3 (rule ii), which pushes J3 (not the head) from 200 to J4's end, 1003.
# Conservative must not start it: J3 holds [200, 300) with 1 processor spare, so J4's earliest slot
# is 300. J5 (1 proc, 50 s) fits before J1 ends and delays no one: EASY (rule i) and conservative
# backfill it at 4. Without backfilling J2 starts at 100, J3 at 200, J4 and J5 at 300.
# SJF orders J5 (50 s) first, so it starts at 4 even without backfilling; otherwise SJF = FCFS here.
# WFP without backfilling: at 100 the scores (wait/t_req)^3 x size are J3 (98/100)^3 x 9 = 8.47,
# J2 (99/100)^3 x 8 = 7.76, J5 (96/50)^3 x 1 = 7.08, J4 ~0.002: J3 starts at 100 and J2 (8 > 1 free)
# blocks the rest; at 200, J2 (63.0) and J5 (60.2) start, J4 (2 > 1 free) waits for J5's end at 250.
# WFP + EASY: at 100 J3 is first but needs 9 of the 8 free (J4 holds 2): its shadow is J4's end 1003,
# and J2 (ends 200 <= 1003) is backfilled at 100 under rule (i). WFP + conservative keeps the
# reservations made at arrival: the same as FCFS.
PROTECTED_JOBS = [(0, 6, 100, 100), (1, 8, 100, 100), (2, 9, 100, 100), (3, 2, 1000, 1000), (4, 1, 50, 50)]
PROTECTED_JOBS_STARTS = {
    ("fcfs", "none"): [0, 100, 200, 300, 300],
    ("fcfs", "easy"): [0, 100, 1003, 3, 4],
    ("fcfs", "conservative"): [0, 100, 200, 300, 4],
    ("wfp", "none"): [0, 200, 100, 250, 200],
    ("wfp", "easy"): [0, 100, 1003, 3, 4],
    ("wfp", "conservative"): [0, 100, 200, 300, 4],
    ("sjf", "none"): [0, 100, 200, 300, 4],
    ("sjf", "easy"): [0, 100, 1003, 3, 4],
    ("sjf", "conservative"): [0, 100, 200, 300, 4],
}


@pytest.mark.parametrize(("policy", "backfill"), COMBINATIONS)
def test_backfilling_protects_the_head_under_easy_and_every_queued_job_under_conservative(policy, backfill):
    assert starts(PROTECTED_JOBS, policy=policy, backfill=backfill) == PROTECTED_JOBS_STARTS[policy, backfill]


# J1 (6) runs [0, 100); J2 (8) waits with shadow 100 and 2 extra processors. J3 (3 procs, 200 s) fits
# in the 4 free processors but would end at 202 > 100 and 3 > 2 extra: backfilling it would delay J2,
# so neither EASY nor conservative may. J4 (4 procs, 97 s) ends exactly at the shadow: allowed.
# Without backfilling J4 waits until J2 ends at 200 (FCFS; WFP ranks J2 7.76 > J4 4 > J3 0.35 at 100),
# except under SJF, where J4 (97 s) is first in the queue and simply starts at 3.
HEAD_DELAY = [(0, 6, 100, 100), (1, 8, 100, 100), (2, 3, 200, 200), (3, 4, 97, 97)]
HEAD_DELAY_STARTS = {
    **{(policy, "none"): [0, 100, 200, 200] for policy in ("fcfs", "wfp")},
    ("sjf", "none"): [0, 100, 200, 3],
    **{
        (policy, backfill): [0, 100, 200, 3]
        for policy in ("fcfs", "wfp", "sjf")
        for backfill in ("easy", "conservative")
    },
}


@pytest.mark.parametrize(("policy", "backfill"), COMBINATIONS)
def test_a_job_that_would_delay_the_head_is_not_backfilled(policy, backfill):
    assert starts(HEAD_DELAY, policy=policy, backfill=backfill) == HEAD_DELAY_STARTS[policy, backfill]


def test_easy_extra_processors_are_used_up_by_rule_ii():
    # J1 (6) runs [0, 100); J2 (7) waits: shadow 100, extra 10 - 7 = 3, free 4. J3 and J4 (2 procs,
    # 1000 s each) arrive together at 2 and both end after the shadow: J3 takes 2 of the 3 extra
    # processors; J4 fits in the 2 free ones but only 1 extra is left, so it waits for J2's end (200).
    # J5 (1 proc, 1000 s) at 4 fits in that last extra processor.
    jobs = [(0, 6, 100, 100), (1, 7, 100, 100), (2, 2, 1000, 1000), (2, 2, 1000, 1000), (4, 1, 1000, 1000)]
    assert starts(jobs, backfill="easy") == [0, 100, 2, 200, 4]


def test_conservative_compresses_reservations_when_a_job_ends_early():
    # J1 (10 procs, t_req 100) ends at 20. Reservations made at arrival: J2 (5) [100, 200), J3 (5)
    # [100, 150), J4 (10) [200, 210), J5 (5, 300 s) 210. At 20 compression in queue order moves
    # J2 and J3 to 20, J4 to 120 (after J2's expected end) and J5 to 130 (J4 fills [120, 130)).
    jobs = [(0, 10, 100, 20), (1, 5, 100, 100), (2, 5, 50, 50), (3, 10, 10, 10), (4, 5, 300, 300)]
    assert starts(jobs, backfill="conservative") == [0, 20, 20, 120, 130]


@pytest.mark.parametrize("policy", ["fcfs", "wfp", "sjf"])
def test_ties_are_broken_by_submit_then_job_id(policy):
    # J1 holds the whole machine until 100; the others need it all, have equal t_req and run 50 s.
    # Job 30 was submitted first (5); jobs 10 and 20 together (6). Every policy runs 30, 10, 20:
    # SJF ties on t_est; WFP prefers 30 (waited longer) and then ties 10 and 20 on score at 150.
    jobs = [(0, 10, 100, 100), (5, 10, 50, 50), (6, 10, 50, 50), (6, 10, 50, 50)]
    assert starts(jobs, policy=policy, backfill="none", job_ids=[1, 30, 20, 10]) == [0, 100, 200, 150]


def test_wfp_breaks_an_exact_score_tie_by_submit_not_job_id():
    # At 100 job 3 (submitted 0, t_req 200) and job 2 (submitted 50, t_req 100) both score
    # (100/200)^3 x 10 = (50/100)^3 x 10 = 1.25: the earlier submission (job 3) goes first.
    jobs = [(0, 10, 100, 100), (0, 10, 200, 10), (50, 10, 100, 10)]
    assert starts(jobs, policy="wfp", backfill="none", job_ids=[1, 3, 2]) == [0, 100, 110]


@pytest.mark.parametrize(("mode", "first"), [("none", 3), ("regular", 2)])
def test_sjf_orders_by_the_estimate_the_mode_plans_with(mode, first):
    # J1 holds the machine until 100. J2 asks 1000 s but is predicted at 10; J3 asks 100, predicted 100.
    # Planning with t_req (none) J3 is shorter; with predictions (regular) J2 is.
    jobs = [(0, 10, 100, 100), (1, 10, 1000, 10), (2, 10, 100, 10)]
    started = starts(jobs, policy="sjf", backfill="none", mode=mode, predictions={1: 100, 2: 10, 3: 100})
    assert started[first - 1] == 100


@pytest.mark.parametrize("backfill", ["none", "easy", "conservative"])
def test_jobs_are_killed_at_their_request(backfill):
    # J1 asks 100 s but would run 500: it is killed at 100, when J2 (whole machine) starts.
    jobs = run([(0, 4, 100, 500), (1, 10, 10, 10)], backfill=backfill)
    assert jobs["run"].tolist() == [100, 10]
    assert jobs["start"].tolist() == [0, 100]


@pytest.mark.parametrize(("backfill", "first", "second"), [("none", 3, 2), ("easy", 3, 2), ("conservative", 2, 3)])
def test_completions_then_arrivals_then_one_pass_at_each_instant(backfill, first, second):
    # A holds the machine until 100; B (1000 s asked, runs 10) waits from 50; C (10 s) arrives at 100,
    # when A ends. One pass after both events: SJF starts C at 100 and B at 110. Conservative gave B
    # a reservation at 100 when it arrived, which C may not delay: B at 100, then C at 110.
    jobs = [(0, 10, 100, 100), (50, 10, 1000, 10), (100, 10, 10, 10)]
    session = RecordingSession(make_estimator("request"))
    result = simulate(job_table(jobs), SimulationConfig(10, "sjf", backfill), session).jobs.set_index("job_id")
    assert (result.at[first, "start"], result.at[second, "start"]) == (100, 110)
    assert session.events.index(("finished", 1)) < session.events.index(("submitted", 3))


@pytest.mark.parametrize(("policy", "backfill"), COMBINATIONS)
def test_zero_length_jobs_free_their_processors_at_once(policy, backfill):
    # J1 takes the whole machine for 0 s; J2 (same instant) starts at 0 too, then J3 when J2 ends.
    # J1 is first in every order: first submitted, and shortest.
    jobs = run([(0, 10, 10, 0), (0, 10, 50, 50), (10, 10, 10, 0)], policy=policy, backfill=backfill)
    assert jobs["start"].tolist() == [0, 0, 50]
    assert jobs["run"].tolist() == [0, 50, 0]


# ---------------------------------------------------------------------------------------------
# Modes and corrections

# J1 (6 procs) asks 1000 s, is predicted 100 and runs 500. J2 (8) waits for it. J3 (4 procs) asks 2000,
# is predicted 150 and runs 300. At 2 the 4 free processors fit J3, but 4 > the 2 extra processors,
# so EASY backfills it only if it ends by J2's shadow:
# - none: J1 is seen ending at 1000, J3 at 2 + 2000: refused;
# - regular: J1 is seen ending at 100 (its prediction), J3 at 2 + 150 = 152: refused;
# - selective: J1 is seen ending at 1000 (t_req), J3 at 152: backfilled at 2.
# Refused, J3 starts when J2 (predicted 100 s in regular, asked 100 s) ends: 500 + 100 = 600.
# Conservative reserves the same way (J2 at 1000 in none and selective, J3 after it; J3 at 2 in
# selective), except that in regular mode it wakes up at J2's reservation, 100: J1 is then seen to
# have overrun, its expected end jumps to 1000, J2 cannot start before it, and J3 (4 procs, next
# to J1's 6) delays no one by starting at 100. J1's early end at 500 moves J2 to 500 everywhere.
MODE_JOBS = [(0, 6, 1000, 500), (1, 8, 100, 100), (2, 4, 2000, 300)]
MODE_PREDICTIONS = {1: 100, 2: 100, 3: 150}


@pytest.mark.parametrize(
    ("backfill", "mode", "third"),
    [
        ("easy", "none", 600),
        ("easy", "regular", 600),
        ("easy", "selective", 2),
        ("conservative", "none", 600),
        ("conservative", "regular", 100),
        ("conservative", "selective", 2),
    ],
)
def test_modes_choose_which_estimate_waiting_and_running_jobs_are_seen_with(backfill, mode, third):
    started = starts(MODE_JOBS, backfill=backfill, mode=mode, predictions=MODE_PREDICTIONS)
    assert started == [0, 500, third]


@pytest.mark.parametrize(("policy", "backfill"), COMBINATIONS)
def test_mode_none_plans_with_requests_but_reports_predictions(policy, backfill):
    with_predictions = run(MODE_JOBS, policy=policy, backfill=backfill, predictions=MODE_PREDICTIONS)
    plain = run(MODE_JOBS, policy=policy, backfill=backfill)
    assert with_predictions["start"].tolist() == plain["start"].tolist()
    assert with_predictions["t_sched"].tolist() == [100, 100, 150]


# Regular mode. J1 (6 procs) asks 10000 s, is predicted 100 and runs 5000. When J2 (8) arrives at 200,
# J1 has passed its prediction and its expected end is corrected:
# - `request`: start + t_req = 10000;
# - `tsafrir`: +60 s (160, still past), then +300 s: 460;
# - `cobalt`: now + 300 = 500;
# - `double`: 2 x 100 = 200, which is `now` and so still past, then 2 x 200 = 400.
# J3 (4 procs) arrives at 201 and may start only if it ends by J2's shadow (EASY) or before J2's
# reservation (conservative): 4 > the 2 extra processors. So a prediction p is allowed when
# 201 + p <= that end: p = 259 / 299 / 199 passes under tsafrir / cobalt / double, one second more
# does not. Refused, under EASY J3 waits for J2, which starts when J1 ends at 5000 and is expected to
# run 100 s: 5100. Conservative reserved J2 at J1's corrected end and wakes up then: J1, still
# running, is corrected again (tsafrir: 460 + 900 = 1360; cobalt: 500 + 300 = 800; double: 800),
# J2's reservation is no longer feasible, the plan is rebuilt, J2 goes to J1's new end, and J3
# (4 procs next to J1's 6, ending by J1's new end) starts at the wake-up time: 460, 500, 400.
@pytest.mark.parametrize(
    ("backfill", "correction", "prediction", "third"),
    [
        ("easy", "request", 260, 201),
        ("easy", "tsafrir", 259, 201),
        ("easy", "tsafrir", 260, 5100),
        ("easy", "cobalt", 299, 201),
        ("easy", "cobalt", 300, 5100),
        ("easy", "double", 199, 201),
        ("easy", "double", 200, 5100),
        ("conservative", "request", 260, 201),
        ("conservative", "tsafrir", 259, 201),
        ("conservative", "tsafrir", 260, 460),
        ("conservative", "cobalt", 299, 201),
        ("conservative", "cobalt", 300, 500),
        ("conservative", "double", 199, 201),
        ("conservative", "double", 200, 400),
    ],
)
def test_overrun_corrections(backfill: str, correction: str, prediction: int, third: int) -> None:
    jobs = [(0, 6, 10000, 5000), (200, 8, 100, 100), (201, 4, 1000, 400)]
    started = starts(
        jobs, backfill=backfill, mode="regular", correction=correction, predictions={1: 100, 2: 100, 3: prediction}
    )
    assert started == [0, 5000, third]


# EASY++ starving its head, and the bound on the reservation delay (regular mode, request correction).
# J1 (5 of 10 procs, predicted and run 100 s) starts at 0. J2 (10 procs) arrives at 1: it is the head, its
# first reservation (shadow) J1's end, 100. J3 (5 procs, predicted 50, runs 300, asks 1000) arrives at 2 and
# ends by 100 on its prediction: backfilled at 2. At 100 J1 ends and J3, past its prediction, is expected
# to run to its request, 1002: the head's shadow has moved 902 s. J4 (5 procs, predicted 500, runs 2000,
# asks 3000) arrives at 101. Within a bound of 902 s or more (or none) it is judged on its prediction,
# 101 + 500 <= 1002, and backfilled: J3 ends at 302, but J2 waits for J4's end, 2101. Under a smaller bound
# J4 is judged on its request, 101 + 3000 > 1002, with no extra processor at the shadow: J2 starts when J3
# ends, 302, and J4 after J2, at 402.
STARVING_HEAD = [(0, 5, 1000, 100), (1, 10, 1000, 100), (2, 5, 1000, 300), (101, 5, 3000, 2000)]
STARVING_HEAD_PREDICTIONS = {1: 100, 2: 100, 3: 50, 4: 500}


@pytest.mark.parametrize(
    ("bound", "expected"),
    [
        (None, [0, 2101, 2, 101]),
        (902, [0, 2101, 2, 101]),
        (901, [0, 302, 2, 402]),
        (0, [0, 302, 2, 402]),
    ],
)
@pytest.mark.parametrize("order", ["queue", "sjf"])
def test_a_bound_on_the_reservation_delay_stops_backfilled_jobs_pushing_the_head_back(
    bound: int | None, expected: list[int], order: str
) -> None:
    options = {"mode": "regular", "backfill_order": order, "predictions": STARVING_HEAD_PREDICTIONS}
    assert starts(STARVING_HEAD, max_reservation_delay=bound, **options) == expected


def test_the_reservation_delay_bound_is_not_negative() -> None:
    with pytest.raises(ValueError, match="must be >= 0 seconds; got -1"):
        make_backfill("easy", "sjf", -1)


# A job started at 0, asking 10000 s, predicted 100 s, still running when the machine corrects
# overruns at 100, 160, 1000, 5000 and 9999; its expected end after each call (an end at `now` is past,
# an end after `now` is left alone, and every correction stops at start + t_req = 10000):
# - request: 10000 at once;
# - tsafrir: 100 + 60 = 160; 160 + 300 = 460; 460 + 900 = 1360; 1360 + 1800 = 3160, still past,
#   + 3600 = 6760; 6760 + 7200, capped: 10000;
# - cobalt: now + 300: 400; 400 (not past at 160); 1300; 5300; 9999 + 300, capped: 10000;
# - double: 200; 200; 400, 800, 1600; 3200, 6400; 12800, capped: 10000.
CORRECTION_STEPS = {
    "request": [10000, 10000, 10000, 10000, 10000],
    "tsafrir": [160, 460, 1360, 6760, 10000],
    "cobalt": [400, 400, 1300, 5300, 10000],
    "double": [200, 200, 1600, 6400, 10000],
}


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_each_correction_step_by_step(correction: str) -> None:
    machine = ProcessorPool(10, planning_mode("regular"), make_correction(correction))
    machine.start(WaitingJob(0, 1, 0, 4, 10000, 100), 0)
    ends = []
    for now in (100, 160, 1000, 5000, 9999):
        machine.correct_overruns(now)
        ends.append(machine.running[0].expected_end)
    assert ends == CORRECTION_STEPS[correction]


@pytest.mark.parametrize("mode", ["none", "selective"])
def test_corrections_only_apply_in_regular_mode(mode: str) -> None:
    machine = ProcessorPool(10, planning_mode(mode), make_correction("cobalt"))
    machine.start(WaitingJob(0, 1, 0, 4, 10000, 100), 0)
    machine.correct_overruns(5000)
    assert machine.running[0].expected_end == 10000  # planned with t_req: never passed


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_correcting_a_job_past_its_request_is_an_error_not_an_endless_loop(correction: str) -> None:
    # The engine ends every job by start + t_req before it corrects anything; a caller that does not
    # would have every correction land at or before `now` again.
    machine = ProcessorPool(10, planning_mode("regular"), make_correction(correction))
    machine.start(WaitingJob(0, 1, 0, 4, 1000, 100), 0)
    with pytest.raises(AssertionError, match="past its request"):
        machine.correct_overruns(1000)


def test_unknown_correction_mode_and_order_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown correction 'triple'; choose one of request, tsafrir"):
        make_correction("triple")
    with pytest.raises(ValueError, match="unknown mode 'always'; choose one of none, regular, selective"):
        planning_mode("always")
    with pytest.raises(ValueError, match="backfill order"):
        make_backfill("easy", "longest")
    with pytest.raises(ValueError, match="needs backfilling"):
        make_backfill("none", "sjf")


# ---------------------------------------------------------------------------------------------
# Backfill order

# J1 (6 procs) runs [0, 100). J2 (8) is the head: shadow 100, 2 extra processors, 4 free. J3 (4 procs,
# 95 s) and J4 (4 procs, 50 s) arrive together at 2; each fits the 4 free processors and ends by the
# shadow (97, 52), but only one fits. In queue order (FCFS: submit, then job id) J3 goes first; in
# `sjf` order J4 (shorter) does. The other can then only start after J2 (8 procs, [100, 200)): 200,
# except under WFP with J3 backfilled: at 97 J4 scores (95/50)^3 x 4 = 27.4 > J2's (96/100)^3 x 8 =
# 7.1, so J4 heads the queue and starts in order at 97, and J2 waits for it to end: 147.
# Under SJF the queue order already is shortest first: J4 starts at 2 in order, J3 at 52 (in order,
# ahead of J2), and J2 at J3's end, 147, whatever the backfill order.
SJBF_JOBS = [(0, 6, 100, 100), (1, 8, 100, 100), (2, 4, 95, 95), (2, 4, 50, 50)]
SJBF_STARTS = {
    ("fcfs", "queue"): [0, 100, 2, 200],
    ("fcfs", "sjf"): [0, 100, 200, 2],
    ("wfp", "queue"): [0, 147, 2, 97],
    ("wfp", "sjf"): [0, 100, 200, 2],
    ("sjf", "queue"): [0, 147, 52, 2],
    ("sjf", "sjf"): [0, 147, 52, 2],
}


@pytest.mark.parametrize(("policy", "order"), list(SJBF_STARTS))
def test_easy_sjbf_tries_the_shortest_candidate_first_whatever_picks_the_head(policy: str, order: str) -> None:
    assert starts(SJBF_JOBS, policy=policy, backfill="easy", backfill_order=order) == SJBF_STARTS[policy, order]


# J1 (whole machine) asks 100 s and ends at 10. J2 (whole machine, 100 s) was reserved at 100, J3
# (6 procs, 20 s) after it at 200. J1's early end frees [10, 100) and compression hands it out:
# in queue order J2 moves first, to 10, and J3 to J2's end, 110; in `sjf` order J3 (shorter) moves
# first, to 10 (ending at 30, it delays no one: J2 was due at 100), and J2 then to 30.
@pytest.mark.parametrize(("order", "expected"), [("queue", [0, 10, 110]), ("sjf", [0, 30, 10])])
def test_conservative_compresses_in_the_backfill_order(order: str, expected: list[int]) -> None:
    jobs = [(0, 10, 100, 10), (1, 10, 100, 100), (2, 6, 20, 20)]
    assert starts(jobs, backfill="conservative", backfill_order=order) == expected


# ---------------------------------------------------------------------------------------------
# Conservative backfilling replans in priority order


# Selective mode: waiting jobs are planned with their prediction, running jobs with t_req.
# J1 (10 procs) runs [0, 100), W (10 procs) is reserved at [100, 200). J3 (5 procs, asks 1000, predicted
# 50, runs 1000) and J4 (5 procs, 50 s) are reserved at [200, 250); W2 (10 procs, 100 s) at [250, 350);
# J5 (5 procs, 1000 s) after it at [350, 1350). At 200 J3 starts and is now seen until 1200: W2's
# slot is overbooked, and at 250 (W2's reservation) the plan is rebuilt. In priority order W2 takes
# the earliest slot for 10 processors, 1200 (J3's end), and J5 the first slot that does not delay W2:
# 1300. Keeping the reservations that still fit (J5's) and re-placing the displaced ones after them
# would let J5 start at 250 and push W2 to 1250: a later job ahead of an earlier one.
def test_conservative_replan_places_jobs_in_priority_order() -> None:
    jobs = [
        (0, 10, 100, 100),
        (1, 10, 100, 100),
        (2, 5, 1000, 1000),
        (3, 5, 50, 50),
        (4, 10, 100, 100),
        (5, 5, 1000, 1000),
    ]
    predictions = {1: 100, 2: 100, 3: 50, 4: 50, 5: 100, 6: 1000}
    started = starts(jobs, backfill="conservative", mode="selective", predictions=predictions)
    assert started == [0, 100, 200, 200, 1200, 1300]


@pytest.mark.slow
def test_conservative_replan_does_not_starve_a_wide_job_on_ctc(traces_dir: Path) -> None:
    # CTC-SP2, March 1997, FCFS, percentile:q=85 in selective mode: every job that starts below its
    # request is then seen until t_req, overbooks the plan and forces a replan. Re-placing displaced
    # jobs after every kept reservation displaced job 62609 (336 of the 338 processors) 19 times: it
    # waited 1,750,495 s, seven times the longest wait of the same month planned with requests.
    trace = read_swf(traces_dir / "CTC-SP2-1996-3.1-cln.swf.gz")
    longest: dict[str, int] = {}
    for mode in ("none", "selective"):
        config = SimulationConfig(trace.machine_procs(), "fcfs", "conservative", mode)
        _, result = run_simulation(trace, config, "percentile:q=85", month="1997-03")
        longest[mode] = int(result.jobs["wait"].max())
    assert longest["selective"] < 2 * longest["none"], longest


# ---------------------------------------------------------------------------------------------
# The scheduler never sees actual runtimes

SCHEDULER_MODULES = (
    simulator.policies,
    simulator.backfill,
    simulator.machine,
    simulator.jobs,
    simulator.dynp,
    simulator.scheduler,
)
RUNTIME_NAMES = {"t_act", "runtime", "_runtime", "FinishedJob"}


def names_in_code(module: ModuleType) -> set[str]:
    """Every identifier, attribute, argument, imported name and non-docstring string of `module`."""
    tree = ast.parse(inspect.getsource(module))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            names.add(node.value)
    return names


@pytest.mark.parametrize("view", [WaitingJob, RunningJob])
def test_the_scheduler_view_of_a_job_has_no_runtime_field(view):
    fields = {field.name for field in dataclasses.fields(view)}
    assert not {name for name in fields if "act" in name or "runtime" in name or name in {"run", "end"}}
    job = view(*range(1, len(fields) + 1))
    with pytest.raises(AttributeError):  # slots: nothing can be attached to a job later
        job.t_act = 1


# The event loop too: its driver says when a started job ends; it never sees how long a job runs.
@pytest.mark.parametrize("module", [*SCHEDULER_MODULES, simulator.loop], ids=lambda m: m.__name__)
def test_scheduler_modules_never_refer_to_actual_runtimes(module):
    names = names_in_code(module)
    assert not names & RUNTIME_NAMES
    assert not {name for name in names if "t_act" in name}
    assert not {name for name in names if name.startswith(("simulator.engine", "predictor"))}


# ---------------------------------------------------------------------------------------------
# Invariants


class ShadowRecordingEasy(EasyBackfill):
    """EASY that records, at every pass, the queue's first job, the head it protects and the head's shadow.

    The shadow is worked out here from the digest's definition (expected ends of the running jobs and
    of the jobs this pass starts in order), independently of the implementation's own.
    """

    def __init__(self, order: str = "queue") -> None:
        super().__init__(order)
        self.passes: list[tuple[int, int, int | None, int | None, set[int]]] = []

    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        started = super().select(now, queue, machine)
        in_order = 0
        while in_order < len(started) and started[in_order] is queue[in_order]:
            in_order += 1
        head, shadow = None, None
        if in_order < len(queue):
            head = queue[in_order].index
            free = machine.free - sum(job.size for job in queue[:in_order])
            releases = machine.expected_releases() + [
                (now + machine.planned_runtime(job), job.size) for job in queue[:in_order]
            ]
            for end, size in sorted(releases):
                free += size
                if free >= queue[in_order].size:
                    shadow = end
                    break
        self.passes.append((now, queue[0].index, head, shadow, {job.index for job in started}))
        return started


def heads_started_by_their_shadow(passes: list[tuple[int, int, int | None, int | None, set[int]]]) -> int:
    """Check EASY's promise to the head job; return how many promises were kept to the end.

    A job's promise is the shadow computed when it first became the head. It holds while no job of
    higher priority is queued ahead of it (always, under FCFS, once it is the head): until then later
    shadows may only be earlier, and it must start by it. A job queued ahead may start first
    (SJF, WFP), and the head it leaves behind gets a new promise.
    """
    promise: dict[int, int] = {}
    kept = 0
    for now, first, head, shadow, started in passes:
        for index, promised in list(promise.items()):
            if index != first:
                del promise[index]
            elif index in started:
                assert now <= promised, f"head (trace index {index}) started at {now}, after its shadow {promised}"
                kept += 1
                del promise[index]
            else:
                assert shadow <= promised, f"shadow of head {index} moved from {promised} to {shadow}"
        if head is not None and head not in promise:
            promise[head] = shadow
    return kept


class ReservationRecordingConservative(ConservativeBackfill):
    """Conservative backfilling that records each job's first reservation and any move to a later time."""

    def __init__(self, order: str = "queue") -> None:
        super().__init__(order)
        self.first_reservation: dict[int, int] = {}
        self.latest: dict[int, int] = {}
        self.moved_later: list[tuple[int, int, int, int]] = []  # (now, trace index, from, to)

    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        started = super().select(now, queue, machine)
        for index, start in self._reserved.items():
            self.first_reservation.setdefault(index, start)
            if start > self.latest.get(index, start):
                self.moved_later.append((now, index, self.latest[index], start))
            self.latest[index] = start
        return started


def session_for(estimator: str, table: pd.DataFrame, guesses: Sequence[int] | None = None) -> RecordingSession:
    """A recording session on `request`, the `oracle` (bound to the table's t_act) or `guesses` per job."""
    if estimator == "guess":
        return RecordingSession(FixedEstimator(dict(zip(table["job_id"].tolist(), guesses, strict=True))))
    chosen = make_estimator(estimator)
    if chosen.evaluation_only:
        chosen.bind_truth(dict(zip(table["job_id"].tolist(), table["t_act"].tolist(), strict=True)))
    return RecordingSession(chosen)


def peak_processors(start: np.ndarray, end: np.ndarray, size: np.ndarray) -> int:
    """Most processors in use at once, jobs holding theirs over [start, end)."""
    times = np.concatenate([end, start])
    deltas = np.concatenate([-size, size])
    releases_first = np.concatenate([np.zeros(len(end)), np.ones(len(start))])
    order = np.lexsort((releases_first, times))
    return int(np.cumsum(deltas[order]).max(initial=0))


def assert_schedule_invariants(
    table: pd.DataFrame, result: SimulationResult, session: RecordingSession, config: SimulationConfig
) -> None:
    """Every job ran once for min(t_act, t_req), after its submission, within the machine's processors."""
    jobs = result.jobs.set_index("job_id").loc[table["job_id"]]
    ends = {job.request.job_id: job.end for job in session.finished}
    assert len(session.finished) == len(ends) == len(table), "some job never finished (or finished twice)"
    assert ends == dict(zip(jobs.index.tolist(), jobs["end"].tolist(), strict=True))
    assert (jobs["start"].to_numpy() >= table["submit"].to_numpy()).all()
    expected_run = np.minimum(table["t_act"].to_numpy(), table["t_req"].to_numpy())
    assert (jobs["run"].to_numpy() == expected_run).all()
    size = jobs["size"].to_numpy()
    assert peak_processors(jobs["start"].to_numpy(), jobs["end"].to_numpy(), size) <= config.procs
    if (config.policy, config.backfill) == ("fcfs", "none"):
        assert (np.diff(jobs["start"].to_numpy()) >= 0).all(), "FCFS without backfilling started out of order"


@st.composite
def workloads(draw) -> tuple[int, list[Spec], list[int]]:
    """A machine of up to 16 processors, up to 60 jobs in contention, and a guess per job (under or over)."""
    procs = draw(st.integers(1, 16))
    raw = draw(
        st.lists(
            st.tuples(
                st.integers(0, 120),
                st.integers(1, procs),
                st.integers(1, 1000),
                st.integers(0, 1000),
                st.integers(1, 1500),
            ),
            min_size=1,
            max_size=60,
        )
    )
    specs: list[Spec] = []
    submit = 0
    for gap, size, t_req, runtime, _ in raw:
        submit += gap
        specs.append((submit, size, t_req, min(runtime, t_req)))
    return procs, specs, [guess for *_, guess in raw]


#: Estimates that never underestimate: the head's shadow and conservative reservations are promises.
EXACT_OR_OVER = [("oracle", "regular"), ("request", "none")]


#: Random workloads replayed with any estimator, mode and correction (for `simulate_random`).
random_runs = given(
    workload=workloads(),
    estimator=st.sampled_from(["request", "oracle", "guess"]),
    mode=st.sampled_from(["none", "regular", "selective"]),
    correction=st.sampled_from(CORRECTIONS),
)


def simulate_random(
    config: SimulationConfig, workload: tuple[int, list[Spec], list[int]], estimator: str
) -> tuple[pd.DataFrame, SimulationResult]:
    """Replay a random workload on its own machine size with `config`'s scheduler; check the invariants."""
    procs, specs, guesses = workload
    table = job_table(specs)
    session = session_for(estimator, table, guesses)
    config = dataclasses.replace(config, procs=procs)
    result = simulate(table, config, session)
    assert_schedule_invariants(table, result, session, config)
    return table, result


@pytest.mark.parametrize(("backfill", "order"), BACKFILL_ORDERS)
@pytest.mark.parametrize("policy", ["fcfs", "wfp", "sjf"])
@settings(max_examples=40, deadline=None)
@random_runs
def test_schedule_invariants_on_random_workloads(
    policy: str,
    backfill: str,
    order: str,
    workload: tuple[int, list[Spec], list[int]],
    estimator: str,
    mode: str,
    correction: str,
) -> None:
    simulate_random(SimulationConfig(1, policy, backfill, mode, correction, order), workload, estimator)


@pytest.mark.parametrize(("estimator", "mode"), EXACT_OR_OVER)
@pytest.mark.parametrize("order", ["queue", "sjf"])
@pytest.mark.parametrize("policy", ["fcfs", "wfp", "sjf"])
@settings(max_examples=40, deadline=None)
@given(workload=workloads())
def test_easy_head_never_starts_after_its_shadow(
    policy: str, order: str, estimator: str, mode: str, workload: tuple[int, list[Spec], list[int]]
) -> None:
    procs, specs, _ = workload
    table = job_table(specs)
    session = session_for(estimator, table)
    config = SimulationConfig(procs, policy, "easy", mode, backfill_order=order)
    easy = ShadowRecordingEasy(order)
    assert_schedule_invariants(table, simulate_with(easy, table, config, session), session, config)
    heads_started_by_their_shadow(easy.passes)


class DelayRecordingEasy(EasyBackfill):
    """EASY that records, for each head the bound catches, when it did and the latest request end then.

    The latest request end counts the jobs running at that pass and those it starts ahead of the head:
    each is killed by start + t_req at the latest.
    """

    def __init__(self, order: str, max_reservation_delay: int) -> None:
        super().__init__(order, max_reservation_delay)
        self.caught: dict[int, tuple[int, int]] = {}  # trace index -> (time caught, latest request end then)

    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        started = super().select(now, queue, machine)
        for index in self._at_request - self.caught.keys():
            ends = [job.start + job.t_req for job in machine.running.values()]
            ends += [now + job.t_req for job in started if job.index != index]
            self.caught[index] = (now, max(ends, default=now))
        return started


@pytest.mark.parametrize("order", ["queue", "sjf"])
@settings(max_examples=40, deadline=None)
@given(
    workload=workloads(),
    mode=st.sampled_from(["regular", "selective"]),
    correction=st.sampled_from(CORRECTIONS),
    bound=st.sampled_from([0, 30, 300]),
)
def test_a_head_caught_by_the_delay_bound_waits_only_for_the_jobs_already_running(
    order: str, workload: tuple[int, list[Spec], list[int]], mode: str, correction: str, bound: int
) -> None:
    """Under FCFS no job passes the head at the front; once caught, no job backfilled later can delay it.

    The guesses are cut to a tenth (EASY++ with a predictor that underestimates), so that backfilled jobs
    outlive their estimates and heads are caught.
    """
    procs, specs, guesses = workload
    table = job_table(specs)
    session = session_for("guess", table, [max(1, guess // 10) for guess in guesses])
    config = SimulationConfig(procs, "fcfs", "easy", mode, correction, order, bound)
    easy = DelayRecordingEasy(order, bound)
    result = simulate_with(easy, table, config, session)
    assert_schedule_invariants(table, result, session, config)
    start = result.jobs["start"].tolist()  # trace index = row
    late = {index: (start[index], by) for index, (_, by) in easy.caught.items() if start[index] > by}
    assert not late, f"heads started after every job running when the bound caught them had ended: {late}"


@pytest.mark.parametrize(("estimator", "mode"), EXACT_OR_OVER)
@pytest.mark.parametrize("order", ["queue", "sjf"])
@pytest.mark.parametrize("policy", ["fcfs", "wfp", "sjf"])
@settings(max_examples=40, deadline=None)
@given(workload=workloads())
def test_conservative_never_starts_a_job_after_its_first_reservation(
    policy: str, order: str, estimator: str, mode: str, workload: tuple[int, list[Spec], list[int]]
) -> None:
    procs, specs, _ = workload
    table = job_table(specs)
    session = session_for(estimator, table)
    config = SimulationConfig(procs, policy, "conservative", mode, backfill_order=order)
    conservative = ReservationRecordingConservative(order)
    result = simulate_with(conservative, table, config, session)
    assert_schedule_invariants(table, result, session, config)
    assert not conservative.moved_later
    start = result.jobs["start"].tolist()  # the result keeps the table's order: trace index = row
    late = {
        index: (start[index], reserved)
        for index, reserved in conservative.first_reservation.items()
        if start[index] > reserved
    }
    assert not late, f"jobs started after their first reservation (trace index: (start, reservation)): {late}"


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_invariants_over_the_kth_trace(traces_dir, backfill):
    trace = read_swf(traces_dir / "KTH-SP2-1996-2.1-cln.swf.gz")
    table = trace.jobs
    session = session_for("request", table)
    config = SimulationConfig(trace.machine_procs(), "fcfs", backfill)
    strategy = ShadowRecordingEasy() if backfill == "easy" else ReservationRecordingConservative()
    result = simulate_with(strategy, table, config, session)
    assert not result.skipped  # so that a job's trace index is its row in `table`
    assert_schedule_invariants(table, result, session, config)
    if backfill == "easy":
        assert heads_started_by_their_shadow(strategy.passes) > 1000  # the trace has real contention
    else:
        assert not strategy.moved_later
        start = result.jobs["start"].to_numpy()
        first = np.array([strategy.first_reservation[i] for i in range(len(table))])
        assert (start <= first).all()
        assert (first > table["submit"].to_numpy()).sum() > 1000
