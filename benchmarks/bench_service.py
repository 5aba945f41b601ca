"""Speed of the gRPC predictor service on loopback (issue 4 targets).

Targets on this 2-core machine: Predict p50 < 0.4 ms and p99 < 1 ms with one
client; >= 5,000 predictions/s with 8 concurrent clients; PredictBatch >=
100,000 predictions/s; a whole-trace simulation (SDSC-SP2) through the service
at most 0.5 ms per job slower than in-process, with identical results; with
TLS and tokens on, Predict p50 within 1.3x of the server without them, and of
the server before hardening (`--baseline DIR`: a checkout of that code); with
the metrics endpoint on and scraped 10 times a second, Predict p50 within the
noise of the same server without it (`--metrics-only`; with `--baseline`, also
against code from before the metrics).

The server runs in its own process (`ServerProcess`), as in a deployment; the
clients are this process (1 client, PredictBatch, the simulation) or 8 client
processes (throughput). A Python gRPC client spends about as much CPU per call
as the server does, so on 2 cores 8 Python client processes measure the
machine more than the service: the server's own latency and capacity are also
measured with h2load (nghttp2's HTTP/2 load generator, `apt install
nghttp2-client`), which sends the same Predict request as raw gRPC frames from
C++. Every response is checked to be the full answer (a refused call carries
no message). Every number printed is measured here, now.

`--replay-only` measures what issue 25 asks of a replay through the service: `tsched simulate` of
KTH-SP2 (WFP + EASY, selective, the adjuster) in-process and through a server with a state file (as
deployed; the replay's `sim-*` namespace is ephemeral, never written to it), in one run: at most
0.5 ms per job more; and the same replay with every instant asked at its time (no arrival asked
ahead). `--group-commit-only` measures durable writes to live namespaces with 1, 4 and 16
concurrent writers (one completion per call, each acknowledged once on disk): with group commit the
time per call falls as the writers grow.

    python benchmarks/bench_service.py [--traces DIR] [--estimator SPEC] [--skip-simulation]
                                       [--baseline DIR] [--latency-only] [--metrics-only]
                                       [--replay-only] [--group-commit-only]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import secrets
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pandas as pd

from kernel.jobs import FinishedJob, JobRequest
from predictor.frames import finished_from_frame, jobs_to_requests
from predictor.proto import pb, rpc
from predictor.registry import make_estimator
from predictor.service.client import Credentials, PredictorClient, PredictorError
from predictor.service.codec import job_message
from predictor.service.launcher import ServerProcess
from predictor.service.remote import RemoteSession
from predictor.service.server import Security
from predictor.session import LocalSession
from simulator.engine import SimulationConfig, simulate
from simulator.workloads.swf import read_swf

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
TRACE = "SDSC-SP2-1998-4.2-cln.swf.gz"
NAMESPACE = "bench"
LATENCY_CALLS = 5_000
THROUGHPUT_CALLS_PER_CLIENT = 1_500
CLIENTS = 8
H2LOAD_CALLS = 40_000
BATCH_SIZE = 10_000
BATCHES = 10
#: Predict latency with and without security is measured in alternating rounds, so that both see the same machine.
SECURITY_ROUNDS = 10
SECURITY_CALLS_PER_ROUND = 500


def _queries(jobs: pd.DataFrame, at: int, count: int) -> list[JobRequest]:
    """Real jobs of the trace, asked about at time `at` (after the history the namespace holds)."""
    sample = jobs.iloc[np.linspace(0, len(jobs) - 1, count).astype(int)]
    return [
        JobRequest(r.job_id, at, r.user, r.group, r.t_req, r.procs, r.queue, r.executable)
        for r in jobs_to_requests(sample)
    ]


def _predict_many(address: str, queries: list[JobRequest], spec: str) -> None:
    with PredictorClient(address) as client:
        for q in queries:
            client.predict_job(q, namespace=NAMESPACE, estimator=spec)


def _client_process(
    address: str, queries: list[JobRequest], spec: str, start: multiprocessing.Event, done: multiprocessing.Queue
) -> None:
    with PredictorClient(address) as client:
        client.health()  # connected before the clock starts
    start.wait()
    began = time.perf_counter()
    _predict_many(address, queries, spec)
    done.put((began, time.perf_counter()))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), to show cost apart from waiting for a busy CPU."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_predict(address: str, server_pid: int, queries: list[JobRequest], spec: str) -> None:
    with PredictorClient(address) as client:
        _predict_many(address, queries[:500], spec)  # warm-up
        server_cpu, client_cpu = _cpu_seconds(server_pid), time.process_time()
        latencies = []
        for q in queries:
            began = time.perf_counter()
            client.predict_job(q, namespace=NAMESPACE, estimator=spec)
            latencies.append(time.perf_counter() - began)
        server_cpu, client_cpu = _cpu_seconds(server_pid) - server_cpu, time.process_time() - client_cpu
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1e3
    p99 = latencies[int(len(latencies) * 0.99)] * 1e3
    print(
        f"Predict, 1 client, {len(latencies)} calls: p50 {p50:.3f} ms (target < 0.4), "
        f"p99 {p99:.3f} ms (target < 1), {len(latencies) / sum(latencies):,.0f} predictions/s; CPU per call: "
        f"server {server_cpu / len(latencies) * 1e6:.0f} us, client {client_cpu / len(latencies) * 1e6:.0f} us"
    )


def bench_concurrent(address: str, queries: list[JobRequest], spec: str) -> None:
    context = multiprocessing.get_context("spawn")
    start, done = context.Event(), context.Queue()
    workers = [
        context.Process(target=_client_process, args=(address, queries, spec, start, done)) for _ in range(CLIENTS)
    ]
    for worker in workers:
        worker.start()
    time.sleep(3)  # let every client process import and connect
    start.set()
    spans = [done.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    elapsed = max(end for _, end in spans) - min(began for began, _ in spans)
    total = CLIENTS * len(queries)
    print(
        f"Predict, {CLIENTS} client processes x {len(queries)} calls: {total / elapsed:,.0f} predictions/s "
        "(target >= 5,000)"
    )


def _grpc_frame(message: bytes) -> bytes:
    """A gRPC length-prefixed message: uncompressed flag, 4-byte big-endian length, the message."""
    return b"\x00" + struct.pack(">I", len(message)) + message


def bench_h2load(address: str, query: JobRequest, spec: str) -> None:
    """Predict latency (1 connection) and throughput (8 connections, one call in flight each) seen by h2load."""
    h2load = shutil.which("h2load")
    if h2load is None:
        print("h2load: not installed (apt install nghttp2-client); server-side figures skipped")
        return
    request = pb.PredictRequest(namespace=NAMESPACE, estimator=spec, job=job_message(query))
    with grpc.insecure_channel(address) as channel:
        answer = rpc.PredictorStub(channel).Predict(request, timeout=10)
    answer_bytes = len(_grpc_frame(answer.SerializeToString()))
    with tempfile.TemporaryDirectory() as folder:
        body, log = Path(folder) / "predict.bin", Path(folder) / "requests.log"
        body.write_bytes(_grpc_frame(request.SerializeToString()))

        def run(calls: int, clients: int) -> tuple[float, list[int]]:
            log.unlink(missing_ok=True)
            command = [
                h2load,
                "-n",
                str(calls),
                "-c",
                str(clients),
                "-m",
                "1",
                "-d",
                str(body),
                "-H",
                "content-type: application/grpc",
                "-H",
                "te: trailers",
                f"--log-file={log}",
                f"http://{address}/tsched.v1.Predictor/Predict",
            ]
            output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            rate = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", output).group(1))
            data = int(re.search(r"\(\d+\) headers.*?, [\d.]+\w*B \((\d+)\) data", output).group(1))
            if data != calls * answer_bytes:
                raise SystemExit(
                    f"h2load: {data} bytes of answers for {calls} calls, expected {calls * answer_bytes}: "
                    f"some calls were refused\n{output}"
                )
            durations = sorted(int(line.split("\t")[2]) for line in log.read_text().splitlines())
            return rate, durations

        run(2_000, CLIENTS)  # warm-up
        _, durations = run(LATENCY_CALLS, 1)
        p50, p99 = durations[len(durations) // 2] / 1e3, durations[int(len(durations) * 0.99)] / 1e3
        print(
            f"h2load Predict, 1 connection, {len(durations)} calls: p50 {p50:.3f} ms (target < 0.4), "
            f"p99 {p99:.3f} ms (target < 1)"
        )
        rate, _ = run(H2LOAD_CALLS, CLIENTS)
        print(
            f"h2load Predict, {CLIENTS} connections x 1 call in flight, {H2LOAD_CALLS} calls: {rate:,.0f} "
            "predictions/s (target >= 5,000); every answer complete"
        )


def bench_batch(address: str, queries: list[JobRequest], spec: str, learned: list[FinishedJob]) -> None:
    with PredictorClient(address, timeout=60) as client:
        client.predict_batch(queries, namespace=NAMESPACE, estimator=spec)  # warm-up
        began = time.perf_counter()
        for _ in range(BATCHES):
            client.predict_batch(queries, namespace=NAMESPACE, estimator=spec)
        elapsed = time.perf_counter() - began
    print(
        f"PredictBatch, {BATCHES} x {len(queries):,} jobs: {BATCHES * len(queries) / elapsed:,.0f} predictions/s "
        "(target >= 100,000; includes building and reading the messages in this client)"
    )
    local = make_estimator(spec)
    for job in learned:
        local.observe(job)
    began = time.perf_counter()
    local.predict_many(queries)
    print(
        f"  for scale: the same estimator with the same history predicts "
        f"{len(queries) / (time.perf_counter() - began):,.0f}/s in-process"
    )


def bench_simulation(address: str, jobs: pd.DataFrame, procs: int, spec: str) -> None:
    config = SimulationConfig(procs=procs, policy="fcfs", backfill="easy", mode="regular")
    began = time.perf_counter()
    local = simulate(jobs, config, LocalSession(make_estimator(spec)))
    in_process = time.perf_counter() - began

    session = RemoteSession(address, "bench-simulation", spec, reset=True, timeout=5.0)
    began = time.perf_counter()
    remote = simulate(jobs, config, session)
    session.close()
    via_service = time.perf_counter() - began
    same = remote.jobs.equals(local.jobs) and remote.predictor_fallbacks == 0
    extra = (via_service - in_process) / len(jobs) * 1e3
    print(
        f"simulation of {TRACE} ({len(jobs):,} jobs, {config.policy}/{config.backfill}/{config.mode}, {spec}): "
        f"in-process {in_process:.2f} s, via the service {via_service:.2f} s, "
        f"+{extra:.3f} ms/job (target <= 0.5), identical results: {same}"
    )

    down = RemoteSession("127.0.0.1:9", "bench-down", spec, reset=False, timeout=1.0)
    began = time.perf_counter()
    fallen_back = simulate(jobs, config, down)
    down.close()
    print(
        f"  with the service unreachable: {time.perf_counter() - began:.2f} s, "
        f"{fallen_back.predictor_fallbacks:,} fallbacks to t_req"
    )


REPLAY_TRACE = "KTH-SP2-1996-2.1-cln.swf.gz"
REPLAY_CONFIG = {"policy": "wfp", "backfill": "easy", "mode": "selective"}
#: Durable calls each writer makes in the group-commit measurement, and the writer counts compared.
GROUP_CALLS_PER_WRITER = 300
GROUP_WRITERS = (1, 4, 16)


def _echo_server(ports: Any) -> None:
    """A gRPC server whose SyncStream answers each message at once with an empty response: what one round trip
    costs in grpcio on this machine, with no service behind it (the floor of a replay's cost per exchange)."""
    from concurrent import futures

    class Echo(rpc.PredictorServicer):
        def SyncStream(self, requests: Any, context: Any) -> Any:  # noqa: N802 - the generated interface's name
            for _ in requests:
                yield pb.SyncResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc.add_PredictorServicer_to_server(Echo(), server)
    ports.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    server.wait_for_termination()


def _round_trip_floor(requests: list[pb.SyncRequest]) -> float:
    """Seconds the replay's own messages take through an echo server (`_echo_server`), one at a time."""
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    echo = context.Process(target=_echo_server, args=(ports,), daemon=True)
    echo.start()
    try:
        with PredictorClient(f"127.0.0.1:{ports.get(timeout=60)}", timeout=30) as client:
            stream = client.sync_stream()
            for request in requests[:500]:  # warm-up
                stream.exchange(request, 30)
            began = time.perf_counter()
            for request in requests:
                stream.exchange(request, 30)
            elapsed = time.perf_counter() - began
            stream.close()
    finally:
        echo.terminate()
        echo.join(10)
    return elapsed


def _each_instant(trace: Any, config: Any, spec: str, address: str) -> float:
    """Seconds of the same replay through the service with every instant asked at its time (as before arrivals
    were asked ahead, `simulator.lookahead`)."""
    from simulator.engine import TraceReplay
    from simulator.experiment import run_simulation

    TraceReplay.asks_ahead = False
    try:
        began = time.perf_counter()
        run_simulation(trace, config, spec, address=address, timeout=30.0)
        return time.perf_counter() - began
    finally:
        TraceReplay.asks_ahead = True


@contextmanager
def _exchanges_kept() -> Iterator[list[pb.SyncRequest]]:
    """Every SyncRequest the replay sends on its stream, kept (to count the round trips and replay them)."""
    from predictor.service.connection import SyncStream

    kept: list[pb.SyncRequest] = []
    exchange = SyncStream.exchange

    def keeping(self: SyncStream, request: pb.SyncRequest, timeout: float) -> pb.SyncResponse:
        kept.append(request)
        return exchange(self, request, timeout)

    SyncStream.exchange = keeping  # type: ignore[method-assign]
    try:
        yield kept
    finally:
        SyncStream.exchange = exchange  # type: ignore[method-assign]


def bench_replay(traces: Path, spec: str) -> None:
    """A replay of KTH-SP2 in-process, then through a server with a state file, as `tsched simulate` runs them;
    then the same messages through an echo server: the part of the cost that is grpcio's round trips."""
    from simulator.engine import SimulationConfig
    from simulator.experiment import run_simulation
    from simulator.workloads.formats import read_trace

    trace = read_trace(traces / REPLAY_TRACE)
    config = SimulationConfig(procs=trace.machine_procs(), **REPLAY_CONFIG)
    with tempfile.TemporaryDirectory() as folder:
        server = ServerProcess(state=str(Path(folder) / "state.sqlite"), default_estimators=[spec])
        try:
            began, cpu = time.perf_counter(), time.process_time()
            _, local = run_simulation(trace, config, spec)
            in_process, local_cpu = time.perf_counter() - began, time.process_time() - cpu
            with _exchanges_kept() as requests:
                began, cpu, served_cpu = time.perf_counter(), time.process_time(), _cpu_seconds(server.pid)
                _, remote = run_simulation(trace, config, spec, address=server.address, timeout=30.0)
                via_service = time.perf_counter() - began
                remote_cpu = time.process_time() - cpu + _cpu_seconds(server.pid) - served_cpu
            each = _each_instant(trace, config, spec, server.address)
            with PredictorClient(server.address) as client:
                left = [view.name for view in client.list_namespaces()]
        finally:
            server.stop()
    floor = _round_trip_floor(requests)
    jobs = len(local.jobs)
    same = remote.jobs.equals(local.jobs) and remote.predictor_fallbacks == 0
    print(
        f"replay of {REPLAY_TRACE} ({jobs:,} jobs, wfp/easy/selective, {spec}), server with a state file: "
        f"in-process {in_process:.2f} s, via the service {via_service:.2f} s, "
        f"+{(via_service - in_process) / jobs * 1e3:.3f} ms/job (target <= 0.5), identical results: {same}, "
        f"namespaces left on the server: {left or 'none'}; CPU (client + server) {local_cpu:.2f} s in-process, "
        f"{remote_cpu:.2f} s via the service: +{(remote_cpu - local_cpu) / jobs * 1e3:.3f} ms/job"
    )
    print(
        f"  asking each instant at its time (no arrival asked ahead): {each:.2f} s, "
        f"+{(each - in_process) / jobs * 1e3:.3f} ms/job"
    )
    print(
        f"  {len(requests):,} round trips ({len(requests) / jobs:.2f} per job: one per instant with arrivals not "
        "asked ahead); "
        f"the same messages through an echo server (grpcio alone, no service): {floor:.2f} s, "
        f"{floor / len(requests) * 1e3:.3f} ms per round trip, +{floor / jobs * 1e3:.3f} ms/job"
    )


def _durable_writes(address: str, namespace: str, jobs: list[FinishedJob]) -> None:
    with PredictorClient(address, timeout=60) as client:
        for job in jobs:
            client.observe([job], namespace=namespace)


def _commits(state: Path) -> int | None:
    """Transactions the state file has committed (None: a tsched that does not count them)."""
    import sqlite3

    with sqlite3.connect(f"{state.as_uri()}?mode=ro", uri=True) as db:
        row = db.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()
    return None if row is None else int(row[0])


def bench_group_commit() -> None:
    """Durable single-completion calls to live namespaces, 1, 4 and 16 writers at once: time per call, and
    calls per transaction (each call is acknowledged once its transaction is on disk)."""
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder) / "state.sqlite"
        server = ServerProcess(state=str(state))
        try:
            warm_up = [FinishedJob(JobRequest(n + 1, n * 60, 0, 1, 3600, 1), n * 60 + 100, 100) for n in range(20)]
            _durable_writes(server.address, "warm-up", warm_up)
            for writers in GROUP_WRITERS:
                before = _commits(state)
                threads = []
                for writer in range(writers):
                    jobs = [
                        FinishedJob(JobRequest(n + 1, n * 60, writer, 1, 3600, 1), n * 60 + 100, 100)
                        for n in range(GROUP_CALLS_PER_WRITER)
                    ]
                    arguments = (server.address, f"live-{writers}-{writer}", jobs)
                    threads.append(threading.Thread(target=_durable_writes, args=arguments))
                began = time.perf_counter()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                elapsed = time.perf_counter() - began
                calls = writers * GROUP_CALLS_PER_WRITER
                after = _commits(state)
                grouped = "n/a" if before is None or after is None else f"{calls / (after - before):.1f}"
                print(
                    f"durable ObserveCompletions, {writers:>2} writer(s) x {GROUP_CALLS_PER_WRITER} calls of one "
                    f"completion: {calls / elapsed:,.0f} calls/s, {elapsed / calls * 1e3:.2f} ms per call, "
                    f"{grouped} calls per transaction"
                )
        finally:
            server.stop()


