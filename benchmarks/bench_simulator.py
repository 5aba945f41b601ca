"""Simulator speed and memory on real traces.

For each trace and each policy x backfilling (plus FCFS with the `sjf`
backfill order, EASY-SJBF): whole-trace replay time (loading included), jobs
per second and peak resident memory, each run in a fresh process so that
memory figures do not leak between runs. Then how the time grows with trace
length (prefixes of HPC2N). Usage:

    python benchmarks/bench_simulator.py [--traces DIR] [--quick]

Ratios, both sides measured in one invocation, best of `--repeat` CPU times
each, with the load average beside them (the machine is shared):

    python benchmarks/bench_simulator.py --ratio [--repeat 3]
        conservative backfilling over EASY (FCFS) on the whole of HPC2N-2002 (issue 24: within 3.5x)
    python benchmarks/bench_simulator.py --against DIR [--repeat 3] [--trace NAME] [--backfill easy]
        this checkout's FCFS replay of a whole trace over the same in-process `simulate` in another checkout DIR
        (e.g. the commit before the event loop's refactor, to see what the loop costs)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import subprocess
import sys
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


#: Times the same in-process replay in whichever checkout runs it (its own `simulator`, the current directory's).
CPU_TIMER = """
import sys, time
from predictor.registry import make_estimator
from predictor.session import LocalSession
from simulator.engine import SimulationConfig, simulate
from simulator.workloads.swf import read_swf
path, procs, backfill, repeat = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
jobs = read_swf(path).jobs
best = float("inf")
for _ in range(repeat):
    began = time.process_time()
    result = simulate(jobs, SimulationConfig(procs, backfill=backfill), LocalSession(make_estimator("request")))
    best = min(best, time.process_time() - began)
print(best, result.jobs["wait"].mean())
"""


def cpu_time(checkout: Path, path: Path, backfill: str, repeat: int) -> tuple[float, float]:
    """(best CPU seconds, mean wait) of FCFS with `backfill` on the trace at `path`, replayed by `checkout`."""
    command = [sys.executable, "-c", CPU_TIMER, str(path), str(TRACES[path.name]), backfill, str(repeat)]
    output = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=True).stdout.split()
    return float(output[0]), float(output[1])


def load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def best_times(path: Path, sides: dict[str, tuple[Path, str]], repeat: int) -> dict[str, float]:
    """Each side's (checkout, backfilling) replay of `path`, alternating, best of `repeat` CPU times; printed."""
    best: dict[str, tuple[float, float]] = {}
    for _ in range(repeat):
        for label, (checkout, backfill) in sides.items():
            seconds, wait = cpu_time(checkout, path, backfill, 1)
            best[label] = min(best.get(label, (seconds, wait)), (seconds, wait))
    print(f"{path.name}, FCFS, best of {repeat} CPU times, load {load()}")
    for label, (seconds, wait) in best.items():
        print(f"{label:<30} {seconds:8.2f} s   mean wait {wait:10.1f} s")
    return {label: seconds for label, (seconds, _) in best.items()}


def ratio(folder: Path, repeat: int) -> None:
    """Conservative backfilling over EASY on the whole of HPC2N."""
    here = Path(__file__).resolve().parents[1]
    sides = {"easy": (here, "easy"), "conservative": (here, "conservative")}
    best = best_times(folder / "HPC2N-2002-2.2-cln.swf.gz", sides, repeat)
    print(f"ratio {best['conservative'] / best['easy']:.2f}x (target 3.5x)")


def against(other: Path, path: Path, backfill: str, repeat: int) -> None:
    """This checkout's replay over `other`'s."""
    here = Path(__file__).resolve().parents[1]
    best = best_times(path, {f"{other} {backfill}": (other, backfill), f"{here} {backfill}": (here, backfill)}, repeat)
    print(f"ratio {best[f'{here} {backfill}'] / best[f'{other} {backfill}']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--quick", action="store_true", help="SDSC-SP2 only, no growth series")
    parser.add_argument("--ratio", action="store_true", help="conservative over EASY on HPC2N (issue 24's target)")
    parser.add_argument("--against", metavar="DIR", help="this checkout's replay time over DIR's")
    parser.add_argument("--trace", default="SDSC-SP2-1998-4.2-cln.swf.gz", choices=list(TRACES), help="--against")
    parser.add_argument("--backfill", default="easy", help="--against: the backfilling")
    parser.add_argument("--repeat", type=int, default=3, help="--ratio, --against: best of N")
    args = parser.parse_args()
    folder = Path(args.traces)
    if args.ratio:
        ratio(folder, args.repeat)
        return
    if args.against:
        against(Path(args.against).resolve(), folder / args.trace, args.backfill, args.repeat)
        return
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
