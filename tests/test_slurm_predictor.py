"""The predictor in a real Slurm's loop: job_submit.lua asks at submission, jobcomp/script reports completions.

A one-host cluster (tests/slurm/one_host_cluster.sh) runs deploy/slurm's
job_submit.lua, cli_filter.lua and jobcomp.sh, with `tsched-slurm-jobcomp
--follow` reporting the spool, against a predictor served by this process. Three users
submit a few hundred short jobs in two waves; alice's jobs always use 10% of
their request. Then the predictor is stopped, then replaced by a port that
accepts connections and never answers: every submission is still accepted,
none waits more than the deadline longer, and each is logged. About three
minutes; skipped without root or Slurm.
"""

from __future__ import annotations

import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from slurm.workload import Cluster, running_cluster, unavailable, wait_for_completions

from predictor.service.server import PredictorServer, start_server

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "cluster"
#: No floor: the adjuster may answer the 10% alice's jobs use; five similar jobs suffice.
SPEC = "percentile:floor=0,min_jobs=5"
DEADLINE_MS = 100
#: Submissions timed in each of the three states of the predictor.
TIMED = 25
#: Apart from the deadline, how much slower a submission may be with the predictor hung (process noise).
JITTER = 0.05


@dataclass
class Live:
    cluster: Cluster
    server: PredictorServer
    scratch: Path
    wave_one: list[int]
    alice_wave_two: list[int]
    others: list[int]
    advice: str


