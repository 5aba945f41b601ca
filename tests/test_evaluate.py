"""`tsched evaluate`: task building, the report agreeing with results.csv, identical results on every backend."""

from __future__ import annotations

import dataclasses
import io
import pickle
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernel.errors import SpecError, UsageError
from simulator.evaluation.columns import METRIC_DEFINITIONS
from simulator.evaluation.execution import Progress, run_evaluation, run_task, service_host
from simulator.evaluation.plan import (
    Backend,
    EvaluationPlan,
    QualityTask,
    SimulationTask,
    TaskError,
    TraceInput,
    build_tasks,
    months_with_jobs,
    split_choices,
    split_policies,
    split_specs,
    task_costs,
)
from simulator.evaluation.plots import estimator_color, estimator_colors, improvement_plot, monthly_plot, pareto_front
from simulator.evaluation.report import WEIGHTED_WAIT_SWINGS, WHOLE_VS_MONTHLY
from simulator.evaluation.tables import improvement, monthly_averages
from simulator.workloads.swf import write_swf
from simulator.workloads.synthetic import generate_workload
from tsched.cli import main

#: 600 jobs spread over three calendar months (a low load stretches the arrivals).
SOURCE = "generate_workload(jobs=600, procs=64, load=0.2, seed=3)"
PLAN = EvaluationPlan(
    estimators=("request", "percentile:q=85", "last2"),
    policies=("wfp",),
    backfills=("easy",),
    modes=("regular", "selective"),
)


def small_input() -> TraceInput:
    return TraceInput("small", generate_workload(jobs=600, procs=64, load=0.2, seed=3), SOURCE)


