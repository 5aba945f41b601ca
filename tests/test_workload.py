"""The synthetic workload: deterministic, the size and load asked for, and the regularities of real traces."""

from __future__ import annotations

import numpy as np
import pandas.testing as pdt
import pytest

from simulator.workloads.swf import read_swf, write_swf
from simulator.workloads.synthetic import (
    HOUR,
    MAX_WALLTIME,
    ROUND_WALLTIMES,
    UNIX_START_TIME,
    default_workload,
    generate_workload,
    offered_load,
)


def test_same_arguments_same_trace():
    a = generate_workload(jobs=1500, procs=64, load=0.6, seed=3)
    b = generate_workload(jobs=1500, procs=64, load=0.6, seed=3)
    pdt.assert_frame_equal(a.records, b.records)
    assert a.header == b.header


def test_another_seed_another_trace():
    a = generate_workload(jobs=1500, seed=3).records
    b = generate_workload(jobs=1500, seed=4).records
    assert not a[["submit", "run", "user"]].equals(b[["submit", "run", "user"]])


@pytest.mark.parametrize("jobs", [1, 37, 2000])
def test_requested_job_count_all_replayable(jobs):
    trace = generate_workload(jobs=jobs, procs=32, load=0.5, seed=1)
    assert len(trace.records) == len(trace.jobs) == jobs
    assert trace.skipped == {} and trace.malformed == {}
    assert trace.records["job"].tolist() == list(range(1, jobs + 1))
    assert (trace.records["submit"].diff().dropna() >= 0).all()


@pytest.mark.parametrize(("procs", "load", "seed"), [(128, 0.7, 7), (256, 0.9, 11), (64, 0.4, 5)])
def test_offered_load_meets_target(procs, load, seed):
    trace = generate_workload(jobs=3000, procs=procs, load=load, seed=seed)
    jobs = trace.jobs
    achieved = offered_load(jobs["submit"], jobs["procs"], jobs["t_act"], procs)
    assert achieved == pytest.approx(load, rel=0.15)
    assert f"achieved {achieved:.3f}" in "\n".join(trace.header.lines)


def test_records_fill_every_field(small_trace):
    records = small_trace.records
    assert (records["wait"] == 0).all()
    assert (records["alloc_procs"] == records["req_procs"]).all()
    assert (records["alloc_procs"].between(1, 128)).all()
    assert records["status"].isin([0, 1]).all()
    for unknown in ("avg_cpu", "used_mem", "req_mem", "preceding_job", "think_time"):
        assert (records[unknown] == -1).all()
    for known in ("user", "group", "executable", "queue", "partition"):
        assert (records[known] >= 1).all()


def test_header_sets_machine_and_calendar(small_trace):
    assert small_trace.machine_procs() == 128
    assert small_trace.header.unix_start_time == UNIX_START_TIME
    assert small_trace.header.time_zone_string == "UTC"
    assert small_trace.month_bounds()[0][0] == "2024-01"
    assert small_trace.path == "<generated>"


def test_requests_are_round_values_with_killed_jobs(small_trace):
    jobs = small_trace.jobs
    assert jobs["t_req"].isin(ROUND_WALLTIMES).all() and jobs["t_req"].max() <= MAX_WALLTIME
    assert jobs["t_req"].nunique() >= 5
    killed = jobs["run"] == jobs["t_req"]
    assert 0 < killed.mean() < 0.2
    assert (jobs.loc[killed, "status"] == 0).all()
    failed_early = (jobs["status"] == 0) & ~killed
    assert failed_early.any() and jobs.loc[failed_early, "t_act"].median() < 300


def test_users_have_their_own_overestimation_habits(small_trace):
    jobs = small_trace.jobs.assign(ratio=lambda j: j["t_act"] / j["t_req"])
    regular = jobs.groupby("user").filter(lambda g: len(g) >= 10)
    within_user = regular.groupby("user")["ratio"].std(ddof=0)
    weights = regular.groupby("user").size()
    assert np.average(within_user, weights=weights) < 0.9 * regular["ratio"].std(ddof=0)
    by_user_mean = regular.groupby("user")["ratio"].mean()
    assert by_user_mean.max() - by_user_mean.min() > 0.3


def test_applications_have_their_own_runtimes_and_sizes(small_trace):
    jobs = small_trace.jobs.assign(log_run=lambda j: np.log(j["t_act"]))
    regular = jobs.groupby("executable").filter(lambda g: len(g) >= 10)
    within_app = regular.groupby("executable")["log_run"].std(ddof=0).mean()
    assert within_app < 0.8 * regular["log_run"].std(ddof=0)
    usual_size = regular.groupby("executable")["procs"].agg(lambda s: (s == s.mode().iloc[0]).mean())
    assert usual_size.mean() > 0.7


def test_projects_group_users(small_trace):
    jobs = small_trace.jobs
    assert 2 <= jobs["group"].nunique() < jobs["user"].nunique()
    assert jobs.groupby("executable")["user"].nunique().max() == 1  # an application belongs to one user


def test_sizes_are_mostly_powers_of_two(small_trace):
    procs = small_trace.jobs["procs"].to_numpy()
    power_of_two = (procs & (procs - 1)) == 0
    assert 0.6 < power_of_two.mean() < 1.0


def test_daily_and_weekly_cycle():
    submit = generate_workload(jobs=4000, procs=128, load=0.7, seed=9).jobs["submit"].to_numpy()
    hour = (submit // HOUR) % 24
    day = (submit // (24 * HOUR)) % 7  # day 0 is Monday 2024-01-01
    office = np.isin(hour, range(9, 17)).sum() / 8
    night = np.isin(hour, range(6)).sum() / 6
    assert office > 3 * night
    weekday = np.isin(day, range(5)).sum() / 5
    weekend = np.isin(day, [5, 6]).sum() / 2
    assert weekend < 0.7 * weekday


def test_generated_trace_round_trips_through_swf(tmp_path, small_trace):
    write_swf(small_trace, tmp_path / "generated.swf")
    again = read_swf(tmp_path / "generated.swf")
    pdt.assert_frame_equal(again.records, small_trace.records)
    pdt.assert_frame_equal(again.jobs, small_trace.jobs)
    assert again.header == small_trace.header


def test_default_workload_is_a_few_months_on_a_few_hundred_processors():
    trace = default_workload()
    days = (trace.jobs["end"].max() - trace.jobs["submit"].min()) / 86400
    assert 60 < days < 120
    assert 200 <= trace.machine_procs() <= 512
    assert 10_000 <= len(trace.jobs) <= 16_000
    pdt.assert_frame_equal(trace.records, default_workload().records)


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [({"jobs": 0}, "--jobs"), ({"procs": 0}, "--procs"), ({"load": 0.0}, "--load"), ({"load": -1.0}, "--load")],
)
def test_invalid_arguments(arguments, complaint):
    with pytest.raises(ValueError, match=complaint):
        generate_workload(**arguments)
