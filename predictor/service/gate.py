"""The server's front door: every call passes the gate before it reaches a service.

For each call the gate, in this order:
- authenticates the caller's bearer token when the server has a token file
  (UNAUTHENTICATED without a known one; `predictor.service.security` is the policy);
- admits it within the server's limits: a slot of its kind within the client's
  share, and memory for each request message and its answer (RESOURCE_EXHAUSTED
  beyond, at once: the threads kept in reserve stay free for refusals);
- decodes each request itself, so that an undecodable message is
  INVALID_ARGUMENT (grpcio's own decoding answers INTERNAL and logs a traceback);
- checks the namespace each message names against the token's grant
  (PERMISSION_DENIED outside it);
- keeps the call under the watchdog, which cuts a client that stops sending or reading.

Health checks need no token (an orchestrator probes them, and they reveal only
SERVING or NOT_SERVING) but pass the same admission, with slots of their own:
`Check` a health-check slot, `Watch` a watcher slot held while the stream is
open, which holds no thread (it is served non-blocking), so that watchers
cannot starve the server of threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from kernel.errors import InvalidRequest, PermissionDenied, ResourceExhausted, ServiceError
from predictor.proto import pb
from predictor.service.calls import NonBlockingStream, when_done
from predictor.service.codec import max_message_bytes
from predictor.service.limits import Admission, CallKind, Limits, Watchdog
from predictor.service.quoting import RefusalLog, clip
from predictor.service.security import ACCESS_BY_METHOD, AUTHORIZATION, Access, Grant, TokenTable
from predictor.service.servicer import SERVICE_NAME, status_code

log = logging.getLogger("tsched.service")
refusals = RefusalLog(log)

HEALTH_PREFIX = "/grpc.health.v1.Health/"
#: Calls with a request over 1/HEAVY_FRACTION of the largest message are heavy: at most HEAVY_CALLS of them
#: are worked on at once (about the cores of a small server), whoever sends them.
HEAVY_FRACTION = 32
HEAVY_CALLS = 2
_PREDICTOR_PREFIX = f"/{SERVICE_NAME}/"


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, details: str, grant: Grant | None = None) -> NoReturn:
    """End the call with `code`; the message is clipped, the refusal logged (at a bounded rate) with the
    caller's address and, when known, its token's line in the token file."""
    details = clip(details)
    quiet = code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)
    caller = context.peer() if grant is None else f"{context.peer()} (token {grant.holder})"
    refusals.log(logging.INFO if quiet else logging.WARNING, "%s refused: %s: %s", caller, code.name, details)
    context.abort(code, details)


class TokenSource:
    """The token table in force; `replace` swaps in a reloaded one (SIGHUP) without stopping the server."""

    def __init__(self, table: TokenTable) -> None:
        self.table = table

    def replace(self, table: TokenTable) -> None:
        self.table = table


if TYPE_CHECKING:  # generic in the type stubs only
    _Interceptor = grpc.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.ServerInterceptor


def client_of(context: grpc.ServicerContext, grant: Grant | None) -> str:
    """Who a call's slots are counted against: its token, else its address without the port."""
    if grant is not None:
        return f"token {grant.holder}"
    peer: str = context.peer() or "unknown"
    kind, _, address = peer.partition(":")
    return "unix" if kind == "unix" else address.rpartition(":")[0] or peer


