"""Prometheus metrics: what a site watches before it trusts the predictor, and while it does.

Two kinds of series, in a registry of the server's own:
- the calls, counted by an interceptor outside the gate (refusals by the gate
  counted too): calls by RPC and status code, and latency histograms by RPC;
- the state, read from the core when scraped: namespaces, history sizes,
  answers and fallbacks, training runs, and per namespace and estimator the
  live accuracy, underestimated share and BE share over the latest
  completions (`predictor.service.live`). An estimator with nothing scored
  yet has no sample of these (Prometheus' "no data", so an alert on low
  accuracy does not fire on a new namespace); its `estimator` label is its
  short name (`estimator_labels`), the full SPEC being in `Status`.

Label cardinality is bounded: RPC names are the services' methods, codes are
gRPC's 17, and per-namespace series cover at most `--metrics-namespaces`
namespaces (those with the most history) times at most `--max-estimators`
estimators each. `--metrics-listen` serves them over HTTP (loopback unless
told otherwise); without it the calls are still counted, for `tsched status`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kernel.errors import UsageError
from predictor.service.calls import NonBlockingStream, when_done
from predictor.service.core import PredictorCore
from predictor.service.live import estimator_labels
from predictor.service.security import is_local
from predictor.service.views import NamespaceStatus

log = logging.getLogger("tsched.service")

#: Latency buckets (seconds): a Predict takes about 0.3 ms; a large batch or a training sync, seconds.
LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0)

if TYPE_CHECKING:  # generic in the type stubs only
    _Interceptor = grpc.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.ServerInterceptor


class CallMetrics(_Interceptor):
    """Counts every call by RPC and final status, and times it; the outermost interceptor."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter("tsched_calls", "gRPC calls by RPC and status code", ["rpc", "code"], registry=registry)
        self.latency = Histogram(
            "tsched_call_seconds", "gRPC call latency by RPC", ["rpc"], buckets=LATENCY_BUCKETS, registry=registry
        )
        self._handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        self._lock = threading.Lock()
        #: The series of each (rpc, code) and rpc, looked up once: `labels()` takes a lock per call.
        self._counted: dict[tuple[str, str], Any] = {}
        self._timers: dict[str, Any] = {}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = handler_call_details.method
        handler = self._handlers.get(method)
        if handler is None:
            handler = self._timed(method.rpartition("/")[2], continuation(handler_call_details))
            if handler is not None:  # an unknown method is not remembered: clients choose its name
                with self._lock:
                    self._handlers[method] = handler
        return handler

    def counts(self) -> list[tuple[str, str, int]]:
        """(rpc, code, calls) so far, for `Status`."""
        return [
            (sample.labels["rpc"], sample.labels["code"], int(sample.value))
            for metric in self.calls.collect()
            for sample in metric.samples
            if sample.name.endswith("_total")
        ]

    def _done(self, rpc: str, started: float, context: grpc.ServicerContext, failed: bool) -> None:
        elapsed = time.perf_counter() - started
        code = context.code()  # type: ignore[attr-defined]  # grpcio has it; grpc-stubs 1.53 lacks it
        name = code.name if isinstance(code, grpc.StatusCode) else ("UNKNOWN" if failed else "OK")
        counted = self._counted.get((rpc, name))
        if counted is None:
            counted = self._counted[rpc, name] = self.calls.labels(rpc, name)
        counted.inc()
        timer = self._timers.get(rpc)
        if timer is None:
            timer = self._timers[rpc] = self.latency.labels(rpc)
        timer.observe(elapsed)

    def _timed(
        self, rpc: str, handler: grpc.RpcMethodHandler[Any, Any] | None
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        if handler is None:
            return None
        done = self._done
        non_blocking: Callable[..., Any] | None = handler.unary_stream
        if non_blocking is not None and getattr(non_blocking, "experimental_non_blocking", False):

            def watch(request: Any, context: grpc.ServicerContext, send: Callable[[Any], None]) -> None:
                started = time.perf_counter()
                when_done(context, lambda: done(rpc, started, context, False))
                non_blocking(request, context, send)

            return grpc.unary_stream_rpc_method_handler(
                NonBlockingStream(watch), handler.request_deserializer, handler.response_serializer
            )
        if handler.response_streaming:
            streaming = handler.stream_stream or handler.unary_stream
            assert streaming is not None

            def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                started, failed = time.perf_counter(), True
                try:
                    yield from streaming(request, context)
                    failed = False
                finally:
                    done(rpc, started, context, failed)

            factory = (
                grpc.stream_stream_rpc_method_handler
                if handler.request_streaming
                else grpc.unary_stream_rpc_method_handler
            )
            return factory(stream, handler.request_deserializer, handler.response_serializer)
        unary = handler.stream_unary or handler.unary_unary
        assert unary is not None

        def call(request: Any, context: grpc.ServicerContext) -> Any:
            started, failed = time.perf_counter(), True
            try:
                response = unary(request, context)
                failed = False
                return response
            finally:
                done(rpc, started, context, failed)

        factory = (
            grpc.stream_unary_rpc_method_handler if handler.request_streaming else grpc.unary_unary_rpc_method_handler
        )
        return factory(call, handler.request_deserializer, handler.response_serializer)


class StateCollector(Collector):
    """The core's state, read when scraped: nothing is computed per call beyond what the core keeps anyway."""

    def __init__(self, core: PredictorCore) -> None:
        self.core = core

    def collect(self) -> Iterable[Any]:
        statuses = self.core.overview()
        yield GaugeMetricFamily("tsched_namespaces", "namespaces the server holds", value=self.core.namespace_count)
        yield CounterMetricFamily(
            "tsched_training_runs", "model trainings started since the server started", value=self.core.trainer.runs
        )
        per_namespace = ["namespace"]
        history = GaugeMetricFamily("tsched_history_completions", "completions a namespace holds", labels=per_namespace)
        clock = GaugeMetricFamily("tsched_clock_seconds", "a namespace's latest recorded time", labels=per_namespace)
        answered = CounterMetricFamily("tsched_predictions", "predictions answered", labels=per_namespace)
        fallbacks = CounterMetricFamily(
            "tsched_fallbacks", "predictions answered t_req for lack of history", labels=per_namespace
        )
        pending = GaugeMetricFamily(
            "tsched_live_pending", "predictions waiting for their job's completion", labels=per_namespace
        )
        per_estimator = ["namespace", "estimator"]
        live = {
            "scored": GaugeMetricFamily(
                "tsched_live_scored", "completions the live scores are computed over", labels=per_estimator
            ),
            "accuracy": GaugeMetricFamily(
                "tsched_live_accuracy", "mean Tang accuracy over the latest completions", labels=per_estimator
            ),
            "underestimated": GaugeMetricFamily(
                "tsched_live_underestimated_ratio",
                "share of the latest completions underestimated",
                labels=per_estimator,
            ),
            "bad_estimates": GaugeMetricFamily(
                "tsched_live_bad_estimate_ratio",
                "share of the latest completions underestimated by more than 1800 s (BE)",
                labels=per_estimator,
            ),
            "fallbacks": GaugeMetricFamily(
                "tsched_live_fallback_ratio", "share of the latest completions predicted t_req", labels=per_estimator
            ),
        }
        for status in statuses:
            history.add_metric([status.name], status.completions)
            clock.add_metric([status.name], status.clock)
            answered.add_metric([status.name], status.predictions)
            fallbacks.add_metric([status.name], status.fallbacks)
            pending.add_metric([status.name], status.pending)
            labels = estimator_labels([summary.estimator for summary in status.estimators])
            for summary in status.estimators:
                for field, family in live.items():
                    if summary.scored or field == "scored":  # no score yet is no sample ("no data"), never 0
                        family.add_metric([status.name, labels[summary.estimator]], getattr(summary, field))
        yield from (history, clock, answered, fallbacks, pending, *live.values())
        yield from _tuning_families(statuses)


def _tuning_families(statuses: Iterable[NamespaceStatus]) -> Iterator[GaugeMetricFamily]:
    """A self-tuning estimator's (adaptive's) retunings, the candidate it serves (1) and its latest replay's score
    per candidate: why the service answers what it does."""
    per_candidate = ["namespace", "estimator", "candidate"]
    retunings = GaugeMetricFamily(
        "tsched_tuning_retunings", "replays of the trailing window so far", labels=["namespace", "estimator"]
    )
    choice = GaugeMetricFamily("tsched_tuning_choice", "1 for the candidate served now", labels=per_candidate)
    scores = GaugeMetricFamily(
        "tsched_tuning_replay_score",
        "each candidate's objective on the latest replay (lower is better)",
        labels=per_candidate,
    )
    for status in statuses:
        tuned = [summary for summary in status.estimators if summary.choice]
        labels = estimator_labels([summary.estimator for summary in status.estimators])
        for summary in tuned:
            label = labels[summary.estimator]
            retunings.add_metric([status.name, label], summary.retunings)
            choice.add_metric([status.name, label, summary.choice], 1)
            for candidate, score in summary.replay_scores.items():
                scores.add_metric([status.name, label, candidate], score)
    yield from (retunings, choice, scores)


class MetricsEndpoint:
    """The HTTP endpoint Prometheus scrapes (`/metrics`), on its own thread."""

    def __init__(self, listen: str, registry: CollectorRegistry) -> None:
        host, port = parse_metrics_listen(listen)
        if not is_local(f"{host}:{port}"):
            log.warning("metrics on %s: namespace names and call counts are visible to whoever reaches it", listen)
        try:
            self._httpd, self._thread = start_http_server(port, host, registry)
        except OSError as error:
            raise OSError(f"cannot serve metrics on {listen!r}: {error.strerror or error}") from None
        self.port: int = self._httpd.server_port
        self.address = f"{host}:{self.port}"
        log.info("metrics on http://%s/metrics", self.address)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def parse_metrics_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `PORT` (loopback) as (host, port)."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--metrics-listen {text!r}: expected [HOST:]PORT with a port from 0 to 65535")
    return host.strip("[]") or "127.0.0.1", int(port)
