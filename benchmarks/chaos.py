"""The attacks of issue 25 that run on one machine, against a real `tsched serve`: survived or not, in one table.

Attacks on a running server each run against a fresh `tsched serve` (a child
process on loopback, with a token file and `--memory-limit-mb`) while a
victim, with a token of its own, sends Predict and health Check calls one
after the other. Such an attack is survived when:

- every victim call is answered, and their median time is within 100 ms of
  the same server's quiet median, measured just before the attack (the
  machine is shared: only the difference means something);
- the server's resident memory (/proc, sampled every 0.1 s) stays under
  `--memory-limit-mb` throughout;
- and what the attack itself aims at is refused or stopped (each attack's own
  check, printed beside it).

They are: a Health.Watch flood (60 streams on one connection), calls without
a token or outside the token's namespaces, fuzzed bytes to every method, one
token hogging the call slots (64 threads of 20,000-job PredictBatch calls),
SPECs asking for more than the caps, a ForecastStart at its maximum sizes
abandoned by its client (the server's CPU after it left), SyncStreams whose
answers are never read, and forged Slurm completions (the old spool format,
a job 89 days ahead, what deploy/slurm/jobcomp.sh writes for a job whose name
and working directory carry forged records, a line far past the follower's
read bound). The attacks through files (`chaos_files.py`): a crafted state
file whose snapshot runs code, a write-ahead log torn after kill -9, a
second server on the live state file through links, a damaged state file,
listening off loopback open. Then `--kills` kill -9 under three writers and
`--terms` SIGTERMs during traffic (`chaos_service.py`).

Prints a table and exits with status 1 if any attack was not survived.

    python benchmarks/chaos.py [--memory-limit-mb 400] [--rounds 20] [--kills 30] [--terms 25] [--only NAME]
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import random
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
from predictor.proto import pb, rpc
from predictor.service.client import PredictorClient, PredictorError
from predictor.service.codec import forecast_request, sync_request
from predictor.service.connection import Credentials
from sites.slurm import BATCH_LINES, MAX_LINE_BYTES, Follower

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from chaos_files import FILE_ATTACKS  # the attacks through files, beside this script
from chaos_service import kills, terms  # kill -9 and SIGTERM under load, beside this script
from service_support import NOT_READING, history, largest_forecast  # the tests' workload and attackers

REPO = Path(__file__).resolve().parents[1]

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


def _attacker_process(target: Callable[..., None], server: Server, first_calls: int) -> tuple[Any, Callable[[], None]]:
    """`target(address, stop, counts)` in a process of its own (in the victim's, it would slow the victim's
    client, not the server), once it has made `first_calls` calls; its counts (refused, sent, wrong) and a stop."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    counts = context.Array("i", 3)
    attacker = context.Process(target=target, args=(server.address, stop, counts), daemon=True)
    attacker.start()
    deadline = time.monotonic() + 120
    while counts[1] < first_calls and time.monotonic() < deadline:
        time.sleep(0.1)

    def end() -> None:
        stop.set()
        attacker.join(PATIENT_SECONDS)

    return counts, end


def _in_threads(calls: list[Callable[[], None]]) -> None:
    """Each call in a thread of its own, until all have returned."""
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _count(counts: Any, refused: bool = False, wrong: bool = False) -> None:
    with counts.get_lock():
        counts[0] += refused
        counts[1] += 1
        counts[2] += wrong


def slot_hog(server: Server) -> tuple[Callable[[], tuple[bool, str]], Callable[[], None]]:
    """64 threads of the largest PredictBatch, from one token."""
    counts, end = _attacker_process(_hog, server, 64)  # every thread answered or refused once
    return lambda: (True, f"{counts[0]} of the hog's {counts[1]} calls refused"), end


def _hog(address: str, stop: Event, counts: Any) -> None:
    jobs = [JobRequest(i, 1000, i % 50, 1, 3600, 1) for i in range(MAX_BATCH)]

    def send() -> None:
        with PredictorClient(address, timeout=PATIENT_SECONDS, credentials=Credentials(ATTACKER)) as client:
            while not stop.is_set():
                try:
                    client.predict_batch(jobs, namespace="attack")
                    _count(counts)
                except PredictorError:
                    _count(counts, refused=True)

    _in_threads([send] * 64)


def intruders(server: Server) -> tuple[Callable[[], tuple[bool, str]], Callable[[], None]]:
    """16 threads calling without a token, with an unknown one, or with the attacker's on the victim's namespace."""
    counts, end = _attacker_process(_intrude, server, 16)

    def aim() -> tuple[bool, str]:
        return counts[2] == 0, f"{counts[1] - counts[2]} of {counts[1]} calls refused, {counts[2]} answered"

    return aim, end


