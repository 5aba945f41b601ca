"""The command line's spelling: every command's `--help`; every old spelling still working for one release, hidden,
with one deprecation line naming the new one; `--json OUT|-` meaning the same everywhere; and commands whose
options are mounted only when chosen."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tsched.cli import build_parser, main
from tsched.cli.options import json_target, output_file
from tsched.cli.spec import DeprecatedAlias

#: Every renamed option (command: old -> new), as the coordinator's docs and scripts are told.
RENAMED = {
    "simulate": {
        "--procs": "--machine-procs",
        "--predictor-address": "--address",
        "--predictor-namespace": "--namespace",
        "--predictor-timeout": "--timeout",
        "--size": "--size-unit",
    },
    "trace info": {"--size": "--size-unit"},
    "trace convert": {"--procs": "--machine-procs", "--size": "--size-unit"},
    "trace generate": {"--procs": "--machine-procs"},
    "evaluate": {
        "--trace": "--traces",
        "--procs": "--machine-procs",
        "--backfill": "--backfills",
        "--backfill-order": "--backfill-orders",
        "--load-factor": "--load-factors",
        "--size": "--size-unit",
    },
    "wait-eval": {"--procs": "--machine-procs", "--forecaster": "--forecasters", "--size": "--size-unit"},
    "predict-eval": {"--estimator": "--estimators", "--size": "--size-unit"},
    "train": {"--size": "--size-unit"},
    "serve": {"--estimator": "--estimators"},
    "forecast": {"--state": "--queue-state"},
    "observe": {"--size": "--size-unit"},
}


def leaves(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command that runs (`trace info`, not `trace`), with its parser."""
    commands = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not commands:
        yield " ".join(words), parser
    for action in commands:
        for name, child in action.choices.items():
            yield from leaves(child, (*words, name))


LEAVES = dict(leaves(build_parser()))


def aliases(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        old: action
        for action in parser._actions
        if isinstance(action, DeprecatedAlias)
        for old in action.option_strings
    }


def test_the_renamed_list_is_what_the_parser_holds() -> None:
    held = {
        command: {old: action.target.option_strings[0] for old, action in aliases(parser).items()}
        for command, parser in LEAVES.items()
    }
    assert {command: renamed for command, renamed in held.items() if renamed} == RENAMED