def evaluate_into(folder: Path, plan: EvaluationPlan = PLAN, backend: Backend | None = None) -> Path:
    backend = backend or Backend(in_process=True)
    outcome = run_evaluation([small_input()], plan, folder, backend, show_progress=False)
    assert outcome.fallbacks == 0
    return outcome.report.parent


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole-trace evaluation, in-process on one worker: what every other backend must reproduce."""
    return evaluate_into(tmp_path_factory.mktemp("reference"))


@pytest.fixture(scope="module")
def monthly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return evaluate_into(tmp_path_factory.mktemp("monthly"), EvaluationPlan(**{**PLAN.__dict__, "monthly": True}))


# --- parsing the command line ----------------------------------------------------------------


def test_spec_lists_keep_each_specs_own_parameters():
    assert split_specs(["request,percentile:q=95,window=60d,last2", "mean-std:k=2"]) == [
        "request",
        "percentile:q=95,window=60d",
        "last2",
        "mean-std:k=2",
    ]
    assert split_specs(["last2,last2"]) == ["last2"]


@pytest.mark.parametrize(
    ("text", "message"), [("q=95,request", "follows no estimator"), ("request,,last2", "empty item")]
)
def test_bad_spec_lists_are_refused(text, message):
    with pytest.raises(SpecError, match=message):
        split_specs([text])


def test_choices_are_checked_against_the_allowed_names():
    assert split_choices("wfp, fcfs,wfp", ("fcfs", "wfp", "sjf"), "--policies") == ("wfp", "fcfs")
    with pytest.raises(ValueError, match=r"--modes 'none'.*regular, selective"):
        split_choices("none", ("regular", "selective"), "--modes")


def test_unknown_estimator_fails_before_anything_runs(tmp_path, capsys):
    code = main(["evaluate", "--estimators", "request,nosuch", "--in-process", "--out", str(tmp_path / "r")])
    assert code == 2
    assert "unknown estimator 'nosuch'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


# --- tasks -----------------------------------------------------------------------------------


def test_tasks_have_one_baseline_per_period_policy_and_backfilling():
    entry = small_input()
    plan = EvaluationPlan(
        estimators=("request", "last2", "mean-std"),
        policies=("wfp", "fcfs"),
        backfills=("easy",),
        modes=("regular", "selective"),
        monthly=True,
    )
    simulations = [task for task in build_tasks([entry], plan) if isinstance(task, SimulationTask)]
    months = months_with_jobs(entry.trace)
    assert len(months) == 3
    assert len(simulations) == len(months) * 2 * (1 + 2 * 2)
    baselines = [task for task in simulations if task.is_baseline]
    assert {(task.month, task.policy) for task in baselines} == {(m, p) for m in months for p in ("wfp", "fcfs")}
    assert not [task for task in simulations if task.estimator == "request" and not task.is_baseline]


@pytest.mark.slow
def test_orders_corrections_and_loads_are_axes_with_a_baseline_per_scheduler(tmp_path: Path) -> None:
    plan = EvaluationPlan(
        estimators=("request", "last2"),
        policies=("fcfs",),
        backfills=("easy",),
        modes=("regular", "selective"),
        backfill_orders=("queue", "sjf"),
        corrections=("request", "tsafrir"),
        load_factors=(1.0, 1.5),
    )
    simulations = [task for task in build_tasks([small_input()], plan) if isinstance(task, SimulationTask)]
    # per load x order: the baseline, last2 regular with each correction, last2 selective once
    assert len(simulations) == 2 * 2 * (1 + 2 + 1)
    assert {(t.load_factor, t.backfill_order) for t in simulations if t.is_baseline} == {
        (1.0, "queue"),
        (1.0, "sjf"),
        (1.5, "queue"),
        (1.5, "sjf"),
    }
    assert {t.correction for t in simulations if t.mode == "selective"} == {"request"}
    evaluate_into(tmp_path, plan)
    results = pd.read_csv(tmp_path / "results.csv")
    sjf = results[(results["backfill_order"] == "sjf") & (results["load_factor"] == 1.5)]
    queue_baseline = results[
        (results["backfill_order"] == "queue") & (results["load_factor"] == 1.5) & (results["mode"] == "none")
    ]
    own = sjf[sjf["mode"] == "none"]["avg_wait"].iloc[0]
    reference = queue_baseline["avg_wait"].iloc[0]
    row = sjf[sjf["mode"] == "regular"].iloc[0]
    assert row["improvement_avg_wait"] == pytest.approx((own - row["avg_wait"]) / own)
    assert row["improvement_vs_queue_avg_wait"] == pytest.approx((reference - row["avg_wait"]) / reference)
    assert set(results["run"]) >= {"last2 (sjf order) [tsafrir]", "last2 [request]", "request (sjf order)"}


def test_a_baseline_that_hardly_queues_is_flagged(tmp_path: Path) -> None:
    quiet = TraceInput("quiet", generate_workload(jobs=300, procs=512, load=0.05, seed=1), "generated, load 0.05")
    plan = EvaluationPlan(estimators=("last2",), policies=("fcfs",), modes=("selective",))
    run_evaluation([quiet], plan, tmp_path, Backend(in_process=True), show_progress=False)
    assert pd.read_csv(tmp_path / "results.csv")["little_queueing"].all()
    assert "**Little queueing:**" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(
    "scheduler", [None, "inproc://10.1.2.3/77/1", "tcp://127.0.0.1:8786", "localhost", "tcp://[::1]:8786", "[::1]"]
)
def test_the_service_stays_on_loopback_for_a_local_scheduler(scheduler):
    assert service_host(scheduler) == "127.0.0.1"


def test_improvement_is_relative_to_the_baseline_and_undefined_on_zero():
    values = improvement(np.array([100.0, 0.0, 50.0]), np.array([80.0, 0.0, 75.0]))
    assert values[0] == pytest.approx(0.2)
    assert np.isnan(values[1])
    assert values[2] == pytest.approx(-0.5)


def test_pareto_front_keeps_only_undominated_points():
    under = np.array([0.0, 5.0, 10.0, 20.0])
    accuracy = np.array([0.3, 0.25, 0.5, 0.45])
    assert pareto_front(under, accuracy).tolist() == [0, 2]


def test_progress_reports_done_elapsed_and_time_left():
    stream = io.StringIO()
    progress = Progress([1.0] * 4, stream)
    progress.advance(0)
    progress.close()
    assert "\r" in stream.getvalue()
    assert re.search(r"1/4 runs  elapsed \d+:\d\d  left \d+:\d\d", stream.getvalue())


# --- the report ------------------------------------------------------------------------------


def test_report_files_are_present_and_agree_with_results_csv(reference):
    report = (reference / "report.md").read_text()
    results = pd.read_csv(reference / "results.csv", keep_default_na=False, na_values=[""])
    assert len(results) == 1 + 2 * 2
    for image in re.findall(r"\]\(([^)]+\.png)\)", report):
        assert (reference / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"frontier-small.png", "accuracy-cdf-small.png", "improvement-small-wfp-easy.png"} <= {
        path.name for path in reference.glob("*.png")
    }
    baseline = results[(results["estimator"] == "request") & (results["mode"] == "none")].iloc[0]
    for row in results.itertuples():
        expected = (baseline.avg_wait - row.avg_wait) / baseline.avg_wait
        assert row.improvement_avg_wait == pytest.approx(expected)
        line = f"| {row.estimator} | {row.mode} | {row.avg_wait / 60:.1f} | {row.avg_slowdown:.2f} |"
        assert line in report
    quality = pd.read_csv(reference / "quality.csv")
    assert quality["estimator"].tolist() == ["request", "percentile:q=85", "last2"]
    for row in quality.itertuples():
        assert f"| {row.estimator} | {row.accuracy_mean:.3f} | {row.accuracy_median:.3f} |" in report
    assert "tsched evaluate --estimators request,percentile:q=85,last2 --policies wfp" in report
    assert SOURCE in report


@pytest.mark.slow
def test_two_joblib_workers_give_identical_results(reference, tmp_path):
    folder = evaluate_into(tmp_path, backend=Backend(workers=2, in_process=True))
    assert (folder / "results.csv").read_bytes() == (reference / "results.csv").read_bytes()


@pytest.mark.slow
def test_the_service_path_gives_the_in_process_results(reference, tmp_path):
    folder = evaluate_into(tmp_path, backend=Backend(workers=1))
    assert (folder / "results.csv").read_bytes() == (reference / "results.csv").read_bytes()
    assert "through the gRPC service" in (folder / "report.md").read_text()


@pytest.mark.slow
def test_a_dask_cluster_gives_identical_results(reference, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        folder = evaluate_into(tmp_path, backend=Backend(dask_scheduler=cluster.scheduler_address, in_process=True))
    assert (folder / "results.csv").read_bytes() == (reference / "results.csv").read_bytes()


def test_monthly_split_simulates_each_month_against_its_own_baseline(monthly):
    entry = small_input()
    results = pd.read_csv(monthly / "results.csv", keep_default_na=False, na_values=[""])
    months = months_with_jobs(entry.trace)
    assert sorted(results["month"].unique()) == months
    baselines = results[(results["estimator"] == "request") & (results["mode"] == "none")]
    assert baselines["jobs"].sum() == len(entry.trace.jobs)  # every job is simulated in exactly one month
    table = pd.read_csv(monthly / "monthly.csv")
    assert len(table) == len(results)
    assert (table.loc[table["mode"] == "none", "avg_wait_vs_baseline"].dropna() == 1.0).all()
    report = (monthly / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("| run | months |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    for (estimator, mode), runs in table[table["mode"] != "none"].groupby(["estimator", "mode"]):
        row = next(line for line in report.splitlines() if line.startswith(f"| {estimator} | {len(months)} |"))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        mean = runs["improvement_avg_wait"].mean()
        assert cells[columns.index(f"{mode} wait")].startswith(f"{mean:+.1%}")
    assert (monthly / "monthly-small-wfp-easy-selective.png").exists()


def test_the_command_evaluates_a_trace_file_and_names_the_report(tmp_path, capsys):
    trace_file = tmp_path / "tiny.swf"
    write_swf(generate_workload(jobs=300, procs=32, load=0.5, seed=5), trace_file)
    out = tmp_path / "report"
    code = main(
        [
            "evaluate",
            "--trace",
            str(trace_file),
            "--estimators",
            "request,percentile:q=85",
            "--policies",
            "fcfs",
            "--modes",
            "selective",
            "--workers",
            "1",
            "--in-process",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert captured.out.strip().endswith(f"report: {out / 'report.md'}")
    assert "4/4 runs" in captured.err
    results = pd.read_csv(out / "results.csv", keep_default_na=False, na_values=[""])
    assert results[["estimator", "mode"]].values.tolist() == [["request", "none"], ["percentile:q=85", "selective"]]
    assert "tiny" in set(results["trace"])


def test_a_failing_task_is_named_and_crosses_process_boundaries():
    with pytest.raises(TaskError, match="prediction quality of nosuch on small: SpecError") as caught:
        run_task(QualityTask(0, "small", "nosuch"), small_input().trace, None, "test")
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)


# --- the report explains itself; the plots say what they show ---------------------------------


def test_the_report_summarises_defines_and_gives_units_for_every_column(reference, monthly):
    """No summary, no definitions, no units, no spread: the report did not explain itself."""
    for folder in (reference, monthly):
        report = (folder / "report.md").read_text()
        assert "## Summary" in report and re.search(r"\*\*small\.\*\* (wait|slowdown|weighted wait): ", report)
        assert "The metrics in the order their improvements hold over the months" in report or (
            "One simulation per run: no spread" in report
        )  # the metrics that hold first (issue 27)
        assert "## Definitions" in report and WEIGHTED_WAIT_SWINGS in report
        for metric, (unit, better, _) in METRIC_DEFINITIONS.items():
            assert f"| `{metric}` | {unit} | {better} |" in report
        dictionary = pd.read_csv(folder / "columns.csv", keep_default_na=False)
        assert (dictionary[["unit", "better", "meaning"]] != "").all().all()
        for name in ("results.csv", "quality.csv", "monthly.csv"):
            if (folder / name).exists():
                columns = pd.read_csv(folder / name, nrows=0).columns.tolist()
                assert dictionary.loc[dictionary["file"] == name, "column"].tolist() == columns
    report = (monthly / "report.md").read_text()
    assert WHOLE_VS_MONTHLY in report
    table = pd.read_csv(monthly / "monthly.csv")
    runs = table[(table["estimator"] == "last2") & (table["mode"] == "selective")]
    low, high = runs["improvement_avg_wait"].quantile([0.25, 0.75])
    assert f"[{low:+.1%} to {high:+.1%}]" in report  # the spread beside the monthly mean


def test_colours_follow_the_estimator_not_its_position():
    forward = estimator_colors(PLAN.quality_estimators)
    backward = estimator_colors(reversed(PLAN.quality_estimators))
    assert forward == backward and len(set(forward.values())) == len(forward)
    assert forward["request"] == estimator_color("request") == "#444444"


def test_every_panel_says_which_way_is_better_and_weighted_wait_has_its_own_axis(monthly, tmp_path):
    """Panels mixed directions unannounced, weighted wait squashed the other bars, colours followed position."""
    table = pd.read_csv(monthly / "monthly.csv", keep_default_na=False, na_values=[""])
    averages = monthly_averages(table)
    colors = estimator_colors(PLAN.quality_estimators)
    selective = table[table["mode"] == "selective"]
    figures = [
        monthly_plot(selective, averages[averages["mode"] == "selective"], "t", tmp_path / "m.png", colors),
        improvement_plot(averages, "t", tmp_path / "i.png", colors),
    ]
    for figure in figures:
        panels = [ax for ax in figure.axes if ax.get_visible() and ax.axison]
        for ax in panels:
            assert "is better" in ax.get_title()
            ticks = [label.get_text() for label in ax.get_xticklabels()]
            assert "weighted wait" not in ticks or ticks == ["weighted wait"]
        legend = {text.get_text() for legend in figure.legends for text in legend.get_texts()}
        assert {"percentile:q=85", "last2"} <= legend
    lines = [line for ax in figures[0].axes for line in ax.get_lines() if line.get_label()[:1] != "_"]
    assert {line.get_label() for line in lines} <= legend | {"baseline (request, mode none) = 100"}


def test_time_left_weighs_tasks_by_their_expected_cost():
    """Counting tasks alike, README's sweep was promised 10 min 30 s and took 37 min 53 s."""
    plan = EvaluationPlan(
        estimators=("request", "percentile", "lgbm-quantile"),
        policies=("wfp",),
        backfills=("easy", "conservative"),
        modes=("selective",),
    )
    entry = small_input()
    tasks = build_tasks([entry], plan)
    costs = task_costs(tasks, {entry.label: entry.trace})
    pairs = zip(tasks, costs, strict=True)
    cost = {(task.estimator, getattr(task, "backfill", "quality")): value for task, value in pairs}
    assert cost[("lgbm-quantile", "conservative")] > cost[("lgbm-quantile", "easy")] > cost[("percentile", "easy")]
    assert cost[("percentile", "conservative")] > cost[("percentile", "easy")]
    now = [0.0]
    progress = Progress(costs, None, clock=lambda: now[0])
    total, checked = sum(costs), False
    for index, seconds in enumerate(costs):  # each task takes what it is expected to cost
        now[0] += seconds
        progress.advance(index)
        if not checked and progress.done_cost >= total / 10 and index + 1 < len(costs):
            actual = total - now[0]
            left = progress.seconds_left()
            assert left is not None and abs(left - actual) <= 0.3 * actual
            by_count = now[0] / (index + 1) * (len(costs) - index - 1)
            assert abs(by_count - actual) > 0.3 * actual  # what counting tasks alike said
            checked = True
    assert checked


