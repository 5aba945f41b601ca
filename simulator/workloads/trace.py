"""A workload as the simulator and the predictor see it: SWF records, the replayable jobs, the header.

Every reader (SWF, Slurm sacct, PBS accounting logs, the synthetic
generator) produces a `Trace`: the 18 SWF fields of every well-formed
record (`RECORD_COLUMNS`), and the jobs that can be replayed under the
replay rules of docs/definitions.md (`JOB_COLUMNS`, `replayable_jobs`): job
size is field 5 when > 0, else field 8; t_req is field 9; t_act is field 4
capped at t_req; jobs with unknown runtime, size or request are skipped and
counted by reason.
"""

from __future__ import annotations

import calendar
import gzip
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from kernel.errors import TraceError, UsageError
from kernel.jobs import RESOURCE_FIELD_NAMES

#: The 18 SWF fields in file order, as `Trace.records` names them.
RECORD_COLUMNS = (
    "job",
    "submit",
    "wait",
    "run",
    "alloc_procs",
    "avg_cpu",
    "used_mem",
    "req_procs",
    "req_time",
    "req_mem",
    "status",
    "user",
    "group",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)
#: SWF allows fractions only in these two fields; every other field is an integer.
FLOAT_COLUMNS = frozenset({"avg_cpu", "used_mem"})
#: The columns of `Trace.jobs`, the replayable jobs (docs/python-api.md says what each holds).
JOB_COLUMNS = (
    "job_id",
    "submit",
    "wait",
    "run",
    "procs",
    "t_req",
    "t_act",
    "end",
    "user",
    "group",
    "executable",
    "queue",
    "partition",
    "status",
    "censored",
    "memory_mb",
)
#: The path of a trace made in memory (the synthetic workload).
GENERATED_PATH = "<generated>"

#: The header keys the simulator reads (case-insensitive), and the `SWFHeader` fields they fill.
_INTEGER_HEADER_KEYS = {"maxprocs": "max_procs", "maxnodes": "max_nodes", "unixstarttime": "unix_start_time"}
_TEXT_HEADER_KEYS = {"timezonestring": "time_zone_string"}
_HEADER_LINE = re.compile(r"^\s*;\s*([A-Za-z]+)\s*:\s*(.*?)\s*$")
_LEADING_INTEGER = re.compile(r"[+-]?\d+")
#: What a reader writes after a MaxProcs it could only guess (a site log's peak use): `Trace.machine_size` warns.
GUESSED_MARK = "(guessed"
_MONTH = re.compile(r"(\d{4})-(\d{2})")


@dataclass
class SWFHeader:
    """The header values the simulator uses, plus every comment line verbatim.

    `lines` is what the writer writes back, so it is the source of truth; the
    typed fields are parsed from it (`from_lines`).
    """

    max_procs: int | None = None
    max_nodes: int | None = None
    unix_start_time: int | None = None
    time_zone_string: str | None = None
    lines: list[str] = field(default_factory=list)
    #: MaxProcs is a reader's guess (`GUESSED_MARK` after the number), not the machine's declared size.
    max_procs_guessed: bool = False

    @classmethod
    def from_lines(
        cls,
        lines: list[str],
        source: str = GENERATED_PATH,
        line_numbers: list[int] | None = None,
        malformed: dict[str, int] | None = None,
    ) -> SWFHeader:
        """Parse `; Key: value` comment lines (keys case-insensitive; leading integer taken).

        A required number that is not one raises TraceError, unless
        `malformed` is given (lenient mode): then the key is ignored and
        counted under "bad header value".
        """
        header = cls(lines=list(lines))
        numbers = line_numbers or list(range(1, len(lines) + 1))
        for line, number in zip(lines, numbers, strict=True):
            match = _HEADER_LINE.match(line)
            if not match:
                continue
            key, value = match.group(1).lower(), match.group(2)
            if key in _TEXT_HEADER_KEYS:
                setattr(header, _TEXT_HEADER_KEYS[key], value)
            elif key in _INTEGER_HEADER_KEYS:
                leading = _LEADING_INTEGER.match(value)
                if leading:
                    setattr(header, _INTEGER_HEADER_KEYS[key], int(leading.group()))
                    if key == "maxprocs":
                        header.max_procs_guessed = GUESSED_MARK in value
                elif malformed is None:
                    raise TraceError(
                        f"{source} line {number}, header field {match.group(1)}: {value!r} is not a number"
                    )
                else:
                    count_reason(malformed, "bad header value")
        return header


@dataclass(frozen=True)
class MachineSize:
    """A trace's machine size in processors, where it came from, and whether it is only a guess from the data
    (a lower bound: a machine is rarely ever full, so a guess makes queues shorter than they were)."""

    procs: int
    source: str
    guessed: bool = False

    def warning(self, path: str) -> str | None:
        """What to tell the user when the size is a guess; None when it was declared or given."""
        if not self.guessed:
            return None
        return (
            f"{path}: the machine's size is a guess, {self.procs} processors ({self.source}): a real machine is "
            "rarely full, so queues come out shorter than they were; give the real size with --machine-procs"
        )


