"""What the readers of a site's own job logs (Slurm sacct, PBS accounting) share.

A site log is turned into SWF records, so that every command downstream
(predict-eval, simulate, train, evaluate) works on it unchanged:

- `SiteLogOptions`: what the log itself cannot say (its time zone, sizes in
  cores or nodes, the request of jobs without a time limit).
- `RowChecks`: vectorised validation with the SWF reader's rules: strict mode
  raises a `TraceError` naming the file, line and field of the earliest bad
  line; lenient mode drops bad lines and counts them by reason.
- `SiteJobs` and `site_trace`: the jobs a reader found, as columns, turned
  into a `Trace` with SWF records, a header (UnixStartTime 0, TimeZoneString,
  MaxProcs, notes) and names mapped to stable integer ids.

A site log keeps its absolute times: submit times are Unix seconds (the SWF
header's UnixStartTime is 0), so that the jobs a site's history holds and the
jobs its scheduler submits now share one clock (a namespace seeded from the
log accepts live submissions; a model trained on it reads the hour of day and
the weekday of live jobs as it read them in training). Every replay is
translation-invariant: the simulator, the metrics, load scaling and replicates
count from the first submission, and months from UnixStartTime.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import numpy as np
import pandas as pd

from kernel.errors import TraceError, UsageError
from simulator.workloads.trace import FLOAT_COLUMNS, GUESSED_MARK, RECORD_COLUMNS, SWFHeader, Trace

SizeUnit = Literal["cores", "nodes"]
SIZE_UNITS: tuple[SizeUnit, ...] = ("cores", "nodes")
#: SWF status codes (field 11).
STATUS_FAILED, STATUS_COMPLETED, STATUS_CANCELLED = 0, 1, 5
#: The SWF fields a site log fills from names; `Trace.names` maps their ids back.
NAMED_FIELDS = ("user", "group", "executable", "queue", "partition", "qos")
_DURATION = re.compile(r"(?:(\d+)-)?(?:(?:(\d+):)?(\d+):)?(\d+)")


@dataclass(frozen=True)
class SiteLogOptions:
    """How to read what a site log leaves open.

    `timezone`: the zone of naive local times (sacct prints the local time of
    the machine it ran on); an IANA name such as "Europe/Berlin". `size`: job
    size in cores (default) or nodes. `default_request`: the t_req, in
    seconds, of jobs whose limit is UNLIMITED or the partition's; None keeps
    them unknown, so the replay rules skip and count them as "no request".
    """

    timezone: str = "UTC"
    size: SizeUnit = "cores"
    default_request: int | None = None

    def __post_init__(self) -> None:
        if self.size not in SIZE_UNITS:
            raise UsageError(f"--size {self.size!r}: must be one of {', '.join(SIZE_UNITS)}")
        if self.default_request is not None and self.default_request <= 0:
            raise UsageError(f"--default-request {self.default_request}: must be a positive number of seconds")
        try:
            pd.Timestamp(0).tz_localize(self.timezone)
        except Exception:  # pandas raises a different error per time-zone library; the message is the point
            raise UsageError(f"--timezone {self.timezone!r}: not a time zone (e.g. UTC, Europe/Berlin)") from None


def line_spans(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Byte offsets (start, end) of every line, the end before its newline (and a '\\r' before that)."""
    buffer = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buffer == ord("\n"))
    starts = np.concatenate([[0], newlines + 1]).astype(np.int64)
    ends = np.concatenate([newlines, [len(data)]]).astype(np.int64)
    if data.endswith(b"\n"):
        starts, ends = starts[:-1], ends[:-1]
    carriage = ends > starts
    carriage[carriage] = buffer[ends[carriage] - 1] == ord("\r")
    return starts, ends - carriage


