"""Speed of the `slurm` scheduler against FCFS + EASY on the same jobs (issue 24: the whole of SDSC-SP2 as one
partition of 128 one-CPU nodes within 3x FCFS + EASY's time).

Both replay the first `--jobs` jobs of the trace with the users' requests;
the `slurm` scheduler runs with Slurm's default SchedulerParameters
(bf_interval=30, bf_resolution=60, bf_max_job_test=500). Times are CPU time
(the machine is shared), with the replays' mean waits beside them.
Usage:

    python benchmarks/bench_slurm.py [--trace PATH] [--jobs 2000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from simulator.clusterreplay import SLURM, simulate_cluster, single_cpu_nodes
from simulator.engine import SimulationConfig, simulate
from simulator.experiment import open_session
from simulator.workloads.formats import read_trace

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "SDSC-SP2-1998-4.2-cln.swf.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--jobs", type=int, default=2000, help="the first N jobs (0: all)")
    args = parser.parse_args()
    trace = read_trace(args.trace, None)
    jobs = trace.jobs if args.jobs == 0 else trace.jobs.iloc[: args.jobs].reset_index(drop=True)
    procs = trace.machine_procs()
    began = time.process_time()
    easy = simulate(jobs, SimulationConfig(procs), open_session("request", jobs))
    middle = time.process_time()
    config = SimulationConfig(procs, backfill=SLURM)
    slurm = simulate_cluster(jobs, config, open_session("request", jobs), single_cpu_nodes(procs), {})
    ended = time.process_time()
    print(f"{Path(args.trace).name}: {len(jobs)} jobs on {procs} one-CPU nodes")
    print(f"FCFS + EASY  {middle - began:8.2f} s CPU   mean wait {easy.jobs['wait'].mean():10.0f} s")
    print(f"slurm        {ended - middle:8.2f} s CPU   mean wait {slurm.jobs['wait'].mean():10.0f} s")
    print(f"ratio        {(ended - middle) / (middle - began):8.1f}x")


if __name__ == "__main__":
    main()
