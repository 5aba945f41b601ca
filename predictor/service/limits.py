"""Every bound of a predictor server, and the plain-Python machinery that enforces the transport's.

`Limits` lists them all with their defaults; `tsched serve` has one option
per field (`--max-calls`, `--memory-limit-mb`, ...), built from the field's
own documentation, so the two never disagree. The domain's bounds
(namespaces, history, estimators, time steps, memory) are enforced by the
core; the transport's (concurrent calls and streams, clients that stop
reading or sending, memory held by requests in flight) by the gate, with the
counters and the watchdog below, which know nothing of gRPC.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kernel.durations import parse_duration
from kernel.errors import ResourceExhausted, UsageError

log = logging.getLogger("tsched.service")

#: State (namespaces, history, estimators) may grow until the server's memory reaches this share of the limit.
GROWTH_SHARE = 0.8
#: Requests being decoded and answered may hold this share of the limit (the rest is headroom for training).
REQUEST_SHARE = 0.1
#: Memory a request takes while it is decoded and answered, per byte on the wire (measured: about 5.6).
REQUEST_EXPANSION = 8
#: Threads kept for refusing calls beyond the limits, so that a refusal never waits.
RESERVE_THREADS = 4
#: Health checks (`Health.Check`) answered at once, each on a thread of its own.
HEALTH_CHECKS = 4
#: Seconds without a reply to a keepalive ping after which a connection is dropped.
KEEPALIVE_TIMEOUT_SECONDS = 20.0
#: How often the memory in use is read (reading /proc costs about 15 us).
MEMORY_SAMPLE_SECONDS = 0.1
#: How often the watchdog looks for calls that wait on their client too long.
WATCHDOG_SECONDS = 0.1


#: The largest value a client's SPEC may give each parameter that sets what the server pays (CPU, threads,
#: memory), for every estimator of `predictor.registry`: one table, which `--estimator-limit` overrides entry
#: by entry. An estimator with nothing the server pays for by the parameter has an empty entry (a test walks
#: the registry). A subclass without an entry of its own is held to its parent's.
ESTIMATOR_CAPS: dict[str, dict[str, float]] = {
    "request": {},
    "oracle": {},  # never served
    "percentile": {},
    "last2": {},
    "mean-std": {},
    "lgbm-quantile": {"trees": 200, "leaves": 127, "threads": 2, "max_train": 100_000},
    "lgbm-sched": {"trees": 200, "leaves": 127, "threads": 2, "max_train": 100_000},
}


def bound(default: Any, doc: str) -> Any:
    """A field of `Limits`: its default and what it bounds (the `tsched serve` help and docs say the same)."""
    return dataclasses.field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class Limits:
    """The bounds of one server. Every value is checked when the server starts."""

    max_calls: int = bound(16, "calls (other than streams) served at once; more are refused with RESOURCE_EXHAUSTED")
    max_streams: int = bound(32, "streams (SyncStream, reflection) open at once; more are refused")
    max_watchers: int = bound(16, "Health.Watch streams open at once (they hold no thread); more are refused")
    client_share: float = bound(
        0.5,
        "share (0-1] of the calls, streams, health checks and watchers one client may hold at once "
        "(a client: its token, or without a token its address)",
    )
    stream_idle_timeout: float = bound(300.0, "seconds a stream may wait for its client's next message")
    send_timeout: float = bound(30.0, "seconds a stream's answer may wait for a client that does not read it")
    receive_timeout: float = bound(30.0, "seconds a call's request may take to arrive")
    max_wait: float = bound(
        20.0,
        "seconds a call may wait for a model training (less when its deadline comes first); "
        "then it is refused UNAVAILABLE, to retry",
    )
    keepalive: float = bound(
        60.0,
        f"seconds between pings on an idle connection; a peer silent {KEEPALIVE_TIMEOUT_SECONDS:.0f} s more is dropped",
    )
    forecast_cpu_seconds: float = bound(
        20.0, "CPU seconds one ForecastStart may take (it also stops when its caller goes away or its deadline passes)"
    )
    max_batch: int = bound(50_000, "jobs or completions per call (the largest message accepted follows from it)")
    max_namespaces: int = bound(10_000, "namespaces held; a call that would create one more is refused")
    max_history: int = bound(1_000_000, "completions kept per namespace, in memory and on disk (the oldest go first)")
    history_window: str = bound(
        "400d", "completions that ended longer than this before a namespace's latest are dropped"
    )
    max_estimators: int = bound(16, "estimators (distinct SPECs) one namespace may hold")
    max_specs: int = bound(256, "SPEC spellings whose parse is kept for reuse")
    max_time_step: str = bound("90d", "how far a submit or end time may be ahead of the namespace's clock")
    memory_limit_mb: int = bound(
        2048, f"memory (RSS, MB) the server stays under: state stops growing at {GROWTH_SHARE:.0%} of it"
    )
    snapshot_every: int = bound(
        100_000, "events (completions, submissions) a namespace records between snapshots in the state file"
    )
    shutdown_grace: float = bound(10.0, "seconds in-flight calls get to finish on SIGTERM/SIGINT")
    live_window: int = bound(
        1000,
        "completions per namespace and estimator the live accuracy (metrics, tsched status) and a sampled "
        "forecast's errors are taken from",
    )
    live_pending: int = bound(
        10_000, "predictions per namespace kept until their job completes, to score it (the oldest go first)"
    )
    metrics_namespaces: int = bound(
        64, "namespaces (those with the most history) that get their own series in the metrics and tsched status"
    )
    estimator_limit: tuple[str, ...] = bound(
        (),
        "NAME:param=max,...: the largest values a client's SPEC may ask for, over the built-in caps of every "
        "estimator (docs/service-operations.md); the server's own SPECs are exempt",
    )

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            option = "--" + item.name.replace("_", "-")
            if isinstance(value, bool):
                continue
            if isinstance(value, int | float) and not (math.isfinite(value) and value > 0):
                raise UsageError(f"{option} must be a positive number, not {value!r}")
        if self.client_share > 1:
            raise UsageError(f"--client-share must be a share between 0 and 1, not {self.client_share!r}")
        for name in ("history_window", "max_time_step"):
            try:
                parse_duration(getattr(self, name), name.replace("_", "-"))
            except ValueError as error:
                raise UsageError(f"--{error}") from None

    @functools.cached_property
    def history_window_seconds(self) -> int:
        """--history-window in seconds (read on every completion: parsed once)."""
        seconds = parse_duration(self.history_window, "history-window")
        assert seconds is not None  # no "unbounded" keyword is admitted
        return seconds

    @functools.cached_property
    def max_time_step_seconds(self) -> int:
        """--max-time-step in seconds (read on every call that brings times: parsed once)."""
        seconds = parse_duration(self.max_time_step, "max-time-step")
        assert seconds is not None
        return seconds

    @property
    def memory_limit_bytes(self) -> int:
        return self.memory_limit_mb * 1024 * 1024

    @property
    def threads(self) -> int:
        """Server threads: one per admitted call, stream and health check, plus the reserve for refusals
        (health watchers hold none)."""
        return self.max_calls + self.max_streams + HEALTH_CHECKS + RESERVE_THREADS

    @property
    def request_budget_bytes(self) -> int:
        return int(self.memory_limit_bytes * REQUEST_SHARE)

    def check_message_size(self, max_message_bytes: int) -> None:
        """Refuse a batch limit whose largest message could not be decoded within the request budget."""
        if max_message_bytes * REQUEST_EXPANSION > self.request_budget_bytes:
            raise UsageError(
                f"--max-batch {self.max_batch} allows messages of {max_message_bytes / 2**20:.0f} MB, which take "
                f"about {REQUEST_EXPANSION}x that in memory: more than {REQUEST_SHARE:.0%} of --memory-limit-mb "
                f"{self.memory_limit_mb}; lower the one or raise the other"
            )


class CallKind:
    """What a call holds while it runs: a call, stream, health check or health watcher slot."""

    CALL = "call"
    STREAM = "stream"
    HEALTH = "health"
    WATCH = "watch"


#: How each kind of slot is named in a refusal.
_SLOT_NAMES = {
    CallKind.CALL: "calls at once",
    CallKind.STREAM: "streams open",
    CallKind.HEALTH: "health checks at once",
    CallKind.WATCH: "health watchers open",
}


class Admission:
    """Slots for calls, streams and health, each with a budget per client, and the memory requests may hold.

    One rule for every method: a call takes a slot of its kind, refused at
    once (RESOURCE_EXHAUSTED) when the server holds its limit of them or the
    client (its token, else its address) holds its share (`--client-share`).
    Refusing instead of queueing keeps threads free for refusals, and a share
    per client keeps one client from taking every slot.
    """

    def __init__(self, limits: Limits) -> None:
        self._capacity = {
            CallKind.CALL: limits.max_calls,
            CallKind.STREAM: limits.max_streams,
            CallKind.HEALTH: HEALTH_CHECKS,
            CallKind.WATCH: limits.max_watchers,
        }
        self._per_client = {kind: max(1, int(count * limits.client_share)) for kind, count in self._capacity.items()}
        self._in_use = dict.fromkeys(self._capacity, 0)
        self._by_client: dict[tuple[str, str], int] = {}
        self._budget = limits.request_budget_bytes
        self._reserved = 0
        self._lock = threading.Lock()

    def in_use(self, kind: str, client: str | None = None) -> int:
        """Slots of `kind` held, by every client or by `client`."""
        return self._in_use[kind] if client is None else self._by_client.get((kind, client), 0)

    def acquire(self, kind: str, client: str) -> str | None:
        """Take a slot of `kind` for `client`; None when taken, else why it was refused (nothing is held then)."""
        key = (kind, client)
        with self._lock:
            if self._in_use[kind] >= self._capacity[kind]:
                return f"the server holds its limit of {self._capacity[kind]} {_SLOT_NAMES[kind]}; retry shortly"
            held = self._by_client.get(key, 0)
            if held >= self._per_client[kind]:
                return (
                    f"this client holds its share of {self._per_client[kind]} of the server's "
                    f"{self._capacity[kind]} {_SLOT_NAMES[kind]} (--client-share); retry shortly"
                )
            self._in_use[kind] += 1
            self._by_client[key] = held + 1
        return None

    def release(self, kind: str, client: str) -> None:
        key = (kind, client)
        with self._lock:
            self._in_use[kind] -= 1
            held = self._by_client[key] - 1
            if held:
                self._by_client[key] = held
            else:
                del self._by_client[key]  # clients come and go: only those holding slots are kept

    @contextmanager
    def slot(self, kind: str, client: str = "") -> Iterator[str | None]:
        """A slot of `kind` for the block: yields None when admitted, else the refusal (nothing held then)."""
        refused = self.acquire(kind, client)
        try:
            yield refused
        finally:
            if refused is None:
                self.release(kind, client)

    def reserve(self, message_bytes: int) -> int:
        """Reserve memory for decoding and answering a message; return the amount (0: refused, retry later).

        A message is always admitted when nothing else is in flight, so the
        largest allowed message can always be served.
        """
        amount = max(1, message_bytes) * REQUEST_EXPANSION
        with self._lock:
            if self._reserved and self._reserved + amount > self._budget:
                return 0
            self._reserved += amount
        return amount

    @property
    def reserved(self) -> int:
        """Memory (bytes) reserved by requests in flight and answers not yet sent."""
        return self._reserved

    def give_back(self, amount: int) -> None:
        """Return memory `reserve` gave."""
        with self._lock:
            self._reserved -= amount


def resident_bytes() -> int | None:
    """The memory this process holds (RSS), or None where /proc is not available."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class MemoryWatch:
    """Refuses growth (new namespaces, estimators, history) once the server's memory nears its limit."""

    def __init__(self, limit_bytes: int, sample: Callable[[], int | None] = resident_bytes) -> None:
        self.limit_bytes = limit_bytes
        self.ceiling = int(limit_bytes * GROWTH_SHARE)
        self._sample = sample
        self._sampled_at = -math.inf
        self._resident: int | None = None
        self._over = False

    @property
    def resident(self) -> int | None:
        now = time.monotonic()
        if now - self._sampled_at >= MEMORY_SAMPLE_SECONDS:
            self._sampled_at = now
            self._resident = self._sample()
        return self._resident

    def check_growth(self, what: str) -> None:
        """Raise ResourceExhausted when `what` would grow a server that is at its ceiling."""
        resident = self.resident
        over = resident is not None and resident > self.ceiling
        if over != self._over:
            self._over = over
            if over:
                log.warning(
                    "memory %d MB is above %d MB: state stops growing", resident_mb(resident), self.ceiling >> 20
                )
            else:
                log.info("memory back under %d MB: state may grow again", self.ceiling >> 20)
        if over:
            raise ResourceExhausted(
                f"{what}: the server's memory ({resident_mb(resident)} MB) is at its ceiling "
                f"({self.ceiling >> 20} MB, {GROWTH_SHARE:.0%} of --memory-limit-mb); "
                "reset unused namespaces or raise the limit"
            )


