"""The predictor's commands: `serve`, `predict`, `forecast`, `predict-eval` and `train`.

Thin adapters over the domain code. They are mounted into the `tsched` entry
point (`tsched.cli`), which also supplies how a `--trace` is read: reading
trace files is the simulator's business, and `predictor` never imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from kernel.errors import UsageError
from predictor.forecasting import QueueState
from tsched.cli.options import (
    HelpFormatter,
    credentials_from,
    load_trace,
    output_file,
    service_options,
    trace_options,
    write_json,
)

if TYPE_CHECKING:
    from predictor.service.limits import Limits


#: What `predict-eval` scores without `--estimator`: the users' requests and Tang et al.'s adjuster.
DEFAULT_EVAL_ESTIMATORS = ("request", "percentile")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def cmd_predict_eval(args: argparse.Namespace) -> int:
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
    from predictor.service.server import Security, serve
    from simulator.forecast import FORWARD_SIMULATION

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    security = Security(
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        tokens=args.tokens,
        insecure=args.insecure,
        socket_mode=args.socket_mode,
    )
    serve(
        listen=args.listen,
        state=args.state,
        default_estimators=args.estimator or None,
        models_dir=args.models,
        security=security,
        limits=limits_from(args),
        metrics_listen=args.metrics_listen,
        start_forecaster=FORWARD_SIMULATION,
    )


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """One option per field of `Limits` (`max_calls` -> `--max-calls`), its help the field's own documentation."""
    from predictor.service.limits import Limits

    group = parser.add_argument_group("bounds (every one has a default that suits a site's server)")
    for item in dataclasses.fields(Limits):
        option = "--" + item.name.replace("_", "-")
        doc: str = item.metadata["doc"].replace("%", "%%")  # argparse formats help with %
        if isinstance(item.default, tuple):
            shown = " ".join(item.default)
            group.add_argument(
                option,
                action="append",
                metavar="SPEC",
                default=argparse.SUPPRESS,
                help=f"{doc}; repeat for several (default: {shown})",
            )
        else:
            group.add_argument(option, type=type(item.default), default=item.default, help=doc)


def limits_from(args: argparse.Namespace) -> Limits:
    from predictor.service.limits import Limits

    values = {item.name: getattr(args, item.name) for item in dataclasses.fields(Limits) if hasattr(args, item.name)}
    fields: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value for key, value in values.items()}
    return Limits(**fields)


