"""The `slurm` scheduler's rules, each on a small cluster where it decides a start (simulator.slurmsched,
simulator.clusterreplay), and `tsched simulate --scheduler slurm` as a site runs it."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from kernel.errors import TraceError
from kernel.resources import ResourceRequest
from simulator.cluster import Cluster
from simulator.clusterconf import read_cluster_toml
from simulator.clusterreplay import (
    SLURM,
    ClusterReplay,
    queued_jobs,
    simulate_cluster,
    single_cpu_nodes,
    slurm_scheduler,
    sweep_phase,
)
from simulator.engine import SimulationConfig
from simulator.experiment import open_session
from simulator.workloads.sacctrequests import read_sacct_requests
from tsched.cli import main

CAPTURES = Path(__file__).parent / "data" / "slurm-22.05-cluster"
#: One job as (job id, submit, CPUs, limit, runtime, request).
Spec = tuple[int, int, int, int, int, ResourceRequest]


ONE_PARTITION = '[[partitions]]\nname = "all"\nnodes = "ALL"\ndefault = true'


def two_nodes(
    tmp_path: Path,
    parameters: str = "bf_interval=1,bf_resolution=1",
    partitions: str = ONE_PARTITION,
    scheduler: str = "",
) -> Cluster:
    """Two nodes of 4 CPUs (CR_CPU, no memory), one partition over both unless `partitions` says otherwise;
    `scheduler`: more lines of the [scheduler] table."""
    lines = ['name = "two"', 'select = "CR_CPU"', "[[nodes]]", 'names = "n[1-2]"', "cpus = 4", partitions]
    lines += ["[scheduler]", f'parameters = "{parameters}"', scheduler]
    path = tmp_path / "cluster.toml"
    path.write_text("\n".join(lines) + "\n")
    return read_cluster_toml(path)


def frame(specs: list[Spec]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "job_id": [spec[0] for spec in specs],
            "submit": [spec[1] for spec in specs],
            "user": 1,
            "group": 1,
            "t_req": [spec[3] for spec in specs],
            "procs": [spec[2] for spec in specs],
            "queue": 1,
            "executable": 1,
            "t_act": [min(spec[4], spec[3]) for spec in specs],
            "run": [spec[4] for spec in specs],
            "wait": 0,
        }
    )


def starts(cluster: Cluster, specs: list[Spec]) -> dict[int, int]:
    jobs = frame(specs)
    requests = {spec[0]: spec[5] for spec in specs}
    config = SimulationConfig(cluster.procs, backfill=SLURM)
    result = simulate_cluster(jobs, config, open_session("request", jobs), cluster, requests)
    return dict(zip(result.jobs["job_id"].tolist(), result.jobs["start"].tolist(), strict=True))


def cpus(count: int, *partitions: str, nodes: int | None = None) -> ResourceRequest:
    return ResourceRequest(nodes=nodes, max_nodes=nodes, tasks=count, partitions=partitions)


def reserved_node_case(limit: int) -> list[Spec]:
    """A holds 3 CPUs of n1 (expected until 101, ends at 100), B all of n2; C (3 CPUs on one node) reserves n1 from
    101; D asks 1 CPU for `limit` seconds: the one idle CPU is on the reserved node."""
    return [
        (1, 1, 3, 100, 99, cpus(3, nodes=1)),
        (2, 1, 4, 300, 299, cpus(4)),
        (3, 2, 3, 60, 59, cpus(3, nodes=1)),
        (4, 3, 1, limit, limit - 1, cpus(1)),
    ]


def test_a_reservation_holds_whole_nodes(tmp_path):
    """A processor pool would backfill D at once (at 100, 4 CPUs are free and C needs 3); Slurm's reservation
    holds all of n1, so D waits for A's end."""
    started = starts(two_nodes(tmp_path), reserved_node_case(200))
    assert started == {1: 1, 2: 1, 3: 100, 4: 100}


def test_the_window_edge_is_inclusive(tmp_path):
    """D ending exactly when C's reservation begins overlaps it; a second earlier, it fits."""
    assert starts(two_nodes(tmp_path), reserved_node_case(98))[4] == 100
    assert starts(two_nodes(tmp_path), reserved_node_case(97))[4] == 3