@dataclass
class Trace:
    """A workload: every well-formed SWF record, and the jobs that can be replayed.

    `records` has the 18 SWF fields (`RECORD_COLUMNS`, -1 = unknown); `jobs`
    the replayable ones under the replay rules (`JOB_COLUMNS`, see
    `replayable_jobs`). `skipped` counts the jobs left out, by reason (a site
    log's reader adds what it left out of `records`: job steps, jobs that never
    started, ...); `malformed` the lines dropped in lenient mode. `names`
    gives, per SWF field a site log filled from names (user, group, queue,
    ...), the name behind each integer id.
    """

    path: str
    header: SWFHeader
    records: pd.DataFrame
    jobs: pd.DataFrame
    skipped: dict[str, int]
    malformed: dict[str, int]
    names: dict[str, dict[int, str]] = field(default_factory=dict)

    @classmethod
    def from_records(
        cls,
        path: str,
        header: SWFHeader,
        records: pd.DataFrame,
        malformed: dict[str, int] | None = None,
        *,
        left_out: dict[str, int] | None = None,
        names: dict[str, dict[int, str]] | None = None,
    ) -> Trace:
        """Apply the replay rules to `records` (the readers, month selection and generator share this).

        `left_out` counts jobs a reader did not put in `records`, by reason; they join `skipped`.
        """
        records = records.reset_index(drop=True)
        jobs, skipped = replayable_jobs(records)
        for reason, count in (left_out or {}).items():
            skipped[reason] = skipped.get(reason, 0) + count
        return cls(path, header, records, jobs, skipped, dict(malformed or {}), dict(names or {}))

    def with_submit_times(self, submit: np.ndarray, note: str) -> Trace:
        """This trace with new submit times (one per record) and `note` added to its header; all else kept."""
        header = SWFHeader.from_lines([*self.header.lines, note])
        records = self.records.assign(submit=submit)
        return Trace.from_records(self.path, header, records, self.malformed, names=self.names)

    def require_jobs(self) -> Trace:
        """This trace, refused with the reasons when no job of it can be replayed (an empty file, no requests)."""
        if self.jobs.empty:
            reasons = ", ".join(f"{count:,} {reason}" for reason, count in sorted(self.skipped.items()))
            raise TraceError(
                f"{self.path}: no job can be replayed"
                + (f" (skipped: {reasons})" if reasons else ": the trace holds no jobs")
                + "; a replay needs each job's runtime, size and requested time"
            )
        return self

    def machine_procs(self, override: int | None = None) -> int:
        """Machine size: `override` (--machine-procs), else MaxProcs, else MaxNodes, else the largest job."""
        return self.machine_size(override).procs

    def machine_size(self, override: int | None = None) -> MachineSize:
        """The machine's size in processors (`machine_procs`) and where it came from, so that a guess is said."""
        if override is not None:
            if override <= 0:
                raise UsageError(f"--machine-procs: the machine needs a positive processor count, not {override}")
            return MachineSize(int(override), "--machine-procs")
        header = self.header
        if header.max_procs is not None and header.max_procs > 0:
            source = "the most in use at once in the log" if header.max_procs_guessed else "the header's MaxProcs"
            return MachineSize(header.max_procs, source, guessed=header.max_procs_guessed)
        if header.max_nodes is not None and header.max_nodes > 0:
            return MachineSize(header.max_nodes, "the header's MaxNodes")
        largest = int(self.require_jobs().jobs["procs"].max())
        return MachineSize(largest, "the largest job (the header has no MaxProcs)", guessed=True)

    def _epoch(self) -> int:
        return self.header.unix_start_time or 0

    def month_bounds(self) -> list[tuple[str, int, int]]:
        """Calendar months (UTC) holding the jobs' submissions: ('YYYY-MM', start, end), end exclusive.

        Bounds are in trace seconds (Unix time minus UnixStartTime), so they
        compare directly with `jobs.submit`; the first may be negative.
        """
        if self.jobs.empty:
            return []
        epoch = self._epoch()
        first = utc_time(epoch + int(self.jobs["submit"].iloc[0]))
        last = utc_time(epoch + int(self.jobs["submit"].iloc[-1]))
        months = range(first.year * 12 + first.month - 1, last.year * 12 + last.month)
        return [(f"{m // 12:04d}-{m % 12 + 1:02d}", *_month_span(m // 12, m % 12 + 1, epoch)) for m in months]

    def select_month(self, month: str) -> Trace:
        """The jobs submitted in calendar month `month` ('YYYY-MM', UTC), with the same header."""
        match = _MONTH.fullmatch(month)
        if not match or not 1 <= int(match.group(2)) <= 12:
            raise TraceError(f"{self.path}: month {month!r} is not of the form YYYY-MM")
        start, end = _month_span(int(match.group(1)), int(match.group(2)), self._epoch())
        submit = self.jobs["submit"].to_numpy()
        if not np.any((submit >= start) & (submit < end)):
            covered = self.month_bounds()
            extent = f"the trace covers {covered[0][0]} to {covered[-1][0]}" if covered else "the trace has no jobs"
            raise TraceError(f"{self.path}: no jobs submitted in {month} ({extent})")
        in_month = (self.records["submit"] >= start) & (self.records["submit"] < end)
        return Trace.from_records(self.path, self.header, self.records.loc[in_month], self.malformed, names=self.names)

    def jobs_before(self, t: int) -> pd.DataFrame:
        """Replayable jobs that ended (by the trace's own times) at or before `t`: warm-up history."""
        return self.jobs.loc[self.jobs["end"].to_numpy() <= t].reset_index(drop=True)


def replayable_jobs(records: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """The replay rules of docs/definitions.md, vectorised.

    A job failing several rules is counted once, under the first of: unknown
    runtime, no size, no request. An unknown wait (-1) counts as 0 in `end`.
    `censored` marks the jobs that ran to their request (run >= t_req, as a
    Slurm TIMEOUT does): their t_act is a lower bound of what they needed.
    The resource columns a site log's records carry (`RESOURCE_FIELD_NAMES`) are kept; an SWF log's requested
    memory (kilobytes per processor) becomes `memory_mb`, the job's in all, 0 where unknown.
    """
    run = records["run"].to_numpy(dtype=np.int64)
    alloc = records["alloc_procs"].to_numpy(dtype=np.int64)
    procs = np.where(alloc > 0, alloc, records["req_procs"].to_numpy(dtype=np.int64))
    t_req = records["req_time"].to_numpy(dtype=np.int64)
    unknown_runtime = run < 0
    no_size = ~unknown_runtime & (procs <= 0)
    no_request = ~unknown_runtime & ~no_size & (t_req <= 0)
    skipped = {
        reason: int(mask.sum())
        for reason, mask in (("unknown runtime", unknown_runtime), ("no size", no_size), ("no request", no_request))
        if mask.any()
    }
    keep = ~(unknown_runtime | no_size | no_request)

    kept = records.loc[keep]
    t_act = np.minimum(run[keep], t_req[keep])
    wait = kept["wait"].to_numpy(dtype=np.int64)
    submit = kept["submit"].to_numpy(dtype=np.int64)
    jobs = pd.DataFrame(
        {
            "job_id": kept["job"].to_numpy(dtype=np.int64),
            "submit": submit,
            "wait": wait,
            "run": run[keep],
            "procs": procs[keep],
            "t_req": t_req[keep],
            "t_act": t_act,
            "end": submit + np.maximum(wait, 0) + t_act,
            **{
                name: kept[name].to_numpy(dtype=np.int64)
                for name in ("user", "group", "executable", "queue", "partition", "status")
            },
            "censored": run[keep] >= t_req[keep],
            **{name: kept[name].to_numpy(dtype=np.int64) for name in RESOURCE_FIELD_NAMES if name in kept},
        }
    )
    if "memory_mb" not in jobs:
        per_processor_kb = kept["req_mem"].to_numpy(dtype=np.int64)
        in_all = np.round(per_processor_kb * procs[keep] / 1024)
        jobs["memory_mb"] = np.where(per_processor_kb > 0, in_all, 0).astype(np.int64)
    jobs = jobs.sort_values(["submit", "job_id"], kind="stable").reset_index(drop=True)
    return jobs, skipped


def read_trace_bytes(path: Path, source: str) -> bytes:
    """A trace file's bytes, gunzipped when gzipped (detected by content, not by name); errors name `source`."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{source}: is a directory, not a trace file") from None
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError) as error:
        raise TraceError(f"{source}: damaged gzip file ({error})") from None


def count_reason(counts: dict[str, int], reason: str) -> None:
    """One more line or job under `reason` (malformed and skipped counts are kept by reason)."""
    counts[reason] = counts.get(reason, 0) + 1


def _month_span(year: int, month: int, epoch: int) -> tuple[int, int]:
    """[start, end) of a UTC calendar month in trace seconds (Unix time minus `epoch`)."""
    start = calendar.timegm((year, month, 1, 0, 0, 0))
    end = calendar.timegm((year + month // 12, month % 12 + 1, 1, 0, 0, 0))
    return start - epoch, end - epoch


def utc_time(unix_time: int) -> datetime:
    """A Unix time as an aware UTC datetime."""
    return datetime.fromtimestamp(unix_time, tz=UTC)