def _baseline_server(source: Path, spec: str) -> tuple[subprocess.Popen[bytes], str]:
    """The server of another checkout, started as that code starts it.

    A checkout with the launcher tells its port through a pipe; an older one
    (before the service became a package) is started by `tsched serve` on a
    free port and waited for until its health check answers.
    """
    environment = {**os.environ, "PYTHONPATH": str(source)}
    if not (source / "predictor" / "service" / "launcher.py").exists():
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            address = f"127.0.0.1:{probe.getsockname()[1]}"
        command = ["-m", "tsched.cli", "serve", "--listen", address, "--estimator", spec]
        process = subprocess.Popen([sys.executable, *command], env=environment, cwd=source, stderr=subprocess.DEVNULL)
        with PredictorClient(address, timeout=1.0) as client:
            for _ in range(600):
                try:
                    if client.health() == "SERVING":
                        return process, address
                except PredictorError:
                    time.sleep(0.1)
        raise SystemExit(f"the server in {source} did not start")
    ready_read, ready_write = os.pipe()
    arguments: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "state": None,
        "default_estimators": [spec],
    }
    if 'arguments.pop("security")' in (source / "predictor" / "service" / "launcher.py").read_text():
        arguments.update(security={}, limits={})  # a launcher that takes them requires them (their defaults)
    process = subprocess.Popen(
        [sys.executable, "-m", "predictor.service.launcher", json.dumps(arguments), str(ready_write)],
        env=environment,
        cwd=source,
        pass_fds=(ready_write,),
        stderr=subprocess.DEVNULL,
    )
    os.close(ready_write)
    if not select.select([ready_read], [], [], 60)[0]:
        raise SystemExit(f"the server in {source} did not start")
    port = os.read(ready_read, 64).decode().strip()
    os.close(ready_read)
    return process, f"127.0.0.1:{port}"


