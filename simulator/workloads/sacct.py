"""Slurm accounting (`sacct --parsable2`) as a trace.

The one command a site runs (`SACCT_COMMAND`; any order of `SACCT_FIELDS`,
more fields are ignored, and only the `REQUIRED_ROLES` must be filled: a usual
dump's JobID, Timelimit and Elapsed stand in for JobIDRaw, TimelimitRaw and
ElapsedRaw; comma-separated, fixed-width and header-less output is named,
`not_parsable`, with this command)::

    sacct --allusers --parsable2 --allocations --duplicates --noconvert \\
          --starttime 2024-01-01 --endtime now --format=JobIDRaw,JobID,User,UID,... > site.sacct

How a line becomes an SWF record (docs/site-logs.md says why):

- one record per job allocation: job steps (`123.batch`, `123.0`; present
  without `--allocations`) are left out and counted; array tasks (`123_4`)
  are jobs with their own JobIDRaw, which is the SWF job number;
- requeued jobs (`--duplicates`: one line per attempt): the last attempt is
  the job; earlier attempts are left out and counted;
- submit <- Eligible (Submit when unknown): when the scheduler could first
  start the job, so that `--begin` and dependencies do not count as wait;
  wait = Start - Eligible; run <- ElapsedRaw; req_time <- TimelimitRaw x 60;
  UNLIMITED and Partition_Limit limits become `--default-request`, or stay
  unknown (skipped as "no request"); TIMEOUT jobs are kept (their run
  reaches the request: `censored` in `Trace.jobs`);
- size in cores (AllocCPUS or NCPUS; requested: ReqCPUS, else ReqTRES cpu=)
  or nodes (NNodes; requested: ReqTRES node=); req_mem <- ReqTRES mem= per
  core (node), in KB;
- status: COMPLETED 1, CANCELLED 5, other final states 0; jobs still pending
  or running, and jobs that never started (no Start, or no AllocTRES: Slurm
  22.05 gives some jobs cancelled while pending Start = End), are left out
  and counted;
- user <- UID (named by User), else User names numbered; group ("project"
  in Tang et al.) <- Account, else GID / Group; executable <- JobName;
  queue <- Partition; partition <- QOS; and, beyond SWF's fields, for the
  predictor: qos <- QOS, nodes, memory_mb (in all) and gpus <- ReqTRES's
  node=, mem= and gres/gpu=;
- times are naive local times of the machine sacct ran on: `timezone` says
  which zone (ambiguous times at the end of summer time are read as summer
  time; times in the spring gap move forward).

Reading is vectorised: the lines are split and their fields counted with
numpy, parsed by `pandas.read_csv` in chunks (so memory stays bounded), and
every value is converted once per distinct value.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kernel.durations import slurm_duration
from kernel.errors import TraceError
from simulator.workloads.sitelog import (
    RowChecks,
    SiteJobs,
    SiteLogOptions,
    SizeUnit,
    arrival_times,
    count_left_out,
    count_unstarted,
    line_spans,
    per_value,
    requests_with_default,
    site_trace,
    swf_status,
)
from simulator.workloads.trace import Trace, read_trace_bytes

#: The fields of the documented command, in its order.
SACCT_FIELDS = (
    "JobIDRaw",
    "JobID",
    "User",
    "UID",
    "Group",
    "GID",
    "Account",
    "Partition",
    "QOS",
    "Submit",
    "Eligible",
    "Start",
    "End",
    "ElapsedRaw",
    "TimelimitRaw",
    "AllocCPUS",
    "ReqCPUS",
    "NNodes",
    "ReqTRES",
    "AllocTRES",
    "State",
    "ExitCode",
    "Flags",
    "JobName",
)
SACCT_COMMAND = (
    "sacct --allusers --parsable2 --allocations --duplicates --noconvert "
    "--starttime YYYY-MM-DD --endtime now --format=" + ",".join(SACCT_FIELDS)
)
#: What a line must give to become a job, and the fields that give it, preferred first: sacct's raw numbers, else
#: the formatted fields of a usual dump (JobID; Timelimit as [D-]HH:MM:SS). A size field is needed too
#: (`SIZE_FIELDS`).
REQUIRED_ROLES = {
    "id": ("JobIDRaw", "JobID"),
    "Submit": ("Submit",),
    "Start": ("Start",),
    "End": ("End",),
    "State": ("State",),
    "limit": ("TimelimitRaw", "Timelimit"),
}
#: Every field that can fill a required part: a header naming one is sacct's.
REQUIRED_FIELDS = tuple(name for names in REQUIRED_ROLES.values() for name in names)
#: The runtime: sacct's seconds, else the formatted [D-]HH:MM:SS (else End - Start).
ELAPSED_FIELDS = ("ElapsedRaw", "Elapsed")
#: What a fixed-width sacct prints under its header: a rule of dashes per column.
_COLUMN_RULE = re.compile(r"-+(\s+-+)*")
#: The start of a sacct record: a job id (123, 123_4, 123.batch, 123+0) and a '|'.
_RECORD_START = re.compile(r"\d+(?:[_.+][\w\[\]-]*)*\|")
#: Slurm 22.05's job states (JOB_STATE_BASE and the flags sacct prints as a state).
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
UNFINISHED_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "COMPLETING",
        "CONFIGURING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
#: What sacct prints for a time that is not set, and for a job without a limit of its own.
UNSET_TIMES = frozenset({"Unknown", "None", ""})
NO_LIMIT = frozenset({"UNLIMITED", "Partition_Limit", ""})
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
#: Free-text fields: when one is the last field, a '|' in it is kept as '¦' instead of breaking the line.
FREE_TEXT_FIELDS = frozenset({"JobName", "Comment", "AdminComment", "SystemComment", "WorkDir"})
#: Rows parsed at a time: bounds the memory of the text columns.
CHUNK_ROWS = 100_000
_NAME_FIELDS = ("User", "Group", "Account", "Partition", "QOS", "JobName")
#: Field names sacct prints in a header, to recognise its output in any form.
_KNOWN_FIELDS = frozenset({*SACCT_FIELDS, *REQUIRED_FIELDS, *ELAPSED_FIELDS, "NCPUS"})


@dataclass(frozen=True)
class SizeFields:
    """Where sacct gives a job's size in one unit: allocated, the first of `allocated` the header has;
    requested, the `requested` field when there is one and the header has it, else ReqTRES's `tres` count."""

    allocated: tuple[str, ...]
    requested: str | None
    tres: str


