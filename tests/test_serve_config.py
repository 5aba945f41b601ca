"""`tsched serve --config FILE`: a TOML file of settings under the flags, refused key by key when wrong, and the
effective configuration printed (`--print-config`) and logged at start."""

from __future__ import annotations

import signal
import tomllib
from pathlib import Path

import pytest
from test_cli import free_port, serve_in_subprocess

from predictor.service.client import PredictorClient
from predictor.service.limits import Limits
from tsched.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "tsched-serve.toml"


def effective(capsys: pytest.CaptureFixture[str], *arguments: str) -> dict[str, object]:
    """What `tsched serve ARGUMENTS --print-config` prints, read back as TOML."""
    assert main(["serve", *arguments, "--print-config"]) == 0
    return tomllib.loads(capsys.readouterr().out)


def refused(capsys: pytest.CaptureFixture[str], path: Path, text: str) -> str:
    """The one-line error `tsched serve --config` gives for a file holding `text`."""
    path.write_text(text)
    assert main(["serve", "--config", str(path), "--print-config"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"tsched: error: {path}") and error.count("\n") == 1
    return error


def test_the_example_deployment_file_loads_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    written = tomllib.loads(EXAMPLE.read_text())
    config = effective(capsys, "--config", str(EXAMPLE))
    assert {key: config[key] for key in written if key not in ("security", "limits")} == {
        key: value for key, value in written.items() if key not in ("security", "limits")
    }
    for table in ("security", "limits"):
        assert {key: config[table][key] for key in written[table]} == written[table]  # type: ignore[index]


def test_the_printed_configuration_is_a_file_that_reads_back_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = effective(capsys, "--config", str(EXAMPLE), "--max-calls", "4", "--socket-mode", "660")
    again = tmp_path / "again.toml"
    assert main(["serve", "--config", str(EXAMPLE), "--max-calls", "4", "--socket-mode", "660", "--print-config"]) == 0
    again.write_text(capsys.readouterr().out)
    assert effective(capsys, "--config", str(again)) == first
    assert first["security"]["socket-mode"] == 0o660  # type: ignore[index]


def test_without_a_file_the_settings_are_the_servers_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    config = effective(capsys)
    assert config["listen"] == "127.0.0.1:50051" and config["estimators"] == ["percentile"] and "state" not in config
    assert config["limits"]["max-calls"] == Limits().max_calls  # type: ignore[index]
    assert config["limits"]["estimator-limit"] == list(Limits().estimator_limit)  # type: ignore[index]


def test_flags_override_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "serve.toml"
    path.write_text('listen = "127.0.0.1:6000"\nestimators = ["last2"]\n[limits]\nmax-calls = 8\nmax-streams = 9\n')
    config = effective(capsys, "--config", str(path), "--max-calls", "4", "--estimators", "mean-std", "request")
    assert config["listen"] == "127.0.0.1:6000" and config["estimators"] == ["mean-std", "request"]
    assert config["limits"]["max-calls"] == 4 and config["limits"]["max-streams"] == 9  # type: ignore[index]
    assert main(["serve", "--config", str(path), "--max-calls", "4", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert "max-calls = 4  # --max-calls" in printed and "max-streams = 9  # the file" in printed


def test_relative_paths_in_the_file_are_read_from_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "etc" / "serve.toml"
    path.parent.mkdir()
    path.write_text('state = "state.sqlite"\n[security]\ntokens = "/abs/tokens"\n')
    config = effective(capsys, "--config", str(path))
    assert config["state"] == str(path.parent / "state.sqlite")
    assert config["security"]["tokens"] == "/abs/tokens"  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[limits]\nmax-callz = 3\n", "[limits] max-callz: unknown key (did you mean max-calls?)"),
        ("max-calls = 3\n", "max-calls: unknown key (did you mean max-calls in [limits]?)"),
        ("[security]\nmax_calls = 3\n", "[security] max_calls: unknown key (did you mean max-calls in [limits]?)"),
        ("[limit]\nmax-calls = 3\n", "unknown table [limit] (tables: security, limits)"),
        ("[limits]\nmax-calls = 0\n", "[limits] max-calls: --max-calls must be a positive number, not 0"),
        ('[limits]\nmax-calls = "many"\n', "[limits] max-calls: expected a whole number, not 'many'"),
        ("[limits]\nkeepalive = true\n", "[limits] keepalive: expected a number, not True"),
        ('[limits]\nhistory-window = "forever"\n', "[limits] history-window: --history-window"),
        ('[limits]\nestimator-limit = "lgbm-quantile:trees=9"\n', "expected a list of strings"),
        ("[security]\ninsecure = 1\n", "[security] insecure: expected true or false, not 1"),
        ('[security]\nsocket-mode = "rw"\n', "[security] socket-mode: expected octal permissions"),
        ("listen = 50051\n", "listen: expected a string, not 50051"),
        ('listen = "127.0.0.1:1\n', "not TOML: "),
    ],
)
def test_a_bad_file_is_refused_naming_it_and_the_key(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in refused(capsys, tmp_path / "serve.toml", text)


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--config", str(tmp_path / "nowhere.toml")]) == 2
    assert (
        capsys.readouterr().err
        == f"tsched: error: --config {tmp_path / 'nowhere.toml'}: cannot read it: No such file or directory\n"
    )


def test_a_server_started_from_a_file_serves_it_and_logs_what_it_runs_with(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    path = tmp_path / "serve.toml"
    path.write_text('estimators = ["last2"]\nstate = "state.sqlite"\n[limits]\nmax-calls = 3\n')
    server = serve_in_subprocess(address, "--config", str(path), "--max-streams", "5")
    try:
        with PredictorClient(address, timeout=60.0) as client:
            assert client.predict(user=1, group=1, t_req=600, procs=4).estimator == "last2"
    finally:
        server.send_signal(signal.SIGTERM)
        _, log = server.communicate(timeout=120)
    assert server.returncode == 0
    assert f"effective configuration (flags over {path} over the defaults)" in log
    assert 'estimators = ["last2"]  # the file' in log and "max-streams = 5  # --max-streams" in log
    assert f'listen = "{address}"  # --listen' in log and "max-calls = 3  # the file" in log
    assert (tmp_path / "state.sqlite").exists()
