"""Every `tsched` subcommand, run through `main` as a user runs it; user errors are one line and exit 2."""

from __future__ import annotations

import argparse
import io
import json
import logging
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from service_support import history, observe_by_name

from predictor.service.client import PredictorClient, PredictorError
from predictor.service.server import start_server
from simulator.workloads.swf import read_swf
from tsched.cli import build_parser, main, simulation


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small generated workload written as SWF by `tsched trace generate`."""
    path = tmp_path_factory.mktemp("cli") / "small.swf"
    assert (
        main(["trace", "generate", "--jobs", "3000", "--machine-procs", "64", "--seed", "5", "--out", str(path)]) == 0
    )
    return path


def test_trace_generate_writes_what_it_says(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = trace_file.with_name("again.swf.gz")
    assert main(["trace", "generate", "--jobs", "3000", "--machine-procs", "64", "--seed", "5", "--out", str(out)]) == 0
    assert "3000 jobs on 64 processors" in capsys.readouterr().out
    assert main(["trace", "info", str(out)]) == 0
    assert "3,000 replayable jobs" in capsys.readouterr().out


def test_trace_info_prints_and_writes_json(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "info.json"
    assert main(["trace", "info", str(trace_file), "--json", str(summary)]) == 0
    assert "64 processors" in capsys.readouterr().out
    assert json.loads(summary.read_text())["jobs"] == 3000


def test_simulate_prints_metrics_and_writes_json_and_jobs(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary, jobs = tmp_path / "run.json", tmp_path / "jobs.csv"
    arguments = ["simulate", "--trace", str(trace_file), "--policy", "wfp", "--estimator", "percentile"]
    assert main([*arguments, "--mode", "selective", "--json", str(summary), "--jobs-csv", str(jobs)]) == 0
    printed = capsys.readouterr().out
    assert "wfp + easy backfilling (queue order), 64 processors, mode selective" in printed
    result = json.loads(summary.read_text())
    assert result["jobs"] == 3000 and result["mode"] == "selective" and result["avg_wait"] >= 0
    assert len(jobs.read_text().splitlines()) == 3001


@pytest.mark.parametrize(
    ("spelled", "seconds", "printed"),
    [("30m", 1800, "reservation delay bound 1800 s"), ("none", None, "no reservation delay bound")],
)
def test_simulate_takes_a_bound_on_the_reservation_delay(
    trace_file: Path, spelled: str, seconds: int | None, printed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["simulate", "--trace", str(trace_file), "--backfill-order", "sjf", "--estimator", "last2"]
    assert main([*arguments, "--mode", "regular", "--max-reservation-delay", spelled]) == 0
    assert printed in capsys.readouterr().out
    assert main([*arguments, "--mode", "regular", "--max-reservation-delay", spelled, "--json", "-"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["max_reservation_delay"] == seconds
    assert summary["max_wait"] >= summary["p95_wait_widest"] >= 0 and summary["awrt"] > 0


def test_predict_eval_scores_every_estimator(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "eval.json"
    arguments = ["predict-eval", "--trace", str(trace_file), "--estimators", "request", "last2"]
    assert main([*arguments, "--json", str(report), "--csv", str(tmp_path / "eval.csv")]) == 0
    assert "last2" in capsys.readouterr().out
    assert [row["estimator"] for row in json.loads(report.read_text())["results"]] == ["request", "last2"]


@pytest.mark.slow
def test_predict_eval_grid(trace_file: Path, tmp_path: Path) -> None:
    grid = tmp_path / "grid.csv"
    assert main(["predict-eval", "--trace", str(trace_file), "--grid", "--csv", str(grid)]) == 0
    assert len(grid.read_text().splitlines()) == 1 + 4 * 6 * 8 * 2


def test_evaluate_writes_a_report(trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    arguments = ["evaluate", "--traces", str(trace_file), "--estimators", "request,last2", "--policies", "fcfs"]
    assert main([*arguments, "--modes", "selective", "--workers", "1", "--in-process", "--out", str(out)]) == 0
    assert "report:" in capsys.readouterr().out
    assert (out / "report.md").is_file() and (out / "results.csv").is_file()


@pytest.mark.slow
def test_train_writes_a_model_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "models" / "synthetic"
    assert main(["train", "--estimator", "lgbm-quantile:trees=5", "--out", str(folder)]) == 0
    assert "trained lgbm-quantile" in capsys.readouterr().out
    assert json.loads((folder / "manifest.json").read_text())["training"]["jobs"] > 500


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def serve_in_subprocess(address: str, *options: str) -> subprocess.Popen[str]:
    """`tsched serve` in a subprocess, once it answers health checks."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tsched.cli", "serve", "--listen", address, *options],
        stderr=subprocess.PIPE,
        text=True,
    )
    with PredictorClient(address, timeout=1.0) as client:
        for _ in range(100):
            try:
                if client.health() == "SERVING":
                    break
            except PredictorError:
                time.sleep(0.1)
    return server


