"""`tsched train` model folders: training, the manifest, checksums and loading."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernel.errors import SpecError
from predictor.digests import sha256_of
from predictor.estimators.lgbm.estimator import LGBMQuantileEstimator
from predictor.estimators.lgbm.features import feature_names
from predictor.estimators.lgbm.model import CLASSES
from predictor.estimators.lgbm.store import (
    MANIFEST_FILE,
    MODEL_FILE,
    ModelCatalog,
    ModelError,
    load_model,
    parse_until,
    train,
)
from predictor.estimators.percentile import PercentileEstimator
from simulator.workloads.synthetic import UNIX_START_TIME, generate_workload
from simulator.workloads.trace import Trace

DAY = 86_400
SPEC = "lgbm-quantile:window=10d,retrain=2d,calibration=5d,min_train=200,trees=5,target_under=0.1"


@pytest.fixture(scope="module")
def trace() -> Trace:
    return generate_workload(jobs=3000, procs=128, load=0.7, seed=7)


@pytest.fixture(scope="module")
def trained(trace: Trace, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("models") / "small"
    manifest = train(trace, folder, SPEC, until=12 * DAY, epoch=UNIX_START_TIME, trace_sha256="0" * 64)
    return folder, manifest


def test_model_folder_holds_text_model_and_manifest(trained: tuple[Path, dict]) -> None:
    folder, manifest = trained
    assert sorted(path.name for path in folder.iterdir()) == sorted([MODEL_FILE, MANIFEST_FILE])
    assert (folder / MODEL_FILE).read_text().startswith("tree")  # LightGBM's text format
    assert json.loads((folder / MANIFEST_FILE).read_text()) == manifest
    assert manifest["model_sha256"] == sha256_of(folder / MODEL_FILE)
    assert [feature["name"] for feature in manifest["features"]] == list(feature_names())
    assert all(feature["encoding"] for feature in manifest["features"])
    assert manifest["params"]["target_under"] == 0.1
    training = manifest["training"]
    assert training["until"] == 12 * DAY and training["until_utc"].startswith("2024-01-13")
    assert training["trace_sha256"] == "0" * 64
    assert training["jobs"] >= 200 and training["first_end"] >= 2 * DAY
    held_out = manifest["held_out"]
    assert held_out["jobs"] > 0 and held_out["first_submit"] > 12 * DAY
    for name in ("model", "request", "percentile"):
        assert 0 < held_out[name]["accuracy_mean"] <= 1
    assert held_out["request"]["underestimated"] == 0
    assert len(manifest["calibration"]["scores"]) > 0
    assert len(manifest["calibration"]["level_scores"]) == len(manifest["calibration"]["scores"])  # the same jobs


def test_loading_round_trips_the_model(trained: tuple[Path, dict]) -> None:
    folder, manifest = trained
    loaded = load_model(folder)
    estimator = loaded.estimator()
    assert estimator.get_params() == manifest["params"]
    assert estimator.multiplier() == manifest["calibration"]["multiplier"]
    assert estimator.level_state() == manifest["calibration"]["level_scores"]
    rows = np.random.default_rng(1).uniform(0, 10, size=(50, len(feature_names()) + CLASSES))  # features, counts
    t_req = np.full(50, 3600)
    fresh = load_model(folder).model
    for mine, theirs in zip(
        loaded.model.distribution(rows, t_req, estimator.prior_jobs),
        fresh.distribution(rows, t_req, estimator.prior_jobs),
        strict=True,
    ):
        np.testing.assert_array_equal(mine, theirs)
    assert estimator.model.trained_at == 12 * DAY


def test_a_changed_model_file_is_refused(trained: tuple[Path, dict], tmp_path: Path) -> None:
    folder, _ = trained
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / MANIFEST_FILE).write_bytes((folder / MANIFEST_FILE).read_bytes())
    (copy / MODEL_FILE).write_bytes((folder / MODEL_FILE).read_bytes().replace(b"tree", b"Tree", 1))
    with pytest.raises(ModelError, match="sha256"):
        load_model(copy)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda manifest: manifest.update(format="other"), "format"),
        (lambda manifest: manifest["features"].pop(), "features"),
        (lambda manifest: manifest.pop("model_sha256"), "model_sha256"),
        (lambda manifest: manifest.update(model_file="../model.txt"), "model_file"),
    ],
)
def test_a_bad_manifest_is_refused(trained: tuple[Path, dict], tmp_path: Path, edit, message: str) -> None:
    folder, manifest = trained
    changed = json.loads(json.dumps(manifest))
    edit(changed)
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(changed))
    (tmp_path / MODEL_FILE).write_bytes((folder / MODEL_FILE).read_bytes())
    with pytest.raises(ModelError, match=message):
        load_model(tmp_path)


def test_missing_or_garbled_manifest(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no manifest"):
        load_model(tmp_path)
    (tmp_path / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        load_model(tmp_path)


def test_catalog_serves_models_by_name(trained: tuple[Path, dict]) -> None:
    folder, _ = trained
    factory = ModelCatalog(folder.parent).factory
    served, canonical = factory("small")
    assert isinstance(served, LGBMQuantileEstimator) and served.model is not None
    assert canonical.startswith("small:") and factory(canonical)[1] == canonical
    assert factory("small:target_under=0.2,retrain=never")[0].target_under == 0.2
    assert isinstance(factory("percentile")[0], PercentileEstimator)
    with pytest.raises(SpecError):
        factory("small:depth=3")
    with pytest.raises(ModelError, match="not found"):
        ModelCatalog(folder / "absent")


def test_train_only_trains_lgbm(trace: Trace, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="percentile"):
        train(trace, tmp_path, "percentile", until=12 * DAY)


def test_train_needs_enough_history(trace: Trace, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="training needs at least"):
        train(trace, tmp_path, SPEC, until=DAY // 4)


def test_parse_until() -> None:
    assert parse_until("2024-01-02", UNIX_START_TIME) == DAY
    assert parse_until("2024-01-01T12:00", UNIX_START_TIME) == DAY // 2
    with pytest.raises(ValueError, match="--until"):
        parse_until("yesterday", UNIX_START_TIME)


@pytest.mark.slow
def test_trained_on_kth_the_model_beats_the_adjuster_held_out(traces_dir: Path, tmp_path: Path) -> None:
    from simulator.workloads.swf import read_swf

    trace = read_swf(traces_dir / "KTH-SP2-1996-2.1-cln.swf.gz")
    epoch = trace.header.unix_start_time or 0
    manifest = train(
        trace, tmp_path / "kth", "lgbm-quantile:target_under=0.07", until=parse_until("1997-03-01", epoch), epoch=epoch
    )
    held_out = manifest["held_out"]
    assert held_out["model"]["accuracy_mean"] > held_out["percentile"]["accuracy_mean"]
    assert held_out["model"]["underestimated"] <= held_out["percentile"]["underestimated"] + 0.01


def test_the_trained_default_is_the_quantile_estimator() -> None:
    """`tsched train`'s default is written apart from the model code (no LightGBM import for --help)."""
    from predictor.estimators.lgbm.defaults import TRAINED_ESTIMATOR

    assert LGBMQuantileEstimator.name == TRAINED_ESTIMATOR
