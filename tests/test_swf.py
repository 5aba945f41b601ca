"""The SWF reader and writer: header, replay rules, round trip, malformed input, months, real traces."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.errors import TraceError, UsageError
from simulator.workloads.info import format_trace_info, trace_info
from simulator.workloads.swf import FIELD_LABELS, read_swf, write_swf
from simulator.workloads.trace import RECORD_COLUMNS, SWFHeader, Trace

HEADER = """\
; Version: 2.2
; Computer: test machine
; MaxJobs: 4
;   maxprocs:   64
; MaxNodes: 32 (batch partition; 48 total)
; UnixStartTime: 1704067200
; TimeZoneString: Europe/Stockholm
  ; an indented comment is a comment too
;
"""
DEFAULTS = {
    "job": 1,
    "submit": 0,
    "wait": 0,
    "run": 100,
    "alloc_procs": 4,
    "avg_cpu": -1,
    "used_mem": -1,
    "req_procs": 4,
    "req_time": 200,
    "req_mem": -1,
    "status": 1,
    "user": 1,
    "group": 1,
    "executable": 1,
    "queue": 1,
    "partition": 1,
    "preceding_job": -1,
    "think_time": -1,
}
JANUARY_15 = 14 * 86400
FEBRUARY_3 = 33 * 86400


def record(**fields) -> str:
    """One SWF line, the DEFAULTS overridden by `fields`."""
    values = {**DEFAULTS, **fields}
    return "  ".join(str(values[name]) for name in RECORD_COLUMNS)


def swf_file(tmp_path: Path, lines: list[str], name: str = "trace.swf", header: str = HEADER) -> Path:
    path = tmp_path / name
    path.write_text(header + "".join(line + "\n" for line in lines))
    return path


def test_header_fields_are_parsed_and_every_comment_kept(tmp_path):
    trace = read_swf(swf_file(tmp_path, [record()]))
    assert trace.header.max_procs == 64  # key case and spacing do not matter
    assert trace.header.max_nodes == 32  # the leading integer, text after it ignored
    assert trace.header.unix_start_time == 1704067200
    assert trace.header.time_zone_string == "Europe/Stockholm"
    assert trace.header.lines == HEADER.splitlines()


def test_missing_header_fields_are_none():
    header = SWFHeader.from_lines(["; Version: 2.2", ";MaxNodes: 1524"])
    assert (header.max_procs, header.max_nodes, header.unix_start_time, header.time_zone_string) == (
        None,
        1524,
        None,
        None,
    )


def test_replay_rules(tmp_path):
    trace = read_swf(
        swf_file(
            tmp_path,
            [
                record(job=1, submit=50, alloc_procs=8, req_procs=16),  # size from field 5
                record(job=2, submit=10, alloc_procs=-1, req_procs=6),  # size from field 8
                record(job=3, submit=10, wait=5, run=500, req_time=300),  # run beyond request: capped
                record(job=4, run=-1),  # unknown runtime
                record(job=5, alloc_procs=0, req_procs=-1),  # no size
                record(job=6, req_time=-1),  # no request
                record(job=7, run=-1, req_time=0),  # two faults, counted once
                record(job=8, submit=20, wait=-1, run=40),  # unknown wait
            ],
        )
    )
    assert len(trace.records) == 8
    assert trace.skipped == {"unknown runtime": 2, "no size": 1, "no request": 1}
    jobs = trace.jobs.set_index("job_id")
    assert trace.jobs["job_id"].tolist() == [2, 3, 8, 1]  # by submit, then job id
    assert jobs.loc[1, "procs"] == 8 and jobs.loc[2, "procs"] == 6
    assert (jobs.loc[3, "run"], jobs.loc[3, "t_act"], jobs.loc[3, "end"]) == (500, 300, 10 + 5 + 300)
    assert jobs.loc[8, "end"] == 20 + 40
    assert list(trace.jobs.columns) == [
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
    ]
    assert all(trace.jobs[name].dtype == np.int64 for name in trace.jobs.columns if name != "censored")
    assert trace.jobs.set_index("job_id")["censored"].to_dict() == {2: False, 3: True, 8: False, 1: False}


def test_record_types(tmp_path):
    trace = read_swf(swf_file(tmp_path, [record(avg_cpu="552.21"), record(job=2, req_time="3600.0")]))
    assert trace.records["avg_cpu"].dtype == np.float64 and trace.records["used_mem"].dtype == np.float64
    assert trace.records["avg_cpu"].iloc[0] == pytest.approx(552.21)
    assert all(trace.records[name].dtype == np.int64 for name in RECORD_COLUMNS if name not in ("avg_cpu", "used_mem"))
    assert trace.records["req_time"].iloc[1] == 3600


def test_gzip_and_plain_read_the_same(tmp_path):
    plain = swf_file(tmp_path, [record(job=i, submit=i) for i in range(1, 5)])
    zipped = tmp_path / "trace.swf.gz"
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = read_swf(plain), read_swf(zipped)
    pdt.assert_frame_equal(a.records, b.records)
    assert a.header == b.header
    assert b.path == str(zipped)


@pytest.mark.parametrize("name", ["copy.swf", "copy.swf.gz"])
def test_round_trip(tmp_path, name):
    source = swf_file(
        tmp_path,
        [
            record(job=1, avg_cpu="552.21", used_mem="1e3"),
            record(job=2, submit=7, run=-1, avg_cpu="0.1"),
            record(job=3, submit=9, alloc_procs=-1),
        ],
    )
    first = read_swf(source)
    write_swf(first, tmp_path / name)
    second = read_swf(tmp_path / name)
    pdt.assert_frame_equal(first.records, second.records)
    pdt.assert_frame_equal(first.jobs, second.jobs)
    assert second.header.lines == first.header.lines
    assert second.skipped == first.skipped


SWF_INTEGERS = st.integers(min_value=-1, max_value=2**40)
#: A submit time counts from the trace's start: never negative.
SUBMIT_TIMES = st.integers(min_value=0, max_value=2**40)
SWF_FRACTIONS = st.one_of(
    st.integers(-1, 10**6).map(float), st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            *[
                SWF_FRACTIONS if name in ("avg_cpu", "used_mem") else SUBMIT_TIMES if name == "submit" else SWF_INTEGERS
                for name in RECORD_COLUMNS
            ]
        ),
        min_size=1,
        max_size=20,
    )
)
def test_any_records_round_trip(tmp_path, rows):
    records = pd.DataFrame(rows, columns=list(RECORD_COLUMNS)).astype(
        {name: np.float64 if name in ("avg_cpu", "used_mem") else np.int64 for name in RECORD_COLUMNS}
    )
    write_swf(records, tmp_path / "any.swf", SWFHeader.from_lines(["; MaxProcs: 8"]))
    again = read_swf(tmp_path / "any.swf")
    pdt.assert_frame_equal(again.records, records)
    assert again.header.max_procs == 8


def test_write_records_frame_with_separate_header(tmp_path, small_trace):
    write_swf(small_trace.records, tmp_path / "out.swf", small_trace.header)
    again = read_swf(tmp_path / "out.swf")
    pdt.assert_frame_equal(again.records, small_trace.records)
    assert again.header == small_trace.header


def test_writer_rejects_records_missing_fields(tmp_path, small_trace):
    with pytest.raises(ValueError, match="think_time"):
        write_swf(small_trace.records.drop(columns="think_time"), tmp_path / "out.swf")


BAD_LINES = [
    (record(job=2)[: record(job=2).rindex(" ")].rstrip(), 18, "wrong field count"),  # 17 fields
    (record(job=2) + "  7", 19, "wrong field count"),  # 19 fields
    (record(job=2, req_time="abc"), 9, "not a number"),
    (record(job=2, submit="12x"), 2, "not a number"),
    (record(job=2, run="1.5"), 4, "not an integer"),
    (record(job=2, user="nan"), 12, "not a number"),
]


@pytest.mark.parametrize(("bad", "field", "reason"), BAD_LINES)
def test_malformed_line_is_named(tmp_path, bad, field, reason):
    path = swf_file(tmp_path, [record(job=1), "", bad, record(job=3)])
    header_lines = HEADER.count("\n")
    with pytest.raises(TraceError) as raised:
        read_swf(path)
    message = str(raised.value)
    assert str(path) in message
    assert f"line {header_lines + 3}," in message
    assert f"field {field}" in message
    if field <= 18:
        assert FIELD_LABELS[field - 1] in message


@pytest.mark.parametrize(("bad", "field", "reason"), BAD_LINES)
def test_lenient_skips_and_counts(tmp_path, bad, field, reason):
    path = swf_file(tmp_path, [record(job=1), bad, record(job=3), bad])
    trace = read_swf(path, lenient=True)
    assert trace.malformed == {reason: 2}
    assert trace.records["job"].tolist() == [1, 3]


def test_bad_header_value(tmp_path):
    path = swf_file(tmp_path, [record()], header="; Version: 2.2\n; MaxProcs: many\n")
    with pytest.raises(TraceError, match=r"trace\.swf line 2, header field MaxProcs: 'many' is not a number"):
        read_swf(path)
    lenient = read_swf(path, lenient=True)
    assert lenient.header.max_procs is None
    assert lenient.malformed == {"bad header value": 1}
    assert len(lenient.jobs) == 1


def test_missing_file_and_damaged_gzip(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        read_swf(tmp_path / "absent.swf")
    damaged = tmp_path / "damaged.swf.gz"
    damaged.write_bytes(gzip.compress(record().encode())[:-6])
    with pytest.raises(TraceError, match=r"damaged\.swf\.gz"):
        read_swf(damaged)


def test_empty_trace(tmp_path):
    trace = read_swf(swf_file(tmp_path, []))
    assert trace.records.empty and trace.jobs.empty
    assert list(trace.records.columns) == list(RECORD_COLUMNS)
    assert trace.month_bounds() == []


def test_machine_size_precedence(tmp_path):
    lines = [record(alloc_procs=12)]
    assert read_swf(swf_file(tmp_path, lines)).machine_procs() == 64
    assert read_swf(swf_file(tmp_path, lines)).machine_procs(override=100) == 100
    assert read_swf(swf_file(tmp_path, lines, header="; MaxNodes: 32\n")).machine_procs() == 32
    assert read_swf(swf_file(tmp_path, lines, header="")).machine_procs() == 12
    with pytest.raises(UsageError, match="positive processor count"):
        read_swf(swf_file(tmp_path, lines)).machine_procs(override=0)


@pytest.fixture
def two_month_trace(tmp_path) -> Trace:
    """Jobs on 2024-01-15 and 2024-02-03 (UTC); one February record cannot be replayed."""
    return read_swf(
        swf_file(
            tmp_path,
            [
                record(job=1, submit=JANUARY_15, run=3600),
                record(job=2, submit=JANUARY_15 + 60),
                record(job=3, submit=FEBRUARY_3),
                record(job=4, submit=FEBRUARY_3, run=-1),
            ],
        )
    )


def test_month_bounds(two_month_trace):
    assert two_month_trace.month_bounds() == [("2024-01", 0, 31 * 86400), ("2024-02", 31 * 86400, 60 * 86400)]


def test_select_month(two_month_trace):
    february = two_month_trace.select_month("2024-02")
    assert february.jobs["job_id"].tolist() == [3]
    assert february.skipped == {"unknown runtime": 1}
    assert february.header == two_month_trace.header
    assert two_month_trace.select_month("2024-01").jobs["job_id"].tolist() == [1, 2]


@pytest.mark.parametrize(
    ("month", "complaint"),
    [("2024-3", "YYYY-MM"), ("2024-13", "YYYY-MM"), ("March", "YYYY-MM"), ("2024-03", "no jobs submitted in 2024-03")],
)
def test_select_month_rejects(two_month_trace, month, complaint):
    with pytest.raises(TraceError, match=complaint):
        two_month_trace.select_month(month)


def test_months_without_unix_start_time_count_from_the_epoch(tmp_path):
    trace = read_swf(swf_file(tmp_path, [record(submit=40 * 86400)], header=""))
    assert trace.month_bounds() == [("1970-02", 31 * 86400, 59 * 86400)]


def test_jobs_before(two_month_trace):
    ends = two_month_trace.jobs.set_index("job_id")["end"]
    assert two_month_trace.jobs_before(ends[2]).job_id.tolist() == [2]
    assert two_month_trace.jobs_before(ends[1]).job_id.tolist() == [1, 2]


def test_trace_info(two_month_trace):
    info = trace_info(two_month_trace)
    assert (info["records"], info["jobs"], info["procs"], info["users"], info["groups"]) == (4, 3, 64, 1, 1)
    assert info["skipped"] == {"unknown runtime": 1}
    assert info["span"]["start_utc"].startswith("2024-01-15T00:00:00")
    requests = info["requests"]
    assert requests["NA"] == 1.0
    assert requests["mean_ratio"] == pytest.approx(np.mean([200 / 200, 100 / 200, 100 / 200]))
    text = format_trace_info(info)
    assert "3 replayable jobs" in text and "1 unknown runtime" in text


def _independent_replayable_count(path: Path) -> int:
    """The replay rules applied to a plain pandas parse, to check the reader against."""
    raw = pd.read_csv(path, sep=r"\s+", comment=";", header=None)
    size = raw[4].where(raw[4] > 0, raw[7])
    return int(((raw[3] >= 0) & (size > 0) & (raw[8] > 0)).sum())


def test_sdsc_sp2(traces_dir, tmp_path):
    path = traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"
    trace = read_swf(path)
    assert len(trace.records) == 59_715  # the header's MaxRecords
    assert len(trace.jobs) == _independent_replayable_count(path) == 54_009
    assert trace.skipped == {"unknown runtime": 5_671, "no request": 35}
    assert trace.machine_procs() == 128
    assert trace.month_bounds()[0][0] == "1998-05" and trace.month_bounds()[-1][0] == "2000-04"
    write_swf(trace, tmp_path / "copy.swf.gz")
    again = read_swf(tmp_path / "copy.swf.gz")
    pdt.assert_frame_equal(again.records, trace.records)
    assert again.header.lines == trace.header.lines


@pytest.mark.parametrize(
    ("name", "records", "procs"), [("HPC2N-2002-2.2-cln", 202_871, 240), ("CTC-SP2-1996-3.1-cln", 77_222, 338)]
)
def test_other_real_traces(traces_dir, name, records, procs):
    trace = read_swf(traces_dir / f"{name}.swf.gz")
    assert len(trace.records) == records
    assert trace.machine_procs() == procs
    assert len(trace.jobs) + sum(trace.skipped.values()) == records


def test_a_negative_submit_time_is_a_malformed_line(tmp_path: Path) -> None:
    path = swf_file(tmp_path, [record(job=1), record(job=2, submit=-5), record(job=3, submit=20)])
    with pytest.raises(TraceError, match=r"line 11, field 2 \(submit time\): '-5' is negative"):
        read_swf(path)
    trace = read_swf(path, lenient=True)
    assert trace.malformed == {"negative submit time": 1} and list(trace.jobs["job_id"]) == [1, 3]


def test_absolute_unix_submit_times_under_a_unix_start_time_are_refused(tmp_path: Path) -> None:
    path = swf_file(tmp_path, [record(job=1, submit=1704067300)])
    with pytest.raises(TraceError, match=r"absolute Unix times \(the first is 1704067300, 2024-01-01\)"):
        read_swf(path)
    assert len(read_swf(swf_file(tmp_path, [record(submit=1704067300)], name="plain.swf", header="")).jobs) == 1


def test_the_line_check_is_linear_in_the_line_length(tmp_path: Path) -> None:
    """A whole-line pattern took seconds per rejected line of 19 or 21 fields; 100,000 of them took hours."""
    wide = tmp_path / "wide.swf"
    wide.write_text((" ".join(["12345678901"] * 21) + "\n") * 50_000 + (" ".join(["12345678901"] * 19) + "\n") * 50_000)
    program = f"from simulator.workloads.swf import read_swf; print(read_swf({str(wide)!r}, lenient=True).malformed)"
    finished = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    assert finished.stdout.strip() == "{'wrong field count': 100000}"


def test_a_trace_without_a_replayable_job_is_refused_with_the_reasons(tmp_path: Path) -> None:
    path = swf_file(tmp_path, [record(job=1, req_time=-1), record(job=2, req_time=-1)])
    trace = read_swf(path)
    with pytest.raises(TraceError, match=r"no job can be replayed \(skipped: 2 no request\)"):
        trace.require_jobs()