def _intrude(address: str, stop: Event, counts: Any) -> None:
    tokens = [None, "u" * 32, ATTACKER]

    def send(token: str | None) -> None:
        with PredictorClient(address, timeout=PATIENT_SECONDS, credentials=Credentials(token=token)) as client:
            while not stop.is_set():
                try:
                    client.predict(user=1, group=1, t_req=60, procs=1, namespace="victim")
                    _count(counts, wrong=True)
                except PredictorError as error:
                    expected = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
                    _count(counts, refused=True, wrong=error.code not in expected)

    _in_threads([functools.partial(send, tokens[n % 3]) for n in range(16)])


def fuzz_flood(server: Server) -> tuple[Callable[[], tuple[bool, str]], Callable[[], None]]:
    """8 threads sending random bytes (and random valid messages' bytes cut short) to every Predictor method."""
    counts, end = _attacker_process(_fuzz, server, 200)

    def aim() -> tuple[bool, str]:
        return counts[2] == 0, f"{counts[1]:,} fuzzed calls, {counts[2]} answered INTERNAL or UNKNOWN"

    return aim, end


#: What no request may get as its answer: a bug's status.
BROKEN = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)


def _fuzz(address: str, stop: Event, counts: Any) -> None:
    methods = [method.name for method in pb.DESCRIPTOR.services_by_name["Predictor"].methods]
    metadata = (("authorization", f"Bearer {ATTACKER}"),)
    valid = sync_request(history(5), [JobRequest(1, 400_000, 1, 1, 60, 1)], "attack-fuzz", "").SerializeToString()

    def send(seed: int) -> None:
        rng = random.Random(seed)
        with grpc.insecure_channel(address) as channel:
            while not stop.is_set():
                method = rng.choice(methods)
                cut = valid[: rng.randrange(len(valid))]
                body = rng.randbytes(rng.randrange(0, 300)) if rng.random() < 0.5 else cut
                path = f"/tsched.v1.Predictor/{method}"
                try:
                    if method == "SyncStream":
                        for _ in channel.stream_stream(path)(iter([body, body]), timeout=10, metadata=metadata):
                            pass
                    else:
                        channel.unary_unary(path)(body, timeout=10, metadata=metadata)
                    _count(counts)
                except grpc.RpcError as error:
                    _count(counts, refused=True, wrong=error.code() in BROKEN)

    _in_threads([functools.partial(send, seed) for seed in range(8)])


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
        """The server's CPU over 2 s once the victim is done: a forecast still running would use about 1 s/s."""
        quiet = server.cpu_seconds()
        time.sleep(2)
        used, since = server.cpu_seconds() - quiet, server.cpu_seconds() - left
        return used < 0.5, f"server CPU over 2 s after the victim: {used:.2f} s ({since:.2f} s since the client left)"

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
    """Lines the first jobcomp.sh wrote for a job named "x\\nUID=0 END=...", one 89 days ahead, what today's
    jobcomp.sh writes for a job whose name and working directory carry forged records, and a line of 3 times
    the follower's read bound; then 20 honest lines. Only the honest jobs (and the real one) may be learned."""
    spool = server.folder / "completions"
    honest = history(20, start=1_795_500_000)
    first = honest[0].request.submit
    lines = [
        f"JOBID=41 UID=1001 GID=1 SUBMIT=1 START=2 END=3 LIMIT=00:02:00 PROCS=2 UID=0 END={2**33}",
        f"v2 JOBID=43 UID=7 GID=7 SUBMIT={first} START={first} "
        f"END={int(time.time()) + 89 * 86_400} LIMIT=01:00:00 PROCS=1 JOBSTATE=COMPLETED",
    ]
    spool.write_text("\n".join(lines) + "\n")
    forged = f"x\nv2 JOBID=44 UID=0 GID=0 SUBMIT=1 START=2 END={2**33} LIMIT=99:00:00 PROCS=1\nUID=0"
    _jobcomp(server.folder, spool, JOBID="45", SUBMIT=str(first - 100), START=str(first - 90), END=str(first - 30),
             JOBNAME=forged, WORK_DIR=forged)  # fmt: skip
    with spool.open("a") as file:
        for _ in range(3 * BATCH_LINES):
            file.write("JOBID=46 " + "A" * MAX_LINE_BYTES)
        file.write("\n" + "".join(_spool_line(job) + "\n" for job in honest))
    with PredictorClient(server.address, timeout=PATIENT_SECONDS, credentials=Credentials(ATTACKER)) as client:
        follower = Follower(spool, lambda jobs, names: client.observe(jobs, names=names, namespace="attack-slurm"))
        while follower.step():
            pass
        status = client.status("attack-slurm")
    clock_ok = status.clock == max(job.end for job in honest)
    survived = clock_ok and status.completions == len(honest) + 1
    detail = f"{status.completions} learned of {len(honest)} honest + 1 real, clock moved: {not clock_ok}"
    return lambda: (survived, detail), lambda: None