class Gate(_Interceptor):
    """Authentication, admission, decoding, namespace authorization and the watchdog, for every call."""

    def __init__(
        self, limits: Limits, tokens: TokenSource | None, namespace_names: Callable[[], Iterable[str]] = tuple
    ) -> None:
        """`namespace_names`: the names of the namespaces the server holds, to count a token's own."""
        self.limits = limits
        self.tokens = tokens
        self._namespace_names = namespace_names
        self.admission = Admission(limits)
        self.watchdog = Watchdog(limits.send_timeout)
        self._heavy_turns = threading.BoundedSemaphore(HEAVY_CALLS)
        self._heavy_bytes = max_message_bytes(limits.max_batch) // HEAVY_FRACTION
        self._handlers: dict[str, grpc.RpcMethodHandler[Any, Any] | None] = {}

    def close(self) -> None:
        self.watchdog.stop()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = handler_call_details.method
        if method not in self._handlers:  # built once per method: the handlers never change once serving
            handler = self._guarded(method, continuation(handler_call_details))
            if handler is None:
                return None  # an unknown method is not remembered: clients choose its name
            self._handlers[method] = handler
        return self._handlers[method]

    # --- building the guarded handlers -----------------------------------------------------------

    def _guarded(
        self, method: str, handler: grpc.RpcMethodHandler[Any, Any] | None
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        if handler is None:
            return None
        access = (
            ACCESS_BY_METHOD[method.removeprefix(_PREDICTOR_PREFIX)] if method.startswith(_PREDICTOR_PREFIX) else None
        )
        health = method.startswith(HEALTH_PREFIX)
        name = method.rpartition("/")[2]
        decode: Callable[[bytes], Any] = handler.request_deserializer or (lambda raw: raw)
        if not handler.request_streaming and not handler.response_streaming:
            assert handler.unary_unary is not None
            kind = CallKind.HEALTH if health else CallKind.CALL
            return grpc.stream_unary_rpc_method_handler(
                self._unary(name, kind, handler.unary_unary, decode, access),
                response_serializer=handler.response_serializer,
            )
        if handler.request_streaming and handler.response_streaming:
            assert handler.stream_stream is not None
            return grpc.stream_stream_rpc_method_handler(
                self._stream(name, handler.stream_stream, decode, access),
                response_serializer=handler.response_serializer,
            )
        watch = handler.unary_stream
        if health and watch is not None and getattr(watch, "experimental_non_blocking", False):
            return grpc.unary_stream_rpc_method_handler(
                self._watch(watch),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        raise ValueError(f"the gate does not guard {method}: only unary and bidirectional calls are served")

    def _unary(
        self,
        name: str,
        kind: str,
        behaviour: Callable[[Any, grpc.ServicerContext], Any],
        decode: Callable[[bytes], Any],
        access: Access | None,
    ) -> Callable[[Iterator[bytes], grpc.ServicerContext], Any]:
        """A unary call served as a stream of one message, so that a slow sender can be cut.

        The memory reserved for the request is held until the call ends, answer sent: an answer a client
        does not read holds its share of the budget (and is cut after --send-timeout), so unread answers
        cannot pile up beyond it.
        """
        admission, watchdog, receive_timeout = self.admission, self.watchdog, self.limits.receive_timeout

        def guarded(requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
            grant = self._authenticate(context, required=kind != CallKind.HEALTH)
            with admission.slot(kind, client_of(context, grant)) as refused:
                if refused is not None:
                    abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, refused, grant)
                watch = watchdog.watch(context.cancel, name, receive_timeout)
                when_done(context, lambda: watchdog.unwatch(watch))
                watch.receiving()
                raw = next(requests, None)
                watch.working()
                if raw is None:
                    abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"{name}: no request message")
                reserved = admission.reserve(len(raw))
                if not reserved:
                    abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, _BUSY_WITH_LARGE_REQUESTS)
                when_done(context, lambda: admission.give_back(reserved))
                heavy = len(raw) > self._heavy_bytes
                request = self._decode(context, name, decode, raw)
                del raw
                with self._turn(context, heavy):
                    answer = self._answer(context, behaviour, request, access, grant)
                watch.sending()  # from here the answer waits on its client
                return answer

        return guarded

    @contextmanager
    def _turn(self, context: grpc.ServicerContext, heavy: bool) -> Iterator[None]:
        """A heavy call's turn: at most HEAVY_CALLS are worked on at once, the others wait within their
        deadline and --max-wait. Python runs one thread at a time: many large batches at once would make
        every small call wait behind all of them for the interpreter."""
        if not heavy:
            yield
            return
        remaining = context.time_remaining()
        patience = self.limits.max_wait if remaining is None else min(self.limits.max_wait, 0.8 * remaining)
        if not self._heavy_turns.acquire(timeout=patience):
            abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, _BUSY_WITH_LARGE_REQUESTS)
        try:
            yield
        finally:
            self._heavy_turns.release()

    def _answer(
        self,
        context: grpc.ServicerContext,
        behaviour: Callable[[Any, grpc.ServicerContext], Any],
        request: Any,
        access: Access | None,
        grant: Grant | None,
    ) -> Any:
        """The behaviour's answer to a request the caller's grant allows (a listing cut to it)."""
        if access is Access.LIST:
            return _visible(behaviour(request, context), grant)
        if access is not None and grant is not None:
            try:
                grant.check(request.namespace, access)
            except PermissionDenied as error:
                abort(context, grpc.StatusCode.PERMISSION_DENIED, str(error), grant)
        answer = behaviour(request, context)
        if access is Access.STATUS and grant is not None and not grant.operator:
            return self._own_status(answer, grant)
        return answer

    def _own_status(self, status: pb.StatusResponse, grant: Grant) -> pb.StatusResponse:
        """A Status cut to what `grant` may see: its namespaces counted, no server-wide calls or trainings."""
        status.namespaces = sum(1 for name in self._namespace_names() if grant.allows(name, Access.USE))
        status.training_runs = 0
        del status.calls[:]
        return status

    def _stream(
        self,
        name: str,
        behaviour: Callable[[Iterator[Any], grpc.ServicerContext], Iterator[Any]],
        decode: Callable[[bytes], Any],
        access: Access | None,
    ) -> Callable[[Iterator[bytes], grpc.ServicerContext], Iterator[Any]]:
        admission, watchdog, idle_timeout = self.admission, self.watchdog, self.limits.stream_idle_timeout

        def guarded(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[Any]:
            grant = self._authenticate(context)
            with admission.slot(CallKind.STREAM, client_of(context, grant)) as refused:
                if refused is not None:
                    abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, refused, grant)
                with watchdog.watching(context.cancel, name, idle_timeout) as watch:
                    reserved = [0]

                    def messages() -> Iterator[Any]:
                        """Each message decoded and checked; a refusal is raised, for the service to end the stream."""
                        while True:
                            watch.receiving()
                            raw = next(requests, None)
                            watch.working()
                            if raw is None:
                                return
                            reserved[0] = admission.reserve(len(raw))
                            if not reserved[0]:
                                raise ResourceExhausted(_BUSY_WITH_LARGE_REQUESTS)
                            request = _decoded(name, decode, raw)
                            if access is not None and grant is not None:
                                grant.check(request.namespace, access)
                            yield request

                    try:
                        for response in behaviour(messages(), context):
                            watch.sending()
                            yield response  # returns once the answer is sent: its memory is reserved till then
                            watch.working()
                            admission.give_back(reserved[0])
                            reserved[0] = 0
                    except ServiceError as error:  # from a service that does not map refusals itself (reflection)
                        abort(context, status_code(error), str(error))
                    finally:
                        admission.give_back(reserved[0])

        return guarded

    def _watch(self, behaviour: Callable[..., Any]) -> NonBlockingStream:
        """`Health.Watch`: a watcher slot per stream, given back when it ends; no thread is held meanwhile."""
        admission = self.admission

        def guarded(request: Any, context: grpc.ServicerContext, send: Callable[[Any], None]) -> None:
            client = client_of(context, self._authenticate(context, required=False))
            refused = admission.acquire(CallKind.WATCH, client)
            if refused is not None:
                abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
            when_done(context, lambda: admission.release(CallKind.WATCH, client))
            behaviour(request, context, send)

        return NonBlockingStream(guarded)

    # --- the checks ------------------------------------------------------------------------------

    def _authenticate(self, context: grpc.ServicerContext, required: bool = True) -> Grant | None:
        """The caller's grant (None when the server has no token file, or for a health call without one);
        aborts UNAUTHENTICATED otherwise."""
        if self.tokens is None:
            return None
        authorization = None
        for key, value in context.invocation_metadata() or ():
            if key == AUTHORIZATION:
                authorization = value if isinstance(value, str) else None
                break
        grant = self.tokens.table.grant_for(authorization)
        if grant is None and required:
            reason = "no bearer token" if authorization is None else "an unknown token"
            abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                f"this server needs a token (metadata 'authorization: Bearer TOKEN'); the call carried {reason}",
            )
        return grant

    @staticmethod
    def _decode(context: grpc.ServicerContext, name: str, decode: Callable[[bytes], Any], raw: bytes) -> Any:
        try:
            return _decoded(name, decode, raw)
        except InvalidRequest as error:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))


def _visible(listing: pb.ListNamespacesResponse, grant: Grant | None) -> pb.ListNamespacesResponse:
    """A listing cut to the namespaces `grant` may use: a token never learns of the others."""
    if grant is None:
        return listing
    return pb.ListNamespacesResponse(
        namespaces=[info for info in listing.namespaces if grant.allows(info.name, Access.USE)]
    )


_BUSY_WITH_LARGE_REQUESTS = "requests in flight hold the memory this server gives them; retry shortly"


def _decoded(name: str, decode: Callable[[bytes], Any], raw: bytes) -> Any:
    try:
        return decode(raw)
    except Exception as error:  # protobuf raises DecodeError, and other errors on deeply nested garbage
        raise InvalidRequest(
            f"{name}: the request is not a valid message ({type(error).__name__}: {clip(str(error), 200)})"
        ) from None
