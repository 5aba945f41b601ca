"""A server's bounds, attacked: clients that stop reading or sending, floods of namespaces, huge or garbled input."""

from __future__ import annotations

import logging
import statistics
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from service_support import DAY, HeldEstimator, flood_stream, history, status_of, submissions, wait_for

from kernel.errors import InvalidRequest, ResourceExhausted
from predictor.estimators.base import declarations
from predictor.proto import pb
from predictor.registry import available
from predictor.service.client import PredictorClient, PredictorError
from predictor.service.core import PredictorCore
from predictor.service.launcher import ServerProcess
from predictor.service.limits import Limits, Watch
from predictor.service.remote import RemoteSession
from predictor.service.server import PredictorServer, start_server
from predictor.service.training import QUEUED_TRAININGS, TRAINING_THREADS, Trainer


def serving(limits: Limits, **arguments: object) -> tuple[PredictorServer, str]:
    running, port = start_server("127.0.0.1:0", limits=limits, **arguments)
    return running, f"127.0.0.1:{port}"


def watched(server: PredictorServer, state: int, name: str = "SyncStream") -> int:
    """How many `name` calls the server's watchdog sees in `state` (Watch.SENDING: blocked on a client not
    reading; a unary call's answer is watched too until it has left)."""
    watchdog = server.gate.watchdog
    with watchdog._lock:
        return sum(1 for watch in watchdog._watches.values() if watch.state == state and watch.name == name)


# --- clients that stop reading or sending ------------------------------------------------------------


def call_seconds(client: PredictorClient, rounds: int = 20) -> list[float]:
    """How long each of `rounds` Predict calls and health checks takes, one after the other."""
    seconds = []
    for _ in range(rounds):
        for call in (lambda: client.predict(user=1, group=1, t_req=60, procs=1), client.health):
            started = time.perf_counter()
            call()
            seconds.append(time.perf_counter() - started)
    return seconds


def test_sixteen_streams_that_never_read_leave_calls_and_health_answering_as_fast_as_before() -> None:
    """Compared with the same calls on the same server just before the streams (no wall-clock figure: a loaded
    machine slows both alike); a call that waited for a thread held by a stream would wait for its cut."""
    running, address = serving(Limits(send_timeout=120))  # held as long as setting sixteen up takes, loaded or not
    floods: list[tuple[grpc.Channel, object]] = []
    try:
        with PredictorClient(address) as client:
            client.health()
            before = call_seconds(client)
            floods = [flood_stream(address) for _ in range(16)]
            wait_for(lambda: watched(running, Watch.SENDING) == 16)  # every stream blocked on a client not reading
            during = call_seconds(client)
            assert watched(running, Watch.SENDING) == 16  # every call answered while all sixteen were held
        assert statistics.median(during) < 10 * statistics.median(before), (before, during)
        running.gate.watchdog.send_timeout = 0.5  # then the server's patience runs out:
        wait_for(lambda: running.gate.watchdog.cut >= 16, 20)  # they are cut, and their slots given back
        wait_for(lambda: running.gate.admission.in_use("stream") == 0, 5)
    finally:
        for channel, _ in floods:
            channel.close()
        running.stop(0).wait()


def test_streams_beyond_the_limit_are_refused_and_calls_still_answer() -> None:
    running, address = serving(Limits(max_streams=2, client_share=1))  # the server-wide limit, not a share
    floods = [flood_stream(address) for _ in range(2)]
    try:
        wait_for(lambda: running.gate.admission.in_use("stream") == 2)
        with PredictorClient(address) as client:
            stream = client.sync_stream()
            code, details = status_of(lambda: stream.exchange(pb.SyncRequest(), timeout=5))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "2 streams" in details
            assert client.predict(user=1, group=1, t_req=60, procs=1).prediction.t_sched == 60
    finally:
        for channel, _ in floods:
            channel.close()
        running.stop(0).wait()


