"""Standard Workload Format (SWF) traces: reading, writing, replay rules, summaries.

Reading is vectorised (one `pandas.read_csv` over the whole file) because the
archive's traces run to hundreds of thousands of jobs. Only when that fast
parse shows something wrong does a slower line-by-line pass run, to name the
exact line and field (strict mode) or to drop the bad lines and count them by
reason (lenient mode).

The replay rules follow docs/definitions.md: job size is field 5 when > 0, else
field 8; t_req is field 9; t_act is field 4 capped at t_req; jobs with unknown
runtime, size or request are skipped and counted by reason.
"""

from __future__ import annotations

import calendar
import gzip
import io
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel.errors import TraceError, UsageError
from predictor.scoring import summarize

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
#: How error messages name each field (SWF's own wording).
FIELD_LABELS = (
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user ID",
    "group ID",
    "executable number",
    "queue number",
    "partition number",
    "preceding job",
    "think time",
)
#: SWF allows fractions only in these two fields; every other field is an integer.
FLOAT_COLUMNS = frozenset({"avg_cpu", "used_mem"})
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
)
GENERATED_PATH = "<generated>"

_INTEGER_HEADER_KEYS = {"maxprocs": "max_procs", "maxnodes": "max_nodes", "unixstarttime": "unix_start_time"}
_TEXT_HEADER_KEYS = {"timezonestring": "time_zone_string"}
_HEADER_LINE = re.compile(r"^\s*;\s*([A-Za-z]+)\s*:\s*(.*?)\s*$")
_LEADING_INTEGER = re.compile(r"[+-]?\d+")
#: One number, matched token by token: each part can match in one way only, so a check is linear in the
#: line's length (a whole-line pattern backtracks catastrophically on a line with a field too many).
_NUMBER_TOKEN = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_SUBMIT = RECORD_COLUMNS.index("submit")
_MONTH = re.compile(r"(\d{4})-(\d{2})")
_INT64_LIMIT = 2**63


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
                elif malformed is None:
                    raise TraceError(
                        f"{source} line {number}, header field {match.group(1)}: {value!r} is not a number"
                    )
                else:
                    count_reason(malformed, "bad header value")
        return header


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
        """Machine size: `override` (--procs), else MaxProcs, else MaxNodes, else the largest job."""
        if override is not None:
            if override <= 0:
                raise UsageError(f"--procs: the machine needs a positive processor count, not {override}")
            return int(override)
        for declared in (self.header.max_procs, self.header.max_nodes):
            if declared is not None and declared > 0:
                return declared
        return int(self.require_jobs().jobs["procs"].max())  # sized by the largest job

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
        first = _utc(epoch + int(self.jobs["submit"].iloc[0]))
        last = _utc(epoch + int(self.jobs["submit"].iloc[-1]))
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
        }
    )
    jobs = jobs.sort_values(["submit", "job_id"], kind="stable").reset_index(drop=True)
    return jobs, skipped


def read_swf(path: str | Path, *, lenient: bool = False) -> Trace:
    """Read a plain or gzipped SWF file (detected by content, not by name).

    Strict mode raises TraceError at the first malformed line; lenient mode
    skips malformed lines and bad header values and counts them in
    `Trace.malformed` by reason.
    """
    source = str(path)
    return parse_swf(read_trace_bytes(Path(path), source), source, lenient=lenient)


def parse_swf(data: bytes, source: str, *, lenient: bool = False) -> Trace:
    """SWF text already read (standard input: `tsched observe --trace -`), errors naming `source`."""
    malformed: dict[str, int] | None = {} if lenient else None

    comments = _comment_lines(data)
    lines = [_decode(text.rstrip(b"\r")) for _, text in comments]
    line_numbers = _line_numbers(data, [offset for offset, _ in comments])
    header = SWFHeader.from_lines(lines, source, line_numbers, malformed)

    records = _parse_records(_without_lines(data, comments))
    if records is None:
        records = _parse_line_by_line(data, source, malformed)
    _refuse_absolute_submit_times(records, header, source)
    return Trace.from_records(source, header, records, malformed)


