"""The PBS Pro / OpenPBS / Torque accounting-log reader.

PBS is not packaged for this project's machines, so these logs are written
here to the record format of the PBS Pro Reference Guide ("Accounting Log")
and the Torque Administrator Guide ("Accounting Records"): `date;type;id;message`,
with one job's keys as each documents them.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas.testing as pdt
import pytest

from kernel.errors import TraceError
from simulator.workloads.formats import detect_format, read_trace
from simulator.workloads.pbs import read_pbs
from simulator.workloads.sitelog import SiteLogOptions
from tsched.cli import main

DAY = 1_709_510_400  # 2024-03-04 00:00 UTC
#: The exit record in the Torque guide's example, verbatim.
TORQUE_GUIDE_EXAMPLE = (
    "06/06/2005 14:07:17;E;407.ign1.zeta2.org;user=guest group=guest jobname=STDIN queue=batch "
    "ctime=1118087915 qtime=1118087915 etime=1118087915 start=1118088366 exec_host=ign1.zeta2.org/0 "
    "Resource_List.nodect=1 Resource_List.nodes=1 Resource_List.walltime=00:16:40 session=6365 "
    "end=1118088437 Exit_status=0 resources_used.cput=00:00:00 resources_used.mem=3068kb "
    "resources_used.vmem=13708kb resources_used.walltime=00:01:11"
)


def record(kind: str, job: str, **keys: str | int) -> str:
    message = " ".join(f"{key.replace('__', '.')}={value}" for key, value in keys.items())
    return f"03/04/2024 12:00:00;{kind};{job};{message}"


def exit_record(
    job: str,
    qtime: int,
    start: int,
    end: int,
    walltime: str = "01:00:00",
    etime: int | None = None,
    exit_status: int = 0,
    **keys: str | int,
) -> str:
    """An E record; `walltime=""` leaves Resource_List.walltime out."""
    fields: dict[str, str | int] = {"user": "alice", "group": "users", "queue": "workq", "jobname": "run", **keys}
    fields.update(qtime=qtime, etime=qtime if etime is None else etime, start=start, end=end)
    if walltime:
        fields["Resource_List__walltime"] = walltime
    fields["Exit_status"] = exit_status
    return record("E", job, **fields)


def pbs_pro_day() -> list[str]:
    """A day of a PBS Pro server: queue and start records, exits, an array, deletions, a rerun."""
    t = DAY
    return [
        record("Q", "1.pbs", queue="workq"),
        record("S", "1.pbs", user="alice", start=t + 60),
        exit_record(
            "1.pbs",
            t,
            t + 60,
            t + 3000,
            Resource_List__ncpus=8,
            Resource_List__nodect=2,
            Resource_List__select="2:ncpus=4",
            account="climate",
            project="_pbs_project_default",
        ),
        exit_record(
            "2.pbs",
            t + 10,
            t + 100,
            t + 200,
            user="bob",
            group="chem",
            project="catalysis",
            Resource_List__select="2:ncpus=4:mem=1gb+1:ncpus=2",
            exit_status=1,
        ),
        exit_record("3[1].pbs", t + 20, t + 30, t + 90, Resource_List__ncpus=1),
        exit_record("3[2].pbs", t + 20, t + 95, t + 150, Resource_List__ncpus=1),
        exit_record("3[].pbs", t + 20, t + 30, t + 150, Resource_List__ncpus=1),
        record("D", "4.pbs", requestor="alice@login"),  # deleted while queued: no E record
        record("D", "5.pbs", requestor="alice@login"),  # deleted while running
        exit_record("5.pbs", t + 40, t + 50, t + 80, Resource_List__ncpus=2, exit_status=271),
        exit_record("6.pbs", t + 50, t + 500, t + 600, walltime="", Resource_List__ncpus=4),
        exit_record("7.pbs", t + 60, t + 100, t + 130, Resource_List__ncpus=4, run_count=1),  # rerun ...
        record("R", "7.pbs", requestor="root@pbs"),
        exit_record("7.pbs", t + 60, t + 700, t + 760, Resource_List__ncpus=4, run_count=2),  # ... ran again
        exit_record("8.pbs", t + 70, t + 900, t + 4570, etime=t + 800, Resource_List__ncpus=1, walltime="1:00:00"),
    ]


def torque_day() -> list[str]:
    t = DAY + 86400
    return [
        TORQUE_GUIDE_EXAMPLE,
        exit_record(
            "20.torque",
            t,
            t + 5,
            t + 65,
            Resource_List__nodes="2:ppn=4",
            total_execution_slots=8,
            unique_node_count=2,
            walltime="100:00:00",
        ),
        exit_record("21.torque", t + 1, t + 6, t + 7, exec_host="n1/0+n1/1+n2/0", Resource_List__nodes="2"),
    ]


@pytest.fixture
def log_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "accounting"
    folder.mkdir()
    (folder / "20240304").write_text("\n".join(pbs_pro_day()) + "\n")
    (folder / "20240305").write_bytes(gzip.compress(("\n".join(torque_day()) + "\n").encode()))
    return folder


def test_exit_records_become_jobs(log_folder):
    trace = read_pbs(log_folder)
    names = trace.names["job"]
    records = trace.records.assign(pbs=trace.records["job"].map(names)).set_index("pbs")
    assert set(records.index) == {
        "1.pbs", "2.pbs", "3[1].pbs", "3[2].pbs", "5.pbs", "6.pbs", "7.pbs", "8.pbs",
        "407.ign1.zeta2.org", "20.torque", "21.torque",
    }  # fmt: skip
    assert trace.header.unix_start_time == 0  # submit times are Unix seconds
    one = records.loc["1.pbs"]
    assert (one["submit"], one["wait"], one["run"], one["req_time"]) == (DAY, 60, 2940, 3600)
    assert (one["alloc_procs"], one["status"]) == (8, 1)
    sizes = {job: records.loc[job, "alloc_procs"] for job in ("2.pbs", "20.torque", "21.torque", "407.ign1.zeta2.org")}
    assert sizes == {"2.pbs": 10, "20.torque": 8, "21.torque": 3, "407.ign1.zeta2.org": 1}
    assert records.loc["2.pbs", "status"] == 0 and records.loc["5.pbs", "status"] == 5
    assert records.loc["20.torque", "req_time"] == 100 * 3600
    assert records.loc["6.pbs", "req_time"] == -1
    eligible_later = records.loc["8.pbs"]
    assert (eligible_later["submit"], eligible_later["wait"]) == (DAY + 800, 100)
    assert records.loc["7.pbs", "wait"] == 700 - 60  # the last run's start, from its eligible time
    guide = records.loc["407.ign1.zeta2.org"]
    assert (guide["wait"], guide["run"], guide["req_time"]) == (1118088366 - 1118087915, 71, 1000)


def test_what_was_left_out_is_counted(log_folder):
    trace = read_pbs(log_folder)
    assert trace.skipped == {
        "array summary record": 1,
        "earlier exit record of the same job": 1,
        "cancelled before start": 1,
        "no request": 1,
    }
    assert trace.malformed == {}


def test_projects_users_and_queues_are_named(log_folder):
    trace = read_pbs(log_folder)
    groups = trace.records.set_index(trace.records["job"].map(trace.names["job"]))["group"].map(trace.names["group"])
    assert groups["1.pbs"] == "climate"  # the account
    assert groups["2.pbs"] == "catalysis"  # the project, when there is no account
    assert groups["3[1].pbs"] == "users"  # PBS's default project says nothing: the Unix group
    assert set(trace.names["user"].values()) == {"alice", "bob", "guest"}
    assert set(trace.names["queue"].values()) == {"workq", "batch"}


def test_sizes_in_nodes_and_a_default_request(log_folder):
    trace = read_pbs(log_folder, options=SiteLogOptions(size="nodes", default_request=7200))
    records = trace.records.set_index(trace.records["job"].map(trace.names["job"]))
    assert records.loc["1.pbs", "alloc_procs"] == 2
    assert records.loc["2.pbs", "alloc_procs"] == 3
    assert records.loc["20.torque", "alloc_procs"] == 2
    assert records.loc["21.torque", "alloc_procs"] == 2
    assert records.loc["6.pbs", "req_time"] == 7200 and "no request" not in trace.skipped


def test_folder_files_and_detection(log_folder):
    files = sorted(log_folder.iterdir())
    assert detect_format(log_folder) == "pbs" and detect_format(files[0]) == detect_format(files[1]) == "pbs"
    pdt.assert_frame_equal(read_trace(files).records, read_trace(log_folder).records)
    assert len(read_trace(files[1]).records) == 3


@pytest.mark.parametrize(
    ("line", "message", "reason"),
    [
        ("this is not a record", "field record: 'this is not a record' is not 'MM/DD/YYYY", "not an accounting record"),
        (
            exit_record("9.pbs", DAY, DAY + 1, DAY + 2).replace(f"end={DAY + 2}", "end=soon"),
            "field end: 'soon' is not a Unix time",
            "bad timestamp",
        ),
        (
            exit_record("9.pbs", DAY, DAY + 1, DAY + 2, walltime="1:xx"),
            "field Resource_List.walltime: '1:xx' is not a duration",
            "bad duration",
        ),
        (
            exit_record("9.pbs", DAY, DAY + 1, DAY + 2).replace(f" end={DAY + 2}", ""),
            "field end: '' is missing",
            "missing field",
        ),
        (
            exit_record("9.pbs", DAY, DAY + 9, DAY + 2),
            "field end: '1709510402' is before the job's start",
            "ends before it starts",
        ),
        (
            exit_record("9.pbs", DAY, DAY + 1, DAY + 2, Resource_List__ncpus="4.5"),
            "field Resource_List.ncpus: '4.5' is not a whole number",
            "not an integer",
        ),
    ],
)
def test_a_malformed_record_names_file_line_and_field_or_is_counted(tmp_path, line, message, reason):
    path = tmp_path / "20240306"
    lines = pbs_pro_day()
    lines.insert(3, line)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as error:
        read_pbs(path)
    assert str(error.value).startswith(f"{path} line 4, {message}")
    lenient = read_pbs(path, lenient=True)
    assert lenient.malformed == {reason: 1}
    pdt.assert_frame_equal(lenient.records, read_pbs(_written(tmp_path, pbs_pro_day())).records)


def _written(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "clean"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_reads_a_folder_of_logs(log_folder, tmp_path, capsys):
    assert main(["trace", "info", str(log_folder)]) == 0
    assert "1 array summary record" in capsys.readouterr().out
    assert main(["trace", "convert", str(log_folder), "--out", str(tmp_path / "pbs.swf"), "--procs", "16"]) == 0
    assert (tmp_path / "pbs.names.csv").exists()
    assert main(["simulate", "--trace", str(tmp_path / "pbs.swf")]) == 0
    assert "jobs       10" in capsys.readouterr().out
