"""How long a server with 500,000 stored completions takes to serve again after `kill -9` (target: 3 s).

A namespace is rebuilt from its latest snapshot and the events recorded after
it. With the default `--snapshot-every 100000` a namespace holds at most
99,999 events past its snapshot; this measures that worst case (a snapshot at
400,000 completions and 100,000 after it), the best case (a snapshot of all
500,000), and, for reference, a file with no snapshot at all (every event
replayed). The time is from starting the process to the first answered
Predict in that namespace; the server is killed, not stopped, so its log is
replayed too.

    python benchmarks/bench_restart.py [--completions 500000]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

from kernel.jobs import FinishedJob, JobRequest
from predictor.service.client import PredictorClient
from predictor.service.launcher import ServerProcess
from predictor.service.limits import Limits

NAMESPACE = "cluster"
BATCH = 20_000
NEVER = 10**12


def completions(count: int) -> list[FinishedJob]:
    """A year of a busy cluster: 500 users, one job a minute each on average, varied runtimes, in end order."""
    jobs = []
    for index in range(count):
        submit = 1_700_000_000 + index * 60
        runtime = 60 + (index * 7919) % 7200
        request = JobRequest(index + 1, submit, index % 500, index % 40, 7200, 1 + index % 64)
        jobs.append(FinishedJob(request, submit + 30 + runtime, runtime))
    return sorted(jobs, key=lambda job: job.end)


def feed(state: Path, jobs: list[FinishedJob], snapshot_every: int) -> None:
    server = ServerProcess(state=str(state), limits=Limits(snapshot_every=snapshot_every))
    with PredictorClient(server.address, timeout=300) as client:
        for start in range(0, len(jobs), BATCH):
            client.observe(jobs[start : start + BATCH], namespace=NAMESPACE)
    server.stop(signal.SIGKILL)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc): what a start costs, apart from waiting for a busy CPU."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def restart(state: Path, expected: int) -> tuple[float, float, str]:
    """Seconds from start to the first answered Predict, the server's CPU seconds by then, its restore log line."""
    started = time.monotonic()
    server = ServerProcess(state=str(state))
    with PredictorClient(server.address, timeout=60) as client:
        client.predict(user=1, group=1, t_req=7200, procs=1, namespace=NAMESPACE)
        seconds, cpu = time.monotonic() - started, _cpu_seconds(server.pid)
        held = client.list_estimators(NAMESPACE).completions
    server.stop(signal.SIGKILL)
    assert held == expected, f"{held} completions restored, {expected} stored"
    restored = next((line.strip() for line in server.log if "restored" in line), "")
    return seconds, cpu, restored.partition(" INFO ")[2]


def empty_start(times: int = 5) -> tuple[float, float]:
    """Median seconds from start to serving of a server without a state file, and its median CPU seconds by
    then: what Python, the imports and gRPC cost before any state is read."""
    measured, used = [], []
    for _ in range(times):
        started = time.monotonic()
        server = ServerProcess()
        with PredictorClient(server.address, timeout=60) as client:
            client.health()
            measured.append(time.monotonic() - started)
            used.append(_cpu_seconds(server.pid))
        server.stop()
    return statistics.median(measured), statistics.median(used)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=500_000)
    args = parser.parse_args()
    jobs = completions(args.completions)
    tail = min(100_000, len(jobs) // 5)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    seconds, cpu = empty_start()
    print(f"a server without a state file: serving {seconds:.2f} s after start, {cpu:.2f} CPU s (medians of 5)")
    with tempfile.TemporaryDirectory() as folder:
        cases = {
            f"snapshot at {len(jobs) - tail:,}, then {tail:,} events (the default's worst case)": [
                (jobs[:-tail], 100_000),
                (jobs[-tail:], NEVER),
            ],
            f"snapshot of all {len(jobs):,}": [(jobs, len(jobs))],
            f"no snapshot: all {len(jobs):,} replayed": [(jobs, NEVER)],
        }
        for number, (case, feeds) in enumerate(cases.items()):
            state = Path(folder) / f"state-{number}.sqlite"
            for part, snapshot_every in feeds:
                feed(state, part, snapshot_every)
            size = sum(path.stat().st_size for path in Path(folder).glob(f"state-{number}.sqlite*"))
            seconds, cpu, restored = restart(state, len(jobs))
            print(
                f"{case}: serving {seconds:.2f} s after start (target 3 s), {cpu:.2f} CPU s; "
                f"file {size / 2**20:.0f} MB; {restored}"
            )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
