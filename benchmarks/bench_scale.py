"""A generated site at scale under the `slurm` scheduler: time and peak memory (issue 26: a year of a 5,000-node
cluster, 1,000,000 jobs, in at most 10 minutes and 2 GB on this 2-core machine).

The site (`simulator.workloads.sitegen`: CPU, large-memory and GPU nodes, three
partitions, whole-node and shared-node jobs) is generated, then replayed with the
users' requests by Slurm's main scheduler and backfill at Slurm's default
SchedulerParameters. Reported: generation and simulation CPU time, jobs per
CPU-second, peak resident memory of the process, and HPE FastSim's published
rate beside it (600,000 jobs on ARCHER2's 5,860 nodes in about 7 h 20 min on 64
cores, as issues 24 and 26 quote it).
Smaller sizes show how the time grows; `--jobs` and `--days` scale together by
default (the year's arrival rate). `--count` replays under cProfile (about
twice as slow) and says where the time goes: how many start estimates the
backfill cycles made and how many placements Slurm's node chooser made, per job.

    python benchmarks/bench_scale.py --nodes 5000 --jobs 1000000
    python benchmarks/bench_scale.py --nodes 500 --jobs 20000   # a quick look
    python benchmarks/bench_scale.py --nodes 1000 --jobs 5000 --count
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import time

from simulator.clusterreplay import SLURM, simulate_cluster
from simulator.engine import SimulationConfig
from simulator.experiment import open_session
from simulator.workloads.sitegen import generate_site

FASTSIM_JOBS, FASTSIM_SECONDS, FASTSIM_CORES = 600_000, 7 * 3600 + 20 * 60, 64
YEAR_JOBS = 1_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--jobs", type=int, default=YEAR_JOBS)
    parser.add_argument("--days", type=float, help="the span (default: a year's share at 1,000,000 jobs a year)")
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--count", action="store_true", help="count estimates and placements (under cProfile)")
    args = parser.parse_args()
    days = args.days if args.days is not None else 365 * args.jobs / YEAR_JOBS
    began = time.process_time()
    site = generate_site(args.nodes, args.jobs, days, args.load)
    generated = time.process_time()
    jobs = site.trace.jobs
    config = SimulationConfig(site.cluster.procs, backfill=SLURM)
    profiler = cProfile.Profile() if args.count else None
    if profiler is not None:
        profiler.enable()
    result = simulate_cluster(jobs, config, open_session("request", jobs), site.cluster, site.requests)
    ended = time.process_time()
    if profiler is not None:
        profiler.disable()
        print_counts(pstats.Stats(profiler), len(jobs))
    seconds = ended - generated
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(site.cluster.summary())
    print(site.trace.header.lines[3].lstrip("; "))
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"generation   {generated - began:9.1f} s CPU")
    print(
        f"simulation   {seconds:9.1f} s CPU   {len(result.jobs) / seconds:9.0f} jobs/s   mean wait "
        f"{result.jobs['wait'].mean():.0f} s   left out {sum(result.skipped.values())}"
    )
    print(f"peak memory  {peak_mb:9.0f} MB")
    fastsim = FASTSIM_JOBS / (FASTSIM_SECONDS * FASTSIM_CORES)
    print(
        f"FastSim      {FASTSIM_JOBS / FASTSIM_SECONDS:9.1f} jobs/s on {FASTSIM_CORES} cores "
        f"({fastsim:.2f} per core-second); tsched on one core: {len(result.jobs) / seconds / fastsim:.0f}x that"
    )
    print(f"target       {YEAR_JOBS} jobs in 600 s: {YEAR_JOBS / 600:.0f} jobs/s, 2048 MB")


#: What `--count` reports: (module file, function) -> what a call is.
COUNTED = {
    ("slurmsched.py", "earliest"): "start estimates asked in backfill cycles",
    ("nodeplan.py", "earliest_start"): "start estimates made (not asked before in the cycle)",
    ("nodes.py", "choose"): "placements by the node chooser (estimates and starts)",
    ("slurmsched.py", "_cycle"): "backfill cycles",
}


def print_counts(stats: pstats.Stats, jobs: int) -> None:
    """Calls of the `COUNTED` functions, in all and per job."""
    calls = {(file.rsplit("/", 1)[-1], name): entry[1] for (file, _, name), entry in stats.stats.items()}
    for key, what in COUNTED.items():
        count = calls.get(key, 0)
        print(f"{what:<55} {count:>10}   {count / jobs:8.1f} per job")


if __name__ == "__main__":
    main()
