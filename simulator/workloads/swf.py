"""Standard Workload Format (SWF) files: reading and writing.

Reading is vectorised (one `pandas.read_csv` over the whole file) because the
archive's traces run to hundreds of thousands of jobs. Only when that fast
parse shows something wrong does a slower line-by-line pass run, to name the
exact line and field (strict mode) or to drop the bad lines and count them by
reason (lenient mode). The records become a `Trace`
(`simulator.workloads.trace`), which applies the replay rules.
"""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from kernel.errors import TraceError
from simulator.workloads.trace import (
    FLOAT_COLUMNS,
    RECORD_COLUMNS,
    SWFHeader,
    Trace,
    count_reason,
    read_trace_bytes,
    utc_time,
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
#: One number, matched token by token: each part can match in one way only, so a check is linear in the
#: line's length (a whole-line pattern backtracks catastrophically on a line with a field too many).
_NUMBER_TOKEN = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_SUBMIT = RECORD_COLUMNS.index("submit")
_INT64_LIMIT = 2**63


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
            f"{utc_time(first):%Y-%m-%d}) while the header's UnixStartTime is {start} "
            f"({utc_time(start):%Y-%m-%d}): SWF submit times count seconds from UnixStartTime; subtract it from "
            "field 2, or remove the header line"
        )


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
