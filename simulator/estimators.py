"""The estimators a simulation can run: the predictor's registry (`predictor.registry`), and those that are built on
the simulator itself, which the predictor cannot know of (`adaptive`, `simulator.adaptive`).

A SPEC names either; `make_estimator` builds both. `bind_scheduler` gives an `adaptive` SPEC the run's scheduler
where the SPEC leaves it out, so that it tunes its estimates for the scheduler that uses them, in-process and
through the service alike (the service is sent the bound SPEC). `with_simulated` is the factory `tsched serve` hands
the service: the predictor's factory, plus `adaptive`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kernel.errors import SpecError
from kernel.specs import parse_spec
from predictor import registry

if TYPE_CHECKING:
    from predictor.estimators.base import Estimator
    from simulator.engine import SimulationConfig

#: The estimators of this layer, by SPEC name.
ADAPTIVE = "adaptive"
#: The `adaptive` parameters that say which scheduler its replays run, and how each is read off a run's config.
SCHEDULER_PARAMETERS = ("procs", "policy", "backfill", "backfill_order", "mode", "correction", "max_reservation_delay")


def available() -> dict[str, type[Estimator]]:
    """Estimator classes by name: the predictor's and this layer's."""
    from simulator.adaptive import AdaptiveEstimator

    return {**registry.available(), ADAPTIVE: AdaptiveEstimator}


def make_estimator(spec: str) -> Estimator:
    """The estimator a SPEC names, with its parameters validated (SpecError otherwise)."""
    if parse_spec(spec)[0] != ADAPTIVE:
        return registry.make_estimator(spec)
    from simulator.adaptive import AdaptiveEstimator

    return registry.build(AdaptiveEstimator, spec)


def bind_scheduler(spec: str, config: SimulationConfig) -> str:
    """`spec`, and for `adaptive` the scheduler parameters it leaves out filled in from `config` (the run's)."""
    name, params = parse_spec(spec)
    if name != ADAPTIVE:
        return spec
    from simulator.dynp import is_dynamic

    if is_dynamic(config.policy) and "policy" not in params:
        raise SpecError(f"estimator spec {spec!r}: adaptive replays fcfs, wfp, sjf or ljf; not {config.policy!r}")
    delay = config.max_reservation_delay
    run = {
        "procs": str(config.procs),
        "policy": config.policy,
        "backfill": config.backfill,
        "backfill_order": config.backfill_order,
        "mode": config.mode or "selective",
        "correction": config.correction,
        "max_reservation_delay": "none" if delay is None else f"{delay}s",
    }
    bound = {**params, **{key: value for key, value in run.items() if key not in params}}
    return f"{ADAPTIVE}:" + ",".join(f"{key}={value}" for key, value in bound.items())


def with_simulated(
    factory: Callable[[str], tuple[Estimator, str]],
) -> Callable[[str], tuple[Estimator, str]]:
    """A service's estimator factory that also builds `adaptive` (bound to a machine: `procs` given), held under
    its canonical SPEC; every other SPEC goes to `factory`."""

    def build(spec: str) -> tuple[Estimator, str]:
        if parse_spec(spec)[0] != ADAPTIVE:
            return factory(spec)
        estimator = make_estimator(spec)
        if not estimator.get_params()["procs"]:
            raise SpecError(
                f"estimator spec {spec!r}: adaptive replays the site's scheduler on its machine: give procs=N "
                "(and policy, backfill, backfill_order, mode, correction where they are not EASY-SJBF, regular)"
            )
        return estimator, estimator.spec

    return build
