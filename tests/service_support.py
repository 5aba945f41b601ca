"""What the service's tests share: jobs to send, refusals to read, test certificates and token files."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import random
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.estimators.baselines import RequestEstimator
from predictor.forecasting import QueueState, StartedJob
from predictor.frames import finished_from_frame, jobs_to_requests
from predictor.proto import pb, rpc
from predictor.service.client import PredictorClient, PredictorError
from predictor.service.codec import add_completions, add_names, sync_request
from predictor.service.forecasts import MAX_FORECAST_RUNNING, MAX_FORECAST_WAITING
from simulator.workloads.synthetic import generate_workload

DAY = 86_400
#: The deadline of calls whose speed no test checks: writes wait for fsync, which a busy disk can hold for seconds.
PATIENT_SECONDS = 60
#: Flow-control windows of a client that has stopped reading: it takes what fits in 64 KiB, then nothing.
NOT_READING = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65536)]


def wait_for(condition: Callable[[], object], seconds: float = 20) -> None:
    """Wait until `condition()` is true (a state the server reaches by itself), failing after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert condition(), "the condition did not come true in time"


class HeldEstimator(RequestEstimator):
    """The request estimator, answering only while `answering` is set: a call held in flight for as long as a test
    needs it, so that what a test checks is what happens meanwhile, not how long anything takes."""

    def __init__(self, answering: threading.Event) -> None:
        super().__init__()
        self.answering = answering

    def predict(self, job: JobRequest) -> Prediction:
        self.answering.wait(60)
        return super().predict(job)


def history(count: int = 60, users: int = 3, start: int = 0) -> list[FinishedJob]:
    """Finished jobs of a few users, with varied runtimes, in end order."""
    jobs = []
    for index in range(count):
        submit = start + index * 600
        runtime = 300 + (index * 37) % 900
        request = JobRequest(index + 1, submit, user=index % users, group=7, t_req=3600, procs=4)
        jobs.append(FinishedJob(request, submit + 60 + runtime, runtime))
    return sorted(jobs, key=lambda job: job.end)


def submissions(at: int, count: int = 6, users: int = 3, first_id: int = 10_000) -> list[JobRequest]:
    return [
        JobRequest(first_id + index, at, user=index % users, group=7, t_req=3600, procs=4) for index in range(count)
    ]


def instants(count: int = 900) -> list[tuple[list[FinishedJob], list[JobRequest]]]:
    """A scheduler's life as (completions since the last instant, jobs submitted now), for a generated workload."""
    jobs = generate_workload(jobs=count, procs=128, load=0.8, seed=11).jobs
    finished = finished_from_frame(jobs)
    steps: list[tuple[list[FinishedJob], list[JobRequest]]] = []
    done = 0
    for request in jobs_to_requests(jobs):
        if steps and steps[-1][1][0].submit == request.submit:
            steps[-1][1].append(request)
            continue
        ended = []
        while done < len(finished) and finished[done].end <= request.submit:
            ended.append(finished[done])
            done += 1
        steps.append((ended, [request]))
    return steps


