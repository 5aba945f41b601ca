"""Reading a large sacct log: seconds and peak resident memory.

Generates `sacct --parsable2` output in the documented field order (see
`simulator.workloads.sacct.SACCT_COMMAND`), as a site's log without
`--allocations` looks: each job's allocation line followed by its `batch`
and `extern` steps (and an srun step for one job in three), array tasks
(`123_4`), a state mix with cancellations before and after start, timeouts,
failures, requeued attempts, UNLIMITED and Partition_Limit limits. Then
reads it in a fresh process, so that the memory figure is the reader's
alone. Usage:

    python benchmarks/bench_sacct.py [--lines 1000000] [--keep FILE]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.workloads.sacct import SACCT_FIELDS

START = pd.Timestamp("2024-01-01T00:00:00")
USERS = 400
STATES = np.array(
    ["COMPLETED", "FAILED", "CANCELLED by 1234", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "REQUEUED"], dtype=object
)
STATE_WEIGHTS = np.array([0.72, 0.1, 0.08, 0.06, 0.02, 0.01, 0.01])


def generate(path: Path, lines: int, seed: int = 1) -> int:
    """Write about `lines` lines of sacct output; returns the number of allocations."""
    rng = np.random.default_rng(seed)
    jobs = int(lines / (3 + 1 / 3))  # allocation, batch and extern lines, and an srun step for one job in three
    frame = allocations(rng, jobs)
    allocation = frame.agg("|".join, axis=1).to_numpy(dtype=object)
    batch, extern, srun = (steps(frame, suffix, name) for suffix, name in STEPS)
    has_srun = np.arange(jobs) % 3 == 0
    rows = np.stack([allocation, batch, extern, np.where(has_srun, srun, None)], axis=1).ravel()
    body = "\n".join(row for row in rows if row is not None)
    path.write_text("|".join(SACCT_FIELDS) + "\n" + body + "\n")
    return jobs


def allocations(rng: np.random.Generator, jobs: int) -> pd.DataFrame:
    """One allocation line's fields per job, in `SACCT_FIELDS` order: arrays, a state mix, requeues, odd limits."""
    job_id = np.arange(1_000_000, 1_000_000 + jobs)
    array_task = rng.random(jobs) < 0.15
    shown_id = np.where(array_task, [f"{j - 7}_{j % 50}" for j in job_id], job_id.astype(str)).astype(object)
    submit = START + pd.to_timedelta(np.sort(rng.integers(0, 365 * 86400, jobs)), unit="s")
    wait = rng.exponential(1800, jobs).astype(np.int64)
    limit_minutes = rng.choice([30, 60, 120, 240, 720, 1440, 2880], jobs)
    elapsed = np.minimum((rng.lognormal(7, 1.5, jobs)).astype(np.int64), limit_minutes * 60 + 30)
    state = STATES[rng.choice(len(STATES), jobs, p=STATE_WEIGHTS)]
    never_started = (state == "CANCELLED by 1234") & (rng.random(jobs) < 0.5)
    elapsed = np.where(state == "TIMEOUT", limit_minutes * 60 + 17, elapsed)
    start = submit + pd.to_timedelta(wait, unit="s")
    end = start + pd.to_timedelta(np.where(never_started, 0, elapsed), unit="s")
    cores = rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256], jobs)
    nodes = np.maximum(cores // 32, 1)
    user = rng.integers(0, USERS, jobs)
    limit_text = limit_minutes.astype(str).astype(object)
    limit_text[rng.random(jobs) < 0.005] = "UNLIMITED"
    limit_text[never_started & (rng.random(jobs) < 0.3)] = "Partition_Limit"
    iso = "%Y-%m-%dT%H:%M:%S"
    return pd.DataFrame(
        {
            "JobIDRaw": job_id.astype(str),
            "JobID": shown_id,
            "User": [f"user{u:03d}" for u in user],
            "UID": (5000 + user).astype(str),
            "Group": [f"grp{u % 40:02d}" for u in user],
            "GID": (6000 + user % 40).astype(str),
            "Account": [f"proj{u % 60:02d}" for u in user],
            "Partition": np.where(cores > 64, "large", "compute"),
            "QOS": "normal",
            "Submit": submit.strftime(iso),
            "Eligible": submit.strftime(iso),
            "Start": np.where(never_started, "None", start.strftime(iso)),
            "End": end.strftime(iso),
            "ElapsedRaw": np.where(never_started, 0, elapsed).astype(str),
            "TimelimitRaw": limit_text,
            "AllocCPUS": np.where(never_started, 0, cores).astype(str),
            "ReqCPUS": cores.astype(str),
            "NNodes": nodes.astype(str),
            "ReqTRES": [f"billing={c},cpu={c},mem={c * 2000}M,node={n}" for c, n in zip(cores, nodes, strict=True)],
            "AllocTRES": [f"billing={c},cpu={c},node={n}" for c, n in zip(cores, nodes, strict=True)],
            "State": state,
            "ExitCode": np.where(state == "FAILED", "1:0", "0:0"),
            "Flags": "SchedMain,StartRecieved",
            "JobName": [f"app{u % 25}" for u in user],
        }
    )[list(SACCT_FIELDS)]


#: The job steps each allocation is followed by: the JobID suffix and the step's JobName.
STEPS = ((".batch", "batch"), (".extern", "extern"), (".0", "a.out"))


def steps(frame: pd.DataFrame, suffix: str, name: str) -> np.ndarray:
    """Each allocation's step `suffix` as sacct prints it: the job's times and sizes, no user, limit or QOS."""
    blank = dict.fromkeys(("User", "UID", "Group", "GID", "Partition", "QOS", "TimelimitRaw", "ReqTRES", "Flags"), "")
    lines = frame.assign(
        **blank,
        Eligible=frame["Submit"],
        JobIDRaw=frame["JobIDRaw"] + suffix,
        JobID=frame["JobID"] + suffix,
        JobName=name,
    )
    return lines.agg("|".join, axis=1).to_numpy(dtype=object)


def _peak_resident_mb() -> float:
    """This process's peak resident memory (MiB).

    VmHWM where Linux has it: a spawned child's ru_maxrss starts from its
    parent's peak (the generator's), which is not the reader's.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _read(path: str, answer: multiprocessing.queues.Queue) -> None:  # type: ignore[name-defined]
    from simulator.workloads.sacct import read_sacct

    began = time.perf_counter()
    trace = read_sacct(path)
    seconds = time.perf_counter() - began
    peak_mb = _peak_resident_mb()
    answer.put((seconds, peak_mb, len(trace.records), len(trace.jobs), dict(trace.skipped)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="about how many lines to generate")
    parser.add_argument("--keep", metavar="FILE", help="write the generated log here and keep it")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-sacct-")
    path = Path(args.keep or os.path.join(folder, "site.sacct"))
    began = time.perf_counter()
    generate(path, args.lines)
    with path.open("rb") as file:
        lines = sum(1 for _ in file)
    print(f"generated {lines:,} lines ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - began:.1f} s")
    context = multiprocessing.get_context("spawn")
    answer = context.Queue()
    process = context.Process(target=_read, args=(str(path), answer))
    process.start()
    seconds, peak_mb, records, jobs, skipped = answer.get()
    process.join()
    print(f"read_sacct: {seconds:.2f} s, peak RSS {peak_mb:.0f} MiB (process total, Python and pandas included)")
    print(f"  {records:,} records, {jobs:,} replayable; skipped {skipped}")
    if not args.keep:
        path.unlink()
        os.rmdir(folder)


if __name__ == "__main__":
    main()
