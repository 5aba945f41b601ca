"""The attacks of issue 25 that run on one machine, against a real `tsched serve`: survived or not.

Each attack runs against a fresh `tsched serve` (a child process on loopback,
with a token file and `--memory-limit-mb`) while a victim, with a token of its
own, sends Predict and health Check calls one after the other. An attack is
survived when:

- every victim call is answered, and their median time is within 100 ms of
  the same server's quiet median, measured just before the attack (the
  machine is shared: only the difference means something);
- the server's resident memory (/proc, sampled every 0.1 s) stays under
  `--memory-limit-mb` throughout;
- and what the attack itself aims at is refused or stopped (each attack's own
  check, printed beside it).

The attacks: a Health.Watch flood (60 streams on one connection), one token
hogging the call slots (64 threads of 20,000-job PredictBatch calls), SPECs asking
for more than the caps, a ForecastStart at its maximum sizes abandoned by its
client (the server's CPU after it left), SyncStreams whose answers are never
read, and forged Slurm completions through the follower. A crafted state
file is marked not run until snapshots carry data only (no pickle).

Prints a table and exits with status 1 if any attack that ran was not survived.

    python benchmarks/chaos.py [--memory-limit-mb 400] [--rounds 20] [--only NAME]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kernel.jobs import FinishedJob, JobRequest
from predictor.forecasting import Scheduler
from predictor.proto import rpc
from predictor.service.client import PredictorClient, PredictorError
from predictor.service.codec import forecast_request, sync_request
from predictor.service.connection import Credentials
from sites.slurm import Follower

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from service_support import NOT_READING, history, largest_forecast  # the tests' workload and attackers

VICTIM, ATTACKER = "v" * 32, "a" * 32
#: A victim's call may take this much longer during an attack than the same server's quiet median (seconds).
MARGIN_SECONDS = 0.1
PATIENT_SECONDS = 30.0
#: Jobs per call: the largest message must fit the server's request memory (10% of --memory-limit-mb).
MAX_BATCH = 20_000


@dataclass
class Server:
    """`tsched serve` in a child process, with a victim's and an attacker's token."""

    folder: Path
    memory_limit_mb: int
    process: subprocess.Popen[bytes] = field(init=False)
    address: str = field(init=False)
    peak_mb: float = 0.0

    def __post_init__(self) -> None:
        tokens = self.folder / "tokens"
        tokens.touch(mode=0o600)
        tokens.write_text(f"{VICTIM} victim*\n{ATTACKER} attack*\n")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        tsched = shutil.which("tsched") or "tsched"
        with (self.folder / "server.log").open("wb") as log:
            self.process = subprocess.Popen(
                [tsched, "serve", "--listen", self.address, "--tokens", str(tokens),
                 "--memory-limit-mb", str(self.memory_limit_mb), "--max-batch", str(MAX_BATCH)],
                stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        with PredictorClient(self.address, timeout=2, credentials=Credentials(token=VICTIM)) as client:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if client.health() == "SERVING":
                        return
                except PredictorError:
                    time.sleep(0.2)
        raise RuntimeError(f"tsched serve did not start: {(self.folder / 'server.log').read_text()[-2000:]}")

    def resident_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def victim_seconds(address: str, rounds: int) -> tuple[list[float], list[str]]:
    """The victim's Predict and Check times, and the failures among them."""
    taken, failures = [], []
    with PredictorClient(address, timeout=PATIENT_SECONDS, credentials=Credentials(token=VICTIM)) as client:
        calls: list[Callable[[], object]] = [
            lambda: client.predict(user=1, group=1, t_req=60, procs=1, namespace="victim"),
            client.health,
        ]
        for _ in range(rounds):
            for call in calls:
                started = time.perf_counter()
                try:
                    call()
                except PredictorError as error:
                    failures.append(error.code.name)
                taken.append(time.perf_counter() - started)
    return taken, failures


@contextmanager
def memory_watch(server: Server) -> Iterator[None]:
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            server.peak_mb = max(server.peak_mb, server.resident_mb())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# --- the attacks: each starts its attack, returns a check of its own aim and a stop --------------------------

Attack = Callable[[Server], tuple[Callable[[], tuple[bool, str]], Callable[[], None]]]