SIZE_FIELDS: dict[SizeUnit, SizeFields] = {
    "cores": SizeFields(("AllocCPUS", "NCPUS"), "ReqCPUS", "cpu"),
    "nodes": SizeFields(("NNodes",), None, "node"),
}
_MEMORY_UNITS = {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024**2, "T": 1024**3, "P": 1024**4}


def read_sacct(path: str | Path, *, lenient: bool = False, options: SiteLogOptions | None = None) -> Trace:
    """Read `sacct --parsable2` output (plain or gzipped) as a Trace of SWF records.

    Strict mode raises TraceError at the first malformed line (naming the
    file, line and field); lenient mode skips malformed lines and counts them
    in `Trace.malformed`. Jobs that cannot be replayed are counted in
    `Trace.skipped`, by reason.
    """
    options = options or SiteLogOptions()
    source = str(path)
    data = read_trace_bytes(Path(path), source)
    malformed: dict[str, int] | None = {} if lenient else None
    starts, ends = line_spans(data)
    filled = np.flatnonzero(ends > starts)
    if len(filled) == 0:
        raise TraceError(f"{source}: empty file, not sacct output")
    header = int(filled[0])
    fields = data[starts[header] : ends[header]].decode("utf-8", errors="replace").split("|")
    following = filled[filled > header][:1]
    second = data[starts[following[0]] : ends[following[0]]].decode("utf-8", "replace") if len(following) else ""
    roles = _field_roles(source, header + 1, fields, second, options)

    body = filled[filled > header]
    # bytes.count per line: no array the size of the file (a position per '|' would be 8 bytes each)
    counts = np.fromiter(
        (
            data.count(b"|", start, end) + 1
            for start, end in zip(starts[body].tolist(), ends[body].tolist(), strict=True)
        ),
        dtype=np.int64,
        count=len(body),
    )
    fold = (counts > len(fields)) & (fields[-1] in FREE_TEXT_FIELDS)
    checks = RowChecks(source, body + 1, malformed)
    _check_field_counts(checks, fields, counts, fold)
    good = checks.keep()
    text, skip = _good_lines(data, starts[body][good], ends[body][good], fold[good], len(fields))
    table, steps = _parse(text, skip, fields, roles, body[good] + 1, source, malformed, options)
    return site_trace(source, "Slurm (sacct)", _site_jobs(table, roles, steps, options), options, malformed)


