"""A server's namespaces: each one scheduler's (or one simulation's) history, clock, names and estimators.

A namespace is changed only under its own lock (`with namespace:`); the
table of namespaces has its own, taken to create or drop one. The checks
here are the namespace's own: how far ahead of its clock a time may be, and
which completions it already holds. Nothing here stores anything: a call's
events are recorded (`recording`) before the namespace learns them.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from kernel.durations import SECONDS_PER_DAY
from kernel.errors import Conflict, FailedPrecondition, InvalidRequest, NotFound, ResourceExhausted
from kernel.jobs import UNSET_SUBMIT, FinishedJob, JobName, JobRequest, Prediction, RuntimeInterval
from predictor.estimators.base import Estimator
from predictor.history import HistoryDiscardedError
from predictor.service import records
from predictor.service.limits import Limits, MemoryWatch
from predictor.service.live import LiveScores, LiveSummary
from predictor.service.quoting import quote
from predictor.service.specs import ResolvedSpec
from predictor.service.views import NamespaceStatus, NamespaceView

log = logging.getLogger("tsched.service")

DeadlineCheck = Callable[[], None]

DEFAULT_NAMESPACE = "default"
#: No time (submit, end) may be later than this: year 5138 in Unix seconds, beyond any real clock.
LATEST_TIME = 10**11
#: How often (in jobs) a long batch of questions checks whether its caller's deadline has passed.
DEADLINE_CHECK_EVERY = 4096
#: The first id a namespace gives a user or group name: far above the numbers schedulers use.
NAME_IDS_START = 1 << 40
_NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9._:/@+-]{1,128}")


def no_deadline() -> None:
    """A deadline check for work that must not stop half-way (recorded predictions) or is too short to check."""


def at_clock(jobs: Sequence[JobRequest], clock: int) -> list[JobRequest]:
    """`jobs` with an unset submit time set to `clock`."""
    return [job._replace(submit=clock) if job.submit == UNSET_SUBMIT else job for job in jobs]


def with_ids(jobs: Sequence[JobRequest], names: Sequence[JobName], ids: dict[tuple[str, str], int]) -> list[JobRequest]:
    """`jobs` with the user and group they gave by name set to the namespace's ids for them."""
    jobs = list(jobs)
    for index, kind, name in names:
        jobs[index] = jobs[index]._replace(**{kind: ids[(kind, name)]})
    return jobs


def finished_with_ids(
    batch: Sequence[FinishedJob], names: Sequence[JobName], ids: dict[tuple[str, str], int]
) -> list[FinishedJob]:
    """Completions with their jobs' names set to ids, as `with_ids`."""
    if not names:
        return list(batch)
    requests = with_ids([job.request for job in batch], names, ids)
    return [job._replace(request=request) for job, request in zip(batch, requests, strict=True)]


def _days(seconds: int) -> str:
    return f"{seconds / SECONDS_PER_DAY:g} days"


