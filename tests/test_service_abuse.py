"""Clients that try to stop the server for everyone: health watchers, slot hogs, heavy SPECs, abandoned
forecasts, unread answers (issue 25). Each test compares with the same server's quiet figure, never with a
wall-clock bound: the machine is shared and loaded."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from service_support import HeldEstimator, status_of, wait_for, write_secret

from kernel.errors import InvalidRequest
from predictor.registry import available
from predictor.service.client import PredictorClient, PredictorError
from predictor.service.connection import Credentials
from predictor.service.limits import ESTIMATOR_CAPS, CallKind, Limits
from predictor.service.server import PredictorServer, Security, start_server
from predictor.service.specs import SpecBook, registry_factory

#: Every call of these tests may wait this long (a refusal or an answer); only a server that makes calls
#: wait for threads held by others comes near it.
PATIENT_SECONDS = 30


def serving(limits: Limits, **arguments: object) -> tuple[PredictorServer, str]:
    running, port = start_server("127.0.0.1:0", limits=limits, **arguments)
    return running, f"127.0.0.1:{port}"


def seconds_of(calls: list[Callable[[], object]], rounds: int = 15) -> list[float]:
    """How long each call takes, `rounds` times over."""
    taken = []
    for _ in range(rounds):
        for call in calls:
            started = time.perf_counter()
            call()
            taken.append(time.perf_counter() - started)
    return taken


# --- health ---------------------------------------------------------------------------------------------------


def test_sixty_health_watchers_leave_predict_and_check_answering_as_fast_as_before() -> None:
    """About 52 open `Health.Watch` streams used to hold every server thread: Predict and Check then waited for
    ever. Now a watcher holds no thread, and a client holds at most its share of the watcher slots."""
    limits = Limits()
    running, address = serving(limits)
    watchers: list[grpc.Call] = []
    try:
        with PredictorClient(address, timeout=PATIENT_SECONDS) as client, grpc.insecure_channel(address) as channel:
            calls: list[Callable[[], object]] = [
                lambda: client.predict(user=1, group=1, t_req=60, procs=1),
                client.health,
            ]
            before = seconds_of(calls)
            watch = health_pb2_grpc.HealthStub(channel).Watch
            watchers = [watch(health_pb2.HealthCheckRequest()) for _ in range(60)]
            share = int(limits.max_watchers * limits.client_share)
            wait_for(lambda: running.gate.admission.in_use(CallKind.WATCH) == share)
            during = seconds_of(calls)
            refused = 0
            for call in watchers:
                try:
                    assert next(call).status == health_pb2.HealthCheckResponse.SERVING  # an admitted one watches
                except grpc.RpcError:
                    assert call.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
                    refused += 1
            assert refused == 60 - share
            assert running.gate.admission.in_use(CallKind.WATCH) == share  # still open while the calls answered
        assert statistics.median(during) < 10 * statistics.median(before), (before, during)
    finally:
        for call in watchers:
            call.cancel()
        running.stop(0).wait()
    wait_for(lambda: running.gate.admission.in_use(CallKind.WATCH) == 0)  # slots given back as the streams end


def test_health_checks_pass_the_same_admission_with_a_share_per_client() -> None:
    """Health checks take slots of their own, counted like every call: a health check beyond its kind's limit is
    refused at once, and one client's calls never take the slots health checks need."""
    answering = threading.Event()
    limits = Limits(max_calls=2)
    running, address = serving(limits, estimator_factory=lambda spec: (HeldEstimator(answering), "held"))
    try:
        with PredictorClient(address, timeout=PATIENT_SECONDS) as client:
            held = threading.Thread(target=lambda: client.predict(user=1, group=1, t_req=60, procs=1))
            held.start()
            wait_for(lambda: running.gate.admission.in_use(CallKind.CALL) == 1)
            code, details = status_of(lambda: client.predict(user=1, group=1, t_req=60, procs=1))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "share of 1 of the server's 2 calls" in details
            assert client.health() == "SERVING"  # its own slot: the held call does not stand in its way
            answering.set()
            held.join()
    finally:
        answering.set()
        running.stop(0).wait()


