"""A real Slurm's queue, read from `squeue` as a site would run it, forecast on the cluster's nodes.

The one-host cluster of tests/test_squeue.py's capture (four nodes of 4 CPUs and 4,000 MB, GPUs on two, partitions
`cpu` and `gpu`, memory a consumable) runs three jobs and queues six more, one of them over its partition's
MaxTime; once Slurm's backfill scheduler has planned the queue, `sites.squeue.SQUEUE_COMMAND` is read into a
forecast's state and `tsched forecast --squeue` asks a real server started with the same slurm.conf. The jobs
Slurm planned one by one start when Slurm planned them, within its 30 s limit sweep and the 60 s its plan rounds
to (bf_resolution). Each running job stays on the nodes squeue shows. About half a minute; skipped
without root or Debian's slurm packages.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pytest
from slurm.squeue_capture import SETTINGS, planned_queue
from slurm.workload import running_cluster, unavailable

from predictor.service.server import start_server
from simulator.clusterconf import read_cluster
from simulator.clusterforecast import ClusterForwardSimulation
from sites.squeue import read_squeue
from tsched.cli import main

pytestmark = pytest.mark.slurm
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
#: The limit sweep tsched plays out, and bf_resolution, to which Slurm's plan rounds a start down.
SWEEP, RESOLUTION = 30, 60


def test_a_live_queue_is_forecast_as_slurm_plans_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with running_cluster(Path(tempfile.mkdtemp(prefix="tsched-squeue-")), SETTINGS) as cluster:
        cluster.add_users()
        ids = [cluster.sbatch(user, *options, command="sleep 600") for user, options in JOBS]
        cluster.wait_running(ids[:3])
        now = int(time.time())
        text = planned_queue(cluster, pending=5)
        conf = tmp_path / "slurm.conf"
        conf.write_text((cluster.scratch / "etc" / "slurm.conf").read_text())
        (tmp_path / "gres.conf").write_text((cluster.scratch / "etc" / "gres.conf").read_text())
    site = read_cluster(conf)
    queue = read_squeue(text, "squeue", now, site)
    assert [started.job.job_id for started in queue.state.running] == ids[:3]
    assert [job.job_id for job in queue.state.waiting] == [ids[3], ids[4], ids[5], ids[7]]
    assert queue.left_out == {str(ids[6]): "PartitionTimeLimit"}
    assert (2, "user", "tsched-carol") in queue.state.names
    assert all(len(request.nodelist) == request.nodes for request in queue.state.requests[:3])  # where they run

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
        assert abs(row["start"] - row["slurm"]) <= SWEEP + RESOLUTION, (row, text)
