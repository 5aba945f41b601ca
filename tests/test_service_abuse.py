"""Clients that try to stop the server for everyone: health watchers, slot hogs, heavy SPECs, abandoned
forecasts, unread answers (issue 25). Each test compares with the same server's quiet figure, never with a
wall-clock bound: the machine is shared and loaded."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from service_support import HeldEstimator, UnreadingClient, history, largest_forecast, status_of, wait_for, write_secret

from kernel.errors import InvalidRequest, Unavailable
from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.estimators.base import Estimator
from predictor.estimators.lgbm.estimator import LGBMQuantileEstimator
from predictor.estimators.lgbm.model import TrainedModel
from predictor.estimators.lgbm.training import TrainingData
from predictor.forecasting import Scheduler
from predictor.proto import pb, rpc
from predictor.registry import available
from predictor.service.client import PredictorClient, PredictorError
from predictor.service.codec import add_jobs, forecast_request
from predictor.service.connection import Credentials
from predictor.service.healthstatus import HealthStatus
from predictor.service.limits import ESTIMATOR_CAPS, REQUEST_EXPANSION, CallKind, Limits
from predictor.service.server import PredictorServer, Security, start_server
from predictor.service.specs import SpecBook, registry_factory
from predictor.service.training import QUEUED_TRAININGS, TRAINING_THREADS, Trainer, waiting_at_most
from simulator.forecast import FORWARD_SIMULATION

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


class WatchContext:
    """What `HealthServicer.Watch` asks of a call's context: where to register the call's close callback."""

    def __init__(self) -> None:
        self.on_close: list[Callable[[], None]] = []

    def add_callback(self, callback: Callable[[], None]) -> bool:
        self.on_close.append(callback)
        return True


@pytest.mark.parametrize("change", ["set", "enter_graceful_shutdown", "a new watcher"])
def test_a_watcher_leaving_while_a_status_is_sent_does_not_deadlock(change: str) -> None:
    """A status change sends to each watcher, and so does a new watcher's first answer; a send may wait for the
    server's polling thread, and if that thread is closing another watcher then, it needs the servicer's lock
    (`_on_close_callback`). grpc_health 1.85 held the lock while sending: a stop hung so in this suite.
    `HealthStatus` sends outside it."""
    servicer = HealthStatus()
    leaving, staying = WatchContext(), WatchContext()
    closed, armed = threading.Event(), threading.Event()
    closed_while_sending: list[bool] = []

    def polling_thread_closes_the_other() -> None:
        leaving.on_close[0]()
        closed.set()

    def send(response: health_pb2.HealthCheckResponse) -> None:
        if armed.is_set() and not closed.is_set():
            threading.Thread(target=polling_thread_closes_the_other, daemon=True).start()
            # the send waits for the polling thread, as grpc's _send_response does (here 10 s at most: a deadlock
            # shows as a close that did not happen while the send waited)
            closed_while_sending.append(closed.wait(10))

    servicer.Watch(health_pb2.HealthCheckRequest(), leaving, send_response_callback=lambda response: None)
    if change != "a new watcher":
        servicer.Watch(health_pb2.HealthCheckRequest(), staying, send_response_callback=send)
    armed.set()
    if change == "set":
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    elif change == "enter_graceful_shutdown":
        servicer.enter_graceful_shutdown()
    else:
        servicer.Watch(health_pb2.HealthCheckRequest(), staying, send_response_callback=send)
    assert closed_while_sending == [True]
    serving = health_pb2.HealthCheckResponse.SERVING if change == "a new watcher" else None
    status = servicer.Check(health_pb2.HealthCheckRequest(), None).status
    assert status == (serving or health_pb2.HealthCheckResponse.NOT_SERVING)


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


# --- what refused calls leave behind, and what Status tells whom ---------------------------------------------


def test_refused_calls_create_no_namespace() -> None:
    """A completion after year 5138, or a question about one, is refused: it used to leave an empty namespace."""
    running, address = serving(Limits())
    late = 10**12
    try:
        with PredictorClient(address, timeout=PATIENT_SECONDS) as client:
            job = JobRequest(1, late - 100, user=1, group=1, t_req=60, procs=1)
            code, _ = status_of(lambda: client.observe([FinishedJob(job, late, 60)], namespace="ghost-observe"))
            assert code == grpc.StatusCode.INVALID_ARGUMENT
            code, _ = status_of(lambda: client.sync([], [job], namespace="ghost-sync"))
            assert code == grpc.StatusCode.INVALID_ARGUMENT
            spec = "lgbm-quantile:trees=5"  # its questions are recorded, so they create the namespace
            code, _ = status_of(lambda: client.predict_job(job, namespace="ghost-predict", estimator=spec))
            assert code == grpc.StatusCode.INVALID_ARGUMENT
            assert client.list_namespaces() == []
            assert client.status("ghost-sync").namespaces == 0
            client.observe(history(10), namespace="real")  # a call that is answered still creates it
            assert [view.name for view in client.list_namespaces()] == ["real"]
    finally:
        running.stop(0).wait()


def test_status_shows_a_token_only_its_own_namespaces_counts(tmp_path: Path) -> None:
    """Any token used to see the server-wide namespace and call counts; now only the operator's (`*`) does."""
    team, operator = "t" * 32, "p" * 32
    tokens = write_secret(tmp_path / "tokens", f"{team} team-*\n{operator} *\n")
    running, address = serving(Limits(), security=Security(tokens=str(tokens)))
    try:
        with (
            PredictorClient(address, timeout=PATIENT_SECONDS, credentials=Credentials(token=team)) as own,
            PredictorClient(address, timeout=PATIENT_SECONDS, credentials=Credentials(token=operator)) as admin,
        ):
            for name in ("other-a", "other-b", "other-c"):
                admin.observe(history(10), namespace=name)
            own.observe(history(10), namespace="team-a")
            mine = own.status("team-a")
            assert (mine.namespace_exists, mine.completions, mine.namespaces) == (True, 10, 1)
            assert mine.calls == () and mine.training_runs == 0
            everything = admin.status("team-a")
            assert everything.namespaces == 4 and any(call.rpc == "ObserveCompletions" for call in everything.calls)
    finally:
        running.stop(0).wait()


