"""Workloads for checking the node-level simulator against a real Slurm: fcfs, fcfs-tight, mixed, multifactor,
reservation, flex, magnetic, purge.

Each is a plan of `sleep` jobs submitted at set offsets to a one-host cluster
(one_host_cluster.sh) configured for it, run to the end, and captured in a
folder: `jobs.sacct` (`sacct --parsable2`, the documented fields and what a
node-level replay needs besides), the `slurm.conf` and `gres.conf` Slurm ran
with and its own view of them (`scontrol-nodes.txt`, `scontrol-partitions.txt`),
`backfill.log.gz`, slurmctld's log (DebugFlags=Backfill) cut to every start
and end to the millisecond and each change of a job's planned start,
`plans.log.gz`, the same with every cycle's plans (which nodes each cycle held
for the jobs ahead of one it started, for the check of backfill's choices), and
the accounts and QOS (`assoc.txt`, `qos.txt`: `sacctmgr show assoc|qos
--parsable2`). The live test runs them all at once, each on its own cluster, in about twelve
minutes of wall time; the live test and the capture of the committed fixtures
(tests/data/slurm-22.05-cluster/) share this::

    python tests/slurm/cluster_workloads.py --out tests/data/slurm-22.05-cluster

- fcfs: 8 nodes x 8 CPUs, CR_CPU, priority/basic (first come, first served)
  and sched/backfill with bf_interval=1,bf_resolution=1; jobs of 1 to 64
  CPUs asking `-n`, some `-N`, with the limits users ask (1.5 to 6 times
  the run, in the round numbers users pick), a few running into them;
- fcfs-tight: the same jobs with the tightest whole-minute limits;
- mixed: 6 nodes x 8 CPUs x 16000 MB, GPUs (2 each) on n4-n6 as generic
  resources, memory consumable (CR_Core_Memory, DefMemPerCPU=1500), a `cpu`
  partition n[1-4] and a `gpu` partition n[4-6] sharing n4, and jobs that
  are memory-bound, exclusive, multi-node, GPU per node and per job, some in
  a second QOS;
- multifactor: 6 nodes x 8 CPUs, CR_CPU, priority/multifactor with fair-share
  (Fair Tree) weighted ten times age, usage halved every 5 minutes and
  priorities recomputed every minute; accounts physics (alice, bob) and chem
  (carol) with equal shares, physics submitting about twice chem's work; a
  QOS `limited` (MaxJobsPerUser=2) that a third of the jobs of 8 CPUs or
  fewer use, enforced (AccountingStorageEnforce=limits,qos); and a calendar:
  a maintenance reservation of n5-n6 made before the first submission for a
  minute from 200 s on, and n3 drained from 120 s to 240 s. Slurm's own view of
  them is captured as a site would give it to `tsched simulate`:
  `reservations.txt` (`scontrol show reservation`, taken when it is made) and
  `events.txt` (`sacctmgr show event --parsable2` at the end);
- reservation: the multifactor workload with a project's reservation too, of
  n1-n2 from 60 s to 240 s for alice and bob, and ten more jobs of theirs that
  name it (`--reservation=project`, `project_jobs`): some wait for it to
  begin though other nodes are free, some are killed at its end, and some
  never start (slurmctld holds them once it has ended; the capture cancels
  them).
- flex: the reservation workload with the project's reservation made FLEX
  and NO_HOLD_JOBS_AFTER (FLEXIBLE_PROJECT): its jobs may start before it,
  use nodes outside it and run past it, and those still waiting at its end
  run as any job.
- magnetic: the multifactor workload with a MAGNETIC reservation of n1-n2
  for alice from 64 s to 244 s (MAGNET): her jobs, which name none, are
  tried there first, go ahead of the queue, and are killed at its end.
- purge: the multifactor workload with the project's reservation of n1-n2
  from 60 s for six minutes with PURGE_COMP=00:01:00 (PURGING_PROJECT), and
  the six project jobs submitted by 120 s: once the last has ended and a
  minute has passed idle, slurmctld deletes it and its nodes take other jobs.
  `reservations-accounting.txt` (`sacctmgr show reservation --parsable2`)
  records when it was deleted.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

if not __package__:  # run as a script: find the `slurm` package as the tests do
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.workloads.sacct import SACCT_FIELDS
from slurm.workload import USERS, Cluster, Submitted, create_local_users, running_cluster, unavailable

#: The documented command's fields and what a node-level replay reads besides (before JobName, the free text).
FIELDS = (*SACCT_FIELDS[:-1], "ReqMem", "NodeList", "Reservation", "SubmitLine", "JobName")
SCHEDULER = "bf_interval=1,bf_resolution=1,bf_max_job_test=1000,default_queue_depth=1000,sched_min_interval=100000"
#: Limits users pick, in minutes.
ROUND_LIMITS = (1, 2, 3, 5, 10, 15, 20, 30, 45, 60)
#: The environment of commands whose local times the captures keep (the replays read them as UTC, the default).
UTC = {"TZ": "UTC"}
#: Base ports: each workload's cluster runs beside the others.
PORTS = {
    "fcfs": 23817,
    "fcfs-tight": 24817,
    "mixed": 25817,
    "multifactor": 26817,
    "reservation": 27817,
    "flex": 28817,
    "magnetic": 29817,
    "purge": 30817,
}


@dataclass(frozen=True)
class PlannedJob:
    """One submission: when (seconds after the first), by whom, with which sbatch options, for how long."""

    offset: float
    user: str
    options: tuple[str, ...]
    seconds: int  # how long it sleeps
    limit: int  # minutes
    kind: str

    @property
    def command(self) -> list[str]:
        return [*self.options, f"--time={self.limit}", f"--job-name={self.kind}"]

    def option(self, name: str, default: str) -> str:
        return self.options[self.options.index(name) + 1] if name in self.options else default

    @property
    def tasks(self) -> int:
        return int(self.option("-n", "1"))


@dataclass(frozen=True)
class NodeStep:
    """An administrator's `scontrol update nodename=NODE state=STATE` at an offset (seconds after the first
    submission)."""

    offset: float
    node: str
    state: str  # drain, resume


@dataclass(frozen=True)
class Workload:
    name: str
    nodes: int
    cpus: int  # per node
    settings: dict[str, str]
    jobs: tuple[PlannedJob, ...]
    qos: tuple[str, ...] = ()  # `sacctmgr add qos` arguments: a name, then its limits
    reservations: tuple[tuple[str, ...], ...] = ()  # `scontrol create reservation` arguments, made before it runs
    node_steps: tuple[NodeStep, ...] = ()

    def offered_load(self) -> float:
        """CPU-seconds asked (runs cut at the limits) over what the machine gives while jobs arrive."""
        work = sum(job.tasks * min(job.seconds, job.limit * 60) for job in self.jobs)
        return work / (self.nodes * self.cpus * self.jobs[-1].offset)


def _users_limit(rng: random.Random, seconds: int) -> int:
    """What a user asks: 1.5 to 6 times the run, rounded up to a limit people pick."""
    wanted = seconds * rng.uniform(1.5, 6) / 60
    return next((limit for limit in ROUND_LIMITS if limit >= wanted), ROUND_LIMITS[-1])


def _arrivals(rng: random.Random, count: int, mean_gap: float) -> list[float]:
    """Poisson arrivals with a burst of four at once about every twenty jobs (a user's script)."""
    offsets, now = [], 0.0
    while len(offsets) < count:
        now += rng.expovariate(1 / mean_gap)
        burst = 4 if rng.random() < 0.05 else 1
        offsets.extend([round(now, 1)] * burst)
    return offsets[:count]


def _taper(offset: float) -> float:
    """The longest run a job submitted at `offset` may have: late jobs are short, so that a run ends soon after
    its last submission (a long job queued late behind a whole-machine job would keep CI waiting)."""
    return max(30.0, 180.0 - 1.5 * max(offset - TAPER_FROM, 0.0))


#: From when on runs shorten, and when the last job asking for the whole machine comes (seconds after the first).
TAPER_FROM, WHOLE_MACHINE_AT = 120.0, 100.0
FCFS_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 64)
FCFS_WEIGHTS = (20, 15, 20, 20, 5, 10, 4, 4, 2)


