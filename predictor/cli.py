"""The predictor's commands: `serve`, `predict`, `predict-eval` and `train`.

Thin adapters over the domain code. They are mounted into the `tsched` entry
point (`simulator.cli`), which also supplies how a `--trace` is read: reading
trace files is the simulator's business, and `predictor` never imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from predictor.frames import TraceLike

if TYPE_CHECKING:
    from predictor.service.client import Credentials
    from predictor.service.limits import Limits

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
    from predictor.service.server import Security, serve

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
        allow_oracle=args.allow_oracle,
        security=security,
        limits=limits_from(args),
        metrics_listen=args.metrics_listen,
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


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """How a command that calls a predictor service proves itself and checks the server."""
    group = parser.add_argument_group("connecting to the predictor service")
    group.add_argument("--token-file", metavar="FILE", help="file holding the bearer token to send (its first line)")
    group.add_argument(
        "--tls", action="store_true", help="connect with TLS, checking the server against the system's CAs"
    )
    group.add_argument("--tls-ca", metavar="PEM", help="connect with TLS, checking the server against this CA")
    group.add_argument(
        "--tls-cert", metavar="PEM", help="client certificate, for a server requiring them (with --tls-key)"
    )
    group.add_argument("--tls-key", metavar="PEM", help="the client certificate's private key")
    group.add_argument(
        "--tls-server-name", metavar="NAME", help="the name the server's certificate carries, if not the address's"
    )


def credentials_from(args: argparse.Namespace) -> Credentials:
    from predictor.service.client import Credentials

    return Credentials.from_files(
        token_file=args.token_file,
        tls=args.tls,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_server_name=args.tls_server_name,
    )


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
        credentials_from(args),
    )
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
        status = client.status(args.namespace)
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


def positive_number(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, a factor)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def fraction(text: str) -> float:
    """An argparse type: a number from 0 to 1 (a share of jobs)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, not {text}")
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
    from predictor.service.server import DEFAULT_ESTIMATOR, DEFAULT_LISTEN, DEFAULT_SOCKET_MODE

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
    serve.add_argument(
        "--allow-oracle", action="store_true", help="serve the evaluation-only oracle (needs actual runtimes)"
    )
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
    train.set_defaults(handler=partial(cmd_train, load_trace=load_trace))

    predict = commands.add_parser(
        "predict", help="ask a running service for one job's t_sched", formatter_class=formatter
    )
    predict.add_argument("--address", required=True, metavar="HOST:PORT|unix:PATH", help="the predictor service")
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
    add_connection_options(predict)
    predict.set_defaults(handler=cmd_predict)

    status = commands.add_parser(
        "status",
        help="a running service's live accuracy per estimator, history and calls (the metrics, as a table)",
        formatter_class=formatter,
    )
    status.add_argument("--address", required=True, metavar="HOST:PORT|unix:PATH", help="the predictor service")
    status.add_argument("--namespace", default="", help="the namespace (default: the server's default one)")
    status.add_argument(
        "--timeout", type=positive_number, default=DEFAULT_TIMEOUT_SECONDS, help="seconds to wait for the answer"
    )
    status.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_connection_options(status)
    status.set_defaults(handler=cmd_status)
