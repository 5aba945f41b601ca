"""LJF, replan backfilling (Streit's CCS) and `Profile.place`: start times worked out by hand, and the invariants.

Unless a test says otherwise the machine has 10 processors, the estimator is `request` and the mode `none`.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_simulator import Spec, assert_schedule_invariants, job_table, run, session_for, starts, workloads

from simulator.backfill import Profile, make_backfill
from simulator.engine import SimulationConfig, simulate
from simulator.jobs import WaitingJob
from simulator.metrics import scheduling_metrics
from simulator.policies import LJF

# ---------------------------------------------------------------------------------------------
# LJF


def test_ljf_lists_the_longest_estimate_first_and_breaks_ties_as_sjf() -> None:
    queue = LJF()
    jobs = [
        WaitingJob(i, job_id, submit, 1, t_req, t_est)
        for i, (job_id, submit, t_req, t_est) in enumerate(
            [(1, 0, 100, 100), (2, 5, 900, 300), (3, 5, 300, 300), (4, 2, 300, 300), (5, 1, 50, 50)]
        )
    ]
    for job in jobs:
        queue.add(job)
    # 300 s three times: submit 2 (job 4) before submit 5, and at submit 5 job id 2 before 3; t_est, not t_req
    assert [job.job_id for job in queue.ordered(0)] == [4, 2, 3, 1, 5]


# The scenario of test_simulator.PROTECTED_JOBS: J1 (6 procs) runs [0, 100); J2 (8), J3 (9), J4 (2 procs, 1000 s),
# J5 (1 proc, 50 s) arrive at 1..4. LJF lists J4 first: without backfilling it starts at 3 (2 of 4 free), and
# then blocks the queue: J2 (8) starts at 100, J3 (9) cannot start beside J4 until J4 ends at 1003, and J5
# waits behind J3 (1 processor is left beside it). EASY backfills J5 at 4 (ends at 54, before the shadow).
# Conservative backfilling places each job as it arrives, whatever the order: as FCFS.
@pytest.mark.parametrize(
    ("backfill", "expected"),
    [("none", [0, 100, 1003, 3, 1003]), ("easy", [0, 100, 1003, 3, 4]), ("conservative", [0, 100, 200, 300, 4])],
)
def test_ljf_starts_worked_out_by_hand(backfill: str, expected: list[int]) -> None:
    jobs = [(0, 6, 100, 100), (1, 8, 100, 100), (2, 9, 100, 100), (3, 2, 1000, 1000), (4, 1, 50, 50)]
    assert starts(jobs, policy="ljf", backfill=backfill) == expected


def test_ljf_weighted_wait_weighs_waits_with_the_request() -> None:
    jobs = run([(0, 10, 100, 100), (0, 10, 300, 300), (0, 10, 200, 200)], policy="ljf", backfill="none")
    # LJF: 300 s at 0, 200 s at 300, 100 s at 500; waits 0, 300, 500 weighted by t_req 300, 200, 100
    assert jobs["start"].tolist() == [500, 0, 300]
    metrics = scheduling_metrics(jobs.reset_index(), 10, "ljf")
    assert metrics["weighted_wait"] == pytest.approx((0 * 300 + 300 * 200 + 500 * 100) / 600)


# ---------------------------------------------------------------------------------------------
# Replan: conservative backfilling with the plan rebuilt at every job end (Streit's CCS)

# J1 (5 procs) runs [0, 100); J2 (5 procs) asks for 100 s and ends at 50. L (10 procs, 300 s) arrives at 1 and is
# reserved [100, 400); S (10 procs, 10 s) arrives at 2 and, delaying no one, gets [400, 410). At 50 J2 ends early.
# Conservative backfilling compresses in SJF order: S cannot move before L (only 5 are free until 100), L keeps
# 100. Replan rebuilds the plan in the policy's order: under SJF, S takes [100, 110) and L moves later, to 110;
# under FCFS, L comes first and the plan is the same as before.
REPLANNED = [(0, 5, 100, 100), (0, 5, 100, 50), (1, 10, 300, 300), (2, 10, 10, 10)]


@pytest.mark.parametrize(
    ("policy", "backfill", "expected"),
    [
        ("sjf", "conservative", [0, 0, 100, 400]),
        ("sjf", "replan", [0, 0, 110, 100]),
        ("fcfs", "replan", [0, 0, 100, 400]),
        ("ljf", "replan", [0, 0, 100, 400]),
    ],
)
def test_replan_rebuilds_the_plan_in_the_policy_order_at_every_job_end(
    policy: str, backfill: str, expected: list[int]
) -> None:
    assert starts(REPLANNED, policy=policy, backfill=backfill) == expected


def test_replan_has_no_backfill_order() -> None:
    with pytest.raises(ValueError, match="nothing to act on under 'replan'"):
        make_backfill("replan", "sjf")


@pytest.mark.parametrize("backfill", ["easy", "conservative", "replan"])
@pytest.mark.parametrize("policy", ["fcfs", "sjf", "ljf"])
@settings(max_examples=25, deadline=None)
@given(
    workload=workloads(),
    estimator=st.sampled_from(["request", "oracle", "guess"]),
    mode=st.sampled_from(["none", "regular", "selective"]),
)
def test_ljf_and_replan_schedule_invariants_on_random_workloads(
    policy: str, backfill: str, workload: tuple[int, list[Spec], list[int]], estimator: str, mode: str
) -> None:
    procs, specs, guesses = workload
    table = job_table(specs)
    session = session_for(estimator, table, guesses)
    config = SimulationConfig(procs, policy, backfill, mode)
    assert_schedule_invariants(table, simulate(table, config, session), session, config)


# ---------------------------------------------------------------------------------------------
# Profile.place: one scan for the earliest slot, then the reservation


def test_place_reserves_the_same_slot_as_earliest_then_reserve() -> None:
    profile = Profile(0, 3, [(5, 2), (8, 5)])
    copy = profile.copy()
    for size, duration in [(4, 3), (2, 10), (10, 1), (1, 2), (5, 5)]:
        start = profile.earliest(profile.times[0], size, duration)
        profile.reserve(start, duration, size)
        assert copy.place(size, duration) == start
        assert (copy.times, copy.free) == (profile.times, profile.free)


@settings(max_examples=60, deadline=None)
@given(
    releases=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 4)), max_size=6),
    jobs=st.lists(st.tuples(st.integers(1, 16), st.integers(1, 40)), min_size=1, max_size=12),
)
def test_place_equals_earliest_then_reserve_on_random_profiles(
    releases: list[tuple[int, int]], jobs: list[tuple[int, int]]
) -> None:
    procs = 16
    free_now = procs - sum(size for _, size in releases)
    if free_now < 0:
        return
    profile = Profile(0, free_now, releases)
    copy = profile.copy()
    for size, duration in jobs:
        start = profile.earliest(0, size, duration)
        profile.reserve(start, duration, size)
        assert copy.place(size, duration) == start
        assert (copy.times, copy.free) == (profile.times, profile.free)
