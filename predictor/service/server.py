"""Hosting the predictor service: transport security, the gate, health and reflection, and a stop that always ends.

A server listens on TCP (`HOST:PORT`, with TLS when given a certificate and
key, and mutual TLS with a client CA) or on a Unix socket (`unix:PATH`, its
file permissions as the access control). With a token file every call but a
health check needs a token (`predictor.service.security`). A server refuses
to listen off this machine with neither TLS nor tokens unless told
`insecure`. Every call passes the gate (`predictor.service.gate`), which
holds it to the server's `Limits`.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry

from kernel.errors import InvalidRequest, UsageError
from predictor.forecasting import StartForecaster
from predictor.proto import rpc
from predictor.service.codec import max_message_bytes
from predictor.service.core import PredictorCore
from predictor.service.gate import Gate, TokenSource
from predictor.service.healthstatus import HealthStatus
from predictor.service.limits import KEEPALIVE_TIMEOUT_SECONDS, Limits
from predictor.service.metrics import CallMetrics, MetricsEndpoint, StateCollector
from predictor.service.security import TokenTable, check_exposure, readable_by_others
from predictor.service.servicer import SERVICE_NAME, PredictorServicer
from predictor.service.specs import EstimatorFactory, registry_factory
from predictor.service.state import CompletionStore
from predictor.service.views import EstimatorView

log = logging.getLogger("tsched.service")

#: The estimator a server answers with when none is configured: Tang et al.'s adjuster.
DEFAULT_ESTIMATOR = "percentile"
DEFAULT_LISTEN = "127.0.0.1:50051"
#: Who may connect to a Unix socket by default: the server's own user.
DEFAULT_SOCKET_MODE = 0o600
#: Streams one connection may open at once (HTTP/2's recommended minimum); the server-wide limits still apply.
STREAMS_PER_CONNECTION = 100
#: Clients may ping an idle connection at most this often (a client pinging faster is disconnected).
MIN_CLIENT_PING_SECONDS = 10
#: Beyond what the gate admits, calls queue for a thread up to this many times the thread count, then grpcio refuses.
QUEUED_CALLS_PER_THREAD = 4
#: Once the grace period is over, how long closing the state file may take before the process exits anyway.
CLOSE_SECONDS = 1.0
#: Past the grace period and `CLOSE_SECONDS`, how long a stop may still take before the watchdog ends it.
STUCK_SECONDS = 5.0


@dataclass(frozen=True)
class Security:
    """How a server admits clients: TLS files, a token file, and whether it may listen open."""

    tls_cert: str | None = None
    tls_key: str | None = None
    #: Client certificates must be signed by this CA (mutual TLS).
    tls_client_ca: str | None = None
    tokens: str | None = None
    insecure: bool = False
    #: Permissions of a Unix socket the server listens on.
    socket_mode: int = DEFAULT_SOCKET_MODE

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    def check(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise UsageError("--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and not self.tls:
            raise UsageError("--tls-client-ca needs --tls-cert and --tls-key")
        if not 0 <= self.socket_mode <= 0o777:
            raise UsageError(f"--socket-mode must be permissions such as 600 or 660, not {self.socket_mode:o}")

    def credentials(self) -> grpc.ServerCredentials | None:
        """TLS credentials read from the files (None without TLS); a key others can read is reported."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        if readable_by_others(self.tls_key):
            log.warning("%s can be read by every user of this machine: chmod 600 it", self.tls_key)
        client_ca = None if self.tls_client_ca is None else Path(self.tls_client_ca).read_bytes()
        return grpc.ssl_server_credentials(
            [(Path(self.tls_key).read_bytes(), Path(self.tls_cert).read_bytes())],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )

    def token_table(self) -> TokenTable | None:
        if self.tokens is None:
            return None
        if readable_by_others(self.tokens):
            log.warning("%s can be read by every user of this machine: chmod 600 it", self.tokens)
        return TokenTable.load(self.tokens)


