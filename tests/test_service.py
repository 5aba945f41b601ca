"""The gRPC predictor service against a real server on a loopback port."""

from __future__ import annotations

import math
import queue
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from service_support import DAY, HeldEstimator, history, status_of, submissions, wait_for

from kernel.jobs import JOB_FIELD_NAMES, JOB_FIELDS, LEGACY_FIELD_COUNT, FinishedJob, JobRequest, Prediction
from predictor.estimators.baselines import RequestEstimator
from predictor.forecasting import QueueState
from predictor.proto import pb, rpc
from predictor.registry import make_estimator
from predictor.service import namespaces, records
from predictor.service.client import PredictorClient, PredictorError, predict_once
from predictor.service.codec import job_message, job_request, prediction_from, sync_request
from predictor.service.launcher import ServerProcess
from predictor.service.limits import Limits
from predictor.service.remote import RemoteSession
from predictor.service.server import PredictorServer, start_server
from predictor.service.servicer import SERVICE_NAME
from predictor.service.state import CompletionStore, StateError
from predictor.session import LocalSession
from simulator.engine import SimulationConfig, simulate
from simulator.experiment import run_simulation
from simulator.workloads.synthetic import generate_workload

PERCENTILE = "percentile"


def local_predictions(spec: str, finished: list[FinishedJob], jobs: list[JobRequest]) -> list[Prediction]:
    return LocalSession(make_estimator(spec)).sync(finished, jobs)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    running, port = start_server("127.0.0.1:0", default_estimators=[PERCENTILE, "request"])
    yield f"127.0.0.1:{port}"
    running.stop(0).wait()


@pytest.fixture
def client(server: str) -> Iterator[PredictorClient]:
    with PredictorClient(server, timeout=10) as connected:
        yield connected


@pytest.fixture
def stub(server: str) -> Iterator[rpc.PredictorStub]:
    """The generated stub, for requests the typed client would never send."""
    with grpc.insecure_channel(server) as channel:
        yield rpc.PredictorStub(channel)


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A namespace of the test's own, so tests sharing the server stay independent."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)


# --- every RPC ---------------------------------------------------------------------------------


def test_observe_then_predict_equals_in_process(client: PredictorClient, namespace: str) -> None:
    finished = history()
    assert client.observe(finished, namespace=namespace) == len(finished)
    at = finished[-1].end
    expected = local_predictions(PERCENTILE, finished, submissions(at))
    assert any(not p.fallback for p in expected)
    served = [
        client.predict(user=job.user, group=job.group, t_req=job.t_req, procs=job.procs, submit=at, namespace=namespace)
        for job in submissions(at)
    ]
    assert [s.prediction for s in served] == expected
    assert served[0].estimator == make_estimator(PERCENTILE).spec
    assert client.predict_batch(submissions(at), namespace=namespace) == expected


def test_predict_without_submit_uses_the_namespace_clock(client: PredictorClient, namespace: str) -> None:
    finished = history()
    client.observe(finished, namespace=namespace)
    served = client.predict(user=0, group=7, t_req=3600, procs=4, namespace=namespace)
    assert served.submit == finished[-1].end
    # A question about a later submission is answered at that time and moves nothing...
    later = client.predict(user=0, group=7, t_req=3600, procs=4, submit=finished[-1].end + DAY, namespace=namespace)
    assert later.submit == finished[-1].end + DAY
    assert client.predict(user=0, group=7, t_req=3600, procs=4, namespace=namespace).submit == finished[-1].end
    # ...while a submission (Sync) moves the clock.
    client.sync([], submissions(finished[-1].end + DAY, count=1), namespace=namespace)
    assert client.predict(user=0, group=7, t_req=3600, procs=4, namespace=namespace).submit == later.submit
    assert client.list_estimators(namespace).clock == later.submit


def test_predict_once_gives_the_cli_fields(server: str, client: PredictorClient, namespace: str) -> None:
    client.observe(history(), namespace=namespace)
    answer = predict_once(server, namespace, "", user=0, group=7, request=3600, procs=4).plain()
    assert {"t_sched", "factor", "estimator", "basis", "fallback"} <= answer.keys()
    assert answer["fallback"] is False and 1 <= answer["t_sched"] < 3600 and answer["basis"] >= 10
    with pytest.raises(PredictorError, match=r"request|t_req"):
        predict_once(server, namespace, "", user=0, group=7, request=0, procs=4)


