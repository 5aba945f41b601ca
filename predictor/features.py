"""Submit-time features of a job, from its request and the history of finished jobs.

One incremental implementation serves the estimator in simulation, the offline
replay and training: `FeatureHistory.observe` learns finished jobs in end order,
and `FeatureHistory.row(job)` describes a job from its request and from the
jobs that ended at or before its submission only. Because every history query
is "as of" the submission time (a binary search on end times), the row of a
job is the same whether it is computed when the job is submitted or later,
when it finishes and becomes a training example.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable
from math import log, log1p, sqrt

from predictor.jobs import FinishedJob, JobRequest

SECONDS_PER_DAY = 86_400

#: History keys: which request fields identify "similar" jobs. (Group, user+group, user+executable
#: and group-level keys were measured and added nothing; see docs/lgbm.md.)
KEYS: dict[str, tuple[str, ...]] = {
    "user": ("user",),
    "user_req": ("user", "t_req"),
    "user_procs_req": ("user", "procs", "t_req"),
}

#: Statistics of one key's recent jobs, in row order.
KEY_STATS = ("count", "last_logrt", "last_ratio", "age", "ratio_q50", "ratio_q85", "ratio_max",
             "logrt_mean", "logrt_std", "logrt_max")

#: The request's own features. The queue is the raw SWF number (trees split it like a category);
#: raw user and group ids carry no order and only let the model memorise, so they enter through
#: the history keys instead.
REQUEST_FEATURES = ("log_t_req", "log_procs", "hour", "weekday", "queue")


def feature_names() -> tuple[str, ...]:
    """Column names of `FeatureHistory.row`, in order."""
    return REQUEST_FEATURES + tuple(f"{key}_{stat}" for key in KEYS for stat in KEY_STATS)


def _key_getter(fields: tuple[str, ...]) -> Callable[[JobRequest], Hashable]:
    if len(fields) == 1:
        name = fields[0]
        return lambda job: getattr(job, name)
    return lambda job: tuple(getattr(job, name) for name in fields)


def _percentile(sorted_values: list[float], q: float) -> float:
    """numpy's default (linear) percentile of already sorted values."""
    virtual = (len(sorted_values) - 1) * q
    below = int(virtual)
    if below >= len(sorted_values) - 1:
        return sorted_values[-1]
    return sorted_values[below] + (sorted_values[below + 1] - sorted_values[below]) * (virtual - below)


class _EndSeries:
    """One key's finished jobs in end order: end times, log runtimes, R values."""

    __slots__ = ("ends", "logrts", "ratios")

    def __init__(self) -> None:
        self.ends: list[int] = []
        self.logrts: list[float] = []
        self.ratios: list[float] = []

    def append(self, end: int, logrt: float, ratio: float) -> None:
        ends = self.ends
        if ends and end < ends[-1]:  # out of end order (a remote client): keep sorted
            position = bisect_right(ends, end)
            ends.insert(position, end)
            self.logrts.insert(position, logrt)
            self.ratios.insert(position, ratio)
            return
        ends.append(end)
        self.logrts.append(logrt)
        self.ratios.append(ratio)

    def drop_before(self, end: int) -> None:
        cut = bisect_left(self.ends, end)
        if cut:
            del self.ends[:cut], self.logrts[:cut], self.ratios[:cut]


class FeatureHistory:
    """Finished-job history kept per key, and the feature row of a submitted job.

    `window` (seconds) bounds the jobs the windowed statistics use; `recent`
    caps them to the latest jobs so that a row costs the same for a heavy user.
    History older than `window + horizon` before the latest end is dropped:
    `horizon` is how long after its submission a job may still be turned into a
    training row with exact features.
    """

    def __init__(self, window: int = 30 * SECONDS_PER_DAY, recent: int = 32,
                 horizon: int = 30 * SECONDS_PER_DAY) -> None:
        self.window = window
        self.recent = recent
        self.horizon = horizon
        self._getters = {name: _key_getter(fields) for name, fields in KEYS.items()}
        self._series: dict[str, dict[Hashable, _EndSeries]] = {name: {} for name in KEYS}
        self._latest_end = 0
        self._trimmed_at = 0

    def reset(self) -> None:
        for table in self._series.values():
            table.clear()
        self._latest_end = 0
        self._trimmed_at = 0

    def observe(self, job: FinishedJob) -> None:
        request = job.request
        logrt = log1p(job.runtime)
        ratio = job.ratio
        for name, getter in self._getters.items():
            table = self._series[name]
            key = getter(request)
            series = table.get(key)
            if series is None:
                series = table[key] = _EndSeries()
            series.append(job.end, logrt, ratio)
        if job.end > self._latest_end:
            self._latest_end = job.end
            if job.end - self._trimmed_at > self.window:
                self._trim(job.end - self.window - self.horizon)

    def _trim(self, before: int) -> None:
        """Drop history no query can still need, so memory stays bounded in a long-running service."""
        for table in self._series.values():
            empty = []
            for key, series in table.items():
                series.drop_before(before)
                if not series.ends:
                    empty.append(key)
            for key in empty:
                del table[key]
        self._trimmed_at = self._latest_end

    def row(self, job: JobRequest) -> list[float]:
        """The feature row of `job`, from history that ended at or before `job.submit`."""
        submit = job.submit
        nan = float("nan")
        values: list[float] = [
            log(job.t_req), log(job.procs), (submit % SECONDS_PER_DAY) / 3600.0,
            float((submit // SECONDS_PER_DAY) % 7),
        ]
        values.append(float(job.queue) if job.queue >= 0 else nan)
        first = submit - self.window
        for name, getter in self._getters.items():
            series = self._series[name].get(getter(job))
            if series is None:
                values += [0.0] + [nan] * (len(KEY_STATS) - 1)
                continue
            values += self._key_stats(series, first, submit)
        return values

    def _key_stats(self, series: _EndSeries, first: int, submit: int) -> list[float]:
        nan = float("nan")
        ends = series.ends
        hi = bisect_right(ends, submit)
        if hi == 0:
            return [0.0] + [nan] * (len(KEY_STATS) - 1)
        lo = bisect_left(ends, first, 0, hi)
        count = hi - lo
        last = hi - 1
        head = [float(count), series.logrts[last], series.ratios[last], log1p(submit - ends[last])]
        if count == 0:
            return head + [nan] * (len(KEY_STATS) - len(head))
        lo = max(lo, hi - self.recent)
        ratios = sorted(series.ratios[lo:hi])
        logrts = series.logrts[lo:hi]
        size = len(logrts)
        mean = sum(logrts) / size
        variance = sum((x - mean) ** 2 for x in logrts) / size
        return head + [_percentile(ratios, 0.5), _percentile(ratios, 0.85), ratios[-1],
                       mean, sqrt(variance), max(logrts)]