def fcfs_jobs(seed: int = 24, count: int = 90, mean_gap: float = 3.4) -> tuple[list[PlannedJob], list[PlannedJob]]:
    """The fcfs jobs with the limits users ask, and the same jobs with the tightest whole-minute limits."""
    rng = random.Random(seed)
    users = list(USERS)
    loose, tight = [], []
    whole_machine_at = None  # one job asks for all 64 CPUs, early on: every node reserved for it
    for offset in _arrivals(rng, count, mean_gap):
        size = rng.choices(FCFS_SIZES, FCFS_WEIGHTS)[0]
        if whole_machine_at is None and offset >= WHOLE_MACHINE_AT:
            size, whole_machine_at = FCFS_SIZES[-1], offset
        elif size == FCFS_SIZES[-1] and offset > WHOLE_MACHINE_AT:
            size = FCFS_SIZES[-2]
        seconds = int(min(max(rng.lognormvariate(math.log(30), 0.8), 6), 180 if size < 32 else 60, _taper(offset)))
        limit = _users_limit(rng, seconds)
        kind = "fcfs"
        if size <= 8 and rng.random() < 0.05:  # asked too little: killed at the limit (after Slurm's 30 s sweep)
            limit, seconds, kind = 1, 150, "timeout"
        spread = size > 8 and rng.random() < 0.4
        options = ("-N", str(math.ceil(size / 8)), "-n", str(size)) if spread else ("-n", str(size))
        user = rng.choice(users)
        loose.append(PlannedJob(offset, user, options, seconds, limit, kind))
        tight_limit = limit if kind == "timeout" else math.ceil((seconds + 5) / 60)
        tight.append(PlannedJob(offset, user, options, seconds, tight_limit, kind))
    return loose, tight