def _field_roles(source: str, line: int, fields: list[str], second: str, options: SiteLogOptions) -> dict[str, str]:
    """Which sacct field plays each part (e.g. the allocated size: AllocCPUS or NCPUS); refuse a header without
    one, or output in another form (`not_parsable`: `second` is the line after the header)."""
    header = "|".join(fields)
    command = f"; is this `sacct --parsable2` output? Run: {SACCT_COMMAND}"
    problem = not_parsable(header, second)
    if problem:
        raise TraceError(f"{source} line {line}: {problem}{command}")
    present = set(fields)
    repeated = sorted({name for name in fields if fields.count(name) > 1})
    if repeated:
        raise TraceError(f"{source} line {line}: field(s) {', '.join(repeated)} appear twice in the header")
    choices = {**REQUIRED_ROLES, "alloc": SIZE_FIELDS[options.size].allocated}
    found = {role: [name for name in names if name in present] for role, names in choices.items()}
    missing = [" or ".join(choices[role]) for role, names in found.items() if not names]
    if missing:
        raise TraceError(f"{source} line {line}: no {', '.join(missing)} field in the header ({header[:200]}){command}")
    wanted = {role: names[0] for role, names in found.items()}
    elapsed = [name for name in ELAPSED_FIELDS if name in present]
    if elapsed:
        wanted["elapsed"] = elapsed[0]
    optional = ("Eligible", "ReqCPUS", "ReqTRES", "AllocTRES", "UID", "GID", *_NAME_FIELDS)
    wanted.update({name: name for name in optional if name in present})
    return wanted


def not_parsable(first: str, second: str = "") -> str | None:
    """What is wrong with sacct output whose first lines are `first` and `second`, when it is sacct output in a
    form tsched cannot read (comma-separated, fixed-width, no header line); None otherwise."""
    words = set(re.split(r"[\s,|]+", first.strip()))
    if len(words & _KNOWN_FIELDS) >= 2 and "|" not in first:
        if "," in first:
            return (
                "sacct output with ',' between its fields (--delimiter=,): fields may hold commas, tsched "
                "reads sacct's own '|' (--parsable2 without --delimiter)"
            )
        if _COLUMN_RULE.fullmatch(second.strip()):
            return "fixed-width sacct output (without --parsable2): its columns cut long values"
    if _RECORD_START.match(first.strip()) and not words & _KNOWN_FIELDS:
        return "a sacct record where the header line should be (sacct --noheader?): tsched reads the fields' names"
    return None


def _missing_field(fields: list[str], count: int) -> str:
    return f"{fields[count]} ({count + 1} of {len(fields)})"


def _check_field_counts(checks: RowChecks, fields: list[str], counts: np.ndarray, fold: np.ndarray) -> None:
    """Every line has the header's fields (a '|' inside a free-text last field is folded into it)."""
    expected = len(fields)
    short = counts < expected
    checks.check(
        ~short,
        np.array([_missing_field(fields, count) if count < expected else "" for count in counts], dtype=object)
        if short.any()
        else "",
        "wrong field count",
        None,
        np.array([f"missing (the line has {count} fields, the header {expected})" for count in counts], dtype=object)
        if short.any()
        else "",
    )
    checks.check(
        (counts <= expected) | fold,
        f"{expected + 1} (past the last, {fields[-1]})",
        "wrong field count",
        None,
        np.array([f"is extra (the line has {count} fields, the header {expected})" for count in counts], dtype=object)
        if (counts > expected).any()
        else "",
    )


