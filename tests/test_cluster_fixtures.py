"""The captured runs of a real Slurm (tests/data/slurm-22.05-*/) read and checked offline.

Each folder is one of tests/slurm/cluster_workloads.py's workloads as the
project's one-host Slurm 22.05 ran it: the slurm.conf it ran with and its own
view of it, the sacct output, and the scheduler's log of starts, ends and
planned starts. The checks (tests/slurm/checks.py) are the live test's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm.checks import Run, check_allocations, check_configuration, check_requests, replay_node_choices

from simulator.workloads.formats import read_trace

DATA = Path(__file__).parent / "data" / "slurm-22.05-cluster"
NAMES = ("fcfs", "fcfs-tight", "mixed")
RUNS = [DATA / name for name in NAMES] + [DATA.with_name(DATA.name + "-run2") / name for name in NAMES]


@pytest.fixture(params=RUNS, ids=lambda path: f"{path.parent.name}/{path.name}")
def run(request: pytest.FixtureRequest) -> Run:
    return Run(request.param)


def test_the_slurm_conf_reads_as_slurm_reported_it(run):
    check_configuration(run)


def test_requests_read_from_sacct_say_what_was_asked(run):
    check_requests(run)


def test_what_slurm_gave_fits_the_model(run):
    check_allocations(run)


def test_the_model_places_jobs_where_slurm_did(run):
    replay = replay_node_choices(run)
    assert replay.checked >= 5
    assert replay.differing == []
    assert replay.unplaceable == []


def test_a_job_fits_once_another_takes_the_other_split_of_its_cpus():
    """A CI run's mixed workload: Slurm's backfill gave job 44 (`-N 2 -n 12`, two empty 8-CPU nodes n1 and n3)
    4 CPUs on n1 and 8 on n3, the split the model makes among all the partition's nodes (n4, next to n3, had
    one CPU free), and started job 79 (4 CPUs) on n1 in the same second; among n1 and n3 alone the model splits
    8 and 4, so 79 fits only with the other split, and job 70 after it on n1 fits then too."""
    replay = replay_node_choices(Run(DATA.with_name("slurm-22.05-resplit") / "mixed"))
    assert replay.resplit == [79]
    assert replay.unplaceable == [] and replay.tied == [] and replay.differing == []


def test_starts_in_one_millisecond_are_placed_in_the_order_slurm_logged_them():
    """A CI run's multifactor workload: one backfill cycle started jobs 88 (4 CPUs on n1), 89 (12 on n1-n3) and
    28 (8 on n3-n4) in the same millisecond, in that order (priority order, not job order). Taken in job order,
    28 goes first and fits on n3 alone, and the model's nodes then part from Slurm's for eight jobs; in the
    log's order every start is the model's."""
    run = Run(DATA.with_name("slurm-22.05-priority-order") / "multifactor")
    replay = replay_node_choices(run)
    assert replay.checked + replay.backfilled == len(run.jobs) == 90
    assert replay.unplaceable == [] and replay.differing == [] and replay.completing == []
    assert replay.tied == [] and replay.resplit == []
    run.logged = {key: (when, key[1]) for key, (when, _) in run.logged.items()}  # ties in job order
    assert replay_node_choices(run).unplaceable == [28, 86, 77, 52, 24, 66, 34, 71]


def test_the_backfill_scheduler_chose_the_models_nodes():
    """A CI-machine run kept with every backfill cycle's plans (`plans.log.gz`): the backfill scheduler started 84
    of its 90 jobs, each on the nodes the model chooses off those its cycle held for the jobs ahead of it (30
    starts had some held); the main scheduler started the other 6. Without the held nodes the model would have
    chosen other nodes for 9 of them (8 only by leaving recently freed nodes out, counted as `completing`)."""
    run = Run(DATA.with_name("slurm-22.05-plans") / "fcfs")
    replay = replay_node_choices(run)
    assert (replay.checked, replay.backfilled) == (6, 84)
    assert replay.differing == [] and replay.completing == [] and replay.unplaceable == []
    assert run.held is not None and sum(bool(nodes) for nodes in run.held.values()) == 30
    run.held = dict.fromkeys(run.held, ())
    unheld = replay_node_choices(run)
    assert len(unheld.differing) + len(unheld.completing) == 9


def test_the_calendar_keeps_jobs_off_the_nodes_slurm_kept_them_off():
    """The multifactor run with a maintenance reservation of n5-n6 and n3 drained (tests/data/slurm-22.05-calendar):
    every start, by either scheduler, is on the model's nodes once the reserved nodes a job's limit overlaps and
    the drained node are left out (`reservations.txt`, the log's `update_node`); without them 13 choices differ."""
    run = Run(DATA.with_name("slurm-22.05-calendar") / "multifactor")
    replay = replay_node_choices(run)
    assert replay.checked + replay.backfilled == len(run.jobs) == 90
    assert replay.differing == [] and replay.completing == [] and replay.unplaceable == []
    run.reservations, run.node_states = (), []
    blind = replay_node_choices(run)
    assert len(blind.differing) + len(blind.completing) == 13


def test_the_sacct_reader_reads_the_runs(run):
    trace = read_trace(run.folder / "jobs.sacct")
    assert len(trace.jobs) == len(run.jobs)
    assert set(trace.jobs["job_id"]) == {job.id for job in run.jobs}