#: The kinds of jobs of the mixed workload and how often each comes (sbatch options: _mixed_options).
MIXED_KINDS = {
    "cpu": 34,
    "memory": 10,
    "exclusive": 7,
    "multinode": 13,
    "gpu": 20,
    "gpu2": 6,
    "gpu-multinode": 5,
    "gpus-per-job": 5,
}


def _mixed_options(rng: random.Random, kind: str) -> tuple[str, ...]:
    if kind == "cpu":
        return ("-p", "cpu", "-n", str(rng.choice((1, 2, 2, 3, 4, 4, 6, 8))))
    if kind == "memory":  # few CPUs, most of a node's memory: the node's CPUs idle meanwhile
        return ("-p", "cpu", "-n", str(rng.choice((1, 2))), f"--mem={rng.choice((6, 8, 10, 12, 14))}G", "--qos=long")
    if kind == "exclusive":
        return ("-p", "cpu", "--exclusive", "-n", str(rng.choice((1, 2, 4))))
    if kind == "multinode":
        tasks = rng.choice((4, 8, 12, 16))
        return ("-p", "cpu", "-N", "2", "-n", str(tasks)) if rng.random() < 0.6 else ("-p", "cpu", "-n", str(tasks + 4))
    if kind == "gpu":
        return ("-p", "gpu", "--gres=gpu:1", "-n", str(rng.choice((1, 2, 4))))
    if kind == "gpu2":
        return ("-p", "gpu", "--gres=gpu:2", "-n", str(rng.choice((2, 4, 8))), "--mem=8G")
    if kind == "gpu-multinode":
        return ("-p", "gpu", "-N", "2", "--gres=gpu:2", "-n", "8")
    return ("-p", "gpu", "--gpus=3", "-n", "3")  # gpus-per-job: three GPUs wherever they are