def test_a_job_that_does_not_fit_stops_its_partition_and_its_nodes(tmp_path):
    """J1 (both nodes of `a`) cannot start when Y leaves n2; J2 (partition `b`: n2 alone) may not take n2 in the
    main pass, though it fits: it waits for J1. With no backfill cycle in between, it starts when J1 ends."""
    partitions = (
        '[[partitions]]\nname = "a"\nnodes = "n[1-2]"\ndefault = true\n[[partitions]]\nname = "b"\nnodes = "n2"'
    )
    cluster = two_nodes(tmp_path, "bf_interval=3600,bf_resolution=1", partitions)
    specs = [
        (1, 1, 4, 1000, 19, cpus(4, "b")),  # Y: n2 until 20
        (2, 1, 4, 1000, 99, cpus(4, "a")),  # X: n1 until 100
        (3, 2, 8, 1000, 100, cpus(8, "a", nodes=2)),  # J1
        (4, 3, 1, 1000, 10, cpus(1, "b")),  # J2
    ]
    assert starts(cluster, specs) == {1: 1, 2: 1, 3: 100, 4: 200}


def test_a_submitted_job_starts_at_once_only_at_the_top_of_its_nodes(tmp_path):
    """A job submitted behind a waiting job of an overlapping partition waits for a pass (here the backfill
    cycle an hour on), even when it fits; one behind nothing starts on submission."""
    cluster = two_nodes(tmp_path, "bf_interval=3600,bf_resolution=1")
    specs = [
        (1, 1, 4, 1000, 500, cpus(4, nodes=1)),
        (2, 2, 8, 1000, 100, cpus(8, nodes=2)),
        (3, 3, 1, 1000, 100, cpus(1)),  # n2 is idle, but job 2 waits for it
    ]
    assert starts(cluster, specs) == {1: 1, 2: 501, 3: 601}


def test_backfill_cycles_run_only_when_something_changed(tmp_path):
    """With bf_interval=1 the scheduler does not wake every second of a long wait: a handful of rounds."""
    jobs = frame(reserved_node_case(200))
    cluster = two_nodes(tmp_path)
    queued, _ = queued_jobs(jobs, cluster, {spec[0]: spec[5] for spec in reserved_node_case(200)})
    config = SimulationConfig(cluster.procs, backfill=SLURM)
    replay = ClusterReplay(jobs, config, open_session("request", jobs), None, slurm_scheduler(cluster, queued, config))
    rounds = 0
    while replay.peek() is not None:
        replay.step()
        rounds += 1
    assert rounds <= 15


def test_jobs_past_their_limit_end_at_the_sweep(tmp_path):
    """A job that ran into its limit is killed by the first 30 s sweep after it; the sweep's phase comes from the
    trace's killed jobs (ends at 19 and 49 s: phase 19)."""
    specs = [
        (1, 0, 1, 60, 79, cpus(1)),  # killed in the trace: ended at 79
        (2, 0, 1, 60, 30, cpus(1)),
        (3, 10, 1, 60, 99, cpus(1)),  # ended at 109: phase 19
    ]
    jobs = frame(specs)
    assert sweep_phase(jobs) == 19
    config = SimulationConfig(8, backfill=SLURM)
    result = simulate_cluster(jobs, config, open_session("request", jobs), two_nodes(tmp_path), {})
    assert result.jobs["end"].tolist() == [79, 30, 79]  # job 3's limit is at 70: the sweep at 79 ends it


@pytest.mark.parametrize("mode", ["regular", "selective"])
def test_predictions_plan_jobs_that_run_past_their_limit_until_the_sweep(tmp_path, mode):
    """Under Slurm a job outlives its limit until the limit sweep: a correction of its predicted end must not
    treat that as an engine error (it did: AssertionError in regular mode); it is planned at its limit."""
    folder = CAPTURES / "fcfs-tight"
    out = tmp_path / "jobs.csv"
    arguments = ["simulate", "--trace", str(folder / "jobs.sacct"), "--cluster", str(folder / "slurm.conf")]
    options = ["--scheduler", "slurm", "--estimator", "last2", "--mode", mode, "--jobs-csv", str(out)]
    assert main([*arguments, *options]) == 0
    jobs = pd.read_csv(out)
    overran = jobs["end"] > jobs["start"] + jobs["t_req"]
    assert overran.any() and len(jobs) == 90  # some ran past their limit, as in Slurm, and all were replayed