def status_of(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    """The status code and message of a call that must be refused."""
    try:
        call()
    except PredictorError as error:
        return error.code, error.details
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    raise AssertionError("the call was accepted")


def flood_stream(address: str) -> tuple[grpc.Channel, Iterator[object]]:
    """A SyncStream that sends requests with large answers for ever and reads none (close the channel to end it)."""
    channel = grpc.insecure_channel(address, options=NOT_READING)
    jobs = [JobRequest(i, 100, i % 50, 1, 3600, 1) for i in range(5000)]
    request = sync_request([], jobs, "flood", "request")
    return channel, rpc.PredictorStub(channel).SyncStream(itertools.repeat(request))


def traffic(address: str, stop: threading.Event, seed: int) -> None:
    """Calls of every kind, good and bad, until `stop` (or the server goes)."""
    rng = random.Random(seed)
    finished = history(200, users=5)
    with grpc.insecure_channel(address) as channel, PredictorClient(address, timeout=5) as client:
        garbage = channel.unary_unary("/tsched.v1.Predictor/Sync")
        while not stop.is_set():
            action = rng.randrange(4)
            try:
                if action == 0:
                    garbage(rng.randbytes(rng.randrange(1, 300)), timeout=5)
                elif action == 1:
                    client.observe(finished, namespace=f"traffic-{seed}")
                elif action == 2:
                    client.sync([], submissions(finished[-1].end), namespace=f"traffic-{seed}")
                else:
                    client.sync_stream().exchange(pb.SyncRequest(namespace=f"traffic-{seed}"), timeout=5)
            except Exception:  # refusals, and the server going away: this is traffic, not a test of answers
                time.sleep(0.01)


@dataclass(frozen=True)
class Certificates:
    """A test CA, a server certificate for localhost and 127.0.0.1, and a client certificate, as PEM files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def make_certificates(folder: Path) -> Certificates:
    """Made with the openssl command at test time: no private key is ever committed."""
    openssl = shutil.which("openssl")
    assert openssl is not None

    def run(*arguments: str) -> None:
        subprocess.run([openssl, *arguments], cwd=folder, check=True, capture_output=True)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        run(
            "req", "-x509", *key, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN=tsched {ca}"
        )
    (folder / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, extension in (("server", ["-extfile", "server.ext"]), ("client", [])):
        run("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=tsched {name}")
        run(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", *extension,
        )  # fmt: skip
    for private in folder.glob("*.key"):
        private.chmod(0o600)
    return Certificates(
        folder / "ca.pem",
        folder / "server.pem",
        folder / "server.key",
        folder / "client.pem",
        folder / "client.key",
        folder / "other-ca.pem",
    )


def write_secret(path: Path, text: str) -> Path:
    """A file only its owner can read, as token files should be."""
    path.touch(mode=0o600)
    path.write_text(text)
    return path


def observe_by_name(address: str, namespace: str, finished: list[FinishedJob], account: str = "proj1") -> int:
    """Report `finished` with each user given as a name (`user-N`) and the group as `account`; return accepted."""
    request = pb.ObserveCompletionsRequest(namespace=namespace)
    add_completions(request.completions, finished)
    for completion in request.completions:
        add_names(completion.job, user=f"user-{completion.job.user}", account=account)
    with grpc.insecure_channel(address) as channel:
        response: pb.ObserveCompletionsResponse = rpc.PredictorStub(channel).ObserveCompletions(request, timeout=10)
    return response.accepted


class UnreadingClient:
    """An HTTP/2 client that sends gRPC calls and never takes an answer: it grants the server a window of 0
    bytes per stream, so every answer stays with the server (a client that stops reading, as an attacker
    would; grpcio's client always reads the answers of unary calls). Requests must fit in one frame (16 KiB):
    the client does not wait for the server's window updates either.
    """

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.authority = address
        self.socket = socket.create_connection((host, int(port)))
        self.next_stream = 1
        #: What the server lets this client send on the connection (HTTP/2 flow control: its window updates).
        self._window = 65535
        self._window_grown = threading.Condition()
        settings = struct.pack(">HI", 0x2, 0) + struct.pack(">HI", 0x4, 0)  # no push; initial window 0
        self.socket.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(0x4, 0, 0, settings))
        self._reader = threading.Thread(target=self._read, daemon=True)  # acknowledges settings, reads no data
        self._reader.start()

    def call(self, method: str, message: bytes) -> None:
        """Start one unary call of `method` (/package.Service/Method) with a serialized request."""
        stream, self.next_stream = self.next_stream, self.next_stream + 2
        headers = b"".join(
            _literal(name, value)
            for name, value in (
                (":method", "POST"), (":scheme", "http"), (":path", method), (":authority", self.authority),
                ("content-type", "application/grpc"), ("te", "trailers"),
            )
        )  # fmt: skip
        body = b"\x00" + struct.pack(">I", len(message)) + message
        assert len(body) <= 16384, "a request of one frame (the largest a peer must accept)"
        with self._window_grown:
            if not self._window_grown.wait_for(lambda: self._window >= len(body), timeout=30):
                raise TimeoutError("the server did not open its window for the request")
            self._window -= len(body)
        self.socket.sendall(_frame(0x1, 0x4, stream, headers) + _frame(0x0, 0x1, stream, body))  # END_STREAM

    def _read(self) -> None:
        buffer = b""
        try:
            while chunk := self.socket.recv(65536):
                buffer += chunk
                while len(buffer) >= 9:
                    length = int.from_bytes(buffer[:3], "big")
                    if len(buffer) < 9 + length:
                        break
                    kind, flags = buffer[3], buffer[4]
                    if kind == 0x4 and not flags & 0x1:  # the server's settings: acknowledged
                        self.socket.sendall(_frame(0x4, 0x1, 0, b""))
                    elif kind == 0x6 and not flags & 0x1:  # ping: answered, or the server drops the connection
                        self.socket.sendall(_frame(0x6, 0x1, 0, buffer[9 : 9 + length]))
                    elif kind == 0x8 and int.from_bytes(buffer[5:9], "big") == 0:  # the connection's window grows
                        with self._window_grown:
                            self._window += int.from_bytes(buffer[9:13], "big") & 0x7FFFFFFF
                            self._window_grown.notify_all()
                    buffer = buffer[9 + length :]
        except OSError:
            return

    def close(self) -> None:
        self.socket.close()


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + struct.pack(">I", stream) + payload


def _literal(name: str, value: str) -> bytes:
    """An HPACK header field, literal without indexing and without Huffman coding (lengths under 127)."""
    return b"\x00" + bytes((len(name),)) + name.encode() + bytes((len(value),)) + value.encode()


def largest_forecast() -> QueueState:
    """A queue at ForecastStart's documented maximum sizes, every running job ending at its own time: under
    conservative backfilling, about a minute of CPU on the project's machine."""
    now = 10**6
    running = [
        StartedJob(JobRequest(100_000 + i, now - 100, 1, 1, 100 + 60 * i, 1), now - 50)
        for i in range(MAX_FORECAST_RUNNING)
    ]
    waiting = [JobRequest(i, now - 10, i % 50, 1, 3600 + i, 1 + (i * 7) % 64) for i in range(MAX_FORECAST_WAITING)]
    return QueueState(now, MAX_FORECAST_RUNNING + 64, running, waiting)


# --- a crafted snapshot (the state-file attack of issue 25) ---


def _pickle_call(function: bytes, *arguments: bytes) -> bytes:
    """Pickle opcodes that call `function` with `arguments` (each itself opcodes) when unpickled."""
    return function + b"(" + b"".join(arguments) + b"tR"


def _pickle_global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _pickle_text(text: str) -> bytes:
    return b"X" + struct.pack("<I", len(text.encode())) + text.encode()


def attrgetter_payload(command: str) -> bytes:
    """A pickle that runs `command` through names the old allow-list admitted: attrgetter("__globals__") of an
    admitted function gives its module's globals, whose `get("pickle").loads` unpickles anything."""
    getter = _pickle_global("operator", "attrgetter")
    module_globals = _pickle_call(
        _pickle_call(getter, _pickle_text("__globals__")), _pickle_global("predictor.service.snapshots", "_finished")
    )
    pickle_module = _pickle_call(
        _pickle_call(_pickle_call(getter, _pickle_text("get")), module_globals), _pickle_text("pickle")
    )
    loads = _pickle_call(_pickle_call(getter, _pickle_text("loads")), pickle_module)

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (command,))

    inner = pickle.dumps(Payload(), protocol=2)
    return _pickle_call(loads, b"B" + struct.pack("<I", len(inner)) + inner) + b"."


def code_running_payloads(command: str) -> tuple[bytes, bytes]:
    """Two snapshots that run `command` if unpickled: through the old allow-list (attrgetter), and plainly."""

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (command,))

    return attrgetter_payload(command), pickle.dumps(Payload())


