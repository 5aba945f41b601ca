"""Simulator speed and memory on real traces.

For each trace and each policy x backfilling (plus FCFS with the `sjf`
backfill order, EASY-SJBF): whole-trace replay time (loading included), jobs
per second and peak resident memory, each run in a fresh process so that
memory figures do not leak between runs. Then how the time grows with trace
length (prefixes of HPC2N). Usage:

    python benchmarks/bench_simulator.py [--traces DIR] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import time
from pathlib import Path

TRACES = {
    "SDSC-SP2-1998-4.2-cln.swf.gz": 128,
    "CTC-SP2-1996-3.1-cln.swf.gz": 338,
    "HPC2N-2002-2.2-cln.swf.gz": 240,
}
POLICIES = ("fcfs", "wfp", "sjf")
BACKFILLS = ("easy", "conservative")
#: (policy, backfilling, backfill order): every policy x backfilling in queue order, and FCFS with `sjf`.
CONFIGS = [(policy, backfill, "queue") for policy in POLICIES for backfill in BACKFILLS] + [
    ("fcfs", backfill, "sjf") for backfill in BACKFILLS
]


def _run(path: str, procs: int, policy: str, backfill: str, order: str, jobs: int | None, answer) -> None:
    from predictor.registry import make_estimator
    from predictor.session import LocalSession
    from simulator.engine import SimulationConfig, simulate
    from simulator.workloads.swf import read_swf

    began = time.perf_counter()
    trace = read_swf(path)
    table = trace.jobs if jobs is None else trace.jobs.iloc[:jobs]
    loaded = time.perf_counter()
    config = SimulationConfig(procs, policy, backfill, backfill_order=order)
    result = simulate(table, config, LocalSession(make_estimator("request")))
    done = time.perf_counter()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    answer.send((len(result.jobs), loaded - began, done - loaded, peak_mb))


def measure(path: str, procs: int, policy: str, backfill: str, order: str = "queue", jobs: int | None = None) -> tuple:
    """(jobs, load s, simulate s, peak MB) from a fresh process."""
    receive, send = multiprocessing.Pipe(duplex=False)
    process = multiprocessing.get_context("fork").Process(
        target=_run, args=(path, procs, policy, backfill, order, jobs, send)
    )
    process.start()
    outcome = receive.recv()
    process.join()
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--quick", action="store_true", help="SDSC-SP2 only, no growth series")
    args = parser.parse_args()
    folder = Path(args.traces)
    names = list(TRACES)[:1] if args.quick else list(TRACES)
    print(
        f"{'trace':<30} {'policy':<5} {'backfill':<13} {'order':<5} {'jobs':>7} {'load s':>7} {'sim s':>7} "
        f"{'total s':>8} {'jobs/s':>8} {'peak MB':>8}"
    )
    for name in names:
        path = folder / name
        if not path.exists():
            print(f"{name}: not found in {folder}, skipped")
            continue
        for policy, backfill, order in CONFIGS:
            jobs, load, sim, peak = measure(str(path), TRACES[name], policy, backfill, order)
            print(
                f"{name[:30]:<30} {policy:<5} {backfill:<13} {order:<5} {jobs:>7} {load:>7.2f} {sim:>7.2f} "
                f"{load + sim:>8.2f} {jobs / sim:>8.0f} {peak:>8.0f}",
                flush=True,
            )
    if args.quick:
        return
    path = folder / "HPC2N-2002-2.2-cln.swf.gz"
    if path.exists():
        print("\ngrowth with trace length (HPC2N, fcfs + easy)")
        print(f"{'jobs':>8} {'sim s':>7} {'us/job':>7}")
        for share in (0.125, 0.25, 0.5, 1.0):
            jobs, _, sim, _ = measure(str(path), TRACES[path.name], "fcfs", "easy", jobs=int(202_871 * share))
            print(f"{jobs:>8} {sim:>7.2f} {sim / jobs * 1e6:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
