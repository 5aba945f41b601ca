"""Issue 27, a site's first week: Slurm's conventions where a site meets them, and the Python API as the CLI's
twin (the same defaults)."""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from kernel.durations import slurm_clock, slurm_duration
from kernel.errors import TraceError
from simulator.engine import SimulationConfig
from simulator.evaluation.plots import estimator_colors
from simulator.experiment import run_simulation
from simulator.workloads.formats import convert_trace, read_trace
from simulator.workloads.swf import read_swf
from tsched.cli import build_parser, main

SACCT = Path(__file__).parent / "data" / "slurm-22.05.sacct"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1440", 86_400),  # a bare number is minutes, as sbatch --time reads it
        ("30:15", 30 * 60 + 15),  # MM:SS
        ("2:00:00", 7200),  # HH:MM:SS
        ("36:00:00", 36 * 3600),  # hours past a day
        ("1-12", 36 * 3600),  # D-HH
        ("1-12:30", 36 * 3600 + 1800),  # D-HH:MM
        ("2-00:00:10", 2 * 86_400 + 10),  # D-HH:MM:SS
        ("UNLIMITED", None),
        ("infinite", None),
    ],
)
def test_slurm_durations_read_as_slurm_reads_them(text: str, seconds: int | None) -> None:
    assert slurm_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1h", "1.5", "1:2:3:4", "-5", "1-", "1-2:3:4:5", "a:b"])
def test_a_duration_slurm_would_refuse_is_refused_saying_the_syntax(text: str) -> None:
    with pytest.raises(ValueError, match=r"Slurm's syntax: MM, MM:SS, HH:MM:SS, D-HH"):
        slurm_duration(text)


def test_every_limit_option_takes_slurm_durations() -> None:
    """`--default-request 1440` was 1440 seconds; to a Slurm user it is a day."""
    parser = build_parser()
    assert parser.parse_args(["simulate", "--default-request", "1440"]).default_request == 86_400
    assert parser.parse_args(["evaluate", "--default-request", "1-0"]).default_request == 86_400
    predict = ["predict", "--address", "h:1", "--user", "1", "--procs", "1", "--request"]
    assert parser.parse_args([*predict, "90"]).request == 5400
    assert parser.parse_args([*predict, "1:30:00"]).request == 5400


@pytest.mark.parametrize("limit", ["UNLIMITED", "0", "10 minutes"])
def test_a_limit_that_bounds_nothing_is_a_usage_error(limit: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["simulate", "--default-request", limit])
    assert exit.value.code == 2
    assert "--default-request" in capsys.readouterr().err


def test_default_request_fills_the_unlimited_jobs_in_minutes(capsys: pytest.CaptureFixture[str]) -> None:
    with SACCT.open(newline="") as file:
        unlimited = [r for r in csv.DictReader(file, delimiter="|") if r["TimelimitRaw"] == "UNLIMITED"]
    started = {int(r["JobIDRaw"]) for r in unlimited if r["Start"] != "None"}
    assert started, "the captured log has jobs without a limit"
    assert main(["trace", "info", str(SACCT), "--default-request", "1440"]) == 0
    trace = read_trace(SACCT, default_request=86_400)
    assert set(trace.jobs.loc[trace.jobs["job_id"].isin(started), "t_req"]) == {86_400}


