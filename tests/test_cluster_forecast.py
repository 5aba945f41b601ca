"""`ForecastStart` on a site's nodes (issue 26): a server started with a cluster runs the `slurm` scheduler forward
on it for `backfill: "slurm"`, from each job's totals and partition; bad requests are INVALID_ARGUMENT naming the
field, and the server keeps serving. The cluster is the live mixed run's (tests/data): four CPU nodes and three
GPU nodes with two GPUs each, partitions `cpu` (n1-n4, default) and `gpu` (n4-n6)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from kernel.jobs import JobRequest
from kernel.resources import ResourceRequest
from predictor.forecasting import QueueState, Scheduler, StartedJob
from predictor.proto import pb, rpc
from predictor.service.codec import add_names, job_message
from predictor.service.server import start_server
from simulator.cluster import Cluster
from simulator.clusterconf import read_cluster
from simulator.clusterforecast import ClusterForwardSimulation
from simulator.forecast import FORWARD_SIMULATION
from tsched.cli import main
from tsched.cli.serving import start_forecaster

CLUSTER = Path(__file__).parent / "data" / "slurm-22.05-cluster" / "mixed" / "slurm.conf"
ON_NODES = Scheduler("fcfs", "slurm", "queue")
NOW = 10_000


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return read_cluster(CLUSTER)


def job(job_id: int, procs: int, t_req: int, **resources: int) -> JobRequest:
    return JobRequest(job_id, NOW - 500, 1, 1, t_req, procs, **resources)


#: A CPU job filling a node and a GPU job holding two GPUs run; waiting: two GPUs, four CPUs, and two whole GPU
#: nodes' GPUs (2 nodes x 2), each with its partition.
RUNNING = [(job(1, 8, 3_600), "cpu"), (job(2, 8, 3_600, gpus=2), "gpu")]
WAITING = [(job(3, 2, 1_200, gpus=2), "gpu"), (job(4, 4, 1_200), "cpu"), (job(5, 8, 600, nodes=2, gpus=4), "gpu")]


def state_of(procs: int, with_requests: bool = True) -> QueueState:
    requests = [
        ResourceRequest.from_totals(j.procs, j.nodes, j.memory_mb, j.gpus, bool(j.exclusive), partition)
        for j, partition in (*RUNNING, *WAITING)
    ]
    running = [StartedJob(j, NOW - 100) for j, _ in RUNNING]
    return QueueState(NOW, procs, running, [j for j, _ in WAITING], requests if with_requests else ())


def test_a_job_waits_for_the_gpus_its_nodes_have_not_for_free_processors(cluster: Cluster) -> None:
    forward = ClusterForwardSimulation(cluster)
    state = state_of(cluster.procs)
    forward.check(ON_NODES, state)
    # jobs 3 and 4 start now; job 5 needs two nodes with two free GPUs each, and only one GPU node is left until
    # job 3 ends (1,000 s: its estimate) or job 2 does (1,500 s from now)
    assert forward.starts(state, ON_NODES, [NOW + 1_500, NOW + 2_000], [1_000, 1_000, 500]) == [NOW, NOW, NOW + 1_000]
    # as processors only, the same jobs all start now: 18 of 48 CPUs are free
    pool = FORWARD_SIMULATION.starts(
        state_of(cluster.procs, False), Scheduler(), [NOW + 1_500, NOW + 2_000], [1_000] * 3
    )
    assert pool == [NOW, NOW, NOW]


def test_other_backfillings_run_on_a_pool(cluster: Cluster) -> None:
    forward = ClusterForwardSimulation(cluster)
    state = state_of(cluster.procs, False)
    ends, runtimes = [NOW + 1_500, NOW + 2_000], [1_000, 1_000, 500]
    for scheduler in (Scheduler(), Scheduler("sjf", "conservative")):
        forward.check(scheduler, state)
        assert forward.starts(state, scheduler, ends, runtimes) == FORWARD_SIMULATION.starts(
            state, scheduler, ends, runtimes
        )


def test_a_forecast_nobody_waits_for_stops(cluster: Cluster) -> None:
    class GoneError(Exception):
        pass

    def gone() -> None:
        raise GoneError

    with pytest.raises(GoneError):
        ClusterForwardSimulation(cluster).starts(state_of(cluster.procs), ON_NODES, [NOW + 1, NOW + 1], [1] * 3, gone)


def test_totals_become_a_request_as_slurm_reads_them() -> None:
    one_node = ResourceRequest.from_totals(4, nodes=1, memory_mb=8_000, gpus=2, partition="gpu")
    assert (one_node.nodes, one_node.mem_per_node, one_node.gpus, one_node.partitions) == (1, 8_000, 2, ("gpu",))
    spread = ResourceRequest.from_totals(8, nodes=2, memory_mb=8_000, gpus=4, exclusive=True)
    assert (spread.nodes, spread.max_nodes, spread.mem_per_cpu, spread.gpus_per_node) == (2, 2, 1_000, 2)
    assert spread.exclusive and spread.partitions == ()
    uneven = ResourceRequest.from_totals(3, nodes=2, gpus=3)
    assert (uneven.gpus, uneven.gpus_per_node) == (3, None)
    unsaid = ResourceRequest.from_totals(16, memory_mb=1_600)
    assert (unsaid.nodes, unsaid.mem_per_cpu, unsaid.mem_per_node) == (None, 100, None)


# --- through the service ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(cluster: Cluster) -> Iterator[str]:
    running, port = start_server(
        "127.0.0.1:0", default_estimators=["request"], start_forecaster=ClusterForwardSimulation(cluster)
    )
    yield f"127.0.0.1:{port}"
    running.stop(0).wait()


def request_of(procs: int = 48, backfill: str = "slurm", partitions: tuple[str, ...] = ()) -> pb.ForecastStartRequest:
    """The state above as a scheduler sends it: totals and partition names."""
    request = pb.ForecastStartRequest(now=NOW, machine_procs=procs, backfill=backfill, estimator="request")
    names = partitions or tuple(partition for _, partition in (*RUNNING, *WAITING))
    for (running, _), name in zip(RUNNING, names[: len(RUNNING)], strict=True):
        request.running.add(job=add_names(job_message(running), partition=name), start=NOW - 100)
    for (waiting, _), name in zip(WAITING, names[len(RUNNING) :], strict=True):
        request.waiting.append(add_names(job_message(waiting), partition=name))
    return request


def forecast(server: str, request: pb.ForecastStartRequest) -> pb.ForecastStartResponse:
    with grpc.insecure_channel(server) as channel:
        return rpc.PredictorStub(channel).ForecastStart(request, timeout=30)


def test_the_service_forecasts_on_the_clusters_nodes(server: str) -> None:
    answer = forecast(server, request_of())
    # requests as runtimes: job 5 waits for job 3, the first GPU job to end, which runs to its limit (1,200 s)
    # and is ended by Slurm's 30 s limit sweep (at 11,220)
    assert [(f.job_id, f.start, f.upper) for f in answer.forecasts] == [
        (3, NOW, NOW),
        (4, NOW, NOW),
        (5, NOW + 1_220, NOW + 1_220),
    ]
    pool = forecast(server, request_of(backfill="easy"))
    assert [f.start for f in pool.forecasts] == [NOW, NOW, NOW]


@pytest.mark.parametrize(
    ("request_message", "words"),
    [
        (request_of(procs=64), "machine_procs (64) is not the cluster's CPU count (48)"),
        (
            request_of(partitions=("cpu", "gpu", "gpu", "cpu", "big")),
            "waiting[2] cannot run on this cluster: partition",
        ),
        (request_of(partitions=("cpu", "nope", "gpu", "cpu", "gpu")), "running[1].job cannot run on this cluster"),
    ],
)
def test_requests_the_cluster_cannot_run_are_invalid_arguments(
    server: str, request_message: pb.ForecastStartRequest, words: str
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        forecast(server, request_message)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in raised.value.details()
    assert len(forecast(server, request_of()).forecasts) == 3  # and it keeps serving


def test_policy_and_order_are_the_sites_own_under_slurm(server: str) -> None:
    request = request_of()
    request.policy = "sjf"
    with pytest.raises(grpc.RpcError) as raised:
        forecast(server, request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "with backfill 'slurm' the waiting jobs are taken in the order given" in raised.value.details()


def test_a_server_without_a_cluster_says_how_to_give_one() -> None:
    assert start_forecaster(None) is FORWARD_SIMULATION
    running, port = start_server("127.0.0.1:0", default_estimators=["request"], start_forecaster=start_forecaster(None))
    try:
        with pytest.raises(grpc.RpcError) as raised:
            forecast(f"127.0.0.1:{port}", request_of())
    finally:
        running.stop(0).wait()
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tsched serve --cluster slurm.conf" in raised.value.details()


def test_serve_reads_the_cluster_it_is_given() -> None:
    forward = start_forecaster(str(CLUSTER))
    assert isinstance(forward, ClusterForwardSimulation)
    assert forward.cluster.procs == 48 and forward.cluster.scheduler.priority_type == "priority/basic"


def test_tsched_forecast_sends_partitions_by_name(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tsched forecast --backfill slurm`: the JSON's jobs name their partition, as `squeue` shows it."""

    def item(asked: JobRequest, partition: str) -> dict[str, object]:
        return {**asked._asdict(), "partition": partition}

    state = {
        "now": NOW,
        "machine_procs": 48,
        "running": [{**item(j, p), "start": NOW - 100} for j, p in RUNNING],
        "waiting": [item(j, p) for j, p in WAITING],
    }
    path = tmp_path / "queue.json"
    path.write_text(json.dumps(state))
    arguments = ["forecast", "--address", server, "--queue-state", str(path), "--estimator", "request"]
    assert main([*arguments, "--backfill", "slurm", "--json"]) == 0
    assert [row["start"] for row in json.loads(capsys.readouterr().out)["forecasts"]] == [NOW, NOW, NOW + 1_220]
    state["waiting"][2]["partition"] = 7  # type: ignore[index]
    path.write_text(json.dumps(state))
    assert main([*arguments, "--backfill", "slurm"]) == 2
    assert "waiting[2].partition must be a name, got 7" in capsys.readouterr().err

    # running jobs on their nodes (squeue's NodeList): one 4-CPU job on each of n1-n4 keeps a whole-node job waiting
    pinned = _one_per_node(True)
    running = [{**item(s.job, "cpu"), "start": s.start, "node_list": f"n{n}"} for n, s in enumerate(pinned.running, 1)]
    state = {**state, "running": running, "waiting": [item(pinned.waiting[0], "cpu")]}
    path.write_text(json.dumps(state))
    assert main([*arguments, "--backfill", "slurm", "--json"]) == 0
    assert [row["start"] for row in json.loads(capsys.readouterr().out)["forecasts"]] == [NOW - 100 + 3_600]
    state["running"][0]["node_list"] = "n[1-9]"  # type: ignore[index]
    path.write_text(json.dumps(state))
    assert main([*arguments, "--backfill", "slurm"]) == 2
    assert "running[0].node_list: range '1-9' in 'n[1-9]' names over 4 hosts" in capsys.readouterr().err


