"""The PBS queuejob hook (deploy/pbs/tsched_queuejob.py), run unchanged against a stand-in `pbs` module.

PBS is not installable here: the stand-in (tests/pbs_standin/pbs.py) only
holds the job and records what the hook does; the hook asks a real server
through the real `tsched predict`.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from test_pbs import exit_record

from kernel.jobs import FinishedJob, JobRequest
from predictor.service.client import PredictorClient, SiteNames
from predictor.service.server import PredictorServer, start_server
from sites.slurm import JOB_NAME_PATTERN
from tsched.cli import main

REPO = Path(__file__).resolve().parents[1]
HOOK = REPO / "deploy" / "pbs" / "tsched_queuejob.py"
sys.path.insert(0, str(Path(__file__).with_name("pbs_standin")))
import pbs as standin  # noqa: E402 - the stand-in, found on the path just set


def _hook() -> ModuleType:
    """The hook as a module, loaded without `pbs` importable: nothing runs at import."""
    saved = sys.modules.pop("pbs", None)
    sys.modules["pbs"] = None  # type: ignore[assignment]  # makes `import pbs` fail
    try:
        spec = importlib.util.spec_from_file_location("tsched_queuejob", HOOK)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        del sys.modules["pbs"]
        if saved is not None:
            sys.modules["pbs"] = saved
    return module


hook = _hook()


def test_the_soft_walltime_is_the_prediction_capped_at_the_request() -> None:
    assert hook.soft_walltime(3600, {"t_sched": 600, "fallback": False}) == 600
    assert hook.soft_walltime(3600, {"t_sched": 3600, "fallback": False}) is None  # never the request itself
    assert hook.soft_walltime(3600, {"t_sched": 7200, "fallback": False}) is None  # never above it
    assert hook.soft_walltime(3600, {"t_sched": 3600, "fallback": True}) is None
    assert hook.soft_walltime(0, {"t_sched": 60, "fallback": False}) is None
    assert hook.soft_walltime(3600, None) is None
    assert hook.group_of(None, "_pbs_project_default", "users") == "users"
    assert hook.group_of("physics", "p1", "users") == "physics"


@pytest.fixture(scope="module")
def server() -> Iterator[PredictorServer]:
    running, port = start_server("127.0.0.1:0", default_estimators=["percentile:floor=0,min_jobs=3"])
    start = int(time.time()) - 3600  # PBS asks at the time of day
    history = [
        FinishedJob(JobRequest(i + 1, start + i * 100, -1, -1, 3600, 4), start + i * 100 + 400, 360) for i in range(5)
    ]
    with PredictorClient(f"127.0.0.1:{port}") as client:  # alice of physics, by name as the hook asks
        client.observe(history, names=[SiteNames("alice", "physics")] * 5, namespace="pbs")
    yield running
    running.stop(0).wait()


def _queue(job: standin.Job, requestor: str, address: str) -> standin.Event:
    standin.current = standin.Event(job, requestor)
    standin.logged.clear()
    settings = {**hook.SETTINGS, "client": [sys.executable, "-m", "tsched.cli", "predict"]}
    hook.SETTINGS.update(settings, address=address, namespace="pbs", deadline=20.0)
    with pytest.raises(SystemExit):
        hook.run(standin)
    assert standin.current.accepted
    return standin.current


@pytest.mark.slow
def test_a_job_gets_its_prediction_as_soft_walltime(server: PredictorServer) -> None:
    job = standin.Job(walltime=3600, ncpus=4, account="physics")
    _queue(job, "alice", f"127.0.0.1:{server.port}")
    assert job.Resource_List["soft_walltime"] == 360 and job.Resource_List["walltime"] == 3600
    hook.SETTINGS["advisory"] = True
    try:
        advised = standin.Job(walltime=3600, ncpus=4, account="physics")
        _queue(advised, "alice", f"127.0.0.1:{server.port}")
        assert advised.Resource_List["soft_walltime"] is None
        assert standin.logged == [(standin.LOG_WARNING, "tsched: advisory: soft_walltime would be 360 s of 3600 s")]
    finally:
        hook.SETTINGS["advisory"] = False
    stranger = standin.Job(walltime=3600, ncpus=4, account="physics")
    _queue(stranger, "bob", f"127.0.0.1:{server.port}")  # no history: the request stands, nothing is set
    assert stranger.Resource_List["soft_walltime"] is None and not standin.logged


def test_the_hook_asks_with_the_queue_as_pbs_report_keys_the_history() -> None:
    """`tsched pbs-report` sends each job's queue as its partition, by name: the hook asks the same way."""
    settings = {**hook.SETTINGS, "client": ["tsched", "predict"], "address": "A", "namespace": "pbs"}
    asked = hook.command(settings, "alice", "physics", 3600, 4, 100, hook.queue_of(standin.Job(3600, queue="gpu")))
    assert asked[asked.index("--partition") + 1] == "gpu"
    assert "--partition" not in hook.command(settings, "alice", "physics", 3600, 4, 100, hook.queue_of(standin.Job(60)))


