"""One way in for every trace format: SWF, Slurm sacct output, PBS/Torque accounting logs.

`read_trace` detects the format from the content (or is told), reads with the
same strict/lenient rules whatever the format, and returns a `Trace` of SWF
records, so everything downstream works unchanged. `convert_trace` writes any
of them as SWF, with the names behind the integer ids beside it.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from kernel.errors import TraceError, UsageError
from simulator.workloads.sitelog import SiteLogOptions, SizeUnit
from simulator.workloads.swf import read_swf, write_swf
from simulator.workloads.trace import GUESSED_MARK, RECORD_COLUMNS, SWFHeader, Trace

#: How much of a file format detection reads.
_SNIFF_BYTES = 64 * 1024
_PBS_RECORD = re.compile(r"\d{2}/\d{2}/\d{4} \d{2}:\d{2}:\d{2};[A-Za-z];")
_SWF_RECORD = re.compile(r"\s*[+-]?[\d.]+(\s+[+-]?[\d.eE+-]+)*\s*")
#: The header's MaxProcs line, and the reader's note on where it came from: both rewritten by a conversion.
_MAX_PROCS = re.compile(r"\s*;\s*(MaxProcs\s*:|Note: MaxProcs )", re.IGNORECASE)
TracePath = str | Path | Sequence[str | Path]


def detect_format(path: TracePath) -> str:
    """'swf', 'sacct' or 'pbs', from the first line that is not blank (a folder or a list of files: PBS logs)."""
    if not isinstance(path, str | Path):
        return "pbs"
    target = Path(path)
    if target.is_dir():
        return "pbs"
    try:
        with target.open("rb") as raw:
            head = raw.read(_SNIFF_BYTES)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(target, "rb") as unzipped:
                head = unzipped.read(_SNIFF_BYTES)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, EOFError) as error:
        raise TraceError(f"{path}: cannot be read ({error})") from None
    first, second, *_ = [
        *(line.strip() for line in head.decode("utf-8", "replace").splitlines() if line.strip()),
        "",
        "",
    ]
    from simulator.workloads.sacct import REQUIRED_FIELDS, SACCT_COMMAND, not_parsable

    if _PBS_RECORD.match(first):
        return "pbs"
    if "|" in first and set(REQUIRED_FIELDS) & set(first.split("|")):
        return "sacct"
    if not first or first.startswith(";") or _SWF_RECORD.fullmatch(first):
        return "swf"
    sacct_problem = not_parsable(first, second)
    if sacct_problem:
        raise TraceError(f"{path} line 1: {sacct_problem}; run: {SACCT_COMMAND}")
    raise TraceError(
        f"{path} line 1: {first[:80]!r} starts neither an SWF trace, sacct --parsable2 output nor a PBS "
        f"accounting log; name the format with --format ({', '.join(TRACE_FORMATS)})"
    )


def site_log_options(
    timezone: str | None = None, size: SizeUnit | None = None, default_request: int | None = None
) -> SiteLogOptions | None:
    """The options for a site log, or None when none was given (they mean nothing to an SWF trace)."""
    if timezone is None and size is None and default_request is None:
        return None
    defaults = SiteLogOptions()
    return SiteLogOptions(timezone or defaults.timezone, size or defaults.size, default_request)


def read_trace(
    path: TracePath,
    format: str | None = None,
    *,
    lenient: bool = False,
    timezone: str | None = None,
    size: SizeUnit | None = None,
    default_request: int | None = None,
) -> Trace:
    """Read a trace in any format: SWF, `sacct --parsable2` output, or PBS/Torque accounting logs.

    `format` is detected from the content when None. `lenient` skips
    malformed lines and counts them by reason (else the first is an error
    naming its file, line and field). A site log also takes `timezone` (of
    its local times; default UTC), `size` ("cores", the default, or "nodes")
    and `default_request` (seconds given to jobs without a time limit;
    default: they are skipped and counted). A PBS log may be a folder or a
    list of files.
    """
    chosen = format or detect_format(path)
    if chosen not in TRACE_FORMATS:
        raise UsageError(f"--format {chosen!r}: must be one of {', '.join(TRACE_FORMATS)}")
    return _READERS[chosen](path, lenient, site_log_options(timezone, size, default_request))


def _read_swf(path: TracePath, lenient: bool, options: SiteLogOptions | None) -> Trace:
    if options is not None:
        raise UsageError("--timezone, --size-unit and --default-request apply to sacct and PBS logs, not to SWF")
    if not isinstance(path, str | Path):
        raise UsageError("an SWF trace is one file")
    return read_swf(path, lenient=lenient)


def _read_sacct(path: TracePath, lenient: bool, options: SiteLogOptions | None) -> Trace:
    from simulator.workloads.sacct import read_sacct

    if not isinstance(path, str | Path):
        raise UsageError("sacct output is one file")
    return read_sacct(path, lenient=lenient, options=options)


def _read_pbs(path: TracePath, lenient: bool, options: SiteLogOptions | None) -> Trace:
    from simulator.workloads.pbs import read_pbs

    return read_pbs(path, lenient=lenient, options=options)


#: Each format's reader (a site log's is imported on first use).
_READERS: dict[str, Callable[[TracePath, bool, SiteLogOptions | None], Trace]] = {
    "swf": _read_swf,
    "sacct": _read_sacct,
    "pbs": _read_pbs,
}
TRACE_FORMATS = tuple(_READERS)


def names_path(out: str | Path) -> Path:
    """Where `convert_trace` writes the names behind the ids: beside OUT.swf, as OUT.names.csv."""
    target = Path(out)
    stem = target.name.removesuffix(".gz").removesuffix(".swf")
    return target.with_name(f"{stem}.names.csv")


def names_table(trace: Trace) -> pd.DataFrame:
    """`Trace.names` of SWF's fields as a table: field, id, name (the QOS, which SWF has no field for, is left out:
    its ids are in sacct's `partition` field already)."""
    rows = [
        (swf_field, number, name)
        for swf_field, ids in trace.names.items()
        if swf_field in RECORD_COLUMNS
        for number, name in sorted(ids.items())
    ]
    return pd.DataFrame(rows, columns=["field", "id", "name"])


def convert_trace(trace: Trace, out: str | Path, procs: int | None = None) -> Path | None:
    """Write `trace` as SWF at `out` (MaxProcs: `procs`, else the trace's), and its names beside it.

    Returns where the names went (None when the trace has none, as an SWF trace).
    """
    machine = trace.machine_size(procs)
    said = " (from --machine-procs)" if procs is not None else f" {GUESSED_MARK}: {machine.source})" * machine.guessed
    counts = ", ".join(f"{n} {why}" for why, n in sorted(trace.skipped.items())) or "none"
    lines = [line for line in trace.header.lines if not _MAX_PROCS.match(line)]
    lines += [
        f"; MaxProcs: {machine.procs}{said}",
        f"; Note: written by tsched trace convert on {datetime.now(tz=UTC).date().isoformat()}: "
        f"{len(trace.records)} records, {len(trace.jobs)} replayable; skipped: {counts}",
    ]
    if trace.malformed:
        lines.append(
            "; Note: malformed lines: " + ", ".join(f"{n} {why}" for why, n in sorted(trace.malformed.items()))
        )
    write_swf(trace, out, SWFHeader.from_lines(lines))
    if not trace.names:
        return None
    table_path = names_path(out)
    names_table(trace).to_csv(table_path, index=False)
    return table_path
