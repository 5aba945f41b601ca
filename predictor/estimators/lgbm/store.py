"""Train an `lgbm-quantile` model on a trace, keep it as a model folder, and load it back.

A model folder (`models/NAME/`) holds `model.txt`, the booster in LightGBM's
own text format, and `manifest.json`: the estimator's parameters, the
features and their encodings, the R classes, the training span, the trace's
checksum, the held-out metrics, the calibration scores, and the sha256 of
`model.txt`. Loading verifies that checksum and refuses a mismatch; nothing
is ever unpickled, so a model folder cannot run code.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel.durations import SECONDS_PER_DAY
from kernel.errors import ModelError, SpecError, TraceError, UsageError
from kernel.specs import parse_spec
from predictor.digests import sha256_of
from predictor.estimators.base import Estimator
from predictor.estimators.lgbm.defaults import DEFAULT_HELD_OUT_DAYS, TRAINED_ESTIMATOR
from predictor.estimators.lgbm.estimator import LGBMQuantileEstimator
from predictor.estimators.lgbm.features import (
    COUNTED_KEY,
    HISTORY_WINDOW,
    KEYS,
    feature_encodings,
    feature_names,
)
from predictor.estimators.lgbm.model import CANDIDATES, CLASS_QUANTILES, CLASSES, RATIO_EDGES, TrainedModel
from predictor.frames import TraceLike, finished_from_frame, jobs_to_requests
from predictor.offline import causal_replay
from predictor.registry import available, make_estimator
from predictor.scoring import prediction_scores

#: Version 2: rows end with the key's R class counts (`prior_jobs`) and calibration targets adapt (`adapt`);
#: a version-1 folder would load with those defaults and no longer serve what its metrics describe.
FORMAT = "tsched-lgbm-quantile/2"
MODEL_FILE = "model.txt"
MANIFEST_FILE = "manifest.json"
#: Estimators scored on the held-out period next to the model, for context.
REFERENCE_SPECS = ("request", "percentile")


def parse_until(text: str, epoch: int) -> int:
    """Trace seconds of `--until`: an ISO date or date-time, UTC (`1999-01-01`, `1999-01-01T12:00`).

    `epoch` is the trace header's UnixStartTime (trace second 0).
    """
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--until {text!r}: expected a date such as 1999-01-01 or 1999-01-01T12:00 (UTC)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp()) - epoch


def _utc(epoch: int, seconds: int) -> str:
    return datetime.fromtimestamp(epoch + seconds, tz=UTC).isoformat()


def _scores(frame_t_sched: np.ndarray, jobs: pd.DataFrame) -> dict[str, float | None]:
    return prediction_scores(frame_t_sched, jobs["t_act"].to_numpy(), jobs["t_req"].to_numpy())


def _held_out_metrics(estimator: LGBMQuantileEstimator, jobs: pd.DataFrame, until: int) -> dict[str, Any]:
    """Score the frozen model (no retraining, calibration still tracking) on jobs submitted after `until`.

    The references are replayed over the whole trace and scored on the same jobs.
    """
    held_out = jobs.loc[jobs["submit"].to_numpy() > until]
    if held_out.empty:
        return {"jobs": 0}
    requests = jobs_to_requests(held_out)
    later = [job for job in finished_from_frame(jobs) if job.end > until]
    predictions = causal_replay(requests, later, estimator.observe, estimator.predict)
    t_sched = np.array([p.t_sched for p in predictions], dtype=np.int64)
    metrics: dict[str, Any] = {
        "jobs": len(held_out),
        "first_submit": int(held_out["submit"].iloc[0]),
        "last_submit": int(held_out["submit"].iloc[-1]),
        "target_under": estimator.target_under,
        "model": _scores(t_sched, held_out),
    }
    all_requests = jobs_to_requests(jobs)
    all_finished = finished_from_frame(jobs)
    is_held_out = jobs["submit"].to_numpy() > until
    for spec in REFERENCE_SPECS:
        reference = make_estimator(spec)
        answers = causal_replay(all_requests, all_finished, reference.observe, reference.predict)
        reference_sched = np.array([p.t_sched for p in answers], dtype=np.int64)[is_held_out]
        metrics[spec] = _scores(reference_sched, held_out)
    return metrics


def train(
    trace: TraceLike,
    out: str | Path,
    spec: str = TRAINED_ESTIMATOR,
    until: int | None = None,
    epoch: int = 0,
    trace_sha256: str | None = None,
) -> dict[str, Any]:
    """Train on the window before `until` (trace seconds), evaluate after it, write the model folder.

    `until` defaults to 30 days before the last submission. Returns the manifest.
    """
    requested = make_estimator(spec)
    if type(requested) is not LGBMQuantileEstimator:  # lgbm-sched's choice is not what a model folder keeps
        raise SpecError(f"tsched train trains lgbm-quantile models; {spec!r} is a {requested.name!r} estimator")
    jobs = trace.jobs.sort_values(["submit", "job_id"], kind="stable").reset_index(drop=True)
    if jobs.empty:
        raise TraceError(f"{trace.path}: no jobs to train on")
    until = _checked_until(trace.path, jobs, until, epoch)
    estimator = _trained_until(trace.path, requested, jobs, until)
    model = estimator.model
    assert model is not None  # `_trained_until` put it live
    calibration = {
        "target_under": estimator.target_under,
        "multiplier": estimator.multiplier(),
        "scores": estimator.calibration_state(),
        "level_scores": estimator.level_state(),
    }
    held_out = _held_out_metrics(estimator, jobs, until)  # goes on calibrating: read the calibration first

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / MODEL_FILE
    model_path.write_text(model.booster.model_to_string(), encoding="utf-8")
    manifest = {
        "format": FORMAT,
        "estimator": requested.spec,
        "params": requested.get_params(),
        **_model_description(estimator, model),
        "training": {
            "trace": str(trace.path),
            "trace_sha256": trace_sha256,
            "jobs": model.jobs,
            "first_end": model.first_end,
            "until": until,
            "first_end_utc": _utc(epoch, model.first_end),
            "until_utc": _utc(epoch, until),
        },
        "calibration": calibration,
        "held_out": held_out,
        "model_file": MODEL_FILE,
        "model_sha256": sha256_of(model_path),
    }
    (folder / MANIFEST_FILE).write_text(json.dumps(_json_safe(manifest), indent=1) + "\n", encoding="utf-8")
    return manifest


def _checked_until(path: str, jobs: pd.DataFrame, until: int | None, epoch: int) -> int:
    """`until`, or the default (`DEFAULT_HELD_OUT_DAYS` before the last submission), refused with the trace's span
    when no job would have finished by it (nothing to train on) or none would be submitted after it (nothing
    held out to score the model on)."""
    first_end, last_submit = int(jobs["end"].min()), int(jobs["submit"].max())
    span = (
        f"the trace's jobs were submitted up to {_utc(epoch, last_submit)} and the first ended {_utc(epoch, first_end)}"
    )
    if until is None:
        until = last_submit - DEFAULT_HELD_OUT_DAYS * SECONDS_PER_DAY
        if until < first_end:
            raise UsageError(
                f"{path}: the default --until, {DEFAULT_HELD_OUT_DAYS} days before the last submission, leaves "
                f"nothing to train on ({span}): give --until, a date between the two"
            )
        return until
    when = f"--until {_utc(epoch, until)}"
    if until < first_end:
        raise UsageError(f"{path}: {when} is before any job of the trace ended, nothing to train on ({span})")
    if until >= last_submit:
        raise UsageError(
            f"{path}: {when} is after the last submission, no job is held out to score the model on ({span}): "
            "choose an earlier date"
        )
    return until


def _trained_until(
    path: str, requested: LGBMQuantileEstimator, jobs: pd.DataFrame, until: int
) -> LGBMQuantileEstimator:
    """`requested`'s estimator, frozen (it never retrains: the saved model is evaluated as it is saved, its
    calibration still tracking), with a model trained on the jobs that ended by `until` live."""
    estimator = requested.clone().set_params(retrain="never")
    for job in finished_from_frame(jobs):
        if job.end > until:
            break
        estimator.observe(job)
    data = estimator.training_data(until)
    if len(data) < estimator.min_train:
        raise UsageError(
            f"{path}: {len(data)} jobs finished in the {estimator.window} before --until; "
            f"training needs at least {estimator.min_train}"
        )
    estimator.install(estimator.train(data))
    return estimator


def _model_description(estimator: LGBMQuantileEstimator, model: TrainedModel) -> dict[str, Any]:
    """What a manifest says of the model: LightGBM's settings, the features, the R classes, the key counts
    and the candidate estimates (a loader refuses a model whose encodings differ from its own)."""
    import lightgbm as lgb  # here, not at the top: its import (scikit-learn's with it) takes seconds

    return {
        "lightgbm": {"version": lgb.__version__, "params": estimator.lightgbm_params(), "trees": estimator.trees},
        "features": feature_encodings(estimator.memory, estimator.application),
        "classes": {"ratio_edges": list(RATIO_EDGES), "ratio_quantiles": model.class_ratios.tolist()},
        "key_counts": {
            "key": "+".join(KEYS[COUNTED_KEY]),
            "window_days": HISTORY_WINDOW // SECONDS_PER_DAY,
            "encoding": "after the features, a row holds per class the jobs of the same key that ended in the "
            "window before submission; with the model's class probabilities weighing as much as "
            "params.prior_jobs of them, they give the posterior the estimate is chosen from",
        },
        "candidates": CANDIDATES.tolist(),
    }


def _json_safe(value: Any) -> Any:
    """NaN and infinities become null: manifests must be strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


