"""README's cheap examples, and those of the docs pages they moved to, extracted and run as written: only where
the traces live and the working folder differ. Every `tsched` command any page shows must parse.

A command is cheap when it is one of `CHEAP` and has none of `COSTLY`: evaluations, servers and trainings
take minutes and are measured where the docs quote their times.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from predictor.service.server import start_server
from simulator.forecast import FORWARD_SIMULATION
from tsched.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: README and the docs pages its examples moved to, in reading order: their shell blocks run as README's did.
PAGES = (README, *(ROOT / "docs" / name for name in ("usage.md", "evaluation.md", "tang.md", "service.md")))
#: Where the examples read the real traces from (relative to the repository).
TRACES_IN_README = "../shared/traces/"
CHEAP = ("trace info", "trace generate", "simulate", "predict-eval")
#: Options that make a cheap command costly, or need a running service.
COSTLY = ("--grid", "--predictor-address", "--address")
#: The address the service examples use; they run against a server started for the test.
README_ADDRESS = "127.0.0.1:50051"
#: The deadline a replay through the test's server gets where the example leaves the default (1 s, a live
#: cluster's): on a loaded, shared test machine that default measures the machine, not the example.
REPLAY_DEADLINE = ["--timeout", "600"]


def shell_blocks(pages: tuple[Path, ...] = PAGES) -> list[str]:
    """The ```sh blocks of `pages`, in order."""
    return [block for page in pages for block in re.findall(r"```sh\n(.*?)```", page.read_text(), re.S)]


def commands_in(blocks: list[str]) -> list[str]:
    """Every `tsched` command line of `blocks`, continuation lines joined, comments dropped."""
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split(" # ")[0].strip()
            if command.startswith("tsched "):
                commands.append(" ".join(command.split()))
    return commands


def readme_commands() -> list[str]:
    return commands_in(shell_blocks())


def readme_files() -> dict[str, str]:
    """The files the shell blocks write with `cat > NAME <<'TAG'` (the queue state `tsched forecast` reads)."""
    blocks = "".join(shell_blocks())
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


def every_documented_command() -> list[tuple[str, str]]:
    """(page, command) for each `tsched` line of every fenced block of README, CONTRIBUTING.md and the docs,
    but those built from shell variables (`$F`), which only a shell can expand."""
    pages = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = []
    for page in pages:
        blocks = re.findall(r"^```[a-z]*\n(.*?)^```", page.read_text(), re.S | re.M)
        found += [(page.name, command.rstrip(" &")) for command in commands_in(blocks) if "$" not in command]
    return found


def parses(command: str) -> bool:
    """Whether today's `tsched` parser takes `command` as written (argparse's complaint is swallowed)."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            build_parser().parse_args(shlex.split(command)[1:])
        except SystemExit:
            return False
    return True


def test_every_command_the_docs_show_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The costly examples too (evaluations, servers): an option renamed in the parser fails here, in
    seconds, not in the reader's shell."""
    monkeypatch.chdir(tmp_path)  # output files are checked against the working folder
    shown = every_documented_command()
    assert len(shown) > len(readme_commands())
    assert [(page, command) for page, command in shown if not parses(command)] == []
    assert not parses("tsched simulate --no-such-option")


def _as_here(command: str, request: pytest.FixtureRequest) -> list[str]:
    """The command's arguments, the docs' trace folder replaced by where the traces are (skipped without them)."""
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
    server of the test's own in place of the docs' 127.0.0.1:50051, with the files the docs write first
    (and a replay's deadline that does not hang on the machine's load: `REPLAY_DEADLINE`)."""
    assert len(SERVICE_COMMANDS) >= 5
    monkeypatch.chdir(tmp_path)
    for name, text in readme_files().items():
        (tmp_path / name).write_text(text)
    running, port = start_server("127.0.0.1:0", start_forecaster=FORWARD_SIMULATION)  # as `tsched serve` does
    try:
        for command in SERVICE_COMMANDS:
            arguments = _as_here(command.replace(README_ADDRESS, f"127.0.0.1:{port}"), request)
            if arguments[0] == "simulate" and "--timeout" not in arguments:
                arguments += REPLAY_DEADLINE
            assert main(arguments) == 0, command
    finally:
        running.stop(0).wait()
