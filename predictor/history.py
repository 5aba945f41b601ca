"""Per-key history of finished jobs, ordered by end time, for the history-based estimators.

Tang's percentile adjuster, mean + k sigma and Tsafrir's last-two all answer
from "the same key's jobs that ended in [s - window, s]" (last-two: "the latest
jobs that ended by s"). `EndSeries` keeps one key's jobs sorted by end time and
a window [lo, hi) over them whose contents are mirrored in an aggregate (a
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
from collections.abc import Callable, Collection, Hashable
from operator import attrgetter
from typing import Generic, Protocol, TypeVar

from predictor.jobs import FinishedJob, JobRequest

SECONDS_PER_DAY = 86_400
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


class HistoryDiscardedError(ValueError):
    """A query needs history that was discarded after a later query was answered."""


class WindowAggregate(Protocol[V]):
    """A summary of the values inside a window, updated one value at a time."""

    def add(self, value: V) -> None: ...

    def remove(self, value: V) -> None: ...

    def clear(self) -> None: ...


def parse_window(text: str, allowed: Collection[str] | None = None) -> int | None:
    """Seconds in a window SPEC such as `30d`; None for `all` (no lower bound).

    `allowed`, when given, restricts the accepted spellings (the percentile
    adjuster only knows the paper's windows).
    """
    if allowed is not None and text not in allowed:
        raise ValueError(f"window must be one of {', '.join(allowed)}; got {text!r}")
    if text == "all":
        return None
    days = text[:-1]
    if not text.endswith("d") or not days.isdigit() or int(days) <= 0:
        raise ValueError(f"window must be a whole number of days such as 7d or 30d, or all; got {text!r}")
    return int(days) * SECONDS_PER_DAY


def key_function(key: str, allowed: Collection[str]) -> Callable[[JobRequest], Hashable]:
    """The function that maps a job to its history key, for a key SPEC such as `user+group`."""
    if key not in allowed:
        raise ValueError(f"key must be one of {', '.join(allowed)}; got {key!r}")
    return attrgetter(*(KEY_FIELDS[part] for part in key.split("+")))


class EndSeries(Generic[V]):
    """One key's finished jobs sorted by end time, with a window mirrored by an aggregate.

    Invariant: `aggregate` holds exactly `values[lo:hi]`; entries before
    `start` are discarded, and all of them ended at or before
    `discarded_through`, before every entry that remains.
    """

    __slots__ = ("aggregate", "discarded_through", "ends", "hi", "lo", "start", "values")

    def __init__(self, aggregate: WindowAggregate[V] | None = None) -> None:
        self.ends: list[int] = []
        self.values: list[V] = []
        self.start = 0
        self.lo = 0
        self.hi = 0
        self.discarded_through: int | None = None
        self.aggregate = aggregate

    def __len__(self) -> int:
        """Entries kept (not discarded)."""
        return len(self.ends) - self.start

    def insert(self, end: int, value: V) -> None:
        """Add a finished job; in end order this is an append, otherwise a sorted insert."""
        if self.discarded_through is not None and end <= self.discarded_through:
            return  # every query that could include it is rejected anyway
        ends = self.ends
        if not ends or end >= ends[-1]:
            ends.append(end)
            self.values.append(value)
            return
        position = bisect_right(ends, end, self.start)
        ends.insert(position, end)
        self.values.insert(position, value)
        if position <= self.lo:
            self.lo += 1
            self.hi += 1
        elif position < self.hi:
            self.hi += 1
            if self.aggregate is not None:
                self.aggregate.add(value)

    def select(self, first_end: int | None, last_end: int) -> int:
        """Move the window to the entries that ended in [first_end, last_end]; return their count.

        `first_end` None means no lower bound. Entries that ended before
        `first_end` are discarded: no query of a later submission needs them.
        """
        ends = self.ends
        if first_end is None:
            if self.discarded_through is not None:
                raise self._discarded_error(last_end)
            lo = self.start
        else:
            if self.discarded_through is not None and first_end <= self.discarded_through:
                raise self._discarded_error(last_end)
            lo = bisect_left(ends, first_end, self.start)
        hi = bisect_right(ends, last_end, lo)
        aggregate = self.aggregate
        if aggregate is not None and (lo != self.lo or hi != self.hi):
            self._move_aggregate(aggregate, lo, hi)
        self.lo = lo
        self.hi = hi
        if lo > self.start:
            self._discard_before(lo)
        return self.hi - self.lo

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
            self._discard_before(first)
        return result

    def _move_aggregate(self, aggregate: WindowAggregate[V], lo: int, hi: int) -> None:
        values = self.values
        old_lo, old_hi = self.lo, self.hi
        if hi <= old_lo or lo >= old_hi:  # disjoint: rebuild
            aggregate.clear()
            for value in values[lo:hi]:
                aggregate.add(value)
            return
        if lo > old_lo:
            for value in values[old_lo:lo]:
                aggregate.remove(value)
        else:
            for value in values[lo:old_lo]:
                aggregate.add(value)
        if hi > old_hi:
            for value in values[old_hi:hi]:
                aggregate.add(value)
        else:
            for value in values[hi:old_hi]:
                aggregate.remove(value)

    def _discard_before(self, index: int) -> None:
        if self.lo < index:  # keep the window inside what remains
            if self.aggregate is not None:
                for value in self.values[self.lo : min(self.hi, index)]:
                    self.aggregate.remove(value)
            self.lo = index
            self.hi = max(self.hi, index)
        self.discarded_through = self.ends[index - 1]
        self.start = index
        if index >= _COMPACT_AT and 2 * index >= len(self.ends):
            del self.ends[:index]
            del self.values[:index]
            self.lo -= index
            self.hi -= index
            self.start = 0

    def _discarded_error(self, submit: int) -> HistoryDiscardedError:
        return HistoryDiscardedError(
            f"a job submitted at {submit} needs history that ended at or before {self.discarded_through}, "
            "discarded after a later submission was predicted; predict jobs in submission order"
        )


class KeyedHistory(Generic[V]):
    """Every key's `EndSeries`, made on first sight: the store the history-based estimators share.

    `aggregate` makes the summary each key's window keeps (a sorted list for
    percentiles, running moments for mean + k sigma); None keeps no summary.
    """

    __slots__ = ("_aggregate", "_key", "_series")

    def __init__(
        self, key: Callable[[JobRequest], Hashable], aggregate: Callable[[], WindowAggregate[V]] | None = None
    ) -> None:
        self._key = key
        self._aggregate = aggregate
        self._series: dict[Hashable, EndSeries[V]] = {}

    def clear(self) -> None:
        self._series = {}

    def add(self, job: FinishedJob, value: V) -> None:
        """Record `value` for a finished job under its key."""
        key = self._key(job.request)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = EndSeries(None if self._aggregate is None else self._aggregate())
        series.insert(job.end, value)

    def series(self, job: JobRequest) -> EndSeries[V] | None:
        """The history of `job`'s key, if any."""
        return self._series.get(self._key(job))

    def window(self, job: JobRequest, window: int | None) -> tuple[int, WindowAggregate[V] | None]:
        """How many of the key's jobs ended in [submit - window, submit], and their aggregate."""
        series = self._series.get(self._key(job))
        if series is None:
            return 0, None
        count = series.select(None if window is None else job.submit - window, job.submit)
        return count, series.aggregate
