"""README's cheap examples, extracted and run as written: only where the traces live and the working folder differ.

A command is cheap when it is one of `CHEAP` and has none of `COSTLY`: evaluations, servers and trainings
take minutes and are measured where README quotes their times.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from predictor.service.server import start_server
from simulator.forecast import FORWARD_SIMULATION
from tsched.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
#: Where README's examples read the real traces from (relative to the repository).
TRACES_IN_README = "../shared/traces/"
CHEAP = ("trace info", "trace generate", "simulate", "predict-eval")
#: Options that make a cheap command costly, or need a running service.
COSTLY = ("--grid", "--predictor-address", "--address")
#: The address README's service examples use; they run against a server started for the test.
README_ADDRESS = "127.0.0.1:50051"


def readme_commands() -> list[str]:
    """Every `tsched` command line of README's shell blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split(" # ")[0].strip()
            if command.startswith("tsched "):
                commands.append(" ".join(command.split()))
    return commands


def readme_files() -> dict[str, str]:
    """The files README's shell blocks write with `cat > NAME <<'TAG'` (the queue state `tsched forecast` reads)."""
    blocks = "".join(re.findall(r"```sh\n(.*?)```", README.read_text(), re.S))
    return {name: text for name, tag, text in re.findall(r"cat > (\S+) <<'(\w+)'\n(.*?\n)\2\n", blocks, re.S)}


def cheap(command: str) -> bool:
    words = shlex.split(command)[1:]
    return any(" ".join(words).startswith(name) for name in CHEAP) and not set(words) & set(COSTLY)


CHEAP_COMMANDS = [command for command in readme_commands() if cheap(command)]
#: The examples that talk to a running service (all but starting it).
SERVICE_COMMANDS = [
    command
    for command in readme_commands()
    if f"address {README_ADDRESS}" in command and not command.startswith("tsched serve")
]


def test_readme_has_cheap_examples_of_every_kind() -> None:
    assert len(readme_commands()) > len(CHEAP_COMMANDS) >= 5
    for name in CHEAP:
        assert any(command.removeprefix("tsched ").startswith(name) for command in CHEAP_COMMANDS), name


def _as_here(command: str, request: pytest.FixtureRequest) -> list[str]:
    """The command's arguments, README's trace folder replaced by where the traces are (skipped without them)."""
    if TRACES_IN_README in command:
        traces: Path = request.getfixturevalue("traces_dir")
        command = command.replace(TRACES_IN_README, f"{traces}/")
    return shlex.split(command)[1:]


@pytest.mark.slow
@pytest.mark.parametrize("command", CHEAP_COMMANDS, ids=[command[:70] for command in CHEAP_COMMANDS])
def test_a_readme_example_runs_as_written(
    command: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arguments = _as_here(command, request)
    monkeypatch.chdir(tmp_path)  # outputs (synthetic.swf, out.json, ...) land here, not in the repository
    assert main(arguments) == 0


@pytest.mark.slow
def test_the_readme_service_examples_run_as_written(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tsched predict`, `observe`, `namespaces`, `forecast` and `simulate --predictor-address`, against a
    server of the test's own in place of README's 127.0.0.1:50051, with the files README writes first."""
    assert len(SERVICE_COMMANDS) >= 5
    monkeypatch.chdir(tmp_path)
    for name, text in readme_files().items():
        (tmp_path / name).write_text(text)
    running, port = start_server("127.0.0.1:0", start_forecaster=FORWARD_SIMULATION)  # as `tsched serve` starts it
    try:
        for command in SERVICE_COMMANDS:
            arguments = _as_here(command.replace(README_ADDRESS, f"127.0.0.1:{port}"), request)
            assert main(arguments) == 0, command
    finally:
        running.stop(0).wait()
