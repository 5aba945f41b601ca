"""One identity and one clock for a site (issue 27): a namespace seeded from the site's own sacct dump answers the
site's live questions, by name and at Unix time, whatever path they arrive by.

Each test seeds a real server on loopback from a sacct dump written here with times of the last days (so
that a live submission, `os.time()`, is within the namespace's reach whatever day the test runs), users and
accounts named as Slurm names them, and the real `tsched observe`, `tsched predict` and `tsched train`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from site_support import USERS, utc_text, write_dump

from kernel.jobs import JobRequest
from predictor.estimators.lgbm.store import ModelCatalog
from predictor.service.client import PredictorClient
from predictor.service.server import PredictorServer, start_server
from predictor.service.state import COMPLETIONS, CompletionStore, StoredNamespace
from simulator.workloads.formats import read_trace
from sites.slurm import Follower
from tsched.cli import main

NAMESPACE = "cluster"
SPEC = "percentile:floor=0,min_jobs=5"


@pytest.fixture
def server() -> Iterator[PredictorServer]:
    running, _ = start_server("127.0.0.1:0", default_estimators=[SPEC])
    yield running
    running.stop(0).wait()


def _learned(state: Path) -> tuple[StoredNamespace, list[JobRequest]]:
    """The namespace the state file holds, and the jobs it learned, in order."""
    store = CompletionStore(state)
    try:
        held = store.load()[NAMESPACE]
    finally:
        store.close()
    return held, [job.request for event in held.events if event.kind == COMPLETIONS for job in event.completions]


def _predict(capsys: pytest.CaptureFixture[str], port: int, *arguments: str) -> dict[str, object]:
    capsys.readouterr()
    common = ["--address", f"127.0.0.1:{port}", "--namespace", NAMESPACE, "--procs", "1", "--json", "-"]
    assert main(["predict", *common, *arguments]) == 0
    answer: dict[str, object] = json.loads(capsys.readouterr().out)
    return answer


def test_a_dump_keeps_unix_times_and_names(tmp_path: Path) -> None:
    """The history is in Unix seconds (once seconds since the dump's first job), its names beside the ids."""
    trace = read_trace(write_dump(tmp_path / "site.sacct"))
    assert trace.header.unix_start_time == 0
    assert abs(int(trace.jobs["end"].max()) - time.time()) < 86_400
    assert set(trace.names["user"].values()) == set(USERS) and set(trace.names["group"].values()) == {
        "proj6",
        "proj2",
        "physics",
    }


def test_a_seeded_namespace_answers_by_name_at_a_live_submit_time(
    server: PredictorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 27, Why 1: `--user mallory3 --account proj6` answered `basis 0 fallback true`, and a live submit
    time was refused as "more than 90 days ahead" of the namespace's clock."""
    dump = write_dump(tmp_path / "site.sacct")
    address = f"127.0.0.1:{server.port}"
    assert main(["observe", "--address", address, "--namespace", NAMESPACE, "--trace", str(dump)]) == 0
    mallory = ("--user", "mallory3", "--account", "proj6", "--request", "30:00")
    live = _predict(capsys, server.port, *mallory, "--submit", str(int(time.time())))  # as job_submit.lua asks
    assert live["fallback"] is False and int(live["basis"]) >= 5  # type: ignore[call-overload]
    assert live["t_sched"] == 180  # her jobs use 10% of the request
    assert _predict(capsys, server.port, *mallory)["t_sched"] == 180  # without --submit: now
    numbers = _predict(capsys, server.port, "--user", "1070", "--group", "1", "--request", "30:00")
    assert numbers["fallback"] is True  # the ids of a trace convert's names file are no key of the site's


def test_the_follower_reports_by_name_into_the_seeded_history(server: PredictorServer, tmp_path: Path) -> None:
    """jobcomp.sh's USERNAME and ACCOUNT key a completion as the dump's User and Account do."""
    dump = write_dump(tmp_path / "site.sacct")
    with PredictorClient(f"127.0.0.1:{server.port}") as client:
        assert main(["observe", "--address", client.address, "--namespace", NAMESPACE, "--trace", str(dump)]) == 0
        before = client.predict(user="trent", group=-1, account="proj2", t_req=1800, procs=1, namespace=NAMESPACE)
        now = int(time.time())
        spool = tmp_path / "completions"
        spool.write_text(
            f"v2 JOBID=9001 UID=1071 GID=1071 SUBMIT={now - 700} START={now - 690} END={now - 90} "
            "LIMIT=00:30:00 PROCS=1 JOBSTATE=COMPLETED USERNAME=trent ACCOUNT=proj2 PARTITION=batch\n"
        )
        follower = Follower(spool, lambda jobs, names: client.observe(jobs, names=names, namespace=NAMESPACE))
        assert follower.step() == 1
        after = client.predict(user="trent", group=-1, account="proj2", t_req=1800, procs=1, namespace=NAMESPACE)
    assert after.prediction.basis == before.prediction.basis + 1 > 1


@pytest.mark.slow
def test_a_model_trained_on_the_dump_answers_live_questions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 27, Why 2: a question without --submit got `FAILED_PRECONDITION: a job submitted at 0 cannot be
    predicted once completions up to 26112120 have been learned`."""
    dump = write_dump(tmp_path / "site.sacct", jobs=600, days=4)
    models = tmp_path / "models"
    spec = "lgbm-quantile:min_train=200"
    until = utc_text(int(time.time()) - 86_400)[:10]
    assert (
        main(["train", "--trace", str(dump), "--estimator", spec, "--until", until, "--out", str(models / "site")]) == 0
    )
    catalog = ModelCatalog(models)
    running, port = start_server("127.0.0.1:0", estimator_factory=catalog.factory)
    try:
        peggy = ("--estimator", "site", "--user", "peggy", "--account", "proj6", "--request", "1:00:00")
        fresh = _predict(capsys, port, *peggy)
        assert 1 <= int(fresh["t_sched"]) <= 3600  # type: ignore[call-overload]  # answered, not refused
        address = f"127.0.0.1:{port}"
        assert main(["observe", "--address", address, "--namespace", NAMESPACE, "--trace", str(dump)]) == 0
        seeded = _predict(capsys, port, *peggy)
        assert seeded["fallback"] is False and int(seeded["t_sched"]) < 3600  # type: ignore[call-overload]
    finally:
        running.stop(0).wait()


def test_partition_qos_and_resources_arrive_by_one_name_from_every_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dump numbers its partitions and QOS in its own order, and the live paths sent none of them: a
    predictor keyed on the partition learned ids that no live question carried. Now the dump, the jobcomp
    follower and `tsched predict` all give them by name, with the nodes, memory and GPUs the job asked for."""
    state = tmp_path / "state.sqlite"
    running, port = start_server("127.0.0.1:0", default_estimators=[SPEC], state=state)
    try:
        address = f"127.0.0.1:{port}"
        dump = write_dump(tmp_path / "site.sacct")
        assert main(["observe", "--address", address, "--namespace", NAMESPACE, "--trace", str(dump)]) == 0
        now = int(time.time())
        spool = tmp_path / "completions"
        spool.write_text(
            f"v2 JOBID=9001 UID=1071 GID=1071 SUBMIT={now - 700} START={now - 690} END={now - 90} LIMIT=00:30:00 "
            "PROCS=1 NODECNT=1 JOBSTATE=COMPLETED USERNAME=trent ACCOUNT=proj2 PARTITION=batch QOS=normal\n"
        )
        with PredictorClient(address) as client:
            follower = Follower(spool, lambda jobs, names: client.observe(jobs, names=names, namespace=NAMESPACE))
            assert follower.step() == 1
        asked = ("--partition", "batch", "--qos", "normal", "--nodes", "1", "--mem", "1000M", "--gpus", "1")
        answer = _predict(capsys, port, "--user", "trent", "--account", "proj2", "--request", "30:00", *asked)
        assert answer["fallback"] is False
    finally:
        running.stop(0).wait()
    held, learned = _learned(state)
    batch, normal = held.names[("queue", "batch")], held.names[("qos", "normal")]
    assert len(learned) == 301
    assert {(job.queue, job.qos, job.nodes) for job in learned} == {(batch, normal, 1)}
    assert {job.memory_mb for job in learned[:-1]} == {1000} and learned[-1].memory_mb == 0  # jobcomp has no mem


def test_a_job_name_arrives_by_name_and_one_the_service_refuses_as_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dump numbers its job names in its own order: sent as numbers, two dumps' applications would mix. They go
    by name (`job_name`), as `tsched predict --job-name` asks; a name the service refuses (any user names their
    jobs: here 200 characters) goes as an unknown application, and the dump is still learned."""
    state = tmp_path / "state.sqlite"
    dump = write_dump(tmp_path / "site.sacct")
    lines = dump.read_text().splitlines()
    column = lines[0].split("|").index("JobName")
    fields = lines[7].split("|")
    fields[column] = "x" * 200
    lines[7] = "|".join(fields)
    dump.write_text("\n".join(lines) + "\n")
    running, port = start_server("127.0.0.1:0", default_estimators=[SPEC], state=state)
    try:
        address = f"127.0.0.1:{port}"
        assert main(["observe", "--address", address, "--namespace", NAMESPACE, "--trace", str(dump)]) == 0
        asked = ("--user", "trent", "--account", "proj2", "--request", "30:00", "--job-name", "namd")
        assert _predict(capsys, port, *asked)["fallback"] is False
    finally:
        running.stop(0).wait()
    held, requests = _learned(state)
    learned = {job.job_id: job for job in requests}
    assert len(learned) == 300 and learned[7].executable == -1
    assert {job.executable for number, job in learned.items() if number != 7} == {held.names[("executable", "namd")]}
