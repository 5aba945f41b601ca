"""Per-key history of finished jobs, ordered by end time, for the history-based estimators.

Tang's percentile adjuster, mean + k sigma and Tsafrir's last-two all answer
from "the same key's jobs that ended in [s - window, s]" (last-two: "the latest
jobs that ended by s"), and the lgbm estimator's features from the same kind
of series. `EndSeries` keeps one key's jobs sorted by end time; `WindowedSeries`
adds a window [lo, hi) over them whose contents are mirrored in an aggregate (a
sorted list, running sums), so moving the window costs O(log n) per job that
enters or leaves it and a query never rescans history.

Queries may come out of submission order (a remote client) and jobs may be
observed that ended after a later-arriving query's submission: the window is
re-positioned by binary search on both bounds, so answers stay exact. History is
discarded only when it ended before the window of a query already answered; a
later query that would need it raises `HistoryDiscardedError` instead of
answering from incomplete history.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Hashable, Sequence
from operator import attrgetter
from typing import Generic, Protocol, TypeVar

from kernel.errors import TschedError
from kernel.jobs import FinishedJob, JobRequest

#: Discarded entries are physically dropped once they are at least this many
#: and at least half the list, so compaction costs O(1) amortised per job.
_COMPACT_AT = 32

#: What each part of a key SPEC ("user+group+request") reads from a job.
KEY_FIELDS = {
    "user": "user",
    "group": "group",
    "request": "t_req",
    "executable": "executable",
    "procs": "procs",
}

V = TypeVar("V")
V_contra = TypeVar("V_contra", contravariant=True)


class HistoryDiscardedError(TschedError, ValueError):
    """A query needs history that was discarded (or a model that has seen its future) after a later query."""


class WindowAggregate(Protocol[V_contra]):
    """A summary of the values inside a window, updated one value at a time."""

    def add(self, value: V_contra) -> None: ...

    def remove(self, value: V_contra) -> None: ...

    def clear(self) -> None: ...


def key_function(key: str, allowed: Collection[str]) -> Callable[[JobRequest], Hashable]:
    """The function that maps a job to its history key, for a key SPEC such as `user+group`."""
    if key not in allowed:
        raise ValueError(f"key must be one of {', '.join(allowed)}; got {key!r}")
    return attrgetter(*(KEY_FIELDS[part] for part in key.split("+")))


def interpolated_percentile(sorted_values: Sequence[float], q: float) -> float:
    """numpy.percentile(values, q) with the default linear method, from already sorted values.

    Written with numpy's own arithmetic (virtual index (n-1) * q/100, and the
    two-sided lerp) so that the result is bit-identical to numpy's.
    """
    count = len(sorted_values)
    virtual = (count - 1) * (q / 100)
    if virtual >= count - 1:
        return sorted_values[count - 1]
    previous = int(virtual)
    gamma = virtual - previous
    below = sorted_values[previous]
    above = sorted_values[previous + 1]
    difference = above - below
    if gamma >= 0.5:
        return above - difference * (1 - gamma)
    return below + difference * gamma


class EndSeries(Generic[V]):
    """One key's finished jobs sorted by end time: the series every history-based estimator keeps.

    `ends[i]` is when entry i ended and `values[i]` what the estimator keeps of
    it. Entries before `start` are discarded (no query of a later submission
    needs them); all of them ended at or before `discarded_through`, before
    every entry that remains. They are physically dropped in batches, and a
    subclass that keeps positions learns of it through `_compacted`.
    """

    __slots__ = ("discarded_through", "ends", "start", "values")

    def __init__(self) -> None:
        self.ends: list[int] = []
        self.values: list[V] = []
        self.start = 0
        self.discarded_through: int | None = None

    def __len__(self) -> int:
        """Entries kept (not discarded)."""
        return len(self.ends) - self.start

    def insert(self, end: int, value: V) -> int | None:
        """Add a finished job: in end order an append, otherwise a sorted insert. Return its position.

        None: it ended at or before discarded history, so every query that could include it is refused anyway.
        """
        if self.discarded_through is not None and end <= self.discarded_through:
            return None
        ends = self.ends
        if not ends or end >= ends[-1]:
            ends.append(end)
            self.values.append(value)
            return len(ends) - 1
        position = bisect_right(ends, end, self.start)
        ends.insert(position, end)
        self.values.insert(position, value)
        return position

    def span(self, first_end: int | None, last_end: int, *, complete: bool = True) -> tuple[int, int]:
        """Positions [lo, hi) of the entries that ended in [first_end, last_end]; `first_end` None: no lower bound.

        With `complete`, a span that reaches into discarded history raises
        `HistoryDiscardedError` rather than answer from part of it; without,
        it covers what remains.
        """
        discarded = self.discarded_through
        if complete and discarded is not None and (first_end is None or first_end <= discarded):
            raise self._discarded_error(last_end)
        lo = self.start if first_end is None else bisect_left(self.ends, first_end, self.start)
        return lo, bisect_right(self.ends, last_end, lo)

    def latest(self, last_end: int, count: int) -> list[V]:
        """The values of the (up to) `count` latest entries that ended by `last_end`, oldest first.

        Older entries are discarded: a later submission never needs them.
        """
        hi = bisect_right(self.ends, last_end, self.start)
        first = hi - count
        if first < self.start:
            if self.discarded_through is not None:
                raise self._discarded_error(last_end)
            return self.values[self.start : hi]
        result = self.values[first:hi]
        if first > self.start:
            self.discard_before(first)
        return result

    def discard_before(self, index: int) -> None:
        """Discard the entries before position `index`; drop them once they are many."""
        self.discarded_through = self.ends[index - 1]
        self.start = index
        if index >= _COMPACT_AT and 2 * index >= len(self.ends):
            del self.ends[:index]
            del self.values[:index]
            self.start = 0
            self._compacted(index)

    def _compacted(self, count: int) -> None:
        """The first `count` entries were dropped: every position moved down by `count`."""

    def _discarded_error(self, submit: int) -> HistoryDiscardedError:
        return HistoryDiscardedError(
            f"a job submitted at {submit} needs history that ended at or before {self.discarded_through}, "
            "discarded after a later submission was predicted; predict jobs in submission order"
        )


class WindowedSeries(EndSeries[V]):
    """An `EndSeries` with a window [lo, hi) over it whose contents are mirrored in an aggregate.

    Invariant: `aggregate` holds exactly `values[lo:hi]`. Moving the window
    costs O(log n) per job that enters or leaves it, so a query never rescans
    history.
    """

    __slots__ = ("aggregate", "hi", "lo")

    def __init__(self, aggregate: WindowAggregate[V] | None = None) -> None:
        super().__init__()
        self.lo = 0
        self.hi = 0
        self.aggregate = aggregate

    def insert(self, end: int, value: V) -> int | None:
        position = super().insert(end, value)
        if position is None or position == len(self.ends) - 1:  # dropped, or appended after the window
            return position
        if position <= self.lo:
            self.lo += 1
            self.hi += 1
        elif position < self.hi:
            self.hi += 1
            if self.aggregate is not None:
                self.aggregate.add(value)
        return position

    def select(self, first_end: int | None, last_end: int) -> int:
        """Move the window to the entries that ended in [first_end, last_end]; return their count.

        `first_end` None means no lower bound. Entries that ended before
        `first_end` are discarded: no query of a later submission needs them.
        """
        lo, hi = self.span(first_end, last_end)
        aggregate = self.aggregate
        if aggregate is not None and (lo != self.lo or hi != self.hi):
            self._move_aggregate(aggregate, lo, hi)
        self.lo = lo
        self.hi = hi
        if lo > self.start:
            self.discard_before(lo)
        return self.hi - self.lo

    def _move_aggregate(self, aggregate: WindowAggregate[V], lo: int, hi: int) -> None:
        values = self.values
        old_lo, old_hi = self.lo, self.hi
        if hi <= old_lo or lo >= old_hi:  # disjoint: rebuild
            aggregate.clear()
            for value in values[lo:hi]:
                aggregate.add(value)
            return
        entering = values[lo:old_lo] + values[old_hi:hi]
        leaving = values[old_lo:lo] + values[hi:old_hi]
        for value in leaving:
            aggregate.remove(value)
        for value in entering:
            aggregate.add(value)

    def discard_before(self, index: int) -> None:
        if self.lo < index:  # keep the window inside what remains
            if self.aggregate is not None:
                for value in self.values[self.lo : min(self.hi, index)]:
                    self.aggregate.remove(value)
            self.lo = index
            self.hi = max(self.hi, index)
        super().discard_before(index)

    def _compacted(self, count: int) -> None:
        self.lo -= count
        self.hi -= count


class KeyedHistory(Generic[V]):
    """Every key's `WindowedSeries`, made on first sight: the store the history-based estimators share.

    `aggregate` makes the summary each key's window keeps (a sorted list for
    percentiles, running moments for mean + k sigma); None keeps no summary.
    """

    __slots__ = ("_aggregate", "_key", "_series")

    def __init__(
        self, key: Callable[[JobRequest], Hashable], aggregate: Callable[[], WindowAggregate[V]] | None = None
    ) -> None:
        self._key = key
        self._aggregate = aggregate
        self._series: dict[Hashable, WindowedSeries[V]] = {}

    def clear(self) -> None:
        self._series = {}

    def add(self, job: FinishedJob, value: V) -> None:
        """Record `value` for a finished job under its key."""
        key = self._key(job.request)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = WindowedSeries(None if self._aggregate is None else self._aggregate())
        series.insert(job.end, value)

    def series(self, job: JobRequest) -> WindowedSeries[V] | None:
        """The history of `job`'s key, if any."""
        return self._series.get(self._key(job))

    def window(self, job: JobRequest, window: int | None) -> tuple[int, WindowAggregate[V] | None]:
        """How many of the key's jobs ended in [submit - window, submit], and their aggregate."""
        series = self._series.get(self._key(job))
        if series is None:
            return 0, None
        count = series.select(None if window is None else job.submit - window, job.submit)
        return count, series.aggregate