def test_serve_then_predict(capsys: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    server = serve_in_subprocess(address, "--estimators", "last2")
    try:
        arguments = ["predict", "--address", address, "--user", "3", "--group", "1", "--request", "1:00:00"]
        assert main([*arguments, "--procs", "4", "--json", "-"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["t_sched"] == 3600 and answer["fallback"] is True and answer["estimator"] == "last2"
    finally:
        server.send_signal(signal.SIGTERM)
        _, log = server.communicate(timeout=30)
    assert server.returncode == 0
    assert "predictor service stopped" in log


@pytest.mark.slow
def test_simulate_through_a_server_waits_for_trainings_and_equals_in_process(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"127.0.0.1:{free_port()}"
    spec = "lgbm-sched:window=10d,retrain=2d,min_train=200,trees=5"
    arguments = ["simulate", "--trace", str(trace_file), "--backfill-order", "sjf", "--estimator", spec]
    arguments += ["--mode", "regular"]
    server = serve_in_subprocess(address)
    try:
        served = tmp_path / "served.json"
        remote = [*arguments, "--address", address, "--timeout", "60"]
        assert main([*remote, "--json", str(served)]) == 0
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    local = tmp_path / "local.json"
    assert main([*arguments, "--json", str(local)]) == 0
    capsys.readouterr()
    summary = json.loads(served.read_text())
    assert summary["predictor_fallbacks"] == 0
    assert summary == json.loads(local.read_text())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["simulate", "--trace", "/no/such/trace.swf"], "no such file"),
        (["simulate", "--estimator", "percentil"], "unknown estimator 'percentil'"),
        (["predict-eval", "--estimators", "percentile:q=5"], "q must be in [50, 100]; got 5.0"),
        (["evaluate", "--policies", "lifo"], "unknown policy 'lifo'; choose one of fcfs, wfp, sjf, ljf, dynp"),
        (
            ["predict", "--address", "127.0.0.1:1", "--user", "1", "--group", "1", "--request", "1", "--procs", "1"],
            "UNAVAILABLE",
        ),
    ],
)
def test_user_errors_are_one_line_and_exit_2(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert error.startswith("tsched: error: ") and message in error and error.count("\n") == 1


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_args: object) -> int:
        raise KeyError("a bug, not a user error")

    monkeypatch.setattr(simulation, "load_trace", broken)
    with pytest.raises(KeyError, match="a bug"):
        main(["simulate"])


def test_a_trace_with_no_requested_times_is_an_error_not_nan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "no-requests.swf"
    path.write_text("".join(f"{job} {job * 10} 0 50 4 -1 -1 4 -1 -1 1 1 1 -1 -1 -1 -1 -1\n" for job in range(1, 6)))
    evaluate = ["evaluate", "--in-process", "--out", str(tmp_path / "r"), "--traces"]
    for command in (["simulate", "--trace"], ["predict-eval", "--trace"], evaluate):
        assert main([*command, str(path)]) == 2
        assert "no job can be replayed (skipped: 5 no request)" in capsys.readouterr().err


def test_an_estimator_without_a_mode_runs_selective_and_the_mode_is_named(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "run.json"
    assert main(["simulate", "--trace", str(trace_file), "--estimator", "last2", "--json", str(summary)]) == 0
    assert "mode selective" in capsys.readouterr().out
    assert json.loads(summary.read_text())["mode"] == "selective"
    assert main(["simulate", "--trace", str(trace_file), "--json", str(summary)]) == 0
    assert json.loads(summary.read_text())["mode"] == "none"


def test_output_paths_are_checked_before_any_work(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_code:
        main(["simulate", "--trace", str(trace_file), "--json", "/no/such/folder/run.json"])
    assert exit_code.value.code == 2
    assert "the folder /no/such/folder does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_a_report_folder_is_never_overwritten_silently(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    arguments = ["evaluate", "--traces", str(trace_file), "--estimators", "request,last2", "--policies", "fcfs"]
    arguments += ["--modes", "selective", "--workers", "1", "--in-process", "--out", str(out)]
    assert main(arguments) == 2
    assert "holds files; choose another, or --force" in capsys.readouterr().err
    assert main([*arguments, "--force"]) == 0
    first = {path.name for path in out.iterdir()}
    stale = out / "improvement-old-run.png"  # a plot a previous report wrote and this one would not
    stale.write_bytes(b"png")
    (out / ".tsched-report").write_text((out / ".tsched-report").read_text() + stale.name + "\n")
    assert main(arguments) == 2  # a previous report: refused without --force
    assert main([*arguments, "--force"]) == 0
    assert {path.name for path in out.iterdir()} == first and (out / "notes.txt").read_text() == "mine"


def test_dask_missing_is_one_line_with_the_install_command(
    trace_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "distributed" else real(name, *a))
    arguments = ["evaluate", "--traces", str(trace_file), "--dask-scheduler", "tcp://127.0.0.1:8786"]
    assert main(arguments) == 2
    assert "pip install 'tsched[dask]'" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.startswith("tsched ")


def test_simulate_through_a_silent_service_fails_instead_of_reporting_the_request(
    trace_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing listens at the address: every job falls back to t_req, and the run says so instead of a result."""
    arguments = ["simulate", "--trace", str(trace_file), "--estimator", "last2", "--mode", "regular"]
    arguments += ["--address", f"127.0.0.1:{free_port()}"]
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert "3000 of 3000 jobs (100.0%) got t_req" in error and "--max-fallback-share" in error
    assert error.count("\n") == 1
    assert main([*arguments, "--max-fallback-share", "1"]) == 0
    assert "3000 job(s) (100.00%) got t_req" in capsys.readouterr().out


@pytest.fixture
def service() -> Iterator[str]:
    """A server on loopback, in this process: its address."""
    running, port = start_server("127.0.0.1:0", default_estimators=["last2"])
    yield f"127.0.0.1:{port}"
    running.stop(0).wait()


def test_observe_feeds_finished_jobs_from_a_file_or_standard_input(
    trace_file: Path, service: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before `observe`, no command could feed a service finished jobs: every prediction was a fallback."""
    first = read_swf(trace_file).jobs.iloc[0]
    ask = ["predict", "--address", service, "--namespace", "cluster", "--json", "-", "--user", str(first["user"])]
    ask += ["--group", str(first["group"]), "--request", "1:00:00", "--procs", "4", "--submit", "clock"]
    assert main(ask) == 0
    assert json.loads(capsys.readouterr().out)["fallback"] is True
    feed = ["observe", "--address", service, "--namespace", "cluster", "--trace"]
    assert main([*feed, str(trace_file)]) == 0
    assert "3000 finished job(s) learned, 0 already held; now 3000 held" in capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(trace_file.read_bytes())))
    assert main([*feed, "-"]) == 0
    assert "0 finished job(s) learned, 3000 already held" in capsys.readouterr().out
    assert main(ask) == 0
    assert json.loads(capsys.readouterr().out)["fallback"] is False
    assert main(ask[:-2]) == 2  # at this host's clock, decades past the trace's
    assert "not on Unix time (a trace fed on its own clock): ask with --submit clock" in capsys.readouterr().err
    assert main(["observe", "--address", service]) == 2
    assert "observe needs --trace" in capsys.readouterr().err


def test_namespaces_list_show_and_reset(trace_file: Path, service: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["namespaces", "list", "--address", service]) == 0
    assert capsys.readouterr().out == "no namespaces\n"
    assert main(["observe", "--address", service, "--namespace", "cluster", "--trace", str(trace_file)]) == 0
    capsys.readouterr()
    assert main(["namespaces", "list", "--address", service]) == 0
    listed = capsys.readouterr().out
    assert listed.startswith("cluster  completions 3000  clock ") and "estimators last2" in listed
    assert main(["namespaces", "show", "cluster", "--address", service]) == 0
    assert capsys.readouterr().out == listed
    assert main(["namespaces", "list", "--address", service, "--json", "-"]) == 0
    (info,) = json.loads(capsys.readouterr().out)
    assert info["name"] == "cluster" and info["completions"] == 3000 and info["estimators"] == ["last2"]
    assert main(["namespaces", "show", "cluster", "--address", service, "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["completions"] == 3000
    assert main(["status", "--address", service, "--namespace", "cluster", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["completions"] == 3000
    assert main(["namespaces", "reset", "cluster", "--address", service]) == 0
    assert capsys.readouterr().out == "namespace cluster: reset, 3000 completion(s) forgotten\n"
    for action in ("show", "reset"):
        assert main(["namespaces", action, "cluster", "--address", service]) == 2
        assert "does not exist" in capsys.readouterr().err


def test_a_simulation_through_the_service_logs_no_refusal(
    trace_file: Path, service: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every simulation used to log `ResetNamespace refused: NOT_FOUND` clearing its fresh namespace."""
    caplog.set_level(logging.INFO, logger="tsched.service")
    arguments = ["simulate", "--trace", str(trace_file), "--estimator", "last2", "--address", service]
    assert main(arguments) == 0
    assert "refused" not in caplog.text


def _parsers(parser: argparse.ArgumentParser, name: str = "tsched") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, child in action.choices.items():
                yield from _parsers(child, f"{name} {command}")


def test_every_option_of_every_command_has_a_description_and_shows_its_default() -> None:
    """`--help` showed almost no defaults: that `--mode` defaulted to none was hidden."""
    missing = []
    for name, parser in _parsers(build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            hidden = action.help == argparse.SUPPRESS  # an old spelling
            if hidden or isinstance(
                action, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction
            ):
                continue
            text = formatter._get_help_string(action) if action.help else ""
            if not text:
                missing.append(f"{name} {action.dest}: no description")
            elif action.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
                missing.append(f"{name} {action.dest}: default {action.default!r} not shown")
        assert "(default: None)" not in parser.format_help(), name
    assert not missing, "\n".join(missing)
    simulate = " ".join(dict(_parsers(build_parser()))["tsched simulate"].format_help().split())
    assert "(default: selective with an estimator, none with request)" in simulate


def test_namespaces_show_default_shows_the_namespace_predict_answered_from(
    service: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`namespaces show default` said it did not exist right after `predict` answered from it."""
    assert main(["predict", "--address", service, "--user", "1", "--request", "60", "--procs", "1"]) == 0
    capsys.readouterr()
    # The first ListEstimators of a server imports scikit-learn (SciPy): seconds on a loaded machine.
    show = ["namespaces", "show", "--address", service, "--timeout", "60"]
    assert main([*show, "default"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("default  completions 0  clock 0  estimators last2\n")
    assert "the server's default namespace" in shown and "nothing observed into it yet" in shown
    assert main([*show, "default", "--json", "-"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["default"] is True and info["estimators"] == ["last2"] and info["completions"] == 0
    assert main([*show, "elsewhere"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_predict_takes_users_groups_and_accounts_by_name(service: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`tsched predict --user alice` failed: users and groups had to be integers."""
    observe_by_name(service, "named", history(30))
    ask = ["predict", "--address", service, "--namespace", "named", "--request", "60", "--procs", "4", "--json", "-"]
    ask += ["--submit", "clock"]  # the history is on a trace's clock
    assert main([*ask, "--user", "user-1", "--account", "proj1"]) == 0
    assert json.loads(capsys.readouterr().out)["fallback"] is False
    assert main([*ask, "--user", "alice", "--group", "physics"]) == 0
    assert json.loads(capsys.readouterr().out)["fallback"] is True
    assert main([*ask, "--user", "alice", "--group", "3", "--account", "proj1"]) == 2
    assert "both given" in capsys.readouterr().err
