"""Killing and stopping a loaded server, over and over: nothing acknowledged is lost, answers stay exact, stops end.

1. `--kills` (30) times: three schedulers (percentile, last2 and a small
   lgbm-quantile, each in its own namespace) drive a server with a state file,
   one Sync per scheduling instant (completions since the last, then the jobs
   submitted now); after a random 0.3-2 s the server gets `kill -9`, and is
   started again on the same file. After each restart every acknowledged
   completion and submission must be there (the namespace's completions and
   clock), and over the whole run every answer the server gave must equal what
   an in-process session fed the same completions and submissions gives. A
   call in flight at the kill may have been stored or not: the clock tells,
   and it is resent only if it was not.
2. `--terms` (50) times: a server with a state file takes calls of every kind,
   good and bad (three clients), and gets SIGTERM after a random 0.2-1.5 s;
   it must exit within its grace period (`--grace`, 2 s) plus 2 s.

Prints what it measured and exits with status 1 if any check failed.

    python benchmarks/chaos_service.py [--kills 30] [--terms 50] [--grace 2]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.registry import make_estimator
from predictor.service.client import PredictorClient, PredictorError
from predictor.service.launcher import ServerProcess
from predictor.service.limits import Limits
from predictor.session import LocalSession

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from service_support import instants, traffic  # the tests' workload and traffic, shared

SPECS = ("percentile", "last2", "lgbm-quantile:window=5d,retrain=2d,calibration=3d,min_train=200,trees=5")
#: Snapshots every 300 events: restarts read a snapshot and replay the events after it.
KILL_LIMITS = Limits(snapshot_every=300)
MARGIN_SECONDS = 2.0

Step = tuple[list[FinishedJob], list[JobRequest]]


@dataclass
class Scheduler:
    """One namespace's life: the instants it goes through, how far the server has them, and the answers it gave."""

    namespace: str
    spec: str
    steps: list[Step]
    stored: int = 0  # instants the server holds (acknowledged, or stored though their answer was lost)
    answers: dict[int, list[Prediction]] = field(default_factory=dict)
    in_flight: int | None = None

    def run(self, address: str, stop: threading.Event) -> None:
        with PredictorClient(address, timeout=30) as client:
            while not stop.is_set() and self.stored < len(self.steps):
                finished, submitted = self.steps[self.stored]
                self.in_flight = self.stored
                try:
                    answer = client.sync(finished, submitted, namespace=self.namespace, estimator=self.spec)
                except PredictorError:
                    return  # the server is gone; whether this instant was stored is read after the restart
                self.answers[self.stored] = answer
                self.stored += 1
                self.in_flight = None

    def reconcile(self, client: PredictorClient) -> list[str]:
        """After a restart: was the instant in flight stored? Is everything acknowledged there?"""
        listing = client.list_estimators(self.namespace)
        if self.in_flight is not None and self.in_flight == self.stored:
            if listing.clock == self.steps[self.stored][1][0].submit:
                self.stored += 1  # stored, its answer lost with the server: never resent
            self.in_flight = None
        expected_completions = sum(len(finished) for finished, _ in self.steps[: self.stored])
        expected_clock = self.steps[self.stored - 1][1][0].submit if self.stored else 0
        problems = []
        if listing.completions != expected_completions:
            held = listing.completions
            problems.append(f"{self.namespace}: {held} completions held, {expected_completions} stored")
        if listing.clock != expected_clock:
            problems.append(f"{self.namespace}: clock {listing.clock}, expected {expected_clock}")
        return problems

    def mismatches(self) -> int:
        """Answers that differ from an in-process session fed the same instants."""
        session = LocalSession(make_estimator(self.spec))
        differing = 0
        for index, (finished, submitted) in enumerate(self.steps[: self.stored]):
            expected = session.sync(finished, submitted)
            if index in self.answers and self.answers[index] != expected:
                differing += 1
        return differing


def kills(count: int, folder: Path, rng: random.Random) -> tuple[bool, str]:
    state = str(folder / "kill.sqlite")
    schedulers = [Scheduler(f"chaos-{n}", spec, instants(12_000)) for n, spec in enumerate(SPECS)]
    problems: list[str] = []
    restarts: list[float] = []
    for _ in range(count):
        started = time.monotonic()
        server = ServerProcess(state=state, limits=KILL_LIMITS)
        with PredictorClient(server.address, timeout=30) as client:
            client.health()
            restarts.append(time.monotonic() - started)
            for scheduler in schedulers:
                problems += scheduler.reconcile(client)
        stop = threading.Event()
        loaders = [threading.Thread(target=s.run, args=(server.address, stop)) for s in schedulers]
        for loader in loaders:
            loader.start()
        time.sleep(rng.uniform(0.3, 2.0))
        server.stop(signal.SIGKILL)
        stop.set()
        for loader in loaders:
            loader.join(60)
    server = ServerProcess(state=state, limits=KILL_LIMITS)
    with PredictorClient(server.address, timeout=30) as client:
        for scheduler in schedulers:
            problems += scheduler.reconcile(client)
    server.stop()
    answered = sum(len(s.answers) for s in schedulers)
    differing = sum(s.mismatches() for s in schedulers)
    summary = (
        f"kill -9 under load, {count} times: {sum(s.stored for s in schedulers):,} instants stored "
        f"({answered:,} answered) in {len(schedulers)} namespaces; acknowledged completions or submissions "
        f"missing after a restart: {len(problems)}; answers differing from an in-process replay: {differing}; "
        f"start to serving: median {statistics.median(restarts):.2f} s, max {max(restarts):.2f} s"
    )
    return not problems and differing == 0, "\n  ".join([summary, *problems[:10]])


def terms(count: int, grace: float, folder: Path, rng: random.Random) -> tuple[bool, str]:
    durations = []
    codes = []
    for attempt in range(count):
        server = ServerProcess(state=str(folder / "term.sqlite"), limits=Limits(shutdown_grace=grace))
        stop = threading.Event()
        clients = [threading.Thread(target=traffic, args=(server.address, stop, attempt * 3 + n)) for n in range(3)]
        for client in clients:
            client.start()
        time.sleep(rng.uniform(0.2, 1.5))
        started = time.monotonic()
        codes.append(server.stop(signal.SIGTERM, timeout=60))
        durations.append(time.monotonic() - started)
        stop.set()
        for client in clients:
            client.join(30)
    late = [seconds for seconds in durations if seconds > grace + MARGIN_SECONDS]
    summary = (
        f"SIGTERM during traffic of every kind, {count} times (grace {grace:g} s): exit in median "
        f"{statistics.median(durations):.2f} s, max {max(durations):.2f} s (limit {grace + MARGIN_SECONDS:g} s); "
        f"late: {len(late)}; exit codes: {sorted(set(codes))}"
    )
    return not late and set(codes) == {0}, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--terms", type=int, default=50)
    parser.add_argument("--grace", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    passed = True
    with tempfile.TemporaryDirectory() as folder:
        if args.kills:
            survived, summary = kills(args.kills, Path(folder), rng)
            print(summary)
            passed = passed and survived
        if args.terms:
            survived, summary = terms(args.terms, args.grace, Path(folder), rng)
            print(summary)
            passed = passed and survived
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
