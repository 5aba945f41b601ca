"""The sacct reader on output a real Slurm 22.05 wrote (tests/data, captured by tests/slurm/workload.py).

The expectations come from reading the same file with the csv module, one
line at a time, following the documented mapping: an independent oracle,
not figures typed in.
"""

from __future__ import annotations

import csv
import gzip
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from kernel.errors import TraceError, UsageError
from kernel.jobs import RESOURCE_FIELD_NAMES
from simulator.workloads.formats import convert_trace, detect_format, names_path, read_trace
from simulator.workloads.sacct import SACCT_COMMAND, SACCT_FIELDS, read_sacct
from simulator.workloads.sitelog import SiteLogOptions
from simulator.workloads.swf import read_swf
from tsched.cli import main

DATA = Path(__file__).parent / "data"
SACCT = DATA / "slurm-22.05.sacct"
SACCT_WITH_STEPS = DATA / "slurm-22.05-steps.sacct"


def rows(path: Path = SACCT) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file, delimiter="|", quoting=csv.QUOTE_NONE))


def unix(text: str, zone: str = "UTC") -> int:
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=ZoneInfo(zone)).timestamp())


def expected_jobs(zone: str = "UTC") -> dict[int, dict[str, int]]:
    """Per job that ran (its last attempt), what its SWF record must say, from the csv module's reading."""
    last: dict[int, dict[str, str]] = {}
    for row in rows():
        last[int(row["JobIDRaw"])] = row  # sacct lists a requeued job's attempts in order
    jobs = {}
    for job, row in last.items():
        if row["Start"] in ("None", "Unknown"):
            continue
        eligible = unix(row["Eligible"], zone)
        jobs[job] = {
            "arrival": eligible,
            "wait": unix(row["Start"], zone) - eligible,
            "run": int(row["ElapsedRaw"]),
            "alloc_procs": int(row["AllocCPUS"]),
            "req_procs": int(row["ReqCPUS"]),
            "req_time": int(row["TimelimitRaw"]) * 60 if row["TimelimitRaw"].isdigit() else -1,
            "status": {"COMPLETED": 1, "CANCELLED": 5}.get(row["State"].split()[0], 0),
            "uid": int(row["UID"]),
        }
    return jobs


def test_every_job_slurm_ran_is_a_record_with_its_times_sizes_and_request():
    trace = read_sacct(SACCT)
    expected = expected_jobs()
    records = trace.records.set_index("job")
    assert sorted(records.index) == sorted(expected)
    assert trace.header.unix_start_time == 0  # a site log keeps Unix times: one clock with the live scheduler
    for job, want in expected.items():
        got = records.loc[job]
        assert got["submit"] == want["arrival"], job
        for name in ("wait", "run", "alloc_procs", "req_procs", "req_time", "status"):
            assert got[name] == want[name], (job, name)
        assert got["user"] == want["uid"]


def test_what_was_left_out_is_counted_by_reason():
    all_rows = rows()
    ids = [row["JobIDRaw"] for row in all_rows]
    never_started = [r for r in all_rows if r["Start"] == "None" and r["State"].startswith("CANCELLED")]
    no_limit = [r for r in all_rows if r["TimelimitRaw"] in ("UNLIMITED", "Partition_Limit") and r["Start"] != "None"]
    trace = read_sacct(SACCT)
    assert trace.skipped == {
        "earlier attempt of a requeued job": len(ids) - len(set(ids)),
        "cancelled before start": len(never_started),
        "no request": len(no_limit),
    }
    assert min(trace.skipped.values()) > 0  # the fixture has each case
    assert len(trace.jobs) + sum(trace.skipped.values()) == len(all_rows)
    assert trace.malformed == {}


def test_a_job_cancelled_while_pending_with_a_start_time_never_started(tmp_path):
    """Slurm 22.05 also logs such a job with Start = End (seen in the live test): no AllocTRES tells."""
    lines = SACCT.read_text().splitlines()
    header = lines[0].split("|")
    pending = next(number for number, row in enumerate(rows(), start=2) if row["Start"] == "None")
    values = dict(zip(header, lines[pending - 1].split("|"), strict=True))
    values["Start"] = values["End"]
    lines[pending - 1] = "|".join(values[name] for name in header)
    path = tmp_path / "variant.sacct"
    path.write_text("\n".join(lines) + "\n")
    trace = read_sacct(path)
    assert trace.skipped == read_sacct(SACCT).skipped
    pdt.assert_frame_equal(trace.records, read_sacct(SACCT).records)


