"""`tsched-slurm-jobcomp --follow`: the spool deploy/slurm/jobcomp.sh writes, into ObserveCompletions (the live
run is in test_slurm_predictor.py; here the environment as Slurm 22.05 gave it there)."""

from __future__ import annotations

import logging
import subprocess
import threading
from pathlib import Path

import pytest

from kernel.jobs import FinishedJob, JobRequest
from predictor.service.client import PredictorClient, PredictorError
from predictor.service.server import start_server
from sites.slurm import Follower, completion_from_env, limit_seconds

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
    """What deploy/slurm/jobcomp.sh appends for a job with this environment (run by sh, as slurmctld does)."""
    script = (REPO / "deploy" / "slurm" / "jobcomp.sh").read_text().replace("/var/spool/tsched/completions", str(spool))
    (tmp_path / "jobcomp.sh").write_text(script)
    subprocess.run(["sh", str(tmp_path / "jobcomp.sh")], env={**ENV, **env}, check=True)


def test_the_follower_reports_the_spool_and_waits_out_a_service_down(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, "tsched.slurm")
    spool = tmp_path / "completions"
    running, port = start_server("127.0.0.1:0")
    client = PredictorClient(f"127.0.0.1:{port}", timeout=5)
    follower = Follower(spool, lambda jobs: client.observe(jobs, namespace="c"))
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
        assert Follower(spool, lambda jobs: client.observe(jobs, namespace="c")).offset == follower.offset
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