def mixed_jobs(seed: int = 37, count: int = 90, mean_gap: float = 4.0) -> list[PlannedJob]:
    rng = random.Random(seed)
    users = list(USERS)
    jobs = []
    for offset in _arrivals(rng, count, mean_gap):
        kind = rng.choices(list(MIXED_KINDS), list(MIXED_KINDS.values()))[0]
        seconds = int(min(max(rng.lognormvariate(math.log(30), 0.7), 6), 180, _taper(offset)))
        jobs.append(
            PlannedJob(offset, rng.choice(users), _mixed_options(rng, kind), seconds, _users_limit(rng, seconds), kind)
        )
    return jobs


#: Fair-share first, age second; usage halves in 5 minutes and priorities are recomputed every minute, so the
#: accounts' ranking changes within the run; QOS and association limits enforced.
MULTIFACTOR_PRIORITY = (
    "PriorityType=priority/multifactor",
    "PriorityWeightFairshare=10000",
    "PriorityWeightAge=1000",
    "PriorityMaxAge=10",
    "PriorityDecayHalfLife=5",
    "PriorityCalcPeriod=1",
    "AccountingStorageEnforce=limits,qos",
    "DebugFlags=Backfill",
)
#: The multifactor workload's QOS: `limited` lets a user run two of its jobs at once (AccountingStorageEnforce).
LIMITED_QOS = "limited MaxJobsPerUser=2"
#: The multifactor workload's calendar: a maintenance of two nodes (whole nodes held from jobs whose limits
#: would reach it) and a node drained for two minutes while jobs arrive.
MAINTENANCE = (
    "ReservationName=maintenance",
    "StartTime=now+200",
    "Duration=1",
    "Nodes=n[5-6]",
    "Users=root",
    "Flags=MAINT,IGNORE_JOBS",
)
#: A project's reservation of two nodes for three minutes, for alice and bob, whose jobs that name it
#: (`PROJECT_JOBS`) run only there, only then.
PROJECT = (
    "ReservationName=project",
    "StartTime=now+60",
    "Duration=3",
    "Nodes=n[1-2]",
    "Users=tsched-alice,tsched-bob",
)
#: The project's reservation made flexible: its jobs may start before it, run past it and use nodes outside it
#: (FLEX), and those still waiting at its end run as other jobs do rather than being held (NO_HOLD_JOBS_AFTER).
FLEXIBLE_PROJECT = (*PROJECT, "Flags=FLEX,NO_HOLD_JOBS_AFTER")
#: A MAGNETIC reservation of two nodes for three minutes for alice: her jobs, naming none, are tried there first.
#: It begins and ends 3-4 s from any submission: a job submitted in the second before it begins is a sub-second
#: race between Slurm's next backfill cycle and the reservation (seen on a first run that began it at now+60).
MAGNET = (
    "ReservationName=magnet",
    "StartTime=now+64",
    "Duration=3",
    "Nodes=n[1-2]",
    "Users=tsched-alice",
    "Flags=MAGNETIC",
)
#: The project's reservation for six minutes, deleted once idle for a minute (PURGE_COMP): its jobs, all submitted
#: by 120 s (`project_jobs`), end long before its end, and the jobs whose limits would reach into it may then use n1-n2.
PURGING_PROJECT = (*PROJECT[:2], "Duration=6", *PROJECT[3:], "Flags=PURGE_COMP=00:01:00")
DRAIN = (NodeStep(120, "n3", "drain"), NodeStep(240, "n3", "resume"))
MULTIFACTOR_SIZES = (1, 2, 4, 8, 12, 16, 24)
MULTIFACTOR_WEIGHTS = (20, 15, 20, 20, 8, 10, 4)


def multifactor_jobs(seed: int = 40, count: int = 90, mean_gap: float = 3.8) -> list[PlannedJob]:
    """Jobs of 1 to 24 CPUs from three users drawn alike: account physics (alice, bob) submits twice the work of
    chem (carol), so fair-share pushes physics back as its usage grows; a quarter in the `limited` QOS."""
    rng = random.Random(seed)
    users = list(USERS)
    jobs = []
    for offset in _arrivals(rng, count, mean_gap):
        size = rng.choices(MULTIFACTOR_SIZES, MULTIFACTOR_WEIGHTS)[0]
        seconds = int(min(max(rng.lognormvariate(math.log(35), 0.8), 6), 180, _taper(offset)))
        limited = size <= 8 and rng.random() < 0.35
        options = ("-n", str(size), "--qos=limited") if limited else ("-n", str(size))
        kind = "limited" if limited else "multifactor"
        jobs.append(PlannedJob(offset, rng.choice(users), options, seconds, _users_limit(rng, seconds), kind))
    return jobs


