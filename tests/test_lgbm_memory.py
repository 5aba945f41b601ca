"""lgbm learning from the memory a job asks for (`memory=true`): a site log carries it, an archive trace mostly not."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from service_support import rewritten_snapshot

from kernel.jobs import JobRequest
from predictor.estimators.lgbm.features import MEMORY_FEATURE, FeatureHistory, feature_names
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


def telling(jobs: pd.DataFrame) -> pd.DataFrame:
    """The same jobs, each asking for memory that tells its runtime apart from its request's other jobs: the
    short half of a user's jobs asks for 1 GB, the long half for 64 GB."""
    told = jobs.copy()
    short = told["t_act"] < told.groupby(["user", "t_req"])["t_act"].transform("median")
    told["memory_mb"] = np.where(short, 1024, 65_536)
    return told


def test_a_row_ends_with_the_memory_asked_for() -> None:
    history = FeatureHistory(memory=True)
    asked = JobRequest(1, 0, 1, 1, 3600, 4, memory_mb=2048)
    row = history.row(asked)
    assert feature_names(memory=True)[-1] == MEMORY_FEATURE and len(row) == len(feature_names(memory=True))
    assert row[-1] == math.log(2048)
    assert math.isnan(history.row(asked._replace(memory_mb=0))[-1])  # not asked: missing, as LightGBM reads NaN
    np.testing.assert_array_equal(FeatureHistory().row(asked), row[:-1])  # the option only adds the column


def test_a_log_without_memory_gets_the_same_answers_with_the_option(jobs: pd.DataFrame) -> None:
    """LightGBM leaves a feature with one value out before it samples features, so a trace whose jobs say no
    memory is predicted exactly as without the option (measured on KTH-SP2 too, docs/lgbm.md)."""
    assert (jobs["memory_mb"] == 0).all()
    without = replay(make_estimator(f"lgbm-quantile:{SMALL}"), jobs)
    with_memory = replay(make_estimator(f"lgbm-quantile:{SMALL},memory=true"), jobs)
    pd.testing.assert_frame_equal(with_memory, without)


def test_memory_that_tells_the_runtime_is_learned(jobs: pd.DataFrame) -> None:
    told = telling(jobs)
    qualities = {}
    for spec in ("", ",memory=true"):
        replayed = replay(make_estimator(f"lgbm-quantile:{SMALL}{spec}"), told)
        qualities[spec] = summarize(replayed["t_sched"], replayed["t_act"], replayed["t_req"])
    without, learned = qualities[""], qualities[",memory=true"]
    assert learned["accuracy_mean"] > without["accuracy_mean"] + 0.03, qualities  # 0.280 -> 0.323
    assert learned["underestimated"] <= without["underestimated"] + 0.02, qualities


def _without_the_option(node: Any) -> None:
    """A snapshot document as a tsched before the option wrote it: no object's state says `memory` or
    `features`."""
    if isinstance(node, dict):
        state = node.get("state")
        if isinstance(state, dict):
            state.pop("memory", None)
            state.pop("features", None)
        for value in node.values():
            _without_the_option(value)
    elif isinstance(node, list):
        for value in node:
            _without_the_option(value)


@pytest.mark.parametrize("memory", ["true", "false"])
def test_a_snapshot_restores_what_was_learned(jobs: pd.DataFrame, memory: str) -> None:
    """With the option, and without it from a snapshot older than the option (its objects lack the attributes,
    which then read as the class's defaults: no memory, the features of then)."""
    estimator = make_estimator(f"lgbm-quantile:{SMALL},memory={memory}")
    told = telling(jobs)
    replayed = replay(estimator, told.iloc[:2000])
    assert not replayed["fallback"].iloc[-500:].any()  # a model answers
    image = snapshots.NamespaceImage(b"", 7, {"lgbm": estimator})
    blob = snapshots.dump(image)
    if memory == "false":
        blob = rewritten_snapshot(blob, _without_the_option)
    restored = snapshots.load(blob, None).estimators["lgbm"]
    later = jobs_to_requests(told.iloc[2000:2100])
    assert restored.predict_many(later) == estimator.predict_many(later)


def test_a_model_folder_says_it_learned_from_memory(tmp_path: Path) -> None:
    trace = generate_workload(jobs=3000, procs=128, load=0.7, seed=7)
    trace.jobs = telling(trace.jobs)
    folder = tmp_path / "memory"
    spec = f"lgbm-quantile:{SMALL},memory=true"
    manifest = train(trace, folder, spec, until=12 * DAY, epoch=UNIX_START_TIME, trace_sha256="0" * 64)
    assert [feature["name"] for feature in manifest["features"]][-1] == MEMORY_FEATURE
    loaded = load_model(folder)
    assert loaded.estimator().memory is True
    rows = np.random.default_rng(1).uniform(0, 10, size=(5, len(feature_names(memory=True)) + CLASSES))
    accuracy, _, _ = loaded.model.distribution(rows, np.full(5, 3600), 300.0)
    assert accuracy.shape[0] == 5 and np.isfinite(accuracy).all()
    manifest["params"]["memory"] = False  # features that the parameters do not say: refused, as any other change
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="other features than this version computes"):
        load_model(folder)
