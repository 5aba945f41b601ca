"""Streit's dynP: the policy SPECs, Table 1 row by row, virtual schedules and their qualities worked out by hand,
a workload in which each policy wins a step, basic dynP's bounds, the invariants, and that none of it sees an actual
runtime.

Unless a test says otherwise the machine has 10 processors, the estimator is `request` and the mode `none`.
"""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import settings
from test_simulator import (
    RUNTIME_NAMES,
    SCHEDULER_MODULES,
    FixedEstimator,
    Spec,
    assert_schedule_invariants,
    job_table,
    names_in_code,
    random_runs,
    session_for,
    simulate_random,
    starts,
)

import simulator.dynp
from predictor.registry import make_estimator
from predictor.session import LocalSession
from simulator import engine
from simulator.backfill import Profile, make_backfill, virtual_starts
from simulator.dynp import (
    BasicDynP,
    DynPSpec,
    average_response,
    canonical_policy,
    make_queue_policy,
    makespan,
    response_weighted_by_width,
    slowdown_weighted_by_area,
    switch_to_best_policy,
)
from simulator.engine import SimulationConfig, simulate
from simulator.jobs import WaitingJob
from simulator.machine import ProcessorPool
from simulator.metrics import scheduling_metrics
from simulator.scheduler import QueueScheduler
from tsched.cli import main

# ---------------------------------------------------------------------------------------------
# Policy SPECs


@pytest.mark.parametrize(
    ("spec", "canonical"),
    [
        ("fcfs", "fcfs"),
        (" ljf ", "ljf"),
        ("dynp", "dynp:variant=self-tuning,decider=advanced,quality=artww"),
        ("dynp:", "dynp:variant=self-tuning,decider=advanced,quality=artww"),
        ("dynp:decider=simple,quality=sldwa", "dynp:variant=self-tuning,decider=simple,quality=sldwa"),
        ("dynp: quality = makespan", "dynp:variant=self-tuning,decider=advanced,quality=makespan"),
        ("dynp:variant=basic", "dynp:variant=basic,lower=7200,upper=9000"),
        ("dynp:variant=basic,lower=3600,upper=3600", "dynp:variant=basic,lower=3600,upper=3600"),
    ],
)
def test_policy_specs_are_spelled_out_in_full(spec: str, canonical: str) -> None:
    assert canonical_policy(spec) == canonical
    assert canonical_policy(canonical) == canonical


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("edf", "unknown policy 'edf'; choose one of fcfs, wfp, sjf, ljf, dynp"),
        ("sjf:window=3", "sjf takes no parameters"),
        ("dynp:decider=clever", "decider 'clever' is not one of simple, advanced"),
        ("dynp:quality=wait", "quality 'wait' is not one of art, artww, sldwa, makespan"),
        ("dynp:variant=fast", "variant 'fast' is not one of self-tuning, basic"),
        ("dynp:speed=3", "unknown parameter 'speed'; variant=self-tuning takes decider, quality"),
        ("dynp:lower=3600", "unknown parameter 'lower' (it belongs to variant=basic)"),
        ("dynp:variant=basic,quality=art", "unknown parameter 'quality' (it belongs to variant=self-tuning)"),
        ("dynp:variant=basic,lower=9000,upper=7200", "lower (9000) must not exceed upper (7200)"),
        ("dynp:variant=basic,lower=2h", "lower '2h' is not a positive whole number of seconds"),
        ("dynp:variant=basic,upper=0", "upper '0' is not a positive whole number of seconds"),
        ("dynp:decider", "expected key=value, got 'decider'"),
        ("dynp:decider=simple,decider=advanced", "parameter 'decider' given twice"),
    ],
)
def test_a_bad_policy_spec_is_refused_naming_the_parameter_and_its_values(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match="policy") as caught:
        make_queue_policy(spec)
    assert message in str(caught.value)


def test_the_command_line_refuses_a_bad_policy_spec_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["simulate", "--policy", "dynp:decider=clever"])
    assert caught.value.code == 2
    assert "decider 'clever' is not one of simple, advanced" in capsys.readouterr().err
    assert main(["evaluate", "--policies", "fcfs,dynp:quality=wait", "--out", "unused"]) == 2
    assert "quality 'wait' is not one of art, artww, sldwa, makespan" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The deciders: Table 1, every row. Qualities: lower is better.

