"""The predictor's offline commands: `predict-eval` (estimators scored on a trace, in submission order) and
`train` (an lgbm-quantile model written with its manifest)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kernel.specs import parse_spec
from tsched.cli.options import json_option, load_trace, output_file, show, trace_group
from tsched.cli.spec import Command, Option, Table

#: What `predict-eval` scores without `--estimators`: the users' requests and Tang et al.'s adjuster.
DEFAULT_EVAL_ESTIMATORS = ("request", "percentile")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def cmd_predict_eval(args: argparse.Namespace) -> int:
    from predictor.offline import evaluate, percentile_grid
    from simulator.evaluation.plan import split_specs

    trace = load_trace(args)
    if args.grid:
        table = percentile_grid(trace.jobs, trace.path)
        show(args.json, table.to_dict(orient="records"), lambda: table.to_string(index=False))
        if args.csv:
            table.to_csv(args.csv, index=False)
        return 0
    report = evaluate(trace.jobs, split_specs(args.estimators), trace.path)
    show(args.json, report, lambda: _format_report(report))
    if args.csv:
        import pandas as pd

        pd.DataFrame(report["results"]).to_csv(args.csv, index=False)
    return 0


def _format_report(report: dict[str, Any]) -> str:
    lines = [
        f"{report['trace']}: {report['jobs']} jobs",
        f"{'estimator':<48} {'acc mean':>8} {'acc med':>8} {'under':>7} {'BE':>7} {'lambda':>7} {'us/pred':>8}",
    ]
    lines += [
        f"{row['estimator']:<48} {row['accuracy_mean']:>8.3f} {row['accuracy_median']:>8.3f} "
        f"{row['underestimated']:>7.1%} {row['BE']:>7.1%} {_num(row['lambda']):>7} "
        f"{row['us_per_prediction']:>8.1f}"
        for row in report["results"]
    ]
    return "\n".join(lines + _never_predicted(report))


def _never_predicted(report: dict[str, Any]) -> list[str]:
    """A note per estimator that answered every job with its request: on this trace it is `request` under
    another name (a model needs `min_train` finished jobs before it trains at all)."""
    return [
        f"note: {row['estimator']} answered all {report['jobs']} jobs with their request (fallback): it never had "
        "enough history here (lgbm-* trains once min_train jobs have finished); its scores are request's"
        for row in report["results"]
        if row["fallback"] == 1.0 and parse_spec(row["estimator"])[0] != "request"
    ]


def cmd_train(args: argparse.Namespace) -> int:
    from predictor.digests import sha256_of
    from predictor.estimators.lgbm.store import parse_until, train

    trace = load_trace(args)
    if args.trace is None:
        print(
            f"tsched train: no --trace, so training on the built-in synthetic workload ({len(trace.jobs)} jobs), "
            "not on a site's log: give --trace for that",
            file=sys.stderr,
        )
    epoch = trace.header.unix_start_time or 0
    until = None if args.until is None else parse_until(args.until, epoch)
    manifest = train(trace, args.out, args.estimator, until, epoch, sha256_of(args.trace) if args.trace else None)
    training = manifest["training"]
    print(
        f"trained {manifest['estimator']} on {training['jobs']} jobs that finished "
        f"{training['first_end_utc']} .. {training['until_utc']}; wrote {args.out}"
    )
    print("held out: " + json.dumps(manifest["held_out"]))
    return 0


def predict_eval_table() -> Table:
    return (
        trace_group(),
        Option(
            "--estimators",
            "estimator SPECs (NAME or NAME:key=value,...), separated by spaces or commas",
            default=DEFAULT_EVAL_ESTIMATORS,
            metavar="SPEC",
            kind="list",
            old=("--estimator",),
        ),
        Option("--grid", "sweep Tang's adjuster over keys x windows x percentiles x floor", kind="flag"),
        json_option("the report (with --grid, its rows)"),
        Option("--csv", "write one row per estimator (or grid point) as CSV", output_file, metavar="OUT"),
    )


def train_table() -> Table:
    from predictor.estimators.lgbm.defaults import DEFAULT_HELD_OUT_DAYS, TRAINED_ESTIMATOR

    return (
        trace_group(),
        Option("--estimator", "the lgbm-quantile SPEC to train", default=TRAINED_ESTIMATOR, metavar="SPEC"),
        Option(
            "--until",
            f"train on the window before this UTC date (default: {DEFAULT_HELD_OUT_DAYS} days before the end)",
            metavar="DATE",
        ),
        Option("--out", "the model folder to write", metavar="models/NAME", required=True),
    )


COMMANDS = (
    Command(
        "predict-eval",
        "score estimators offline on a trace, in submission order",
        cmd_predict_eval,
        predict_eval_table,
    ),
    Command("train", "train an lgbm-quantile model and write it with its manifest", cmd_train, train_table),
)