def test_job_steps_are_left_out_and_counted():
    steps = [row for row in rows(SACCT_WITH_STEPS) if "." in row["JobIDRaw"]]
    with_steps = read_sacct(SACCT_WITH_STEPS)
    pdt.assert_frame_equal(with_steps.records, read_sacct(SACCT).records)
    assert with_steps.skipped["job step (not an allocation)"] == len(steps) > 0


def test_timeouts_are_kept_and_flagged_censored():
    timeouts = {int(r["JobIDRaw"]) for r in rows() if r["State"] == "TIMEOUT"}
    jobs = read_sacct(SACCT).jobs.set_index("job_id")
    assert timeouts and set(jobs.index[jobs["censored"]]) == timeouts
    assert (jobs.loc[list(timeouts), "t_act"] == jobs.loc[list(timeouts), "t_req"]).all()
    assert (jobs.loc[list(timeouts), "status"] == 0).all()


def test_names_become_stable_ids_and_the_mapping_is_kept(tmp_path):
    trace = read_sacct(SACCT)
    users = {int(r["UID"]): r["User"] for r in rows()}
    assert trace.names["user"] == users
    accounts = sorted({r["Account"] for r in rows()})
    assert trace.names["group"] == dict(enumerate(accounts, start=1))
    queue = trace.records.set_index("job")["queue"]
    partitions = {int(r["JobIDRaw"]): r["Partition"] for r in rows()}
    assert all(trace.names["queue"][queue[job]] == partitions[job] for job in queue.index)
    reversed_lines = SACCT.read_text().splitlines()
    shuffled = "\n".join([reversed_lines[0], *reversed(reversed_lines[1:])]) + "\n"
    # the same names give the same ids whatever the order of the lines
    other = tmp_path / "reversed.sacct"
    other.write_text(shuffled)
    assert read_sacct(other).names == trace.names


def test_time_zone_of_local_times(tmp_path):
    utc = read_sacct(SACCT)
    berlin = read_sacct(SACCT, options=SiteLogOptions(timezone="Europe/Berlin"))
    first = int(utc.jobs["submit"].min())
    offset = int(ZoneInfo("Europe/Berlin").utcoffset(datetime.fromtimestamp(first, tz=UTC)).total_seconds())
    assert berlin.header.time_zone_string == "Europe/Berlin"
    moved = utc.jobs.assign(submit=utc.jobs["submit"] - offset, end=utc.jobs["end"] - offset)
    pdt.assert_frame_equal(berlin.jobs, moved)  # Unix times: every job moves by the zone's offset


@pytest.mark.parametrize(
    ("local", "utc"),
    [
        ("2024-10-27T02:30:00", "2024-10-27T00:30:00"),  # twice that night: read as summer time
        ("2024-03-31T02:30:00", "2024-03-31T01:00:00"),  # never that night: moved to 03:00 summer time
        ("2024-07-01T12:00:00", "2024-07-01T10:00:00"),
    ],
)
def test_summer_time_edges(tmp_path, local, utc):
    lines = SACCT.read_text().splitlines()
    header = lines[0].split("|")
    row = dict(zip(header, lines[1].split("|"), strict=True))
    row.update(Submit=local, Eligible=local, Start="2024-11-01T00:00:00", End="2024-11-01T00:01:00", ElapsedRaw="60")
    path = tmp_path / "edge.sacct"
    path.write_text(lines[0] + "\n" + "|".join(row[name] for name in header) + "\n")
    trace = read_sacct(path, options=SiteLogOptions(timezone="Europe/Berlin"))
    assert int(trace.records["submit"].iloc[0]) == unix(utc)