def test_calls_beyond_the_limit_are_refused_at_once_and_health_answers() -> None:
    answering = threading.Event()
    running, address = serving(Limits(max_calls=1), estimator_factory=lambda spec: (HeldEstimator(answering), "held"))
    try:
        with PredictorClient(address, timeout=60) as client:
            client.health()
            held = threading.Thread(target=lambda: client.predict(user=1, group=1, t_req=60, procs=1))
            held.start()
            wait_for(lambda: running.gate.admission.in_use("call") == 1)
            code, details = status_of(lambda: client.predict(user=1, group=1, t_req=60, procs=1))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "1 calls at once" in details
            assert client.health() == "SERVING"
            assert held.is_alive()  # refused, and health answered, while the admitted call was still held
            answering.set()
            held.join()
    finally:
        answering.set()
        running.stop(0).wait()


def test_a_stream_that_sits_idle_is_cut_and_a_session_reopens_it_without_falling_back() -> None:
    running, address = serving(Limits(stream_idle_timeout=0.5), default_estimators=["last2"])
    try:
        session = RemoteSession(address, "idle", "last2", reset=False, timeout=5)
        finished = history(30)
        session.sync(finished[:15], submissions(finished[14].end, count=1))
        wait_for(lambda: running.gate.watchdog.cut == 1, 5)
        predictions = session.sync(finished[15:], submissions(finished[-1].end, count=2))
        session.close()
        assert session.fallbacks == 0 and len(predictions) == 2
    finally:
        running.stop(0).wait()


def test_a_call_whose_request_never_arrives_is_cut() -> None:
    running, address = serving(Limits(receive_timeout=0.5))
    never = threading.Event()
    try:
        with grpc.insecure_channel(address) as channel:
            # A unary method, called by a client that sends its headers and then nothing.
            silent = channel.stream_unary("/tsched.v1.Predictor/Predict")
            code, _ = status_of(lambda: silent(iter(never.wait, True), timeout=30))
            assert code == grpc.StatusCode.CANCELLED  # cut by the server: the client's deadline says DEADLINE_EXCEEDED
            wait_for(lambda: running.gate.admission.in_use("call") == 0, 5)  # its slot given back
    finally:
        never.set()
        running.stop(0).wait()


# --- what clients send ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    running, address = serving(Limits(max_estimators=3, max_history=100, max_batch=20_000))
    yield address
    running.stop(0).wait()


@pytest.fixture
def client(server: str) -> Iterator[PredictorClient]:
    with PredictorClient(server, timeout=10) as connected:
        yield connected