def test_the_machine_size_guessed_from_peak_use_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    """A sacct log has no machine size: its peak use was taken silently, a lower bound of the machine's size."""
    assert main(["simulate", "--trace", str(SACCT)]) == 0
    warning = capsys.readouterr().err
    assert "warning" in warning and "the machine's size is a guess, 16 processors" in warning
    assert "--machine-procs" in warning
    assert main(["simulate", "--trace", str(SACCT), "--machine-procs", "16"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_converted_log_keeps_its_size_a_guess(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cluster.swf"
    convert_trace(read_trace(SACCT), out)
    size = read_swf(out).machine_size()
    assert (size.procs, size.guessed) == (16, True)
    convert_trace(read_trace(SACCT), out, procs=32)
    assert not read_swf(out).machine_size().guessed
    assert main(["trace", "info", str(out)]) == 0
    assert "32 processors, from the header's MaxProcs" in capsys.readouterr().out


def test_a_run_dropping_more_than_one_percent_fails_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--procs 50` dropped 650 jobs and exited 0."""
    trace = read_trace(SACCT)
    larger = int(np.sum(trace.jobs["procs"].to_numpy() > 4))
    assert larger / len(trace.jobs) > 0.01
    run = ["simulate", "--trace", str(SACCT), "--machine-procs", "4"]
    assert main(run) == 2
    error = capsys.readouterr().err
    assert f"{larger} of {len(trace.jobs)} jobs" in error and "--max-dropped-share" in error
    assert main([*run, "--max-dropped-share", "1", "--json", "-"]) == 0
    assert f'larger than machine": {larger}' in capsys.readouterr().out
    assert main(["evaluate", "--traces", str(SACCT), "--machine-procs", "4", "--out", str(tmp_path / "report")]) == 2
    assert "--max-dropped-share" in capsys.readouterr().err


def test_run_simulation_defaults_to_the_mode_the_cli_uses() -> None:
    """`run_simulation(trace, SimulationConfig(procs=100), "percentile")` simulated the baseline (mode none) and
    labelled it percentile."""
    trace = read_trace(SACCT)
    summary, result = run_simulation(trace, SimulationConfig(procs=16), "percentile")
    assert summary.mode == result.config.mode == "selective"
    assert run_simulation(trace, SimulationConfig(procs=16), "request")[0].mode == "none"
    assert run_simulation(trace, SimulationConfig(16, mode="regular"), "percentile")[0].mode == "regular"
    cli = main(["simulate", "--trace", str(SACCT), "--machine-procs", "16", "--estimator", "percentile"])
    assert cli == 0


def _usual_dump(path: Path, separator: str = "|", header: bool = True) -> list[dict[str, str]]:
    """The captured log as a usual `sacct -P --format=JobID,...,Elapsed,Timelimit,...` prints it (no raw fields),
    array tasks left out (their JobID is not a number); returns the rows written."""
    with SACCT.open(newline="") as file:
        rows = [row for row in csv.DictReader(file, delimiter="|") if "_" not in row["JobID"]]
    columns = ["JobID", "User", "Account", "Submit", "Start", "End", "Elapsed", "Timelimit", "AllocCPUS", "State"]
    lines = [separator.join(columns)] if header else []
    for row in rows:
        limit = row["TimelimitRaw"]
        row["Timelimit"] = slurm_clock(int(limit) * 60) if limit.isdigit() else limit
        row["Elapsed"] = slurm_clock(int(row["ElapsedRaw"]))
        lines.append(separator.join(row[name] for name in columns))
    path.write_text("\n".join(lines) + "\n")
    return rows


def test_a_usual_sacct_dump_with_elapsed_and_timelimit_is_understood(tmp_path: Path) -> None:
    """A usual dump (JobID, Elapsed, Timelimit) was refused with "is this sacct --parsable2 output?"."""
    last = {int(row["JobID"]): row for row in _usual_dump(tmp_path / "usual.sacct")}  # a requeued job's last try
    jobs = read_trace(tmp_path / "usual.sacct").jobs.set_index("job_id")
    for job, row in last.items():
        if job in jobs.index:
            limit = row["TimelimitRaw"]
            assert jobs.loc[job, "run"] == int(row["ElapsedRaw"])
            assert jobs.loc[job, "t_req"] == (int(limit) * 60 if limit.isdigit() else -1)
    assert len(jobs) > 150


def test_an_array_task_without_jobidraw_names_the_field_to_add(tmp_path: Path) -> None:
    path = tmp_path / "arrays.sacct"
    path.write_text("JobID|Submit|Start|End|Timelimit|AllocCPUS|State\n" + "7_1|None|None|None|01:00|1|PENDING\n")
    with pytest.raises(
        TraceError, match=r"arrays\.sacct line 2, field JobID: '7_1' .* add JobIDRaw to sacct's --format"
    ):
        read_trace(path)


@pytest.mark.parametrize(
    ("form", "said"),
    [
        ("comma", r"line 1: sacct output with ',' between its fields \(--delimiter=,\)"),
        ("noheader", r"line 1: a sacct record where the header line should be \(sacct --noheader\?\)"),
        ("fixed", r"line 1: fixed-width sacct output \(without --parsable2\)"),
    ],
)
def test_sacct_output_in_another_form_is_named_with_the_command_to_run(
    tmp_path: Path, form: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Comma-separated, fixed-width and --noheader dumps got "starts neither an SWF trace ..." or a header
    complaint naming a record's values as fields."""
    path = tmp_path / f"{form}.sacct"
    if form == "fixed":
        path.write_text(
            "       JobID    JobName  Partition    Account  AllocCPUS      State ExitCode\n"
            "------------ ---------- ---------- ---------- ---------- ---------- --------\n"
            "1                  wrap      batch    physics          1  COMPLETED      0:0\n"
        )
    else:
        _usual_dump(path, "," if form == "comma" else "|", header=form != "noheader")
    for format_option in ([], ["--format", "sacct"]):
        assert main(["trace", "info", str(path), *format_option]) == 2
        error = capsys.readouterr().err
        assert f"{form}.sacct " in error and "sacct --allusers --parsable2" in error
        assert len(error.strip().splitlines()) == 1
        assert re.search(said, error), error


def test_the_report_reproduces_itself_zone_included_and_leads_with_what_holds(tmp_path: Path) -> None:
    """The reproduce line dropped --timezone (rerun as written, last2 gave other numbers) and the report recorded
    no zone; the summary headlined the noisiest metric without its spread."""
    out = tmp_path / "report"
    options = ["--timezone", "Europe/Berlin", "--default-request", "1440", "--machine-procs", "16"]
    run = ["evaluate", "--traces", str(SACCT), *options, "--estimators", "percentile:q=85,percentile:q=70"]
    run += ["--policies", "fcfs", "--backfills", "easy", "--modes", "selective", "--replicates", "2"]
    assert main([*run, "--in-process", "--workers", "1", "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    command = report.split("## Reproduce\n\n```\n", 1)[1].split("\n```", 1)[0]
    assert "--timezone Europe/Berlin" in command and "--default-request 1-00:00:00" in command
    assert "| Europe/Berlin |" in report  # the traces table records the zone
    summary = report.split("## Summary\n\n", 1)[1].split("\n## ", 1)[0]
    assert summary.startswith("The metrics in the order their improvements hold over the replicates")
    assert "standard deviation" in summary
    again = tmp_path / "again"
    words = shlex.split(command)[1:]
    words[words.index("--out") + 1] = str(again)
    assert main(words) == 0
    first, second = (pd.read_csv(folder / "results.csv") for folder in (out, again))
    pdt.assert_frame_equal(first, second)


def test_every_estimator_of_a_report_has_a_colour_of_its_own() -> None:
    """percentile:q=85 and q=70 (both in the default plan) shared one colour in every plot."""
    from simulator.evaluation.plan import DEFAULT_ESTIMATORS

    assert len(set(estimator_colors(DEFAULT_ESTIMATORS).values())) == len(DEFAULT_ESTIMATORS)
    many = [f"percentile:q={q}" for q in range(50, 66)]
    colours = estimator_colors(many)
    assert len(set(colours.values())) == len(many) and colours == estimator_colors(reversed(many))


@pytest.mark.parametrize(
    ("until", "said"),
    [
        (["--until", "2020-01-01"], "--until 2020-01-01T00:00:00+00:00 is before any job of the trace ended"),
        (["--until", "2030-01-01"], "is after the last submission, no job is held out to score the model on"),
        ([], "the default --until, 30 days before the last submission, leaves nothing to train on"),
    ],
)
def test_train_refuses_an_until_that_leaves_nothing_to_train_or_score(
    until: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--until outside the trace gave a traceback or a misleading count; after the last job it wrote a model
    with `held out: {"jobs": 0}` without a word."""
    out = tmp_path / "model"
    assert (
        main(["train", "--trace", str(SACCT), "--estimator", "lgbm-quantile:min_train=50", *until, "--out", str(out)])
        == 2
    )
    error = capsys.readouterr().err
    assert said in error and "the trace's jobs were submitted up to 2026-11-24T07:1" in error
    assert not out.exists()


def test_train_without_a_trace_says_it_trains_on_the_synthetic_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "--until", "1990-01-01", "--out", str(tmp_path / "model")]) == 2
    assert "no --trace, so training on the built-in synthetic workload" in capsys.readouterr().err


def test_predict_eval_says_when_a_model_never_trained(capsys: pytest.CaptureFixture[str]) -> None:
    """On a small log lgbm-quantile silently equalled `request`: it never trains."""
    assert main(["predict-eval", "--trace", str(SACCT), "--estimators", "request,lgbm-quantile,last2"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith("note: lgbm-quantile answered all 258 jobs with their request")


def test_simulate_says_when_the_estimator_never_predicted(capsys: pytest.CaptureFixture[str]) -> None:
    run = ["simulate", "--trace", str(SACCT), "--machine-procs", "16", "--estimator"]
    assert main([*run, "lgbm-quantile"]) == 0
    assert "every estimate was the request: lgbm-quantile never predicted on this trace" in capsys.readouterr().out
    assert main([*run, "last2"]) == 0
    assert "never predicted" not in capsys.readouterr().out