def snapshotted_state(folder: Path) -> Path:
    """A state file whose namespace 'cluster' has a snapshot (20 completions, a snapshot every 10 events)."""
    from predictor.service.core import PredictorCore
    from predictor.service.limits import Limits
    from predictor.service.state import CompletionStore

    state = folder / "state.sqlite"
    core = PredictorCore(["percentile"], store=CompletionStore(state), limits=Limits(snapshot_every=10))
    core.observe("cluster", history(20), lambda: None)
    core.close()
    return state


def damaged_state(folder: Path) -> Path:
    """A state file of 20 namespaces with a page in the middle overwritten."""
    from predictor.service.state import CompletionStore

    state = folder / "state.sqlite"
    store = CompletionStore(state)
    for index in range(20):
        store.record(f"ns-{index}", 1, history(200))
    store.close()
    data = bytearray(state.read_bytes())
    data[4096 * 3 : 4096 * 3 + 64] = b"\xee" * 64  # a page in the middle
    state.write_bytes(bytes(data))
    return state


def rewritten_snapshot(blob: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    """A snapshot whose JSON document `change` altered (its arrays unchanged)."""
    start = len(b"tsched-snapshot\n") + 8
    (length,) = struct.unpack_from("<Q", blob, start - 8)
    document = json.loads(blob[start : start + length])
    change(document)
    text = json.dumps(document).encode()
    return blob[: start - 8] + struct.pack("<Q", len(text)) + text + blob[start + length :]
