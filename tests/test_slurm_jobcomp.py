"""`tsched-slurm-jobcomp --follow`: the spool deploy/slurm/jobcomp.sh writes, into ObserveCompletions (the live
run is in test_slurm_predictor.py; here the environment as Slurm 22.05 gave it there)."""

from __future__ import annotations

import logging
import subprocess
import threading
from pathlib import Path

import pytest

from kernel.errors import UsageError
from kernel.jobs import FinishedJob, JobRequest
from predictor.service.client import PredictorClient, PredictorError, SiteNames
from predictor.service.server import start_server
from sites.slurm import BATCH_LINES, MAX_LINE_BYTES, Follower, completion_from_env, limit_seconds

REPO = Path(__file__).resolve().parents[1]

#: What slurmctld's jobcomp/script gave a finished job (Slurm 22.05.8, trimmed).
ENV = {
    "JOBID": "41",
    "UID": "1001",
    "GID": "1001",
    "SUBMIT": "1795517912",
    "START": "1795517913",
    "END": "1795517920",
    "LIMIT": "00:02:00",
    "PROCS": "2",
    "JOBSTATE": "COMPLETED",
    "PARTITION": "batch",
}


def test_limits_as_jobcomp_writes_them() -> None:
    assert limit_seconds("00:02:00") == 120
    assert limit_seconds("1-02:00:30") == 93630
    assert limit_seconds("UNLIMITED") is None
    assert limit_seconds("Partition_Limit") is None


def test_a_finished_job_and_those_not_reported() -> None:
    job, _ = completion_from_env(ENV)
    assert job == FinishedJob(JobRequest(41, 1795517912, 1001, 1001, 120, 2), 1795517920, 7)
    never_ran, why = completion_from_env({**ENV, "START": "0", "JOBSTATE": "CANCELLED"})
    assert never_ran is None and "never ran (CANCELLED)" in why
    unlimited, why = completion_from_env({**ENV, "LIMIT": "UNLIMITED"})
    assert unlimited is None and "no time limit" in why
    assert completion_from_env({"JOBID": "x"})[0] is None
    overran, _ = completion_from_env({**ENV, "END": "1795518100"})  # killed a little after its limit
    assert overran is not None and overran.runtime == 120


def _spool_line(tmp_path: Path, spool: Path, **env: str) -> None:
    """What deploy/slurm/jobcomp.sh appends for a job with this environment (executed, as slurmctld does)."""
    script = (REPO / "deploy" / "slurm" / "jobcomp.sh").read_text().replace("/var/spool/tsched/completions", str(spool))
    (tmp_path / "jobcomp.sh").write_text(script)
    (tmp_path / "jobcomp.sh").chmod(0o755)
    subprocess.run([str(tmp_path / "jobcomp.sh")], env={**ENV, **env}, check=True)


def test_the_follower_reports_the_spool_and_waits_out_a_service_down(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, "tsched.slurm")
    spool = tmp_path / "completions"
    running, port = start_server("127.0.0.1:0")
    client = PredictorClient(f"127.0.0.1:{port}", timeout=5)
    follower = Follower(spool, lambda jobs, names: client.observe(jobs, names=names, namespace="c"))
    try:
        assert follower.step() == 0  # no spool yet
        _spool_line(tmp_path, spool)
        _spool_line(tmp_path, spool, JOBID="42", START="0", JOBSTATE="CANCELLED")
        _spool_line(tmp_path, spool, JOBID="43", END="1795517930")
        assert follower.step() == 3
        assert running.core.status("c").completions == 2  # type: ignore[union-attr]
        assert "job 42 never ran (CANCELLED)" in caplog.text
        _spool_line(
            tmp_path, spool, JOBID="45", SUBMIT="1795516900", START="1795516950", END="1795517000"
        )  # ends before what the service holds
        assert follower.step() == 1  # refused, logged, skipped
        assert "job 45 not reported" in caplog.text
        with spool.open("a") as file:
            file.write("JOBID=44 UID=1")  # a line being written: left until it is whole
        assert follower.step() == 0
        # A new follower goes on from the kept offset.
        assert (
            Follower(spool, lambda jobs, names: client.observe(jobs, names=names, namespace="c")).offset
            == follower.offset
        )
    finally:
        running.stop(0).wait()
    with spool.open("a") as file:
        file.write(" GID=1 SUBMIT=1795517912 START=1795517913 END=1795517940 LIMIT=00:02:00 PROCS=2\n")
    with pytest.raises(PredictorError):  # the service is down: the line stays
        follower.step()
    stop = threading.Event()
    restarted, _ = start_server(f"127.0.0.1:{port}")
    try:
        thread = threading.Thread(target=follower.run, args=(stop,))
        thread.start()
        for _ in range(100):
            if restarted.core.status("c") is not None:
                break
            stop.wait(0.1)
        stop.set()
        thread.join(10)
        assert restarted.core.status("c").completions == 1  # type: ignore[union-attr]
    finally:
        client.close()
        restarted.stop(0).wait()


def _follow(spool: Path) -> tuple[Follower, list[FinishedJob]]:
    reported: list[FinishedJob] = []
    return Follower(spool, lambda jobs, _names: reported.extend(jobs)), reported


