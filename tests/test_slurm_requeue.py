"""What the `slurm` scheduler's requeue rests on, asked of the real Slurm 22.05 on this machine (live).

A batch job runs on a node that is then set DOWN: slurmctld requeues it (JobRequeue=1, the default), resets its
submit time, makes it eligible `cred_expire` + 1 s later (AuthInfo; 30 s here), and its periodic main pass, not
backfill, starts it again. `simulator.clusterreplay` and `SlurmBackfill.queue_again` model exactly these
(tests/test_calendar.py holds the model to them).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from slurm.workload import Cluster, running_cluster, unavailable

pytestmark = pytest.mark.slurm

CRED_EXPIRE = 30
#: Its own ports, so that it never meets another live test's cluster.
SETTINGS = {
    "TSCHED_SLURM_NODES": "2",
    "TSCHED_SLURM_PORT": "17817",
    "TSCHED_SLURM_EXTRA": f"AuthInfo=cred_expire={CRED_EXPIRE}",
}


def job_fields(cluster: Cluster, job_id: str) -> dict[str, str]:
    """`scontrol show job`'s KEY=VALUE fields."""
    shown = cluster.run("scontrol", "show", "job", job_id)
    return dict(word.split("=", 1) for word in shown.split() if "=" in word)


def wait_until(condition: Callable[[], bool], what: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(1)
    raise AssertionError(f"{what}: not within {seconds:.0f} s")


def seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_a_job_a_node_failure_ended_is_requeued_eligible_after_cred_expire_and_started_by_the_main_pass() -> None:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    scratch = Path(tempfile.mkdtemp(prefix="tsched-slurm-requeue-"))
    scratch.chmod(0o755)  # MariaDB runs as mysql and keeps its data in here
    try:
        fields = requeued_job(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    submitted, eligible, started = (seconds(fields[key]) for key in ("SubmitTime", "EligibleTime", "StartTime"))
    assert fields["Requeue"] == "1" and fields["BatchFlag"] == "1"
    assert eligible - submitted == CRED_EXPIRE + 1, fields  # batch_requeue_fini's begin time, from the requeue
    assert started >= eligible and fields["Scheduler"] == "Main", fields  # no job_allocate, no backfill


def requeued_job(scratch: Path) -> dict[str, str]:
    """Run one exclusive batch job, set its node DOWN, and wait until Slurm runs it again: its fields then."""
    with running_cluster(scratch, SETTINGS) as cluster:
        job = cluster.run("sbatch", "--parsable", "-N1", "--exclusive", "--output=/dev/null", "--wrap", "sleep 600")
        job = job.strip()
        wait_until(lambda: job_fields(cluster, job).get("JobState") == "RUNNING", "the job running", 120)
        node = job_fields(cluster, job)["NodeList"]
        cluster.run("scontrol", "update", f"nodename={node}", "state=down", "reason=tsched-test")
        wait_until(
            lambda: (
                job_fields(cluster, job).get("Restarts") == "1"
                and job_fields(cluster, job).get("JobState") == "RUNNING"
            ),
            "the job requeued and running again",
            240,
        )
        fields = job_fields(cluster, job)
        cluster.run("scancel", job)
    return fields
