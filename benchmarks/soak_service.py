"""A bounded soak: a server with a state file under mixed traffic, good and hostile, for a while.

Client processes drive the server the whole time:
- schedulers: one SyncStream each (`RemoteSession`), a generated workload's
  completions and submissions, instant after instant;
- a batch client: PredictBatch of 10,000 jobs;
- an attacker: random bytes to every RPC, 3 MB SPECs and namespaces, a new
  namespace on every call (beyond --max-namespaces, lowered to 1,000 here),
  streams that never read, streams that sit idle, messages too large.
Meanwhile this process asks for a Predict and a health check every 0.1 s and
reads the server's memory (RSS) every second. Each interval it prints the
latency percentiles of those probes, the server's memory, and what the
clients were answered; at the end the totals, against the targets (probe p99
within 100 ms, memory under --memory-limit-mb).

    python benchmarks/soak_service.py [--seconds 120] [--interval 10] [--memory-limit-mb 2048]
"""

from __future__ import annotations

import argparse
import collections
import logging
import multiprocessing
import os
import random
import tempfile
import time
from pathlib import Path

import grpc

from kernel.jobs import JobRequest
from predictor.proto import rpc
from predictor.service.client import PredictorClient, PredictorError
from predictor.service.codec import sync_request
from predictor.service.launcher import ServerProcess
from predictor.service.limits import Limits
from predictor.service.remote import RemoteSession
from simulator.engine import SimulationConfig, simulate
from simulator.workloads.synthetic import generate_workload

METHODS = ("Predict", "PredictBatch", "ObserveCompletions", "Sync", "ListEstimators", "ResetNamespace")
NOT_READING = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65536)]


def scheduler(address: str, seed: int, until: float, outcomes: multiprocessing.Queue) -> None:
    """Simulations through the service, one after another, each from a reset namespace."""
    logging.disable(logging.WARNING)  # fallbacks are counted in the outcomes
    count = 0
    while time.time() < until:
        trace = generate_workload(jobs=1000, procs=128, load=0.8, seed=seed * 1000 + count)
        session = RemoteSession(address, f"soak-{seed}", "last2", reset=True, timeout=5)
        config = SimulationConfig(procs=128, policy="fcfs", backfill="easy", mode="regular")
        result = simulate(trace.jobs, config, session)
        session.close()
        outcomes.put(("scheduler", f"simulated, {result.predictor_fallbacks} fallbacks"))
        count += 1


def batches(address: str, until: float, outcomes: multiprocessing.Queue) -> None:
    jobs = [JobRequest(i, 10_000, i % 300, i % 20, 3600, 1 + i % 64) for i in range(10_000)]
    with PredictorClient(address, timeout=30) as client:
        while time.time() < until:
            try:
                client.predict_batch(jobs, namespace="soak-batch")
                outcomes.put(("batch", "OK"))
            except PredictorError as error:
                outcomes.put(("batch", error.code.name))