@dataclass(frozen=True)
class LoadedModel:
    """A verified model folder: its manifest and the model ready to predict.

    Loading verified the checksums; serving it builds a fresh estimator each time (`estimator`).
    """

    path: Path
    manifest: dict[str, Any]
    model: TrainedModel

    def estimator(self, overrides: dict[str, str] | None = None) -> LGBMQuantileEstimator:
        """An estimator serving this model, with the manifest's parameters except `overrides` (SPEC values).

        It retrains on the jobs it learns like any other. A model's retraining point is set from its training
        time, so in a new (empty) namespace the first prediction finds it due with no job in the window: the
        snapshot is then empty and no training starts, as when there are too few jobs.
        """
        params = {**self.manifest["params"], **(overrides or {})}
        template = make_estimator(LGBMQuantileEstimator.name + ":" + ",".join(f"{k}={v}" for k, v in params.items()))
        calibration = self.manifest["calibration"]
        return LGBMQuantileEstimator.from_model(
            self.model, template.get_params(), calibration["scores"], calibration.get("level_scores")
        )


def _manifest_field(manifest: dict[str, Any], path: Path, *names: str) -> Any:
    value: Any = manifest
    for name in names:
        if not isinstance(value, dict) or name not in value:
            raise ModelError(f"{path}: field {'.'.join(names)} is missing")
        value = value[name]
    return value