# --- trainings off the request path ------------------------------------------------------------------------------

TRAINING_HELD = threading.Event()


@dataclass(kw_only=True, eq=False, repr=False)
class HeldTraining(LGBMQuantileEstimator):
    """lgbm-quantile whose trainings last until the test lets them end: a training as slow as a test needs."""

    def train(self, data: TrainingData) -> TrainedModel:
        TRAINING_HELD.wait(60)
        return super().train(data)


def held_training_factory(spec: str) -> tuple[Estimator, str]:
    if spec == "held":
        return HeldTraining(min_train=50, trees=2, retrain="1d", swap="1h", window="30d"), "held"
    return registry_factory(spec)


def test_a_call_that_would_wait_for_a_training_is_refused_within_its_deadline_and_frees_its_slot() -> None:
    """Requests used to wait on a training with no deadline, holding their call slot; now the wait is bounded
    by the call's deadline and --max-wait: the call is refused UNAVAILABLE (retry) and the training goes on."""
    TRAINING_HELD.clear()
    running, address = serving(Limits(max_wait=0.5), estimator_factory=held_training_factory)
    try:
        with PredictorClient(address, timeout=PATIENT_SECONDS) as client:
            finished = history(120)
            client.observe(finished, namespace="slow")
            now = finished[-1].end + 10
            first = JobRequest(1, now, user=1, group=7, t_req=3600, procs=4)
            assert client.predict_job(first, namespace="slow", estimator="held").prediction.fallback  # training starts
            later = first._replace(job_id=2, submit=now + 7200)  # past the point where the new model goes live
            code, details = status_of(lambda: client.predict_job(later, namespace="slow", estimator="held"))
            assert code == grpc.StatusCode.UNAVAILABLE and "still training" in details
            assert running.gate.admission.in_use(CallKind.CALL) == 0  # its slot given back
            TRAINING_HELD.set()
            answers: list[Prediction] = []
            refusals: list[str] = []

            def retried() -> bool:  # as the refusal asks: retry until the training is done (it takes what it takes)
                try:
                    answers.append(client.predict_job(later, namespace="slow", estimator="held").prediction)
                except PredictorError as error:
                    refusals.append(str(error))
                    return False
                return True

            wait_for(retried, PATIENT_SECONDS)
            assert all("still training" in refusal for refusal in refusals), refusals
            assert not answers[0].fallback  # from the model trained meanwhile
    finally:
        TRAINING_HELD.set()
        running.stop(0).wait()