F, S, L = "fcfs", "sjf", "ljf"
#: (row of Table 1, FCFS, SJF, LJF, current policy, simple decider's choice, advanced decider's choice, case
#: as Table 6 counts it). Written from the table, not from the code.
TABLE_1 = [
    ("1", 5, 5, 5, F, F, F, "1"),
    ("1", 5, 5, 5, S, F, S, "1"),
    ("1", 5, 5, 5, L, F, L, "1"),
    ("2", 5, 3, 7, L, S, S, "2_7"),
    ("3", 3, 5, 7, S, F, F, "3_9"),
    ("4a", 3, 5, 1, F, L, L, "4a"),
    ("4b", 5, 5, 1, S, L, L, "4b_5"),
    ("4c", 5, 3, 1, F, L, L, "4c"),
    ("5", 4, 4, 2, F, L, L, "4b_5"),
    ("6a", 3, 3, 7, F, F, F, "6a"),
    ("6b", 3, 3, 7, S, F, S, "6b"),
    ("6c", 3, 3, 7, L, F, F, "6c"),
    ("7", 5, 3, 5, L, S, S, "2_7"),
    ("8a", 3, 7, 3, F, F, F, "8a"),
    ("8b", 3, 7, 3, S, F, F, "8b"),
    ("8c", 3, 7, 3, L, F, L, "8c"),
    ("9", 3, 5, 5, S, F, F, "3_9"),
    ("10a", 7, 3, 3, F, S, S, "10a"),
    ("10b", 7, 3, 3, S, S, S, "10b"),
    ("10c", 7, 3, 3, L, S, L, "10c"),
]


@pytest.mark.parametrize(("row", "fcfs", "sjf", "ljf", "current", "simple", "advanced", "case"), TABLE_1)
def test_table_1(row: str, fcfs: int, sjf: int, ljf: int, current: str, simple: str, advanced: str, case: str) -> None:
    qualities = (Fraction(fcfs), Fraction(sjf), Fraction(ljf))
    assert switch_to_best_policy("simple", *qualities, current) == (simple, case)
    assert switch_to_best_policy("advanced", *qualities, current) == (advanced, case)


def streits_simple_decider(fcfs: int, sjf: int, ljf: int) -> str:
    """The simple decider as Streit's pseudo-code writes it (section 3.2)."""
    if sjf <= ljf:
        return "fcfs" if fcfs <= sjf else "sjf"
    return "fcfs" if fcfs <= ljf else "ljf"


@pytest.mark.parametrize("current", [F, S, L])
def test_the_simple_decider_is_streits_pseudo_code_for_every_ordering_of_the_qualities(current: str) -> None:
    for fcfs, sjf, ljf in itertools.product((1, 2, 3), repeat=3):
        choice, _ = switch_to_best_policy("simple", Fraction(fcfs), Fraction(sjf), Fraction(ljf), current)
        assert choice == streits_simple_decider(fcfs, sjf, ljf), (fcfs, sjf, ljf, current)


def test_qualities_are_compared_exactly() -> None:
    # 1/3 and 0.1 + ... would tie in floats one way or the other; Fractions tie only when equal
    third = Fraction(1, 3)
    assert switch_to_best_policy("advanced", third, third, third + Fraction(1, 10**15), S) == (S, "6b")


# ---------------------------------------------------------------------------------------------
# Virtual schedules and their quality


def waiting(*jobs: tuple[int, int, int]) -> list[WaitingJob]:
    """Waiting jobs (submit, size, t_est), ids 1, 2, ...; t_req = t_est."""
    return [WaitingJob(i, i + 1, submit, size, t_est, t_est) for i, (submit, size, t_est) in enumerate(jobs)]


