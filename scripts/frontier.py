"""Is lgbm-quantile above the paper's accuracy/underestimation frontier? Per trace, measured walk-forward.

For every trace: the `request` baseline, Tang et al.'s recommended adjuster
(`percentile`, triple key, 30-day window, floor 0.5) at q = 95, 85, 70,
`last2` and `mean-std`, the whole adjuster grid of their Figures 4-10 (keys x
windows x percentiles x floor), and `lgbm-quantile` calibrated to the
underestimation rate each of the three adjusters reached on that trace
(`target_under` = that rate): the comparison at matched underestimation.
Every estimator sees only jobs that finished before each submission.

Writes, under `--out`: `frontier.csv` (one row per trace x estimator),
`img/frontier-<trace>.png` (accuracy against underestimation: the adjuster grid,
its Pareto front, and the estimators) and `frontier.md` (a table per trace
and a summary). Traces are read from `--traces` (default ../shared/traces),
never copied.

    python scripts/frontier.py [--trace NAME ...] [--out DIR] [--workers N] [--lgbm SPEC]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from predictor.offline import evaluate, percentile_grid
from simulator.evaluation.plots import pareto_front
from simulator.evaluation.report import slug
from simulator.workloads.swf import read_swf

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
ADJUSTER = "percentile:q={q},key=user+group+request,window=30d,floor=0.5,min_jobs=10"
ADJUSTER_QS = (95, 85, 70)
BASELINES = ("request", *(ADJUSTER.format(q=q) for q in ADJUSTER_QS), "last2", "mean-std")
#: The adjuster whose underestimation rate is the headline comparison point.
HEADLINE_Q = 85


def trace_name(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".swf")


def baseline_rows(path: Path) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The named estimators, and the adjuster grid, on one trace (None: no job has a requested time)."""
    jobs = read_swf(path, lenient=True).jobs
    if not len(jobs):
        return None
    rows = pd.DataFrame(evaluate(jobs, list(BASELINES), trace_name(path))["results"])
    grid = percentile_grid(jobs, trace_name(path))
    return rows.assign(trace=trace_name(path), jobs=len(jobs)), grid


def lgbm_row(path: Path, spec: str, matched: str) -> pd.DataFrame:
    jobs = read_swf(path, lenient=True).jobs
    rows = pd.DataFrame(evaluate(jobs, [spec], trace_name(path))["results"])
    return rows.assign(trace=trace_name(path), matched=matched)


def lgbm_spec(base: str, target: float) -> str:
    """`base` with target_under set (a rate of 0 would switch calibration off: keep it positive)."""
    target = max(round(target, 4), 0.001)
    return f"{base}{':' if ':' not in base else ','}target_under={target:g}"


def frontier_accuracy(grid: pd.DataFrame, under: float) -> float:
    """The best adjuster accuracy at an underestimation rate at most `under` (NaN: none that low)."""
    eligible = grid[grid["underestimated"] <= under + 1e-12]
    return float(eligible["accuracy_mean"].max()) if len(eligible) else float("nan")