def load_model(directory: str | Path) -> LoadedModel:
    """Read and verify a model folder; ModelError names the file and the problem."""
    import lightgbm as lgb  # here, not at the top: its import (scikit-learn's with it) takes seconds

    folder = Path(directory)
    manifest_path = folder / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{manifest_path}: no manifest (is {folder} a model folder?)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelError(f"{manifest_path}: not valid JSON ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ModelError(f"{manifest_path}: field format must be {FORMAT!r}")
    model_name = _manifest_field(manifest, manifest_path, "model_file")
    if not isinstance(model_name, str) or Path(model_name).name != model_name:
        raise ModelError(f"{manifest_path}: field model_file must be a file name in the folder")
    model_path = folder / model_name
    if not model_path.is_file():
        raise ModelError(f"{model_path}: model file missing")
    expected = _manifest_field(manifest, manifest_path, "model_sha256")
    actual = sha256_of(model_path)
    if actual != expected:
        raise ModelError(f"{model_path}: sha256 {actual} does not match the manifest's {expected}; refusing to load")
    names = [feature.get("name") for feature in _manifest_field(manifest, manifest_path, "features")]
    params = _manifest_field(manifest, manifest_path, "params")
    # an older manifest has neither
    memory, application = (isinstance(params, dict) and params.get(name) is True for name in ("memory", "application"))
    if names != list(feature_names(memory, application)):
        raise ModelError(f"{manifest_path}: field features lists other features than this version computes; retrain")
    if _manifest_field(manifest, manifest_path, "classes", "ratio_edges") != list(RATIO_EDGES):
        raise ModelError(f"{manifest_path}: field classes.ratio_edges differs from this version's; retrain")
    quantiles = np.asarray(_manifest_field(manifest, manifest_path, "classes", "ratio_quantiles"), dtype=np.float64)
    if quantiles.shape != (CLASSES, CLASS_QUANTILES):
        raise ModelError(f"{manifest_path}: field classes.ratio_quantiles must be {CLASSES} x {CLASS_QUANTILES}")
    if not np.allclose(_manifest_field(manifest, manifest_path, "candidates"), CANDIDATES, rtol=0, atol=1e-12):
        raise ModelError(f"{manifest_path}: field candidates differs from this version's; retrain")
    _manifest_field(manifest, manifest_path, "params")
    _manifest_field(manifest, manifest_path, "calibration", "scores")
    try:
        booster = lgb.Booster(model_str=model_path.read_text(encoding="utf-8"))
    except lgb.basic.LightGBMError as error:
        raise ModelError(f"{model_path}: not a LightGBM text model ({error})") from None
    if booster.num_feature() != len(names):
        raise ModelError(f"{model_path}: the booster has {booster.num_feature()} features, the manifest {len(names)}")
    training = _manifest_field(manifest, manifest_path, "training")
    model = TrainedModel(booster, quantiles, int(training["until"]), int(training["first_end"]), int(training["jobs"]))
    return LoadedModel(folder, manifest, model)


#: A model's name: a plain folder name in the models folder (no path, nothing hidden).
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class ModelCatalog:
    """The trained models a server serves (`--models DIR`): every model folder in DIR, loaded and verified once.

    A SPEC `NAME[:key=value,...]` whose name is a model folder builds that
    model's estimator (its parameters overridable from the SPEC); any other
    SPEC goes to the registry. Requests never reach the file system: a name
    is looked up among the folders loaded at start, so `../x` or `/abs/path`
    is only an unknown estimator, and a model is hashed once, not per request.
    """

    def __init__(self, models_dir: str | Path) -> None:
        self.root = Path(models_dir)
        if not self.root.is_dir():
            raise ModelError(f"{self.root}: models folder not found")
        self.models: dict[str, LoadedModel] = {}
        for folder in sorted(self.root.iterdir()):
            if not (folder / MANIFEST_FILE).is_file():
                continue
            if not MODEL_NAME.fullmatch(folder.name):
                raise ModelError(f"{folder}: a model folder's name must be letters, digits and ._- (at most 128)")
            if folder.name in available():
                raise ModelError(f"{folder}: named like the built-in estimator {folder.name!r}; rename the folder")
            self.models[folder.name] = load_model(folder)

    def describe(self) -> list[dict[str, Any]]:
        """Each model as the service lists its estimators (`ListEstimators`): name, parameters, where it came from."""
        return [
            {
                "name": name,
                "parameters": {key: str(value) for key, value in model.manifest["params"].items()},
                "evaluation_only": False,
                "allowed": True,
                "description": f"trained model {model.path} ({model.manifest['estimator']}, trained until "
                f"{model.manifest['training']['until_utc']})",
                "trained_model": True,
            }
            for name, model in self.models.items()
        ]

    def factory(self, spec: str) -> tuple[Estimator, str]:
        """The estimator `spec` names and its canonical SPEC (a model's keeps the model's name).

        An unknown name's error lists the models too: a user who mistyped one sees what is served.
        """
        name, overrides = parse_spec(spec)
        model = self.models.get(name)
        if model is None:
            try:
                estimator = make_estimator(spec)
            except SpecError as error:
                if name in available():
                    raise
                names = ", ".join(self.models) or "none"
                raise SpecError(f"{error}; trained models served: {names}") from None
            return estimator, estimator.spec
        served = model.estimator(overrides)
        return served, name + ":" + ",".join(f"{key}={value}" for key, value in served.get_params().items())