def test_a_virtual_schedule_places_each_job_at_its_earliest_slot_in_the_order_given() -> None:
    # 10 processors; running jobs leave 2 free now (t=100), 6 free from 150 and 10 from 300.
    base = Profile(100, 2, [(150, 4), (300, 4)])
    jobs = waiting((0, 2, 100), (10, 7, 100), (20, 4, 40), (30, 1, 10))
    # Job 1 (2 procs) takes the 2 free now: [100, 200). Job 2 (7): 4 are free in [150, 200), 6 in [200, 300) (job 1
    # has ended), 10 from 300: it takes [300, 400). Job 3 (4 procs, 40 s) fits in [150, 190). Job 4 (1 proc):
    # nothing is free until 190, then [190, 200) has 4.
    assert virtual_starts(base, jobs) == [100, 300, 150, 190]
    assert base.times == [100, 150, 300]  # the base is left as it was
    assert base.free == [2, 6, 10]


@pytest.mark.parametrize("backfill", ["conservative", "replan"])
def test_a_planning_backfill_s_virtual_schedule_is_a_dry_run_of_its_pass(backfill: str) -> None:
    # 10 processors. At 0: R (8 procs) starts for 100 s (t_est), W1 (6) is reserved after it at 100. At 50, R ends
    # early and two jobs arrive: X (2 procs, 300 s) and Y (4, 30 s).
    strategy = make_backfill(backfill)
    machine = ProcessorPool(10)
    r, w1 = WaitingJob(0, 1, 0, 8, 100, 100), WaitingJob(1, 2, 0, 6, 40, 40)
    assert strategy.select(0, [r, w1], machine) == [r]
    machine.start(r, 0)
    strategy.forget(r)
    machine.finish(0)
    x, y = WaitingJob(2, 3, 50, 2, 300, 300), WaitingJob(3, 4, 50, 4, 30, 30)
    # Every order moves W1 up to 50 (compression, or the rebuilt plan); X and Y share the 4 processors left then:
    # X first leaves Y 2 processors until W1 ends at 90; Y first (ends at 80) makes X wait until 80.
    orders = {"w1 x y": [w1, x, y], "w1 y x": [w1, y, x], "y w1 x": [y, w1, x]}
    plans = {name: strategy.plan(50, order, machine) for name, order in orders.items()}
    assert plans == {"w1 x y": [50, 50, 90], "w1 y x": [50, 50, 80], "y w1 x": [50, 50, 80]}
    for name, order in orders.items():  # nothing was changed: each dry run starts from the same plan
        assert strategy.plan(50, order, machine) == plans[name]
    assert strategy.select(50, orders["w1 x y"], machine) == [w1, x]  # the pass makes the plan of its order


def test_quality_metrics_of_a_virtual_schedule_worked_out_by_hand() -> None:
    # The LJF step of EPISODES below, from an empty machine at 0: S1 (1 proc, 50 s) and S2 (1 proc, 60 s) fit
    # beside each other, L (10 procs, 100 s) beside nothing. Submitted at -1: response = end + 1.
    s1, big, s2 = waiting((-1, 1, 50), (-1, 10, 100), (-1, 1, 60))
    base = Profile(0, 10, [])
    plans = {"fcfs": [s1, big, s2], "sjf": [s1, s2, big], "ljf": [big, s2, s1]}
    starts_by_policy = {policy: virtual_starts(base, jobs) for policy, jobs in plans.items()}
    # FCFS: S1 at 0, L after it at 50, S2 (60 s would overlap L) after L at 150.
    # SJF: S1 and S2 at 0, L at 60. LJF: L at 0, S2 and S1 at 100.
    assert starts_by_policy == {"fcfs": [0, 50, 150], "sjf": [0, 0, 60], "ljf": [0, 100, 100]}
    ends = {"fcfs": (50, 150, 210), "sjf": (50, 60, 160), "ljf": (100, 160, 150)}
    for policy, jobs in plans.items():
        chosen = starts_by_policy[policy]
        end = ends[policy]
        widths = [job.size for job in jobs]
        responses = [e + 1 for e in end]
        assert average_response(jobs, chosen, 0) == Fraction(sum(responses), 3)
        assert response_weighted_by_width(jobs, chosen, 0) == Fraction(
            sum(w * r for w, r in zip(widths, responses, strict=True)), 12
        )
        areas = sum(job.size * job.t_est for job in jobs)  # 50 + 1000 + 60
        assert slowdown_weighted_by_area(jobs, chosen, 0) == Fraction(
            sum(w * r for w, r in zip(widths, responses, strict=True)), areas
        )
        assert makespan(jobs, chosen, 0) == max(end)
        assert makespan(jobs, chosen, 500) == 500  # a running job expected to end later ends the schedule
    artww = {policy: response_weighted_by_width(jobs, starts_by_policy[policy], 0) for policy, jobs in plans.items()}
    # width x response: FCFS 51 + 10 x 151 + 211, SJF 51 + 61 + 10 x 161, LJF 10 x 101 + 161 + 151
    assert artww == {"fcfs": Fraction(1772, 12), "sjf": Fraction(1722, 12), "ljf": Fraction(1322, 12)}


