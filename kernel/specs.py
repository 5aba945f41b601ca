"""The one SPEC grammar: `NAME` or `NAME:key=value,...`, as estimators, policies and forecasters are named on
the command line, in the gRPC contract and in reports."""

from __future__ import annotations

from collections.abc import Sequence

from kernel.errors import SpecError


def parse_spec(spec: str, what: str = "estimator") -> tuple[str, dict[str, str]]:
    """Split a SPEC into its name and raw `key=value` parameters; SpecError names `what` the SPEC is."""
    spec = spec.strip()
    if not spec:
        raise SpecError(f"empty {what} spec")
    name, _, rest = spec.partition(":")
    return name.strip(), key_values(rest.split(",") if rest.strip() else [], f"{what} spec {spec!r}")


def key_values(items: Sequence[str], label: str) -> dict[str, str]:
    """`key=value` items as a mapping; SpecError starting with `label` (what the SPEC is) on a malformed or
    repeated item."""
    params: dict[str, str] = {}
    for item in items:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key or not value:
            raise SpecError(f"{label}: expected key=value, got {item.strip()!r}")
        if key in params:
            raise SpecError(f"{label}: parameter {key!r} given twice")
        params[key] = value
    return params