def _refuse_absolute_submit_times(records: pd.DataFrame, header: SWFHeader, source: str) -> None:
    """SWF submit times count from UnixStartTime; Unix times there would put the trace decades ahead.

    Relative times stay within a few years (10^8 s), while a Unix time of the
    same era as UnixStartTime is at least half of it: a clean threshold.
    """
    start = header.unix_start_time
    if start is None or start <= 0 or records.empty:
        return
    first = int(records["submit"].min())
    if first >= start / 2:
        raise TraceError(
            f"{source}: field 2 ({FIELD_LABELS[_SUBMIT]}) holds absolute Unix times (the first is {first}, "
            f"{_utc(first):%Y-%m-%d}) while the header's UnixStartTime is {start} ({_utc(start):%Y-%m-%d}): SWF "
            "submit times count seconds from UnixStartTime; subtract it from field 2, or remove the header line"
        )


def read_trace_bytes(path: Path, source: str) -> bytes:
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


def _comment_lines(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, text) of each line whose first non-blank character is ';'.

    Looks only where a ';' occurs (a fast byte search), since scanning every
    line start of a 200,000-line file with a regex costs more than the parse.
    """
    found = []
    position = data.find(b";")
    while position >= 0:
        start = data.rfind(b"\n", 0, position) + 1
        end = data.find(b"\n", position)
        end = len(data) if end < 0 else end
        if not data[start:position].strip(b" \t"):
            found.append((start, data[start:end]))
        position = data.find(b";", end)
    return found


def _without_lines(data: bytes, lines: list[tuple[int, bytes]]) -> bytes:
    """`data` with the given (offset, text) lines blanked out, so the parser sees records only."""
    pieces, position = [], 0
    for offset, text in lines:
        pieces.append(data[position:offset])
        position = offset + len(text)
    pieces.append(data[position:])
    return b"".join(pieces)


def _decode(text: bytes) -> str:
    # surrogateescape keeps odd bytes in comments, so the writer gives them back unchanged
    return text.decode("utf-8", errors="surrogateescape")


def _line_numbers(data: bytes, offsets: list[int]) -> list[int]:
    """1-based line numbers of byte offsets (comments are few, so counting newlines per offset is cheap)."""
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
    numbers: list[int] = (np.searchsorted(newlines, offsets) + 1).tolist()
    return numbers


def _parse_records(data: bytes) -> pd.DataFrame | None:
    """Fast path: all records (no comment lines) in one read_csv; None when anything is off.

    The slow pass then finds and explains the offending line.
    """
    if not data.strip():
        return _empty_records()
    try:
        table = pd.read_csv(io.BytesIO(data), sep=r"\s+", header=None, encoding="latin-1", skip_blank_lines=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError):
        return None
    if table.shape[1] != len(RECORD_COLUMNS):
        return None
    table.columns = list(RECORD_COLUMNS)
    return _typed_records(table)


def _typed_records(table: pd.DataFrame) -> pd.DataFrame | None:
    """Cast to int64 / float64 columns, or None if some value is missing, non-numeric or not integral."""
    columns = {}
    for name in RECORD_COLUMNS:
        column = table[name]
        if not pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
            return None
        values = column.to_numpy()
        if values.dtype == np.int64:
            columns[name] = values.astype(np.float64) if name in FLOAT_COLUMNS else values
            continue
        values = values.astype(np.float64)
        if not np.isfinite(values).all():
            return None
        if name not in FLOAT_COLUMNS:
            if (np.abs(values) >= _INT64_LIMIT).any() or (values != np.floor(values)).any():
                return None
            values = values.astype(np.int64)
        columns[name] = values
    if (columns["submit"] < 0).any():  # a submit time counts from the trace's start: the slow pass names the line
        return None
    return pd.DataFrame(columns)


def _empty_records() -> pd.DataFrame:
    return pd.DataFrame(
        {name: np.empty(0, dtype=np.float64 if name in FLOAT_COLUMNS else np.int64) for name in RECORD_COLUMNS}
    )


def _parse_line_by_line(data: bytes, source: str, malformed: dict[str, int] | None) -> pd.DataFrame:
    """Slow path: find the malformed lines; raise on the first (strict) or drop and count them (lenient)."""
    good: list[str] = []
    for number, raw in enumerate(data.decode("latin-1").split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith(";"):
            continue
        problem = _diagnose(line.split())
        if problem is None:
            good.append(line)
            continue
        reason, detail = problem
        if malformed is None:
            raise TraceError(f"{source} line {number}, {detail}")
        count_reason(malformed, reason)
    records = _parse_records("\n".join(good).encode("latin-1"))
    if records is None:  # the two passes disagree on what a number is: say so rather than guess
        raise TraceError(f"{source}: records could not be parsed as numbers")
    return records


def _integral(token: str) -> bool:
    value = float(token)
    return value.is_integer() and abs(value) < _INT64_LIMIT


def _diagnose(tokens: list[str]) -> tuple[str, str] | None:
    """(reason, message tail) for a malformed line, None for a well-formed one."""
    expected = len(RECORD_COLUMNS)
    if len(tokens) < expected:
        missing = len(tokens)
        return "wrong field count", (
            f"field {missing + 1} ({FIELD_LABELS[missing]}): missing "
            f"(the line has {len(tokens)} fields, SWF has {expected})"
        )
    if len(tokens) > expected:
        return "wrong field count", (
            f"field {expected + 1}: {tokens[expected]!r} is extra "
            f"(the line has {len(tokens)} fields, SWF has {expected}; "
            f"the last is field {expected} ({FIELD_LABELS[-1]}))"
        )
    for index, (name, token) in enumerate(zip(RECORD_COLUMNS, tokens, strict=True)):
        where = f"field {index + 1} ({FIELD_LABELS[index]})"
        if not _NUMBER_TOKEN.fullmatch(token):
            return "not a number", f"{where}: {token!r} is not a number"
        if name not in FLOAT_COLUMNS and not _integral(token):
            return "not an integer", f"{where}: {token!r} is not an integer (or beyond 64 bits)"
    if float(tokens[_SUBMIT]) < 0:
        return "negative submit time", f"field 2 ({FIELD_LABELS[_SUBMIT]}): {tokens[_SUBMIT]!r} is negative"
    return None


def count_reason(counts: dict[str, int], reason: str) -> None:
    counts[reason] = counts.get(reason, 0) + 1


def write_swf(trace_or_records: Trace | pd.DataFrame, path: str | Path, header: SWFHeader | None = None) -> None:
    """Write SWF (gzipped when `path` ends in .gz): the header's lines verbatim, then one record a line.

    Integral values are written without a decimal point and fractions in
    shortest round-trip form, so reading the file back gives identical records.
    """
    if isinstance(trace_or_records, Trace):
        records = trace_or_records.records
        header = header if header is not None else trace_or_records.header
    else:
        records = trace_or_records
    missing = [name for name in RECORD_COLUMNS if name not in records.columns]
    if missing:
        raise ValueError(f"records lack SWF column(s): {', '.join(missing)}")
    columns = [
        _fraction_text(records[name].to_numpy(dtype=np.float64))
        if name in FLOAT_COLUMNS
        else records[name].to_numpy(dtype=np.int64).tolist()
        for name in RECORD_COLUMNS
    ]
    line = " ".join("%s" if name in FLOAT_COLUMNS else "%d" for name in RECORD_COLUMNS)
    body = "\n".join([line % fields for fields in zip(*columns, strict=True)])
    lines = header.lines if header is not None else []
    text = "".join(line + "\n" for line in lines) + (body + "\n" if body else "")
    encoded = text.encode("utf-8", errors="surrogateescape")
    target = Path(path)
    target.write_bytes(gzip.compress(encoded, compresslevel=6) if target.suffix == ".gz" else encoded)


def _fraction_text(values: np.ndarray) -> list[str]:
    """Whole numbers as integers (as SWF files write them), fractions in shortest round-trip form."""
    return [str(int(v)) if v.is_integer() else repr(v) for v in values.tolist()]


def trace_info(trace: Trace) -> dict[str, Any]:
    """What `tsched trace info` reports: size, span, users, skips, and how good the users' own requests are."""
    jobs = trace.jobs
    try:
        procs: int | None = trace.machine_procs()
    except TraceError:  # no header size and no jobs: nothing to size the machine by
        procs = None
    info: dict[str, Any] = {
        "path": trace.path,
        "records": len(trace.records),
        "jobs": len(jobs),
        "procs": procs,
        "max_procs": trace.header.max_procs,
        "max_nodes": trace.header.max_nodes,
        "time_zone": trace.header.time_zone_string,
        "users": int(jobs["user"][jobs["user"] >= 0].nunique()),
        "groups": int(jobs["group"][jobs["group"] >= 0].nunique()),
        "skipped": dict(trace.skipped),
        "malformed": dict(trace.malformed),
    }
    if jobs.empty:
        info["span"] = None
        info["requests"] = None
        return info
    first_submit = int(jobs["submit"].min())
    last_end = int(jobs["end"].max())
    span: dict[str, Any] = {
        "first_submit": first_submit,
        "last_end": last_end,
        "days": (last_end - first_submit) / 86400,
    }
    if trace.header.unix_start_time is not None:
        span["start_utc"] = _utc(trace.header.unix_start_time + first_submit).isoformat()
        span["end_utc"] = _utc(trace.header.unix_start_time + last_end).isoformat()
    info["span"] = span
    t_req = jobs["t_req"].to_numpy()
    t_act = jobs["t_act"].to_numpy()
    requests = summarize(t_req, t_act, t_req)
    requests["mean_ratio"] = float((t_act / t_req).mean())
    requests["killed_at_request"] = float(np.mean(jobs["run"].to_numpy() >= t_req))
    info["requests"] = requests
    return info


