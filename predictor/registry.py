"""Build estimators from SPEC strings: `NAME` or `NAME:key=value,...`.

A SPEC is how users name an estimator on the command line, in the gRPC
contract and in reports, so parsing and validation live in one place.
"""
from __future__ import annotations

import inspect
from typing import Any

from predictor.estimators.base import Estimator


class SpecError(ValueError):
    """An estimator SPEC that names an unknown estimator or parameter, or a bad value."""


def _registry() -> dict[str, type[Estimator]]:
    # Imported here so that adding an estimator module needs one line, below.
    from predictor.estimators.baselines import OracleEstimator, RequestEstimator

    classes: list[type[Estimator]] = [RequestEstimator, OracleEstimator]
    try:
        from predictor.estimators.percentile import PercentileEstimator
        from predictor.estimators.last2 import LastTwoEstimator
        from predictor.estimators.meanstd import MeanStdEstimator
        classes += [PercentileEstimator, LastTwoEstimator, MeanStdEstimator]
    except ImportError:  # pragma: no cover - during bootstrap only
        pass
    try:
        from predictor.estimators.lgbm import LGBMQuantileEstimator
        classes.append(LGBMQuantileEstimator)
    except ImportError:  # pragma: no cover
        pass
    return {cls.name: cls for cls in classes}


def available() -> dict[str, type[Estimator]]:
    """Estimator classes by name."""
    return _registry()


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split a SPEC into its name and raw `key=value` parameters."""
    spec = spec.strip()
    if not spec:
        raise SpecError("empty estimator spec")
    name, _, rest = spec.partition(":")
    params: dict[str, str] = {}
    if rest.strip():
        for item in rest.split(","):
            key, sep, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not key or not value:
                raise SpecError(f"estimator spec {spec!r}: expected key=value, got {item!r}")
            if key in params:
                raise SpecError(f"estimator spec {spec!r}: parameter {key!r} given twice")
            params[key] = value
    return name.strip(), params


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
    name, raw_params = parse_spec(spec)
    classes = _registry()
    if name not in classes:
        raise SpecError(f"unknown estimator {name!r} in spec {spec!r}; known: {', '.join(sorted(classes))}")
    cls = classes[name]
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