def watch_flood(server: Server) -> tuple[Callable[[], tuple[bool, str]], Callable[[], None]]:
    channel = grpc.insecure_channel(server.address)
    watch = health_pb2_grpc.HealthStub(channel).Watch
    calls = [watch(health_pb2.HealthCheckRequest()) for _ in range(60)]

    def aim() -> tuple[bool, str]:
        refused = sum(1 for call in calls if call.done() and call.code() is grpc.StatusCode.RESOURCE_EXHAUSTED)
        return True, f"{60 - refused} watchers held, {refused} refused"

    return aim, channel.close


def slot_hog(server: Server) -> tuple[Callable[[], tuple[bool, str]], Callable[[], None]]:
    """64 threads of the largest PredictBatch, in a process of their own (in the victim's, they would slow
    the victim's client, not the server)."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    counts = context.Array("i", 2)  # refused, sent
    hog = context.Process(target=_hog, args=(server.address, stop, counts), daemon=True)
    hog.start()
    deadline = time.monotonic() + 120
    while counts[1] < 64 and time.monotonic() < deadline:  # every thread has been answered or refused once
        time.sleep(0.1)

    def end() -> None:
        stop.set()
        hog.join(PATIENT_SECONDS)

    return lambda: (True, f"{counts[0]} of the hog's {counts[1]} calls refused"), end


def _hog(address: str, stop: Event, counts: Any) -> None:
    jobs = [JobRequest(i, 1000, i % 50, 1, 3600, 1) for i in range(MAX_BATCH)]

    def send() -> None:
        with PredictorClient(address, timeout=PATIENT_SECONDS, credentials=Credentials(ATTACKER)) as client:
            while not stop.is_set():
                try:
                    client.predict_batch(jobs, namespace="attack")
                except PredictorError:
                    with counts.get_lock():
                        counts[0] += 1
                with counts.get_lock():
                    counts[1] += 1

    threads = [threading.Thread(target=send) for _ in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def heavy_spec(server: Server) -> tuple[Callable[[], tuple[bool, str]], Callable[[], None]]:
    asked = (
        "lgbm-sched:trees=1000",
        "lgbm-sched:threads=8",
        "lgbm-sched:max_train=1000000",
        "lgbm-quantile:trees=1000",
    )
    codes = []
    with PredictorClient(server.address, timeout=PATIENT_SECONDS, credentials=Credentials(ATTACKER)) as client:
        for spec in asked:
            try:
                client.predict(user=1, group=1, t_req=60, procs=1, namespace="attack", estimator=spec)
                codes.append("OK")
            except PredictorError as error:
                codes.append(error.code.name)
    accepted = codes.count("OK")
    return lambda: (accepted == 0, f"{accepted} of {len(asked)} SPECs above the caps accepted"), lambda: None


def forecast_abandon(server: Server) -> tuple[Callable[[], tuple[bool, str]], Callable[[], None]]:
    scheduler = Scheduler("fcfs", "conservative", "queue")
    request = forecast_request(largest_forecast(), scheduler, "attack", "request", None)
    channel = grpc.insecure_channel(server.address)
    metadata = (("authorization", f"Bearer {ATTACKER}"),)
    call = rpc.PredictorStub(channel).ForecastStart.future(request, timeout=600, metadata=metadata)
    time.sleep(3)  # well into the forward runs
    call.cancel()
    left = server.cpu_seconds()

    def aim() -> tuple[bool, str]:
        time.sleep(2)  # the server's CPU over the 2 s after the client left (and the victim's calls)
        used = server.cpu_seconds() - left
        return used < 1.0, f"server CPU after the client left: {used:.2f} s"

    return aim, channel.close


def unread_streams(server: Server) -> tuple[Callable[[], tuple[bool, str]], Callable[[], None]]:
    streams = [_unread_stream(server.address) for _ in range(40)]

    def end() -> None:
        for channel, _ in streams:
            channel.close()

    return lambda: (True, "40 SyncStreams of 5,000-job answers, never read"), end


def _unread_stream(address: str) -> tuple[grpc.Channel, object]:
    channel = grpc.insecure_channel(address, options=NOT_READING)
    jobs = [JobRequest(i, 100, i % 50, 1, 3600, 1) for i in range(5000)]
    request = sync_request([], jobs, "attack-flood", "request")

    def requests() -> Iterator[object]:
        while True:
            yield request

    metadata = (("authorization", f"Bearer {ATTACKER}"),)
    return channel, rpc.PredictorStub(channel).SyncStream(requests(), metadata=metadata)


def forged_completions(server: Server) -> tuple[Callable[[], tuple[bool, str]], Callable[[], None]]:
    spool = server.folder / "completions"
    honest = history(20, start=1_795_500_000)
    lines = [
        # what the first jobcomp.sh made of a job named "x\nUID=0 END=...": the forged fields after the real ones
        f"JOBID=41 UID=1001 GID=1 SUBMIT=1 START=2 END=3 LIMIT=00:02:00 PROCS=2 UID=0 END={2**33}",
        f"v2 JOBID=43 UID=7 GID=7 SUBMIT={honest[0].request.submit} START={honest[0].request.submit} "
        f"END={int(time.time()) + 89 * 86_400} LIMIT=01:00:00 PROCS=1 JOBSTATE=COMPLETED",  # 89 days ahead
        *(_spool_line(job) for job in honest),
    ]
    spool.write_text("\n".join(lines) + "\n")
    with PredictorClient(server.address, timeout=PATIENT_SECONDS, credentials=Credentials(ATTACKER)) as client:
        follower = Follower(spool, lambda jobs: client.observe(jobs, namespace="attack-slurm"))
        while follower.step():
            pass
        status = client.status("attack-slurm")
    clock_ok = status.clock == max(job.end for job in honest)
    survived = clock_ok and status.completions == len(honest)
    return lambda: (survived, f"{status.completions} of {len(honest)} honest accepted, clock moved: {not clock_ok}"), (
        lambda: None
    )


def _spool_line(job: FinishedJob) -> str:
    request = job.request
    return (
        f"v2 JOBID={request.job_id} UID={request.user} GID={request.group} SUBMIT={request.submit} "
        f"START={job.end - job.runtime} END={job.end} LIMIT=01:00:00 PROCS={request.procs} JOBSTATE=COMPLETED"
    )


ATTACKS: dict[str, Attack] = {
    "Health.Watch flood (60 streams)": watch_flood,
    "call-slot hog (64 threads of 20,000-job batches)": slot_hog,
    "heavy estimator SPECs": heavy_spec,
    "ForecastStart at maximum sizes, abandoned": forecast_abandon,
    "unread SyncStream answers (40 streams)": unread_streams,
    "forged Slurm completions via the follower": forged_completions,
}


def run(name: str, attack: Attack, memory_limit_mb: int, rounds: int) -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix="tsched-chaos-") as folder:
        server = Server(Path(folder), memory_limit_mb)
        try:
            quiet, _ = victim_seconds(server.address, rounds)
            with memory_watch(server):
                aim, end = attack(server)
                try:
                    during, failures = victim_seconds(server.address, rounds)
                    aimed, detail = aim()
                finally:
                    end()
        finally:
            server.stop()
    slower = statistics.median(during) - statistics.median(quiet)
    survived = aimed and not failures and slower < MARGIN_SECONDS and server.peak_mb < memory_limit_mb
    detail = (
        f"victim +{slower * 1000:.1f} ms (quiet {statistics.median(quiet) * 1000:.1f} ms), "
        f"{len(failures)} failed; peak {server.peak_mb:.0f} MB; {detail}"
    )
    return ("survived" if survived else "NOT SURVIVED"), detail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory-limit-mb", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=20, help="victim Predict+Check pairs per measurement")
    parser.add_argument("--only", default="", help="run only the attacks whose name contains this")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}")
    chosen = {name: attack for name, attack in ATTACKS.items() if args.only in name}
    results = [(name, *run(name, attack, args.memory_limit_mb, args.rounds)) for name, attack in chosen.items()]
    results.append(("crafted state file (snapshot runs code)", "not run", "snapshots are still pickles on this branch"))
    width = max(len(name) for name, _, _ in results)
    for name, verdict, detail in results:
        print(f"{name:<{width}}  {verdict:<12}  {detail}")
    ran = [verdict for _, verdict, _ in results if verdict != "not run"]
    print(f"survived {ran.count('survived')} of {len(ran)} tried; load after: {os.getloadavg()[0]:.2f}")
    return 0 if ran.count("survived") == len(ran) else 1


if __name__ == "__main__":
    sys.exit(main())