def _good_lines(
    data: bytes, starts: np.ndarray, ends: np.ndarray, fold: np.ndarray, expected: int
) -> tuple[bytes, int]:
    """The text to parse, one row per kept line, and how many lines to skip at its top.

    When the kept lines are the whole rest of the file (the usual case), that
    is the file itself past its header: no copy of a large file is made.
    Otherwise they are joined anew; extra '|' of a free-text last field become '¦'.
    """
    if not len(starts):
        return b"", 0
    tail = data[ends[-1] :]
    if not fold.any() and tail in (b"", b"\n", b"\r\n") and _contiguous(starts, ends, data):
        return data, data.count(b"\n", 0, starts[0])
    lines = [data[start:end] for start, end in zip(starts.tolist(), ends.tolist(), strict=True)]
    for index in np.flatnonzero(fold).tolist():
        head = lines[index].split(b"|", expected - 1)
        lines[index] = b"|".join([*head[:-1], head[-1].replace(b"|", "¦".encode())])
    return b"\n".join(lines), 0


def _contiguous(starts: np.ndarray, ends: np.ndarray, data: bytes) -> bool:
    """True when the kept lines follow one another with nothing but newlines between them."""
    gaps = starts[1:] - ends[:-1]
    if not np.all(gaps <= 2):
        return False
    between = np.frombuffer(data, dtype=np.uint8)[ends[:-1]]
    return bool(np.all((gaps == 1) | ((gaps == 2) & (between == ord("\r")))))


def _parse(
    text: bytes,
    skip: int,
    fields: list[str],
    roles: dict[str, str],
    lines: np.ndarray,
    source: str,
    malformed: dict[str, int] | None,
    options: SiteLogOptions,
) -> tuple[pd.DataFrame, int]:
    """Typed allocations (steps dropped, counted) from the good lines, `CHUNK_ROWS` at a time."""
    columns = sorted(set(roles.values()), key=fields.index)
    if not len(lines):
        empty = pd.DataFrame({name: pd.Series(dtype=object) for name in columns})
        return _typed(empty, lines, source, malformed, options, roles), 0
    reader = pd.read_csv(
        io.BytesIO(text),
        skiprows=skip,
        sep="|",
        header=None,
        names=fields,
        usecols=columns,
        dtype=object,
        na_filter=False,
        quoting=csv.QUOTE_NONE,
        skip_blank_lines=False,
        encoding="utf-8",
        encoding_errors="replace",
        engine="c",
        chunksize=CHUNK_ROWS,
    )
    parts, steps, offset = [], 0, 0
    for chunk in reader:
        chunk_lines = lines[offset : offset + len(chunk)]
        offset += len(chunk)
        is_step = chunk[roles["id"]].str.contains(".", regex=False).to_numpy(dtype=bool)
        steps += int(is_step.sum())
        parts.append(_typed(chunk.loc[~is_step], chunk_lines[~is_step], source, malformed, options, roles))
    if offset != len(lines):  # the parser and the line count disagree: say so rather than misname lines
        raise TraceError(f"{source}: {offset} rows parsed from {len(lines)} lines")
    table = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return table, steps


