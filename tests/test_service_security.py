"""Who may call a real server: TLS (and client certificates), bearer tokens, Unix sockets, and listening open."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from service_support import Certificates, history, status_of, submissions, write_secret

from kernel.errors import UsageError
from predictor.proto import pb
from predictor.service.client import Credentials, PredictorClient
from predictor.service.codec import sync_request
from predictor.service.launcher import ServerProcess
from predictor.service.remote import RemoteSession
from predictor.service.server import PredictorServer, Security, start_server
from tsched.cli import main

OPERATOR = "o" * 40
SCHEDULER = "c" * 40
ROGUE = "r" * 40
#: A deadline no loaded machine misses: what these tests check is who is let in, never how fast.
PATIENT = 60.0


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_secret(
        tmp_path_factory.mktemp("tokens") / "tokens",
        f"# who may do what\n{OPERATOR} * reset\n{SCHEDULER} cluster-a,sim-*\n",
    )


@pytest.fixture(scope="module")
def secured(certificates: Certificates, tokens: Path) -> Iterator[PredictorServer]:
    security = Security(
        tls_cert=str(certificates.server_cert), tls_key=str(certificates.server_key), tokens=str(tokens)
    )
    running, _ = start_server("127.0.0.1:0", default_estimators=["last2"], security=security)
    yield running
    running.stop(0).wait()


def credentials(certificates: Certificates, token: str | None) -> Credentials:
    return Credentials(token=token, tls=True, tls_ca=certificates.ca.read_bytes())


def connect(server: PredictorServer, certificates: Certificates, token: str | None) -> PredictorClient:
    return PredictorClient(f"localhost:{server.port}", timeout=PATIENT, credentials=credentials(certificates, token))


# --- tokens ----------------------------------------------------------------------------------------


def test_a_token_uses_its_namespaces_and_nothing_else(secured: PredictorServer, certificates: Certificates) -> None:
    with connect(secured, certificates, SCHEDULER) as scheduler:
        assert scheduler.observe(history(20), namespace="cluster-a") == 20
        assert len(scheduler.predict_batch(submissions(20_000), namespace="sim-7")) == 6
        code, details = status_of(lambda: scheduler.observe(history(5), namespace="cluster-b"))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "'cluster-b'" in details
        code, _ = status_of(lambda: scheduler.predict(user=1, group=1, t_req=60, procs=1))  # "default"
        assert code == grpc.StatusCode.PERMISSION_DENIED
        code, details = status_of(lambda: scheduler.reset_namespace("cluster-a"))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "not reset" in details
        assert scheduler.list_estimators("cluster-a").completions == 20
    with connect(secured, certificates, OPERATOR) as operator:
        assert operator.reset_namespace("cluster-a") == 20


@pytest.mark.parametrize("token", [None, ROGUE])
def test_without_a_known_token_only_health_answers(
    secured: PredictorServer, certificates: Certificates, token: str | None
) -> None:
    with connect(secured, certificates, token) as stranger:
        assert stranger.health() == "SERVING"
        code, details = status_of(lambda: stranger.predict(user=1, group=1, t_req=60, procs=1, namespace="sim-1"))
        assert code == grpc.StatusCode.UNAUTHENTICATED and ROGUE not in details
        code, _ = status_of(lambda: stranger.list_estimators("sim-1"))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        stream = stranger.sync_stream()
        code, _ = status_of(lambda: stream.exchange(pb.SyncRequest(namespace="sim-1"), timeout=5))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reflection = reflection_pb2_grpc.ServerReflectionStub(stranger._connection.channel)
        code, _ = status_of(lambda: next(iter(reflection.ServerReflectionInfo(iter([request]), timeout=5))))
        assert code == grpc.StatusCode.UNAUTHENTICATED


def test_each_message_of_a_stream_is_checked(secured: PredictorServer, certificates: Certificates) -> None:
    with connect(secured, certificates, SCHEDULER) as scheduler:
        stream = scheduler.sync_stream()
        allowed = sync_request([], submissions(100, count=1), "sim-stream", "")
        assert len(stream.exchange(allowed, timeout=5).predictions) == 1
        forbidden = sync_request([], submissions(100, count=1), "cluster-b", "")
        code, details = status_of(lambda: stream.exchange(forbidden, timeout=5))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "'cluster-b'" in details
    with connect(secured, certificates, OPERATOR) as operator:
        assert operator.list_estimators("cluster-b").namespace_exists is False  # nothing was recorded


def test_a_remote_session_with_a_token_simulates(secured: PredictorServer, certificates: Certificates) -> None:
    session = RemoteSession(
        f"localhost:{secured.port}",
        "sim-session",
        "last2",
        reset=False,
        credentials=credentials(certificates, SCHEDULER),
    )
    finished = history(30)
    predictions = session.sync(finished, submissions(finished[-1].end))
    session.close()
    assert session.fallbacks == 0 and any(not p.fallback for p in predictions)


# --- TLS --------------------------------------------------------------------------------------------


def test_tls_refuses_clients_that_do_not_check_or_do_not_speak_it(
    secured: PredictorServer, certificates: Certificates
) -> None:
    address = f"localhost:{secured.port}"
    with PredictorClient(address, timeout=PATIENT, credentials=Credentials(token=OPERATOR)) as plain:
        assert status_of(plain.health)[0] == grpc.StatusCode.UNAVAILABLE
    wrong_ca = Credentials(token=OPERATOR, tls=True, tls_ca=certificates.other_ca.read_bytes())
    with PredictorClient(address, timeout=PATIENT, credentials=wrong_ca) as misled:
        assert status_of(misled.health)[0] == grpc.StatusCode.UNAVAILABLE
    with connect(secured, certificates, OPERATOR) as checked:
        assert checked.health() == "SERVING"


def test_mutual_tls_needs_a_client_certificate(certificates: Certificates) -> None:
    security = Security(
        tls_cert=str(certificates.server_cert),
        tls_key=str(certificates.server_key),
        tls_client_ca=str(certificates.ca),
    )
    running, port = start_server("127.0.0.1:0", security=security)
    try:
        anonymous_credentials = credentials(certificates, None)
        with PredictorClient(f"localhost:{port}", timeout=PATIENT, credentials=anonymous_credentials) as anonymous:
            assert status_of(anonymous.health)[0] == grpc.StatusCode.UNAVAILABLE
        certified = Credentials.from_files(
            tls_ca=str(certificates.ca), tls_cert=str(certificates.client_cert), tls_key=str(certificates.client_key)
        )
        with PredictorClient(f"localhost:{port}", timeout=PATIENT, credentials=certified) as client:
            assert client.predict(user=1, group=1, t_req=60, procs=1).prediction.t_sched == 60
    finally:
        running.stop(0).wait()


# --- where a server may listen ------------------------------------------------------------------


def test_listening_open_off_loopback_is_refused_unless_insecure(tokens: Path) -> None:
    with pytest.raises(UsageError, match="--insecure"):
        start_server("0.0.0.0:0")
    for security in (Security(insecure=True), Security(tokens=str(tokens))):
        running, port = start_server("0.0.0.0:0", security=security)
        running.stop(0).wait()
        assert port > 0


def test_a_unix_socket_is_its_owners_and_is_not_stolen(tmp_path: Path) -> None:
    path = tmp_path / "tsched.sock"
    running, port = start_server(f"unix:{path}", default_estimators=["request"])
    try:
        assert port == 0 and stat.S_IMODE(path.stat().st_mode) == 0o600
        with PredictorClient(f"unix:{path}", timeout=PATIENT) as client:
            assert client.predict(user=1, group=1, t_req=60, procs=1).prediction.t_sched == 60
        with pytest.raises(OSError, match="another server is listening"):
            start_server(f"unix:{path}")
    finally:
        running.stop(0).wait()
    # A socket left behind by a server that is gone is replaced; a file that is not a socket is not.
    revived, _ = start_server(f"unix:{path}", security=Security(socket_mode=0o660))
    assert stat.S_IMODE(path.stat().st_mode) == 0o660
    revived.stop(0).wait()
    other = tmp_path / "notes.txt"
    other.write_text("keep me")
    with pytest.raises(OSError, match="not a socket"):
        start_server(f"unix:{other}")
    assert other.read_text() == "keep me"


def test_sighup_reloads_the_tokens(tmp_path: Path) -> None:
    tokens = write_secret(tmp_path / "tokens", f"{OPERATOR} *\n")
    server = ServerProcess(security=Security(tokens=str(tokens)))
    try:
        with PredictorClient(server.address, timeout=PATIENT, credentials=Credentials(token=SCHEDULER)) as newcomer:
            assert newcomer.health() == "SERVING"  # health needs no token
            assert status_of(lambda: newcomer.list_estimators("x"))[0] == grpc.StatusCode.UNAUTHENTICATED
            tokens.write_text(f"{SCHEDULER} *\n")
            server.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while not any("tokens reloaded" in line for line in server.log) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert newcomer.list_estimators("x").namespace_exists is False
        with PredictorClient(server.address, timeout=PATIENT, credentials=Credentials(token=OPERATOR)) as retired:
            assert status_of(lambda: retired.list_estimators("x"))[0] == grpc.StatusCode.UNAUTHENTICATED
    finally:
        assert server.stop() == 0


# --- the commands -----------------------------------------------------------------------------------


def test_commands_connect_with_a_token_file_and_tls(
    secured: PredictorServer, certificates: Certificates, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = write_secret(tmp_path / "token", f"# the operator's\n{OPERATOR}\n")
    connection = ["--token-file", str(token), "--tls-ca", str(certificates.ca)]
    address = f"localhost:{secured.port}"
    job = ["--user", "3", "--group", "1", "--request", "1:00:00", "--procs", "4", "--namespace", "sim-cli"]
    assert main(["predict", "--address", address, *job, *connection, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["t_sched"] == 3600
    assert main(["predict", "--address", address, *job, "--tls-ca", str(certificates.ca)]) == 2
    assert "UNAUTHENTICATED" in capsys.readouterr().err
    summary, trace = tmp_path / "run.json", tmp_path / "small.swf"
    assert main(["trace", "generate", "--jobs", "600", "--procs", "64", "--out", str(trace)]) == 0
    simulate = ["simulate", "--trace", str(trace), "--address", address, "--namespace", "sim-run"]
    assert main([*simulate, "--estimator", "last2", *connection, "--json", str(summary)]) == 0
    assert json.loads(summary.read_text())["predictor_fallbacks"] == 0


def test_serve_refuses_to_listen_open_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--listen", "0.0.0.0:0"]) == 2
    assert "--insecure" in capsys.readouterr().err


def test_a_token_file_readable_by_everyone_is_reported(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{OPERATOR} *\n")
    os.chmod(tokens, 0o644)
    server = ServerProcess(security=Security(tokens=str(tokens)))
    assert server.stop() == 0
    assert any("can be read by every user" in line for line in server.log)


def test_a_token_lists_only_the_namespaces_it_may_use(secured: PredictorServer, certificates: Certificates) -> None:
    with connect(secured, certificates, OPERATOR) as operator, connect(secured, certificates, SCHEDULER) as scheduler:
        for namespace in ("sim-listed", "hidden-listed"):
            operator.observe(history(5), namespace=namespace)
        assert {"sim-listed", "hidden-listed"} <= {info.name for info in operator.list_namespaces()}
        seen = {info.name for info in scheduler.list_namespaces()}
        assert "sim-listed" in seen and "hidden-listed" not in seen
        with connect(secured, certificates, None) as anonymous:
            code, _ = status_of(anonymous.list_namespaces)
        assert code == grpc.StatusCode.UNAUTHENTICATED