def plot(name: str, grid: pd.DataFrame, rows: pd.DataFrame, path: Path) -> None:
    figure = Figure(figsize=(7, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    under = grid["underestimated"].to_numpy(dtype=float) * 100
    acc = grid["accuracy_mean"].to_numpy(dtype=float)
    ax.scatter(under, acc, s=6, color="#bbbbbb", label="adjuster grid (keys x windows x q x floor)")
    front = pareto_front(under, acc)
    ax.plot(under[front], acc[front], "--", color="#777777", label="adjuster frontier")
    for prefix, style, color, label in (
        ("percentile", "o", "#1f77b4", "paper's adjuster, q = 95, 85, 70"),
        ("lgbm", "s-", "#d62728", "lgbm-quantile at the adjusters' rates"),
    ):
        chosen = rows[rows["estimator"].str.startswith(prefix)].sort_values("underestimated")
        ax.plot(chosen["underestimated"] * 100, chosen["accuracy_mean"], style, color=color, label=label)
    for label in ("request", "last2", "mean-std"):
        row = rows[rows["estimator"] == label]
        if len(row):
            ax.plot(row["underestimated"] * 100, row["accuracy_mean"], "^", color="#2ca02c")
            ax.annotate(
                label,
                (row["underestimated"].iloc[0] * 100, row["accuracy_mean"].iloc[0]),
                textcoords="offset points",
                xytext=(4, 3),
                fontsize=8,
            )
    ax.set_xlim(-0.5, min(60.0, max(25.0, float(np.nanmax(rows["underestimated"])) * 100 + 2)))
    ax.set_xlabel("underestimated jobs (%)")
    ax.set_ylabel("mean accuracy (Tang's Eq. 3)")
    ax.set_title(f"{name}: accuracy / underestimation frontier", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    figure.savefig(path)


def short(spec: str) -> str:
    if spec.startswith("percentile:"):
        return "percentile q=" + spec.split("q=")[1].split(",", maxsplit=1)[0]
    if spec.startswith("lgbm-quantile"):
        return "lgbm-quantile target_under=" + spec.split("target_under=")[1].split(",", maxsplit=1)[0]
    return spec


def markdown(name: str, jobs: int, rows: pd.DataFrame, image: str) -> list[str]:
    lines = [
        f"### {name} ({jobs:,} jobs)",
        "",
        "| estimator | accuracy | underestimated | BE | frontier accuracy at that rate |",
        "|---|---|---|---|---|",
    ]
    for row in rows.itertuples():
        frontier = "" if np.isnan(row.frontier) else f"{row.frontier:.3f}"
        lines.append(
            f"| {short(row.estimator)} | {row.accuracy_mean:.3f} | {row.underestimated:.1%} | "
            f"{row.BE:.1%} | {frontier} |"
        )
    return [*lines, "", f"![{name} frontier]({image})", ""]


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--trace", action="append", help="file name in --traces (repeat; default: every .swf.gz)")
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lgbm", default="lgbm-quantile", metavar="SPEC", help="target_under is set per trace")
    parser.add_argument(
        "--headline-only", action="store_true", help=f"match only the q={HEADLINE_Q} adjuster (one lgbm run per trace)"
    )
    return parser.parse_args()


def trace_paths(args: argparse.Namespace) -> list[Path]:
    """The traces named, or every .swf.gz in --traces, smallest first; refused when one is missing."""
    paths = (
        [args.traces / name for name in args.trace]
        if args.trace
        else sorted(args.traces.glob("*.swf.gz"), key=lambda p: p.stat().st_size)
    )
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise SystemExit(f"missing trace(s): {', '.join(missing)}")
    return paths


def measure(
    paths: list[Path], args: argparse.Namespace
) -> tuple[list[Path], list[tuple[pd.DataFrame, pd.DataFrame]], list[pd.DataFrame], list[str]]:
    """The traces that can be scored, their estimators and adjuster grids, the lgbm rows at the matched
    rates, and the traces without a requested time."""
    parallel = Parallel(n_jobs=args.workers)
    measured = parallel(delayed(baseline_rows)(path) for path in paths)
    unusable = [trace_name(path) for path, rows in zip(paths, measured, strict=True) if rows is None]
    paths = [path for path, rows in zip(paths, measured, strict=True) if rows is not None]
    baselines = [rows for rows in measured if rows is not None]
    qs = (HEADLINE_Q,) if args.headline_only else ADJUSTER_QS
    tasks = []
    for path, (rows, _) in zip(paths, baselines, strict=True):
        for q in qs:
            under = float(rows.loc[rows["estimator"] == ADJUSTER.format(q=q), "underestimated"].iloc[0])
            tasks.append((path, lgbm_spec(args.lgbm, under), f"q={q}"))
    return paths, baselines, parallel(delayed(lgbm_row)(*task) for task in tasks), unusable


def write(
    args: argparse.Namespace,
    paths: list[Path],
    baselines: list[tuple[pd.DataFrame, pd.DataFrame]],
    lgbm: list[pd.DataFrame],
    unusable: list[str],
) -> None:
    """frontier.md, frontier.csv and a plot per trace under --out; the summary table on standard output."""
    intro = [
        "# Prediction quality per trace",
        "",
        f"Written by `python scripts/frontier.py` ({args.lgbm}); every estimator walk-forward, causal. "
        "'Frontier accuracy' is the best accuracy of any adjuster in the grid (keys x windows x q x floor) "
        "that underestimates at most as many jobs.",
        "",
    ]
    table, report, summary = [], [], []
    for path, (rows, grid) in zip(paths, baselines, strict=True):
        name = trace_name(path)
        mine = pd.concat([rows] + [frame for frame in lgbm if frame["trace"].iloc[0] == name], ignore_index=True)
        mine["frontier"] = [frontier_accuracy(grid, under) for under in mine["underestimated"]]
        image = f"img/frontier-{slug(name)}.png"
        plot(name, grid, mine, args.out / image)
        report += markdown(name, int(rows["jobs"].iloc[0]), mine, image)
        table.append(mine)
        summary.append(summary_row(name, mine))
    header = [
        "## Summary: lgbm-quantile calibrated to the q=85 adjuster's rate",
        "",
        "| trace | adjuster q=85 accuracy | under | BE | grid frontier at lgbm's rate | lgbm accuracy | under | BE "
        "| above, BE no higher |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    if unusable:
        summary += ["", f"Not evaluated, no job has a requested time (t_req): {', '.join(unusable)}."]
    pd.concat(table, ignore_index=True).to_csv(args.out / "frontier.csv", index=False)
    (args.out / "frontier.md").write_text("\n".join(intro + header + summary + [""] + report) + "\n")
    print("\n".join(header + summary))
    print(f"wrote {args.out / 'frontier.md'}, frontier.csv and {len(paths)} plot(s)")


def summary_row(name: str, rows: pd.DataFrame) -> str:
    """One trace in the summary: the headline adjuster against lgbm-quantile calibrated to its rate."""
    head = rows[rows["matched"] == f"q={HEADLINE_Q}"].iloc[0]
    adjuster = rows[rows["estimator"] == ADJUSTER.format(q=HEADLINE_Q)].iloc[0]
    return (
        f"| {name} | {adjuster.accuracy_mean:.3f} | {adjuster.underestimated:.1%} | {adjuster.BE:.1%} | "
        f"{head.frontier:.3f} | {head.accuracy_mean:.3f} | {head.underestimated:.1%} | {head.BE:.1%} | "
        f"{'yes' if head.accuracy_mean > head.frontier and head.BE <= adjuster.BE else 'NO'} |"
    )


def main() -> None:
    args = arguments()
    paths = trace_paths(args)
    (args.out / "img").mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    paths, baselines, lgbm, unusable = measure(paths, args)
    print(f"measured in {time.perf_counter() - began:.0f} s with {args.workers} workers")
    write(args, paths, baselines, lgbm, unusable)


if __name__ == "__main__":
    main()