# ---------------------------------------------------------------------------------------------
# A workload in which each policy wins a step

# Three episodes on 10 processors, each opened by a blocker that holds the whole machine for 100 s; three jobs
# arrive a second later. While the blocker runs and when it ends, every order is planned from an equally empty
# machine, so the two decisions agree. (With EASY or no backfilling there is no pass while the machine is full:
# the first decision of an episode is at the blocker's end.)
# 1. At 1: A (10 procs, 30 s), B (10, 10 s), C (10, 20 s). All run one after another; SJF (B, C, A) has the
#    least ARTwW (ends 10, 30, 60 after the blocker, against FCFS 30, 40, 60 and LJF 30, 50, 60): case 2.
#    At 110 (B has ended) A and C wait: SJF (C, A) beats FCFS = LJF (A, C): case 7, SJF stays.
#    Starts: B 100, C 110, A 130.
# 2. At 1001: a (4 procs, 10 s), b (6, 30 s), c (1, 20 s). FCFS: a and b at once, c after a: sum of width x end
#    4x10 + 6x30 + 1x30 = 250. SJF (a, c, b): a and c at once, b (6) only after a: 40 + 20 + 6x40 = 300.
#    LJF (b, c, a): b and c at once, a (4) only after c: 180 + 20 + 4x30 = 320. FCFS wins: case 3.
#    Starts: a, b 1100, c 1110.
# 3. At 2001: S1 (1 proc, 50 s), L (10, 100 s), S2 (1, 60 s): LJF wins (test_quality_metrics_... above):
#    case 4c (FCFS > SJF > LJF). At 2200, L has ended and S1, S2 wait: they start together in every order,
#    all schedules are equal (case 1): the advanced decider keeps LJF, the simple decider takes FCFS.
#    Starts: L 2100, S1 and S2 2200.
EPISODES: list[Spec] = [
    (0, 10, 100, 100),
    (1, 10, 30, 30),
    (1, 10, 10, 10),
    (1, 10, 20, 20),
    (1000, 10, 100, 100),
    (1001, 4, 10, 10),
    (1001, 6, 30, 30),
    (1001, 1, 20, 20),
    (2000, 10, 100, 100),
    (2001, 1, 50, 50),
    (2001, 10, 100, 100),
    (2001, 1, 60, 60),
]
EPISODE_STARTS = [0, 130, 100, 110, 1000, 1100, 1100, 1110, 2000, 2200, 2100, 2200]
#: Decisions: conservative backfilling passes at every arrival and completion with >= 2 jobs waiting:
#: 1, 100, 110 (episode 1); 1001, 1100 (2); 2001, 2100, 2200 (3). Its virtual schedules are its own plan, in which
#: the jobs of an episode were placed when they arrived; as every job ends when planned nothing is compressed
#: later, so the orders differ only at the arrivals (1, 1001, 2001) and the other five decisions are case 1.
#: Without a pass on a full machine (none, EASY): 100, 110, 1100, 2100, 2200, each planned afresh.
EPISODE_CASES = {
    "conservative": {"2_7": 1, "3_9": 1, "4c": 1, "1": 5},
    "easy": {"2_7": 2, "3_9": 1, "4c": 1, "1": 1},
    "none": {"2_7": 2, "3_9": 1, "4c": 1, "1": 1},
}