def per_value(values: pd.Series, convert: Callable[[pd.Series], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """`convert` applied once per distinct value, spread back to every row.

    Logs repeat their values (states, limits, even timestamps), so this is
    much faster than converting every row.
    """
    codes, uniques = pd.factorize(values)
    return tuple(np.asarray(result)[codes] for result in convert(pd.Series(uniques, dtype=object)))


def parse_duration(text: str) -> int | None:
    """Seconds in `[D-][HH:]MM:SS`, `HH:MM:SS` with hours past 24, or plain seconds; None if not a duration."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        return None
    days, hours, minutes, seconds = (int(part) if part else 0 for part in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def requests_with_default(
    requested: np.ndarray, missing: np.ndarray, why: str, options: SiteLogOptions, notes: list[str]
) -> np.ndarray:
    """`requested`, with `--default-request` (or -1: skipped as no request) where `missing`; the note says which.

    A job without a limit of its own is common in site logs; the user decides
    what it stands for, and the trace's notes say how many were affected.
    """
    if missing.any():
        what = f"{int(missing.sum())} jobs {why}"
        if options.default_request is None:
            notes.append(f"{what}: request unknown (skipped as no request; see --default-request)")
        else:
            notes.append(f"{what}: request set to --default-request {options.default_request} s")
    default = -1 if options.default_request is None else options.default_request
    return np.where(missing, default, requested).astype(np.int64)


def arrival_times(submit: np.ndarray, eligible: np.ndarray, start: np.ndarray) -> np.ndarray:
    """When each job could first have started: eligible (after a `--begin` time or a dependency) when that is
    known and not before the submission, else the submission; never after the start."""
    arrival: np.ndarray = np.minimum(np.where(eligible >= submit, eligible, submit), start)
    return arrival


def swf_status(completed: np.ndarray, cancelled: np.ndarray) -> np.ndarray:
    """SWF's status (field 11) of each job: cancelled (5) first, then completed (1), else failed (0)."""
    return np.select([cancelled, completed], [STATUS_CANCELLED, STATUS_COMPLETED], STATUS_FAILED).astype(np.int64)


class RowChecks:
    """Validation of a log's rows, each row known by its 1-based line number.

    Each `check` marks the rows it finds wrong (a row is counted once, under
    its first failure). `keep` then raises on the earliest bad line (strict)
    or returns the rows to keep, having counted the others by reason in
    `malformed` (lenient).
    """

    def __init__(self, source: str, lines: np.ndarray, malformed: dict[str, int] | None) -> None:
        self.source = source
        self.lines = lines
        self.malformed = malformed
        self.bad = np.zeros(len(lines), dtype=bool)
        self._first: tuple[int, str] | None = None

    def check(
        self,
        ok: np.ndarray,
        field_name: str | np.ndarray,
        reason: str,
        values: np.ndarray | pd.Series | None,
        problem: str | np.ndarray,
    ) -> None:
        """Flag the rows where `ok` is False: "field F: 'value' problem" (F, problem: one, or one per row)."""
        wrong = ~np.asarray(ok, dtype=bool) & ~self.bad
        if not wrong.any():
            return
        self.bad |= wrong
        if self.malformed is not None:
            self.malformed[reason] = self.malformed.get(reason, 0) + int(wrong.sum())
            return
        row = int(np.flatnonzero(wrong)[np.argmin(self.lines[wrong])])
        line = int(self.lines[row])
        if self._first is None or line < self._first[0]:
            name = field_name if isinstance(field_name, str) else field_name[row]
            said = problem if isinstance(problem, str) else problem[row]
            value = "" if values is None else f"{np.asarray(values, dtype=object)[row]!r} "
            self._first = (line, f"{self.source} line {line}, field {name}: {value}{said}")

    def keep(self) -> np.ndarray:
        """The rows that passed every check (strict mode: raise on the earliest line that did not)."""
        if self._first is not None:
            raise TraceError(self._first[1])
        return ~self.bad


def numbered_names(names: pd.Series) -> tuple[np.ndarray, dict[int, str]]:
    """Names as integer ids 1..n in sorted order (empty or missing: -1), and the id -> name map.

    Sorting makes the ids a function of the set of names alone, whatever the
    order of the log's lines.
    """
    text = names.astype(object).where(names.notna() & (names.astype(str) != ""))
    codes, uniques = pd.factorize(text, sort=True, use_na_sentinel=True)
    ids = np.where(codes >= 0, codes + 1, -1).astype(np.int64)
    return ids, {number + 1: str(name) for number, name in enumerate(uniques)}


def given_ids(ids: np.ndarray, names: pd.Series) -> dict[int, str]:
    """The id -> name map of a log that has both (e.g. sacct's UID and User)."""
    known = (ids >= 0) & names.notna().to_numpy() & (names.astype(str).to_numpy() != "")
    pairs = pd.DataFrame({"id": ids[known], "name": names.to_numpy()[known]}).drop_duplicates("id")
    return dict(zip(pairs["id"].tolist(), pairs["name"].astype(str).tolist(), strict=True))


@dataclass
class SiteJobs:
    """The jobs a site-log reader kept, one entry per job, times in Unix seconds (-1 = unknown).

    `names` holds, per SWF field in `NAMED_FIELDS`, either names (a Series,
    numbered by `numbered_names`) or ids with their names (as sacct's UID
    and User). `left_out` counts the jobs not kept, by reason; `notes` are
    said in the header.
    """

    job: np.ndarray
    arrival: np.ndarray
    start: np.ndarray
    end: np.ndarray
    run: np.ndarray
    req_time: np.ndarray
    alloc_procs: np.ndarray
    req_procs: np.ndarray
    status: np.ndarray
    names: Mapping[str, pd.Series | tuple[np.ndarray, pd.Series]]
    req_mem: np.ndarray | None = None
    #: What jobs asked beyond their size, by `JobRequest` field (`nodes`, `memory_mb`, `gpus`, `exclusive`;
    #: 0 where not said): the records carry them after the SWF fields, for the predictor.
    resources: dict[str, np.ndarray] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def peak_usage(start: np.ndarray, end: np.ndarray, size: np.ndarray) -> int:
    """The most processors in use at once: a lower bound of the machine's size, from the data.

    Ends sort before starts at the same second (as in the simulator), so a
    job that starts when another ends does not count both.
    """
    started = (start >= 0) & (end >= start) & (size > 0)
    if not started.any():
        return 0
    times = np.concatenate([end[started], start[started]])
    change = np.concatenate([-size[started], size[started]])
    order = np.lexsort((change, times))
    return int(np.cumsum(change[order]).max())


def site_trace(
    source: str,
    log_kind: str,
    jobs: SiteJobs,
    options: SiteLogOptions,
    malformed: dict[str, int] | None,
) -> Trace:
    """SWF records for `jobs` (submit times in Unix seconds: UnixStartTime 0), with a header, as a Trace."""
    order = np.lexsort((jobs.job, jobs.arrival))
    first = int(jobs.arrival.min()) if len(order) else 0
    arrival = jobs.arrival[order]
    start = jobs.start[order]
    columns: dict[str, np.ndarray] = {
        "job": jobs.job[order],
        "submit": arrival,
        "wait": np.where(start >= 0, start - arrival, -1),
        "run": jobs.run[order],
        "alloc_procs": jobs.alloc_procs[order],
        "req_procs": jobs.req_procs[order],
        "req_time": jobs.req_time[order],
        "status": jobs.status[order],
    }
    if jobs.req_mem is not None:
        columns["req_mem"] = jobs.req_mem[order]
    extra = {name: values[order] for name, values in jobs.resources.items()}
    names: dict[str, dict[int, str]] = {}
    for swf_field, named in jobs.names.items():
        if isinstance(named, tuple):
            ids, labels = named
            columns[swf_field] = ids[order]
            names[swf_field] = given_ids(ids, labels)
        else:
            ids, names[swf_field] = numbered_names(named.iloc[order].reset_index(drop=True))
            (columns if swf_field in RECORD_COLUMNS else extra)[swf_field] = ids
    count = len(order)
    records = pd.DataFrame(
        {name: columns[name] if name in columns else np.full(count, -1, dtype=np.int64) for name in RECORD_COLUMNS}
    )
    for name, values in extra.items():
        records[name] = values.astype(np.int64)
    for name in FLOAT_COLUMNS:
        records[name] = records[name].astype(np.float64)
    for name in RECORD_COLUMNS:
        if name not in FLOAT_COLUMNS:
            records[name] = records[name].astype(np.int64)
    sizes = np.where(records["alloc_procs"] > 0, records["alloc_procs"], records["req_procs"]).astype(np.int64)
    peak = peak_usage(start, jobs.end[order], sizes)
    header = SWFHeader.from_lines(_header_lines(source, log_kind, options, first, peak, jobs, malformed))
    return Trace.from_records(source, header, records, malformed, left_out=jobs.left_out, names=names)


def _header_lines(
    source: str,
    log_kind: str,
    options: SiteLogOptions,
    first: int,
    peak: int,
    jobs: SiteJobs,
    malformed: dict[str, int] | None,
) -> list[str]:
    left_out = ", ".join(f"{count} {reason}" for reason, count in sorted(jobs.left_out.items())) or "none"
    lines = [
        "; Version: 2.2",
        f"; Computer: {log_kind}",
        f"; Conversion: tsched read {source} ({log_kind}); sizes in {options.size}; "
        f"times as {options.timezone} local time",
        f"; Note: {len(jobs.job)} jobs kept; left out: {left_out}",
    ]
    if malformed:
        lines.append(
            "; Note: malformed lines skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(malformed.items()))
        )
    lines += [f"; Note: {note}" for note in jobs.notes]
    lines += [
        f"; Note: submit times are Unix seconds (UnixStartTime 0); the first job arrived "
        f"{datetime.fromtimestamp(first, tz=UTC).isoformat()}",
        "; UnixStartTime: 0",
        f"; TimeZoneString: {options.timezone}",
    ]
    if peak > 0:  # a lower bound of the machine's size: marked as a guess, so that its users are warned
        lines.append(f"; MaxProcs: {peak} {GUESSED_MARK}: the most {options.size} in use at once in the log)")
    return lines


def count_left_out(left_out: dict[str, int], reason: str, mask: np.ndarray) -> None:
    """Add the jobs in `mask` to `left_out` under `reason` (nothing is left out silently)."""
    number = int(np.count_nonzero(mask))
    if number:
        left_out[reason] = left_out.get(reason, 0) + number


def count_unstarted(left_out: dict[str, int], never: np.ndarray, cancelled: np.ndarray) -> None:
    """Count the jobs in `never` (that never started) as cancelled before start, or as never started."""
    count_left_out(left_out, "cancelled before start", never & cancelled)
    count_left_out(left_out, "never started", never & ~cancelled)