def test_the_hook_sends_a_plain_job_name_as_pbs_report_does() -> None:
    """A plain Job_Name goes as `--job-name` (lgbm's application=true learns from it); one `tsched pbs-report`
    would send as an unknown application (spaces, too long) is not sent; the two use one pattern."""
    settings = {**hook.SETTINGS, "client": ["tsched", "predict"], "address": "A", "namespace": "pbs"}
    asked = hook.command(settings, "alice", "physics", 3600, 4, 100, "", "vasp-6.4_relax")
    assert asked[asked.index("--job-name") + 1] == "vasp-6.4_relax"
    for unsent in ("", "my job", "x" * 129, "run;rm"):
        assert "--job-name" not in hook.command(settings, "alice", "physics", 3600, 4, 100, "", unsent), unsent
    assert hook.PLAIN_JOB_NAME.pattern == JOB_NAME_PATTERN


@pytest.mark.slow
def test_a_named_job_gets_its_prediction(server: PredictorServer) -> None:
    """The real `tsched predict` and server take the name the hook sends (percentile ignores names: what the name
    is worth to a model is lgbm's application=true, docs/lgbm.md)."""
    job = standin.Job(walltime=3600, ncpus=4, account="physics", name="vasp")
    _queue(job, "alice", f"127.0.0.1:{server.port}")
    assert job.Resource_List["soft_walltime"] == 360 and not standin.logged


def test_without_the_service_the_job_is_queued_unchanged_and_logged(server: PredictorServer) -> None:
    job = standin.Job(walltime=3600, ncpus=4, account="physics")
    _queue(job, "alice", "127.0.0.1:1")
    assert job.Resource_List["soft_walltime"] is None
    ((level, message),) = standin.logged
    assert level == standin.LOG_WARNING and "no prediction" in message


def test_pbs_runs_the_hook_file_itself_and_a_job_without_walltime_passes() -> None:
    job = standin.Job(walltime=None)
    standin.current = standin.Event(job, "alice")
    sys.modules["pbs"] = standin
    try:
        with pytest.raises(SystemExit):
            runpy.run_path(str(HOOK), run_name="__main__")
    finally:
        del sys.modules["pbs"]
    assert standin.current.accepted and job.Resource_List["soft_walltime"] is None


def test_pbs_report_sends_the_completions_the_hook_asked_about(tmp_path: Path, capsys) -> None:
    start = int(time.time()) - 7200
    lines = [
        exit_record(
            f"{i}.pbs",
            start + i * 60,
            start + i * 60 + 5,
            start + i * 60 + 365,
            account="physics",
            Resource_List__ncpus=1,
        )
        for i in range(1, 6)
    ]
    log = tmp_path / "20240304"
    log.write_text("\n".join(lines) + "\n")
    running, port = start_server("127.0.0.1:0", default_estimators=["percentile:floor=0,min_jobs=3"])
    try:
        arguments = ["pbs-report", str(log), "--address", f"127.0.0.1:{port}", "--namespace", "pbs"]
        assert main(arguments) == 0
        assert "5 finished job(s) learned, 0 already held" in capsys.readouterr().out
        assert main(arguments) == 0  # from cron, again: nothing twice
        assert "0 finished job(s) learned, 5 already held" in capsys.readouterr().out
        with PredictorClient(f"127.0.0.1:{port}") as client:
            served = client.predict(user="alice", group=-1, account="physics", t_req=3600, procs=1, namespace="pbs")
        assert served.prediction.t_sched == 360
    finally:
        running.stop(0).wait()


def test_pbs_report_reads_a_folder_of_daily_accounting_files(tmp_path: Path, capsys) -> None:
    """The documented cron line names PBS's accounting folder (one file a day), not a file."""
    start = int(time.time()) - 7 * 86400
    folder = tmp_path / "accounting"
    folder.mkdir()
    for day in range(3):
        lines = [
            exit_record(
                f"{day * 10 + i}.pbs",
                start + day * 86400 + i * 60,
                start + day * 86400 + i * 60 + 5,
                start + day * 86400 + i * 60 + 125,
                account="physics",
                Resource_List__ncpus=1,
            )
            for i in range(4)
        ]
        (folder / f"2024030{day + 1}").write_text("\n".join(lines) + "\n")
    (folder / ".20240301.swp").write_text("not a log\n")  # an editor's file: skipped like any hidden file
    running, port = start_server("127.0.0.1:0", default_estimators=["percentile:floor=0,min_jobs=3"])
    try:
        arguments = ["pbs-report", str(folder), "--address", f"127.0.0.1:{port}", "--namespace", "pbs"]
        assert main(arguments) == 0
        assert "12 finished job(s) learned, 0 already held" in capsys.readouterr().out
        assert main(arguments) == 0
        assert "0 finished job(s) learned, 12 already held" in capsys.readouterr().out
    finally:
        running.stop(0).wait()