@pytest.mark.parametrize("backfill", ["none", "easy", "conservative"])
@pytest.mark.parametrize("decider", ["advanced", "simple"])
def test_each_policy_wins_a_step(backfill: str, decider: str) -> None:
    config = SimulationConfig(10, f"dynp:decider={decider}", backfill)
    result = simulate(job_table(EPISODES), config, LocalSession(make_estimator("request")))
    assert result.jobs["start"].tolist() == EPISODE_STARTS
    stats = result.dynp
    assert stats is not None
    cases = EPISODE_CASES[backfill]
    decisions = sum(cases.values())
    assert {case: count for case, count in stats["cases"].items() if count} == cases
    assert stats["decisions"] == decisions
    # the blockers start under the policy of the episode before: FCFS (initial), SJF, FCFS
    if decider == "advanced":
        assert stats["switches"] == {"fcfs": 1, "sjf": 1, "ljf": 1}
        assert stats["jobs_started"] == {"fcfs": 5, "sjf": 4, "ljf": 3}
    elif backfill == "conservative":  # every start is at a case-1 decision, where the simple decider takes FCFS
        assert stats["switches"] == {"fcfs": 2, "sjf": 1, "ljf": 1}
        assert stats["jobs_started"] == {"fcfs": 12, "sjf": 0, "ljf": 0}
    else:  # at 2200 (case 1) the simple decider takes FCFS for S1 and S2
        assert stats["switches"] == {"fcfs": 2, "sjf": 1, "ljf": 1}
        assert stats["jobs_started"] == {"fcfs": 7, "sjf": 4, "ljf": 1}
    assert stats["kept"] == decisions - sum(stats["switches"].values())
    backlog = {"conservative": [3, 3, 2, 3, 3, 3, 3, 2], "easy": [3, 2, 3, 3, 2], "none": [3, 2, 3, 3, 2]}[backfill]
    assert stats["mean_backlog"] == pytest.approx(sum(backlog) / len(backlog))


@pytest.mark.parametrize("backfill", ["none", "easy", "conservative"])
@pytest.mark.parametrize("policy", ["fcfs", "sjf", "ljf"])
def test_no_single_policy_starts_the_episodes_as_dynp_does(policy: str, backfill: str) -> None:
    assert starts(EPISODES, policy=policy, backfill=backfill) != EPISODE_STARTS


def test_virtual_schedules_use_the_estimates_the_mode_gives() -> None:
    # Episode 2 with every request at 100 s: planned with t_req, the three orders are the same (ties by submit),
    # so every decision is case 1. Planned with predictions equal to the runtimes (selective mode), FCFS wins at
    # the arrivals (at 100 the three jobs hold the reservations they got then: case 1).
    jobs: list[Spec] = [(0, 10, 100, 100), (1, 4, 100, 10), (1, 6, 100, 30), (1, 1, 100, 20)]
    predictions = {1: 100, 2: 10, 3: 30, 4: 20}
    cases = {}
    for mode in ("none", "selective"):
        config = SimulationConfig(10, "dynp", "conservative", mode)
        result = simulate(job_table(jobs), config, LocalSession(FixedEstimator(predictions)))
        assert result.dynp is not None
        cases[mode] = {case: count for case, count in result.dynp["cases"].items() if count}
    assert cases == {"none": {"1": 2}, "selective": {"3_9": 1, "1": 1}}


# ---------------------------------------------------------------------------------------------
# Basic dynP


def basic_decision(
    t_ests: list[int], submitted: bool = True, completed: bool = False, spec: str = "dynp:variant=basic"
) -> str:
    """The policy basic dynP (by default 7200 s / 9000 s) takes with jobs of these estimates waiting."""
    policy = make_queue_policy(spec)
    assert isinstance(policy, BasicDynP)
    for index, t_est in enumerate(t_ests):
        policy.add(WaitingJob(index, index + 1, 0, 1, t_est, t_est))
    policy.decide(0, QueueScheduler(policy, make_backfill("easy"), ProcessorPool(10)), submitted, completed)
    return policy.current


@pytest.mark.parametrize(
    ("t_ests", "expected"),
    [
        ([7200] * 5, "sjf"),  # average 7200 <= lower
        ([7200] * 4 + [7201], "fcfs"),  # 7200.2: above lower
        ([9000] * 5, "fcfs"),  # at upper
        ([9000] * 4 + [9001], "ljf"),  # 9000.2: above upper
        ([1, 1, 1, 1, 50000], "ljf"),  # the average, not the median
        ([60] * 4, "fcfs"),  # four jobs: below Streit's threshold of five, nothing is decided
    ],
)
def test_basic_dynp_switches_on_the_average_estimate_of_the_queue(t_ests: list[int], expected: str) -> None:
    assert basic_decision(t_ests) == expected