def test_replicates_are_an_axis_with_paired_baselines_and_the_report_shows_their_spread(tmp_path: Path) -> None:
    busy = TraceInput("busy", generate_workload(jobs=800, procs=32, load=0.9, seed=6), "generated, load 0.9")
    plan = EvaluationPlan(
        estimators=("last2",), policies=("fcfs",), modes=("regular",), backfill_orders=("sjf",), replicates=3
    )
    simulations = [task for task in build_tasks([busy], plan) if isinstance(task, SimulationTask)]
    assert [(t.replicate, t.jitter, t.is_baseline) for t in simulations] == [
        (replicate, jitter, baseline) for replicate, jitter in ((0, 0), (1, 10), (2, 10)) for baseline in (True, False)
    ]
    run_evaluation([busy], plan, tmp_path, Backend(in_process=True), show_progress=False)
    results = pd.read_csv(tmp_path / "results.csv")
    runs = results[results["mode"] == "regular"].set_index("replicate")
    baselines = results[results["mode"] == "none"].set_index("replicate")
    # Each replicate is its own schedule, and is compared with its own baseline.
    assert runs["avg_wait"].nunique() == 3
    paired = (baselines["avg_wait"] - runs["avg_wait"]) / baselines["avg_wait"]
    assert runs["improvement_avg_wait"].to_numpy() == pytest.approx(paired.to_numpy())
    report = (tmp_path / "report.md").read_text()
    assert "mean over 3 replicates" in report
    row = next(line for line in report.splitlines() if line.startswith("| last2 | regular |"))
    mean, spread = paired.mean(), paired.std()
    assert f"{mean:+.1%} ± {100 * spread:.1f}" in row
    assert "--replicates 3 --jitter 10" in report  # the reproduce command


