"""Long loads that say what they did (issue 27): `tsched observe` of a large history, against a real server on
loopback, in chunks with progress; the server answers health checks and metrics scrapes while it ingests; a load
that fails says how much was stored and what to do, and the same command run again goes on where it stopped.

Once a 28,000-job dump stopped at the 5 s deadline with a bare DEADLINE_EXCEEDED after storing 20,000 jobs,
and `namespaces show` and a 5 s metrics scrape timed out meanwhile.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from predictor.service.client import PredictorClient
from predictor.service.limits import Limits
from predictor.service.server import start_server
from sites.seeding import CHUNK
from tsched.cli import main

NAMESPACE = "cluster"


def write_swf(path: Path, jobs: int, gap_after: int | None = None, gap: int = 0) -> Path:
    """`jobs` one-processor jobs of 40 users, one every 30 s (each running 100 s of its 600); the jobs after
    `gap_after` are submitted `gap` seconds later."""
    lines = ["; Version: 2.2", "; MaxProcs: 64"]
    for job in range(1, jobs + 1):
        submit = job * 30 + (gap if gap_after is not None and job > gap_after else 0)
        lines.append(f"{job} {submit} 0 100 1 -1 -1 1 600 -1 1 {job % 40 + 1} {job % 7 + 1} -1 -1 -1 -1 -1")
    path.write_text("\n".join(lines) + "\n")
    return path


def _observe(address: str, trace: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tsched.cli", "observe", "--address", address, "--namespace", NAMESPACE]
    return subprocess.run(
        [*command, "--trace", str(trace), *extra], capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.slow
def test_a_long_load_goes_in_chunks_while_health_and_metrics_answer(tmp_path: Path) -> None:
    jobs = 15 * CHUNK
    trace = write_swf(tmp_path / "big.swf", jobs)
    server, port = start_server("127.0.0.1:0", metrics_listen="127.0.0.1:0")
    assert server.metrics is not None
    scrape = f"http://127.0.0.1:{server.metrics.port}/metrics"
    seen: list[tuple[str, int]] = []  # (what answered, completions held when it did)
    done = threading.Event()

    def watch() -> None:
        with PredictorClient(f"127.0.0.1:{port}", timeout=60) as client:
            while not done.is_set():
                held = server.core.status(NAMESPACE)
                count = held.completions if held is not None else 0
                seen.append((client.health(), count))
                with urllib.request.urlopen(scrape, timeout=60) as answer:
                    seen.append(("metrics" if b"tsched_" in answer.read() else "no metrics", count))

    watcher = threading.Thread(target=watch)
    try:
        watcher.start()
        loaded = _observe(f"127.0.0.1:{port}", trace)
        done.set()
        watcher.join(120)
        assert loaded.returncode == 0, loaded.stderr
        assert f"namespace {NAMESPACE}: {jobs} finished job(s) learned, 0 already held" in loaded.stdout
        assert f"observe: namespace {NAMESPACE}: {jobs:,} of {jobs:,} jobs done" in loaded.stderr  # progress
        during = {what for what, count in seen if 0 < count < jobs}
        assert during == {"SERVING", "metrics"}, seen  # both answered between two chunks of the load
        again = _observe(f"127.0.0.1:{port}", trace)  # resumed after the end: nothing to send
        assert f"0 finished job(s) learned, {jobs} already held" in again.stdout
    finally:
        done.set()
        server.stop(0).wait()


@pytest.mark.slow
def test_a_failed_load_says_what_it_stored_and_the_same_command_goes_on(tmp_path: Path) -> None:
    """A server that refuses the second half (its jobs are 100 days past the first: beyond --max-time-step),
    then the same state file served with room for it: the load goes on where it stopped."""
    jobs, half = 3 * CHUNK, 2 * CHUNK
    trace = write_swf(tmp_path / "gap.swf", jobs, gap_after=half, gap=100 * 86_400)
    state = str(tmp_path / "state.db")
    server, port = start_server("127.0.0.1:0", state=state)
    try:
        failed = _observe(f"127.0.0.1:{port}", trace)
    finally:
        server.stop(0).wait()
    assert failed.returncode != 0
    assert f"stopped after {half:,} of {jobs:,} jobs ({half:,} stored by this run, 0 already held)" in failed.stderr
    assert "more than 90 days ahead" in failed.stderr and "run the same command again" in failed.stderr
    server, port = start_server("127.0.0.1:0", state=state, limits=Limits(max_time_step="200d"))
    try:
        resumed = _observe(f"127.0.0.1:{port}", trace)
        assert resumed.returncode == 0, resumed.stderr
        assert f"{jobs - half} finished job(s) learned, {half} already held; now {jobs} held" in resumed.stdout
    finally:
        server.stop(0).wait()


def test_a_deadline_too_short_says_to_raise_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A listener that accepts connections but never speaks HTTP/2 keeps every call waiting past its deadline, so
    the deadline is exceeded however fast the machine (a real server on loopback once answered within the 1 us
    deadline, which gRPC's core rounds up to its millisecond clock)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        trace = str(write_swf(tmp_path / "small.swf", 10))
        failed = main(["observe", "--address", f"127.0.0.1:{port}", "--trace", trace, "--timeout", "0.05"])
    error = capsys.readouterr().err
    assert failed != 0 and "stopped after 0 of 10 jobs" in error and "DEADLINE_EXCEEDED" in error
    assert "raise --timeout (now 0.05 s) and run the same command again" in error