def resident_mb(resident: int | None) -> int:
    return 0 if resident is None else resident >> 20


class Watch:
    """One call under the watchdog: what it waits for, and since when."""

    IDLE = 0  # the server is working on it: no timeout
    RECEIVING = 1  # waiting for the client's next message
    SENDING = 2  # waiting for the client to take an answer

    __slots__ = ("cancel", "name", "receive_timeout", "since", "state")

    def __init__(self, cancel: Callable[[], None], name: str, receive_timeout: float) -> None:
        self.cancel = cancel
        self.name = name
        self.receive_timeout = receive_timeout
        self.state = Watch.IDLE
        self.since = time.monotonic()

    def receiving(self) -> None:
        self.state, self.since = Watch.RECEIVING, time.monotonic()

    def sending(self) -> None:
        self.state, self.since = Watch.SENDING, time.monotonic()

    def working(self) -> None:
        self.state = Watch.IDLE


class Watchdog:
    """Cuts calls whose client stops sending or reading, so that they give their thread back.

    One thread looks at every watched call each `WATCHDOG_SECONDS`; a call
    that has waited on its client longer than allowed is cancelled (its
    `cancel` is called once), which wakes the thread blocked on it.
    """

    def __init__(self, send_timeout: float) -> None:
        self.send_timeout = send_timeout
        self._watches: dict[int, Watch] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.cut = 0
        self._thread = threading.Thread(target=self._run, name="tsched-watchdog", daemon=True)
        self._thread.start()

    def watch(self, cancel: Callable[[], None], name: str, receive_timeout: float) -> Watch:
        """Watch a call until `unwatch` (a call whose answer may outlive its handler: unwatched when it ends)."""
        watch = Watch(cancel, name, receive_timeout)
        with self._lock:
            self._watches[id(watch)] = watch
        return watch

    def unwatch(self, watch: Watch) -> None:
        with self._lock:
            self._watches.pop(id(watch), None)

    @contextmanager
    def watching(self, cancel: Callable[[], None], name: str, receive_timeout: float) -> Iterator[Watch]:
        watch = self.watch(cancel, name, receive_timeout)
        try:
            yield watch
        finally:
            self.unwatch(watch)

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(WATCHDOG_SECONDS):
            now = time.monotonic()
            with self._lock:
                overdue = [
                    watch
                    for watch in self._watches.values()
                    if (watch.state == Watch.RECEIVING and now - watch.since > watch.receive_timeout)
                    or (watch.state == Watch.SENDING and now - watch.since > self.send_timeout)
                ]
                for watch in overdue:
                    del self._watches[id(watch)]
            for watch in overdue:
                waited = "its client's next message" if watch.state == Watch.RECEIVING else "its client to read"
                log.warning("%s cut: waited %.1f s for %s", watch.name, now - watch.since, waited)
                self.cut += 1
                watch.cancel()