def test_jobs_that_cannot_run_are_left_out_and_counted(tmp_path):
    specs = [(1, 0, 1, 60, 10, cpus(1, "nowhere")), (2, 0, 5, 60, 10, cpus(5, nodes=1)), (3, 0, 1, 60, 10, cpus(1))]
    jobs = frame(specs)
    config = SimulationConfig(8, backfill=SLURM)
    result = simulate_cluster(
        jobs, config, open_session("request", jobs), two_nodes(tmp_path), {s[0]: s[5] for s in specs}
    )
    assert result.jobs["job_id"].tolist() == [3]
    assert result.skipped == {"partition nowhere not in the cluster": 1, "does not fit its partition": 1}


def test_an_swf_trace_runs_on_one_cpu_nodes():
    cluster = single_cpu_nodes(12)
    assert cluster.procs == 12 and len(cluster.nodes) == 12 and cluster.nodes[0].name == "n01"


def test_the_sacct_requests_are_read_by_job_id():
    requests = read_sacct_requests(CAPTURES / "mixed" / "jobs.sacct")
    assert len(requests) == 90
    assert requests[16].gpus_per_node == 2 and requests[16].mem_per_node == 8192 and requests[16].partitions == ("gpu",)
    assert requests[3].exclusive


def test_a_malformed_request_names_its_line(tmp_path):
    path = tmp_path / "bad.sacct"
    path.write_text("JobIDRaw|ReqTRES|AllocTRES\n1|cpu=1,node=1|cpu=1\n2|cpu=x|cpu=1\n2.batch|cpu=y|\n")
    with pytest.raises(TraceError, match=r"bad.sacct: line 3: job 2: ReqTRES"):
        read_sacct_requests(path)


def test_the_command_replays_a_slurm_run(tmp_path, capsys):
    folder = CAPTURES / "mixed"
    out = tmp_path / "jobs.csv"
    code = main(
        [
            "simulate",
            "--trace",
            str(folder / "jobs.sacct"),
            "--cluster",
            str(folder / "slurm.conf"),
            "--scheduler",
            "slurm",
            "--jobs-csv",
            str(out),
        ]
    )
    assert code == 0
    jobs = pd.read_csv(out)
    assert {"job_id", "submit", "start", "wait"} <= set(jobs.columns) and len(jobs) == 90
    assert (jobs["wait"] == jobs["start"] - jobs["submit"]).all()
    assert "Slurm's main and backfill scheduler on nodes of 48 CPUs" in capsys.readouterr().out


def test_the_docs_toml_cluster_replays_as_its_slurm_conf(tmp_path):
    """docs/cluster.md's TOML example is the mixed run's cluster: the replay on it is the replay on slurm.conf."""
    page = (Path(__file__).parents[1] / "docs" / "cluster.md").read_text()
    toml = tmp_path / "mixed.toml"
    toml.write_text(re.search(r"```toml\n(.*?)```", page, re.S).group(1))
    folder = CAPTURES / "mixed"
    outputs = []
    for cluster in (toml, folder / "slurm.conf"):
        out = tmp_path / f"{cluster.suffix}.csv"
        arguments = ["simulate", "--trace", str(folder / "jobs.sacct"), "--cluster", str(cluster)]
        assert main([*arguments, "--scheduler", "slurm", "--jobs-csv", str(out)]) == 0
        outputs.append(pd.read_csv(out))
    pd.testing.assert_frame_equal(outputs[0], outputs[1])


def test_a_cluster_needs_the_slurm_scheduler(tmp_path, capsys):
    code = main(["simulate", "--cluster", str(CAPTURES / "mixed" / "slurm.conf")])
    assert code != 0
    assert "--scheduler slurm" in capsys.readouterr().err
