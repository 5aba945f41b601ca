"""Hosting the predictor service: a gRPC server with health and reflection, and a graceful stop."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from predictor.errors import InvalidRequest
from predictor.proto import rpc
from predictor.registry import make_estimator
from predictor.service.core import EstimatorFactory, PredictorCore
from predictor.service.servicer import SERVICE_NAME, PredictorServicer
from predictor.service.state import CompletionStore

log = logging.getLogger("tsched.service")

#: Room for a full batch (a Job is ~30 bytes on the wire) with margin.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: How long in-flight calls get to finish on SIGTERM/SIGINT.
SHUTDOWN_GRACE_SECONDS = 10.0
#: The estimator a server answers with when none is configured: Tang et al.'s adjuster.
DEFAULT_ESTIMATOR = "percentile"
DEFAULT_LISTEN = "127.0.0.1:50051"


class PredictorServer:
    """A started server: its port, and a graceful stop that also closes the state file."""

    def __init__(
        self, server: grpc.Server, port: int, health_servicer: health.HealthServicer, core: PredictorCore
    ) -> None:
        self.server = server
        self.port = port
        self.core = core
        self._health = health_servicer

    def stop(self, grace: float | None = SHUTDOWN_GRACE_SECONDS) -> threading.Event:
        """Refuse new calls, let in-flight ones finish within `grace`, then close the state file.

        Returns an event set once everything is closed.
        """
        self._health.enter_graceful_shutdown()
        stopped = self.server.stop(grace)
        closed = threading.Event()

        def close_when_stopped() -> None:
            stopped.wait()
            self.core.close()
            log.info("predictor service stopped (port %d)", self.port)
            closed.set()

        threading.Thread(target=close_when_stopped, name="tsched-server-close", daemon=True).start()
        return closed

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return bool(self.server.wait_for_termination(timeout))


def start_server(
    listen: str = "127.0.0.1:0",
    state: str | None = None,
    default_estimators: Sequence[str] | None = None,
    allow_oracle: bool = False,
    estimator_factory: EstimatorFactory = make_estimator,
    max_workers: int = 8,
) -> tuple[PredictorServer, int]:
    """Start serving on `listen` (port 0: a free port) without blocking; return the server and its port.

    `default_estimators` (default: the paper's percentile adjuster) are built
    in every namespace; the first answers requests that name no estimator.
    `estimator_factory` turns a SPEC into an estimator: the hook through which
    estimators that need loaded models (`--models DIR`) are supplied.
    Raises InvalidRequest for a bad SPEC or address, StateError for an unusable
    state file, OSError when the address cannot be bound.
    """
    host, _, port_text = listen.rpartition(":")
    if not host or not port_text.isdigit() or int(port_text) > 65535:
        raise InvalidRequest(f"listen address {listen!r}: expected HOST:PORT with a port from 0 to 65535")
    specs = list(default_estimators) if default_estimators else [DEFAULT_ESTIMATOR]
    store = CompletionStore(state) if state is not None else None
    try:
        core = PredictorCore(specs, estimator_factory, allow_oracle, store)
    except BaseException:
        if store is not None:
            store.close()
        raise
    # Without so_reuseport=0 a second server could bind the same port and silently take half the calls.
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tsched-rpc"), options=options
    )
    rpc.add_PredictorServicer_to_server(PredictorServicer(core), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError:
        port = 0
    if port == 0:
        core.close()
        raise OSError(f"cannot listen on {listen!r}: the address is in use or is not this machine's")
    server.start()
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "predictor service listening on %s (port %d); estimators %s; state %s; oracle %s",
        listen,
        port,
        ", ".join(spec.canonical for spec in core.defaults),
        state or "none (in memory)",
        "allowed" if allow_oracle else "refused",
    )
    return PredictorServer(server, port, health_servicer, core), port


def serve(
    listen: str = DEFAULT_LISTEN,
    state: str | None = None,
    default_estimators: Sequence[str] | None = None,
    models_dir: str | None = None,
    allow_oracle: bool = False,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully. Call from the main thread.

    `models_dir` is a folder of trained models served by name; `on_ready` is
    called with the bound port once the server accepts calls.
    """
    factory: EstimatorFactory = make_estimator
    if models_dir is not None:
        from predictor.estimators.lgbm.store import estimator_factory  # LightGBM only when models are served

        factory = estimator_factory(models_dir)
    server, port = start_server(listen, state, default_estimators, allow_oracle, factory)
    received: list[int] = []
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if on_ready is not None:
            on_ready(port)
        while not stop.wait(0.5):
            pass
        log.info(
            "received %s: stopping (in-flight calls get %.0f s)",
            signal.Signals(received[0]).name,
            SHUTDOWN_GRACE_SECONDS,
        )
        server.stop(SHUTDOWN_GRACE_SECONDS).wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
