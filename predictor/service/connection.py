"""A client's connection to a predictor service: credentials, the channel, deadlines, and what a failure means.

Every call carries a deadline and the client's token; a failure becomes a
`PredictorError` with the server's own message, and `is_transient` tells
the failures worth waiting out from those that a retry would only repeat.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from kernel.errors import TschedError, UsageError
from predictor.proto import pb
from predictor.service.security import read_token_file

DEFAULT_TIMEOUT_SECONDS = 5.0
_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Reconnect quickly when a restarted server comes back (gRPC's default back-off grows to 2 minutes);
#: ping an idle connection every 30 s, so that a dead server or network is noticed (servers allow 10 s).
_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 5_000),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
#: Failures worth waiting out: the service is down, slow, overloaded, or cut a stream that sat idle.
#: Anything else (INTERNAL, UNKNOWN, INVALID_ARGUMENT, ...) is a bad request or a bug, and retrying repeats it.
_TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)


@dataclass(frozen=True)
class Credentials:
    """How a client proves who it is and checks the server: a bearer token, and TLS.

    Plain strings and bytes, so that an evaluation can hand them to its worker processes.
    """

    token: str | None = None
    tls: bool = False
    #: PEM of the CA that signed the server's certificate (None: the system's trusted CAs).
    tls_ca: bytes | None = None
    #: The client's certificate chain and key, for a server that requires client certificates.
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    #: The name the server's certificate must carry, when it is not the address's host name.
    tls_server_name: str | None = None

    @classmethod
    def from_files(
        cls,
        *,
        token_file: str | None = None,
        tls: bool = False,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_server_name: str | None = None,
    ) -> Credentials:
        """Read the files the command line names; any TLS file means TLS."""
        if (tls_cert is None) != (tls_key is None):
            raise UsageError("--tls-cert and --tls-key go together")

        def read(path: str | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return cls(
            token=None if token_file is None else read_token_file(token_file),
            tls=tls or any(path is not None for path in (tls_ca, tls_cert, tls_server_name)),
            tls_ca=read(tls_ca),
            tls_cert=read(tls_cert),
            tls_key=read(tls_key),
            tls_server_name=tls_server_name,
        )

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """What every call carries: the token, if any."""
        return () if self.token is None else (("authorization", f"Bearer {self.token}"),)

    def channel(self, address: str) -> grpc.Channel:
        options = list(_CHANNEL_OPTIONS)
        if not self.tls:
            return grpc.insecure_channel(address, options=options)
        if self.tls_server_name is not None:
            options.append(("grpc.ssl_target_name_override", self.tls_server_name))
        credentials = grpc.ssl_channel_credentials(self.tls_ca, self.tls_key, self.tls_cert)
        return grpc.secure_channel(address, credentials, options=options)


class PredictorError(TschedError):
    """A call the service refused or could not answer, with the server's own message."""

    def __init__(self, address: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"predictor at {address}: {code.name}: {details}")
        self.address = address
        self.code = code
        self.details = details

    def __reduce__(self) -> tuple[type[PredictorError], tuple[str, grpc.StatusCode, str]]:
        """Rebuild from the three arguments, so the error crosses process boundaries (joblib, Dask)."""
        return (type(self), (self.address, self.code, self.details))


def is_transient(error: PredictorError) -> bool:
    """A failure worth retrying later; a message too large for the server is not (it is refused again)."""
    return error.code in _TRANSIENT and "larger than max" not in error.details


class Connection:
    """One channel to a service, the client's token, and its default deadline: unary calls and streams."""

    def __init__(self, address: str, timeout: float, credentials: Credentials | None = None) -> None:
        self.address = address
        self.timeout = timeout
        credentials = credentials or Credentials()
        self.metadata = credentials.metadata
        self.channel = credentials.channel(address)

    def call(self, method: Callable[..., Any], request: Any, timeout: float | None) -> Any:
        """`method(request)` within `timeout` (None: the default); a failure is a PredictorError."""
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout, metadata=self.metadata)
        except grpc.RpcError as error:
            raise PredictorError(self.address, error.code(), error.details() or "") from None

    def close(self) -> None:
        self.channel.close()


class SyncStream:
    """One open `SyncStream` call: `exchange` sends a SyncRequest and waits for its answer.

    A stream has one deadline for its whole life, so each exchange gets its
    own from a watchdog thread that cancels the stream when an answer is
    late: the caller then gets DEADLINE_EXCEEDED, as from a unary call, and
    opens a new stream for its next attempt.
    """

    def __init__(self, method: Any, address: str, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.address = address
        self._outbox: queue.SimpleQueue[pb.SyncRequest | None] = queue.SimpleQueue()
        self._responses = method(iter(self._outbox.get, None), metadata=metadata)
        self._deadline: float | None = None
        self._timed_out = False
        self._closed = threading.Event()
        self._watchdog: threading.Thread | None = None

    def exchange(self, request: pb.SyncRequest, timeout: float) -> pb.SyncResponse:
        if self._closed.is_set():
            raise PredictorError(self.address, grpc.StatusCode.CANCELLED, "the sync stream is closed")
        if self._watchdog is None:
            self._watchdog = threading.Thread(
                target=self._watch, args=(timeout,), name="tsched-sync-watchdog", daemon=True
            )
            self._watchdog.start()
        self._deadline = time.monotonic() + timeout
        self._outbox.put(request)
        try:
            response: pb.SyncResponse = next(self._responses)
            return response
        except grpc.RpcError as error:
            self.close()
            code = grpc.StatusCode.DEADLINE_EXCEEDED if self._timed_out else error.code()
            raise PredictorError(
                self.address, code, "no answer within the deadline" if self._timed_out else error.details() or ""
            ) from None
        except StopIteration:
            self.close()
            raise PredictorError(
                self.address, grpc.StatusCode.UNAVAILABLE, "the server ended the sync stream"
            ) from None
        finally:
            self._deadline = None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self, wait: float = 5.0) -> None:
        """End the stream and stop the watchdog: half-close it and give the server up to `wait` seconds to finish
        it, so that the call ends OK instead of cancelled by the channel closing after it (which the server counts
        as a failed call); a server that has not finished by then is cancelled."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._outbox.put(None)
        ended = threading.Event()
        self._responses.add_done_callback(lambda _call: ended.set())
        if not ended.wait(wait):
            self._responses.cancel()

    def _watch(self, timeout: float) -> None:
        interval = min(0.1, timeout / 4)
        while not self._closed.wait(interval):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                self._timed_out = True
                self._responses.cancel()
                return
