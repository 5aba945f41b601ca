"""README's cheap examples, and those of the docs pages they moved to, extracted and run as written: only where
the traces live and the working folder differ. Every `tsched` command any page shows must parse.

A command is cheap when it is one of `CHEAP` and has none of `COSTLY`: evaluations, servers and trainings
take minutes and are measured where the docs quote their times.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from site_support import write_dump

from predictor.service.client import PredictorClient, PredictorError
from predictor.service.server import start_server
from tsched.cli import build_parser, main
from tsched.cli.serving import start_forecaster

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
#: The cluster docs/service.md's forecast on nodes (`tsched serve --cluster`) was run on: the live mixed run's.
DOCS_CLUSTER = ROOT / "tests" / "data" / "slurm-22.05-cluster" / "mixed" / "slurm.conf"
#: The deadline a replay through the test's server gets where the example leaves the default (1 s, a live
#: cluster's): on a loaded, shared test machine that default measures the machine, not the example.
REPLAY_DEADLINE = ["--timeout", "600"]


#: README's "at your site" walk-through: its own test runs it (below), on a cluster of its own.
SITE_SECTION = re.compile(r"<!-- --8<-- \[start:site\] -->.*?<!-- --8<-- \[end:site\] -->", re.S)


def shell_blocks(pages: tuple[Path, ...] = PAGES) -> list[str]:
    """The ```sh blocks of `pages` (but README's walk-through), in order."""
    texts = [SITE_SECTION.sub("", page.read_text()) for page in pages]
    return [block for text in texts for block in re.findall(r"```sh\n(.*?)```", text, re.S)]


def site_walkthrough() -> list[str]:
    """The command lines of README's "at your site" walk-through, continuation lines joined."""
    section = SITE_SECTION.search(README.read_text())
    assert section, "README has an 'at your site' walk-through"
    (block,) = re.findall(r"```sh\n(.*?)```", section.group(0), re.S)
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


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
    # as `tsched serve --cluster` does, with the cluster docs/service.md's forecast on nodes was run on
    running, port = start_server("127.0.0.1:0", start_forecaster=start_forecaster(str(DOCS_CLUSTER)))
    try:
        for command in SERVICE_COMMANDS:
            arguments = _as_here(command.replace(README_ADDRESS, f"127.0.0.1:{port}"), request)
            if arguments[0] == "simulate" and "--timeout" not in arguments:
                arguments += REPLAY_DEADLINE
            assert main(arguments) == 0, command
    finally:
        running.stop(0).wait()


def test_the_site_walkthrough_is_at_most_ten_commands_and_dumps_as_the_reader_reads() -> None:
    from simulator.workloads.sacct import SACCT_FIELDS

    lines = site_walkthrough()
    commands = [part for line in lines for part in line.split(" && ")]
    assert len(commands) <= 10, commands
    dump = shlex.split(lines[0])
    assert dump[0] == "TZ=UTC" and dump[1] == "sacct"
    assert f"--format={','.join(SACCT_FIELDS)}" in dump and "--parsable2" in dump and "--allocations" in dump


#: The spool jobcomp.sh appends to, as README and the script name it.
SPOOL = "/var/spool/tsched/completions"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_serving(address: str, server: subprocess.Popen[bytes]) -> None:
    with PredictorClient(address, timeout=10) as client:
        for _ in range(120):
            assert server.poll() is None, "tsched serve exited"
            try:
                if client.health() == "SERVING":
                    return
            except PredictorError:
                time.sleep(0.5)
    raise AssertionError(f"tsched serve at {address} did not come up")


def _wait_held(address: str, count: int) -> None:
    with PredictorClient(address, timeout=30) as client:
        for _ in range(120):
            if client.status("cluster").completions >= count:
                return
            time.sleep(0.5)
    raise AssertionError(f"the follower did not report to {address}")


@pytest.mark.slow
def test_the_site_walkthrough_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """README's "at your site", as written but for the dump (generated: no Slurm here; tests/test_slurm_seeding.py
    runs it on a real one), the copies into Slurm's folders, and the addresses and the spool (the test's own)."""
    monkeypatch.chdir(tmp_path)
    port, spool = _free_port(), tmp_path / "completions"
    address = f"127.0.0.1:{port}"
    started: list[subprocess.Popen[bytes]] = []
    try:
        for written in site_walkthrough():
            line = written.replace(README_ADDRESS, address).replace(SPOOL, str(spool))
            words = shlex.split(line.rstrip(" &"))
            if words[:2] == ["TZ=UTC", "sacct"]:
                write_dump(tmp_path / "site.sacct", jobs=1500, days=60)  # two months: 30 days to train on
            elif words[0] == "cp":
                continue  # Slurm's configuration folders
            elif line.endswith("&"):  # the server and the follower, as they run for good
                program = [sys.executable, "-m", "tsched.cli" if words[0] == "tsched" else "tsched.cli.jobcomp"]
                started.append(subprocess.Popen([*program, *words[1:]], stderr=subprocess.DEVNULL))
                if words[:2] == ["tsched", "serve"]:
                    _wait_serving(address, started[-1])
            else:
                assert words[0] == "tsched", line
                capsys.readouterr()
                assert main(words[1:]) == 0, line
                if words[1] == "predict":
                    assert "fallback false" in capsys.readouterr().out  # alice's history, by name, at now
        held = 1500
        _wait_held(address, held)
        finished = int(time.time()) - 5
        job = {"JOBID": "99001", "UID": "1073", "GID": "1073", "SUBMIT": str(finished - 600), "LIMIT": "01:00:00"}
        job |= {"START": str(finished - 590), "END": str(finished), "PROCS": "4", "JOBSTATE": "COMPLETED"}
        job |= {"USERNAME": "alice", "ACCOUNT": "physics"}
        script = (
            (ROOT / "deploy" / "slurm" / "jobcomp.sh").read_text().replace("/var/spool/tsched/completions", str(spool))
        )
        (tmp_path / "jobcomp.sh").write_text(script)
        subprocess.run(["bash", str(tmp_path / "jobcomp.sh")], env={**os.environ, **job}, check=True, timeout=30)
        _wait_held(address, held + 1)  # jobcomp.sh's line, reported by the follower
    finally:
        for process in reversed(started):
            process.terminate()
            process.wait(30)
