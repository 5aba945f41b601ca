"""`RemoteSession`: a simulator's (or a live scheduler's) prediction session served by the predictor service.

It answers exactly like `LocalSession` over the same estimator while the
service is up. When the service is down or slow it must never stall the
scheduler: the jobs get t_req (counted in `fallbacks`) and the service is
tried again only after a back-off, so a run with the service gone costs
about what an in-process run costs. Evaluation-only estimators (the oracle)
are never served: a session for one is a `LocalSession`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import grpc

from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.proto import pb
from predictor.service.client import COMPLETIONS_PER_CALL, SECONDS_PER_COMPLETION, PredictorClient
from predictor.service.codec import prediction_from, sync_request
from predictor.service.connection import Credentials, PredictorError, SyncStream, is_transient

log = logging.getLogger("tsched.client")


class RemoteSession:
    """A `PredictionSession` served by the predictor service over a `SyncStream`.

    Completions are held until the next call that has submissions to predict
    (or until `close`): the service learns them before it predicts anything
    submitted later, so answers equal `LocalSession`'s, with one round trip per
    instant that has arrivals (fewer: a replay asks ahead, `asks_ahead`), on one stream kept open for the
    session. `reset=True` starts from an empty namespace (a
    simulation run); a live scheduler keeps its namespace's history.

    On a transient failure the submitted jobs get t_req and count in
    `fallbacks`; unsent completions are kept and sent on the next attempt (the
    service drops ones it already acknowledged). Attempts wait `retry_after`
    seconds, doubling up to `max_retry_after` while failures go on.

    An `ephemeral` session (a replay's, in a `records.EPHEMERAL_PREFIX` namespace, which the server never
    writes to its state file) removes its namespace when it is closed, whether the run ended or failed.
    """

    def __init__(
        self,
        address: str,
        namespace: str,
        spec: str = "",
        *,
        reset: bool,
        timeout: float = 1.0,
        retry_after: float = 0.5,
        max_retry_after: float = 30.0,
        credentials: Credentials | None = None,
        ephemeral: bool = False,
    ) -> None:
        self.client = PredictorClient(address, timeout, credentials)
        self.namespace = namespace
        self.ephemeral = ephemeral
        self.spec = spec
        self.fallbacks = 0
        self.asks_ahead = True  # a round trip saved per instant asked ahead
        self._pending: list[FinishedJob] = []
        self._needs_reset = reset
        self._retry_after = retry_after
        self._first_retry_after = retry_after
        self._max_retry_after = max_retry_after
        self._next_attempt = 0.0
        self._stream: SyncStream | None = None

    def sync(self, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> list[Prediction]:
        self._pending.extend(finished)
        if not submitted:
            if len(self._pending) >= COMPLETIONS_PER_CALL and self._may_attempt():
                self._send(submitted)
            return []
        predictions = self._send(submitted) if self._may_attempt() else None
        if predictions is None:
            self.fallbacks += len(submitted)
            return [Prediction(t_sched=job.t_req, factor=None, basis=0, fallback=True) for job in submitted]
        return predictions

    def close(self) -> None:
        """Send the completions still held (so the namespace is complete), then close the channel."""
        if self._pending and self._send(()) is None:
            log.warning(
                "predictor at %s unreachable: %d completions for namespace %r were not delivered",
                self.client.address,
                len(self._pending),
                self.namespace,
            )
        if self._stream is not None:
            self._stream.close()
        if self.ephemeral:
            self._remove_namespace()
        self.client.close()

    def _remove_namespace(self) -> None:
        """Remove the replay's namespace from the server (a server that went away has dropped it already)."""
        try:
            self.client.reset_namespace(self.namespace, missing_ok=True)
        except PredictorError as error:
            log.warning("the replay's namespace %r was not removed: %s", self.namespace, error)

    def _timeout_for(self, completions: int) -> float:
        return self.client.timeout + completions * SECONDS_PER_COMPLETION

    def _may_attempt(self) -> bool:
        return time.monotonic() >= self._next_attempt

    def _send(self, submitted: Sequence[JobRequest]) -> list[Prediction] | None:
        """Deliver the held completions (in chunks), then predict `submitted`; None on a transient failure."""
        client = self.client
        try:
            if self._needs_reset:
                client.reset_namespace(self.namespace, missing_ok=True)
                self._needs_reset = False
            while len(self._pending) > COMPLETIONS_PER_CALL:
                client.observe(
                    self._pending[:COMPLETIONS_PER_CALL],
                    namespace=self.namespace,
                    timeout=self._timeout_for(COMPLETIONS_PER_CALL),
                )
                del self._pending[:COMPLETIONS_PER_CALL]
            request = sync_request(self._pending, submitted, self.namespace, self.spec)
            response = self._exchange(request, self._timeout_for(len(self._pending)))
            predictions = [prediction_from(p) for p in response.predictions]
        except PredictorError as error:
            if self._stream is not None and self._stream.closed:
                self._stream = None  # the next attempt opens a new stream
            if not is_transient(error):
                raise
            self._back_off(error, len(submitted))
            return None
        self._pending.clear()
        self._retry_after = self._first_retry_after
        return predictions

    def _back_off(self, error: PredictorError, submitted: int) -> None:
        """After a transient failure: no attempt for `retry_after` seconds, doubled for the next failure."""
        self._next_attempt = time.monotonic() + self._retry_after
        log.warning(
            "%s; %d held completion(s) kept, %d submitted job(s) get t_req; next attempt in %.1f s",
            error,
            len(self._pending),
            submitted,
            self._retry_after,
        )
        self._retry_after = min(2 * self._retry_after, self._max_retry_after)

    def _exchange(self, request: pb.SyncRequest, timeout: float) -> pb.SyncResponse:
        """One exchange on the session's stream; a stream already used that was ended is reopened once.

        A server cuts a stream that sits idle (a quiet cluster) or restarts:
        the request was then never read, so sending it again on a new stream
        is safe (completions already held are recognised).
        """
        reused = self._stream is not None
        if self._stream is None:
            self._stream = self.client.sync_stream()
        try:
            return self._stream.exchange(request, timeout)
        except PredictorError as error:
            if not reused or error.code not in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE):
                raise
            log.info("%s: the stream was ended; reopening it", error)
            self._stream = self.client.sync_stream()
            return self._stream.exchange(request, timeout)
