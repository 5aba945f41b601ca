"""What the self-tuning `adaptive` estimator reaches (issue 28), against the fixed configurations, over replicates.

Runs FCFS + EASY with requests, EASY-SJBF with requests, EASY++ (regular mode, correction `request`) with last2
and with `adaptive` (optionally lgbm-sched too) on replicates 0..K-1 of each trace, and reports per trace the
AVEbsld improvement over EASY with requests of the same replicate (paired), the average wait, AWRT and the
longest wait, and the CPU seconds of each run. Gaussier et al.'s four traces get the mean of their improvements
(issue 28's target); every other trace is a harm check: adaptive against EASY, and against the better of
EASY-SJBF and last2 EASY++.

    python scripts/scheduling_adaptive.py --trace KTH-SP2 --trace LLNL-Atlas [--replicates K] [--workers N] \\
        [--with-lgbm-sched] --out runs.csv
    python scripts/scheduling_adaptive.py --from-csv runs.csv      # the tables again, from the runs
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from scheduling_baselines import TRACES as GAUSSIER
from scheduling_baselines import TRACES_DIR, Baseline

from simulator.experiment import run_simulation
from simulator.workloads.replicates import DEFAULT_JITTER_SECONDS
from simulator.workloads.swf import read_swf
from tsched.cli.simulation import reservation_delay

#: Gaussier et al.'s four traces, then the public traces with requests the issue names as harm cases and others.
TRACES = {
    **GAUSSIER,
    "LLNL-Atlas": "LLNL-Atlas-2006-2.1-cln.swf.gz",
    "HPC2N": "HPC2N-2002-2.2-cln.swf.gz",
    "CEA-Curie": "CEA-Curie-2011-2.1-cln.swf.gz",
    "SDSC-DS": "SDSC-DS-2004-2.1-cln.swf.gz",
    "LANL-CM5": "LANL-CM5-1994-4.1-cln.swf.gz",
    "Sandia-Ross": "Sandia-Ross-2001-1.1-cln.swf.gz",
    "UniLu-Gaia": "UniLu-Gaia-2014-1.swf.gz",
    "LLNL-Thunder": "LLNL-Thunder-2007-1.1-cln.swf.gz",
    "LPC-EGEE": "LPC-EGEE-2004-1.2-cln.swf.gz",
    "RICC": "RICC-2010-2.swf.gz",
}
EASY, SJBF, LAST2, ADAPTIVE = "EASY, requests", "EASY-SJBF, requests", "EASY++ last2", "EASY++ adaptive"
CONFIGURATIONS = (
    Baseline(EASY, "request", "none", "queue", "request", {}),
    Baseline(SJBF, "request", "none", "sjf", "request", {}),
    Baseline(LAST2, "last2", "regular", "sjf", "request", {}),
    Baseline(ADAPTIVE, "adaptive", "regular", "sjf", "request", {}),
)
LGBM_SCHED = Baseline("EASY++ lgbm-sched", "lgbm-sched", "regular", "sjf", "request", {})
#: Issue 28's target: the mean AVEbsld improvement of clairvoyant EASY++ on Gaussier et al.'s traces.
TARGET = 0.529
METRICS = ("avg_bounded_slowdown", "avg_wait", "awrt", "max_wait")


def run(path: Path, name: str, configuration: Baseline, replicate: int, jitter: int, bound: int | None) -> dict:
    """One simulation (EASY's reservation delay bounded by `bound` seconds, or not): its metrics, and the wall and
    CPU seconds it took."""
    trace = read_swf(path, lenient=True)  # LLNL-Thunder has lines with a negative submit time: left out, as `--lenient`
    config = replace(configuration.config(trace.machine_procs()), max_reservation_delay=acting(configuration, bound))
    began, cpu = time.perf_counter(), time.process_time()
    summary, _ = run_simulation(trace, config, configuration.estimator, replicate=replicate, jitter=jitter)
    measured = summary.to_dict()
    return {
        "trace": name,
        "replicate": replicate,
        "configuration": labelled(configuration, bound),
        **{metric: measured[metric] for metric in METRICS},
        "seconds": time.perf_counter() - began,
        "cpu_seconds": time.process_time() - cpu,
    }


def times(wait: float, easy: float) -> float:
    """`wait` as a multiple of EASY's; 1 where both are 0 (a trace on which no job waits: LLNL-Thunder)."""
    return wait / easy if easy else (1.0 if wait == 0 else np.inf)


def acting(configuration: Baseline, bound: int | None) -> int | None:
    """The bound where it can act: on requests no backfilled job outlives its estimate, so EASY and EASY-SJBF with
    requests are the same runs with or without it (and run without)."""
    return None if configuration.mode == "none" else bound


def labelled(configuration: Baseline, bound: int | None) -> str:
    """The configuration's label, naming the bound where it acts."""
    bound = acting(configuration, bound)
    if bound is None:
        return configuration.label
    return (
        f"{configuration.label}, bound {bound // 3600}h"
        if bound % 3600 == 0
        else f"{configuration.label}, bound {bound}s"
    )


def summarise(runs: pd.DataFrame) -> str:
    """Per trace and configuration: AVEbsld improvement over EASY (mean over replicates), average wait, AWRT,
    longest wait (x EASY's), CPU seconds; then the target and the harm checks."""
    means = runs.groupby(["trace", "configuration"]).mean(numeric_only=True)
    paired = runs.pivot_table(
        index=["trace", "replicate"], columns="configuration", values="avg_bounded_slowdown", aggfunc="first"
    )
    improvement = (1 - paired.div(paired[EASY], axis=0)).groupby(level="trace").mean()
    lines = [
        f"replicates per trace: {runs.groupby('trace')['replicate'].nunique().to_dict()}",
        "",
        "| trace | configuration | AVEbsld (vs EASY) | avg wait (s) | AWRT (s) | longest wait (h; x EASY's) | CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for trace in dict.fromkeys(runs["trace"]):
        for configuration in dict.fromkeys(runs["configuration"]):
            if (trace, configuration) not in means.index:
                continue
            row = means.loc[(trace, configuration)]
            longest = times(row["max_wait"], means.loc[(trace, EASY), "max_wait"])
            lines.append(
                f"| {trace} | {configuration} | {row['avg_bounded_slowdown']:.2f} "
                f"({100 * improvement.loc[trace, configuration]:+.1f}%) | {row['avg_wait']:.0f} | {row['awrt']:.0f} | "
                f"{row['max_wait'] / 3600:.1f} (x{longest:.2f}) | {row['cpu_seconds']:.0f} |"
            )
    return "\n".join([*lines, "", *verdicts(runs, improvement)])


def verdicts(runs: pd.DataFrame, improvement: pd.DataFrame) -> list[str]:
    """Issue 28's targets, as measured: the mean over Gaussier et al.'s traces, and the harm checks elsewhere."""
    lines = []
    means = runs.groupby(["trace", "configuration"]).mean(numeric_only=True)
    for adaptive in (label for label in improvement.columns if label.startswith(ADAPTIVE)):
        measured = improvement[adaptive].dropna()
        gaussier = [trace for trace in GAUSSIER if trace in measured.index]
        if gaussier:
            lines.append(
                f"{adaptive}: mean AVEbsld improvement over EASY on {', '.join(gaussier)} "
                f"{100 * measured.loc[gaussier].mean():.1f}% (target {100 * TARGET:.1f}%)"
            )
            wait = runs.pivot_table(index=["trace", "replicate"], columns="configuration", values="avg_wait")
            below = (wait[adaptive] < wait[SJBF]).groupby(level="trace").agg(["sum", "count"])
            lines.append(
                f"{adaptive}: average wait below EASY-SJBF's: "
                + ", ".join(f"{trace} {below.loc[trace, 'sum']}/{below.loc[trace, 'count']}" for trace in gaussier)
            )
        lines += [
            harm(trace, adaptive, improvement.loc[trace], means.loc[trace])
            for trace in measured.index
            if trace not in GAUSSIER
        ]
    return lines


def harm(trace: str, adaptive: str, improvement: pd.Series, means: pd.DataFrame) -> str:
    """Issue 28's checks on a trace not used in the design: AVEbsld no worse than EASY's and within a point of the
    better of EASY-SJBF and last2 EASY++, AWRT no worse than EASY-SJBF's, no wait over twice EASY's longest."""
    last2 = adaptive.replace(ADAPTIVE, LAST2, 1)  # run with the same bound
    better = np.nanmax([improvement.get(SJBF, np.nan), improvement.get(last2, np.nan)])
    awrt, longest = means.loc[adaptive, "awrt"], means.loc[adaptive, "max_wait"]
    checks = {
        "AVEbsld no worse than EASY's": improvement[adaptive] >= 0,
        f"within 1 point of the better of EASY-SJBF and last2 ({100 * better:+.1f}%)": improvement[adaptive]
        >= better - 0.01,
        f"AWRT no worse than EASY-SJBF's ({awrt / means.loc[SJBF, 'awrt']:.3f}x)": awrt <= means.loc[SJBF, "awrt"],
        f"longest wait within twice EASY's (x{times(longest, means.loc[EASY, 'max_wait']):.2f})": longest
        <= 2 * means.loc[EASY, "max_wait"],
    }
    met = "; ".join(f"{check}: {'met' if ok else 'MISSED'}" for check, ok in checks.items())
    return f"{trace}, {adaptive} {100 * improvement[adaptive]:+.1f}%: {met}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=TRACES_DIR, help="folder of the SWF logs")
    parser.add_argument("--trace", action="append", choices=list(TRACES), help="these traces (repeatable)")
    parser.add_argument("--replicates", type=int, default=1, help="replicates 0..K-1 of every trace")
    parser.add_argument("--jitter", type=int, default=DEFAULT_JITTER_SECONDS, help="seconds a submission may move")
    parser.add_argument("--with-lgbm-sched", action="store_true", help="run lgbm-sched EASY++ too (its cost)")
    parser.add_argument("--workers", type=int, default=2, help="simulations in parallel")
    parser.add_argument(
        "--max-reservation-delay",
        type=reservation_delay,
        default=None,
        metavar="DURATION|none",
        help="EASY's bound on the head job's delay for the EASY++ runs (a duration such as 2h; none: unbounded)",
    )
    parser.add_argument("--out", type=Path, help="write every run as CSV (appended to, runs already there kept)")
    parser.add_argument("--from-csv", type=Path, help="summarise these runs instead of simulating")
    args = parser.parse_args()
    print(summarise(pd.read_csv(args.from_csv) if args.from_csv else simulate(args)))


def simulate(args: argparse.Namespace) -> pd.DataFrame:
    """Every run asked for that --out does not hold yet, and those it holds."""
    configurations = (*CONFIGURATIONS, LGBM_SCHED) if args.with_lgbm_sched else CONFIGURATIONS
    bound = args.max_reservation_delay
    done = pd.read_csv(args.out) if args.out and args.out.exists() else pd.DataFrame(columns=list(runs_key()))
    have = set(done[list(runs_key())].itertuples(index=False, name=None))
    tasks = [
        (args.traces / TRACES[name], name, configuration, replicate)
        for replicate in range(args.replicates)
        for name in args.trace or list(GAUSSIER)
        for configuration in configurations
        if (name, replicate, labelled(configuration, bound)) not in have
    ]
    rows = done.to_dict("records")
    for row in Parallel(n_jobs=args.workers, return_as="generator_unordered")(
        delayed(run)(path, name, configuration, replicate, args.jitter, bound)
        for path, name, configuration, replicate in tasks
    ):
        rows.append(row)
        print(" ".join(f"{key}={value}" for key, value in row.items()), flush=True)
        if args.out:  # every run as it ends: a long sweep cut short keeps what it measured
            pd.DataFrame(rows).to_csv(args.out, index=False)
    return pd.DataFrame(rows)


def runs_key() -> tuple[str, str, str]:
    """What identifies a run in the CSV."""
    return ("trace", "replicate", "configuration")


if __name__ == "__main__":
    main()