def _unix_times(values: pd.Series, timezone: str) -> tuple[np.ndarray, np.ndarray]:
    """(Unix seconds, -1 where unset; whether the value is a time or unset), per distinct value."""

    def convert(uniques: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        parsed = pd.to_datetime(uniques, format=TIME_FORMAT, errors="coerce")
        if timezone != "UTC":
            parsed = (
                parsed.dt.tz_localize(timezone, ambiguous=np.ones(len(parsed), dtype=bool), nonexistent="shift_forward")
                .dt.tz_convert("UTC")
                .dt.tz_localize(None)
            )
        known = parsed.notna().to_numpy()
        seconds = np.full(len(uniques), -1, dtype=np.int64)
        seconds[known] = parsed[known].to_numpy(dtype="datetime64[s]").astype(np.int64)
        return seconds, known | uniques.isin(UNSET_TIMES).to_numpy()

    seconds, ok = per_value(values, convert)
    return seconds, ok


def _integers(values: pd.Series, allowed_text: frozenset[str] = frozenset()) -> tuple[np.ndarray, np.ndarray]:
    """(non-negative integers, -1 where the text is one of `allowed_text`; whether the value is one of those)."""

    def convert(uniques: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        numbers = pd.to_numeric(uniques, errors="coerce").to_numpy(dtype=np.float64)
        whole = np.isfinite(numbers) & (numbers >= 0) & (numbers < 2**62) & (numbers == np.floor(numbers))
        digits = uniques.str.fullmatch(r"\d+").to_numpy(dtype=bool)  # no '1e3' or '+5' in a sacct number
        valid = whole & digits
        return np.where(valid, numbers, -1).astype(np.int64), valid | uniques.isin(allowed_text).to_numpy()

    numbers, ok = per_value(values, convert)
    return numbers, ok


#: How a bad job id is described, by the field it came from.
_ID_PROBLEMS = {
    "JobIDRaw": "is not a job id (digits)",
    "JobID": "is not a job number (an array task's JobID, 123_4, is not one: add JobIDRaw to sacct's --format)",
}
#: How a bad duration is described, by the field it came from.
_DURATION_PROBLEMS = {
    "TimelimitRaw": "is not minutes, UNLIMITED or Partition_Limit",
    "Timelimit": "is not a time limit ([D-]HH:MM:SS), UNLIMITED or Partition_Limit",
    "ElapsedRaw": "is not a whole number of seconds",
    "Elapsed": "is not an elapsed time ([D-]HH:MM:SS)",
}


def _seconds(values: pd.Series, field_name: str) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, -1 where there is no limit or no value; whether the value is valid) of a limit or an elapsed
    time: sacct's raw numbers (TimelimitRaw in minutes, ElapsedRaw in seconds) or its formatted durations."""
    if field_name in ("TimelimitRaw", "ElapsedRaw"):
        numbers, ok = _integers(values, NO_LIMIT if field_name == "TimelimitRaw" else frozenset({""}))
        return (np.where(numbers >= 0, numbers * 60, -1) if field_name == "TimelimitRaw" else numbers), ok

    def convert(uniques: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        seconds = np.full(len(uniques), -1, dtype=np.int64)
        ok = uniques.isin(NO_LIMIT).to_numpy().copy()
        for index, text in enumerate(uniques.tolist()):
            if not ok[index] and ":" in text:  # sacct prints every duration with its seconds: no bare minutes
                try:
                    value = slurm_duration(text)
                except ValueError:
                    continue
                seconds[index], ok[index] = (-1 if value is None else value), True
        return seconds, ok

    seconds, ok = per_value(values, convert)
    return seconds, ok


def _tres(values: pd.Series, name: str) -> np.ndarray:
    """A count from a TRES list (`billing=4,cpu=4,mem=1000M,node=1`), -1 where absent."""

    def convert(uniques: pd.Series) -> tuple[np.ndarray]:
        found = uniques.str.extract(rf"(?:^|,){name}=(\d+)(?:,|$)")[0]
        return (pd.to_numeric(found).fillna(-1).to_numpy(dtype=np.int64),)

    return per_value(values, convert)[0]


def _tres_memory_kb(values: pd.Series) -> np.ndarray:
    """Requested memory in KB from a TRES list (`mem=1000M`), NaN where absent."""

    def convert(uniques: pd.Series) -> tuple[np.ndarray]:
        found = uniques.str.extract(r"(?:^|,)mem=(\d+(?:\.\d+)?)([KMGTP]?)(?:,|$)")
        scale = found[1].map(_MEMORY_UNITS)
        return ((pd.to_numeric(found[0]) * scale).to_numpy(dtype=np.float64),)

    return per_value(values, convert)[0]


def _states(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The state's first word (`CANCELLED by 1001` -> CANCELLED), and whether Slurm has such a state."""

    def convert(uniques: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        words = uniques.str.split(" ", n=1).str[0].to_numpy(dtype=object)
        known = pd.Series(words).isin(FINAL_STATES | UNFINISHED_STATES).to_numpy()
        return words, known

    words, known = per_value(values, convert)
    return words, known


def _add_tres(out: dict[str, np.ndarray], chunk: pd.DataFrame, roles: dict[str, str], size_tres: str) -> None:
    """What the TRES fields say a job asked for (the size from ReqTRES where no other field gave it) and whether it
    was given anything."""
    if "ReqTRES" in roles:
        if "req" not in out:
            out["req"] = _tres(chunk["ReqTRES"], size_tres)
        out["req_mem_kb"] = _tres_memory_kb(chunk["ReqTRES"])
        out["req_nodes"] = _tres(chunk["ReqTRES"], "node")
        out["req_gpus"] = _tres(chunk["ReqTRES"], "gres/gpu")
    if "AllocTRES" in roles:
        out["allocated"] = (chunk["AllocTRES"] != "").to_numpy(dtype=bool)


def _typed(
    chunk: pd.DataFrame,
    lines: np.ndarray,
    source: str,
    malformed: dict[str, int] | None,
    options: SiteLogOptions,
    roles: dict[str, str],
) -> pd.DataFrame:
    """One chunk of allocation lines checked and converted; the bad ones raise (strict) or go (lenient)."""
    checks = RowChecks(source, lines, malformed)
    out: dict[str, np.ndarray] = {"line": lines}
    identity = roles["id"]
    out["job"], ok = _integers(chunk[identity])
    checks.check(ok, identity, "bad job id", chunk[identity], _ID_PROBLEMS[identity])
    for name in ("Submit", "Eligible", "Start", "End"):
        if name not in roles:
            continue
        out[name], ok = _unix_times(chunk[name], options.timezone)
        checks.check(ok, name, "bad timestamp", chunk[name], f"is not a time ({TIME_FORMAT}, Unknown or None)")
    checks.check(
        out["Submit"] >= 0, "Submit", "bad timestamp", chunk["Submit"], "is not a time: a job has a submit time"
    )
    checks.check(
        (out["End"] < 0) | (out["Start"] < 0) | (out["End"] >= out["Start"]),
        "End",
        "ends before it starts",
        chunk["End"],
        "is before the job's Start",
    )
    out["state"], ok = _states(chunk["State"])
    checks.check(ok, "State", "unknown state", chunk["State"], "is not a Slurm job state")
    for role, reason in (("limit", "bad time limit"), ("elapsed", "bad elapsed time")):
        if role in roles:
            field_name = roles[role]
            out[role], ok = _seconds(chunk[field_name], field_name)
            checks.check(ok, field_name, reason, chunk[field_name], _DURATION_PROBLEMS[field_name])
    size = SIZE_FIELDS[options.size]
    numbers = {"alloc": "alloc", "uid": "UID", "gid": "GID"}
    if size.requested is not None:
        numbers["req"] = size.requested
    for role, field_name in ((role, roles[key]) for role, key in numbers.items() if key in roles):
        out[role], ok = _integers(chunk[field_name], frozenset({""}))
        checks.check(ok, field_name, "not an integer", chunk[field_name], "is not a whole number")
    keep = checks.keep()
    _add_tres(out, chunk, roles, size.tres)
    table = pd.DataFrame(out)
    for name in _NAME_FIELDS:
        if name in roles:
            table[name] = chunk[name].to_numpy(dtype=object)
    table = table.loc[keep].reset_index(drop=True)
    for name in (*_NAME_FIELDS, "state"):
        if name in table:
            table[name] = table[name].astype("category")
    return table


def _site_jobs(table: pd.DataFrame, roles: dict[str, str], steps: int, options: SiteLogOptions) -> SiteJobs:
    """The replay's view of the allocations: the last attempt of each job, with what was left out counted."""
    left_out: dict[str, int] = {}
    kept = _final_attempts(table, steps, left_out)
    state = kept["state"].astype(object).to_numpy()
    start, end, submit = (kept[name].to_numpy() for name in ("Start", "End", "Submit"))
    notes: list[str] = []
    limit = kept["limit"].to_numpy()
    why = "had no limit of their own (UNLIMITED or Partition_Limit)"
    req_time = requests_with_default(limit, limit < 0, why, options, notes)
    timeouts = int(np.count_nonzero(state == "TIMEOUT"))
    if timeouts:
        notes.append(f"{timeouts} TIMEOUT jobs kept: they ran to their limit (censored)")
    alloc = kept["alloc"].to_numpy()
    req = kept["req"].to_numpy() if "req" in kept else np.full(len(kept), -1, dtype=np.int64)
    return SiteJobs(
        job=kept["job"].to_numpy(),
        arrival=arrival_times(submit, kept["Eligible"].to_numpy() if "Eligible" in kept else submit, start),
        start=start,
        end=end,
        run=kept["elapsed"].to_numpy() if "elapsed" in kept else np.where(end >= 0, end - start, -1),
        req_time=req_time,
        alloc_procs=np.where(alloc > 0, alloc, -1),
        req_procs=req,
        status=swf_status(completed=state == "COMPLETED", cancelled=state == "CANCELLED"),
        names=_names(kept, roles),
        req_mem=_memory_per_unit(kept, np.where(alloc > 0, alloc, req)),
        resources=_resources(kept),
        left_out=left_out,
        notes=notes,
    )


def _final_attempts(table: pd.DataFrame, steps: int, left_out: dict[str, int]) -> pd.DataFrame:
    """Each job's last attempt, if it finished after it started; steps, earlier attempts, unfinished jobs and
    jobs that never started are counted in `left_out`."""
    count_left_out(left_out, "job step (not an allocation)", np.ones(steps, dtype=bool))
    order = np.lexsort((table["line"].to_numpy(), table["Submit"].to_numpy(), table["job"].to_numpy()))
    table = table.iloc[order].reset_index(drop=True)
    job = table["job"].to_numpy()
    earlier = np.zeros(len(table), dtype=bool)
    earlier[:-1] = job[:-1] == job[1:]
    state = table["state"].astype(object).to_numpy()
    unfinished = ~earlier & np.isin(state, list(UNFINISHED_STATES))
    never = ~earlier & ~unfinished & (table["Start"].to_numpy() < 0)
    if "allocated" in table:  # a job cancelled while pending may show Start = End, but it got no allocation
        never |= ~earlier & ~unfinished & ~table["allocated"].to_numpy(dtype=bool)
    count_left_out(left_out, "earlier attempt of a requeued job", earlier)
    count_left_out(left_out, "not finished when sacct ran", unfinished)
    count_unstarted(left_out, never, cancelled=state == "CANCELLED")
    return table.loc[~(earlier | unfinished | never)].reset_index(drop=True)


def _memory_per_unit(kept: pd.DataFrame, size: np.ndarray) -> np.ndarray | None:
    """ReqTRES mem= per core (or node), in KB: SWF's requested memory is per processor (-1 where unknown)."""
    if "req_mem_kb" not in kept:
        return None
    memory = kept["req_mem_kb"].to_numpy()
    per_unit = np.divide(memory, size, out=np.full(len(size), np.nan), where=(size > 0) & np.isfinite(memory))
    return np.where(np.isfinite(per_unit), np.round(per_unit), -1).astype(np.int64)


def _resources(kept: pd.DataFrame) -> dict[str, np.ndarray]:
    """The nodes, memory (MB, in all) and GPUs ReqTRES asked for, 0 where it does not say."""
    if "req_nodes" not in kept:
        return {}
    memory_kb = kept["req_mem_kb"].to_numpy()
    return {
        "nodes": np.maximum(kept["req_nodes"].to_numpy(), 0),
        "memory_mb": np.where(np.isfinite(memory_kb), np.round(memory_kb / 1024), 0).astype(np.int64),
        "gpus": np.maximum(kept["req_gpus"].to_numpy(), 0),
    }


def _names(kept: pd.DataFrame, roles: dict[str, str]) -> dict[str, pd.Series | tuple[np.ndarray, pd.Series]]:
    """Which sacct field names each SWF field (see the module docstring)."""

    def text(name: str) -> pd.Series:
        return kept[name].astype(object) if name in roles else pd.Series([""] * len(kept), dtype=object)

    names: dict[str, pd.Series | tuple[np.ndarray, pd.Series]] = {}
    names["user"] = (kept["uid"].to_numpy(), text("User")) if "uid" in kept else text("User")
    account = text("Account")
    if (account != "").any():
        names["group"] = account
    else:
        names["group"] = (kept["gid"].to_numpy(), text("Group")) if "gid" in kept else text("Group")
    names["executable"] = text("JobName")
    names["queue"] = text("Partition")
    names["partition"] = text("QOS")
    names["qos"] = names["partition"]
    return names
