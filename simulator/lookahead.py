"""Arrivals asked ahead of their instant: fewer round trips to a remote predictor, the same answers.

A replay through the service pays one round trip per instant with arrivals.
Often the next arrivals come before any job can end: then nothing the
predictor learns changes between now and them, and they can be asked now, in
the same call. Processors are freed only when a job ends, so until then only
a job that fits in the processors free now can start. No job can end before
the earliest of: the end of a running job, now plus the shortest runtime of a
job waiting or arriving now that fits, and each arrival asked ahead plus the
shortest runtime among its instant's jobs that fit (it may start as it
arrives). The instants that arrive strictly before that horizon
see the history they would see at their own instant, and a predictor answers
a batch as it would one job after another (`Estimator.predict_many`), so every
answer is the one the instant would have got. The horizon reads the trace's
actual runtimes: this is the replay's business, never the scheduler's.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence

from kernel.jobs import Prediction

#: The most jobs asked ahead in one call (a bounded message, a bounded wait for its answer).
MAX_AHEAD = 1000


class Lookahead:
    """Which arrivals may be asked with the current instant's, and the answers kept for them until they arrive.

    `submits`, `runtimes` and `procs` are per trace position; `instants` the positions where each submit time's
    jobs begin, then the end (as the replay steps through them).
    """

    def __init__(
        self, submits: Sequence[int], runtimes: Sequence[int], procs: Sequence[int], instants: Sequence[int]
    ) -> None:
        self._submits, self._runtimes, self._procs, self._instants = submits, runtimes, procs, instants
        self._ends: list[int] = []  # running jobs' ends, a heap (ends already past are dropped when read)
        self._waiting: dict[int, int] = {}  # runtime by position, of the jobs admitted and not started
        self._asked: dict[int, Prediction] = {}

    @property
    def waiting_answers(self) -> bool:
        """Whether answers wait for arrivals asked ahead (no job may end before they arrive)."""
        return bool(self._asked)

    def answered(self, arrivals: range) -> list[Prediction] | None:
        """The answers for an instant's arrivals if they were asked ahead (taken out), else None."""
        if arrivals.start not in self._asked:
            return None
        return [self._asked.pop(position) for position in arrivals]

    def ahead(self, arrivals: range, now: int, free: int) -> range:
        """The positions after `arrivals` that may be asked with them: whole instants before any job can end,
        `free` processors being free now."""
        horizon = self._earliest_end(arrivals, now, free)
        stop, limit, count = arrivals.stop, arrivals.stop + MAX_AHEAD, len(self._runtimes)
        while stop < count and self._submits[stop] < horizon:
            end = self._instants[bisect_right(self._instants, stop)]
            if end > limit:
                break
            horizon = min(horizon, self._submits[stop] + self._shortest(range(stop, end), free))
            stop = end
        return range(arrivals.stop, stop)

    def keep(self, ahead: range, answers: Sequence[Prediction]) -> None:
        """Hold the answers for the arrivals asked ahead until they arrive."""
        self._asked.update(zip(ahead, answers, strict=True))

    def admitted(self, arrivals: range) -> None:
        runtimes = self._runtimes
        self._waiting.update((position, runtimes[position]) for position in arrivals)

    def started(self, position: int, end: int) -> None:
        del self._waiting[position]
        heapq.heappush(self._ends, end)

    def _shortest(self, positions: Iterable[int], free: int) -> int | float:
        """The shortest runtime among `positions` that fit in `free` processors (infinite if none does)."""
        runtimes, procs = self._runtimes, self._procs
        return min((runtimes[position] for position in positions if procs[position] <= free), default=math.inf)

    def _earliest_end(self, arrivals: range, now: int, free: int) -> int | float:
        """The earliest time any job can end, seen at `now` with `arrivals` just arrived (and admitted)."""
        ends = self._ends
        while ends and ends[0] < now:
            heapq.heappop(ends)
        earliest = now + self._shortest(self._waiting, free)
        return min(earliest, ends[0]) if ends else earliest