@contextmanager
def _secured_server(spec: str) -> Iterator[tuple[ServerProcess, Credentials]]:
    """A server with TLS (a test CA made with openssl) and a token file, and the credentials that reach it."""
    sys.path.insert(0, str(REPO / "tests"))
    from service_support import make_certificates, write_secret

    with tempfile.TemporaryDirectory() as folder:
        certificates = make_certificates(Path(folder))
        token = secrets.token_hex(32)
        tokens = write_secret(Path(folder) / "tokens", f"{token} *\n")
        security = Security(
            tls_cert=str(certificates.server_cert), tls_key=str(certificates.server_key), tokens=str(tokens)
        )
        server = ServerProcess(default_estimators=[spec], security=security)
        try:
            yield server, Credentials(token=token, tls=True, tls_ca=certificates.ca.read_bytes())
        finally:
            server.stop()


def bench_security(servers: dict[str, tuple[str, Credentials | None]], queries: list[JobRequest], spec: str) -> None:
    """Predict latency of each server, one client, in alternating rounds; p50 ratios against the first."""
    latencies: dict[str, list[float]] = {name: [] for name in servers}
    clients = {
        name: PredictorClient(address, credentials=credentials) for name, (address, credentials) in servers.items()
    }
    try:
        for client in clients.values():
            for query in queries[:300]:  # warm-up: connections, TLS sessions, estimators
                client.predict_job(query, namespace=NAMESPACE, estimator=spec)
        for round_ in range(SECURITY_ROUNDS):
            for name, client in clients.items():
                for query in queries[round_ * SECURITY_CALLS_PER_ROUND : (round_ + 1) * SECURITY_CALLS_PER_ROUND]:
                    began = time.perf_counter()
                    client.predict_job(query, namespace=NAMESPACE, estimator=spec)
                    latencies[name].append(time.perf_counter() - began)
    finally:
        for client in clients.values():
            client.close()
    reference = None
    for name, measured in latencies.items():
        measured.sort()
        p50, p99 = measured[len(measured) // 2] * 1e3, measured[int(len(measured) * 0.99)] * 1e3
        reference = reference or p50
        print(
            f"Predict, {name}, {len(measured)} calls in {SECURITY_ROUNDS} alternating rounds: "
            f"p50 {p50:.3f} ms ({p50 / reference:.2f}x the first), p99 {p99:.3f} ms"
        )


#: How often the metrics benchmark scrapes (Prometheus itself scrapes every 15 to 60 s).
SCRAPE_SECONDS = 0.1


def bench_metrics(server: ServerProcess, learned: list[FinishedJob], queries: list[JobRequest], args: Any) -> None:
    """Predict latency with the metrics endpoint off and on (scraped every SCRAPE_SECONDS), in alternating rounds."""
    metered = ServerProcess(default_estimators=[args.estimator], metrics_listen="127.0.0.1:0")
    stop = threading.Event()
    scrapes = [0]
    try:
        _fill(metered.address, learned)
        line = next(line for line in metered.log if "metrics on http://" in line)
        url = line.rpartition("metrics on ")[2].strip()

        def scrape() -> None:
            while not stop.wait(SCRAPE_SECONDS):
                with urllib.request.urlopen(url, timeout=5) as answer:
                    answer.read()
                scrapes[0] += 1

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        servers: dict[str, tuple[str, Credentials | None]] = {
            "metrics off": (server.address, None),
            f"metrics on, scraped every {SCRAPE_SECONDS} s": (metered.address, None),
        }
        baseline = None
        if args.baseline is not None:
            baseline, baseline_address = _baseline_server(args.baseline, args.estimator)
            _fill(baseline_address, learned)
            servers[f"baseline {args.baseline.name} (before metrics)"] = (baseline_address, None)
        try:
            bench_security(servers, queries, args.estimator)
        finally:
            if baseline is not None:
                baseline.terminate()
                baseline.wait(30)
        stop.set()
        scraper.join(5)
        print(f"  the metered server was scraped {scrapes[0]} times meanwhile")
    finally:
        stop.set()
        metered.stop()


def _fill(address: str, learned: list[FinishedJob], credentials: Credentials | None = None) -> None:
    with PredictorClient(address, timeout=60, credentials=credentials) as client:
        for start in range(0, len(learned), 20_000):
            client.observe(learned[start : start + 20_000], namespace=NAMESPACE)


#: The options that run one part of the benchmark only.
ONLY_FLAGS = (
    ("--latency-only", "Predict latency with and without security"),
    ("--metrics-only", "Predict latency with the metrics endpoint off and on"),
    ("--replay-only", "the KTH-SP2 replay, in-process and through a server with a state file"),
    ("--group-commit-only", "durable writes to live namespaces, 1 to 16 writers"),
)


def durability(args: argparse.Namespace) -> bool:
    """What a replay through the service costs, and what durable writes cost as writers grow (if asked)."""
    if not (args.replay_only or args.group_commit_only):
        return False
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.replay_only:
        bench_replay(args.traces, args.estimator)
    if args.group_commit_only:
        bench_group_commit()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--estimator", default="percentile", help="SPEC served (default: %(default)s)")
    parser.add_argument("--skip-simulation", action="store_true", help="only the RPC measurements")
    parser.add_argument(
        "--baseline", type=Path, metavar="DIR", help="a checkout of earlier code (any version with `tsched serve`)"
    )
    for flag, what in ONLY_FLAGS:
        parser.add_argument(flag, action="store_true", help=f"only {what}")
    args = parser.parse_args()
    if durability(args):
        return
    path = args.traces / TRACE
    if not path.exists():
        raise SystemExit(f"{path} is missing: the benchmark replays the real SDSC-SP2 trace")
    trace = read_swf(path)
    jobs = trace.jobs
    half = int(jobs["submit"].iloc[len(jobs) // 2])
    learned = finished_from_frame(trace.jobs_before(half))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    server = ServerProcess(default_estimators=[args.estimator])
    try:
        _fill(server.address, learned)
        print(f"server {server.address}: namespace {NAMESPACE!r} holds {len(learned):,} completions of {TRACE}")
        if args.metrics_only:
            bench_metrics(server, learned, _queries(jobs, half, SECURITY_ROUNDS * SECURITY_CALLS_PER_ROUND), args)
            return
        if not args.latency_only:
            bench_predict(server.address, server.pid, _queries(jobs, half, LATENCY_CALLS), args.estimator)
            bench_concurrent(server.address, _queries(jobs, half, THROUGHPUT_CALLS_PER_CLIENT), args.estimator)
            bench_h2load(server.address, _queries(jobs, half, 1)[0], args.estimator)
            bench_batch(server.address, _queries(jobs, half, BATCH_SIZE), args.estimator, learned)
            if not args.skip_simulation:
                bench_simulation(server.address, jobs, trace.machine_procs(), args.estimator)
        with _secured_server(args.estimator) as (secured, credentials):
            _fill(secured.address.replace("127.0.0.1", "localhost"), learned, credentials)
            servers: dict[str, tuple[str, Credentials | None]] = {}
            baseline = None
            if args.baseline is not None:
                baseline, baseline_address = _baseline_server(args.baseline, args.estimator)
                _fill(baseline_address, learned)
                servers[f"baseline {args.baseline.name} (no TLS, no tokens)"] = (baseline_address, None)
            servers["no TLS, no tokens"] = (server.address, None)
            servers["TLS and tokens"] = (secured.address.replace("127.0.0.1", "localhost"), credentials)
            try:
                bench_security(
                    servers, _queries(jobs, half, SECURITY_ROUNDS * SECURITY_CALLS_PER_ROUND), args.estimator
                )
            finally:
                if baseline is not None:
                    baseline.terminate()
                    baseline.wait(30)
    finally:
        server.stop()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
