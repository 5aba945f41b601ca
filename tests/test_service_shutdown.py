"""Stopping a server always ends: SIGTERM drains for the grace period and exits, a second signal exits at once."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from service_support import flood_stream, status_of, submissions, traffic

from predictor.frames import finished_from_frame
from predictor.service.client import PredictorClient
from predictor.service.launcher import ServerProcess
from predictor.service.limits import Limits
from predictor.service.server import CLOSE_SECONDS
from simulator.workloads.synthetic import generate_workload

#: An lgbm estimator whose training takes about ten seconds on this machine.
HEAVY_LGBM = "lgbm-quantile:trees=200,leaves=63,window=3650d,retrain=1d,min_train=100,max_train=200000"


def stop_timed(server: ServerProcess, signum: int = signal.SIGTERM) -> tuple[int, float]:
    """The exit code and how long the stop took; a stop that hangs fails the test with the stacks in the log."""
    started = time.monotonic()
    try:
        code = server.stop(signum, timeout=60)
    except subprocess.TimeoutExpired:
        time.sleep(2)  # the stacks the SIGUSR1 of `stop` asked for
        server.process.kill()
        server.process.wait()
        pytest.fail("the server did not exit within 60 s; its log:\n" + "".join(server.log))
    assert code != 1, "the server's stop was stuck and its watchdog ended it; its log:\n" + "".join(server.log)
    return code, time.monotonic() - started


@pytest.fixture
def idle_stop() -> float:
    """How long SIGTERM takes here, now, to stop a server with nothing to wait for: what the stops of busy servers
    are measured against, so that a loaded machine slows both alike (no wall-clock figure of its own)."""
    code, seconds = stop_timed(ServerProcess(limits=Limits(shutdown_grace=1.0)))
    assert code == 0
    return seconds


def in_time(seconds: float, grace: float, idle_stop: float) -> bool:
    """A stop that waited at most the grace period and the closing allowance, beyond what an idle stop takes (twice
    that, for the noise of one measurement): not for a training, nor for a client that does not read."""
    return seconds < grace + CLOSE_SECONDS + 2 * idle_stop


@pytest.mark.slow
def test_sigterm_exits_in_time_while_a_model_trains_and_a_client_does_not_read(
    tmp_path: Path, idle_stop: float
) -> None:
    grace = 1.0
    server = ServerProcess(
        state=str(tmp_path / "state.sqlite"),
        default_estimators=[HEAVY_LGBM],
        limits=Limits(shutdown_grace=grace, send_timeout=120),
    )
    finished = finished_from_frame(generate_workload(jobs=6000, procs=128, load=0.8, seed=3).jobs)
    with PredictorClient(server.address, timeout=60) as client:
        client.observe(finished, namespace="training")
        client.sync([], submissions(finished[-1].end, count=1), namespace="training")  # starts a ~10 s training
    channel, _ = flood_stream(server.address)
    try:
        time.sleep(0.5)
        code, seconds = stop_timed(server)
    finally:
        channel.close()
    assert code == 0 and in_time(seconds, grace, idle_stop), (seconds, idle_stop)
    assert any("stopping" in line for line in server.log)


def test_sigterm_after_a_stream_whose_only_frame_is_undecodable(idle_stop: float) -> None:
    server = ServerProcess(limits=Limits(shutdown_grace=1.0))
    with grpc.insecure_channel(server.address) as channel:
        stream = channel.stream_stream("/tsched.v1.Predictor/SyncStream")
        assert (
            status_of(lambda: list(stream(iter([b"\xff\xff\xff"]), timeout=10)))[0] == grpc.StatusCode.INVALID_ARGUMENT
        )
    code, seconds = stop_timed(server)
    assert code == 0 and in_time(seconds, 1.0, idle_stop), (seconds, idle_stop)


def test_a_second_signal_exits_at_once(idle_stop: float) -> None:
    server = ServerProcess(limits=Limits(shutdown_grace=60, send_timeout=120))
    channel, _ = flood_stream(server.address)  # held open: the first signal would wait the whole minute
    try:
        time.sleep(1.0)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert server.process.poll() is None  # draining
        code, seconds = stop_timed(server, signal.SIGINT)
    finally:
        channel.close()
    assert code == 128 + signal.SIGINT and seconds < 2 * idle_stop, (seconds, idle_stop)  # not the minute's grace
    assert any("again: exiting now" in line for line in server.log)


def test_sigterm_during_traffic_of_every_kind_exits_in_time(tmp_path: Path, idle_stop: float) -> None:
    grace = 1.0
    for attempt in range(2):  # benchmarks/chaos_service.py does it 50 times
        server = ServerProcess(state=str(tmp_path / "state.sqlite"), limits=Limits(shutdown_grace=grace))
        stop = threading.Event()
        workers = [threading.Thread(target=traffic, args=(server.address, stop, attempt * 10 + n)) for n in range(3)]
        for worker in workers:
            worker.start()
        time.sleep(random.uniform(0.2, 1.0))
        try:
            code, seconds = stop_timed(server)
        finally:
            stop.set()
            for worker in workers:
                worker.join(10)
        assert code == 0 and in_time(seconds, grace, idle_stop), (attempt, seconds, idle_stop)


@pytest.mark.slow
def test_the_chaos_benchmark_passes_a_short_run() -> None:
    """benchmarks/chaos_service.py (30 kill -9 and 50 SIGTERM by default), two of each."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "chaos_service.py"
    command = [sys.executable, str(script), "--kills", "2", "--terms", "2"]
    run = subprocess.run(command, check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "missing after a restart: 0" in run.stdout and "late: 0" in run.stdout


def test_sigusr1_prints_every_thread_and_the_server_serves_on() -> None:
    server = ServerProcess(limits=Limits(shutdown_grace=1.0))
    server.process.send_signal(signal.SIGUSR1)
    for _ in range(600):  # faulthandler writes at once; the reader thread collects it
        if any("most recent call first" in line for line in server.log):
            break
        time.sleep(0.05)
    assert any("most recent call first" in line for line in server.log), "".join(server.log)
    with PredictorClient(server.address, timeout=30) as client:
        assert client.health() == "SERVING"
    assert stop_timed(server)[0] == 0


STUCK_SERVER = """
import sys, threading
from predictor.service import server as module
def stuck_stop(self, grace):
    threading.Event().wait()
module.PredictorServer.stop = stuck_stop
module.serve(on_ready=lambda port: print(port, flush=True), limits=module.Limits(shutdown_grace=0.2))
"""


def test_a_stop_stuck_past_its_bound_prints_every_stack_and_exits() -> None:
    """A stop that hangs where Python cannot interrupt it still ends (status 1) and says where it hung."""
    child = subprocess.Popen(
        [sys.executable, "-c", STUCK_SERVER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip().isdigit()
        child.send_signal(signal.SIGTERM)
        _, log = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 1, log
    assert "stuck_stop" in log and "most recent call first" in log, log
