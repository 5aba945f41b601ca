"""A real Slurm's queue, read from `squeue` as a site would run it, forecast on the cluster's nodes.

The one-host cluster of tests/test_squeue.py's capture (four nodes of 4 CPUs and 4,000 MB, GPUs on two, partitions
`cpu` and `gpu`, memory a consumable) runs three jobs and queues six more, one of them over its partition's
MaxTime; once Slurm's backfill scheduler has planned the queue, `sites.squeue.SQUEUE_COMMAND` is read into a
forecast's state and `tsched forecast --squeue` asks a real server started with the same slurm.conf. The jobs
Slurm planned one by one start when Slurm planned them, within its 30 s limit sweep. About half a minute; skipped
without root or Debian's slurm packages.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pytest
from slurm.workload import Cluster, running_cluster, unavailable

from predictor.service.server import start_server
from simulator.clusterconf import read_cluster
from simulator.clusterforecast import ClusterForwardSimulation
from sites.squeue import SQUEUE_COMMAND, read_squeue
from tsched.cli import main

pytestmark = pytest.mark.slurm
SETTINGS = {
    "TSCHED_SLURM_MEMORY": "4000",
    "TSCHED_SLURM_GPUS": "2",
    "TSCHED_SLURM_GPU_NODES": "3 4",
    "TSCHED_SLURM_SELECT": "CR_Core_Memory",
    "TSCHED_SLURM_PARTITIONS": "PartitionName=cpu Nodes=n[1-3] Default=YES MaxTime=60 State=UP\n"
    "PartitionName=gpu Nodes=n[3-4] MaxTime=60 State=UP",
}
#: (user, sbatch options): three that run, then the queue in submission order (the fourth over MaxTime).
JOBS = [
    ("tsched-alice", ("-p", "cpu", "-n", "4", "-t", "30", "--mem=2000")),
    ("tsched-bob", ("-p", "cpu", "-n", "8", "-N", "2", "-t", "20", "--mem-per-cpu=500")),
    ("tsched-carol", ("-p", "gpu", "-n", "2", "-t", "15", "--gres=gpu:2", "--mem=1000")),
    ("tsched-carol", ("-p", "gpu", "-n", "2", "-t", "10", "--gpus=2")),
    ("tsched-alice", ("-p", "cpu", "-n", "12", "-t", "25", "--exclusive")),
    ("tsched-carol", ("-p", "gpu", "-n", "4", "-N", "2", "-t", "5", "--gres=gpu:1")),
    ("tsched-bob", ("-p", "cpu", "-n", "1", "-t", "1-00:00:00")),
    ("tsched-bob", ("-n", "2", "-t", "45")),
]
SWEEP = 30


def _planned(cluster: Cluster, timeout: float = 60) -> str:
    """squeue's output once Slurm's backfill scheduler has planned a start for the first two queued jobs."""
    deadline = time.monotonic() + timeout
    while True:
        text = cluster.run("bash", "-c", SQUEUE_COMMAND)
        pending = [line.split("|") for line in text.splitlines() if "|PENDING|" in line]
        if len(pending) >= 5 and all(fields[10].isdigit() for fields in pending[:2]):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"Slurm planned no start within {timeout}s:\n{text}")
        time.sleep(1)


def test_a_live_queue_is_forecast_as_slurm_plans_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with running_cluster(Path(tempfile.mkdtemp(prefix="tsched-squeue-")), SETTINGS) as cluster:
        cluster.add_users()
        ids = [cluster.sbatch(user, *options, command="sleep 600") for user, options in JOBS]
        cluster.wait_running(ids[:3])
        now = int(time.time())
        text = _planned(cluster)
        conf = tmp_path / "slurm.conf"
        conf.write_text((cluster.scratch / "etc" / "slurm.conf").read_text())
        (tmp_path / "gres.conf").write_text((cluster.scratch / "etc" / "gres.conf").read_text())
    site = read_cluster(conf)
    queue = read_squeue(text, "squeue", now, site)
    assert [started.job.job_id for started in queue.state.running] == ids[:3]
    assert [job.job_id for job in queue.state.waiting] == [ids[3], ids[4], ids[5], ids[7]]
    assert queue.left_out == {str(ids[6]): "PartitionTimeLimit"}
    assert (2, "user", "tsched-carol") in queue.state.names

    squeue = tmp_path / "squeue.txt"
    squeue.write_text(text)
    running, port = start_server(
        "127.0.0.1:0", default_estimators=["request"], start_forecaster=ClusterForwardSimulation(site)
    )
    try:
        arguments = ["forecast", "--address", f"127.0.0.1:{port}", "--squeue", str(squeue), "--cluster", str(conf)]
        assert main([*arguments, "--now", str(now), "--backfill", "slurm", "--json", "-"]) == 0
    finally:
        running.stop(0).wait()
    rows = json.loads(capsys.readouterr().out)["forecasts"]
    for row in rows[:2]:  # planned off the running jobs' limits
        assert abs(row["start"] - row["slurm"]) <= SWEEP + 2, (row, text)