def test_a_training_that_finds_the_queue_full_waits_only_as_long_as_its_call_may() -> None:
    trainer = Trainer()
    release = threading.Event()
    held = [trainer.submit(release.wait, 60) for _ in range(TRAINING_THREADS + QUEUED_TRAININGS)]
    outcome: list[BaseException] = []

    def one_more() -> None:
        try:
            with waiting_at_most(0.2):
                trainer.submit(time.sleep, 0)
        except Unavailable as error:
            outcome.append(error)

    try:
        waiting = threading.Thread(target=one_more)
        waiting.start()
        waiting.join(PATIENT_SECONDS)
        assert not waiting.is_alive() and len(outcome) == 1  # refused, not queued for ever
    finally:
        release.set()
        for future in held:
            future.result()
        trainer.shutdown()


# --- forecasts nobody waits for --------------------------------------------------------------------------------


def heavy_forecast() -> pb.ForecastStartRequest:
    return forecast_request(largest_forecast(), Scheduler("fcfs", "conservative", "queue"), "", "request", None)


def process_cpu_over(seconds: float) -> float:
    started = time.process_time()
    time.sleep(seconds)
    return time.process_time() - started


@pytest.mark.slow
def test_a_forecast_whose_caller_gives_up_stops_and_its_cpu_with_it() -> None:
    """ForecastStart at its documented maximum sizes used to run on (58 CPU seconds) after its client left."""
    running, address = serving(Limits(), start_forecaster=FORWARD_SIMULATION)
    try:
        with grpc.insecure_channel(address) as channel:
            call = rpc.PredictorStub(channel).ForecastStart.future(heavy_forecast(), timeout=10 * PATIENT_SECONDS)
            wait_for(lambda: running.gate.admission.in_use(CallKind.CALL) == 1)
            time.sleep(0.5)  # well into the forward runs
            call.cancel()  # the client gives up
            wait_for(lambda: running.gate.admission.in_use(CallKind.CALL) == 0, PATIENT_SECONDS)
        busy = process_cpu_over(1.0)
        assert busy < 0.3, f"the server still used {busy:.2f} CPU seconds in one second after its caller left"
    finally:
        running.stop(0).wait()


def test_a_forecast_is_bounded_in_cpu() -> None:
    running, address = serving(Limits(forecast_cpu_seconds=0.5), start_forecaster=FORWARD_SIMULATION)
    try:
        with grpc.insecure_channel(address) as channel:
            forecast = rpc.PredictorStub(channel).ForecastStart
            code, details = status_of(lambda: forecast(heavy_forecast(), timeout=10 * PATIENT_SECONDS))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--forecast-cpu-seconds" in details
    finally:
        running.stop(0).wait()


# --- answers a client never reads --------------------------------------------------------------------------------


def test_answers_a_client_never_reads_hold_memory_within_the_budget_until_they_are_cut() -> None:
    """A call's slot used to be given back once its answer was made, read or not: unread answers piled up
    without bound (482 MB against --memory-limit-mb 400). Now the memory reserved for the call is held until
    the answer has left, calls beyond the budget are refused, and an answer left unread is cut."""
    limits = Limits(memory_limit_mb=32, max_batch=1000, send_timeout=300)  # 3.2 MB for requests and answers
    running, address = serving(limits)
    jobs = [JobRequest(i, 100, i % 50, 1, 3600, 1) for i in range(400)]  # a request in one HTTP/2 frame
    request = pb.PredictBatchRequest(namespace="unread", estimator="request")
    add_jobs(request.jobs, jobs)
    message = request.SerializeToString()
    unreading = UnreadingClient(address)
    try:
        for _ in range(100):
            unreading.call("/tsched.v1.Predictor/PredictBatch", message)
        with PredictorClient(address, timeout=PATIENT_SECONDS) as client:

            def answered() -> dict[str, int]:
                try:
                    calls = client.status().calls
                except PredictorError:  # refused while the unread calls take their turns (same address)
                    return {}
                return {call.code: call.count for call in calls if call.rpc == "PredictBatch"}

            wait_for(lambda: sum(answered().values()) == 100, PATIENT_SECONDS)  # every call answered or refused
            budget = limits.request_budget_bytes // (len(message) * REQUEST_EXPANSION)
            assert answered().get("RESOURCE_EXHAUSTED", 0) >= 100 - budget  # refused beyond the budget
            assert 0 < running.gate.admission.reserved <= limits.request_budget_bytes  # held by unread answers
            assert client.predict(user=1, group=1, t_req=60, procs=1).prediction.t_sched == 60  # others served
            running.gate.watchdog.send_timeout = 0.5  # then the server's patience runs out:
            wait_for(lambda: running.gate.admission.reserved == 0, PATIENT_SECONDS)  # cut, memory given back
    finally:
        unreading.close()
        running.stop(0).wait()