def test_basic_dynp_decides_at_submissions_only() -> None:
    assert basic_decision([60] * 5, submitted=False, completed=True) == "fcfs"
    assert basic_decision([60] * 5, submitted=True, completed=True) == "sjf"


@pytest.mark.parametrize(("lower", "upper", "expected"), [(60, 120, "fcfs"), (100, 120, "sjf"), (60, 99, "ljf")])
def test_basic_dynp_bounds_are_parameters(lower: int, upper: int, expected: str) -> None:
    spec = DynPSpec("basic", lower=lower, upper=upper).spec
    assert basic_decision([100] * 5, spec=spec) == expected


def test_basic_dynp_orders_the_queue_it_decided_on() -> None:
    # A blocker holds the machine until 100; five whole-machine jobs of 50, 40, 30, 20 and 10 s arrive at 1.
    # Average 30 s <= 7200: SJF, so conservative backfilling places them shortest first at the arrival's pass.
    # Completions never decide, and no job arrives after: that one decision is all.
    jobs: list[Spec] = [(0, 10, 100, 100)] + [(1, 10, t, t) for t in (50, 40, 30, 20, 10)]
    result = simulate(
        job_table(jobs),
        SimulationConfig(10, "dynp:variant=basic", "conservative"),
        LocalSession(make_estimator("request")),
    )
    assert result.jobs["start"].tolist() == [0, 200, 160, 130, 110, 100]
    assert result.dynp is not None
    assert (result.dynp["decisions"], result.dynp["switches"]["sjf"], result.dynp["mean_backlog"]) == (1, 1, 5.0)
    assert result.dynp["jobs_started"] == {"fcfs": 1, "sjf": 5, "ljf": 0}
    assert "cases" not in result.dynp


# ---------------------------------------------------------------------------------------------
# Invariants, and the scheduler never sees actual runtimes

DYNP_SPECS = [
    "dynp",
    "dynp:decider=simple",
    "dynp:quality=art",
    "dynp:quality=sldwa",
    "dynp:quality=makespan",
    "dynp:variant=basic,lower=100,upper=400",
]


@pytest.mark.parametrize("backfill", ["easy", "conservative", "replan"])
@pytest.mark.parametrize("policy", DYNP_SPECS)
@settings(max_examples=25, deadline=None)
@random_runs
def test_dynp_schedule_invariants_on_random_workloads(
    policy: str,
    backfill: str,
    workload: tuple[int, list[Spec], list[int]],
    estimator: str,
    mode: str,
    correction: str,
) -> None:
    table, result = simulate_random(SimulationConfig(1, policy, backfill, mode, correction), workload, estimator)
    assert result.dynp is not None
    assert sum(result.dynp["jobs_started"].values()) == len(table)


def test_invariants_with_self_tuning_dynp_over_the_kth_trace(traces_dir: Path) -> None:
    from simulator.workloads.swf import read_swf

    trace = read_swf(traces_dir / "KTH-SP2-1996-2.1-cln.swf.gz")
    table = trace.jobs.iloc[:6000]
    for backfill in ("easy", "conservative"):
        session = session_for("request", table)
        config = SimulationConfig(trace.machine_procs(), "dynp", backfill)
        result = simulate(table, config, session)
        assert_schedule_invariants(table, result, session, config)
        assert result.dynp is not None
        assert all(count > 0 for count in result.dynp["switches"].values())  # every policy is taken at least once


def test_the_runtime_check_covers_dynp_and_would_catch_the_engine() -> None:
    # test_simulator.test_scheduler_modules_never_refer_to_actual_runtimes runs on SCHEDULER_MODULES: dynP's virtual
    # schedules are among them, and the same check finds the engine's actual runtimes.
    assert simulator.dynp in SCHEDULER_MODULES
    assert not names_in_code(simulator.dynp) & RUNTIME_NAMES
    assert names_in_code(engine) & RUNTIME_NAMES == {"_runtime", "t_act", "FinishedJob"}


# ---------------------------------------------------------------------------------------------
# Output