def format_trace_info(info: dict[str, Any]) -> str:
    """`trace_info` as readable lines."""
    out = [
        f"trace      {info['path']}",
        f"records    {info['records']:,} ({info['jobs']:,} replayable jobs)",
        f"machine    {info['procs']} processors (MaxProcs {info['max_procs']}, MaxNodes {info['max_nodes']})",
    ]
    span = info["span"]
    if span is not None:
        dates = f", {span['start_utc']} to {span['end_utc']}" if "start_utc" in span else ""
        out.append(f"span       {span['days']:.1f} days{dates}")
    out.append(f"users      {info['users']:,} in {info['groups']:,} groups")
    out.append("skipped    " + _reasons(info["skipped"]))
    out.append("malformed  " + _reasons(info["malformed"]))
    requests = info["requests"]
    if requests is not None:
        out.append(
            f"requests   accuracy mean {requests['accuracy_mean']:.3f}, median {requests['accuracy_median']:.3f}; "
            f"mean R = t_act/t_req {requests['mean_ratio']:.3f}; "
            f"{requests['killed_at_request']:.1%} of jobs reached their request"
        )
    return "\n".join(out)


def _reasons(counts: dict[str, int]) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{count:,} {reason}" for reason, count in sorted(counts.items()))


def _month_span(year: int, month: int, epoch: int) -> tuple[int, int]:
    """[start, end) of a UTC calendar month in trace seconds (Unix time minus `epoch`)."""
    start = calendar.timegm((year, month, 1, 0, 0, 0))
    end = calendar.timegm((year + month // 12, month % 12 + 1, 1, 0, 0, 0))
    return start - epoch, end - epoch


def _utc(unix_time: int) -> datetime:
    return datetime.fromtimestamp(unix_time, tz=UTC)
