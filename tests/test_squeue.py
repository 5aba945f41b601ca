"""`tsched forecast --squeue`: a queue as a real Slurm 22.05 showed it (tests/data/slurm-22.05-squeue, captured on
the one-host cluster with the command `sites.squeue.SQUEUE_COMMAND` by `python -m slurm.squeue_capture`;
`squeue-start.txt` is Slurm's own `squeue --start` beside it) read into a forecast's state, forecast on the
cluster's nodes, and bad lines refused naming the line and field.

The cluster: n1-n4 with 4 CPUs and 4,000 MB each, two GPUs on n3 and n4; partitions `cpu` (n1-n3, default) and
`gpu` (n3-n4), MaxTime 60 minutes. Running: job 1 (4 CPUs, --mem=2000, 30 min) on n1, job 2 (8 CPUs on exactly 2
nodes, --mem-per-cpu=500, 20 min) on n2-n3, job 3 (2 CPUs, --gres=gpu:2, 15 min) on n4. Pending, in priority
order: 4 (--gpus=2, 10 min), 5 (12 CPUs --exclusive, 25 min), 6 (4 CPUs on 2 nodes, --gres=gpu:1, 5 min), 7 (a
day: over the partition's MaxTime, PartitionTimeLimit), 8 (2 CPUs in the default partition, 45 min), array 9_[1-3]
(1 CPU, 5 min).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel.errors import UsageError
from predictor.forecasting import Scheduler
from predictor.service.codec import forecast_question, forecast_request
from predictor.service.server import start_server
from simulator.cluster import Cluster
from simulator.clusterconf import read_cluster
from simulator.clusterforecast import ClusterForwardSimulation
from sites.squeue import SQUEUE_COMMAND, SQUEUE_FIELDS, SlurmQueue, read_squeue
from tsched.cli import main

CAPTURE = Path(__file__).parent / "data" / "slurm-22.05-squeue"
ON_NODES = Scheduler("fcfs", "slurm", "queue")
#: Slurm ends a job that reaches its limit at its next 30 s sweep (which tsched plays out), and its backfill plan
#: rounds the start down to bf_resolution (60 s, which squeue --start shows): the two may differ by both.
SWEEP = 30
RESOLUTION = 60


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return read_cluster(CAPTURE / "slurm.conf")


@pytest.fixture(scope="module")
def now() -> int:
    return int((CAPTURE / "now.txt").read_text())


@pytest.fixture(scope="module")
def queue(cluster: Cluster, now: int) -> SlurmQueue:
    return read_squeue((CAPTURE / "squeue.txt").read_text(), "squeue.txt", now, cluster)


def test_the_queue_reads_as_slurm_showed_it(queue: SlurmQueue, cluster: Cluster) -> None:
    state = queue.state
    assert [started.job.job_id for started in state.running] == [1, 2, 3]
    assert [job.job_id for job in state.waiting] == [4, 5, 6, 8, 9, 9, 9]
    assert queue.labels == ["4", "5", "6", "8", "9_1", "9_2", "9_3"]
    assert queue.left_out == {"7": "PartitionTimeLimit"}
    assert state.procs == cluster.procs == 16
    requests = dict(zip([1, 2, 3, 4, 5, 6, 8], state.requests, strict=False))
    assert (requests[1].mem_per_node, requests[1].tasks) == (2_000, 4)
    assert [requests[number].nodelist for number in (1, 2, 3, 4)] == [("n1",), ("n2", "n3"), ("n4",), ()]
    assert (requests[2].nodes, requests[2].max_nodes, requests[2].mem_per_cpu) == (2, 2, 500)
    assert requests[3].gpus == 2 and requests[3].partitions == ("gpu",) and requests[3].qos == "normal"
    assert requests[5].exclusive and requests[5].tasks == 12
    assert (requests[6].nodes, requests[6].gpus_per_node) == (2, 1)
    assert requests[8].partitions == ("cpu",)
    job = state.waiting[1]
    assert (job.t_req, job.procs, job.exclusive, job.memory_mb) == (25 * 60, 12, 1, 4_000)
    assert {(0, "user", "root"), (0, "queue", "cpu"), (2, "queue", "gpu"), (0, "qos", "normal")} <= set(state.names)
    assert all(0 < start - state.now < 3_600 for start in queue.planned if start is not None)


def test_the_forecast_on_the_nodes_keeps_to_slurms_own_plan(queue: SlurmQueue, cluster: Cluster, now: int) -> None:
    """With requests as runtimes (what Slurm plans with), the jobs Slurm planned one by one start when Slurm
    planned them, within a limit sweep; the array's first task backfills where Slurm planned the array as one."""
    state = queue.state
    forward = ClusterForwardSimulation(cluster)
    forward.check(ON_NODES, state)
    ends = [started.start + started.job.t_req for started in state.running]
    starts = forward.starts(state, ON_NODES, ends, [job.t_req for job in state.waiting])
    for job, ours, slurms in list(zip(state.waiting, starts, queue.planned, strict=True))[:4]:
        assert slurms is not None and abs(ours - slurms) <= SWEEP + RESOLUTION, job.job_id
    assert starts[4] < queue.planned[4]  # type: ignore[operator]