def test_undecodable_messages_are_invalid_argument_without_a_traceback(
    server: str, client: PredictorClient, caplog: pytest.LogCaptureFixture
) -> None:
    garbage = [b"\xff" * 7, b"\x0a\xff\xff\xff\xff\x0f", bytes(range(256)), pb.Job(user=1).SerializeToString()[:1]]
    with grpc.insecure_channel(server) as channel, caplog.at_level(logging.INFO):
        for method in ("Predict", "PredictBatch", "ObserveCompletions", "Sync", "ListEstimators", "ResetNamespace"):
            call = channel.unary_unary(f"/tsched.v1.Predictor/{method}")
            for raw in garbage:
                code, details = status_of(lambda call=call, raw=raw: call(raw, timeout=5))
                assert code == grpc.StatusCode.INVALID_ARGUMENT and "not a valid message" in details, method
        stream = channel.stream_stream("/tsched.v1.Predictor/SyncStream")
        code, _ = status_of(lambda: list(stream(iter([garbage[0]]), timeout=5)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert not any(record.exc_info for record in caplog.records)
    assert client.health() == "SERVING"


def test_inputs_are_quoted_short_in_messages_and_logs(
    client: PredictorClient, caplog: pytest.LogCaptureFixture
) -> None:
    cases = [
        ({"estimator": "x" * 3_000_000}, "at most 512"),
        ({"namespace": "y" * 3_000_000}, "3,000,000 characters"),
        ({"estimator": "last2:" + "z" * 500}, "expected key=value"),
    ]
    with caplog.at_level(logging.INFO, "tsched.service"):
        for arguments, words in cases:
            time.sleep(0.1)  # refusals are logged at a bounded rate: let each one be
            code, details = status_of(lambda a=arguments: client.predict(user=1, group=1, t_req=60, procs=1, **a))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and len(details) <= 750 and words in details
    assert len(caplog.records) >= len(cases)
    assert max(len(record.getMessage()) for record in caplog.records) < 1500


def test_namespaces_beyond_the_limit_are_refused_and_questions_create_none() -> None:
    running, address = serving(Limits(max_namespaces=50))
    try:
        with PredictorClient(address) as client:
            for index in range(200):  # questions about namespaces that do not exist: answered, nothing kept
                answer = client.predict(user=1, group=1, t_req=60, procs=1, namespace=f"q{index}")
                assert answer.prediction.t_sched == 60
            assert not client.list_estimators("q0").namespace_exists
            refused = {}
            for index in range(60):
                try:
                    client.observe(history(1), namespace=f"n{index}")
                except PredictorError as error:
                    refused[index] = error
            assert list(refused) == list(range(50, 60))
            assert all(error.code == grpc.StatusCode.RESOURCE_EXHAUSTED for error in refused.values())
            assert "--max-namespaces" in refused[50].details
            assert not client.list_estimators("n59").namespace_exists
            client.reset_namespace("n0")
            assert client.observe(history(1), namespace="n59") == 1  # room again
    finally:
        running.stop(0).wait()


def test_a_hundred_thousand_namespaces_beyond_the_limit_cost_nothing_lasting() -> None:
    core = PredictorCore(["percentile"], limits=Limits(max_namespaces=10))
    finished = history(2)

    def attempt(names: Iterator[str]) -> int:
        refused = 0
        for name in names:
            try:
                core.observe(name, finished, lambda: None)
            except ResourceExhausted:
                refused += 1
        return refused

    assert attempt(f"kept-{index}" for index in range(10)) == 0
    attempt(f"first-{index}" for index in range(100))  # the first refusals fill caches any refusal uses once
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        assert attempt(f"refused-{index}" for index in range(100_000)) == 100_000
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    kept = [tracemalloc.Filter(True, "*/predictor/*")]
    grown = sum(stat.size_diff for stat in after.filter_traces(kept).compare_to(before.filter_traces(kept), "filename"))
    assert grown < 1024, f"{grown} bytes kept after 100,000 refusals"
    assert len(core.table) == 10
    core.close()


def test_a_namespace_holds_a_bounded_number_of_estimators(client: PredictorClient) -> None:
    client.observe(history(5), namespace="estimators")
    for spec in ("last2", "mean-std"):  # with the default percentile: three
        client.predict(user=1, group=1, t_req=60, procs=1, namespace="estimators", estimator=spec)
    code, details = status_of(
        lambda: client.predict(user=1, group=1, t_req=60, procs=1, namespace="estimators", estimator="request")
    )
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-estimators" in details


def test_history_is_bounded_oldest_first(client: PredictorClient) -> None:
    client.observe(history(250), namespace="bounded")
    assert client.list_estimators("bounded").completions == 100


def test_trainings_waiting_for_a_thread_are_bounded() -> None:
    trainer = Trainer()
    release = threading.Event()
    try:
        for _ in range(TRAINING_THREADS + QUEUED_TRAININGS):
            trainer.submit(release.wait)
        queued = threading.Event()
        late = threading.Thread(target=lambda: (trainer.submit(release.wait), queued.set()))
        late.start()
        assert not queued.wait(0.5)  # waits for room: the training data it would hold is not taken meanwhile
        release.set()
        assert queued.wait(5)
        late.join()
    finally:
        release.set()
        trainer.shutdown()


def test_parsed_spec_spellings_are_bounded() -> None:
    core = PredictorCore(["percentile"], limits=Limits(max_specs=8))
    for q in range(50, 100):
        core.spec(f"percentile:q={q}")
    assert len(core.specs) == 8
    core.close()


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("lgbm-quantile:trees=1000", "trees=1000 is above this server's limit"),
        ("lgbm-quantile:threads=8", "threads=8 is above"),
        ("lgbm-quantile:max_train=200000", "max_train=200000 is above"),
    ],
)
def test_a_client_cannot_ask_for_more_training_than_the_server_allows(
    client: PredictorClient, spec: str, words: str
) -> None:
    code, details = status_of(lambda: client.predict(user=1, group=1, t_req=60, procs=1, estimator=spec))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and words in details