def test_simulate_reports_dynp_and_the_weighted_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.workloads.swf import write_swf
    from simulator.workloads.synthetic import generate_workload

    trace = tmp_path / "small.swf"
    write_swf(generate_workload(jobs=400, procs=64, load=0.9, seed=3), str(trace))
    out = tmp_path / "summary.json"
    assert (
        main(["simulate", "--trace", str(trace), "--policy", "dynp", "--backfill", "conservative", "--json", str(out)])
        == 0
    )
    summary = json.loads(out.read_text())
    assert summary["policy"] == "dynp:variant=self-tuning,decider=advanced,quality=artww"
    dynp = summary["dynp"]
    assert set(dynp) == {"decisions", "kept", "switches", "jobs_started", "mean_backlog", "cases"}
    assert sum(dynp["jobs_started"].values()) == summary["jobs"]
    assert dynp["decisions"] == dynp["kept"] + sum(dynp["switches"].values()) == sum(dynp["cases"].values())
    assert summary["artww"] > 0 and summary["sldwa"] >= 1
    assert "dynP" in capsys.readouterr().out
    assert main(["simulate", "--trace", str(trace), "--policy", "ljf", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["dynp"] is None


def test_artww_and_sldwa_worked_out_by_hand() -> None:
    # A: 2 procs, no wait, 10 s. B: 4 procs, waits 10 s, runs 5 s. C: 1 proc, waits 5 s, runs 0 s.
    jobs = pd.DataFrame(
        {"submit": [0, 0, 0], "wait": [0, 10, 5], "run": [10, 5, 0], "size": [2, 4, 1], "t_req": [10, 10, 10]}
    ).assign(end=lambda table: table["submit"] + table["wait"] + table["run"])
    metrics = scheduling_metrics(jobs, 8, "fcfs")
    # ARTwW: width x response (2 x 10 + 4 x 15 + 1 x 5) over the widths (7).
    assert metrics["artww"] == pytest.approx(85 / 7)
    # SLDwA: area x slowdown (20 x 1 + 20 x 3 + 0 x 5) over the areas (20 + 20 + 0): C ran for nothing, weighs nothing.
    assert metrics["sldwa"] == pytest.approx(80 / 40)
    dynamic = scheduling_metrics(jobs, 8, "dynp:variant=self-tuning,decider=advanced,quality=artww")
    assert np.isnan(dynamic["weighted_wait"])  # dynP mixes policies whose scores have different units
    assert {key: value for key, value in dynamic.items() if key != "weighted_wait"} == {
        key: value for key, value in metrics.items() if key != "weighted_wait"
    }


@pytest.mark.slow
def test_evaluate_runs_dynp_beside_the_static_policies_at_each_load(tmp_path: Path) -> None:
    from simulator.evaluation.execution import run_evaluation
    from simulator.evaluation.plan import Backend, EvaluationPlan, TraceInput, split_policies
    from simulator.workloads.synthetic import generate_workload

    trace = TraceInput("small", generate_workload(jobs=300, procs=64, load=0.7, seed=5), "generated")
    policies = split_policies("fcfs,ljf,dynp:quality=sldwa,dynp,dynp:variant=basic")
    assert policies == (
        "fcfs",
        "ljf",
        "dynp:variant=self-tuning,decider=advanced,quality=sldwa",
        "dynp:variant=self-tuning,decider=advanced,quality=artww",
        "dynp:variant=basic,lower=7200,upper=9000",
    )
    plan = EvaluationPlan(
        estimators=("last2",), policies=policies, backfills=("conservative",), modes=("regular",), load_factors=(1, 1.5)
    )
    run_evaluation([trace], plan, tmp_path, Backend(in_process=True), show_progress=False)
    results = pd.read_csv(tmp_path / "results.csv")
    assert len(results) == 5 * 2 * 2  # policy x load x (baseline, last2)
    dynamic = results["policy"].str.startswith("dynp")
    assert results.loc[dynamic, "dynp_decisions"].notna().all() and results.loc[~dynamic, "dynp_decisions"].isna().all()
    started = results.loc[dynamic, ["dynp_jobs_started_fcfs", "dynp_jobs_started_sjf", "dynp_jobs_started_ljf"]]
    assert (started.sum(axis=1) == 300).all()
    assert results[["artww", "sldwa"]].notna().all().all()
    assert "ARTwW" in (tmp_path / "report.md").read_text()
