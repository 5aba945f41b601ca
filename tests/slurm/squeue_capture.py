"""Capture a real Slurm's queue with `sites.squeue.SQUEUE_COMMAND` (tests/data/slurm-22.05-squeue).

The one-host cluster runs four nodes of 4 CPUs and 4,000 MB, GPUs on n3 and
n4, partitions `cpu` (n1-n3, default) and `gpu` (n3-n4) with MaxTime 60
minutes, memory a consumable. Three jobs run and the rest queue (`JOBS`); once
Slurm's backfill scheduler has planned the queue, the capture keeps what
`SQUEUE_COMMAND` printed, Slurm's own `squeue --start`, the moment, and the
cluster's slurm.conf and gres.conf. The live test (tests/test_slurm_squeue.py)
runs the same cluster and waits for the plan the same way. Run as root::

    cd tests && python -m slurm.squeue_capture data/slurm-22.05-squeue
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sites.squeue import SQUEUE_COMMAND
from slurm.workload import Cluster, running_cluster, unavailable

#: one_host_cluster.sh's settings: the cluster above.
SETTINGS = {
    "TSCHED_SLURM_MEMORY": "4000",
    "TSCHED_SLURM_GPUS": "2",
    "TSCHED_SLURM_GPU_NODES": "3 4",
    "TSCHED_SLURM_SELECT": "CR_Core_Memory",
    "TSCHED_SLURM_PARTITIONS": "PartitionName=cpu Nodes=n[1-3] Default=YES MaxTime=60 State=UP\n"
    "PartitionName=gpu Nodes=n[3-4] MaxTime=60 State=UP",
}
#: sbatch's options, in submission order: three that run, then the queue (the fourth over its partition's
#: MaxTime; the last an array of three tasks).
JOBS = [
    ("-p", "cpu", "-n", "4", "-t", "30", "--mem=2000"),
    ("-p", "cpu", "-n", "8", "-N", "2", "-t", "20", "--mem-per-cpu=500"),
    ("-p", "gpu", "-n", "2", "-t", "15", "--gres=gpu:2", "--mem=1000"),
    ("-p", "gpu", "-n", "2", "-t", "10", "--gpus=2"),
    ("-p", "cpu", "-n", "12", "-t", "25", "--exclusive"),
    ("-p", "gpu", "-n", "4", "-N", "2", "-t", "5", "--gres=gpu:1"),
    ("-p", "cpu", "-n", "1", "-t", "1-00:00:00"),
    ("-n", "2", "-t", "45"),
    ("--array=1-3", "-n", "1", "-t", "5"),
]


def planned_queue(cluster: Cluster, pending: int, timeout: float = 60) -> str:
    """`SQUEUE_COMMAND`'s output once `pending` jobs wait and Slurm's backfill scheduler has planned a start for
    the first two of them."""
    deadline = time.monotonic() + timeout
    while True:
        text = cluster.run("bash", "-c", SQUEUE_COMMAND)
        waiting = [line.split("|") for line in text.splitlines() if "|PENDING|" in line]
        if len(waiting) >= pending and all(fields[10].isdigit() for fields in waiting[:2]):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"Slurm planned no start within {timeout}s:\n{text}")
        time.sleep(1)


def capture(out: Path) -> None:
    """Run the jobs on a fresh cluster and write the capture's files to `out`."""
    with running_cluster(Path(tempfile.mkdtemp(prefix="tsched-squeue-")), SETTINGS) as cluster:
        ids = [cluster.sbatch("root", *options, command="sleep 600") for options in JOBS]
        cluster.wait_running(ids[:3])
        now = int(time.time())
        text = planned_queue(cluster, pending=len(JOBS) - 3 + 2)  # the array's tasks each on a line
        start = cluster.run("squeue", "--start")
        out.mkdir(parents=True, exist_ok=True)
        for name in ("slurm.conf", "gres.conf"):
            (out / name).write_text((cluster.scratch / "etc" / name).read_text())
    (out / "squeue.txt").write_text(text)
    (out / "squeue-start.txt").write_text(start)
    (out / "now.txt").write_text(f"{now}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the folder to write the capture to")
    arguments = parser.parse_args()
    reason = unavailable()
    if reason:
        raise SystemExit(reason)
    capture(arguments.out)


if __name__ == "__main__":
    main()
