"""The generated site (simulator.workloads.sitegen): a cluster and jobs that Slurm's rules accept, at the load asked."""

from __future__ import annotations

import pandas as pd
import pytest

from kernel.errors import UsageError
from simulator.clusterreplay import SLURM, queued_jobs, simulate_cluster
from simulator.engine import SimulationConfig
from simulator.experiment import open_session
from simulator.workloads.sitegen import SiteWorkload, generate_site, node_counts, site_cluster
from simulator.workloads.synthetic import offered_load


@pytest.fixture(scope="module")
def site() -> SiteWorkload:
    return generate_site(nodes=60, jobs=1_500, days=3)


def test_the_cluster_has_three_kinds_of_nodes_in_three_partitions() -> None:
    cluster = site_cluster(200)
    assert node_counts(200) == {1: 160, 2: 10, 3: 30}
    assert [len(cluster.partition(name).nodes) for name in ("cpu", "bigmem", "gpu")] == [170, 10, 30]
    assert cluster.default_partition is not None and cluster.default_partition.name == "cpu"
    assert sum(node.gpus for node in cluster.nodes) == 30 * 4
    bigmem = set(cluster.partition("bigmem").nodes)
    assert bigmem <= set(cluster.partition("cpu").nodes)  # shared nodes, as sites' partitions share them
    assert not bigmem & set(cluster.partition("gpu").nodes)


def test_the_same_arguments_give_the_same_site(site: SiteWorkload) -> None:
    again = generate_site(nodes=60, jobs=1_500, days=3)
    pd.testing.assert_frame_equal(site.trace.jobs, again.trace.jobs)
    assert site.requests == again.requests


def test_every_job_fits_its_partition_and_the_load_is_near_the_target(site: SiteWorkload) -> None:
    jobs = site.trace.jobs
    queued, skipped = queued_jobs(jobs, site.cluster, site.requests)
    assert skipped == {} and len(queued) == len(jobs) == 1_500
    assert set(jobs["partition"]) == {1, 2, 3}
    load = offered_load(jobs["submit"], jobs["procs"], jobs["t_act"], site.cluster.procs)
    assert 0.6 < load < 0.9


def test_jobs_below_a_node_share_it_and_larger_ones_take_whole_nodes(site: SiteWorkload) -> None:
    requests = site.requests.values()
    shared = [r for r in requests if not r.exclusive]
    whole = [r for r in requests if r.exclusive]
    assert shared and whole
    assert all(r.nodes is None and r.mem_per_cpu for r in shared)
    assert all(r.nodes and r.tasks and r.tasks % r.nodes == 0 for r in whole)
    assert all(r.gpus_per_node == 4 for r in whole if r.partitions == ("gpu",))


@pytest.mark.slow
def test_the_slurm_scheduler_replays_a_small_site(site: SiteWorkload) -> None:
    small = generate_site(nodes=30, jobs=300, days=0.5)
    jobs = small.trace.jobs
    config = SimulationConfig(small.cluster.procs, backfill=SLURM)
    result = simulate_cluster(jobs, config, open_session("request", jobs), small.cluster, small.requests)
    assert len(result.jobs) == 300 and not result.skipped
    assert (result.jobs["wait"] >= 0).all()
    assert result.jobs["priority"].nunique() > 1  # priority/multifactor ranked them (fair-share between projects)


def test_a_site_too_small_for_every_kind_of_node_is_refused() -> None:
    with pytest.raises(UsageError, match="at least 20"):
        generate_site(nodes=5, jobs=10)