def write_with(tmp_path: Path, line: int, field: str, value: str | None) -> Path:
    """The fixture with one field of one line (1-based) replaced, or removed when `value` is None."""
    lines = SACCT.read_text().splitlines()
    header = lines[0].split("|")
    values = lines[line - 1].split("|")
    if value is None:
        del values[header.index(field)]
    else:
        values[header.index(field)] = value
    lines[line - 1] = "|".join(values)
    path = tmp_path / "bad.sacct"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("field", "value", "message", "reason"),
    [
        ("Start", "2024-13-01T00:00:00", "field Start: '2024-13-01T00:00:00' is not a time", "bad timestamp"),
        ("Submit", "Unknown", "field Submit: 'Unknown' is not a time", "bad timestamp"),
        ("State", "RUNNNING", "field State: 'RUNNNING' is not a Slurm job state", "unknown state"),
        ("TimelimitRaw", "1:00:00", "field TimelimitRaw: '1:00:00' is not minutes", "bad time limit"),
        ("AllocCPUS", "two", "field AllocCPUS: 'two' is not a whole number", "not an integer"),
        ("JobIDRaw", "12x", "field JobIDRaw: '12x' is not a job id", "bad job id"),
        (
            "End",
            "2000-01-01T00:00:00",
            "field End: '2000-01-01T00:00:00' is before the job's Start",
            "ends before it starts",
        ),
        (
            "Flags",
            None,
            "field JobName (24 of 24): missing (the line has 23 fields, the header 24)",
            "wrong field count",
        ),
    ],
)
def test_a_malformed_line_names_file_line_and_field_or_is_counted(tmp_path, field, value, message, reason):
    path = write_with(tmp_path, 17, field, value)
    with pytest.raises(TraceError) as error:
        read_trace(path)
    assert str(error.value).startswith(f"{path} line 17, {message}")
    lenient = read_trace(path, lenient=True)
    assert lenient.malformed == {reason: 1}
    assert len(lenient.records) == len(read_sacct(SACCT).records) - 1


def test_the_earliest_bad_line_is_reported(tmp_path):
    path = write_with(tmp_path, 40, "State", "WHATEVER")
    lines = path.read_text().splitlines()
    lines[9] = lines[9].replace("|COMPLETED|", "|DONE|", 1)
    lines[4] = lines[4].rsplit("|", 3)[0]  # three fields short
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"line 5, field ExitCode \(22 of 24\): missing"):
        read_sacct(path)
    assert read_sacct(path, lenient=True).malformed == {"wrong field count": 1, "unknown state": 2}


def test_a_bar_in_a_job_name_stays_in_the_name(tmp_path):
    path = write_with(tmp_path, 20, "JobName", "pre|post")
    trace = read_sacct(path)
    assert "pre¦post" in trace.names["executable"].values()
    pdt.assert_frame_equal(trace.jobs.drop(columns="executable"), read_sacct(SACCT).jobs.drop(columns="executable"))


def test_a_header_without_the_needed_fields(tmp_path):
    path = tmp_path / "short.sacct"
    path.write_text("JobID|User|State\n1|alice|COMPLETED\n")
    no = r"line 1: no Submit, Start, End, TimelimitRaw or Timelimit, AllocCPUS or NCPUS field"
    with pytest.raises(TraceError, match=no):
        read_sacct(path, options=SiteLogOptions())
    with pytest.raises(TraceError, match="is this `sacct --parsable2` output"):
        read_trace(path, "sacct")


def test_default_request_and_sizes_in_nodes():
    no_limit = {int(r["JobIDRaw"]) for r in rows() if r["TimelimitRaw"] == "UNLIMITED" and r["Start"] != "None"}
    trace = read_trace(SACCT, default_request=86400, size="nodes")
    jobs = trace.jobs.set_index("job_id")
    assert no_limit and (jobs.loc[list(no_limit), "t_req"] == 86400).all()
    assert "no request" not in trace.skipped
    nodes = {int(r["JobIDRaw"]): int(r["NNodes"]) for r in rows()}
    assert all(jobs.loc[job, "procs"] == nodes[job] for job in jobs.index)
    assert any(count > 1 for count in nodes.values())


def test_gzip_and_format_detection(tmp_path):
    packed = tmp_path / "site.sacct.gz"
    packed.write_bytes(gzip.compress(SACCT.read_bytes()))
    assert detect_format(SACCT) == detect_format(packed) == "sacct"
    pdt.assert_frame_equal(read_trace(packed).records, read_sacct(SACCT).records)
    with pytest.raises(UsageError, match="apply to sacct and PBS logs"):
        read_trace(tmp_path / "x.swf", "swf", timezone="UTC")
    with pytest.raises(UsageError, match="not a time zone"):
        read_trace(SACCT, timezone="Mars/Olympus")
    unknown = tmp_path / "notes.txt"
    unknown.write_text("hello world\n")
    with pytest.raises(TraceError, match=r"notes\.txt line 1: 'hello world' starts neither"):
        read_trace(unknown)


