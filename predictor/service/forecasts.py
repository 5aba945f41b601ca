"""The service's queue-time forecasts (`ForecastStart`): what the domain core needs beyond its namespaces.

The forward simulation itself is the simulator's (`simulator.forecast`), which
`predictor` never imports: the `tsched serve` command, which composes both
packages, hands it to the server it starts. A server without one refuses
forecasts (FAILED_PRECONDITION) and serves everything else.

The bounds (`predictor.forecasting.forecast_with_bounds`) need Downey's
conditional lifetime models of the namespace's history: `NamespaceLifetimes`
keeps them per namespace, fed the completions it has not seen yet at each
forecast and refitted once a day of the namespace's time.

Bounded work: a request may carry at most `MAX_FORECAST_WAITING` waiting jobs,
`MAX_FORECAST_RUNNING` running jobs and a machine of `MAX_MACHINE_PROCS`
processors; a forecast is three forward runs over them (docs/queue-time.md
gives their cost).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from kernel.errors import InvalidRequest
from kernel.jobs import UNSET_SUBMIT
from predictor.forecasting import LifetimeLookup, QueueState, StartForecast
from predictor.lifetimes import QueueLifetimes
from predictor.service.records import History

#: The most waiting jobs, running jobs and processors one forecast may carry.
MAX_FORECAST_WAITING = 5_000
MAX_FORECAST_RUNNING = 20_000
MAX_MACHINE_PROCS = 10_000_000
#: The running jobs' node lists of one forecast name at most this many nodes together (a client's list is
#: expanded only within it).
MAX_LISTED_NODES = 200_000


@dataclass(frozen=True)
class ForecastAnswer:
    """Each waiting job's forecast start and bounds, and what produced them."""

    forecasts: list[StartForecast]
    estimator: str
    namespace: str
    now: int


def check_counts(running: int, waiting: int) -> None:
    """Refuse more running or waiting jobs than one forecast may carry."""
    for where, count, limit in (("running", running, MAX_FORECAST_RUNNING), ("waiting", waiting, MAX_FORECAST_WAITING)):
        if count > limit:
            raise InvalidRequest(f"{where} holds {count} jobs; at most {limit} per forecast")


def check_state(state: QueueState) -> None:
    """Refuse a state no scheduler could be in, naming the field: the checks that relate fields to each other."""
    if not 1 <= state.procs <= MAX_MACHINE_PROCS:
        raise InvalidRequest(f"machine_procs must be in [1, {MAX_MACHINE_PROCS}], got {state.procs}")
    if state.now < 0:
        raise InvalidRequest(f"now must be >= 0, got {state.now}")
    check_counts(len(state.running), len(state.waiting))
    held = 0
    for index, (job, start) in enumerate(state.running):
        place = f"running[{index}]"
        if job.submit == UNSET_SUBMIT:
            raise InvalidRequest(f"{place}.job.submit is required")
        if not job.submit <= start <= state.now:
            raise InvalidRequest(
                f"{place}.start ({start}) must lie between {place}.job.submit ({job.submit}) and now ({state.now})"
            )
        held += job.procs
    if held > state.procs:
        raise InvalidRequest(f"running jobs hold {held} processors; machine_procs is {state.procs}")
    for index, job in enumerate(state.waiting):
        place = f"waiting[{index}]"
        if job.submit == UNSET_SUBMIT:
            raise InvalidRequest(f"{place}.submit is required")
        if job.submit > state.now:
            raise InvalidRequest(f"{place}.submit ({job.submit}) is after now ({state.now})")
        if job.procs > state.procs:
            raise InvalidRequest(f"{place}.procs ({job.procs}) exceeds machine_procs ({state.procs})")


class NamespaceLifetimes:
    """Downey's lifetime models of each namespace's history, brought up to date at each forecast."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: namespace name -> (the namespace object, its models, how many of its completions they have seen)
        self._held: dict[str, tuple[object, QueueLifetimes, int]] = {}

    def lookup(self, namespace: object, name: str, history: History, now: int) -> LifetimeLookup:
        """The models as of `now`, after learning the completions of `history` not seen yet (counted by
        `History.appended`, so that evictions from its front do not shift what was seen).

        Call it under the namespace's lock (`history` must not grow meanwhile). A namespace that was
        reset is a new object: its models start afresh.
        """
        with self._lock:
            entry = self._held.get(name)
            if entry is None or entry[0] is not namespace:
                entry = (namespace, QueueLifetimes(), 0)
            _, lifetimes, seen = entry
            for job in history.newest(history.appended - seen):
                lifetimes.observe(job)
            lifetimes.refresh(now)
            self._held[name] = (namespace, lifetimes, history.appended)
            return lifetimes.frozen()