class PredictorServer:
    """A started server: where it listens, and a graceful stop that also closes the state file."""

    def __init__(
        self,
        server: grpc.Server,
        address: str,
        port: int,
        health_servicer: HealthStatus,
        core: PredictorCore,
        gate: Gate,
        metrics: MetricsEndpoint | None = None,
    ) -> None:
        self.server = server
        self.metrics = metrics
        self.address = address
        self.port = port
        self.core = core
        self.gate = gate
        self._health = health_servicer
        core.on_health_change(self._set_health)

    def _set_health(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in ("", SERVICE_NAME):
            self._health.set(service, status)

    def stop(self, grace: float | None) -> threading.Event:
        """Refuse new calls, let in-flight ones finish within `grace` (then cancel them), close the state file.

        Returns an event set once everything is closed.
        """
        self._health.enter_graceful_shutdown()
        stopped = self.server.stop(grace)
        closed = threading.Event()

        def close_when_stopped() -> None:
            stopped.wait()
            if self.metrics is not None:
                self.metrics.close()
            self.gate.close()
            self.core.close()
            log.info("predictor service stopped (%s)", self.address)
            closed.set()

        threading.Thread(target=close_when_stopped, name="tsched-server-close", daemon=True).start()
        return closed

    def reload_tokens(self, path: str) -> None:
        """Read the token file again (SIGHUP); a file that does not parse leaves the tokens in force."""
        if self.gate.tokens is None:
            log.warning("SIGHUP ignored: the server was started without a token file")
            return
        try:
            table = TokenTable.load(path)
        except (UsageError, OSError) as error:
            log.error("tokens not reloaded, the previous ones stay in force: %s", error)
            return
        self.gate.tokens.replace(table)
        log.info("tokens reloaded from %s: %d token(s)", path, len(table))


def _bind(server: grpc.Server, listen: str, credentials: grpc.ServerCredentials | None, socket_mode: int) -> int:
    """Bind `listen`; return the TCP port (0 for a Unix socket). OSError when it cannot be bound."""
    path = listen.removeprefix("unix:") if listen.startswith("unix:") else None
    if path is not None:
        _check_socket_path(path)
        previous = os.umask(0o177)  # no moment where the socket is open to others
        try:
            bound = server.add_secure_port(listen, credentials) if credentials else server.add_insecure_port(listen)
        finally:
            os.umask(previous)
        if bound:
            os.chmod(path, socket_mode)
            return 0
        raise OSError(f"cannot listen on {listen!r}")
    try:
        port = server.add_secure_port(listen, credentials) if credentials else server.add_insecure_port(listen)
    except RuntimeError:
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {listen!r}: the address is in use or is not this machine's")
    return port


def _check_listen(listen: str) -> None:
    if listen.startswith("unix:"):
        if len(listen) == len("unix:"):
            raise InvalidRequest("listen address 'unix:': expected unix:PATH")
        return
    host, _, port_text = listen.rpartition(":")
    if not host or not port_text.isdigit() or int(port_text) > 65535:
        raise InvalidRequest(f"listen address {listen!r}: expected HOST:PORT with a port from 0 to 65535, or unix:PATH")


def _check_socket_path(path: str) -> None:
    """grpcio replaces whatever socket is at `path`: refuse one that a live server answers on, or a non-socket."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"cannot listen on unix:{path}: the path exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return  # a socket left by a server that is gone: grpcio replaces it
    raise OSError(f"cannot listen on unix:{path}: another server is listening on it")


def start_server(
    listen: str = "127.0.0.1:0",
    state: str | None = None,
    default_estimators: Sequence[str] | None = None,
    estimator_factory: EstimatorFactory = registry_factory,
    *,
    security: Security | None = None,
    limits: Limits | None = None,
    models: Sequence[EstimatorView] = (),
    metrics_listen: str | None = None,
    start_forecaster: StartForecaster | None = None,
) -> tuple[PredictorServer, int]:
    """Start serving on `listen` (port 0: a free port) without blocking; return the server and its port.

    `default_estimators` (default: the paper's percentile adjuster) are built
    in every namespace; the first answers requests that name no estimator.
    `estimator_factory` turns a SPEC into an estimator and its canonical SPEC:
    the hook through which trained models (`--models DIR`) are supplied;
    `models` describes them (logged at start, listed by ListEstimators).
    `metrics_listen` ([HOST:]PORT) serves Prometheus metrics over HTTP.
    `start_forecaster` runs `ForecastStart`'s forward simulation (the
    composition root passes the simulator's; None: forecasts are refused).
    Raises UsageError or InvalidRequest for bad settings, StateError for an
    unusable state file, OSError when the address cannot be bound.
    """
    security = security or Security()
    limits = limits or Limits()
    security.check()
    _check_listen(listen)
    message_bytes = max_message_bytes(limits.max_batch)
    limits.check_message_size(message_bytes)
    tokens = security.token_table()
    warnings = check_exposure(listen, tls=security.tls, tokens=tokens is not None, insecure=security.insecure)
    credentials = security.credentials()
    specs = list(default_estimators) if default_estimators else [DEFAULT_ESTIMATOR]
    core = _open_core(state, specs, estimator_factory, limits, models, start_forecaster)
    gate = Gate(limits, None if tokens is None else TokenSource(tokens), core.table.names)
    registry = CollectorRegistry(auto_describe=True)
    calls = CallMetrics(registry)
    registry.register(StateCollector(core))
    server = _grpc_server(limits, message_bytes, [calls, gate])
    rpc.add_PredictorServicer_to_server(PredictorServicer(core, calls), server)
    health_servicer = HealthStatus()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    try:
        port = _bind(server, listen, credentials, security.socket_mode)
        endpoint = None if metrics_listen is None else MetricsEndpoint(metrics_listen, registry)
    except BaseException:
        gate.close()
        core.close()
        raise
    server.start()
    address = listen if port == 0 else f"{listen.rpartition(':')[0]}:{port}"
    running = PredictorServer(server, address, port, health_servicer, core, gate, endpoint)
    running._set_health(core.serving)
    _log_started(running, security, tokens, state, warnings)
    return running, port


def _open_core(
    state: str | None,
    specs: Sequence[str],
    estimator_factory: EstimatorFactory,
    limits: Limits,
    models: Sequence[EstimatorView],
    start_forecaster: StartForecaster | None,
) -> PredictorCore:
    """The core, on the state file `state` if given (which is closed again when the core cannot start)."""
    store = CompletionStore(state) if state is not None else None
    try:
        return PredictorCore(specs, estimator_factory, store, limits, models, start_forecaster=start_forecaster)
    except BaseException:
        if store is not None:
            store.close()
        raise


def _grpc_server(
    limits: Limits, message_bytes: int, interceptors: list[grpc.ServerInterceptor[Any, Any]]
) -> grpc.Server:
    """A gRPC server held to `limits`: message sizes, streams per connection, keepalive, queued calls."""
    options = [
        ("grpc.max_receive_message_length", message_bytes),
        ("grpc.max_send_message_length", message_bytes),
        # Without so_reuseport=0 a second server could bind the same port and silently take half the calls.
        ("grpc.so_reuseport", 0),
        ("grpc.max_concurrent_streams", STREAMS_PER_CONNECTION),
        # Fixed 64 KiB receive windows: what calls waiting for a thread can have buffered stays bounded.
        ("grpc.http2.bdp_probe", 0),
        ("grpc.keepalive_time_ms", int(limits.keepalive * 1000)),
        ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_SECONDS * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", MIN_CLIENT_PING_SECONDS * 1000),
        ("grpc.http2.max_ping_strikes", 2),
    ]
    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=limits.threads, thread_name_prefix="tsched-rpc"),
        interceptors=interceptors,
        options=options,
        maximum_concurrent_rpcs=limits.threads * QUEUED_CALLS_PER_THREAD,
    )


def _log_started(
    running: PredictorServer, security: Security, tokens: TokenTable | None, state: str | None, warnings: Sequence[str]
) -> None:
    for warning in warnings:
        log.warning("%s", warning)
    core = running.core
    log.info(
        "predictor service listening on %s%s; tokens %s; estimators %s; trained models %s; state %s",
        running.address,
        " (TLS" + (", client certificates required)" if security.tls_client_ca else ")") if security.tls else "",
        "none" if tokens is None else f"{len(tokens)} from {security.tokens}",
        ", ".join(spec.canonical for spec in core.defaults),
        ", ".join(model.name for model in core.models) or "none",
        state or "none (in memory)",
    )


def serve(
    listen: str = DEFAULT_LISTEN,
    state: str | None = None,
    default_estimators: Sequence[str] | None = None,
    models_dir: str | None = None,
    on_ready: Callable[[int], None] | None = None,
    *,
    security: Security | None = None,
    limits: Limits | None = None,
    metrics_listen: str | None = None,
    start_forecaster: StartForecaster | None = None,
    extend_factory: Callable[[EstimatorFactory], EstimatorFactory] | None = None,
) -> NoReturn:
    """Serve until SIGTERM or SIGINT, then stop and end the process. Call from the main thread.

    The first signal drains: new calls are refused, calls in flight get
    `limits.shutdown_grace` seconds, then are cancelled, and the process exits
    at most `CLOSE_SECONDS` later whatever is still running (status 0: every
    acknowledged write is already on disk). A second signal exits at once
    (status 128 + signal). A stop still stuck `STUCK_SECONDS` past that bound
    prints every thread's stack and exits with status 1. SIGUSR1 prints every
    thread's stack and serves on; SIGHUP reloads the token file. `models_dir` is a
    folder of trained models served by name; `on_ready` is called with the
    bound port (0 on a Unix socket) once the server accepts calls; `start_forecaster` as `start_server`'s.
    `extend_factory` wraps the factory with the estimators of a higher layer (the composition root passes the
    simulator's `with_simulated`, which builds `adaptive`).
    """
    limits = limits or Limits()
    security = security or Security()
    factory, models = _trained_models(models_dir)
    if extend_factory is not None:
        factory = extend_factory(factory)
    server, port = start_server(
        listen,
        state,
        default_estimators,
        factory,
        security=security,
        limits=limits,
        models=models,
        metrics_listen=metrics_listen,
        start_forecaster=start_forecaster,
    )
    received = _StopSignals(server, security.tokens)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: where every thread is, in the log
    if on_ready is not None:
        on_ready(port)
    signum, received_at = received.wait()
    grace = limits.shutdown_grace
    # A stop stuck where Python cannot get out (a deadlock, a call into gRPC's core that does not return) still
    # ends, and says where it was stuck: faulthandler's own thread writes every stack and exits with status 1.
    bound = received_at + grace + CLOSE_SECONDS + STUCK_SECONDS - time.monotonic()
    faulthandler.dump_traceback_later(max(bound, 0.1), exit=True)
    log.info("received %s: stopping (in-flight calls get %.0f s)", signal.Signals(signum).name, grace)
    closed = server.stop(grace)
    if not closed.wait(max(0.0, received_at + grace + CLOSE_SECONDS - time.monotonic())):
        log.warning("still closing %.1f s after the grace period: exiting anyway", CLOSE_SECONDS)
    _exit(0)


def _trained_models(models_dir: str | None) -> tuple[EstimatorFactory, list[EstimatorView]]:
    """The factory that serves the models of `models_dir` besides the built-ins, and the models' views."""
    if models_dir is None:
        return registry_factory, []
    from predictor.estimators.lgbm.store import ModelCatalog  # LightGBM only when models are served

    catalog = ModelCatalog(models_dir)
    return catalog.factory, [EstimatorView(**model) for model in catalog.describe()]


class _StopSignals:
    """SIGTERM and SIGINT: the first asks the server to stop, a second exits at once; SIGHUP reloads tokens."""

    def __init__(self, server: PredictorServer, tokens: str | None) -> None:
        self._received: list[tuple[int, float]] = []
        self._stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        if tokens is not None:
            signal.signal(signal.SIGHUP, lambda _signum, _frame: server.reload_tokens(tokens))

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._received:  # the second: no more waiting
            os.write(2, f"received {signal.Signals(signum).name} again: exiting now\n".encode())
            os._exit(128 + signum)
        self._received.append((signum, time.monotonic()))
        self._stop.set()

    def wait(self) -> tuple[int, float]:
        """Block until the first stop signal; return it and when it came (monotonic seconds)."""
        while not self._stop.wait(0.5):
            pass
        return self._received[0]


def _exit(code: int) -> NoReturn:
    """End the process now, with the logs written: a thread stuck in a call or a training must not keep it alive."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