@pytest.mark.parametrize("field", ["JOBNAME", "WORK_DIR", "COMMENT"])
def test_a_newline_in_a_field_a_user_controls_forges_nothing(tmp_path: Path, field: str) -> None:
    """A job named "x\\nUID=0 END=..." once became a second record overriding the user and the times."""
    spool = tmp_path / "completions"
    forged = "x\nJOBID=41 UID=0 GID=0 SUBMIT=1 START=2 END=9999999999 LIMIT=99:00:00 PROCS=1\nUID=0\nEND=9999999999"
    _spool_line(tmp_path, spool, **{field: forged})
    follower, reported = _follow(spool)
    assert follower.step() == 1
    assert reported == [FinishedJob(JobRequest(41, 1795517912, 1001, 1001, 120, 2), 1795517920, 7)]
    assert spool.read_text().count("\n") == 1 and spool.read_text().startswith("v2 JOBID=41 ")


def test_a_value_slurm_cannot_write_is_rejected_by_the_script_and_refused(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, "tsched.slurm")
    spool = tmp_path / "completions"
    _spool_line(tmp_path, spool, UID="0 END=9999999999")
    follower, reported = _follow(spool)
    assert follower.step() == 1 and reported == []
    assert "REJECTED=UID" in spool.read_text() and "jobcomp.sh rejected its UID" in caplog.text


@pytest.mark.parametrize(
    ("line", "why"),
    [
        # what the first jobcomp.sh made of a job named "x\nUID=0 ...": the forged fields after the real ones
        (f"JOBID=41 UID=1001 GID=1 SUBMIT=1 START=2 END=3 LIMIT=00:02:00 PROCS=2 UID=0 END={2**33}", "UID given twice"),
        ("v2 JOBID=41 UID=-1 GID=1 SUBMIT=1 START=2 END=3 LIMIT=00:02:00 PROCS=2", "UID='-1' is not"),
        ("v2 JOBID=41 UID=1 GID=1 SUBMIT=1 START=2 END=3 LIMIT=$(reboot) PROCS=2", "LIMIT='$(reboot)' is not"),
        ("v2 JOBID=41 UID=1 GID=1 SUBMIT=1 START=2 END=3 LIMIT=00:02:00 PROCS=2 \x1b[2J", "is not KEY=VALUE"),
    ],
)
def test_lines_no_honest_script_writes_are_refused(tmp_path: Path, caplog, line: str, why: str) -> None:
    caplog.set_level(logging.INFO, "tsched.slurm")
    spool = tmp_path / "completions"
    honest = "v2 JOBID=42 UID=7 GID=7 SUBMIT=100 START=110 END=170 LIMIT=00:02:00 PROCS=1 JOBSTATE=COMPLETED\n"
    spool.write_text(line + "\n" + honest)
    follower, reported = _follow(spool)
    assert follower.step() == 2
    assert [job.request.job_id for job in reported] == [42]
    assert "refused a spool line" in caplog.text and why in caplog.text


def test_a_completion_in_the_future_of_this_host_is_refused() -> None:
    """One forged job 89 days ahead once moved a namespace's clock and every honest completion was refused."""
    now = 1_795_517_930
    job, why = completion_from_env({**ENV, "END": str(now + 89 * 86_400)}, now=now)
    assert job is None and "in the future of this host's clock" in why
    assert completion_from_env({**ENV, "END": str(now + 60)}, now=now)[0] is not None  # clocks differ a little
    assert completion_from_env({**ENV, "SUBMIT": "1795517999"}, now=now)[0] is None  # started before submitted


def test_a_huge_line_is_dropped_in_bounded_reads_and_the_next_job_is_reported(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, "tsched.slurm")
    spool = tmp_path / "completions"
    honest = "v2 JOBID=42 UID=7 GID=7 SUBMIT=100 START=110 END=170 LIMIT=00:02:00 PROCS=1 JOBSTATE=COMPLETED\n"
    with spool.open("w") as file:
        file.write("JOBID=1 " + "A" * (20 * BATCH_LINES * MAX_LINE_BYTES))  # 80 MB, no end yet
    follower, reported = _follow(spool)
    steps = 0
    while follower.step():
        steps += 1  # each step reads at most BATCH_LINES * MAX_LINE_BYTES bytes
    assert steps == 20 and follower.offset == 20 * BATCH_LINES * MAX_LINE_BYTES
    with spool.open("a") as file:
        file.write("AAAA\n" + honest)
    while follower.step():
        pass
    assert [job.request.job_id for job in reported] == [42]
    assert caplog.text.count("longer than") == 1


def test_the_offset_is_never_written_through_a_link(tmp_path: Path) -> None:
    spool = tmp_path / "completions"
    spool.write_text("v2 JOBID=42 UID=7 GID=7 SUBMIT=100 START=110 END=170 LIMIT=00:02:00 PROCS=1\n")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    follower, _ = _follow(spool)
    (tmp_path / "completions.offset").symlink_to(victim)
    assert follower.step() == 1
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "completions.offset").is_symlink() and Follower(spool, print).offset == follower.offset
    (tmp_path / "completions.offset").unlink()
    (tmp_path / "completions.offset").symlink_to(victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        Follower(spool, print)


@pytest.mark.parametrize(("job_name", "sent"), [("namd", "namd"), ("run_01.sh", "run_01.sh"), ("my job", None)])
def test_the_jobs_name_goes_by_name_where_it_is_plain(tmp_path: Path, job_name: str, sent: str | None) -> None:
    """jobcomp.sh writes the job's name as job_submit.lua sends it, a plain one only (any user chooses it); any
    other is left out of the line, and the job is reported with no application."""
    spool = tmp_path / "completions"
    _spool_line(tmp_path, spool, JOBNAME=job_name)
    names: list[SiteNames] = []
    follower = Follower(spool, lambda _jobs, given: names.extend(given))
    assert follower.step() == 1
    assert [name.job_name for name in names] == [sent]