def test_one_token_holding_its_share_of_calls_leaves_another_token_served(tmp_path: Path) -> None:
    """Any token holder used to be able to hold every call slot; now each token holds at most its share."""
    hog_token, other_token = "h" * 32, "o" * 32
    tokens = write_secret(tmp_path / "tokens", f"{hog_token} hog*\n{other_token} other*\n")
    answering = threading.Event()
    limits = Limits(max_calls=4)
    running, address = serving(
        limits,
        security=Security(tokens=str(tokens)),
        estimator_factory=lambda spec: (HeldEstimator(answering), "held"),
    )
    hog = PredictorClient(address, timeout=PATIENT_SECONDS, credentials=Credentials(token=hog_token))
    other = PredictorClient(address, timeout=PATIENT_SECONDS, credentials=Credentials(token=other_token))
    refused: list[grpc.StatusCode] = []

    def hog_call() -> None:
        try:
            hog.predict(user=1, group=1, t_req=60, procs=1, namespace="hog")
        except PredictorError as error:
            refused.append(error.code)

    hogs = [threading.Thread(target=hog_call) for _ in range(4)]
    try:
        for thread in hogs:
            thread.start()
        wait_for(lambda: len(refused) == 2)  # two held, two refused at once: its share is 2 of 4
        assert refused == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2
        assert running.gate.admission.in_use(CallKind.CALL) == 2
        answered = threading.Thread(target=lambda: other.predict(user=1, group=1, t_req=60, procs=1, namespace="other"))
        answered.start()
        wait_for(lambda: running.gate.admission.in_use(CallKind.CALL) == 3)  # admitted beside the hog's
        answering.set()
        answered.join()
    finally:
        answering.set()
        for thread in hogs:
            thread.join()
        hog.close()
        other.close()
        running.stop(0).wait()


@pytest.mark.parametrize("share", [0.0, 1.5])
def test_a_client_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(Exception, match="--client-share"):
        Limits(client_share=share)


# --- what a client's SPEC may make the server pay ----------------------------------------------------------

#: Parameters that set what a training costs the server, by whatever estimator has them.
COSTLY = {"trees", "leaves", "threads", "max_train"}


def test_every_registered_estimator_is_held_to_the_one_table_of_caps() -> None:
    """The registry walked: every estimator has an entry, every parameter that sets the server's cost is capped,
    and a client's SPEC above a cap is refused while one at the cap is served."""
    book = SpecBook(registry_factory, Limits(), ["request"])
    for name, cls in available().items():
        assert name in ESTIMATOR_CAPS, f"{name} is missing from ESTIMATOR_CAPS"
        params = cls().get_params()
        caps = ESTIMATOR_CAPS[name]
        assert COSTLY & set(params) <= set(caps), f"{name}: {sorted(COSTLY & set(params) - set(caps))} uncapped"
        if cls.evaluation_only:
            continue  # never served, whatever it asks
        for key, cap in caps.items():
            assert isinstance(params[key], int | float) and params[key] <= cap, (name, key)
            with pytest.raises(InvalidRequest, match=f"{key}={int(cap) + 1} is above this server's limit"):
                book.spec(f"{name}:{key}={int(cap) + 1}")
            assert book.spec(f"{name}:{key}={int(cap)}").canonical


def test_lgbm_sched_no_longer_escapes_the_caps() -> None:
    """The attack of issue 25: 1000 trees, 8 threads and a million training rows were accepted for lgbm-sched."""
    book = SpecBook(registry_factory, Limits(), ["request"])
    for asked in ("trees=1000", "threads=8", "max_train=1000000"):
        with pytest.raises(InvalidRequest, match="above this server's limit for lgbm-sched"):
            book.spec(f"lgbm-sched:{asked}")


def test_an_estimator_limit_overrides_one_entry_and_keeps_the_others() -> None:
    book = SpecBook(registry_factory, Limits(estimator_limit=("lgbm-quantile:trees=50",)), ["request"])
    with pytest.raises(InvalidRequest, match="trees=51"):
        book.spec("lgbm-quantile:trees=51")
    with pytest.raises(InvalidRequest, match="threads=3"):
        book.spec("lgbm-sched:threads=3")  # still held to the built-in table