def test_a_forecasts_users_by_name_are_the_namespaces(server: str) -> None:
    """A scheduler that reports its users by name (as jobcomp and job_submit.lua do) is forecast with what the
    namespace learnt of them: alice's jobs ran 600 s of their hour, so last2 expects her running job to end
    500 s from now and the job behind it to start then; the same job from an unnamed user runs its request."""
    learnt = pb.ObserveCompletionsRequest(namespace="named")
    for index in range(3):
        asked = JobRequest(100 + index, 1_000 * index, -1, -1, 3_600, 8)
        completion = learnt.completions.add(end=1_000 * index + 600, runtime=600)
        completion.job.CopyFrom(add_names(job_message(asked), user="alice", account="physics"))
    with grpc.insecure_channel(server) as channel:
        rpc.PredictorStub(channel).ObserveCompletions(learnt, timeout=30)

    def start_behind(user: str | None) -> int:
        request = pb.ForecastStartRequest(now=NOW, machine_procs=48, namespace="named", estimator="last2")
        running = job_message(JobRequest(1, NOW - 200, 7, 7, 3_600, 48))
        if user:
            add_names(running, user=user, account="physics")
        request.running.add(job=running, start=NOW - 100)
        request.waiting.append(job_message(JobRequest(2, NOW - 50, 7, 7, 3_600, 48)))
        return forecast(server, request).forecasts[0].start

    assert start_behind("alice") == NOW + 500
    assert start_behind(None) == NOW + 3_500


