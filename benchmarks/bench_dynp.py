"""dynP's cost on a whole trace: self-tuning dynP plans the whole queue three times at every decision.

SDSC-SP2 (target: a whole replay with self-tuning dynP under 30 s and 500 MB
on the project's 2-core machine), each configuration in a fresh process
(`bench_simulator.measure`), beside the static policies it switches between
as references. The machine is shared, so beside the wall times the child's
CPU time (user + system) says what a quiet machine would take. Usage:

    python benchmarks/bench_dynp.py [--traces DIR] [--trace NAME --procs N]
"""

from __future__ import annotations

import argparse
import os
import resource
from pathlib import Path

from bench_simulator import measure

#: (policy SPEC, backfilling): the references, then dynP's variants and deciders.
CONFIGS = [
    ("fcfs", "conservative"),
    ("sjf", "conservative"),
    ("ljf", "conservative"),
    ("dynp:variant=basic", "conservative"),
    ("dynp:decider=simple", "conservative"),
    ("dynp", "conservative"),
    ("dynp", "easy"),
    ("fcfs", "replan"),
    ("dynp", "replan"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--trace", default="SDSC-SP2-1998-4.2-cln.swf.gz", help="file name in --traces")
    parser.add_argument("--procs", type=int, default=128, help="machine size (SDSC-SP2: 128)")
    args = parser.parse_args()
    path = Path(args.traces) / args.trace
    if not path.exists():
        print(f"{path}: not found, nothing measured")
        return
    print(f"{args.trace}, load average {os.getloadavg()[0]:.1f} at the start")
    print(
        f"{'policy':<22} {'backfill':<13} {'jobs':>7} {'load s':>7} {'sim s':>7} {'total s':>8} {'cpu s':>7} "
        f"{'peak MB':>8}"
    )
    for policy, backfill in CONFIGS:
        before = _children_cpu()
        jobs, load, sim, peak = measure(str(path), args.procs, policy, backfill)
        cpu = _children_cpu() - before
        total = load + sim
        print(
            f"{policy:<22} {backfill:<13} {jobs:>7} {load:>7.2f} {sim:>7.2f} {total:>8.2f} {cpu:>7.2f} {peak:>8.0f}",
            flush=True,
        )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


def _children_cpu() -> float:
    """CPU seconds of the finished child processes so far (`measure` waits for its child)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
