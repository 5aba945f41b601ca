"""Every RPC fuzzed on a real server: random bytes, mutated messages, and well-formed messages of any content.

Whatever arrives, the server answers with a response or with a refusal a
client can act on (never INTERNAL or UNKNOWN, never a message longer than
1000 characters), keeps serving, and logs no traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.proto import pb
from predictor.service.client import PredictorClient
from predictor.service.launcher import ServerProcess
from predictor.service.limits import Limits

#: Refusals a client can act on; anything else (INTERNAL, UNKNOWN, ...) means the server failed.
ACCEPTABLE = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
REQUESTS: dict[str, type[Any]] = {
    "Predict": pb.PredictRequest,
    "PredictBatch": pb.PredictBatchRequest,
    "ObserveCompletions": pb.ObserveCompletionsRequest,
    "Sync": pb.SyncRequest,
    "ListEstimators": pb.ListEstimatorsRequest,
    "ResetNamespace": pb.ResetNamespaceRequest,
}

int64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([-(2**63), -2, -1, 0, 1, 2, 3600, 86_400, 10**11, 10**11 + 1, 2**63 - 1]),
    st.integers(0, 10**7),
)
#: Mostly names a request may carry (so that the fuzzing gets past them), sometimes anything.
valid_namespaces = st.sampled_from(["", "default", "fuzz", "fuzz-a", "fuzz/b"]) | st.text(
    "fuzab", min_size=1, max_size=3
)
namespaces = st.one_of(valid_namespaces, valid_namespaces, valid_namespaces, st.text(max_size=300))
valid_specs = st.sampled_from(["", "request", "percentile", "last2", "mean-std", "lgbm-quantile:min_train=50,trees=2"])
estimators = st.one_of(
    valid_specs,
    valid_specs,
    valid_specs,
    st.sampled_from(["percentile:q=", "percentile:q=nan", "last2:x=1", "oracle", "lgbm-quantile:trees=1e9", ":"]),
    st.text(max_size=600),
)


@st.composite
def jobs(draw: st.DrawFn, noisy: bool = True) -> pb.Job:
    """Plausible jobs (the fuzzing must reach the estimators); when `noisy`, often with fields missing or extreme."""
    fields = ("job_id", "submit", "user", "group", "t_req", "procs", "queue", "executable")
    if noisy and draw(st.integers(0, 3)) == 0:
        present = draw(st.sets(st.sampled_from(fields)))
        return pb.Job(**{name: draw(int64) for name in present})
    job = pb.Job(
        job_id=draw(st.integers(0, 10**6)),
        submit=draw(st.integers(0, 10**7)),
        user=draw(st.integers(-1, 20)),
        group=draw(st.integers(-1, 5)),
        t_req=draw(st.integers(1, 10**6)),
        procs=draw(st.integers(1, 1024)),
    )
    if noisy and draw(st.booleans()):
        setattr(job, draw(st.sampled_from(fields)), draw(int64))
    return job


@st.composite
def completions(draw: st.DrawFn, noisy: bool = True) -> pb.Completion:
    job = draw(jobs(noisy))
    if noisy and draw(st.integers(0, 3)) == 0:
        completion = pb.Completion()
        if draw(st.booleans()):
            completion.job.CopyFrom(job)
        for name in ("end", "runtime"):
            if draw(st.booleans()):
                setattr(completion, name, draw(int64))
        return completion
    runtime = draw(st.integers(0, 10**5))
    end = min(2**63 - 1, job.submit + runtime + draw(st.integers(0, 10**4)))
    return pb.Completion(job=job, end=end, runtime=runtime)


def in_end_order(completions: list[pb.Completion]) -> list[pb.Completion]:
    return sorted(completions, key=lambda completion: completion.end)


def messages(method: str) -> st.SearchStrategy[Any]:
    """Well-formed messages of `method`'s request type, with any content."""
    request = REQUESTS[method]
    fields: dict[str, st.SearchStrategy[Any]] = {"namespace": namespaces}
    names = request.DESCRIPTOR.fields_by_name
    if "estimator" in names:
        fields["estimator"] = estimators
    if "job" in names:
        fields["job"] = st.one_of(st.none(), jobs())
    for repeated in ("jobs", "submitted"):
        if repeated in names:
            fields[repeated] = st.lists(jobs(noisy=False), max_size=40) | st.lists(jobs(), max_size=40)
    if "completions" in names:  # often clean and in end order, as clients send them
        clean = st.lists(completions(noisy=False), max_size=40).map(in_end_order)
        fields["completions"] = st.one_of(clean, clean, st.lists(completions(), max_size=40))
    return st.fixed_dictionaries(fields).map(
        lambda values: request(**{k: v for k, v in values.items() if v is not None})
    )


@st.composite
def mutated(draw: st.DrawFn, method: str) -> bytes:
    """A well-formed message's bytes, cut, flipped or spliced."""
    data = bytearray(draw(messages(method)).SerializeToString())
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "cut", "insert"]))
        position = draw(st.integers(0, max(0, len(data) - 1)))
        if action == "flip" and data:
            data[position] ^= draw(st.integers(1, 255))
        elif action == "cut":
            del data[position:]
        else:
            data[position:position] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    running = ServerProcess(
        default_estimators=["percentile", "last2"], limits=Limits(max_batch=1000, max_namespaces=2000)
    )
    yield running
    assert running.stop() == 0
    log = "".join(running.log)
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as opened:
        yield opened


def check(call: Callable[[], object]) -> None:
    """The call is answered, or refused with an acceptable code and a short message."""
    code, details = grpc.StatusCode.OK, ""
    try:
        call()
    except grpc.RpcError as error:
        code, details = error.code(), error.details() or ""
    assert code in ACCEPTABLE, f"{code.name}: {details}"
    assert len(details) <= 1000


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(REQUESTS))
@FUZZ
@given(data=st.data())
def test_every_rpc_answers_whatever_it_is_sent(channel: grpc.Channel, method: str, data: st.DataObject) -> None:
    raw = channel.unary_unary(f"/tsched.v1.Predictor/{method}")
    kind = data.draw(st.sampled_from(["message", "mutated", "bytes"]))
    if kind == "message":
        payload = data.draw(messages(method)).SerializeToString()
    elif kind == "mutated":
        payload = data.draw(mutated(method))
    else:
        payload = data.draw(st.binary(max_size=2048))
    check(lambda: raw(payload, timeout=10))


@pytest.mark.slow
@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_sync_stream_answers_whatever_it_is_sent(channel: grpc.Channel, data: st.DataObject) -> None:
    stream = channel.stream_stream("/tsched.v1.Predictor/SyncStream")
    frames = data.draw(
        st.lists(
            st.one_of(
                messages("Sync").map(lambda message: message.SerializeToString()),
                mutated("Sync"),
                st.binary(max_size=512),
            ),
            max_size=5,
        )
    )
    check(lambda: list(stream(iter(frames), timeout=10)))


def test_the_server_still_serves_after_the_fuzzing(server: ServerProcess) -> None:
    with PredictorClient(server.address) as client:
        assert client.health() == "SERVING"
        assert client.predict(user=1, group=1, t_req=60, procs=1, namespace="after-fuzz").prediction.t_sched == 60
