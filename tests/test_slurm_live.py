"""A real Slurm: run a mixed workload on a one-host cluster, read its sacct output, check it against Slurm.

The cluster (tests/slurm/one_host_cluster.sh) has accounting on and writes a
job-completion log (jobcomp/filetxt) straight from slurmctld: an independent
record of every job it ran, which the trace read from sacct must match job by
job. sacct runs with local times in New York, so the time-zone conversion is
checked too. About three minutes; skipped (with the reason) without root or
without Debian's slurm packages. `.ci/run` installs them.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pandas.testing as pdt
import pytest
from slurm.workload import Submitted, running_cluster, submit_workload, unavailable

from simulator.workloads.formats import read_trace
from simulator.workloads.sacct import FINAL_STATES, SACCT_FIELDS
from tsched.cli import main

pytestmark = pytest.mark.slurm
ZONE = "America/New_York"


@dataclass
class LiveRun:
    submitted: list[Submitted]
    sacct: Path  # the documented command, local times in ZONE
    sacct_with_steps: Path  # without --allocations, local times in UTC
    ran: dict[int, dict[str, str]]  # jobcomp: per job that started, its last record
    daemon_pids: list[int]


def _jobcomp(text: str) -> dict[int, dict[str, str]]:
    """The last jobcomp record of each job that started and finished (a requeued attempt logs as PENDING)."""
    last: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        record = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if record["JobState"] in FINAL_STATES and int(record["ProcCnt"]) > 0:
            last[int(record["JobId"])] = record
    return last


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> LiveRun:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    scratch = Path(tempfile.mkdtemp(prefix="tsched-slurm-"))
    scratch.chmod(0o755)  # MariaDB runs as mysql and keeps its data in here
    out = tmp_path_factory.mktemp("live")
    try:
        with running_cluster(scratch) as cluster:
            cluster.add_users()
            submitted = submit_workload(cluster)
            cluster.wait_idle(timeout=300)
            (out / "site.sacct").write_text(cluster.sacct(SACCT_FIELDS, timezone=ZONE))
            (out / "steps.sacct").write_text(cluster.sacct(SACCT_FIELDS, allocations=False, timezone="UTC"))
            jobcomp = (scratch / "log" / "jobcomp.txt").read_text()
            pids = cluster.daemon_pids()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return LiveRun(submitted, out / "site.sacct", out / "steps.sacct", _jobcomp(jobcomp), pids)


def _utc(text: str) -> int:
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp())


def _sacct_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text()), delimiter="|", quoting=csv.QUOTE_NONE))


def test_the_daemons_are_stopped(live):
    assert live.daemon_pids
    for pid in live.daemon_pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_every_job_slurm_ran_is_in_the_trace_as_slurm_logged_it(live):
    trace = read_trace(live.sacct, timezone=ZONE)
    records = trace.records.set_index("job")
    assert sorted(records.index) == sorted(live.ran)
    epoch = trace.header.unix_start_time
    for job, logged in live.ran.items():
        got = records.loc[job]
        start, end, eligible = (_utc(logged[key]) for key in ("StartTime", "EndTime", "EligibleTime"))
        assert got["submit"] + epoch == eligible, job
        assert got["wait"] == start - eligible, job
        assert got["run"] == end - start, job
        assert got["alloc_procs"] == int(logged["ProcCnt"]), job
        limit = logged["TimeLimit"]
        assert got["req_time"] == (int(limit) * 60 if limit.isdigit() else -1), job
        assert trace.names["user"][got["user"]] == logged["UserId"].split("(")[0]
        assert trace.names["group"][got["group"]] == logged["Account"]
        assert trace.names["queue"][got["queue"]] == logged["Partition"]
        assert got["status"] == {"COMPLETED": 1, "CANCELLED": 5}.get(logged["JobState"], 0)


def test_the_submissions_come_back_as_submitted(live):
    trace = read_trace(live.sacct, timezone=ZONE)
    jobs = trace.jobs.set_index("job_id")
    by_kind: dict[str, list[Submitted]] = {}
    for job in live.submitted:
        by_kind.setdefault(job.kind, []).append(job)
    for job in (*by_kind["normal"], *by_kind["failing"], *by_kind["timeout"], *by_kind["cancel-running"]):
        (job_id,) = job.job_ids
        assert jobs.loc[job_id, "procs"] == job.cores
        assert jobs.loc[job_id, "t_req"] == job.limit_minutes * 60
    assert all(jobs.loc[job.job_ids[0], "censored"] for job in by_kind["timeout"])
    assert all(jobs.loc[job.job_ids[0], "status"] == 5 for job in by_kind["cancel-running"])
    assert all(jobs.loc[job.job_ids[0], "status"] == 0 for job in by_kind["failing"])
    shown = {row["JobIDRaw"]: row["JobID"] for row in _sacct_rows(live.sacct)}
    for array in by_kind["array"]:
        tasks = [raw for raw, shown_id in shown.items() if shown_id.startswith(f"{array.job_ids[0]}_")]
        assert len(tasks) == array.array_tasks > 0 and all(int(raw) in jobs.index for raw in tasks)
    assert trace.skipped == {
        "cancelled before start": len(by_kind["cancel-pending"]),
        "earlier attempt of a requeued job": len(by_kind["requeue"]),
        "no request": len(by_kind["unlimited"]),
    }
    with_default = read_trace(live.sacct, timezone=ZONE, default_request=3600).jobs.set_index("job_id")
    assert all(with_default.loc[job.job_ids[0], "t_req"] == 3600 for job in by_kind["unlimited"])


def test_steps_and_time_zones_do_not_change_the_jobs(live):
    new_york = read_trace(live.sacct, timezone=ZONE)
    utc_with_steps = read_trace(live.sacct_with_steps)
    pdt.assert_frame_equal(utc_with_steps.records, new_york.records)
    assert utc_with_steps.header.unix_start_time == new_york.header.unix_start_time
    assert utc_with_steps.skipped["job step (not an allocation)"] > 0


def test_predict_eval_and_simulate_on_the_converted_trace(live, tmp_path, capsys):
    swf = tmp_path / "site.swf"
    assert main(["trace", "convert", str(live.sacct), "--timezone", ZONE, "--procs", "16", "--out", str(swf)]) == 0
    replayable = {job: logged for job, logged in live.ran.items() if logged["TimeLimit"].isdigit()}
    assert main(["predict-eval", "--trace", str(swf), "--json", str(tmp_path / "quality.json")]) == 0
    assert json.loads((tmp_path / "quality.json").read_text())["jobs"] == len(replayable)
    summary, per_job = tmp_path / "simulate.json", tmp_path / "jobs.csv"
    assert main(["simulate", "--trace", str(swf), "--json", str(summary), "--jobs-csv", str(per_job)]) == 0
    assert json.loads(summary.read_text())["jobs"] == len(replayable)
    simulated = pd.read_csv(per_job).set_index("job_id")
    assert sorted(simulated.index) == sorted(replayable)
    for job, logged in replayable.items():
        limit = int(logged["TimeLimit"]) * 60
        assert simulated.loc[job, "run"] == min(_utc(logged["EndTime"]) - _utc(logged["StartTime"]), limit)
        assert simulated.loc[job, "t_req"] == limit
        assert simulated.loc[job, "size"] == int(logged["ProcCnt"])
    report = tmp_path / "report"
    assert (
        main(
            [
                "evaluate",
                "--trace",
                str(live.sacct),
                "--timezone",
                ZONE,
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
                str(report),
            ]
        )
        == 0
    )
    capsys.readouterr()
