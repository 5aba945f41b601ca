"""A run's summary in its three forms: simulate's JSON, a results.csv row and the printed block."""

from __future__ import annotations

import dataclasses
import json

import pytest

from simulator.dynp import canonical_policy
from simulator.engine import SimulationConfig
from simulator.experiment import run_simulation
from simulator.metrics import SCHEDULING_METRICS
from simulator.summary import ROW_PARAMETERS, RunSummary
from simulator.workloads.synthetic import generate_workload

#: `tsched simulate --json`'s keys, in their order: what scripts and notebooks read.
JSON_KEYS = [
    "trace",
    "month",
    "estimator",
    "procs",
    "policy",
    "backfill",
    "mode",
    "correction",
    "backfill_order",
    "max_reservation_delay",
    "load_factor",
    "replicate",
    "jitter",
    "jobs",
    "skipped",
    *SCHEDULING_METRICS,
    "dynp",
    "node_failures",
    "predictor_fallbacks",
    "predictor_fallback_share",
    "prediction",
]


@pytest.fixture(scope="module")
def summaries() -> dict[str, RunSummary]:
    trace = generate_workload(jobs=400, procs=32, load=0.9, seed=4)
    runs = {
        "fcfs": (SimulationConfig(32, "fcfs", "easy", "regular", "tsafrir"), {"replicate": 2, "jitter": 30}),
        "dynp": (SimulationConfig(32, canonical_policy("dynp"), "easy", "selective"), {"load_factor": 1.5}),
    }
    return {name: run_simulation(trace, config, "last2", **options)[0] for name, (config, options) in runs.items()}


def test_the_json_document_has_simulates_keys_in_their_order(summaries):
    document = summaries["fcfs"].to_dict()
    assert list(document) == JSON_KEYS
    assert document["procs"] == 32 and document["correction"] == "tsafrir" and document["jitter"] == 30
    assert document["month"] is None and document["dynp"] is None
    assert set(document["prediction"]) >= {"accuracy_mean", "underestimated", "NA", "OE", "UE", "BE"}
    assert json.loads(json.dumps(document)) == document


def test_a_row_has_the_parameters_first_then_flat_metrics(summaries):
    row = summaries["dynp"].to_row("small")
    assert list(row)[: len(ROW_PARAMETERS)] == list(ROW_PARAMETERS)
    assert row["trace"] == "small" and row["month"] == "" and row["load_factor"] == 1.5
    assert row["prediction_accuracy_mean"] == summaries["dynp"].prediction["accuracy_mean"]
    dynp = summaries["dynp"].dynp
    assert dynp is not None and row["dynp_decisions"] == dynp["decisions"]
    assert all(row[f"dynp_switches_{policy}"] == count for policy, count in dynp["switches"].items())
    assert not {"prediction", "dynp", "dynp_switches"} & set(row)


def test_skipped_jobs_are_one_cell_in_a_row_and_a_clause_when_printed(summaries):
    summary = dataclasses.replace(summaries["fcfs"], skipped={"no request": 3, "unknown runtime": 1})
    assert summary.to_row("small")["skipped"] == "no request: 3; unknown runtime: 1"
    assert "(skipped: no request 3, unknown runtime 1)" in summary.describe()


def test_the_printed_block_says_what_ran_and_what_it_gave(summaries):
    text = summaries["fcfs"].describe()
    assert "fcfs + easy backfilling (queue order), 32 processors, mode regular (correction tsafrir)" in text
    assert "replicate 2 (±30 s)" in text and "load x" not in text and "dynP" not in text
    assert f"wait       {summaries['fcfs'].avg_wait:.0f} s average" in text
    assert "predictor" not in text  # nothing fell back
    dynp = summaries["dynp"].describe()
    assert "load x1.5" in dynp and "dynP       " in dynp and "switches to " in dynp


def test_fallbacks_are_printed_with_their_share(summaries):
    summary = dataclasses.replace(summaries["fcfs"], predictor_fallbacks=4, predictor_fallback_share=0.01)
    assert summary.describe().endswith("predictor  4 job(s) (1.00%) got t_req: the service did not answer")