def _jobcomp(folder: Path, spool: Path, **fields: str) -> None:
    """Run deploy/slurm/jobcomp.sh (writing to `spool`) with the environment slurmctld gives a finished job."""
    script = (REPO / "deploy" / "slurm" / "jobcomp.sh").read_text().replace("/var/spool/tsched/completions", str(spool))
    (folder / "jobcomp.sh").write_text(script)
    (folder / "jobcomp.sh").chmod(0o755)
    environment = {"UID": "1001", "GID": "1001", "LIMIT": "00:02:00", "PROCS": "2", "JOBSTATE": "COMPLETED", **fields}
    subprocess.run([str(folder / "jobcomp.sh")], env=environment, check=True)


def _spool_line(job: FinishedJob) -> str:
    request = job.request
    return (
        f"v2 JOBID={request.job_id} UID={request.user} GID={request.group} SUBMIT={request.submit} "
        f"START={job.end - job.runtime} END={job.end} LIMIT=01:00:00 PROCS={request.procs} JOBSTATE=COMPLETED"
    )


ATTACKS: dict[str, Attack] = {
    "Health.Watch flood (60 streams)": watch_flood,
    "calls without a token or outside it (16 threads)": intruders,
    "fuzzed messages to every method (8 threads)": fuzz_flood,
    "call-slot hog (64 threads of 20,000-job batches)": slot_hog,
    "heavy estimator SPECs": heavy_spec,
    "ForecastStart at maximum sizes, abandoned": forecast_abandon,
    "unread SyncStream answers (40 streams)": unread_streams,
    "forged Slurm completions (jobcomp.sh, spool, follower)": forged_completions,
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
        f"victim {slower * 1000:+.1f} ms (quiet {statistics.median(quiet) * 1000:.1f} ms), "
        f"{len(failures)} failed; peak {server.peak_mb:.0f} MB; {detail}"
    )
    return ("survived" if survived else "NOT SURVIVED"), detail


def _file_attack(attack: Callable[[Path], tuple[bool, str]]) -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix="tsched-chaos-") as folder:
        survived, detail = attack(Path(folder))
    return ("survived" if survived else "NOT SURVIVED"), f"no victim (the attack is on files); {detail}"


def _restarts(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """kill -9 under three writers and SIGTERM during traffic (benchmarks/chaos_service.py), as table rows."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="tsched-chaos-") as where:
        folder, rng = Path(where), random.Random(1)
        for name, count, run in (
            (f"kill -9 under three writers ({args.kills} times)", args.kills, lambda: kills(args.kills, folder, rng)),
            (f"SIGTERM during traffic ({args.terms} times)", args.terms, lambda: terms(args.terms, 2.0, folder, rng)),
        ):
            if count and args.only in name:
                survived, detail = run()
                rows.append((name, "survived" if survived else "NOT SURVIVED", detail.replace("\n", " ")))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory-limit-mb", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=20, help="victim Predict+Check pairs per measurement")
    parser.add_argument("--kills", type=int, default=30, help="kill -9 rounds under three writers (0: none)")
    parser.add_argument("--terms", type=int, default=25, help="SIGTERM rounds during traffic (0: none)")
    parser.add_argument("--only", default="", help="run only the attacks whose name contains this")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}")
    results = [
        (name, *run(name, attack, args.memory_limit_mb, args.rounds))
        for name, attack in ATTACKS.items()
        if args.only in name
    ]
    results += [(name, *_file_attack(attack)) for name, attack in FILE_ATTACKS.items() if args.only in name]
    results += _restarts(args)
    width = max(len(name) for name, _, _ in results)
    for name, verdict, detail in results:
        print(f"{name:<{width}}  {verdict:<12}  {detail}")
    survived = [verdict for _, verdict, _ in results].count("survived")
    print(f"survived {survived} of {len(results)} tried; load after: {os.getloadavg()[0]:.2f}")
    return 0 if survived == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