def attacker(address: str, seed: int, until: float, outcomes: multiprocessing.Queue) -> None:
    rng = random.Random(seed)
    held: list[grpc.Channel] = []
    created: list[str] = []
    with grpc.insecure_channel(address) as channel, PredictorClient(address, timeout=10) as client:
        calls = {method: channel.unary_unary(f"/tsched.v1.Predictor/{method}") for method in METHODS}
        attempt = 0
        while time.time() < until:
            attempt += 1
            kind = rng.choice(["bytes", "huge", "namespace", "not reading", "idle", "too large"])
            try:
                if kind == "bytes":
                    calls[rng.choice(METHODS)](rng.randbytes(rng.randrange(1, 4096)), timeout=10)
                elif kind == "huge":
                    field = rng.choice(["namespace", "estimator"])
                    client.predict(user=1, group=1, t_req=60, procs=1, **{field: "x" * 3_000_000})
                elif kind == "namespace":  # twenty new namespaces (the server holds at most 1,000), then a few reset
                    try:
                        for number in range(20):
                            name = f"flood-{seed}-{attempt}-{number}"
                            client.sync([], [JobRequest(1, 100, 1, 1, 60, 1)], namespace=name, estimator="request")
                            created.append(name)
                    finally:
                        if len(created) > 900:
                            for name in created[:50]:
                                client.reset_namespace(name)
                            del created[:50]
                elif kind in ("not reading", "idle"):
                    if len(held) >= 4:  # an attacker holds a few at a time; the watchdog cuts them
                        held.pop(0).close()
                    stream_channel = grpc.insecure_channel(address, options=NOT_READING)
                    held.append(stream_channel)
                    jobs = [JobRequest(i, 100, i % 50, 1, 3600, 1) for i in range(5000)]
                    request = sync_request([], jobs, "soak-flood", "request")
                    frames = iter([request] * 100) if kind == "not reading" else iter(lambda: time.sleep(3600), 0)
                    rpc.PredictorStub(stream_channel).SyncStream(frames)
                    outcomes.put(("attacker", f"{kind} stream opened"))
                    continue
                else:
                    calls["Sync"](b"\x0a" + b"\xff" * 9 + b"\x00" * (80 * 2**20), timeout=10)
                outcomes.put(("attacker", f"{kind}: OK"))
            except grpc.RpcError as error:
                outcomes.put(("attacker", f"{kind}: {error.code().name}"))
            except PredictorError as error:
                outcomes.put(("attacker", f"{kind}: {error.code.name}"))
            time.sleep(rng.uniform(0, 0.02))
    for stream_channel in held:
        stream_channel.close()


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def probe_interval(probe: PredictorClient, pid: int, interval_end: float) -> tuple[list[float], list[float], float]:
    """Predict and health-check ten times a second until `interval_end`: their latencies (ms), and the server's
    peak resident memory (MB), read once a second."""
    predicts: list[float] = []
    healths: list[float] = []
    peak = 0.0
    next_sample = 0.0
    while time.time() < interval_end:
        began = time.perf_counter()
        probe.predict(user=1, group=1, t_req=60, procs=1, namespace="soak-probe")
        predicts.append((time.perf_counter() - began) * 1e3)
        began = time.perf_counter()
        probe.health()
        healths.append((time.perf_counter() - began) * 1e3)
        if time.monotonic() >= next_sample:
            peak = max(peak, resident_mb(pid))
            next_sample = time.monotonic() + 1
        time.sleep(0.1)
    return predicts, healths, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--interval", type=float, default=10)
    parser.add_argument("--memory-limit-mb", type=int, default=2048)
    parser.add_argument("--schedulers", type=int, default=2)
    args = parser.parse_args()
    limits = Limits(memory_limit_mb=args.memory_limit_mb, max_namespaces=1000, stream_idle_timeout=10, send_timeout=5)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as folder:
        server = ServerProcess(state=str(Path(folder) / "soak.sqlite"), default_estimators=["last2"], limits=limits)
        context = multiprocessing.get_context("spawn")
        outcomes: multiprocessing.Queue = context.Queue()
        until = time.time() + args.seconds
        workers = [
            context.Process(target=scheduler, args=(server.address, n, until, outcomes)) for n in range(args.schedulers)
        ]
        workers += [
            context.Process(target=batches, args=(server.address, until, outcomes)),
            context.Process(target=attacker, args=(server.address, 7, until, outcomes)),
        ]
        for worker in workers:
            worker.start()
        print(f"{'t (s)':>6} {'Predict p50/p99/max ms':>24} {'health p99 ms':>14} {'RSS MB':>7}  clients were answered")
        probe_all: list[float] = []
        health_all: list[float] = []
        peak = 0.0
        with PredictorClient(server.address, timeout=5) as probe:
            started = time.monotonic()
            while time.time() < until:
                predicts, healths, interval_peak = probe_interval(
                    probe, server.pid, min(until, time.time() + args.interval)
                )
                peak = max(peak, interval_peak)
                answered: collections.Counter[str] = collections.Counter()
                while not outcomes.empty():
                    who, what = outcomes.get()
                    answered[f"{who} {what}"] += 1
                probe_all += predicts
                health_all += healths
                summary = ", ".join(f"{what} x{count}" for what, count in answered.most_common(8))
                latency = f"{percentile(predicts, 0.5):7.2f}/{percentile(predicts, 0.99):6.2f}/{max(predicts):7.2f}"
                print(
                    f"{time.monotonic() - started:6.0f} {latency} {percentile(healths, 0.99):14.2f} "
                    f"{resident_mb(server.pid):7.0f}  {summary}"
                )
        for worker in workers:
            worker.join(120)
        with PredictorClient(server.address) as client:
            held = client.health()
        code = server.stop()
    print(
        f"{args.seconds:.0f} s: probe Predict p50 {percentile(probe_all, 0.5):.2f} ms, p99 "
        f"{percentile(probe_all, 0.99):.2f} ms, max {max(probe_all):.1f} ms; health p99 "
        f"{percentile(health_all, 0.99):.2f} ms (target 100 ms); server memory peak {peak:.0f} MB "
        f"(limit {args.memory_limit_mb} MB); health at the end {held}; exit code {code}"
    )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