def test_the_servers_own_specs_may_exceed_the_client_limits() -> None:
    core = PredictorCore(["lgbm-quantile:trees=500"], limits=Limits(estimator_limit=("lgbm-quantile:trees=100",)))
    assert core.defaults[0].canonical.count("trees=500") == 1
    with pytest.raises(InvalidRequest, match="trees=500 is above"):
        core.spec("lgbm-quantile:trees=500")
    core.close()


def _float_parameters() -> list[tuple[str, str]]:
    return [
        (name, parameter)
        for name, cls in sorted(available().items())
        for parameter, declaration in declarations(cls).items()
        if isinstance(cls.__dataclass_fields__[parameter].default, float) and declaration.choices is None
    ]


@pytest.mark.parametrize(("estimator", "parameter"), _float_parameters())
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_parameters_are_refused(client: PredictorClient, estimator: str, parameter: str, value: str) -> None:
    spec = f"{estimator}:{parameter}={value}"
    code, details = status_of(lambda: client.predict(user=1, group=1, t_req=60, procs=1, estimator=spec))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and parameter in details


def test_times_far_ahead_of_the_clock_are_refused_and_block_nothing(client: PredictorClient) -> None:
    finished = history(20)
    client.observe(finished, namespace="clock")
    clock = finished[-1].end
    far = 2**63 - 1
    late = finished[-1]._replace(end=far)
    code, details = status_of(lambda: client.observe([late], namespace="clock"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "completions[0].end" in details
    ahead = late._replace(end=clock + 100 * DAY)
    code, details = status_of(lambda: client.observe([ahead], namespace="clock"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "--max-time-step" in details
    for submit in (far, clock + 100 * DAY):
        code, details = status_of(
            lambda s=submit: client.predict(user=1, group=1, t_req=60, procs=1, submit=s, namespace="clock")
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "job.submit" in details
        code, details = status_of(lambda s=submit: client.sync([], submissions(s, count=1), namespace="clock"))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "submitted[0].submit" in details
    assert client.list_estimators("clock").clock == clock
    on_time = history(1, start=clock)[0]
    assert client.observe([on_time._replace(end=clock + DAY)], namespace="clock") == 1


def test_an_oversized_message_is_refused_and_not_retried() -> None:
    running, address = serving(Limits(max_batch=100))
    try:
        with grpc.insecure_channel(address) as channel:
            call = channel.unary_unary("/tsched.v1.Predictor/Sync")
            code, details = status_of(lambda: call(b"\x00" * (64 * 2**20), timeout=10))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details
        session = RemoteSession(address, "oversized", "", reset=False, timeout=10)
        finished = history(2000)  # far more than a server taking 100 at a time can receive in one message
        with pytest.raises(PredictorError, match="larger than max"):  # not mistaken for a busy server
            session.sync(finished, submissions(finished[-1].end, count=1))
        assert session.fallbacks == 0
    finally:
        running.stop(0).wait()


@pytest.mark.slow
def test_memory_stays_under_its_ceiling_whatever_is_sent(tmp_path: Path) -> None:
    limits = Limits(memory_limit_mb=180, max_batch=5000)
    server = ServerProcess(limits=limits)
    refused: list[PredictorError] = []
    try:
        with PredictorClient(server.address, timeout=30) as client:
            for index in range(400):  # 2,000,000 completions: far beyond 180 MB without the ceiling
                try:
                    client.observe(history(5000, users=500), namespace=f"ns-{index}")
                except PredictorError as error:
                    refused.append(error)
                    if len(refused) == 20:
                        break
            assert refused and all(error.code == grpc.StatusCode.RESOURCE_EXHAUSTED for error in refused)
            assert "ceiling" in refused[0].details
            assert client.health() == "SERVING"
            assert client.predict(user=1, group=7, t_req=3600, procs=4, namespace="ns-0").prediction.t_sched >= 1
        resident = _resident_mb(server.pid)
        assert resident < limits.memory_limit_mb, f"{resident} MB"
    finally:
        server.stop()


def _resident_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")