@dataclass(eq=False)
class Namespace:
    """One scheduler's (or one simulation's) history, clock and estimators.

    Use it as a context manager (`with namespace:`) for every read or change:
    that takes its lock, and refuses a namespace that was reset meanwhile.
    A `transient` namespace answers a question about a namespace that does
    not exist, and is dropped after it: a question never creates one.
    """

    name: str
    build: Callable[[str], Estimator]
    limits: Limits
    memory: MemoryWatch
    transient: bool = False
    history: records.History = field(default_factory=records.History)
    clock: int = 0
    estimators: dict[str, Estimator] = field(default_factory=dict)
    #: The ids of the user and group names it was given: {(field, name): id}, ids from NAME_IDS_START.
    names: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Events recorded since the last snapshot, and the sequence number of the latest in the state file.
    since_snapshot: int = 0
    last_seq: int = 0
    retired: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Predictions answered, and how many of them were t_req for lack of history, since the server started.
    predictions: int = 0
    fallbacks: int = 0

    def __post_init__(self) -> None:
        self.live = LiveScores(self.limits.live_window, self.limits.live_pending)

    def __enter__(self) -> Namespace:
        self.lock.acquire()
        if self.retired:
            self.lock.release()
            raise Conflict(f"namespace {quote(self.name)} was reset during the call; retry it")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()

    def estimator(self, spec: ResolvedSpec) -> Estimator:
        """The namespace's estimator for `spec`, built on first use and taught the history so far."""
        estimator = self.estimators.get(spec.canonical)
        if estimator is None:
            if not self.transient:
                if len(self.estimators) >= self.limits.max_estimators:
                    raise ResourceExhausted(
                        f"estimator: namespace {quote(self.name)} already holds {self.limits.max_estimators} "
                        "estimators (--max-estimators); reuse one of its SPECs or reset it"
                    )
                self.memory.check_growth(f"estimator: a new estimator in namespace {quote(self.name)}")
            estimator = self.build(spec.canonical)
            observe = estimator.observe
            for job in self.history:
                observe(job)
            self.estimators[spec.canonical] = estimator
        return estimator

    def identify(self, names: Iterable[JobName]) -> tuple[dict[tuple[str, str], int], list[tuple[str, str, int]]]:
        """The id of every name: the namespace's, else a new one, returned apart as (field, name, id) to be
        stored before the namespace keeps it (a refused call assigns nothing)."""
        ids: dict[tuple[str, str], int] = {}
        new: list[tuple[str, str, int]] = []
        for _, kind, name in names:
            key = (kind, name)
            if key not in ids:
                known = self.names.get(key)
                if known is None:
                    known = NAME_IDS_START + len(self.names) + len(new)
                    new.append((kind, name, known))
                ids[key] = known
        return ids, new

    # --- checks ---

    def check_ends(self, batch: Sequence[FinishedJob], where: str) -> None:
        """Each end no later than LATEST_TIME and at most the time step ahead of the clock (or the previous end)."""
        step = self.limits.max_time_step_seconds
        latest = self.clock
        for index, job in enumerate(batch):
            self._check_time(job.end, latest, step, f"{where}[{index}].end")
            latest = max(latest, job.end)

    def check_submits(self, jobs: Sequence[JobRequest], where: str, clock: int, indexed: bool = True) -> None:
        step = self.limits.max_time_step_seconds
        for index, job in enumerate(jobs):
            self._check_time(job.submit, clock, step, f"{where}[{index}].submit" if indexed else f"{where}.submit")

    def _check_time(self, time: int, clock: int, step: int, place: str) -> None:
        if time > LATEST_TIME:
            raise InvalidRequest(f"{place} ({time}) is after {LATEST_TIME} (year 5138 in Unix seconds): not a time")
        if clock > 0 and time - clock > step:
            raise InvalidRequest(
                f"{place} ({time}) is more than {_days(step)} ahead of namespace {quote(self.name)}'s clock ({clock}): "
                "a time that far ahead would hold the namespace up (completions come in end order); "
                "this server's --max-time-step"
            )

    def fresh(self, batch: Sequence[FinishedJob], where: str) -> list[FinishedJob]:
        """The completions of `batch` not already held, refusing one that ends before the latest held.

        A client that resends after a lost reply sends completions the
        namespace already holds; they are recognised (same job, same end) and
        skipped rather than learned twice.
        """
        latest = self.history.latest_end
        if not batch or latest is None or batch[0].end > latest:
            return list(batch)
        held = set(self.history.since(batch[0].end))
        fresh = [job for job in batch if job not in held]
        if fresh and fresh[0].end < latest:
            index = batch.index(fresh[0])
            raise InvalidRequest(
                f"{where}[{index}].end ({fresh[0].end}) is before the latest completion namespace "
                f"{quote(self.name)} holds ({latest}): completions must come in end order"
            )
        return fresh

    # --- changes ---

    def learn(self, completions: Sequence[FinishedJob]) -> None:
        """Teach every estimator `completions` (already recorded), and drop history beyond the bounds."""
        if not completions:
            return
        for estimator in self.estimators.values():
            observe = estimator.observe
            for job in completions:
                observe(job)
        self.history.extend(completions)
        self.live.completed(completions)
        self.history.evict(completions[-1].end - self.limits.history_window_seconds, self.limits.max_history)

    def predict(
        self, estimator: Estimator, jobs: Sequence[JobRequest], check_deadline: DeadlineCheck, intervals: bool = False
    ) -> tuple[list[Prediction], list[RuntimeInterval | None]]:
        """Predict `jobs` (their submit times set); one `predict_many` per chunk, the deadline checked between.

        With `intervals`, each prediction's interval from the same call (else no intervals).
        """
        predictions: list[Prediction] = []
        shown: list[RuntimeInterval | None] = []
        for start in range(0, len(jobs), DEADLINE_CHECK_EVERY):
            if start:
                check_deadline()
            chunk = jobs[start : start + DEADLINE_CHECK_EVERY]
            try:
                if intervals:
                    for prediction, interval in estimator.predict_many(chunk, intervals=True):
                        predictions.append(prediction)
                        shown.append(interval)
                else:
                    predictions += estimator.predict_many(chunk)
            except HistoryDiscardedError as error:
                raise FailedPrecondition(str(error)) from None
        return predictions, shown

    # --- views ---

    def view(self) -> NamespaceView:
        return NamespaceView(self.name, len(self.history), self.clock, tuple(self.estimators))

    def status(self) -> NamespaceStatus:
        return NamespaceStatus(
            self.name,
            len(self.history),
            self.clock,
            self.predictions,
            self.fallbacks,
            self.live.pending,
            tuple(self._tuned(summary) for summary in self.live.summaries()),
        )

    def _tuned(self, summary: LiveSummary) -> LiveSummary:
        """`summary` with its estimator's `Tuning`, if it tunes itself."""
        estimator = self.estimators.get(summary.estimator)
        tuning = None if estimator is None else estimator.tuning()
        if tuning is None:
            return summary
        return replace(summary, choice=tuning.choice, retunings=tuning.retunings, replay_scores=tuning.scores)


