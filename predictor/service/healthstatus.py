"""grpc.health.v1 as grpcio-health-checking serves it, with the status sent to watchers outside its lock.

grpcio-health-checking 1.85's `HealthServicer.set`, `enter_graceful_shutdown` and
`Watch` call watchers' send callbacks while holding the servicer's lock. A send
waits until the watcher's previous message is written, which the server's
polling thread completes; if that thread is at the same moment closing another
watcher, it waits for the lock in `_on_close_callback`, and neither moves again.
It hung a server's stop in this project's tests (`py-spy dump`: the stop in
`_send_response` under `enter_graceful_shutdown`, the polling thread in
`_on_close_callback`); a status change while a watcher leaves can hang the same
way. Upstream's fix (grpc/grpc#43403, open) collects the callbacks under the lock
and calls them after; so do the three methods here, one status change or new
watcher at a time (`_sending`, never taken by the polling thread) so that
watchers see the changes in order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from grpc_health.v1 import health, health_pb2

NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class HealthStatus(health.HealthServicer):
    """The library's servicer (Check, Watch, the watchers' bookkeeping), whose status changes send unlocked."""

    _gracefully_shutting_down: bool  # the library's, set in its __init__ (untyped)

    def __init__(self) -> None:
        super().__init__()
        self._sending = threading.Lock()  # taken before the servicer's lock, and only by status changes

    def Watch(  # noqa: N802 - the gRPC method's name
        self,
        request: health_pb2.HealthCheckRequest,
        context: Any,
        send_response_callback: Callable[[health_pb2.HealthCheckResponse], object] | None = None,
    ) -> Any:
        """A new watcher: registered under the lock, sent the current status after it (in order with `set`)."""
        if send_response_callback is None:  # a server without non-blocking streams: the library's blocking watcher
            return super().Watch(request, context)
        service = request.service
        with self._sending:
            with self._lock:
                status = self._server_status.get(service, SERVICE_UNKNOWN)
                self._send_response_callbacks.setdefault(service, set()).add(send_response_callback)
                context.add_callback(self._on_close_callback(send_response_callback, service))
            _send([send_response_callback], status)
        return None

    def set(self, service: str, status: int) -> None:
        """Set the status of `service` and send it to its watchers."""
        with self._sending:
            with self._lock:
                if self._gracefully_shutting_down:
                    return
                self._server_status[service] = status
                callbacks = list(self._send_response_callbacks.get(service, ()))
            _send(callbacks, status)

    def enter_graceful_shutdown(self) -> None:
        """Every service NOT_SERVING for good, sent to every watcher; later `set` calls change nothing."""
        with self._sending:
            with self._lock:
                if self._gracefully_shutting_down:
                    return
                self._gracefully_shutting_down = True
                for service in self._server_status:
                    self._server_status[service] = NOT_SERVING
                callbacks = [
                    callback
                    for service in self._server_status
                    for callback in self._send_response_callbacks.get(service, ())
                ]
            _send(callbacks, NOT_SERVING)


def _send(callbacks: Iterable[Callable[[health_pb2.HealthCheckResponse], object]], status: int) -> None:
    response = health_pb2.HealthCheckResponse(status=status)
    for callback in callbacks:
        callback(response)
