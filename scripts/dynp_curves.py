"""Streit's shrinking-factor curves (his Figures 4 to 6) on real traces: ARTwW and SLDwA against load.

Per trace, the --jobs consecutive jobs around the middle of the trace are
replayed at every load factor F (inter-arrival times divided by F; Streit's
shrinking factor is 1/F) under FCFS, SJF, LJF, basic dynP (7200 s / 9000 s)
and self-tuning dynP (advanced decider, ARTwW quality), with each backfilling,
three times: planned with the users' requests (mode none), with --estimator's
predictions (regular mode: waiting and running jobs; in selective mode a
started job is seen with its request again, its hold grows and conservative
backfilling rebuilds its plan, docs/dynp.md), and with exact runtimes (the
oracle in regular mode: Streit's "perfect estimates", his Figure 6). The
predictor starts cold at the period's first job, as in `tsched evaluate`.

Every run is a row of the CSV (the columns of evaluate's results.csv: every
metric, the `dynp_*` counts); each trace and backfilling gets one PNG: ARTwW
and SLDwA against F, one row per source of estimates. `--plot-only` redraws
the figures from an existing CSV.

    python scripts/dynp_curves.py --csv docs/dynp-curves.csv --out docs/img [--estimator percentile]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from simulator.dynp import canonical_policy, is_dynamic
from simulator.engine import SimulationConfig
from simulator.experiment import run_simulation
from simulator.workloads.swf import read_swf
from simulator.workloads.trace import Trace

TRACES = ("KTH-SP2-1996-2.1-cln", "CTC-SP2-1996-3.1-cln", "SDSC-SP2-1998-4.2-cln")
#: Streit's Figure 4: the three single policies, basic dynP with the bounds that were best in his earlier work,
#: and self-tuning dynP with the advanced decider and ARTwW.
POLICIES = {
    "fcfs": "FCFS",
    "sjf": "SJF",
    "ljf": "LJF",
    canonical_policy("dynp:variant=basic,lower=7200,upper=9000"): "basic dynP (7200 s, 9000 s)",
    canonical_policy("dynp:decider=advanced,quality=artww"): "self-tuning dynP (advanced, ARTwW)",
}
COLORS = {"fcfs": "#1f77b4", "sjf": "#2ca02c", "ljf": "#d62728"}
METRICS = {"artww": "ARTwW (s)", "sldwa": "SLDwA"}


def sources(estimator: str) -> list[tuple[str, str, str]]:
    """(estimator SPEC, mode, title) of each source of estimates."""
    return [
        ("request", "none", "users' requests"),
        (estimator, "regular", f"{estimator} (regular)"),
        ("oracle", "regular", "exact runtimes (oracle)"),
    ]


@functools.lru_cache(maxsize=3)
def middle_period(path: str, jobs: int) -> Trace:
    """The records submitted from the first to the last of the `jobs` replayable jobs around the trace's middle."""
    trace = read_swf(path)
    submit = trace.jobs["submit"].to_numpy()
    first = max(0, len(submit) // 2 - jobs // 2)
    last = min(len(submit), first + jobs) - 1
    records = trace.records
    inside = (records["submit"] >= submit[first]) & (records["submit"] <= submit[last])
    return Trace.from_records(trace.path, trace.header, records.loc[inside], trace.malformed)


def run_point(path: str, jobs: int, load: float, policy: str, backfill: str, spec: str, mode: str) -> dict[str, Any]:
    """One replay of the period: evaluate's results.csv row, plus how long it took."""
    period = middle_period(path, jobs)
    config = SimulationConfig(period.machine_procs(), policy, backfill, mode)
    started = time.perf_counter()
    summary, _ = run_simulation(period, config, spec, load_factor=load)
    row = summary.to_row(Path(path).name.removesuffix(".swf.gz"))
    return row | {"seconds": round(time.perf_counter() - started, 2)}


def run_all(args: argparse.Namespace) -> pd.DataFrame:
    from joblib import Parallel, delayed

    paths = [str(Path(args.traces) / f"{name}.swf.gz") for name in args.trace]
    tasks = list(itertools.product(paths, args.loads, POLICIES, args.backfill, sources(args.estimator)))
    # the slowest runs (dynP, heavy load) first, so that the two workers finish together
    tasks.sort(key=lambda task: (is_dynamic(task[2]), task[1]), reverse=True)
    parallel = Parallel(n_jobs=args.workers, return_as="generator_unordered")
    rows = []
    started = time.monotonic()
    calls = (
        delayed(run_point)(path, args.jobs, load, policy, backfill, spec, mode)
        for path, load, policy, backfill, (spec, mode, _) in tasks
    )
    for row in parallel(calls):
        rows.append(row)
        print(
            f"[{len(rows)}/{len(tasks)} {time.monotonic() - started:.0f} s] {row['trace']} x{row['load_factor']:g} "
            f"{row['policy']} {row['backfill']} {row['estimator']}: ARTwW {row['artww']:.0f} ({row['seconds']} s)",
            file=sys.stderr,
            flush=True,
        )
    keys = ["trace", "backfill", "estimator", "policy", "load_factor"]
    return pd.DataFrame(rows).sort_values(keys, kind="stable").reset_index(drop=True)


def plot(results: pd.DataFrame, estimator: str, out: Path) -> list[Path]:
    """One figure per trace x backfilling: ARTwW and SLDwA (columns) against F, per source of estimates (rows)."""
    written = []
    for (trace, backfill), table in results.groupby(["trace", "backfill"], sort=False):
        rows = sources(estimator)
        figure = Figure(figsize=(11, 3.2 * len(rows)), dpi=100, layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.subplots(len(rows), len(METRICS), squeeze=False)
        for row, (spec, mode, title) in enumerate(rows):
            runs = table[(table["estimator"] == spec) & (table["mode"] == mode)]
            for column, (metric, label) in enumerate(METRICS.items()):
                ax = axes[row][column]
                for policy, name in POLICIES.items():
                    curve = runs[runs["policy"] == policy].sort_values("load_factor")
                    dashed = policy not in COLORS
                    ax.plot(
                        curve["load_factor"],
                        curve[metric],
                        marker="o" if dashed else "s",
                        markersize=4,
                        linestyle="--" if dashed else "-",
                        color=COLORS.get(policy, "#000000" if "self-tuning" in name else "#888888"),
                        label=name,
                    )
                ax.set_xlabel("load factor F (Streit's shrinking factor is 1/F)")
                values = runs[metric]
                logarithmic = len(values) > 0 and values.max() > 5 * values.min() > 0  # a starving policy
                if logarithmic:
                    ax.set_yscale("log")
                ax.set_ylabel(f"{label}, log scale" if logarithmic else label)
                ax.set_title(f"{title}: {label.split(' ')[0]}", fontsize=10)
                ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        figure.suptitle(f"{trace}, {backfill} backfilling: smaller is better", fontsize=11)
        path = out / f"dynp-{trace.split('-')[0].lower()}-{backfill}.png"
        figure.savefig(path)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--trace", action="append", help=f"trace name (repeatable; default: {', '.join(TRACES)})")
    parser.add_argument("--estimator", default="percentile", metavar="SPEC", help="the predictor of the middle row")
    parser.add_argument(
        "--loads",
        type=lambda text: [float(item) for item in text.split(",")],
        default=[0.8, 1.0, 1.2, 1.4],
        metavar="F,...",
        help="load factors",
    )
    parser.add_argument("--backfill", action="append", help="backfilling (repeatable; default: conservative)")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in each trace's period (Streit's: 10,000)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--csv", type=Path, required=True, help="where the runs are written (or read, --plot-only)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNG files")
    parser.add_argument("--plot-only", action="store_true", help="redraw the figures from --csv without running")
    args = parser.parse_args()
    args.trace = args.trace or list(TRACES)
    args.backfill = args.backfill or ["conservative"]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.plot_only:
        results = pd.read_csv(args.csv)
    else:
        results = run_all(args)
        results.to_csv(args.csv, index=False)
    for path in plot(results, args.estimator, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    # The workers unpickle `run_point` by its module's name: run it from the importable module, not __main__.
    import dynp_curves

    dynp_curves.main()