class NamespaceTable:
    """The namespaces a server holds, by name, at most `--max-namespaces` of them.

    Every namespace it creates holds the server's default estimators from the start.
    """

    def __init__(
        self, limits: Limits, memory: MemoryWatch, build: Callable[[str], Estimator], defaults: Sequence[ResolvedSpec]
    ) -> None:
        self.limits = limits
        self.memory = memory
        self._build = build
        self._defaults = defaults
        self._held: dict[str, Namespace] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def new(self, name: str, transient: bool = False) -> Namespace:
        """A namespace not (yet) held: empty, without estimators."""
        return Namespace(name, self._build, self.limits, self.memory, transient)

    def add_defaults(self, held: Namespace) -> None:
        for spec in self._defaults:
            held.estimator(spec)

    def adopt(self, held: Namespace) -> None:
        """Hold a namespace rebuilt from the state file (on start, before any call)."""
        self._held[held.name] = held

    def get(self, written: str) -> Namespace | None:
        return self._held.get(written or DEFAULT_NAMESPACE)

    def find(self, written: str, create: bool) -> Namespace:
        """The namespace called `written` ("" is the default); created when `create`, else transient if absent."""
        name = written or DEFAULT_NAMESPACE
        held = self._held.get(name)
        if held is not None:
            return held
        if not _NAMESPACE_PATTERN.fullmatch(name):
            raise InvalidRequest(f"namespace {quote(name)} is not 1-128 characters of letters, digits and ._:/@+-")
        if not create:
            return self.new(name, transient=True)
        with self._lock:
            held = self._held.get(name)
            if held is None:
                if len(self._held) >= self.limits.max_namespaces:
                    raise ResourceExhausted(
                        f"namespace {quote(name)}: this server holds its limit of {self.limits.max_namespaces} "
                        "namespaces (--max-namespaces); reset unused ones"
                    )
                self.memory.check_growth(f"namespace {quote(name)}")
                held = self.new(name)
                self.add_defaults(held)
                self._held[name] = held
        return held

    @contextmanager
    def found(self, written: str, create: bool) -> Iterator[Namespace]:
        """`find`, for a call that may be refused: a namespace it created is dropped again if the call is
        refused before anything was recorded in it (a refused call changes nothing, and creates nothing)."""
        existed = self.get(written) is not None
        held = self.find(written, create)
        try:
            yield held
        except BaseException:
            if not existed and not held.transient:
                self._discard_if_empty(held)
            raise

    def _discard_if_empty(self, held: Namespace) -> None:
        with self._lock:
            if self._held.get(held.name) is not held:
                return
            with held:
                if held.last_seq or held.since_snapshot or held.history or held.clock or held.names:
                    return  # another call recorded in it meanwhile: it stays
                held.retired = True  # a call that found it meanwhile retries (Conflict) and creates it afresh
                del self._held[held.name]

    def drop(self, written: str, missing_ok: bool, forget: Callable[[str], None]) -> int:
        """Drop a namespace (`forget` drops what is stored of it first); return how many completions it held.

        A namespace that does not exist held 0 when `missing_ok`, else it is NotFound.
        """
        name = written or DEFAULT_NAMESPACE
        with self._lock:
            held = self._held.get(name)
            if held is None:
                if missing_ok:
                    return 0
                raise NotFound(f"namespace {quote(name)} does not exist")
            with held:
                forget(name)
                forgotten = len(held.history)
                # Calls waiting on the old object are refused (Conflict); new calls get a fresh one.
                held.retired = True
                del self._held[name]
        log.info("namespace %s reset (%d completions forgotten)", quote(name), forgotten)
        return forgotten

    def names(self) -> list[str]:
        with self._lock:
            return list(self._held)

    def views(self) -> list[NamespaceView]:
        """Every namespace held, by name (one reset meanwhile is left out)."""
        with self._lock:
            held = sorted(self._held.items())
        listing = []
        for _, namespace in held:
            try:
                with namespace:
                    listing.append(namespace.view())
            except Conflict:  # reset since it was listed
                continue
        return listing

    def largest(self, count: int) -> list[Namespace]:
        """The `count` namespaces with the most history."""
        with self._lock:
            held = list(self._held.values())
        return sorted(held, key=lambda namespace: len(namespace.history), reverse=True)[:count]