def project_jobs(seed: int = 41) -> list[PlannedJob]:
    """Ten jobs of alice and bob that name the project's reservation: some submitted before it begins (they wait
    for it though other nodes are free), most during it, the last ones with limits past its end (killed then)."""
    rng = random.Random(seed)
    jobs = []
    for offset in (15, 40, 55, 75, 95, 120, 150, 180, 205, 220):
        size = rng.choice((2, 4, 8, 8, 12, 16))
        seconds = rng.randint(15, 80)
        limit = 5 if offset >= 205 else _users_limit(rng, seconds)
        user = rng.choice(("tsched-alice", "tsched-bob"))
        jobs.append(PlannedJob(offset, user, ("-n", str(size), "--reservation=project"), seconds, limit, "project"))
    return jobs


def workloads() -> dict[str, Workload]:
    loose, tight = fcfs_jobs()
    fcfs = {
        "TSCHED_SLURM_NODES": "8",
        "TSCHED_SLURM_CPUS": "8",
        "TSCHED_SLURM_SELECT": "CR_CPU",
        "TSCHED_SLURM_SCHEDULER": SCHEDULER,
        "TSCHED_SLURM_PARTITIONS": "PartitionName=batch Nodes=n[1-8] Default=YES MaxTime=INFINITE State=UP",
        "TSCHED_SLURM_EXTRA": "PriorityType=priority/basic\nDebugFlags=Backfill",
    }
    mixed = {
        "TSCHED_SLURM_NODES": "6",
        "TSCHED_SLURM_CPUS": "8",
        "TSCHED_SLURM_MEMORY": "16000",
        "TSCHED_SLURM_GPUS": "2",
        "TSCHED_SLURM_GPU_NODES": "4 5 6",
        "TSCHED_SLURM_SELECT": "CR_Core_Memory",
        "TSCHED_SLURM_SCHEDULER": SCHEDULER,
        "TSCHED_SLURM_PARTITIONS": (
            "PartitionName=cpu Nodes=n[1-4] Default=YES MaxTime=60 State=UP\n"
            "PartitionName=gpu Nodes=n[4-6] MaxTime=60 State=UP"
        ),
        "TSCHED_SLURM_EXTRA": "PriorityType=priority/basic\nDefMemPerCPU=1500\nDebugFlags=Backfill",
    }
    multifactor = {
        **fcfs,
        "TSCHED_SLURM_NODES": "6",
        "TSCHED_SLURM_PARTITIONS": "PartitionName=batch Nodes=n[1-6] Default=YES MaxTime=INFINITE State=UP",
        "TSCHED_SLURM_EXTRA": "\n".join(MULTIFACTOR_PRIORITY),
    }
    fair_share_jobs = tuple(multifactor_jobs())
    early = [job for job in project_jobs() if job.offset <= 120]  # the purge workload's: none after the purge
    reservation = Workload(
        "reservation",
        6,
        8,
        multifactor,
        tuple(sorted([*fair_share_jobs, *project_jobs()], key=lambda job: job.offset)),
        qos=(LIMITED_QOS,),
        reservations=(MAINTENANCE, PROJECT),
        node_steps=DRAIN,
    )
    return {
        "fcfs": Workload("fcfs", 8, 8, fcfs, tuple(loose)),
        "fcfs-tight": Workload("fcfs-tight", 8, 8, fcfs, tuple(tight)),
        "mixed": Workload("mixed", 6, 8, mixed, tuple(mixed_jobs()), qos=("long",)),
        "multifactor": replace(reservation, name="multifactor", jobs=fair_share_jobs, reservations=(MAINTENANCE,)),
        "reservation": reservation,
        "flex": replace(reservation, name="flex", reservations=(MAINTENANCE, FLEXIBLE_PROJECT)),
        "magnetic": replace(reservation, name="magnetic", jobs=fair_share_jobs, reservations=(MAINTENANCE, MAGNET)),
        "purge": replace(
            reservation,
            name="purge",
            jobs=tuple(sorted([*fair_share_jobs, *early], key=lambda job: job.offset)),
            reservations=(MAINTENANCE, PURGING_PROJECT),
        ),
    }