def test_convert_writes_swf_that_reads_back_as_the_same_jobs(tmp_path):
    trace = read_sacct(SACCT)
    out = tmp_path / "site.swf"
    names = convert_trace(trace, out, procs=16)
    back = read_swf(out)
    # SWF has no field for ReqTRES's nodes and GPUs; the memory goes through its field 10, per processor
    swf_fields = [column for column in trace.jobs.columns if column not in RESOURCE_FIELD_NAMES] + ["memory_mb"]
    pdt.assert_frame_equal(back.jobs, trace.jobs[swf_fields])
    assert back.jobs["memory_mb"].max() > 0
    assert back.header.max_procs == 16 and back.header.unix_start_time == trace.header.unix_start_time
    assert back.header.time_zone_string == "UTC"
    assert any("trace convert" in line for line in back.header.lines)
    assert names == names_path(out) == tmp_path / "site.names.csv"
    table = pd.read_csv(names)
    assert set(table["field"]) == {"user", "group", "executable", "queue", "partition"}
    assert (
        dict(zip(table.loc[table["field"] == "user", "id"], table.loc[table["field"] == "user", "name"], strict=True))
        == (trace.names["user"])
    )


def test_machine_size_is_the_peak_use_in_the_log():
    trace = read_sacct(SACCT)
    jobs = trace.jobs
    start = jobs["submit"] + jobs["wait"]
    end = start + jobs["run"]
    in_use = [int(jobs.loc[(start <= t) & (end > t), "procs"].sum()) for t in np.unique(start)]
    assert trace.header.max_procs == max(in_use)


def test_cli_reads_sacct_everywhere(tmp_path, capsys):
    assert main(["trace", "info", str(SACCT), "--json", str(tmp_path / "info.json")]) == 0
    assert "cancelled before start" in capsys.readouterr().out
    assert main(["predict-eval", "--trace", str(SACCT), "--estimator", "percentile"]) == 0
    assert f"{len(read_sacct(SACCT).jobs)} jobs" in capsys.readouterr().out
    assert main(["trace", "convert", str(SACCT), "--out", str(tmp_path / "c.swf"), "--timezone", "Europe/Berlin"]) == 0
    assert read_swf(tmp_path / "c.swf").header.time_zone_string == "Europe/Berlin"
    bad = write_with(tmp_path, 30, "State", "FINE")
    capsys.readouterr()
    assert main(["simulate", "--trace", str(bad)]) == 2
    assert (
        capsys.readouterr().err.strip() == f"tsched: error: {bad} line 30, field State: 'FINE' is not a Slurm job state"
    )
    assert main(["simulate", "--trace", str(bad), "--lenient"]) == 0
    out = tmp_path / "report"
    assert (
        main(
            [
                "evaluate",
                "--trace",
                str(SACCT),
                "--estimators",
                "percentile",
                "--policies",
                "fcfs",
                "--modes",
                "regular",
                "--workers",
                "1",
                "--in-process",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert (out / "report.md").exists()


def test_the_documented_command_names_the_documented_fields():
    assert SACCT_COMMAND.endswith("--format=" + ",".join(SACCT_FIELDS))
    assert list(rows()[0]) == list(SACCT_FIELDS)  # the fixture was captured with exactly that command


def test_a_log_without_jobs(tmp_path):
    header_only = tmp_path / "quiet.sacct"
    header_only.write_text(SACCT.read_text().splitlines()[0] + "\n")
    assert read_sacct(header_only).records.empty
    only_steps = tmp_path / "steps.sacct"
    steps = [line for line in SACCT_WITH_STEPS.read_text().splitlines() if ".batch|" in line]
    only_steps.write_text("\n".join([SACCT.read_text().splitlines()[0], *steps]) + "\n")
    trace = read_sacct(only_steps)
    assert trace.records.empty and trace.skipped == {"job step (not an allocation)": len(steps)}
    empty = tmp_path / "empty.sacct"
    empty.write_text("\n\n")
    with pytest.raises(TraceError, match="empty file"):
        read_sacct(empty)
