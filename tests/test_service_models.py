"""Serving trained models (`--models DIR`): only plain folder names, verified once, the model named, from scratch."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from service_support import DAY, history, status_of

from kernel.errors import ModelError
from predictor.estimators.lgbm import store
from predictor.estimators.lgbm.store import MANIFEST_FILE, MODEL_FILE, ModelCatalog, train
from predictor.service.client import PredictorClient
from predictor.service.launcher import ServerProcess
from predictor.service.server import PredictorServer, start_server
from predictor.service.views import EstimatorView
from simulator.workloads.synthetic import UNIX_START_TIME, generate_workload
from tsched.cli import main

SPEC = "lgbm-quantile:window=10d,retrain=2d,calibration=5d,min_train=200,trees=5,target_under=0.1"


def model_views(catalog: ModelCatalog) -> list[EstimatorView]:
    return [EstimatorView(**model) for model in catalog.describe()]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder with one model, `small`, trained on the first 12 days of a generated workload."""
    root = tmp_path_factory.mktemp("served") / "models"
    trace = generate_workload(jobs=3000, procs=128, load=0.7, seed=7)
    train(trace, root / "small", SPEC, until=12 * DAY, epoch=UNIX_START_TIME)
    (root / "README.md").write_text("not a model folder: ignored\n")
    return root


@pytest.fixture(scope="module")
def served(models: Path) -> Iterator[PredictorServer]:
    catalog = ModelCatalog(models)
    running, _ = start_server("127.0.0.1:0", estimator_factory=catalog.factory, models=model_views(catalog))
    yield running
    running.stop(0).wait()


@pytest.fixture
def client(served: PredictorServer) -> Iterator[PredictorClient]:
    with PredictorClient(f"127.0.0.1:{served.port}", timeout=30) as connected:
        yield connected


@pytest.mark.parametrize("name", ["../models/small", "/abs/path", "small/.", "./small", "sm all", "small/../small"])
def test_a_model_name_is_a_plain_folder_name_or_invalid(client: PredictorClient, name: str) -> None:
    code, details = status_of(lambda: client.predict(user=1, group=1, t_req=60, procs=1, estimator=name))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "estimator" in details


def test_a_model_folder_outside_the_models_folder_is_never_read(
    models: Path, client: PredictorClient, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(models / "small", elsewhere)
    relative = Path("..") / ".." / elsewhere.relative_to(models.parents[1])
    code, _ = status_of(lambda: client.predict(user=1, group=1, t_req=60, procs=1, estimator=str(relative)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_checksums_are_verified_once_at_start(models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[Path] = []
    real = store.sha256_of
    monkeypatch.setattr(store, "sha256_of", lambda path: hashed.append(Path(path)) or real(path))
    running, port = start_server("127.0.0.1:0", estimator_factory=ModelCatalog(models).factory)
    try:
        assert hashed == [models / "small" / MODEL_FILE]
        with PredictorClient(f"127.0.0.1:{port}", timeout=30) as client:
            for spelling in ("small", "small:alpha=0.8", "small:alpha=0.81", "small:seed=3"):
                client.predict(user=1, group=1, t_req=3600, procs=1, submit=20 * DAY, estimator=spelling)
        assert len(hashed) == 1
    finally:
        running.stop(0).wait()


def test_the_model_named_answers_whatever_the_namespace_used_before(client: PredictorClient) -> None:
    finished = history(300, users=10, start=11 * DAY)
    client.observe(finished, namespace="mixed")
    params = SPEC.partition(":")[2]
    builtin = client.predict(
        user=1, group=7, t_req=3600, procs=4, namespace="mixed", estimator=f"lgbm-quantile:{params}"
    )
    model = client.predict(user=1, group=7, t_req=3600, procs=4, namespace="mixed", estimator="small")
    assert builtin.estimator.startswith("lgbm-quantile:") and model.estimator.startswith("small:")
    assert builtin.prediction.fallback and not model.prediction.fallback  # the built-in has no model yet
    listed = client.list_estimators("mixed").namespace_specs
    assert any(spec.startswith("small:") for spec in listed) and any(
        spec.startswith("lgbm-quantile:") for spec in listed
    )


def test_an_empty_namespace_is_served_by_a_model_past_its_retraining_point(client: PredictorClient) -> None:
    # The model was trained up to day 12 and retrains every 2 days: at day 30 a retraining is due at once.
    for namespace, submit in (("empty-predict", 30 * DAY), ("empty-sync", 31 * DAY)):
        answer = client.predict(
            user=1, group=7, t_req=3600, procs=4, submit=submit, namespace=namespace, estimator="small"
        )
        assert not answer.prediction.fallback and 1 <= answer.prediction.t_sched <= 3600
    later = client.sync([], [history(1, start=32 * DAY)[0].request], namespace="empty-sync", estimator="small")
    assert not later[0].fallback


@pytest.mark.slow
def test_broken_or_misnamed_model_folders_stop_the_server_from_starting(models: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(models, broken)
    model_file = broken / "small" / MODEL_FILE
    model_file.write_text(model_file.read_text().replace("tree", "Tree", 1))
    with pytest.raises(ModelError, match="sha256"):
        ModelCatalog(broken)
    with pytest.raises(RuntimeError, match="sha256"):
        ServerProcess(models_dir=str(broken))
    shadowing = tmp_path / "shadowing"
    (shadowing / "percentile").mkdir(parents=True)
    for name in (MANIFEST_FILE, MODEL_FILE):
        shutil.copy(models / "small" / name, shadowing / "percentile" / name)
    with pytest.raises(ModelError, match="named like the built-in estimator"):
        ModelCatalog(shadowing)


def test_served_models_are_logged_listed_and_named_in_unknown_estimator_errors(
    models: Path, client: PredictorClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Model names used to appear nowhere: not at start, not in ListEstimators, not in the error for a typo."""
    caplog.set_level(logging.INFO, logger="tsched.service")
    catalog = ModelCatalog(models)
    running, _ = start_server("127.0.0.1:0", estimator_factory=catalog.factory, models=model_views(catalog))
    running.stop(0).wait()
    assert "trained models small;" in caplog.text
    listed = {info.name: info for info in client.list_estimators().estimators}
    assert listed["small"].trained_model and not listed["percentile"].trained_model
    assert "until" in listed["small"].description
    code, details = status_of(lambda: client.predict(user=1, group=1, t_req=60, procs=1, estimator="smal"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "trained models served: small" in details


def test_simulate_accepts_a_model_the_service_serves(
    served: PredictorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simulate --estimator MODEL --predictor-address` was refused as an unknown estimator by this process."""
    generated = tmp_path / "small.swf"
    assert main(["trace", "generate", "--jobs", "400", "--procs", "128", "--out", str(generated)]) == 0
    trace = tmp_path / "later.swf"  # the same jobs after the model's training span
    lines = [line.split() for line in generated.read_text().splitlines() if not line.startswith(";")]
    trace.write_text("".join(" ".join([f[0], str(int(f[1]) + 20 * DAY), *f[2:]]) + "\n" for f in lines))
    run = ["simulate", "--trace", str(trace), "--address", f"127.0.0.1:{served.port}", "--estimator"]
    assert main([*run, "small"]) == 0
    assert "estimator small" in capsys.readouterr().out
    assert main([*run, "smal"]) == 2
    error = capsys.readouterr().err
    assert "unknown estimator 'smal'" in error and "small" in error.partition("serves")[2]