def submit_all(cluster: Cluster, workload: Workload) -> list[Submitted]:
    """Submit the plan at its offsets, updating nodes at theirs (late ones go at once); what was submitted."""
    began = time.monotonic()
    submitted = []
    timeline = sorted([*workload.jobs, *workload.node_steps], key=lambda item: item.offset)
    for job in timeline:
        delay = job.offset - (time.monotonic() - began)
        if delay > 0:
            time.sleep(delay)
        if isinstance(job, NodeStep):
            reason = ["reason=tsched-maintenance"] if job.state == "drain" else []
            cluster.run("scontrol", "update", f"nodename={job.node}", f"state={job.state}", *reason)
            continue
        job_id = cluster.sbatch(job.user, *job.command, command=f"sleep {job.seconds}")
        nodes, partition = int(job.option("-N", "1")), job.option("-p", "batch")
        submitted.append(
            Submitted([job_id], job.user, job.tasks, nodes, job.limit, partition, job.kind, tuple(job.command))
        )
    return submitted


#: Log lines worth keeping: starts by either scheduler, ends (to the millisecond, which sacct's seconds cannot
#: order), limits hit, nodes an administrator drained or resumed, and each change of a job's planned start.
_STARTED = re.compile(
    r"sched: Allocate JobId=|_start_job: Started JobId=|_job_complete: JobId=\d+ done|Time limit"
    r"|update_node: node \S+ state set to"
)
_PLANNED = re.compile(r"_dump_job_sched: JobId=(\d+) to start at (\S+), end at (\S+) on nodes (\S+)")


def backfill_log(text: str, every_cycle: bool = False) -> str:
    """slurmctld's log cut to starts, ends and plans: each change of a job's planned start, or `every_cycle`'s
    plans (a backfill cycle a second repeats itself, so the changes alone are a tenth of the size)."""
    kept, last = [], {}
    for line in text.splitlines():
        if _STARTED.search(line):
            kept.append(line)
            continue
        planned = _PLANNED.search(line)
        if planned and (every_cycle or last.get(planned.group(1)) != planned.groups()[1:]):
            last[planned.group(1)] = planned.groups()[1:]
            kept.append(line)
    return "\n".join(kept) + "\n"


@dataclass
class Capture:
    """What one workload's run left: where its files are, and what was submitted."""

    workload: Workload
    folder: Path
    submitted: list[Submitted] = field(default_factory=list)
    error: BaseException | None = None
    seconds: float = 0.0

    @property
    def sacct(self) -> Path:
        return self.folder / "jobs.sacct"