def cmd_train(args: argparse.Namespace) -> int:
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
        credentials_from(args),
        args.account,
    ).plain()
    if args.json:
        print(json.dumps(answer))
    else:
        factor = "-" if answer["factor"] is None else f"{answer['factor']:.4f}"
        print(
            f"t_sched {answer['t_sched']}  factor {factor}  estimator {answer['estimator']}  "
            f"basis {answer['basis']}  fallback {str(answer['fallback']).lower()}"
        )
        if answer["quantiles"] is not None:
            shown = "  ".join(f"p{float(p) * 100:g} {runtime}" for p, runtime in answer["quantiles"].items())
            print(f"runtime quantiles: {shown}  P(runtime > t_sched) {answer['p_underestimate']:.2f}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from predictor.service.client import PredictorClient

    with PredictorClient(args.address, args.timeout, credentials_from(args)) as client:
        status = dataclasses.asdict(client.status(args.namespace))
    if args.json:
        print(json.dumps(status))
        return 0
    print(f"server: {status['namespaces']} namespace(s), {status['training_runs']} training run(s) since it started")
    if not status["namespace_exists"]:
        print(f"namespace {status['namespace']}: does not exist (nothing predicted or learned in it yet)")
    else:
        print(
            f"namespace {status['namespace']}: {status['completions']} completions held, clock {status['clock']}, "
            f"{status['predictions']} predictions answered ({status['fallbacks']} fallbacks to t_req)"
        )
        print(f"{'estimator':<48} {'scored':>7} {'acc mean':>8} {'under':>7} {'BE':>7} {'fallback':>8} {'pending':>8}")
        for row in status["estimators"]:
            print(
                f"{row['estimator']:<48} {row['scored']:>7} {row['accuracy']:>8.3f} {row['underestimated']:>7.1%} "
                f"{row['bad_estimates']:>7.1%} {row['fallbacks']:>8.1%} {row['pending']:>8}"
            )
    print(f"{'calls: rpc':<24} {'code':<20} {'count':>9}")
    for row in sorted(status["calls"], key=lambda call: (call["rpc"], call["code"])):
        print(f"{row['rpc']:<24} {row['code']:<20} {row['count']:>9}")
    return 0


def cmd_observe(args: argparse.Namespace) -> int:
    from predictor.frames import finished_from_frame
    from predictor.service.client import PredictorClient

    if args.trace is None:
        raise UsageError("observe needs --trace FILE, or --trace - for SWF lines on standard input")
    finished = finished_from_frame(load_trace(args).jobs)
    with PredictorClient(args.address, args.timeout, credentials_from(args)) as client:
        accepted, duplicates = client.observe_all(finished, namespace=args.namespace)
        held = client.list_estimators(args.namespace)
    print(
        f"namespace {args.namespace or 'default'}: {accepted} finished job(s) learned, {duplicates} already held; "
        f"now {held.completions} held, clock {held.clock}"
    )
    return 0


def _namespace_line(name: str, completions: int, clock: int, estimators: Sequence[str]) -> str:
    return f"{name}  completions {completions}  clock {clock}  estimators {', '.join(estimators) or '-'}"


def cmd_namespaces(args: argparse.Namespace) -> int:
    from predictor.service.client import PredictorClient

    with PredictorClient(args.address, args.timeout, credentials_from(args)) as client:
        if args.action == "list":
            listing = client.list_namespaces()
            lines = [_namespace_line(view.name, view.completions, view.clock, view.estimators) for view in listing]
            print("\n".join(lines) if lines else "no namespaces")
        elif args.action == "show":
            held = client.list_estimators(args.name)
            if not held.namespace_exists:
                raise UsageError(f"namespace {args.name!r} does not exist on {args.address}")
            print(_namespace_line(args.name, held.completions, held.clock, held.namespace_specs))
        else:
            print(f"namespace {args.name}: reset, {client.reset_namespace(args.name)} completion(s) forgotten")
    return 0


def id_or_name(text: str) -> int | str:
    """An argparse type: a user or group as a number (an id the scheduler uses) or a name (the service maps
    names to ids of its own, per namespace)."""
    try:
        return int(text)
    except ValueError:
        return text


def read_queue_state(path: str) -> QueueState:
    """A scheduler's state from a JSON file (docs/queue-time.md): `now`, `machine_procs`, `running` (jobs with
    their `start`) and `waiting` (jobs in queue order); a job has the fields of the contract's Job."""
    from kernel.jobs import JOB_FIELDS, JobRequest
    from predictor.forecasting import StartedJob

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
    with PredictorClient(args.address, args.timeout, credentials_from(args)) as client:
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


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Mount the predictor's commands on a `tsched` parser."""
    from predictor.estimators.lgbm.defaults import DEFAULT_HELD_OUT_DAYS, TRAINED_ESTIMATOR
    from predictor.service.server import DEFAULT_ESTIMATOR, DEFAULT_LISTEN, DEFAULT_SOCKET_MODE

    formatter = HelpFormatter

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
    evaluate.set_defaults(handler=cmd_predict_eval)

    serve = commands.add_parser("serve", help="run the gRPC predictor service", formatter_class=formatter)
    serve.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT|unix:PATH",
        help="TCP address or Unix socket to listen on",
    )
    serve.add_argument("--state", metavar="FILE", help="SQLite file that makes acknowledged completions durable")
    serve.add_argument(
        "--estimator",
        action="append",
        metavar="SPEC",
        help="default estimator(s), built in every namespace; the first answers requests naming none "
        f"(default: {DEFAULT_ESTIMATOR})",
    )
    serve.add_argument("--models", metavar="DIR", help="folder of trained models to serve by name")
    access = serve.add_argument_group("who may connect (docs/service-operations.md)")
    access.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate chain (with --tls-key)")
    access.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    access.add_argument(
        "--tls-client-ca", metavar="PEM", help="require client certificates signed by this CA (mutual TLS)"
    )
    access.add_argument(
        "--tokens",
        metavar="FILE",
        help="admit only calls bearing a token of FILE (lines: TOKEN GLOB[,GLOB...] [reset]); SIGHUP reloads it",
    )
    access.add_argument(
        "--insecure", action="store_true", help="allow listening off this machine with neither TLS nor tokens"
    )
    access.add_argument(
        "--socket-mode",
        type=lambda text: int(text, 8),
        default=DEFAULT_SOCKET_MODE,
        metavar="OCTAL",
        help="permissions of a unix: socket: who may connect (default: %(default)o)",
    )
    serve.add_argument(
        "--metrics-listen",
        metavar="[HOST:]PORT",
        help="serve Prometheus metrics over HTTP at /metrics (HOST defaults to 127.0.0.1; off unless given)",
    )
    add_limit_options(serve)
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
    train.set_defaults(handler=cmd_train)

    predict = commands.add_parser(
        "predict", help="ask a running service for one job's t_sched", formatter_class=formatter
    )
    service_options(predict, "seconds to wait for the answer")
    predict.add_argument("--estimator", metavar="SPEC", help="estimator SPEC (default: the server's first)")
    predict.add_argument("--user", type=id_or_name, required=True, help="user: a number, or a name (alice)")
    predict.add_argument(
        "--group", type=id_or_name, default=-1, help="group (project): a number, or a name; -1: unknown"
    )
    predict.add_argument("--account", metavar="NAME", help="the account charged, instead of --group")
    predict.add_argument("--request", type=int, required=True, metavar="SECONDS", help="requested time t_req")
    predict.add_argument("--procs", type=int, required=True, help="job size in processors")
    predict.add_argument("--submit", type=int, help="submit time (default: the namespace's clock)")
    predict.add_argument("--json", action="store_true", help="print the answer as JSON")
    predict.set_defaults(handler=cmd_predict)

    observe = commands.add_parser(
        "observe",
        help="feed finished jobs (a trace file, or SWF lines on standard input) to a namespace of a running service",
        formatter_class=formatter,
    )
    service_options(observe, "seconds to wait for each call (more for large batches)")
    trace_options(observe)
    observe.set_defaults(handler=cmd_observe)

    namespaces = commands.add_parser(
        "namespaces", help="list, show or reset a running service's namespaces", formatter_class=formatter
    )
    actions = namespaces.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list", help="every namespace your token may use: sizes, clocks, estimators", formatter_class=formatter
    )
    show = actions.add_parser("show", help="one namespace's size, clock and estimators", formatter_class=formatter)
    reset = actions.add_parser("reset", help="forget a namespace (its stored history too)", formatter_class=formatter)
    for action in (listing, show, reset):
        service_options(action, "seconds to wait for the answer", namespace=False)
        action.set_defaults(handler=cmd_namespaces)
    for action in (show, reset):
        action.add_argument("name", metavar="NAMESPACE", help="the namespace")

    forecast = commands.add_parser(
        "forecast", help="ask a running service when each waiting job will start", formatter_class=formatter
    )
    service_options(forecast, "seconds to wait for the answer")
    forecast.add_argument(
        "--state",
        required=True,
        metavar="FILE.json",
        help="the scheduler's state: now, machine_procs, running, waiting",
    )
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
    forecast.add_argument("--json", action="store_true", help="print the answer as JSON")
    forecast.set_defaults(handler=cmd_forecast)

    status = commands.add_parser(
        "status",
        help="a running service's live accuracy per estimator, history and calls (the metrics, as a table)",
        formatter_class=formatter,
    )
    service_options(status, "seconds to wait for the answer")
    status.add_argument("--json", action="store_true", help="print the answer as JSON")
    status.set_defaults(handler=cmd_status)
