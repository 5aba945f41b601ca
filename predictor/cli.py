"""The predictor's commands: `serve`, `predict`, `forecast`, `predict-eval` and `train`.

Thin adapters over the domain code. They are mounted into the `tsched` entry
point (`simulator.cli`), which also supplies how a `--trace` is read: reading
trace files is the simulator's business, and `predictor` never imports it.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from predictor.errors import UsageError
from predictor.forecasting import QueueState
from predictor.frames import TraceLike

#: Reads the trace the parsed options name (`--trace`, `--lenient`, ...; no --trace: the built-in workload).
TraceLoader = Callable[[argparse.Namespace], TraceLike]
#: Adds the options a `TraceLoader` reads to a command.
TraceOptions = Callable[[argparse.ArgumentParser], None]

#: What `predict-eval` scores without `--estimator`: the users' requests and Tang et al.'s adjuster.
DEFAULT_EVAL_ESTIMATORS = ("request", "percentile")


def write_json(path: str | None, payload: Any) -> None:
    """Write `payload` as indented JSON to `path`, if one was given."""
    if path:
        Path(path).write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def cmd_predict_eval(args: argparse.Namespace, load_trace: TraceLoader) -> int:
    from predictor.offline import evaluate, percentile_grid

    trace = load_trace(args)
    if args.grid:
        table = percentile_grid(trace.jobs, trace.path)
        print(table.to_string(index=False))
        if args.csv:
            table.to_csv(args.csv, index=False)
        return 0
    report = evaluate(trace.jobs, args.estimator or list(DEFAULT_EVAL_ESTIMATORS), trace.path)
    print(f"{report['trace']}: {report['jobs']} jobs")
    print(f"{'estimator':<48} {'acc mean':>8} {'acc med':>8} {'under':>7} {'BE':>7} {'lambda':>7} {'us/pred':>8}")
    for row in report["results"]:
        print(
            f"{row['estimator']:<48} {row['accuracy_mean']:>8.3f} {row['accuracy_median']:>8.3f} "
            f"{row['underestimated']:>7.1%} {row['BE']:>7.1%} {_num(row['lambda']):>7} "
            f"{row['us_per_prediction']:>8.1f}"
        )
    write_json(args.json, report)
    if args.csv:
        pd.DataFrame(report["results"]).to_csv(args.csv, index=False)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from predictor.service.server import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(
        listen=args.listen,
        state=args.state,
        default_estimators=args.estimator or None,
        models_dir=args.models,
        allow_oracle=args.allow_oracle,
    )
    return 0


def cmd_train(args: argparse.Namespace, load_trace: TraceLoader) -> int:
    from predictor.digests import sha256_of
    from predictor.estimators.lgbm.store import parse_until, train

    trace = load_trace(args)
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


def cmd_predict(args: argparse.Namespace) -> int:
    from predictor.service.client import predict_once

    answer = predict_once(
        args.address,
        args.namespace,
        args.estimator or "",
        args.user,
        args.group,
        args.request,
        args.procs,
        args.submit,
        args.timeout,
    )
    if args.json:
        print(json.dumps(answer))
    else:
        factor = "-" if answer["factor"] is None else f"{answer['factor']:.4f}"
        print(
            f"t_sched {answer['t_sched']}  factor {factor}  estimator {answer['estimator']}  "
            f"basis {answer['basis']}  fallback {str(answer['fallback']).lower()}"
        )
    return 0


def read_queue_state(path: str) -> QueueState:
    """A scheduler's state from a JSON file (docs/queue-time.md): `now`, `machine_procs`, `running` (jobs with
    their `start`) and `waiting` (jobs in queue order); a job has the fields of the contract's Job."""
    from predictor.forecasting import StartedJob
    from predictor.jobs import JOB_FIELDS, JobRequest

    try:
        data = json.loads(Path(path).read_text())
    except OSError as error:
        raise UsageError(f"--state {path}: cannot read it: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"{path}: not JSON: {error}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object with now, machine_procs, running and waiting")

    def number(where: str, mapping: Any, key: str, default: int | None = None) -> int:
        value = mapping.get(key, default)
        if value is None:
            raise UsageError(f"{path}: {where}{key} is required")
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError(f"{path}: {where}{key} must be a whole number, got {value!r}")
        return value

    def job(where: str, item: Any) -> JobRequest:
        if not isinstance(item, dict):
            raise UsageError(f"{path}: {where.rstrip('.')} must be a JSON object (a job), got {item!r}")
        return JobRequest(*(number(where, item, field.name, field.unset) for field in JOB_FIELDS))

    def listed(key: str) -> list[Any]:
        items = data.get(key, [])
        if not isinstance(items, list):
            raise UsageError(f"{path}: {key} must be a list of jobs")
        return items

    running = [
        StartedJob(job(f"running[{index}].", item), number(f"running[{index}].", item, "start"))
        for index, item in enumerate(listed("running"))
    ]
    waiting = [job(f"waiting[{index}].", item) for index, item in enumerate(listed("waiting"))]
    return QueueState(number("", data, "now"), number("", data, "machine_procs"), running, waiting)


def cmd_forecast(args: argparse.Namespace) -> int:
    from predictor.forecasting import Scheduler
    from predictor.service.client import PredictorClient

    state = read_queue_state(args.state)
    with PredictorClient(args.address, args.timeout) as client:
        answer = client.forecast_start(
            state,
            Scheduler(args.policy, args.backfill, args.backfill_order),
            namespace=args.namespace,
            estimator=args.estimator or "",
            lower_quantile=args.lower_quantile,
        )
    rows = [forecast._asdict() for forecast in answer.forecasts]
    if args.json:
        print(
            json.dumps(
                {"estimator": answer.estimator, "namespace": answer.namespace, "now": answer.now, "forecasts": rows}
            )
        )
        return 0
    print(f"now {answer.now}  namespace {answer.namespace}  estimator {answer.estimator}")
    print(f"{'job':>10} {'start':>12} {'wait':>10} {'lower':>10} {'upper':>10}")
    for row in rows:
        waits = [_duration(row[key] - answer.now) for key in ("start", "lower", "upper")]
        print(f"{row['job_id']:>10} {row['start']:>12} {waits[0]:>10} {waits[1]:>10} {waits[2]:>10}")
    return 0


def _duration(seconds: int) -> str:
    """A wait as people read it: 45s, 12m, 3.5h, 2.1d."""
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86_400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"


def positive_number(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, a factor)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def output_file(text: str) -> str:
    """An argparse type: a file the command may write, checked before any work (its folder exists and is
    writable; it is not a folder)."""
    path = Path(text)
    folder = path.parent
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: the folder {folder} is not writable")
    return text


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    load_trace: TraceLoader,
    trace_options: TraceOptions,
) -> None:
    """Mount the predictor's commands on a `tsched` parser."""
    from predictor.estimators.lgbm.store import DEFAULT_HELD_OUT_DAYS, TRAINED_ESTIMATOR
    from predictor.service.client import DEFAULT_TIMEOUT_SECONDS
    from predictor.service.server import DEFAULT_ESTIMATOR, DEFAULT_LISTEN

    formatter = argparse.ArgumentDefaultsHelpFormatter

    evaluate = commands.add_parser(
        "predict-eval", help="score estimators offline on a trace, in submission order", formatter_class=formatter
    )
    trace_options(evaluate)
    evaluate.add_argument(
        "--estimator",
        action="append",
        metavar="SPEC",
        help="estimator SPEC, NAME or NAME:key=value,...; repeat for several "
        f"(default: {', '.join(DEFAULT_EVAL_ESTIMATORS)})",
    )
    evaluate.add_argument(
        "--grid", action="store_true", help="sweep Tang's adjuster over keys x windows x percentiles x floor"
    )
    evaluate.add_argument("--json", type=output_file, metavar="OUT", help="write the report as JSON")
    evaluate.add_argument(
        "--csv", type=output_file, metavar="OUT", help="write one row per estimator (or grid point) as CSV"
    )
    evaluate.set_defaults(handler=partial(cmd_predict_eval, load_trace=load_trace))

    serve = commands.add_parser("serve", help="run the gRPC predictor service", formatter_class=formatter)
    serve.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help="address to listen on")
    serve.add_argument("--state", metavar="FILE", help="SQLite file that makes acknowledged completions durable")
    serve.add_argument(
        "--estimator",
        action="append",
        metavar="SPEC",
        help="default estimator(s), built in every namespace; the first answers requests naming none "
        f"(default: {DEFAULT_ESTIMATOR})",
    )
    serve.add_argument("--models", metavar="DIR", help="folder of trained models to serve by name")
    serve.add_argument(
        "--allow-oracle", action="store_true", help="serve the evaluation-only oracle (needs actual runtimes)"
    )
    serve.set_defaults(handler=cmd_serve)

    train = commands.add_parser(
        "train", help="train an lgbm-quantile model and write it with its manifest", formatter_class=formatter
    )
    trace_options(train)
    train.add_argument("--estimator", default=TRAINED_ESTIMATOR, metavar="SPEC", help="the lgbm-quantile SPEC to train")
    train.add_argument(
        "--until",
        metavar="DATE",
        help=f"train on the window before this UTC date (default: {DEFAULT_HELD_OUT_DAYS} days before the end)",
    )
    train.add_argument("--out", required=True, metavar="models/NAME", help="the model folder to write")
    train.set_defaults(handler=partial(cmd_train, load_trace=load_trace))

    predict = commands.add_parser(
        "predict", help="ask a running service for one job's t_sched", formatter_class=formatter
    )
    predict.add_argument("--address", required=True, metavar="HOST:PORT", help="the predictor service")
    predict.add_argument("--namespace", default="", help="the namespace (default: the server's default one)")
    predict.add_argument("--estimator", metavar="SPEC", help="estimator SPEC (default: the server's first)")
    predict.add_argument("--user", type=int, required=True, help="user id")
    predict.add_argument("--group", type=int, required=True, help="group (project) id")
    predict.add_argument("--request", type=int, required=True, metavar="SECONDS", help="requested time t_req")
    predict.add_argument("--procs", type=int, required=True, help="job size in processors")
    predict.add_argument("--submit", type=int, help="submit time (default: the namespace's clock)")
    predict.add_argument(
        "--timeout", type=positive_number, default=DEFAULT_TIMEOUT_SECONDS, help="seconds to wait for the answer"
    )
    predict.add_argument("--json", action="store_true", help="print the answer as JSON")
    predict.set_defaults(handler=cmd_predict)

    forecast = commands.add_parser(
        "forecast", help="ask a running service when each waiting job will start", formatter_class=formatter
    )
    forecast.add_argument("--address", required=True, metavar="HOST:PORT", help="the predictor service")
    forecast.add_argument(
        "--state",
        required=True,
        metavar="FILE.json",
        help="the scheduler's state: now, machine_procs, running, waiting",
    )
    forecast.add_argument("--namespace", default="", help="the namespace (default: the server's default one)")
    forecast.add_argument(
        "--estimator", metavar="SPEC", help="estimator SPEC for the runtimes (default: the server's first)"
    )
    forecast.add_argument("--policy", default="fcfs", help="the scheduler's queue policy: fcfs, wfp or sjf")
    forecast.add_argument("--backfill", default="easy", help="its backfilling: easy, conservative or none")
    forecast.add_argument("--backfill-order", default="queue", help="its backfill order: queue or sjf")
    forecast.add_argument(
        "--lower-quantile",
        type=float,
        metavar="Q",
        help="lifetime quantile of the lower bound (default: the server's, 0.1)",
    )
    forecast.add_argument(
        "--timeout", type=positive_number, default=DEFAULT_TIMEOUT_SECONDS, help="seconds to wait for the answer"
    )
    forecast.add_argument("--json", action="store_true", help="print the answer as JSON")
    forecast.set_defaults(handler=cmd_forecast)
