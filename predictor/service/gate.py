"""The server's front door: every call passes the gate before it reaches a service.

For each call the gate, in this order:
- authenticates the caller's bearer token when the server has a token file
  (UNAUTHENTICATED without a known one; `predictor.service.security` is the policy);
- admits it within the server's limits: a call or stream slot, and memory for
  each request message (RESOURCE_EXHAUSTED beyond, at once: the threads kept in
  reserve stay free for health checks and refusals);
- decodes each request itself, so that an undecodable message is
  INVALID_ARGUMENT (grpcio's own decoding answers INTERNAL and logs a traceback);
- checks the namespace each message names against the token's grant
  (PERMISSION_DENIED outside it);
- keeps the call under the watchdog, which cuts a client that stops sending or reading.

Health checks pass untouched and need no token: an orchestrator probes them,
and they reveal only SERVING or NOT_SERVING.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from kernel.errors import InvalidRequest, PermissionDenied, ResourceExhausted, ServiceError
from predictor.proto import pb
from predictor.service.limits import Admission, CallKind, Limits, Watchdog
from predictor.service.quoting import RefusalLog, clip
from predictor.service.security import ACCESS_BY_METHOD, AUTHORIZATION, Access, Grant, TokenTable
from predictor.service.servicer import SERVICE_NAME, status_code

log = logging.getLogger("tsched.service")
refusals = RefusalLog(log)

HEALTH_PREFIX = "/grpc.health.v1.Health/"
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


class Gate(_Interceptor):
    """Authentication, admission, decoding, namespace authorization and the watchdog, for every call."""

    def __init__(self, limits: Limits, tokens: TokenSource | None) -> None:
        self.limits = limits
        self.tokens = tokens
        self.admission = Admission(limits)
        self.watchdog = Watchdog(limits.send_timeout)
        self._handlers: dict[str, grpc.RpcMethodHandler[Any, Any] | None] = {}

    def close(self) -> None:
        self.watchdog.stop()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = handler_call_details.method
        if method.startswith(HEALTH_PREFIX):
            return continuation(handler_call_details)
        if method not in self._handlers:  # built once per method: the handlers never change once serving
            self._handlers[method] = self._guarded(method, continuation(handler_call_details))
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
        name = method.rpartition("/")[2]
        decode: Callable[[bytes], Any] = handler.request_deserializer or (lambda raw: raw)
        if not handler.request_streaming and not handler.response_streaming:
            assert handler.unary_unary is not None
            return grpc.stream_unary_rpc_method_handler(
                self._unary(name, handler.unary_unary, decode, access),
                response_serializer=handler.response_serializer,
            )
        if handler.request_streaming and handler.response_streaming:
            assert handler.stream_stream is not None
            return grpc.stream_stream_rpc_method_handler(
                self._stream(name, handler.stream_stream, decode, access),
                response_serializer=handler.response_serializer,
            )
        raise ValueError(f"the gate does not guard {method}: only unary and bidirectional calls are served")

    def _unary(
        self,
        name: str,
        behaviour: Callable[[Any, grpc.ServicerContext], Any],
        decode: Callable[[bytes], Any],
        access: Access | None,
    ) -> Callable[[Iterator[bytes], grpc.ServicerContext], Any]:
        """A unary call served as a stream of one message, so that a slow sender can be cut."""
        admission, watchdog, receive_timeout = self.admission, self.watchdog, self.limits.receive_timeout

        def guarded(requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
            grant = self._authenticate(context)
            with admission.slot(CallKind.CALL) as admitted:
                if not admitted:
                    abort(
                        context,
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"the server is serving its limit of {self.limits.max_calls} calls at once; retry shortly",
                    )
                with watchdog.watching(context.cancel, name, receive_timeout) as watch:
                    watch.receiving()
                    raw = next(requests, None)
                    watch.working()
                if raw is None:
                    abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"{name}: no request message")
                reserved = admission.reserve(len(raw))
                if not reserved:
                    abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, _BUSY_WITH_LARGE_REQUESTS)
                try:
                    request = self._decode(context, name, decode, raw)
                    del raw
                    if access is Access.LIST:
                        return _visible(behaviour(request, context), grant)
                    if access is not None and grant is not None:
                        try:
                            grant.check(request.namespace, access)
                        except PermissionDenied as error:
                            abort(context, grpc.StatusCode.PERMISSION_DENIED, str(error), grant)
                    return behaviour(request, context)
                finally:
                    admission.release(reserved)

        return guarded

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
            with admission.slot(CallKind.STREAM) as admitted:
                if not admitted:
                    abort(
                        context,
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"the server holds its limit of {self.limits.max_streams} streams open; retry shortly",
                    )
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
                            admission.release(reserved[0])
                            reserved[0] = 0
                            watch.sending()
                            yield response
                            watch.working()
                    except ServiceError as error:  # from a service that does not map refusals itself (reflection)
                        abort(context, status_code(error), str(error))
                    finally:
                        admission.release(reserved[0])

        return guarded

    # --- the checks ------------------------------------------------------------------------------

    def _authenticate(self, context: grpc.ServicerContext) -> Grant | None:
        """The caller's grant (None when the server has no token file); aborts UNAUTHENTICATED otherwise."""
        if self.tokens is None:
            return None
        authorization = None
        for key, value in context.invocation_metadata() or ():
            if key == AUTHORIZATION:
                authorization = value if isinstance(value, str) else None
                break
        grant = self.tokens.table.grant_for(authorization)
        if grant is None:
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
