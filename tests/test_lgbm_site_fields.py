"""lgbm learning from what a site log says and an archive trace mostly does not: the memory a job asks for
(`memory=true`) and its application (`application=true`: SWF field 14, a site log's job name)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from service_support import rewritten_snapshot

from kernel.jobs import FinishedJob, JobRequest
from predictor.estimators.lgbm.features import (
    APPLICATION_KEY,
    KEY_STATS,
    MEMORY_FEATURE,
    FeatureHistory,
    feature_names,
)
from predictor.estimators.lgbm.model import CLASSES
from predictor.estimators.lgbm.store import MANIFEST_FILE, ModelError, load_model, train
from predictor.frames import jobs_to_requests
from predictor.offline import replay
from predictor.registry import make_estimator
from predictor.scoring import summarize
from predictor.service import snapshots
from simulator.workloads.synthetic import UNIX_START_TIME, generate_workload

DAY = 86_400
SMALL = "window=10d,retrain=2d,calibration=5d,min_train=200,trees=5,swap=0s"


@pytest.fixture(scope="module")
def jobs() -> pd.DataFrame:
    """3000 generated jobs over about 17 days, none of which says what memory it asked for."""
    return generate_workload(jobs=3000, procs=128, load=0.7, seed=7).jobs


#: Per option, the job field it reads, the values that tell the short half of a user's jobs of one request from
#: the long half, the value that says nothing, and the last feature of a row with it.
OPTIONS = {
    "memory": ("memory_mb", (1024, 65_536), 0, MEMORY_FEATURE),
    "application": ("executable", (1, 2), -1, f"{APPLICATION_KEY}_logrt_max"),
}


def telling(jobs: pd.DataFrame, option: str = "memory") -> pd.DataFrame:
    """The same jobs, each saying something that tells its runtime apart from its request's other jobs: for
    memory, the short half of a user's jobs asks for 1 GB, the long half for 64 GB; for the application, they
    run applications 1 and 2."""
    field, (short_value, long_value), _, _ = OPTIONS[option]
    told = jobs.copy()
    short = told["t_act"] < told.groupby(["user", "t_req"])["t_act"].transform("median")
    told[field] = np.where(short, short_value, long_value)
    return told


def test_a_row_ends_with_the_memory_asked_for() -> None:
    history = FeatureHistory(memory=True)
    asked = JobRequest(1, 0, 1, 1, 3600, 4, memory_mb=2048)
    row = history.row(asked)
    assert feature_names(memory=True)[-1] == MEMORY_FEATURE and len(row) == len(feature_names(memory=True))
    assert row[-1] == math.log(2048)
    assert math.isnan(history.row(asked._replace(memory_mb=0))[-1])  # not asked: missing, as LightGBM reads NaN
    np.testing.assert_array_equal(FeatureHistory().row(asked), row[:-1])  # the option only adds the column


def test_a_row_describes_the_users_jobs_of_the_same_application() -> None:
    history = FeatureHistory(application=True)
    for job_id, (executable, runtime) in enumerate([(7, 100), (8, 3_000), (7, 120), (-1, 50)], start=1):
        history.observe(FinishedJob(JobRequest(job_id, 0, 1, 1, 3_600, 4, executable=executable), 10 * job_id, runtime))
    names = feature_names(application=True)
    start = names.index(f"{APPLICATION_KEY}_count")
    row = history.row(JobRequest(9, 100, 1, 1, 3_600, 4, executable=7))
    assert len(row) == len(names) and names[start:] == tuple(f"{APPLICATION_KEY}_{stat}" for stat in KEY_STATS)
    assert row[start] == 2 and row[start + 1] == math.log1p(120)  # application 7's two jobs, the latest last
    unknown = history.row(JobRequest(10, 100, 1, 1, 3_600, 4, executable=-1))
    assert unknown[start] == 0 and all(math.isnan(value) for value in unknown[start + 1 :])  # none kept under it
    without = FeatureHistory()
    for job_id, runtime in enumerate([100, 3_000, 120, 50], start=1):
        without.observe(FinishedJob(JobRequest(job_id, 0, 1, 1, 3_600, 4), 10 * job_id, runtime))
    np.testing.assert_array_equal(without.row(JobRequest(9, 100, 1, 1, 3_600, 4)), row[:start])  # only added


@pytest.mark.parametrize("option", OPTIONS)
def test_a_log_that_says_nothing_gets_the_same_answers_with_the_option(jobs: pd.DataFrame, option: str) -> None:
    """LightGBM leaves a feature with one value out before it samples features, so a trace whose jobs say no
    memory (or name no application) is predicted exactly as without the option (measured on KTH-SP2 too,
    docs/lgbm.md)."""
    field, _, nothing, _ = OPTIONS[option]
    silent = jobs.assign(**{field: nothing})
    without = replay(make_estimator(f"lgbm-quantile:{SMALL}"), silent)
    with_option = replay(make_estimator(f"lgbm-quantile:{SMALL},{option}=true"), silent)
    pd.testing.assert_frame_equal(with_option, without)


@pytest.mark.parametrize("option", OPTIONS)
def test_what_tells_the_runtime_is_learned(jobs: pd.DataFrame, option: str) -> None:
    told = telling(jobs, option)
    qualities = {}
    for spec in ("", f",{option}=true"):
        replayed = replay(make_estimator(f"lgbm-quantile:{SMALL}{spec}"), told)
        qualities[spec] = summarize(replayed["t_sched"], replayed["t_act"], replayed["t_req"])
    without, learned = qualities[""], qualities[f",{option}=true"]
    assert learned["accuracy_mean"] > without["accuracy_mean"] + 0.03, qualities  # memory: 0.280 -> 0.323
    assert learned["underestimated"] <= without["underestimated"] + 0.02, qualities


def _without_the_option(node: Any) -> None:
    """A snapshot document as a tsched before the options wrote it: no object's state says `memory`,
    `application` or `features`."""
    if isinstance(node, dict):
        state = node.get("state")
        if isinstance(state, dict):
            state.pop("memory", None)
            state.pop("application", None)
            state.pop("features", None)
        for value in node.values():
            _without_the_option(value)
    elif isinstance(node, list):
        for value in node:
            _without_the_option(value)


@pytest.mark.parametrize("options", ["memory=true", "memory=false", "application=true,memory=true"])
def test_a_snapshot_restores_what_was_learned(jobs: pd.DataFrame, options: str) -> None:
    """With the options, and without them from a snapshot older than the option (its objects lack the
    attributes, which then read as the class's defaults: no memory, the features of then)."""
    estimator = make_estimator(f"lgbm-quantile:{SMALL},{options}")
    told = telling(telling(jobs), "application")
    replayed = replay(estimator, told.iloc[:2000])
    assert not replayed["fallback"].iloc[-500:].any()  # a model answers
    image = snapshots.NamespaceImage(b"", 7, {"lgbm": estimator})
    blob = snapshots.dump(image)
    if options == "memory=false":
        blob = rewritten_snapshot(blob, _without_the_option)
    restored = snapshots.load(blob, None).estimators["lgbm"]
    later = jobs_to_requests(told.iloc[2000:2100])
    assert restored.predict_many(later) == estimator.predict_many(later)


@pytest.mark.parametrize("option", OPTIONS)
def test_a_model_folder_says_what_it_learned_from(tmp_path: Path, option: str) -> None:
    trace = generate_workload(jobs=3000, procs=128, load=0.7, seed=7)
    trace.jobs = telling(trace.jobs, option)
    folder = tmp_path / option
    spec = f"lgbm-quantile:{SMALL},{option}=true"
    manifest = train(trace, folder, spec, until=12 * DAY, epoch=UNIX_START_TIME, trace_sha256="0" * 64)
    assert [feature["name"] for feature in manifest["features"]][-1] == OPTIONS[option][3]
    loaded = load_model(folder)
    assert getattr(loaded.estimator(), option) is True
    width = len(feature_names(**{option: True}))
    rows = np.random.default_rng(1).uniform(0, 10, size=(5, width + CLASSES))
    accuracy, _, _ = loaded.model.distribution(rows, np.full(5, 3600), 300.0)
    assert accuracy.shape[0] == 5 and np.isfinite(accuracy).all()
    manifest["params"][option] = False  # features that the parameters do not say: refused, as any other change
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="other features than this version computes"):
        load_model(folder)