@pytest.mark.parametrize("command", ["", "trace", "namespaces", *LEAVES])
def test_every_command_has_help_without_its_old_spellings(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_code:
        main([*command.split(), "--help"])
    assert exit_code.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: tsched {command}".rstrip())
    for old in RENAMED.get(command, {}):
        assert not re.search(rf"(?<![\w-]){old}(?![\w-])", text), f"{command} --help shows {old}"


def _sample(action: argparse.Action, folder: Path) -> list[str]:
    """A value the option takes."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(next(iter(action.choices)))]
    return [str(folder / "out") if action.type in (output_file, json_target) else "7"]


def _required(parser: argparse.ArgumentParser, folder: Path, but: str = "") -> list[str]:
    """The arguments a command cannot run without, `but` one, with sample values."""
    words = []
    groups = [group._group_actions for group in parser._mutually_exclusive_groups if group.required]
    required = {action for actions in groups for action in actions if action.help != argparse.SUPPRESS}
    for action in parser._actions:
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction) and action.nargs != "?":
            words.append("x")
        elif (action.required or action in required) and but not in action.option_strings:
            words += [action.option_strings[0], *_sample(action, folder)]
    return words


CASES = [(command, old, new) for command, renamed in RENAMED.items() for old, new in renamed.items()]


@pytest.mark.parametrize(("command", "old", "new"), CASES, ids=[f"{c} {o}" for c, o, _ in CASES])
def test_an_old_spelling_works_and_says_once_what_replaced_it(
    command: str, old: str, new: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = LEAVES[command]
    value = _sample(aliases(parser)[old], tmp_path)
    base = [*command.split(), *_required(parser, tmp_path, but=new)]  # a required option given the old way too
    parse = build_parser(lazy=True).parse_args
    as_new = vars(parse([*base, new, *value]))
    assert capsys.readouterr().err == ""
    as_old = vars(parse([*base, old, *value]))
    assert as_old.pop("deprecated spellings warned") == {old}
    assert as_old == as_new
    parse([*base, old, *value, old, *value])
    warning = f"tsched {command}: warning: {old} is deprecated and goes in the next release: use {new}\n"
    assert capsys.readouterr().err == 2 * warning  # one line per parse, however often the old spelling is given


def test_a_list_option_takes_values_after_it_and_repeated_and_replaces_its_default() -> None:
    parse = build_parser(lazy=True).parse_args
    assert parse(["evaluate"]).backfills == ("easy",)
    assert parse(["evaluate", "--backfills", "none", "conservative", "--backfills", "easy"]).backfills == [
        "none",
        "conservative",
        "easy",
    ]
    assert parse(["evaluate", "--traces", "a.swf", "--trace", "b.swf"]).traces == ["a.swf", "b.swf"]


@pytest.mark.parametrize("command", ["predict", "forecast", "status", "namespaces list"])
def test_json_as_a_flag_still_means_standard_output(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json` was a flag of these commands; it is now where to write, and bare it means `-`."""
    words, required = command.split(), _required(LEAVES[command], tmp_path)
    parse = build_parser(lazy=True).parse_args
    assert parse([*words, *required, "--json", "-"]).json == "-"
    assert capsys.readouterr().err == ""
    assert parse([*words, *required, "--json"]).json == "-"
    assert parse([*words, "--json", *required]).json == "-"  # followed by an option, not a value
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "warning: --json without a value is deprecated" in err and "use --json -" in err
    assert parse([*words, *required, "--json", str(tmp_path / "out.json")]).json == str(tmp_path / "out.json")


@pytest.fixture(scope="module")
def small_swf(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("spelling") / "small.swf"
    assert main(["trace", "generate", "--jobs", "500", "--machine-procs", "32", "--out", str(path)]) == 0
    return str(path)


def test_json_dash_prints_only_the_json_and_a_file_gets_the_same(
    small_swf: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    arguments = ["simulate", "--trace", small_swf, "--estimator", "last2"]
    assert main([*arguments, "--json", "-"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert main([*arguments, "--json", str(tmp_path / "run.json")]) == 0
    assert capsys.readouterr().out.startswith("trace ")
    assert printed == json.loads((tmp_path / "run.json").read_text()) and printed["estimator"] == "last2"
    assert main(["trace", "info", small_swf, "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == 500


def test_machine_and_job_sizes_are_named_apart() -> None:
    """`--procs` was the machine's size in simulate and a job's in predict."""
    for command in ("simulate", "evaluate", "wait-eval", "trace convert", "trace generate"):
        assert "--machine-procs" in LEAVES[command]._option_string_actions, command
    assert "the job's size" in (LEAVES["predict"]._option_string_actions["--procs"].help or "")
    assert "--machine-procs" not in LEAVES["predict"]._option_string_actions


def test_every_command_reaches_the_service_with_the_same_options() -> None:
    spelled = ("--address", "--timeout", "--token-file", "--tls", "--tls-ca", "--tls-cert", "--tls-key")
    for command in ("simulate", "predict", "forecast", "status", "observe", "namespaces list", "pbs-report"):
        assert set(spelled) <= set(LEAVES[command]._option_string_actions), command


def test_choosing_a_command_mounts_only_its_options() -> None:
    """`tsched --version`, `--help` and a `predict` from a submit hook import none of the simulator."""
    probe = (
        "import sys; from tsched.cli import build_parser; parser = build_parser(lazy=True); "
        "heavy = ('pandas', 'numpy', 'grpc', 'simulator.engine'); print([m for m in heavy if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"
    probe = probe.replace(
        "build_parser(lazy=True)",
        "build_parser(lazy=True).parse_args('predict --address h:1 --user 1 --request 1 --procs 1'.split())",
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "pandas" not in done.stdout and "simulator.engine" not in done.stdout