def test_replicates_with_the_monthly_protocol_are_refused() -> None:
    with pytest.raises(UsageError, match="--replicates with --monthly"):
        EvaluationPlan(replicates=2, monthly=True).check()


@pytest.mark.slow
def test_a_monthly_report_of_dynp_compares_the_modes_on_the_metrics_it_has(tmp_path: Path) -> None:
    """dynP has no weighted wait (NaN, its policies' scores have different units): the monthly report's
    comparison of the modes failed on that metric's missing column instead of leaving it out."""
    plan = EvaluationPlan(
        estimators=("request", "last2"), policies=split_policies("dynp"), backfills=("easy",), monthly=True
    )
    outcome = run_evaluation([small_input()], plan, tmp_path, Backend(in_process=True), show_progress=False)
    report = outcome.report.read_text()
    assert "Selective mode beat regular mode in" in report
    assert re.search(r"in \d of 2 estimator x metric comparisons", report)  # wait and slowdown, for last2


@pytest.mark.slow
def test_the_reservation_delay_bound_reaches_every_simulation_and_the_reproduce_command(tmp_path: Path) -> None:
    """`evaluate --max-reservation-delay`: every run of the plan is bounded, results.csv says so, the report's
    command repeats it, and on a busy machine where last2's backfilled jobs outlive their estimates it changes
    EASY++'s schedule (the unbounded plan is the control)."""
    busy = TraceInput("busy", generate_workload(jobs=800, procs=32, load=0.95, seed=6), "generated, load 0.95")
    plan = EvaluationPlan(estimators=("last2",), policies=("fcfs",), modes=("regular",), backfill_orders=("sjf",))
    waits = {}
    for bound in (None, 0):
        folder = tmp_path / str(bound)
        bounded = dataclasses.replace(plan, max_reservation_delay=bound)
        run_evaluation([busy], bounded, folder, Backend(in_process=True), show_progress=False)
        results = pd.read_csv(folder / "results.csv", keep_default_na=False, na_values=[""])
        delays = results["max_reservation_delay"]
        assert delays.isna().all() if bound is None else (delays == bound).all()
        assert ("--max-reservation-delay 0s" in (folder / "report.md").read_text()) == (bound == 0)
        waits[bound] = results.set_index("mode")["avg_wait"]
    assert waits[None]["none"] == waits[0]["none"]  # the baseline judges every job by its request: no bound acts
    assert waits[None]["regular"] != waits[0]["regular"]
