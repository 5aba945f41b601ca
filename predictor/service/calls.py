"""What the server's interceptors (the gate, the call metrics) share about a gRPC call's life."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc


class NonBlockingStream:
    """A response-streaming behaviour grpcio calls with a send callback and returns from at once: the stream
    holds no server thread while it is open (grpcio's `experimental_non_blocking`, which the health service's
    `Watch` supports). Every wrapper of such a behaviour must be one too, or the stream takes a thread back."""

    experimental_non_blocking = True
    experimental_thread_pool = None

    def __init__(self, behaviour: Callable[[Any, grpc.ServicerContext, Callable[[Any], None]], None]) -> None:
        self._behaviour = behaviour

    def __call__(self, request: Any, context: grpc.ServicerContext, send: Callable[[Any], None]) -> None:
        self._behaviour(request, context, send)


def when_done(context: grpc.ServicerContext, callback: Callable[[], None]) -> None:
    """Run `callback` when the call ends (at once if it has already ended)."""
    if not context.add_callback(callback):
        callback()