def test_the_command_line_forecasts_a_squeue_capture(
    cluster: Cluster, now: int, capsys: pytest.CaptureFixture[str]
) -> None:
    running, port = start_server(
        "127.0.0.1:0", default_estimators=["request"], start_forecaster=ClusterForwardSimulation(cluster)
    )
    asked = ["forecast", "--address", f"127.0.0.1:{port}", "--squeue", str(CAPTURE / "squeue.txt")]
    asked += ["--now", str(now), "--backfill", "slurm"]
    arguments = [*asked, "--cluster", str(CAPTURE / "slurm.conf")]
    try:
        assert main([*arguments, "--json", "-"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert main(arguments) == 0
        table = capsys.readouterr().out
        assert main(asked) == 2
        assert "--squeue needs --cluster" in capsys.readouterr().err
        assert main([*arguments, "--queue-state", "queue.json"]) == 2
        assert "one of --queue-state FILE.json or --squeue FILE" in capsys.readouterr().err
        assert main([*arguments[:3], "--queue-state", "queue.json", "--now", "5"]) == 2
        assert "--cluster and --now go with --squeue" in capsys.readouterr().err
    finally:
        running.stop(0).wait()
    assert [row["job_id"] for row in answer["forecasts"]] == [4, 5, 6, 8, 9, 9, 9]
    assert answer["left_out"] == {"7": "PartitionTimeLimit"}
    assert [row["job"] for row in answer["forecasts"]][-3:] == ["9_1", "9_2", "9_3"]
    assert all(abs(row["start"] - row["slurm"]) <= SWEEP + RESOLUTION for row in answer["forecasts"][:4])
    assert "slurm" in table.splitlines()[1] and "left out: job 7 (PartitionTimeLimit)" in table


def _line(**changes: str) -> str:
    """The capture's first pending line with some fields changed."""
    first = next(line for line in (CAPTURE / "squeue.txt").read_text().splitlines() if "|PENDING|" in line)
    row = dict(zip(SQUEUE_FIELDS, first.split("|"), strict=True))
    return "|".join({**row, **changes}.values())


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("4|N/A|PENDING|gpu", f"squeue.txt, line 1: 4 fields, not the {len(SQUEUE_FIELDS)} of the command"),
        (_line(SubmitTime="2026-12-07T03:31:27"), "line 1: SubmitTime '2026-12-07T03:31:27': not Unix seconds (run"),
        (_line(State="COMPLETING"), "line 1: State 'COMPLETING': not RUNNING or PENDING"),
        (_line(TimeLimit="soon"), "line 1: TimeLimit 'soon': 'soon' is not a time limit"),
        (_line(**{"tres-alloc": "cpu=two"}), "line 1: tres-alloc 'cpu=two':"),
        (_line(TimeLimit="UNLIMITED", Partition="big"), "line 1: Partition 'big': 'big' is not a partition of the"),
        (_line(State="RUNNING", NodeList="n[1-3]"), "line 1: NodeList 'n[1-3]': range '1-3' in 'n[1-3]' names over 2"),
        (_line(State="RUNNING", NodeList="n[1-"), "line 1: NodeList 'n[1-': '[' without ']'"),
        (_line(State="RUNNING", NodeList="n1,n2"), "line 1: NodeList 'n1,n2': nodelist names 2 nodes, not the 1 the"),
    ],
)
def test_lines_squeue_could_not_print_are_refused_naming_the_field(cluster: Cluster, text: str, words: str) -> None:
    with pytest.raises(UsageError) as raised:
        read_squeue(text, "squeue.txt", 0, cluster)
    assert words in str(raised.value)


def test_a_job_whose_tres_squeue_does_not_know_asks_for_its_cpus(cluster: Cluster) -> None:
    queue = read_squeue(_line(**{"tres-alloc": "N/A"}), "squeue.txt", 0, cluster)
    job = queue.state.waiting[0]
    assert (job.procs, job.nodes, job.memory_mb, job.gpus) == (2, 0, 0, 0)


def test_a_job_without_a_limit_runs_its_partitions_max_time(cluster: Cluster) -> None:
    queue = read_squeue(_line(TimeLimit="UNLIMITED"), "squeue.txt", 0, cluster)
    assert queue.state.waiting[0].t_req == 60 * 60


def test_the_service_rebuilds_the_requests_the_reader_made(queue: SlurmQueue) -> None:
    """What a forecast through the service runs on is what one in-process runs on: the reader asks each job what
    its totals say, and the totals, names and partitions are what travels."""
    message = forecast_request(queue.state, ON_NODES, "site", "request")
    asked = forecast_question(message)
    assert asked.scheduler == ON_NODES and asked.draws == 0
    assert list(asked.state.requests) == list(queue.state.requests)
    assert sorted(asked.state.names) == sorted(queue.state.names)


@pytest.mark.parametrize("reason", ["JobArrayTaskLimit", "QOSJobLimit", "Reservation", "Dependency", "JobHeldUser"])
def test_jobs_pending_for_what_the_scheduler_does_not_model_are_left_out(cluster: Cluster, reason: str) -> None:
    queue = read_squeue(_line(Reason=reason) + "\n" + _line(JobID="10"), "squeue.txt", 0, cluster)
    assert queue.left_out == {"4": reason}
    assert [job.job_id for job in queue.state.waiting] == [10]


@pytest.mark.parametrize("page", ["service.md", "deployment.md"])
def test_the_docs_give_the_command_the_reader_reads(page: str) -> None:
    assert SQUEUE_COMMAND in (Path(__file__).parents[1] / "docs" / page).read_text()