def _sbatch(
    cluster: Cluster, user: str, seconds: int, limit: int, *extra: str, advice: bool = True
) -> tuple[int, float, str]:
    """Submit as `user` (without cli_filter's advice: TSCHED_ADVICE=no); return the job id, the wall time sbatch
    took, and its stderr."""
    command = ["runuser", "-u", user, "--", "sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp"]
    began = time.perf_counter()
    done = subprocess.run(
        [*command, "--ntasks=1", f"--time={limit}", *extra, "--wrap", f"sleep {seconds}"],
        env={**cluster.env, "TSCHED_ADVICE": "yes" if advice else "no"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(done.stdout.strip()), time.perf_counter() - began, done.stderr


def _wait_reported(server: PredictorServer, count: int, timeout: float) -> None:
    wait_for_completions(lambda: _held(server), count, timeout)


def _held(server: PredictorServer) -> int:
    status = server.core.status(NAMESPACE)
    return status.completions if status is not None else 0


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    reason = unavailable() or (None if shutil.which("curl") else "curl is not installed")
    if reason:
        pytest.skip(reason)
    scratch = Path(tempfile.mkdtemp(prefix="tsched-slurm-predictor-"))
    scratch.chmod(0o755)
    server, port = start_server("127.0.0.1:0", default_estimators=[SPEC])
    (scratch / "etc").mkdir()
    for name in ("job_submit.lua", "cli_filter.lua", "tsched_client.lua"):
        shutil.copy(REPO / "deploy" / "slurm" / name, scratch / "etc" / name)
    (scratch / "etc" / "tsched.conf").write_text(
        f"address=127.0.0.1:{port}\nnamespace={NAMESPACE}\ndeadline_ms={DEADLINE_MS}\n"
    )
    jobcomp, spool = scratch / "jobcomp.sh", scratch / "completions"
    script = (REPO / "deploy" / "slurm" / "jobcomp.sh").read_text()
    jobcomp.write_text(script.replace("/var/spool/tsched/completions", str(spool)))
    jobcomp.chmod(0o755)
    report = ["--follow", str(spool), "--address", f"127.0.0.1:{port}", "--namespace", NAMESPACE]
    follower = subprocess.Popen(
        [sys.executable, "-m", "tsched.cli.jobcomp", *report],
        stderr=(scratch / "follower.log").open("w"),
    )
    settings = {
        "TSCHED_SLURM_PORT": "18817",
        "TSCHED_SLURM_EXTRA": "JobSubmitPlugins=lua\nCliFilterPlugins=lua",
        "TSCHED_SLURM_JOBCOMP": f"jobcomp/script {jobcomp}",
    }
    try:
        with running_cluster(scratch, settings) as cluster:
            cluster.add_users()
            rng = random.Random(15)
            # Wave one: alice's jobs sleep 6 s of their minute; bob's and carol's vary.
            wave_one = [_sbatch(cluster, "tsched-alice", 6, 1)[0] for _ in range(20)]
            others = [
                _sbatch(cluster, user, rng.choice([0, 1, 2, 3]), rng.choice([1, 2, 5]))[0]
                for user in ("tsched-bob", "tsched-carol")
                for _ in range(60)
            ]
            _wait_reported(server, len(wave_one) + len(others), timeout=240)
            wave_two = [_sbatch(cluster, "tsched-alice", 6, 1) for _ in range(30)]
            others += [
                _sbatch(cluster, user, rng.choice([0, 1, 2]), rng.choice([1, 2, 5]))[0]
                for user in ("tsched-bob", "tsched-carol")
                for _ in range(40)
            ]
            yield Live(cluster, server, scratch, wave_one, [job for job, _, _ in wave_two], others, wave_two[0][2])
    finally:
        follower.terminate()
        follower.wait(30)
        server.stop(0).wait()
        shutil.rmtree(scratch, ignore_errors=True)


def test_every_job_got_a_prediction_and_alice_gets_her_ten_percent(live: Live) -> None:
    jobs = [*live.wave_one, *live.alice_wave_two, *live.others]
    _wait_reported(live.server, len(jobs), timeout=240)
    comments = live.cluster.admin_comments(jobs)
    estimates = {}
    for job in jobs:
        match = re.search(r"tsched:t_sched=(\d+)", comments[job])
        if match:
            estimates[job] = int(match.group(1))
    # A job without a prediction (a question later than the deadline on this busy machine) is logged.
    log = (live.scratch / "log" / "slurmctld.log").read_text()
    assert len(jobs) - len(estimates) == log.count("no prediction for a job") <= len(jobs) // 20
    first = [estimates[job] for job in live.wave_one[:5] if job in estimates]
    assert first and set(first) == {60}  # no history yet: the request
    # After enough history: near the 10% (6 s of 60) her jobs use.
    later = [job for job in live.alice_wave_two if job in estimates]
    assert len(later) >= 25 and all(5 <= estimates[job] <= 9 for job in later), [estimates[j] for j in later]
    # With the adjuster's interval: the 90% quantile of her runtimes, and the share of them above the estimate.
    for job in later:
        interval = re.search(r"p90=(\d+),p_under=(0\.\d\d)$", comments[job].strip())
        assert interval and 5 <= int(interval.group(1)) <= 9 and float(interval.group(2)) <= 0.2, comments[job]


def test_the_service_holds_the_completions_and_scores_them(live: Live) -> None:
    jobs = len(live.wave_one) + len(live.alice_wave_two) + len(live.others)
    _wait_reported(live.server, jobs, timeout=240)
    status = live.server.core.status(NAMESPACE)
    assert status is not None and status.completions == jobs
    (scores,) = status.estimators
    # Questions asked before the namespace's first completion are not kept (a question creates no namespace);
    # every later job is scored once it completes. Each of them was asked about twice (cli_filter's advice,
    # then job_submit): one question per job waits, until a later completion of the same kind clears it.
    wave_two = len(live.alice_wave_two) + 80
    assert scores.scored >= wave_two and scores.pending <= wave_two
    assert scores.underestimated < 0.35
    # jobcomp.sh's PARTITION and QOS key the completions by name, as a sacct dump's Partition and QOS do.
    held = live.server.core.table.get(NAMESPACE)
    assert held is not None
    with held:
        named = {key for key in held.names if key[0] in ("queue", "qos")}
        kinds = {(job.request.queue, job.request.qos, job.request.nodes) for job in held.history}
    assert named == {("queue", "batch"), ("qos", "normal")}
    assert kinds == {(held.names[("queue", "batch")], held.names[("qos", "normal")], 1)}


def test_the_user_is_told_when_the_request_is_much_longer(live: Live) -> None:
    assert "jobs like this one have run within 0.1 min of the 1.0 min requested" in live.advice


def test_a_predictor_down_or_hung_neither_refuses_nor_holds_up_submissions(live: Live) -> None:
    """job_submit.lua's question alone (cli_filter's advice, which asks too, is turned off by the users)."""
    cluster, port = live.cluster, live.server.port
    log_file = live.scratch / "log" / "slurmctld.log"
    down_line, hung_line = (
        "submitted without one: the service is down",
        f"without one: no answer within {DEADLINE_MS} ms",
    )
    earlier = log_file.read_text()
    up = [_sbatch(cluster, "tsched-bob", 0, 1, "--hold", advice=False)[1] for _ in range(TIMED)]
    live.server.server.stop(0).wait()  # the port closes; the fixture stops the rest
    down = [_sbatch(cluster, "tsched-bob", 0, 1, "--hold", advice=False) for _ in range(TIMED)]
    with socket.create_server(("127.0.0.1", port)) as hung:  # accepts connections, never answers
        hung.listen(2 * TIMED)
        stuck = [_sbatch(cluster, "tsched-bob", 0, 1, "--hold", advice=False) for _ in range(TIMED)]
    accepted = {job for job, _, _ in (*down, *stuck)}
    assert len(accepted) == 2 * TIMED
    log = log_file.read_text()
    assert log.count(down_line) - earlier.count(down_line) == TIMED
    assert log.count(hung_line) - earlier.count(hung_line) >= TIMED  # and any question of `up` that was late
    up_median = statistics.median(up)
    down_median = statistics.median(seconds for _, seconds, _ in down)
    stuck_median = statistics.median(seconds for _, seconds, _ in stuck)
    print(f"sbatch median: predictor up {up_median:.3f} s, down {down_median:.3f} s, hung {stuck_median:.3f} s")
    assert down_median <= up_median + DEADLINE_MS / 1000 + JITTER
    assert stuck_median <= up_median + DEADLINE_MS / 1000 + JITTER
    assert max(seconds for _, seconds, _ in stuck) < 1.0