def _memory_bound(sizes: list[int]) -> QueueState:
    """Running one-CPU jobs holding `sizes` MB each on one node of the `cpu` partition (16,000 MB a node), and one
    small job waiting."""
    requests = [ResourceRequest.from_totals(1, 1, size, partition="cpu") for size in sizes]
    running = [
        StartedJob(job(index + 1, 1, 3_600, nodes=1, memory_mb=size), NOW - 100) for index, size in enumerate(sizes)
    ]
    waiting = [job(20, 1, 600, nodes=1, memory_mb=100)]
    return QueueState(NOW, 48, running, waiting, [*requests, ResourceRequest.from_totals(1, 1, 100, partition="cpu")])


def test_running_jobs_that_fragment_otherwise_are_placed_again_biggest_first(cluster: Cluster) -> None:
    """Four 7,000 MB and four 9,000 MB jobs fill n1-n4 as Slurm placed them (one of each a node); placed again in
    the order given, two 7,000 MB jobs share a node and the 9,000 MB ones would not fit: the biggest go first."""
    state = _memory_bound([7_000] * 4 + [9_000] * 4)
    assert ClusterForwardSimulation(cluster).starts(state, ON_NODES, [NOW + 3_000] * 8, [600]) == [NOW + 3_000]


def test_a_running_job_no_placement_fits_is_forecast_once_room_frees(cluster: Cluster, server: str) -> None:
    """Five 9,000 MB jobs on four 16,000 MB nodes (a state no placement reproduces: where jobs run is not in
    it): the fifth starts once one ends, and the answer still comes; the small job fits beside them now."""
    state = _memory_bound([9_000] * 5)
    assert ClusterForwardSimulation(cluster).starts(state, ON_NODES, [NOW + 3_000] * 5, [600]) == [NOW]
    request = pb.ForecastStartRequest(now=NOW, machine_procs=48, backfill="slurm", estimator="request")
    for started in state.running:
        request.running.add(job=add_names(job_message(started.job), partition="cpu"), start=started.start)
    request.waiting.append(add_names(job_message(state.waiting[0]), partition="cpu"))
    assert [f.start for f in forecast(server, request).forecasts] == [NOW]


