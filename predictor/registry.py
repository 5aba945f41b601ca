"""Build estimators from SPEC strings (`NAME` or `NAME:key=value,...`, the grammar of `kernel.specs`): the
names, and each parameter converted to the type its default has and validated by the estimator."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from kernel.errors import SpecError
from kernel.specs import parse_spec
from predictor.estimators.base import Estimator

#: Estimator name -> "module:class". Modules are imported only when their
#: estimator is asked for, so `request` does not pay for importing LightGBM.
_ESTIMATORS = {
    "request": "predictor.estimators.baselines:RequestEstimator",
    "oracle": "predictor.estimators.baselines:OracleEstimator",
    "percentile": "predictor.estimators.percentile:PercentileEstimator",
    "last2": "predictor.estimators.last2:LastTwoEstimator",
    "mean-std": "predictor.estimators.meanstd:MeanStdEstimator",
    "lgbm-quantile": "predictor.estimators.lgbm:LGBMQuantileEstimator",
    "lgbm-sched": "predictor.estimators.lgbm:LGBMSchedEstimator",
}


def _load(name: str) -> type[Estimator]:
    module, _, cls = _ESTIMATORS[name].partition(":")
    loaded: type[Estimator] = getattr(importlib.import_module(module), cls)
    return loaded


def available() -> dict[str, type[Estimator]]:
    """Estimator classes by name."""
    return {name: _load(name) for name in _ESTIMATORS}


def _convert(spec: str, key: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        kind = type(default).__name__
        raise SpecError(f"estimator spec {spec!r}: parameter {key!r} must be {kind}, got {raw!r}") from None
    return raw


def make_estimator(spec: str) -> Estimator:
    """Instantiate the estimator a SPEC names, with its parameters validated."""
    name = parse_spec(spec)[0]
    if name not in _ESTIMATORS:
        raise SpecError(f"unknown estimator {name!r} in spec {spec!r}; known: {', '.join(sorted(_ESTIMATORS))}")
    return build(_load(name), spec)


def build(cls: type[Estimator], spec: str) -> Estimator:
    """Instantiate `cls` with the parameters of `spec` (its name is `cls`'s), each converted to the type of its
    default and validated: how a registry of a higher layer builds the estimators this one cannot know of."""
    name, raw_params = parse_spec(spec)
    signature = inspect.signature(cls.__init__)
    accepted = {p.name: p.default for p in signature.parameters.values() if p.name != "self"}
    kwargs: dict[str, Any] = {}
    for key, raw in raw_params.items():
        if key not in accepted:
            known = ", ".join(sorted(accepted)) or "none"
            raise SpecError(f"estimator {name!r} has no parameter {key!r} (parameters: {known})")
        kwargs[key] = _convert(spec, key, raw, accepted[key])
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise SpecError(f"estimator spec {spec!r}: {error}") from None
