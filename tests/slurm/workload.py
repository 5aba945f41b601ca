"""Drive the one-host Slurm cluster (one_host_cluster.sh): users, a mixed workload, and its accounting.

The live test and the capture of the committed sacct fixture share this, so
the fixture is what a real Slurm wrote for the same workload. Run as a script
to start a cluster, run the workload and save its sacct output::

    python tests/slurm/workload.py --out tests/data/slurm-22.05.sacct
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CLUSTER_SCRIPT = Path(__file__).with_name("one_host_cluster.sh")
#: The local users jobs are submitted as, with their default Slurm account; bob also charges chem.
USERS = {"tsched-alice": "physics", "tsched-bob": "physics", "tsched-carol": "chem"}
PACKAGES = {"munged": "munge", "mariadbd": "mariadb-server", "slurmdbd": "slurmdbd", "slurmctld": "slurm-wlm"}
#: Job names and the sleep times they draw from: the regularity a runtime predictor should find.
APPLICATIONS = {"namd": (3, 4, 6), "gromacs": (1, 2, 2, 3), "vasp": (0, 1, 1), "post-process": (0, 0, 1)}
NODES, CPUS = 4, 4


def unavailable() -> str | None:
    """Why a cluster cannot be started here (None: it can)."""
    if os.geteuid() != 0:
        return "the live Slurm test needs root (it starts munge, MariaDB and Slurm's daemons)"
    missing = [package for tool, package in PACKAGES.items() if shutil.which(tool) is None]
    if missing:
        return f"Slurm is not installed (apt-get install {' '.join(sorted(set(missing)))})"
    return None


@dataclass
class Submitted:
    """A job as the workload submitted it: what the accounting must show."""

    job_ids: list[int]  # one per array task once Slurm has split the array; the master id at submission
    user: str
    cores: int
    nodes: int
    limit_minutes: int | None  # None: UNLIMITED
    partition: str
    kind: str  # normal, failing, array, cancel-running, cancel-pending, timeout, unlimited, requeue
    options: tuple[str, ...]  # sbatch's options as given

    @property
    def array_tasks(self) -> int:
        """How many tasks `--array=FIRST-LAST[%LIMIT]` asked for (0: not an array)."""
        spec = next((option for option in self.options if option.startswith("--array=")), None)
        if spec is None:
            return 0
        first, last = spec.removeprefix("--array=").split("%")[0].split("-")
        return int(last) - int(first) + 1


class Cluster:
    """A running one-host cluster, its clients pointed at it through SLURM_CONF."""

    def __init__(self, scratch: Path, settings: dict[str, str] | None = None) -> None:
        self.scratch = scratch
        self.env = {
            **os.environ,
            "TSCHED_SLURM_NODES": str(NODES),
            "TSCHED_SLURM_CPUS": str(CPUS),
            **(settings or {}),
            "TSCHED_SLURM_DIR": str(scratch),
            "SLURM_CONF": str(scratch / "etc" / "slurm.conf"),
            "TZ": "UTC",  # the daemons' local time (jobcomp's times); sacct's is chosen per call
        }
        self.created_users: list[str] = []

    def script(self, action: str) -> None:
        subprocess.run(["bash", str(CLUSTER_SCRIPT), action], env=self.env, check=True, timeout=300)

    def run(self, *command: str, user: str | None = None, env: dict[str, str] | None = None) -> str:
        prefix = ["runuser", "-u", user, "--"] if user else []
        done = subprocess.run(
            [*prefix, *command],
            check=False,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def add_users(self) -> None:
        """Local users with Slurm associations (accounts physics and chem; bob may charge both)."""
        self.created_users.extend(create_local_users())
        self.add_associations()

    def add_associations(self) -> None:
        """The users' Slurm accounts and associations (the local users must exist)."""
        self.run("sacctmgr", "-i", "add", "account", "physics,chem")
        for user, account in USERS.items():
            self.run("sacctmgr", "-i", "add", "user", user, f"account={account}")
        self.run("sacctmgr", "-i", "add", "user", "tsched-bob", "account=chem")

    def remove_users(self) -> None:
        """Delete the local users `add_users` created (not those that were there before)."""
        for user in self.created_users:
            subprocess.run(["userdel", user], check=False, capture_output=True)
        self.created_users.clear()

    def daemon_pids(self) -> list[int]:
        """The pids in the cluster's pid files (to check that `stop` ended them)."""
        return [int(path.read_text()) for path in sorted((self.scratch / "run").glob("*.pid"))]

    def sbatch(self, user: str, *options: str, command: str = "sleep 1") -> int:
        out = self.run(
            "sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp", *options, "--wrap", command, user=user
        )
        return int(out.strip().split(";")[0])

    def states(self, job_ids: Sequence[int]) -> dict[int, str]:
        out = self.run("squeue", "-h", "-o", "%i %T", "-j", ",".join(map(str, job_ids)))
        return {int(job.split("_")[0]): state for job, state in (line.split() for line in out.splitlines())}

    def wait_running(self, job_ids: Sequence[int], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(state == "RUNNING" for state in self.states(job_ids).values()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"jobs {job_ids} did not all start within {timeout}s")

    def wait_idle(self, timeout: float) -> None:
        """Until no job is queued or running, and the accounting has every job's end. A job held because its
        reservation ended before it could start (state RD, ResvDelHold) never runs: it is cancelled."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            held = self.run("squeue", "-h", "-t", "RD", "-o", "%i").split()
            if held:
                self.run("scancel", *held)
            queued = self.run("squeue", "-h", "-o", "%i").split()
            states = {line.split(" ")[0] for line in self.sacct(["State"]).splitlines()[1:]}
            if not queued and not states & {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING"}:
                return
            time.sleep(2)
        raise RuntimeError(f"the cluster was still busy after {timeout}s")

    def admin_comments(self, jobs: Sequence[int] = (), timeout: float = 60) -> dict[int, str]:
        """Each job's admin comment (where job_submit.lua writes its prediction), by job id; waits until every
        one of `jobs` is in the accounting (slurmdbd records a job some seconds after it ends on a busy host)."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.sacct(["JobIDRaw", "AdminComment"])
            found = {int(job): comment for job, _, comment in (line.partition("|") for line in out.splitlines()[1:])}
            if set(jobs) <= set(found) or time.monotonic() > deadline:
                return found
            time.sleep(1)

    def sacct(
        self, fields: Sequence[str], allocations: bool = True, extra: Sequence[str] = (), timezone: str | None = None
    ) -> str:
        """The documented command's output (with job steps if not `allocations`; local times in `timezone`)."""
        command = ["sacct", "--allusers", "--parsable2", "--duplicates", "--noconvert"]
        command += ["--allocations"] if allocations else []
        command += ["--starttime", "2000-01-01", "--endtime", "now", f"--format={','.join(fields)}", *extra]
        return self.run(*command, env={"TZ": timezone} if timezone else None)


def create_local_users() -> list[str]:
    """Create the workload's local users that do not exist yet; the ones created."""
    created = []
    for user in USERS:
        if subprocess.run(["id", user], check=False, capture_output=True).returncode:
            subprocess.run(["useradd", "--no-create-home", user], check=True)
            created.append(user)
    return created


def wait_for_completions(held: Callable[[], int], count: int, timeout: float) -> None:
    """Until `held()`, the completions a predictor's namespace holds, reaches `count` (jobcomp/script reports
    the jobs one by one, the follower in batches)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if held() >= count:
            return
        time.sleep(1)
    raise AssertionError(f"{held()} of {count} completions reported after {timeout}s")


@contextmanager
def running_cluster(scratch: Path, settings: dict[str, str] | None = None) -> Iterator[Cluster]:
    """Start the cluster in `scratch` (`settings`: one_host_cluster.sh's TSCHED_SLURM_* variables), and stop
    every daemon it started whatever happens."""
    cluster = Cluster(scratch, settings)
    try:
        cluster.script("start")
        yield cluster
    finally:
        cluster.script("stop")
        cluster.remove_users()


def _random_job(
    rng: random.Random, users: list[str], number: int
) -> tuple[str, int, int, int, str, str, str, tuple[str, ...]]:
    """The workload's `number`th ordinary job: (user, cores, nodes, limit, partition, kind, command, options)."""
    user = rng.choice(users)
    nodes = 2 if rng.random() < 0.1 else 1
    cores = nodes * rng.choice([1, 1, 2, 2, 4]) if nodes == 2 else rng.choice([1, 1, 1, 2, 2, 3, 4])
    partition = "short" if rng.random() < 0.3 else "batch"
    limit = rng.choice([1, 2, 3, 5, 10]) if partition == "short" else rng.choice([1, 2, 5, 15, 60, 120])
    failing = rng.random() < 0.08
    application = rng.choice(list(APPLICATIONS))
    seconds = rng.choice(APPLICATIONS[application])
    extra: tuple[str, ...] = (f"--job-name={application}",)
    extra += ("--account=chem",) if user == "tsched-bob" and number % 4 == 0 else ()
    kind = "failing" if failing else "normal"
    command = f"sleep {seconds}; exit 3" if failing else f"sleep {seconds}"
    return user, cores, nodes, limit, partition, kind, command, extra


def submit_workload(cluster: Cluster, seed: int = 14) -> list[Submitted]:
    """A few hundred short jobs: sizes, limits, failures, arrays, cancellations, timeouts, a requeue.

    About two minutes of wall time; the TIMEOUT jobs (limit one minute) are the longest.
    """
    rng = random.Random(seed)
    users = list(USERS)
    jobs: list[Submitted] = []

    def submit(
        user: str, cores: int, nodes: int, limit: int | None, partition: str, kind: str, command: str, *extra: str
    ) -> Submitted:
        options = [
            f"--ntasks={cores}",
            f"--nodes={nodes}",
            f"--partition={partition}",
            f"--time={'UNLIMITED' if limit is None else limit}",
            *extra,
        ]
        job_id = cluster.sbatch(user, *options, command=command)
        job = Submitted([job_id], user, cores, nodes, limit, partition, kind, tuple(options))
        jobs.append(job)
        return job

    for i in range(3):
        submit(users[i % 3], 1, 1, 1, "batch", "timeout", "sleep 300")
    running = [submit(users[i % 3], 2, 1, 5, "batch", "cancel-running", "sleep 300") for i in range(4)]
    requeued = submit("tsched-alice", 1, 1, 3, "batch", "requeue", "sleep 6", "--requeue")
    for number in range(190):
        user, cores, nodes, limit, partition, kind, command, extra = _random_job(rng, users, number)
        submit(user, cores, nodes, limit, partition, kind, command, *extra)
    for _ in range(3):
        submit(users[rng.randrange(3)], 2, 1, None, "batch", "unlimited", "sleep 2")
    for tasks, throttle in ((20, ""), (25, "%5"), (15, "")):
        submit(
            rng.choice(users),
            1,
            1,
            2,
            "short",
            "array",
            "sleep $((SLURM_ARRAY_TASK_ID % 3))",
            f"--array=1-{tasks}{throttle}",
        )
    # Jobs that wait for the whole machine and are cancelled before they start.
    pending = [submit(users[i % 3], NODES * CPUS, NODES, 5, "batch", "cancel-pending", "sleep 1") for i in range(3)]
    cluster.wait_running([job.job_ids[0] for job in (*running, requeued)])
    cluster.run("scontrol", "requeue", str(requeued.job_ids[0]))
    cluster.run("scontrol", "update", f"jobid={requeued.job_ids[0]}", "StartTime=now")
    time.sleep(3)
    cluster.run("scancel", *(str(job.job_ids[0]) for job in (*running, *pending)))
    return jobs


def main(argv: Sequence[str] | None = None) -> None:
    from simulator.workloads.sacct import SACCT_FIELDS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where to write the sacct output (allocations)")
    parser.add_argument("--steps-out", help="also write the output with job steps (no --allocations)")
    parser.add_argument("--scratch", default="/tmp/tsched-slurm-capture")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason:
        raise SystemExit(reason)
    shutil.rmtree(args.scratch, ignore_errors=True)
    with running_cluster(Path(args.scratch)) as cluster:
        cluster.add_users()
        jobs = submit_workload(cluster)
        cluster.wait_idle(timeout=400)
        Path(args.out).write_text(cluster.sacct(SACCT_FIELDS))
        if args.steps_out:
            Path(args.steps_out).write_text(cluster.sacct(SACCT_FIELDS, allocations=False))
    print(f"{len(jobs)} submissions; wrote {args.out}")


if __name__ == "__main__":
    main()