def test_a_partition_given_by_number_is_refused_under_slurm(server: str) -> None:
    request = request_of()
    request.waiting[0].ClearField("partition")
    request.waiting[0].queue = 3
    with pytest.raises(grpc.RpcError) as raised:
        forecast(server, request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "waiting[0].queue: with backfill 'slurm' a job names its partition" in raised.value.details()


# --- running jobs on their own nodes ------------------------------------------------------------


def _one_per_node(pinned: bool) -> QueueState:
    """Four 4-CPU jobs, one on each of n1-n4 (Slurm spread them so) when `pinned`; waiting, a whole-node job."""
    running = [StartedJob(job(number, 4, 3_600), NOW - 100) for number in range(1, 5)]
    requests = [
        ResourceRequest.from_totals(4, 1, partition="cpu", nodelist=(f"n{number}",) if pinned else ())
        for number in range(1, 5)
    ]
    waiting = job(9, 8, 1_200, exclusive=1)
    requests.append(ResourceRequest.from_totals(8, exclusive=True, partition="cpu"))
    return QueueState(NOW, 48, running, [waiting], requests)


def test_running_jobs_stay_on_the_nodes_they_run_on(cluster: Cluster) -> None:
    """On their own nodes, no node of `cpu` is idle until the first of them ends; placed again, two share a node
    and the whole-node job would start now, which Slurm could not do."""
    forward = ClusterForwardSimulation(cluster)
    ends = [NOW + 1_000, NOW + 2_000, NOW + 3_000, NOW + 4_000]
    for pinned, start in ((True, NOW + 1_000), (False, NOW)):
        state = _one_per_node(pinned)
        forward.check(ON_NODES, state)
        assert forward.starts(state, ON_NODES, ends, [600]) == [start]


def test_a_running_job_given_nodes_it_does_not_fit_on_is_placed_again(cluster: Cluster) -> None:
    """A node list that cannot hold the job (nine CPUs' worth on an 8-CPU node beside another job) is not a
    placement: the forecast places the running jobs again rather than start one late."""
    state = _one_per_node(True)
    crowded = [ResourceRequest.from_totals(4, 1, partition="cpu", nodelist=("n1",)) for _ in range(4)]
    state = QueueState(NOW, 48, state.running, state.waiting, [*crowded, *state.requests[4:]])
    assert ClusterForwardSimulation(cluster).starts(state, ON_NODES, [NOW + 1_000] * 4, [600]) == [NOW]


def test_the_service_keeps_running_jobs_on_their_node_lists(server: str) -> None:
    state = _one_per_node(True)
    request = pb.ForecastStartRequest(now=NOW, machine_procs=48, backfill="slurm", estimator="request")
    for number, started in enumerate(state.running, start=1):
        message = add_names(job_message(started.job), partition="cpu")
        request.running.add(job=message, start=started.start, node_list=f"n{number}")
    request.waiting.append(add_names(job_message(state.waiting[0]), partition="cpu"))
    # requests as runtimes: the running jobs end at their limit, 3,600 s after their start (on a limit sweep)
    assert [f.start for f in forecast(server, request).forecasts] == [NOW - 100 + 3_600]


@pytest.mark.parametrize(
    ("node_list", "words"),
    [
        ("n[1-9]", "running[0].node_list: range '1-9' in 'n[1-9]' names over 8 hosts (a job runs on no more"),
        ("n[1-", "running[0].node_list: '[' without ']'"),
        ("x9", "running[0].job cannot run on this cluster: node x9 not in the cluster"),
        ("n5", "running[0].job cannot run on this cluster: does not fit its partition"),
        ("n1,n1", "running[0].job: nodelist names a node twice: n1,n1"),
    ],
)
def test_node_lists_that_cannot_be_are_invalid_arguments(server: str, node_list: str, words: str) -> None:
    request = request_of()
    request.running[0].node_list = node_list
    with pytest.raises(grpc.RpcError) as raised:
        forecast(server, request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in raised.value.details()
    assert len(forecast(server, request_of()).forecasts) == 3  # and it keeps serving


def test_a_node_list_says_how_many_nodes_a_job_runs_on() -> None:
    pinned = ResourceRequest.from_totals(8, memory_mb=8_000, nodelist=("n1", "n2"))
    assert (pinned.nodes, pinned.max_nodes, pinned.mem_per_cpu, pinned.nodelist) == (2, 2, 1_000, ("n1", "n2"))
    single = ResourceRequest.from_totals(4, 1, memory_mb=2_000, nodelist=("n3",))
    assert (single.nodes, single.max_nodes, single.mem_per_node) == (1, 1, 2_000)
    with pytest.raises(ValueError, match="nodelist names 2 nodes, not the 3 the job runs on"):
        ResourceRequest.from_totals(8, 3, nodelist=("n1", "n2"))
    with pytest.raises(ValueError, match="nodelist names 1 nodes; nodes and max_nodes must be 1"):
        ResourceRequest(tasks=2, nodelist=("n1",))
