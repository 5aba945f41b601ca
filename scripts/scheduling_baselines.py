"""Reproduce Gaussier et al.'s published backfilling baselines with tsched's simulator.

Gaussier, Glesser, Reis and Trystram, "Improving backfilling by using machine
learning to predict running times" (SC'15), report the average bounded slowdown
(AVEbsld, threshold 10 s) of EASY backfilling under FCFS on four Parallel
Workloads Archive logs, with users' requests, with actual runtimes
(clairvoyant), with shortest-first backfilling (EASY-SJBF) and with Tsafrir et
al.'s EASY++ (EASY-SJBF planning with the mean of the user's last two runtimes
in regular mode, corrected when a job outlives its prediction). This script
runs the same configurations on the `-cln` logs in ../shared/traces (never
copied) and prints ours against theirs; EASY++ is run with each correction.

    python scripts/scheduling_baselines.py [--traces DIR] [--trace NAME ...] [--workers N]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from joblib import Parallel, delayed

from simulator.engine import SimulationConfig
from simulator.experiment import run_simulation
from simulator.workloads.swf import read_swf

TRACES_DIR = Path(__file__).resolve().parents[2] / "shared" / "traces"
#: Gaussier et al.'s trace names and the cleaned logs they correspond to.
TRACES = {
    "KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "CTC-SP2": "CTC-SP2-1996-3.1-cln.swf.gz",
    "SDSC-SP2": "SDSC-SP2-1998-4.2-cln.swf.gz",
    "SDSC-BLUE": "SDSC-BLUE-2000-4.2-cln.swf.gz",
}


@dataclass(frozen=True)
class Baseline:
    """One published configuration: how tsched runs it, and the AVEbsld Gaussier et al. report per trace."""

    label: str
    estimator: str
    mode: str
    backfill_order: str
    correction: str
    published: dict[str, float]

    def config(self, procs: int) -> SimulationConfig:
        """EASY backfilling under FCFS, as every row of the published table."""
        return SimulationConfig(procs, "fcfs", "easy", self.mode, self.correction, self.backfill_order)


#: AVEbsld as published (Gaussier et al., SC'15), per configuration and trace.
EASY_REQUESTS = {"KTH-SP2": 92.58, "CTC-SP2": 49.57, "SDSC-SP2": 87.87, "SDSC-BLUE": 36.52}
EASY_CLAIRVOYANT = {"KTH-SP2": 71.72, "CTC-SP2": 37.17, "SDSC-SP2": 70.48, "SDSC-BLUE": 30.62}
EASY_SJBF_REQUESTS = {"KTH-SP2": 69.41, "CTC-SP2": 30.04, "SDSC-SP2": 84.89, "SDSC-BLUE": 19.83}
EASY_PLUS_PLUS = {"KTH-SP2": 62.86, "CTC-SP2": 26.53, "SDSC-SP2": 65.06, "SDSC-BLUE": 16.83}
EASY_PLUS_PLUS_CLAIRVOYANT = {"KTH-SP2": 49.85, "CTC-SP2": 17.57, "SDSC-SP2": 56.84, "SDSC-BLUE": 13.18}

BASELINES = (
    Baseline("EASY, users' requests", "request", "none", "queue", "request", EASY_REQUESTS),
    Baseline("EASY, clairvoyant", "oracle", "regular", "queue", "request", EASY_CLAIRVOYANT),
    Baseline("EASY-SJBF, users' requests", "request", "none", "sjf", "request", EASY_SJBF_REQUESTS),
    *(
        Baseline(f"EASY++, last2, correction {correction}", "last2", "regular", "sjf", correction, EASY_PLUS_PLUS)
        for correction in ("request", "tsafrir", "double")
    ),
    Baseline("EASY++, clairvoyant", "oracle", "regular", "sjf", "request", EASY_PLUS_PLUS_CLAIRVOYANT),
)


def average_bounded_slowdowns(path: Path, baselines: tuple[Baseline, ...] = BASELINES) -> list[float]:
    """AVEbsld of each baseline on the whole trace at `path` (read once)."""
    trace = read_swf(path)
    procs = trace.machine_procs()
    return [
        run_simulation(trace, baseline.config(procs), baseline.estimator)[0].avg_bounded_slowdown
        for baseline in baselines
    ]


def difference(ours: float, published: float) -> float:
    """How far ours is from the published value, in % of it."""
    return 100 * (ours - published) / published


def markdown_table(names: list[str], measured: dict[str, list[float]]) -> str:
    """One row per configuration, one column per trace: ours, published and the difference."""
    lines = [
        "| configuration | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for row, baseline in enumerate(BASELINES):
        cells = []
        for name in names:
            ours, published = measured[name][row], baseline.published[name]
            cells.append(f"{ours:.2f} vs {published:.2f} ({difference(ours, published):+.1f}%)")
        lines.append(f"| {baseline.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_trace_options(parser: argparse.ArgumentParser) -> None:
    """--traces (the folder) and --trace (some of the four), for the scripts that run Gaussier et al.'s traces."""
    parser.add_argument("--traces", type=Path, default=TRACES_DIR, help="folder of the SWF logs")
    parser.add_argument("--trace", action="append", choices=list(TRACES), help="only these traces (repeatable)")


def chosen_traces(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The traces asked for (all four by default); a usage error names the files missing from the folder."""
    names: list[str] = args.trace or list(TRACES)
    missing = [TRACES[name] for name in names if not (args.traces / TRACES[name]).exists()]
    if missing:
        parser.error(f"not in {args.traces}: {', '.join(missing)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_trace_options(parser)
    parser.add_argument("--workers", type=int, default=1, help="traces simulated in parallel")
    args = parser.parse_args()
    names = chosen_traces(parser, args)
    began = time.perf_counter()
    results = Parallel(n_jobs=args.workers)(
        delayed(average_bounded_slowdowns)(args.traces / TRACES[name]) for name in names
    )
    print("AVEbsld (bounded slowdown, threshold 10 s), EASY under FCFS: ours vs Gaussier et al. (SC'15)\n")
    print(markdown_table(names, dict(zip(names, results, strict=True))))
    print(f"\n{len(names)} traces x {len(BASELINES)} configurations in {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
