"""PBS Pro / OpenPBS / Torque accounting logs (`server_priv/accounting/YYYYMMDD`) as a trace.

A log line is `MM/DD/YYYY HH:MM:SS;T;JOBID;key=value key=value ...`. One job
is its `E` (exit) record; `D` (delete) records say which jobs were cancelled.
Times in the message are Unix seconds, so no time zone is needed. Built
from the record format in the PBS Pro Reference Guide ("Accounting Log")
and the Torque Administrator Guide ("Accounting Records"); PBS itself is
not packaged for this project's machines, so the tests use records written
to that format rather than a live server's.

How an E record becomes an SWF record:

- submit <- etime (eligible) when at or after qtime, else qtime; wait =
  start - submit; run = end - start; req_time <- Resource_List.walltime
  (none: `--default-request`, else unknown and skipped as "no request");
- size in cores: what was allocated (Resource_List.ncpus, else
  total_execution_slots, else the exec_host slots), else what was asked for
  (the sum over Resource_List.select chunks N:ncpus=C, or over
  Resource_List.nodes N:ppn=P); in nodes: Resource_List.nodect, else
  unique_node_count, else exec_host's hosts, else the chunk counts;
- status: Exit_status 0 -> 1, a D record for a job that ran -> 5, else 0;
  a job without a start (deleted while queued) is left out and counted,
  as is an array's summary record (`123[]`) and an earlier E record of the
  same job;
- user <- user; group ("project") <- account, else project (unless PBS's
  `_pbs_project_default`), else the Unix group; executable <- jobname;
  queue <- queue; the SWF job number counts the jobs from 1 in end order,
  and `Trace.names["job"]` gives each one's PBS id.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from kernel.errors import TraceError
from predictor.digests import files_of
from simulator.workloads import sitelog
from simulator.workloads.trace import Trace, read_trace_bytes

_RECORD = re.compile(r"\d{2}/\d{2}/\d{4} \d{2}:\d{2}:\d{2}")
_JOB_ID = r"(\d+)(\[\d*\])?(?:\.|$)"
#: The message keys read, and the SWF meaning they feed (see the module docstring).
TIME_KEYS = ("qtime", "etime", "start", "end")
NAME_KEYS = ("user", "group", "account", "project", "jobname", "queue")
DEFAULT_PROJECT = "_pbs_project_default"
#: Where an E record gives a job's size, in each unit: the first of these columns that is positive (what was
#: allocated, then what was asked for; see the module docstring).
SIZE_COLUMNS: dict[sitelog.SizeUnit, tuple[str, ...]] = {
    "cores": ("Resource_List.ncpus", "total_execution_slots", "host_cpus", "select_cpus", "nodes_cpus"),
    "nodes": ("Resource_List.nodect", "unique_node_count", "host_nodes", "select_nodes", "nodes_nodes"),
}

#: Where a job's asked-for node count is read from, first known first (its select, Torque nodes, nodect).
_ASKED_NODES = ("select_nodes", "nodes_nodes", "Resource_List.nodect")


def read_pbs(
    path: str | Path | Sequence[str | Path], *, lenient: bool = False, options: sitelog.SiteLogOptions | None = None
) -> Trace:
    """Read PBS/Torque accounting logs: one file, a list of files, or a folder of them (read in name order).

    Strict mode raises TraceError at the first malformed record (naming the
    file, line and field); lenient mode skips it and counts it in `Trace.malformed`.
    """
    options = options or sitelog.SiteLogOptions()
    files = _log_files(path)
    malformed: dict[str, int] | None = {} if lenient else None
    exits, deletes = [], []
    for file in files:
        records, deleted = _read_file(file, malformed)
        exits.append(records)
        deletes.append(deleted)
    table = pd.concat(exits, ignore_index=True)
    deleted_ids = set(np.concatenate(deletes).tolist())
    source = str(path) if isinstance(path, str | Path) else f"{files[0]} and {len(files) - 1} more"
    return sitelog.site_trace(
        source, "PBS/Torque (accounting logs)", _site_jobs(table, deleted_ids, options), options, malformed
    )


def _log_files(path: str | Path | Sequence[str | Path]) -> list[Path]:
    files = files_of(path)
    if not files:
        where = f"{path}: a folder without" if isinstance(path, str | Path) else "no"
        raise TraceError(f"{where} PBS accounting log files given")
    return files


def _key(messages: pd.Series, key: str) -> pd.Series:
    """The value of `key=` in each message ('' where absent)."""
    return messages.str.extract(rf"(?:^|\s){re.escape(key)}=(\S*)", expand=False).fillna("")


def _read_file(file: Path, malformed: dict[str, int] | None) -> tuple[pd.DataFrame, np.ndarray]:
    """The E records of one log file, checked and typed; and the ids its D records delete."""
    source = str(file)
    text = read_trace_bytes(file, source).decode("utf-8", errors="replace")
    lines = pd.Series(text.splitlines(), dtype=object)
    numbers = np.arange(1, len(lines) + 1)
    filled = lines.str.strip().to_numpy(dtype=bool) if len(lines) else np.zeros(0, dtype=bool)
    lines, numbers = lines[filled].reset_index(drop=True), numbers[filled]
    parts = lines.str.split(";", n=3, expand=True).reindex(columns=range(4)).fillna("")
    checks = sitelog.RowChecks(source, numbers, malformed)
    is_record = parts[0].str.fullmatch(_RECORD.pattern).to_numpy(dtype=bool) & parts[1].str.fullmatch(
        "[A-Za-z]"
    ).to_numpy(dtype=bool)
    checks.check(
        is_record,
        "record",
        "not an accounting record",
        lines.str.slice(0, 60),
        "is not 'MM/DD/YYYY HH:MM:SS;type;job id;message'",
    )
    keep = checks.keep()
    kinds = parts[1].to_numpy(dtype=object)
    deleted = parts[2][keep & (kinds == "D")].to_numpy(dtype=object)
    exits = keep & (kinds == "E")
    ids = parts[2][exits].reset_index(drop=True)
    messages = parts[3][exits].reset_index(drop=True)
    return _typed_exits(source, ids, messages, numbers[exits], malformed), deleted


def _integers(values: pd.Series, signed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(integers, -1 where empty; whether each value is empty or an integer)."""
    pattern = r"-?\d+" if signed else r"\d+"

    def convert(uniques: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        valid = uniques.str.fullmatch(pattern).to_numpy(dtype=bool)
        numbers = np.where(valid, pd.to_numeric(uniques.where(valid, "-1")), -1).astype(np.int64)
        return numbers, valid | (uniques == "").to_numpy()

    numbers, ok = sitelog.per_value(values, convert)
    return numbers, ok


def _durations(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(seconds of HH:MM:SS walltimes, -1 where empty; whether each value is empty or a duration)."""

    def convert(uniques: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        seconds = [sitelog.parse_duration(value) if value else -1 for value in uniques]
        return np.array([-1 if s is None else s for s in seconds], dtype=np.int64), np.array(
            [s is not None for s in seconds], dtype=bool
        )

    seconds, ok = sitelog.per_value(values, convert)
    return seconds, ok


def _chunks(spec: str, per_chunk: str) -> tuple[int, int]:
    """(processors, nodes) of a select (`2:ncpus=4+1:ncpus=2`) or nodes (`2:ppn=4+node5`) spec; (-1, -1) if empty."""
    if not spec:
        return -1, -1
    processors = nodes = 0
    for chunk in spec.split("+"):
        head, *resources = chunk.split(":")
        count = int(head) if head.isdigit() else 1
        each = next(
            (
                int(r.split("=", 1)[1])
                for r in resources
                if r.startswith(f"{per_chunk}=") and r.split("=", 1)[1].isdigit()
            ),
            1,
        )
        processors += count * each
        nodes += count
    return processors, nodes


def _exec_host(spec: str) -> tuple[int, int]:
    """(slots, hosts) of an exec_host list (`n1/0+n1/1` or PBS Pro's `n1/0*4+n2/0*4`); (-1, -1) if empty."""
    if not spec:
        return -1, -1
    slots, hosts = 0, set()
    for part in spec.split("+"):
        host, _, where = part.partition("/")
        hosts.add(host)
        slots += int(where.split("*", 1)[1]) if "*" in where and where.split("*", 1)[1].isdigit() else 1
    return slots, len(hosts)


def _spec_sizes(values: pd.Series, parse: Callable[[str], tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(processors, nodes) of each value, parsed once per distinct spec."""

    def convert(uniques: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        pairs = np.array([parse(value) for value in uniques], dtype=np.int64).reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1]

    processors, nodes = sitelog.per_value(values, convert)
    return processors, nodes


def _typed_exits(
    source: str, ids: pd.Series, messages: pd.Series, lines: np.ndarray, malformed: dict[str, int] | None
) -> pd.DataFrame:
    """E records checked and typed; the bad ones raise (strict) or go (lenient)."""
    checks = sitelog.RowChecks(source, lines, malformed)
    found = ids.str.extract(_JOB_ID)
    checks.check(found[0].notna().to_numpy(), "job id", "bad job id", ids, "is not a PBS job id (NUMBER[.server])")
    out: dict[str, np.ndarray] = {"line": lines, "pbs_id": ids.to_numpy(dtype=object)}
    out["array_parent"] = (found[1] == "[]").to_numpy(dtype=bool)
    times = {key: _key(messages, key) for key in TIME_KEYS}
    for key, values in times.items():
        out[key], ok = _integers(values)
        checks.check(ok, key, "bad timestamp", values, "is not a Unix time")
    for key in ("qtime", "end"):
        checks.check(out[key] >= 0, key, "missing field", times[key], "is missing: an E record has it")
    ends_first = (out["start"] > 0) & (out["end"] < out["start"])
    checks.check(~ends_first, "end", "ends before it starts", times["end"], "is before the job's start")
    values = _key(messages, "Resource_List.walltime")
    out["walltime"], ok = _durations(values)
    checks.check(ok, "Resource_List.walltime", "bad duration", values, "is not a duration ([[HH:]MM:]SS)")
    values = _key(messages, "Exit_status")
    out["exit"], ok = _integers(values, signed=True)
    checks.check(ok, "Exit_status", "bad exit status", values, "is not an integer")
    for key in ("Resource_List.ncpus", "total_execution_slots", "Resource_List.nodect", "unique_node_count"):
        values = _key(messages, key)
        out[key], ok = _integers(values)
        checks.check(ok, key, "not an integer", values, "is not a whole number")
    out["select_cpus"], out["select_nodes"] = _spec_sizes(
        _key(messages, "Resource_List.select"), lambda s: _chunks(s, "ncpus")
    )
    out["nodes_cpus"], out["nodes_nodes"] = _spec_sizes(
        _key(messages, "Resource_List.nodes"), lambda s: _chunks(s, "ppn")
    )
    out["host_cpus"], out["host_nodes"] = _spec_sizes(_key(messages, "exec_host"), _exec_host)
    keep = checks.keep()
    table = pd.DataFrame(out)
    for key in NAME_KEYS:
        table[key] = _key(messages, key).to_numpy(dtype=object)
    return table.loc[keep].reset_index(drop=True)


def _first_known(*columns: np.ndarray) -> np.ndarray:
    """Per row, the first of `columns` that is positive (-1 if none)."""
    result = np.full(len(columns[0]), -1, dtype=np.int64)
    for column in reversed(columns):
        result = np.where(column > 0, column, result)
    return result


def _site_jobs(table: pd.DataFrame, deleted_ids: set[str], options: sitelog.SiteLogOptions) -> sitelog.SiteJobs:
    """The replay's view of the exit records: each job's last, numbered in end order, with what was left out
    counted."""
    left_out: dict[str, int] = {}
    kept = _final_exits(table, deleted_ids, left_out)
    qtime, etime, start, end = (kept[key].to_numpy() for key in TIME_KEYS)
    walltime = kept["walltime"].to_numpy()
    notes: list[str] = []
    req_time = sitelog.requests_with_default(walltime, walltime < 0, "had no Resource_List.walltime", options, notes)
    size = _first_known(*(kept[column].to_numpy() for column in SIZE_COLUMNS[options.size]))
    number = np.arange(1, len(kept) + 1, dtype=np.int64)
    return sitelog.SiteJobs(
        job=number,
        arrival=sitelog.arrival_times(qtime, etime, start),
        start=start,
        end=end,
        run=end - start,
        req_time=req_time,
        alloc_procs=size,
        req_procs=size,
        status=sitelog.swf_status(
            completed=kept["exit"].to_numpy() == 0, cancelled=kept["pbs_id"].isin(deleted_ids).to_numpy()
        ),
        names={"job": (number, kept["pbs_id"]), **_names(kept)},
        resources={"nodes": np.maximum(_first_known(*(kept[key].to_numpy() for key in _ASKED_NODES)), 0)},
        left_out=left_out,
        notes=notes,
    )


def _final_exits(table: pd.DataFrame, deleted_ids: set[str], left_out: dict[str, int]) -> pd.DataFrame:
    """Each job's last exit record, if it started, in end order; array summaries, earlier exits and jobs that
    never started (with those deleted while queued, which have no exit record) are counted in `left_out`."""
    parent = table["array_parent"].to_numpy(dtype=bool)
    sitelog.count_left_out(left_out, "array summary record", parent)
    table = table.loc[~parent]
    later = table["pbs_id"].duplicated(keep="last").to_numpy()
    sitelog.count_left_out(left_out, "earlier exit record of the same job", later)
    table = table.loc[~later]
    never = table["start"].to_numpy() <= 0
    only_deleted = len(deleted_ids - set(table["pbs_id"]))  # a D record and no E record: deleted while queued
    sitelog.count_left_out(left_out, "cancelled before start", np.ones(only_deleted, dtype=bool))
    sitelog.count_unstarted(left_out, never, cancelled=table["pbs_id"].isin(deleted_ids).to_numpy())
    return table.loc[~never].sort_values(["end", "line"], kind="stable").reset_index(drop=True)


def _names(kept: pd.DataFrame) -> dict[str, pd.Series]:
    """The names behind the SWF fields: group ("project") is the account, else the project unless PBS's default,
    else the Unix group."""
    account = kept["account"].where(
        kept["account"] != "", kept["project"].where(kept["project"] != DEFAULT_PROJECT, "")
    )
    return {
        "user": kept["user"],
        "group": account.where(account != "", kept["group"]),
        "executable": kept["jobname"],
        "queue": kept["queue"],
    }