def run_workload(
    workload: Workload, scratch: Path, out: Path, timeout: float = 900, starting: threading.Lock | None = None
) -> Capture:
    """Start a cluster for `workload`, run it to the end, save its files in `out`, stop the cluster.

    `starting`, held while the cluster's daemons start, lets clusters run at
    once start one after another: six MariaDB and slurmdbd starting together
    on a loaded 2-core machine left one slurmdbd not up within a minute."""
    capture = Capture(workload, out)
    began = time.monotonic()
    settings = {**workload.settings, "TSCHED_SLURM_PORT": str(PORTS[workload.name]), "TSCHED_SLURM_CLUSTER": "tsched"}
    try:
        with ExitStack() as stack:
            with starting or nullcontext():
                cluster = stack.enter_context(running_cluster(scratch, settings))
            cluster.add_associations()
            for qos, *limits in (spec.split() for spec in workload.qos):
                cluster.run("sacctmgr", "-i", "add", "qos", qos, *limits)
                for user in USERS:
                    cluster.run("sacctmgr", "-i", "modify", "user", "where", f"name={user}", "set", f"qos+={qos}")
            out.mkdir(parents=True, exist_ok=True)
            for what, name in (("assoc", "assoc.txt"), ("qos", "qos.txt")):  # the replay's --associations, --qos-file
                (out / name).write_text(cluster.run("sacctmgr", "show", what, "--parsable2"))
            for what in ("nodes", "partitions"):  # Slurm's own view of the configuration, to check the reader
                (out / f"scontrol-{what}.txt").write_text(cluster.run("scontrol", "--oneliner", "show", what))
            for reservation in workload.reservations:
                cluster.run("scontrol", "create", "reservation", *reservation)
            if workload.reservations:  # as a site keeps them when they are planned (gone once they end)
                (out / "reservations.txt").write_text(cluster.run("scontrol", "show", "reservation", env=UTC))
            first = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            capture.submitted = submit_all(cluster, workload)
            cluster.wait_idle(timeout=timeout)
            (out / "jobs.sacct").write_text(cluster.sacct(FIELDS, timezone="UTC"))
            if workload.reservations:  # when each reservation ended, or was deleted (PURGE_COMP)
                held = cluster.run(
                    "sacctmgr", "show", "reservation", "--parsable2", f"start={first}",
                    "format=Name,Start,End,Flags,NodeNames", env=UTC,
                )  # fmt: skip
                (out / "reservations-accounting.txt").write_text(held)
            if workload.node_steps:
                events = cluster.run("sacctmgr", "show", "event", "--parsable2", f"start={first}", env=UTC)
                (out / "events.txt").write_text(events)
            for name in ("slurm.conf", "gres.conf"):
                shutil.copyfile(scratch / "etc" / name, out / name)
            text = (scratch / "log" / "slurmctld.log").read_text()
            for name, every_cycle in (("backfill.log.gz", False), ("plans.log.gz", True)):
                with gzip.open(out / name, "wt") as log:
                    log.write(backfill_log(text, every_cycle))
    except BaseException as error:  # reported by the caller, after the other clusters have stopped
        capture.error = error
    capture.seconds = time.monotonic() - began
    return capture


def _munge(folder: Path, action: str) -> None:
    script = Path(__file__).with_name("one_host_cluster.sh")
    subprocess.run(["bash", str(script), action], env={**os.environ, "TSCHED_SLURM_DIR": str(folder)}, check=True)


def run_all(out: Path, names: Sequence[str] | None = None) -> dict[str, Capture]:
    """Run the workloads at once, each on its own cluster; their captures by name."""
    chosen = {name: workload for name, workload in workloads().items() if names is None or name in names}
    created = create_local_users()
    scratches = {name: Path(tempfile.mkdtemp(prefix=f"tsched-{name}-")) for name in chosen}
    munge = Path(tempfile.mkdtemp(prefix="tsched-munge-"))
    captures: dict[str, Capture] = {}
    starting = threading.Lock()
    try:
        _munge(munge, "munge")  # shared: the first cluster to stop must not take it with it
        threads = []
        for name, workload in chosen.items():
            scratches[name].chmod(0o755)  # MariaDB runs as mysql and keeps its data in here

            def work(name: str = name, workload: Workload = workload) -> None:
                captures[name] = run_workload(workload, scratches[name], out / name, starting=starting)

            threads.append(threading.Thread(target=work, name=name))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        _munge(munge, "munge-stop")
        for scratch in (*scratches.values(), munge):
            shutil.rmtree(scratch, ignore_errors=True)
        for user in created:
            subprocess.run(["userdel", user], check=False, capture_output=True)
    return captures


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for one sub-folder per workload")
    parser.add_argument("--only", nargs="*", choices=list(workloads()), help="run only these workloads")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason:
        raise SystemExit(reason)
    captures = run_all(Path(args.out), args.only)
    for name, capture in captures.items():
        if capture.error is not None:
            raise SystemExit(f"{name}: {capture.error!r}")
        print(f"{name}: {len(capture.submitted)} jobs in {capture.seconds:.0f} s -> {capture.folder}")


if __name__ == "__main__":
    main()
