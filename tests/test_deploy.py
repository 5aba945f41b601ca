"""What deploy/ ships for operating tsched: systemd units that systemd accepts and whose commands tsched
accepts, and a Grafana dashboard whose every panel queries a metric a live server exports."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kernel.jobs import FinishedJob, JobRequest
from predictor.service.client import PredictorClient
from predictor.service.server import start_server

REPO = Path(__file__).resolve().parents[1]
UNITS = sorted((REPO / "deploy" / "systemd").glob("*.service"))
DASHBOARD = REPO / "deploy" / "grafana" / "tsched-dashboard.json"
#: Where the units expect the project installed (their comments say how).
INSTALLED_BIN = "/opt/tsched/venv/bin/"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze (Debian's systemd)")
@pytest.mark.parametrize("unit", UNITS, ids=[unit.name for unit in UNITS])
def test_systemd_accepts_the_unit_without_a_warning(unit: Path, tmp_path: Path) -> None:
    """`systemd-analyze verify` with the installed binaries where this checkout's are (it checks they exist)."""
    here = str(Path(sys.executable).parent) + "/"
    (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED_BIN, here))
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / unit.name)], check=False, capture_output=True, text=True
    )
    assert (checked.returncode, checked.stderr) == (0, "")


def test_the_verification_catches_a_broken_unit(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("needs systemd-analyze")
    (tmp_path / "broken.service").write_text("[Service]\nExecStart=/nonexistent/tsched serve\nBogus=1\n")
    checked = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "broken.service")], check=False)
    assert checked.returncode != 0


def _exec_start(unit: Path) -> list[str]:
    line = next(line for line in unit.read_text().splitlines() if line.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_the_units_run_commands_tsched_has() -> None:
    commands = {Path(_exec_start(unit)[0]).name: _exec_start(unit) for unit in UNITS}
    assert set(commands) == {"tsched", "tsched-slurm-jobcomp"}
    for command in commands.values():
        assert command[0].startswith(INSTALLED_BIN)
        help_text = subprocess.run(
            [
                str(Path(sys.executable).parent / Path(command[0]).name),
                *command[1:2][: command[1][:1] != "-"],
                "--help",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for option in (word.partition("=")[0] for word in command[1:] if word.startswith("--")):
            assert option in help_text, f"{command[0]} has no option {option}"


def _expressions(dashboard: dict[str, object]) -> list[str]:
    panels = dashboard["panels"]
    assert isinstance(panels, list) and panels
    return [target["expr"] for panel in panels for target in panel["targets"]]


def _metric_names(expression: str) -> set[str]:
    return set(re.findall(r"\btsched_[a-z_]+", expression))


def _scrape(address: str) -> set[str]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_every_dashboard_panel_queries_a_metric_the_server_exports(tmp_path: Path) -> None:
    """Metric names as a live scrape has them (counters with _total, histograms with _bucket), after traffic
    of every kind so that the per-namespace and per-estimator series exist."""
    dashboard = json.loads(DASHBOARD.read_text())
    running, port = start_server(
        "127.0.0.1:0", default_estimators=["percentile:min_jobs=3"], metrics_listen="127.0.0.1:0"
    )
    try:
        assert running.metrics is not None
        with PredictorClient(f"127.0.0.1:{port}", timeout=30) as client:
            for index in range(5):  # asked at submission, reported at the end: scored live
                job = JobRequest(index + 1, 1_000_000 + index * 7200, user=5, group=2, t_req=3600, procs=8)
                client.predict_job(job, namespace="cluster")
                client.observe([FinishedJob(job, job.submit + 1000, 990)], namespace="cluster")
        exported = _scrape(running.metrics.address)
    finally:
        running.stop(0).wait()
    used = set().union(*map(_metric_names, _expressions(dashboard)))
    assert used and used <= exported, f"not exported: {sorted(used - exported)}"
    for variable in dashboard["templating"]["list"]:
        assert _metric_names(variable.get("definition", "")) <= exported


def test_the_dashboard_check_catches_a_misspelt_metric() -> None:
    assert _metric_names('rate(tsched_call_total[5m]) + tsched_live_accuracy{estimator="x"}') == {
        "tsched_call_total",
        "tsched_live_accuracy",
    }