def test_sync_learns_then_predicts_like_a_local_session(client: PredictorClient, namespace: str) -> None:
    finished = history(90)
    local = LocalSession(make_estimator("last2"))
    for chunk_start in range(0, 90, 30):
        chunk = finished[chunk_start : chunk_start + 30]
        jobs = submissions(chunk[-1].end)
        assert client.sync(chunk, jobs, namespace=namespace, estimator="last2") == local.sync(chunk, jobs)


def test_sync_stream_answers_like_sync(client: PredictorClient, namespace: str) -> None:
    finished = history(90)
    stream = client.sync_stream()
    try:
        for chunk_start in range(0, 90, 30):
            chunk = finished[chunk_start : chunk_start + 30]
            jobs = submissions(chunk[-1].end)
            request = sync_request(chunk, jobs, f"{namespace}-stream", "last2")
            streamed = [prediction_from(p) for p in stream.exchange(request, timeout=10).predictions]
            assert streamed == client.sync(chunk, jobs, namespace=f"{namespace}-unary", estimator="last2")
    finally:
        stream.close()


def test_a_refused_request_ends_the_stream_and_the_server_keeps_serving(
    client: PredictorClient, namespace: str
) -> None:
    stream = client.sync_stream()
    bad = pb.SyncRequest(namespace=namespace, submitted=[pb.Job(job_id=1, submit=5, user=1, group=1, procs=1)])
    code, details = status_of(lambda: stream.exchange(bad, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "submitted[0].t_req" in details
    assert stream.closed
    fresh = client.sync_stream()
    good = sync_request([], submissions(5, count=1), namespace, "request")
    assert fresh.exchange(good, timeout=10).predictions[0].t_sched == 3600
    fresh.close()


def test_resent_completions_are_not_learned_twice(client: PredictorClient, namespace: str) -> None:
    finished = history(30)
    assert client.observe(finished[:20], namespace=namespace) == 20
    assert client.observe(finished[15:], namespace=namespace) == 10
    assert client.list_estimators(namespace).completions == 30


def test_list_estimators_and_reset(client: PredictorClient, namespace: str) -> None:
    listing = client.list_estimators(namespace)
    names = {info.name: info for info in listing.estimators}
    assert {"request", "oracle", PERCENTILE} <= names.keys()
    assert names["oracle"].evaluation_only and not names["oracle"].allowed
    assert listing.default_specs[0] == make_estimator(PERCENTILE).spec
    assert not listing.namespace_exists
    client.observe(history(12), namespace=namespace)
    client.predict(user=0, group=7, t_req=3600, procs=4, namespace=namespace, estimator="last2")
    listing = client.list_estimators(namespace)
    assert listing.namespace_exists and listing.completions == 12
    assert "last2" in listing.namespace_specs
    assert client.reset_namespace(namespace) == 12
    assert not client.list_estimators(namespace).namespace_exists


def test_namespaces_are_kept_apart(client: PredictorClient, namespace: str) -> None:
    finished = history()
    client.observe(finished, namespace=namespace + "-a")
    at = finished[-1].end
    learned = client.predict_batch(submissions(at), namespace=namespace + "-a")
    fresh = client.predict_batch(submissions(at), namespace=namespace + "-b")
    assert any(not p.fallback for p in learned)
    assert all(p.fallback and p.t_sched == 3600 for p in fresh)


# --- bad input -----------------------------------------------------------------------------------


def _job(**changes: object) -> pb.Job:
    fields = {"job_id": 1, "submit": 100, "user": 3, "group": 7, "t_req": 3600, "procs": 4}
    fields.update(changes)
    return pb.Job(**{k: v for k, v in fields.items() if v is not None})


@pytest.mark.parametrize(
    ("job", "field"),
    [
        (_job(t_req=0), "job.t_req"),
        (_job(t_req=-5), "job.t_req"),
        (_job(t_req=None), "job.t_req"),
        (_job(procs=0), "job.procs"),
        (_job(submit=-1), "job.submit"),
        (_job(user=None), "job.user"),
        (_job(user=-2), "job.user"),
        (_job(group=None), "job.group"),
        (_job(queue=-3), "job.queue"),
        (_job(job_id=-1), "job.job_id"),
        (_job(nodes=-1), "job.nodes must be >= 0"),
        (_job(memory_mb=-2048), "job.memory_mb must be >= 0"),
        (_job(gpus=-1), "job.gpus must be >= 0"),
        (_job(qos=-2), "job.qos must be >= -1"),
        (_job(queue=2, partition="gpu"), "queue and partition are both set"),
        (_job(qos=1, qos_name="normal"), "qos and qos_name are both set"),
        (_job(executable=3, job_name="namd"), "executable and job_name are both set"),
        (_job(job_name="x" * 129), "job.job_name must be 1-128 printable characters"),
        (_job(partition="two words\n"), "job.partition must be 1-128 printable characters"),
    ],
)
def test_bad_job_fields_are_refused_by_name(stub: rpc.PredictorStub, job: pb.Job, field: str) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        stub.Predict(pb.PredictRequest(job=job), timeout=5)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in raised.value.details()
    assert stub.Predict(pb.PredictRequest(job=_job()), timeout=5).prediction.t_sched == 3600


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("no-such-estimator", "unknown estimator"),
        ("percentile:nope=1", "no parameter 'nope'"),
        ("percentile:q=ten", "'q' must be float"),
        ("oracle", "evaluation only"),
    ],
)
def test_bad_estimators_are_refused(client: PredictorClient, spec: str, words: str) -> None:
    code, details = status_of(lambda: client.predict(user=1, group=1, t_req=60, procs=1, estimator=spec))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "estimator" in details and words in details


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"listen": "127.0.0.1:99999"}, "HOST:PORT"),
        ({"listen": "no-port"}, "HOST:PORT"),
        ({"default_estimators": ["percentile:q=5"]}, "q must be"),
        ({"default_estimators": ["oracle"]}, "evaluation only"),
    ],
)
def test_bad_server_arguments_are_refused(arguments: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        start_server(**arguments)  # type: ignore[arg-type]


def test_one_job_schema_for_the_type_the_wire_and_the_state_file() -> None:
    """`kernel.jobs.JOB_FIELDS` is the one schema: JobRequest's fields and defaults, the Job message's numbers,
    the state file's rows. A job that asks nothing beyond a size puts no resource field on the wire."""
    assert JobRequest._fields == JOB_FIELD_NAMES
    for field in JOB_FIELDS:
        assert field.name in pb.Job.DESCRIPTOR.fields_by_name
        if field.unset is not None and field.name != "submit":
            assert JobRequest._field_defaults.get(field.name, field.unset) == field.unset
    asks = JobRequest(7, 100, 3, 4, 3600, 16, 2, 5, nodes=2, memory_mb=64_000, gpus=4, qos=0, exclusive=1)
    plain = JobRequest(7, 100, 3, 4, 3600, 16, 2, 5)
    assert [job_request(job_message(job), "job") for job in (asks, plain)] == [asks, plain]
    assert len(job_message(plain).ListFields()) == LEGACY_FIELD_COUNT
    assert records.submissions_from(records.submission_rows([asks, plain])) == [asks, plain]


def test_the_oracle_is_never_served(client: PredictorClient, namespace: str) -> None:
    """Actual runtimes never travel to the service: the contract has no field for them, every RPC refuses the oracle."""
    assert "actual_runtime" not in pb.Job.DESCRIPTOR.fields_by_name
    jobs = submissions(100, count=2)
    calls = {
        "Predict": lambda: client.predict(user=1, group=1, t_req=60, procs=1, namespace=namespace, estimator="oracle"),
        "PredictBatch": lambda: client.predict_batch(jobs, namespace=namespace, estimator="oracle"),
        "Sync": lambda: client.sync(history(3), jobs, namespace=namespace, estimator="oracle"),
        "ForecastStart": lambda: client.forecast_start(
            QueueState(200, 64, [], jobs), namespace=namespace, estimator="oracle"
        ),
    }
    for rpc_name, call in calls.items():
        code, details = status_of(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "evaluation only" in details, rpc_name
    assert not client.list_estimators(namespace).namespace_exists  # the refused Sync learned nothing


def test_a_run_through_the_service_predicts_the_oracle_in_process(server: str, client: PredictorClient) -> None:
    trace = generate_workload(jobs=300, procs=64, seed=5)
    config = SimulationConfig(64, mode="regular")
    _, local = run_simulation(trace, config, "oracle")
    through, remote = run_simulation(trace, config, "oracle", address=server, namespace="oracle-run", timeout=10)
    assert remote.jobs.equals(local.jobs) and through.predictor_fallbacks == 0
    assert (remote.jobs["t_sched"] == remote.jobs["run"].clip(lower=1)).all()  # the oracle: t_sched is t_act
    assert not client.list_estimators("oracle-run").namespace_exists  # the service saw nothing of it


def test_bad_completions_and_namespaces_are_refused(client: PredictorClient, namespace: str) -> None:
    finished = history(12)
    client.observe(finished[6:], namespace=namespace)
    code, details = status_of(lambda: client.observe(finished[:6], namespace=namespace))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "completions[0].end" in details
    code, details = status_of(lambda: client.observe(list(reversed(finished)), namespace=namespace + "x"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "completions[1].end" in details
    early = FinishedJob(JobRequest(1, 500, 1, 1, 60, 1), 400, 10)
    code, details = status_of(lambda: client.observe([early], namespace=namespace + "y"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "completions[0].end" in details
    code, details = status_of(lambda: client.observe(finished, namespace="has space"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "namespace" in details
    code, details = status_of(lambda: client.reset_namespace(namespace + "-never-used"))
    assert code == grpc.StatusCode.NOT_FOUND and "namespace" in details
    assert client.list_estimators(namespace).completions == 6


def test_a_refused_sync_learns_nothing(stub: rpc.PredictorStub, namespace: str) -> None:
    completion = pb.Completion(job=_job(), end=200, runtime=50)
    request = pb.SyncRequest(namespace=namespace, completions=[completion], submitted=[_job(), _job(procs=-4)])
    with pytest.raises(grpc.RpcError) as raised:
        stub.Sync(request, timeout=5)
    assert "submitted[1].procs" in raised.value.details()
    listing = stub.ListEstimators(pb.ListEstimatorsRequest(namespace=namespace), timeout=5)
    assert listing.completions == 0


def test_oversized_batches_are_refused() -> None:
    running, port = start_server("127.0.0.1:0", limits=Limits(max_batch=5))
    try:
        with PredictorClient(f"127.0.0.1:{port}") as client:
            code, details = status_of(lambda: client.predict_batch(submissions(0, count=6)))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and "jobs" in details and "at most 5" in details
            code, details = status_of(lambda: client.observe(history(6), namespace="oversized"))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and "completions" in details
            assert len(client.predict_batch(submissions(0, count=5))) == 5
    finally:
        running.stop(0).wait()


# --- health, reflection, deadlines ----------------------------------------------------------------


def test_health_and_reflection(server: str, client: PredictorClient) -> None:
    assert client.health() == "SERVING"
    assert client.health(SERVICE_NAME) == "SERVING"
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    with grpc.insecure_channel(server) as channel:
        reflection_stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        response = next(iter(reflection_stub.ServerReflectionInfo(iter([request]), timeout=5)))
    names = {entry.name for entry in response.list_services_response.service}
    assert {"tsched.v1.Predictor", "grpc.health.v1.Health"} <= names


class _SlowEstimator(RequestEstimator):
    """A request estimator that takes 0.1 s per job, to keep calls in flight; says when it is busy, counts answers."""

    busy = threading.Event()
    answered = 0

    def predict(self, job: JobRequest) -> Prediction:
        self.busy.set()
        time.sleep(0.1)
        _SlowEstimator.answered += 1
        return super().predict(job)


def _slow_server() -> tuple[PredictorServer, str]:
    running, port = start_server(
        "127.0.0.1:0", default_estimators=["request"], estimator_factory=lambda spec: (_SlowEstimator(), "request")
    )
    return running, f"127.0.0.1:{port}"


def test_a_late_stream_answer_is_a_deadline_and_the_session_falls_back() -> None:
    answering = threading.Event()
    answering.set()
    running, port = start_server(
        "127.0.0.1:0",
        default_estimators=["request"],
        estimator_factory=lambda spec: (HeldEstimator(answering), "request"),
    )
    try:
        session = RemoteSession(f"127.0.0.1:{port}", "late", "request", reset=False, timeout=2.0, retry_after=60.0)
        session.sync([], submissions(0, count=1))
        assert session.fallbacks == 0
        answering.clear()  # the server now holds its answers until the end of the test: only a deadline ends the wait
        predictions = session.sync([], submissions(1, count=10))
        assert all(p.fallback and p.t_sched == 3600 for p in predictions) and session.fallbacks == 10
        session.sync([], submissions(2, count=1))
        assert session.fallbacks == 11  # backing off: not even tried (an answered call would not count)
        session.close()
    finally:
        answering.set()
        running.stop(0).wait()


def test_deadlines_are_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namespaces, "DEADLINE_CHECK_EVERY", 1)
    running, address = _slow_server()
    try:
        with PredictorClient(address) as client:
            client.health()
            before = _SlowEstimator.answered
            code, _ = status_of(lambda: client.predict_batch(submissions(0, count=10), timeout=0.25))
            assert code == grpc.StatusCode.DEADLINE_EXCEEDED
            wait_for(lambda: running.gate.admission.in_use("call") == 0)  # the server is done with the batch:
            assert _SlowEstimator.answered - before < 10  # it gave the 1-second batch up at the deadline, between jobs
            assert client.predict(user=1, group=1, t_req=60, procs=1, submit=0).prediction.t_sched == 60
            assert client.health() == "SERVING"
    finally:
        running.stop(0).wait()


def test_graceful_stop_lets_in_flight_calls_finish() -> None:
    running, address = _slow_server()
    results: queue.Queue[object] = queue.Queue()
    with PredictorClient(address) as client:
        client.health()
        _SlowEstimator.busy.clear()
        caller = threading.Thread(target=lambda: results.put(client.predict_batch(submissions(0, count=3))))
        caller.start()
        assert _SlowEstimator.busy.wait(5)
        stopped = running.stop(grace=5)
        caller.join(5)
        assert [p.t_sched for p in results.get_nowait()] == [3600] * 3
        assert stopped.wait(5)
        code, _ = status_of(lambda: client.predict(user=1, group=1, t_req=60, procs=1, timeout=1))
        assert code == grpc.StatusCode.UNAVAILABLE


# --- concurrency ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_concurrent_clients_get_the_sequential_answers(server: str, client: PredictorClient, namespace: str) -> None:
    finished = history(300, users=10)
    client.observe(finished, namespace=namespace)
    queries = [
        JobRequest(i, finished[-1].end - (i % 50) * 600, user=i % 12, group=7, t_req=3600, procs=4) for i in range(500)
    ]

    def ask(connected: PredictorClient) -> list[Prediction]:
        return [
            connected.predict(
                user=q.user, group=q.group, t_req=q.t_req, procs=q.procs, submit=q.submit, namespace=namespace
            ).prediction
            for q in queries
        ]

    sequential = ask(client)
    answers: list[list[Prediction]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with PredictorClient(server, timeout=10) as own:
                answers.append(ask(own))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert answers == [sequential] * 8


# --- the simulator through the service ------------------------------------------------------------

#: Retrains every 2 days of trace time: in the service on its training threads, in-process inline.
SMALL_LGBM = "lgbm-quantile:window=5d,retrain=2d,calibration=3d,min_train=200,trees=5"


@pytest.mark.parametrize("spec", [PERCENTILE, "last2", SMALL_LGBM, SMALL_LGBM.replace("quantile", "sched")])
def test_simulation_through_the_service_equals_in_process(server: str, spec: str) -> None:
    trace = generate_workload(jobs=1500, procs=128, load=0.8, seed=3)
    split = int(trace.jobs["submit"].iloc[300])
    warmup = trace.jobs_before(split)
    replay = trace.jobs.loc[trace.jobs["submit"] >= split]
    config = SimulationConfig(procs=128, policy="sjf", backfill="easy", mode="regular")
    in_process = simulate(replay, config, LocalSession(make_estimator(spec)), history=warmup)
    session = RemoteSession(server, f"simulation-{spec.partition(':')[0]}", spec, reset=True, timeout=60)
    remote = simulate(replay, config, session, history=warmup)
    session.close()
    assert remote.predictor_fallbacks == 0
    assert remote.jobs.equals(in_process.jobs)
    assert (in_process.jobs["t_sched"] < in_process.jobs["t_req"]).mean() > 0.3


def test_remote_session_falls_back_fast_and_recovers(monkeypatch: pytest.MonkeyPatch) -> None:
    running, port = start_server("127.0.0.1:0", default_estimators=["last2"])
    address = f"127.0.0.1:{port}"
    running.stop(0).wait()
    session = RemoteSession(address, "recovering", "last2", reset=False, timeout=1.0, retry_after=0.3)
    attempts = []
    opened = session.client.sync_stream
    monkeypatch.setattr(session.client, "sync_stream", lambda: attempts.append(1) or opened())
    finished = history(40)
    started = time.monotonic()
    for index in range(50):
        predictions = session.sync(finished[index : index + 1] if index < 40 else [], submissions(index, count=2))
        assert all(p.t_sched == 3600 and p.fallback for p in predictions)
    elapsed = time.monotonic() - started
    # Fast because the service is tried only as the back-off allows (0.3 s, doubling), whatever the time taken:
    assert 1 <= len(attempts) <= 1 + math.log2(elapsed / 0.3 + 1), (len(attempts), elapsed)
    assert session.fallbacks == 100

    revived, _ = start_server(address, default_estimators=["last2"])
    try:
        time.sleep(0.4)
        jobs = submissions(finished[-1].end)
        deadline = time.monotonic() + 10
        while (answer := session.sync([], jobs)) and answer[0].fallback and time.monotonic() < deadline:
            time.sleep(0.1)
        assert answer == local_predictions("last2", finished, jobs)
        with PredictorClient(address) as check:
            assert check.list_estimators("recovering").completions == 40
        session.close()
    finally:
        revived.stop(0).wait()


# --- persistence ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_restart_after_kill_9_keeps_every_acknowledged_completion(tmp_path: Path) -> None:
    state = tmp_path / "state.sqlite"
    finished = history(120, users=4)
    queries = submissions(finished[-1].end, count=8, users=4)
    first = ServerProcess(state=str(state), default_estimators=[PERCENTILE, "last2"])
    try:
        with PredictorClient(first.address, timeout=10) as client:
            client.observe(finished[:60], namespace="cluster-a")
            client.sync(finished[60:], queries, namespace="cluster-a")
            client.observe(finished[:30], namespace="cluster-b")
            before = {
                spec: client.predict_batch(queries, namespace="cluster-a", estimator=spec)
                for spec in (PERCENTILE, "last2")
            }
            clock = client.list_estimators("cluster-a").clock
    finally:
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL

    second = ServerProcess(state=str(state), default_estimators=[PERCENTILE, "last2"])
    try:
        with PredictorClient(second.address, timeout=10) as client:
            listing = client.list_estimators("cluster-a")
            assert listing.completions == 120 and listing.clock == clock
            assert client.list_estimators("cluster-b").completions == 30
            for spec, expected in before.items():
                assert expected == local_predictions(spec, finished, queries)
                assert client.predict_batch(queries, namespace="cluster-a", estimator=spec) == expected
    finally:
        assert second.stop(signal.SIGTERM) == 0
    assert any("restored" in line for line in second.log)
    assert any("stopped" in line for line in second.log)


def test_state_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("this is not SQLite\n" * 100)
    with pytest.raises(StateError, match=r"notes\.txt"):
        CompletionStore(bogus)


def test_asking_lgbm_about_the_past_of_a_namespace_is_a_failed_precondition_not_internal(
    client: PredictorClient, namespace: str
) -> None:
    """`predict --namespace <simulation namespace> --submit 1000` with lgbm-quantile was INTERNAL (a ValueError)."""
    client.observe(history(300, start=40 * DAY), namespace=namespace)
    code, details = status_of(
        lambda: client.predict(
            user=1, group=7, t_req=3600, procs=4, submit=1000, namespace=namespace, estimator="lgbm-quantile"
        )
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "a job submitted at 1000 cannot be predicted once completions up to" in details
