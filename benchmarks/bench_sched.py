"""lgbm-sched's replay time against lgbm-quantile's (issue 12: within 3x).

FCFS + EASY-SJBF, regular mode, request correction, the estimator in-process,
on SDSC-SP2; each estimator replayed `--repeat` times alternately (the
machine is shared: the best time of each is compared), loading excluded.
Usage:

    python benchmarks/bench_sched.py [--traces DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from predictor.registry import make_estimator
from predictor.session import LocalSession
from simulator.engine import SimulationConfig, simulate
from simulator.metrics import scheduling_metrics
from simulator.workloads.swf import read_swf

TRACE_FILE = "SDSC-SP2-1998-4.2-cln.swf.gz"
ESTIMATORS = ("lgbm-quantile", "lgbm-sched")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    path = args.traces / TRACE_FILE
    if not path.exists():
        raise SystemExit(f"{path}: missing; nothing to measure")
    trace = read_swf(path)
    procs = trace.machine_procs()
    config = SimulationConfig(procs, "fcfs", "easy", "regular", "request", "sjf")
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for spec in ESTIMATORS:
            began = time.perf_counter()
            result = simulate(trace.jobs, config, LocalSession(make_estimator(spec)))
            seconds = time.perf_counter() - began
            best[spec] = min(seconds, best.get(spec, seconds))
            bsld = scheduling_metrics(result.jobs, procs, "fcfs")["avg_bounded_slowdown"]
            print(f"{spec:<14} {seconds:7.1f} s  AVEbsld {bsld:.2f}", flush=True)
    ratio = best["lgbm-sched"] / best["lgbm-quantile"]
    print(f"{TRACE_FILE}: lgbm-sched / lgbm-quantile replay time {ratio:.2f} (target: at most 3)")


if __name__ == "__main__":
    main()
