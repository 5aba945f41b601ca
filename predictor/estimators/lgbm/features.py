"""Submit-time features of a job, from its request and the history of finished jobs.

One incremental implementation serves the estimator in simulation, the offline
replay and training: `FeatureHistory.observe` learns finished jobs in end order,
and `FeatureHistory.row(job)` describes a job from its request and from the
jobs that ended at or before its submission only. Because every history query
is "as of" the submission time (a binary search on end times), the history part
of a row is the same whether it is computed when the job is submitted or later,
when it finishes and becomes a training example.

`FeatureHistory.ratio_counts(job)` counts, per bin of R, the jobs of the same
user and request that ended in the window before the submission: the evidence
a key's own history gives about the job, which the lgbm estimator weighs
against its model's prediction.

`FeatureHistory.register(job)` records a submission: until the job is observed
finished it counts as in flight (queued or running) in the rows of later jobs.
This is what a scheduler knows, and it tempers a bias of finished-job history:
in a burst, the jobs that have finished are the short ones, while the long ones
are still running. It reveals no runtime: a job in flight at s stays in flight
at s whatever its runtime turns out to be.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Sequence
from math import log, log1p, sqrt
from operator import attrgetter
from typing import TypeVar

from kernel.durations import SECONDS_PER_DAY
from kernel.jobs import FinishedJob, JobRequest
from predictor.history import EndSeries, interpolated_percentile

#: History keys: which request fields identify "similar" jobs. (Group, user+group and group-level keys were
#: measured and added nothing; see docs/lgbm.md.)
KEYS: dict[str, tuple[str, ...]] = {
    "user": ("user",),
    "user_req": ("user", "t_req"),
    "user_procs_req": ("user", "procs", "t_req"),
}
#: The key of a user's jobs of the same application (`application=true`: SWF field 14, a site log's job name),
#: after the others in a row; a job whose application is unknown (negative) has no history under it.
APPLICATION_KEY = "user_app"
APPLICATION_FIELDS = ("user", "executable")


def keys(application: bool = False) -> dict[str, tuple[str, ...]]:
    """The history keys a row describes a job by, in row order."""
    return {**KEYS, APPLICATION_KEY: APPLICATION_FIELDS} if application else KEYS


#: The span of finished-job history the windowed statistics and the R class counts look back on.
HISTORY_WINDOW = 30 * SECONDS_PER_DAY

#: The key whose jobs `FeatureHistory.ratio_counts` counts per bin of R.
COUNTED_KEY = "user_req"

#: Statistics of one key's recent jobs, in row order.
KEY_STATS = (
    "count",
    "last_logrt",
    "last_ratio",
    "age",
    "ratio_q50",
    "ratio_q85",
    "ratio_max",
    "logrt_mean",
    "logrt_std",
    "logrt_max",
)

#: Jobs in flight (registered, not yet finished): the user's count, the user+request key's count,
#: and how long ago the key's oldest one was submitted, as a fraction of the request (capped at 1).
INFLIGHT_FEATURES = ("user_inflight", "user_req_inflight", "user_req_inflight_age")

#: The request's own features. The queue is the raw SWF number (trees split it like a category);
#: raw user and group ids carry no order and only let the model memorise, so they enter through
#: the history keys instead.
REQUEST_FEATURES = ("log_t_req", "log_procs", "hour", "weekday", "queue")
#: The memory a job asks for, last in a row when the estimator learns from it (`memory=true`): a site log carries
#: it (sacct's ReqTRES, SWF field 10), an archive trace mostly does not (docs/lgbm.md measures what it buys).
MEMORY_FEATURE = "log_memory"


def feature_names(memory: bool = False, application: bool = False) -> tuple[str, ...]:
    """Column names of `FeatureHistory.row`, in order (with the memory asked for last, if `memory`)."""
    history = tuple(f"{key}_{stat}" for key in keys(application) for stat in KEY_STATS)
    names = REQUEST_FEATURES + INFLIGHT_FEATURES + history
    return (*names, MEMORY_FEATURE) if memory else names


def feature_encodings(memory: bool = False, application: bool = False) -> list[dict[str, str]]:
    """Every feature with how it is computed, in column order (for a model manifest)."""
    own = {
        "log_t_req": "natural log of the requested time in seconds",
        "log_procs": "natural log of the job size (processors)",
        "hour": "hour of day of the submission, (submit mod 86400) / 3600, trace clock",
        "weekday": "day of week of the submission, (submit div 86400) mod 7, trace clock",
        "queue": "SWF queue number as a number; negative (unknown) is missing",
        "user_inflight": "the user's jobs submitted and not yet finished",
        "user_req_inflight": "the user's jobs with the same request submitted and not yet finished",
        "user_req_inflight_age": "seconds since the oldest of those was submitted, over the request, "
        "capped at 1; missing when there is none",
    }
    stats = {
        "count": "jobs that ended in the 30 days before submission",
        "last_logrt": "log(1 + runtime) of the latest job that ended by submission",
        "last_ratio": "R of that latest job",
        "age": "log(1 + seconds since that latest job ended)",
        "ratio_q50": "median R of the latest (up to 32) jobs in the 30 days",
        "ratio_q85": "85th percentile R of those jobs",
        "ratio_max": "largest R of those jobs",
        "logrt_mean": "mean log(1 + runtime) of those jobs",
        "logrt_std": "population standard deviation of log(1 + runtime) of those jobs",
        "logrt_max": "largest log(1 + runtime) of those jobs",
    }
    encodings = [{"name": name, "encoding": own[name]} for name in REQUEST_FEATURES + INFLIGHT_FEATURES]
    for key, fields in keys(application).items():
        encodings += [
            {"name": f"{key}_{stat}", "encoding": f"key {'+'.join(fields)}: {stats[stat]}; missing without history"}
            for stat in KEY_STATS
        ]
    if memory:
        encodings.append(
            {
                "name": MEMORY_FEATURE,
                "encoding": "natural log of the memory asked for in all, MB; missing when the job asked for none",
            }
        )
    return encodings


Key = TypeVar("Key", bound=Hashable)


def _land_in(flights: dict[Key, dict[int, int]], key: Key, job_id: int) -> None:
    """A job in flight under `key` has finished."""
    flying = flights.get(key)
    if flying is not None and flying.pop(job_id, None) is not None and not flying:
        del flights[key]


def _forget_submitted_before(flights: dict[Key, dict[int, int]], before: int) -> None:
    """Jobs submitted that long ago and never reported finished are forgotten."""
    for key in list(flights):
        flying = flights[key]
        for job_id in [job_id for job_id, submit in flying.items() if submit < before]:
            del flying[job_id]
        if not flying:
            del flights[key]


class _KeySeries(EndSeries[tuple[float, float]]):
    """One key's finished jobs in end order, each kept as (log(1 + runtime), R).

    With `bins`, `counts[i]` also counts the entries before position i per bin
    of R (prefix sums over the physical list, one more than the entries: the
    counts of any span are one subtraction). The statistics of the latest
    window asked for are kept (`window`, `stats`): the jobs of one user in a
    burst, or of one batch, ask for the same window over and over.
    """

    __slots__ = ("counts", "stats", "window")

    def __init__(self, bins: int | None = None) -> None:
        super().__init__()
        self.window: tuple[int, int] = (0, 0)
        self.stats: list[float] = []
        self.counts: list[list[int]] | None = [[0] * bins] if bins else None

    def add(self, end: int, logrt: float, ratio: float, bin_index: int) -> None:
        """Add a finished job; `bin_index` is its R bin (ignored without `bins`)."""
        position = self.insert(end, (logrt, ratio))
        if position is None:
            return
        counts = self.counts
        if position < len(self.ends) - 1:  # out of end order (a remote client): later positions moved
            self.window = (0, 0)
            if counts is not None:
                counts.insert(position + 1, list(counts[position]))
                for later in counts[position + 1 :]:
                    later[bin_index] += 1
        elif counts is not None:
            latest = list(counts[-1])
            latest[bin_index] += 1
            counts.append(latest)

    def _compacted(self, count: int) -> None:
        if self.counts is not None:
            del self.counts[:count]
        self.window = (0, 0)


class FeatureHistory:
    """Finished-job history kept per key, and the feature row of a submitted job.

    `window` (seconds) bounds the jobs the windowed statistics use; `recent`
    caps them to the latest jobs so that a row costs the same for a heavy user.
    `ratio_edges` are the upper edges of the R bins `ratio_counts` counts in.
    History older than `window + horizon` before the latest end is dropped:
    `horizon` is how long after its submission a job may still be turned into a
    training row with exact features.
    """

    #: Whether a row ends with the memory asked for, and describes the job by its application's history too
    #: (class defaults: a history restored from an older snapshot has no such attributes of its own, and did not
    #: learn from either).
    memory = False
    application = False

    def __init__(
        self,
        window: int = HISTORY_WINDOW,
        recent: int = 32,
        horizon: int = HISTORY_WINDOW,
        ratio_edges: Sequence[float] = (),
        memory: bool = False,
        application: bool = False,
    ) -> None:
        self.window = window
        self.memory = memory
        self.application = application
        self.recent = recent
        self.horizon = horizon
        self.ratio_edges = tuple(ratio_edges)
        self._getters = {name: attrgetter(*fields) for name, fields in keys(application).items()}
        self._series: dict[str, dict[Hashable, _KeySeries]] = {name: {} for name in self._getters}
        self._lookups = [(self._series[name], getter) for name, getter in self._getters.items()]
        #: In flight by user and by (user, t_req): job id -> submit time, in registration order.
        self._user_inflight: dict[int, dict[int, int]] = {}
        self._key_inflight: dict[tuple[int, int], dict[int, int]] = {}
        self._latest_end = 0
        self._trimmed_at = 0

    def reset(self) -> None:
        for table in self._series.values():
            table.clear()
        self._user_inflight.clear()
        self._key_inflight.clear()
        self._latest_end = 0
        self._trimmed_at = 0

    @property
    def latest_end(self) -> int:
        """The latest end of the jobs observed so far (0 before the first)."""
        return self._latest_end

    def register(self, job: JobRequest) -> None:
        """Count `job` as in flight from its submission until it is observed finished."""
        self._user_inflight.setdefault(job.user, {})[job.job_id] = job.submit
        self._key_inflight.setdefault((job.user, job.t_req), {})[job.job_id] = job.submit

    def _land(self, job: JobRequest) -> None:
        _land_in(self._user_inflight, job.user, job.job_id)
        _land_in(self._key_inflight, (job.user, job.t_req), job.job_id)

    def observe(self, job: FinishedJob) -> None:
        request = job.request
        self._land(request)
        logrt = log1p(job.runtime)
        ratio = job.ratio
        bin_index = bisect_right(self.ratio_edges, ratio)
        for name, getter in self._getters.items():
            if name == APPLICATION_KEY and request.executable < 0:
                continue  # no history under an unknown application: its rows find none
            table = self._series[name]
            key = getter(request)
            series = table.get(key)
            if series is None:
                counted = name == COUNTED_KEY and bool(self.ratio_edges)
                series = table[key] = _KeySeries(len(self.ratio_edges) + 1 if counted else None)
            series.add(job.end, logrt, ratio, bin_index)
        if job.end > self._latest_end:
            self._latest_end = job.end
            if job.end - self._trimmed_at > self.window:
                self._trim(job.end - self.window - self.horizon)

    def _trim(self, before: int) -> None:
        """Drop history no query can still need, so memory stays bounded in a long-running service."""
        for table in self._series.values():
            empty = []
            for key, series in table.items():
                cut = bisect_left(series.ends, before, series.start)
                if cut > series.start:
                    series.discard_before(cut)
                if not len(series):
                    empty.append(key)
            for key in empty:
                del table[key]
        _forget_submitted_before(self._user_inflight, before)
        _forget_submitted_before(self._key_inflight, before)
        self._trimmed_at = self._latest_end

    def row(self, job: JobRequest) -> list[float]:
        """The feature row of `job`: its request, the jobs in flight, and history that ended by `job.submit`."""
        submit = job.submit
        nan = float("nan")
        values: list[float] = [
            log(job.t_req),
            log(job.procs),
            (submit % SECONDS_PER_DAY) / 3600.0,
            float((submit // SECONDS_PER_DAY) % 7),
        ]
        values.append(float(job.queue) if job.queue >= 0 else nan)
        user_flying = self._user_inflight.get(job.user)
        key_flying = self._key_inflight.get((job.user, job.t_req))
        values.append(float(len(user_flying)) if user_flying else 0.0)
        if key_flying:
            oldest = next(iter(key_flying.values()))  # registration order is submission order
            values += [float(len(key_flying)), min(1.0, max(0, submit - oldest) / job.t_req)]
        else:
            values += [0.0, nan]
        first = submit - self.window
        for table, getter in self._lookups:
            series = table.get(getter(job))
            if series is None:
                values += [0.0] + [nan] * (len(KEY_STATS) - 1)
                continue
            values += self._key_stats(series, first, submit)
        if self.memory:
            values.append(log(job.memory_mb) if job.memory_mb > 0 else nan)
        return values

    def ratio_counts(self, job: JobRequest) -> list[int]:
        """Per R bin, the jobs of `job`'s user and request that ended in the window before its submission."""
        series = self._series[COUNTED_KEY].get(self._getters[COUNTED_KEY](job))
        if series is None or series.counts is None:
            return [0] * (len(self.ratio_edges) + 1)
        lo, hi = series.span(job.submit - self.window, job.submit, complete=False)
        return [after - before for after, before in zip(series.counts[hi], series.counts[lo], strict=True)]

    def _key_stats(self, series: _KeySeries, first: int, submit: int) -> list[float]:
        """A row's statistics of one key: from the history that remains (a training row of a job that
        waited and ran longer than `horizon` is computed from part of its window)."""
        nan = float("nan")
        lo, hi = series.span(first, submit, complete=False)
        if hi == series.start:
            return [0.0] + [nan] * (len(KEY_STATS) - 1)
        count = hi - lo
        last = hi - 1
        last_logrt, last_ratio = series.values[last]
        head = [float(count), last_logrt, last_ratio, log1p(submit - series.ends[last])]
        if count == 0:
            return head + [nan] * (len(KEY_STATS) - len(head))
        window = (max(lo, hi - self.recent), hi)
        if series.window != window:
            recent = series.values[window[0] : hi]
            ratios = sorted(ratio for _, ratio in recent)
            logrts = [logrt for logrt, _ in recent]
            size = len(logrts)
            mean = sum(logrts) / size
            variance = sum((x - mean) ** 2 for x in logrts) / size
            series.window = window
            series.stats = [
                interpolated_percentile(ratios, 50),
                interpolated_percentile(ratios, 85),
                ratios[-1],
                mean,
                sqrt(variance),
                max(logrts),
            ]
        return head + series.stats
