"""Estimator SPECs as clients write them: resolved once per spelling, held to this server's limits.

A SPEC names an estimator and its parameters (`kernel.specs`); the factory
turns it into an estimator and the canonical SPEC it is held and recorded
under. A client's SPEC is checked once per spelling (`--max-specs`
spellings kept) and may not ask for more than the server's
`--estimator-limit` caps. Evaluation-only estimators (the oracle, which
needs the actual runtimes) are never served: an evaluation runs them
in-process.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kernel.errors import InvalidRequest, ModelError, SpecError, UsageError
from kernel.specs import parse_spec
from predictor.estimators.base import Estimator
from predictor.registry import available, make_estimator
from predictor.service.limits import ESTIMATOR_CAPS, Limits
from predictor.service.quoting import quote
from predictor.service.views import EstimatorView

log = logging.getLogger("tsched.service")

#: Builds the estimator a SPEC names, and says its canonical SPEC: the name it is held and recorded under.
EstimatorFactory = Callable[[str], tuple[Estimator, str]]

#: The longest SPEC a client may send (the longest canonical SPEC, lgbm-quantile's, is about 240 characters).
MAX_SPEC_LENGTH = 512
#: Effects of `predict` that change later answers: predictions by such an estimator are recorded.
RECORDED_EFFECTS = frozenset({"submissions", "model"})


def registry_factory(spec: str) -> tuple[Estimator, str]:
    """The registry's estimators (`predictor.registry`), held under their own SPEC."""
    estimator = make_estimator(spec)
    return estimator, estimator.spec


@dataclass(frozen=True)
class ResolvedSpec:
    """A SPEC as a client wrote it, the canonical SPEC it stands for, and what its predictions do."""

    written: str
    canonical: str
    #: Its predictions change its later answers, so they are recorded as submissions.
    records: bool
    #: Its predictions change its state at all, so recorded submissions are replayed into it.
    replays: bool


class SpecBook:
    """The SPECs a server answers to: its defaults, the client spellings seen lately, and its caps."""

    def __init__(self, factory: EstimatorFactory, limits: Limits, default_specs: Sequence[str]) -> None:
        self._factory = factory
        self._caps = parse_caps(limits.estimator_limit)
        self._max_specs = limits.max_specs
        self._cache: dict[str, ResolvedSpec] = {}
        self._lock = threading.Lock()
        if not default_specs:
            raise InvalidRequest("the server needs at least one default estimator SPEC")
        #: The estimators built in every namespace; the first answers requests that name none.
        self.defaults = [self.resolve(spec, "default estimator", client=False) for spec in default_specs]

    def __len__(self) -> int:
        """Client spellings held."""
        return len(self._cache)

    def spec(self, written: str) -> ResolvedSpec:
        """The SPEC a client wrote, parsed and checked once per spelling ("" is the first default)."""
        if not written:
            return self.defaults[0]
        cached = self._cache.get(written)
        if cached is not None:
            return cached
        if len(written) > MAX_SPEC_LENGTH:
            raise InvalidRequest(f"estimator: a SPEC has at most {MAX_SPEC_LENGTH} characters; got {len(written):,}")
        resolved = self.resolve(written, "estimator", client=True)
        with self._lock:
            while len(self._cache) >= self._max_specs:
                del self._cache[next(iter(self._cache))]
            self._cache[written] = resolved
        return resolved

    def resolve(self, written: str, where: str, client: bool) -> ResolvedSpec:
        """Parse and validate a SPEC; refuse evaluation-only estimators, and a client's SPEC asking for more
        than this server's estimator limits."""
        try:
            probe, canonical = self._factory(written)
        except (SpecError, ModelError) as error:  # their messages show the SPEC whole: show the start of it
            raise InvalidRequest(f"{where}: {str(error).replace(repr(written), quote(written, 100))}") from None
        if probe.evaluation_only:
            raise InvalidRequest(
                f"{where}: {probe.name!r} is for evaluation only (it needs the actual runtimes): the service never "
                "serves it; an evaluation runs it in-process"
            )
        if client:
            self._check_caps(written, probe, where)
        effects = probe.predict_effects
        return ResolvedSpec(written, canonical, bool(effects & RECORDED_EFFECTS), bool(effects))

    def build(self, canonical: str) -> Estimator:
        """A fresh estimator for a canonical SPEC."""
        estimator, _ = self._factory(canonical)
        return estimator

    def _check_caps(self, written: str, probe: Estimator, where: str) -> None:
        caps = caps_of(self._caps, type(probe))
        params = probe.get_params()
        unknown = sorted(key for key in caps if not isinstance(params.get(key), int | float))
        if unknown:
            log.error("--estimator-limit names %s, which %s has no number for", ", ".join(unknown), probe.name)
            raise InvalidRequest(f"{where}: this server's --estimator-limit for {probe.name} is misconfigured")
        for key in parse_spec(written)[1]:
            if key in caps and params[key] > caps[key]:
                raise InvalidRequest(
                    f"{where}: {key}={params[key]} is above this server's limit for {probe.name} ({caps[key]:g}); "
                    "see --estimator-limit"
                )


def caps_of(caps: dict[str, dict[str, float]], estimator: type[Estimator]) -> dict[str, float]:
    """The caps of `estimator`: its own entry, else its nearest parent's (a trained model's class, a
    subclass), else none."""
    for cls in estimator.__mro__:
        name = getattr(cls, "name", None)
        if isinstance(name, str) and name in caps:
            return caps[name]
    return {}


def built_in_views() -> list[EstimatorView]:
    """The registry's estimators, by name, as `ListEstimators` lists them."""
    return [_view(cls) for _, cls in sorted(available().items())]


def _view(cls: type[Estimator]) -> EstimatorView:
    parameters = inspect.signature(cls.__init__).parameters
    docstring = inspect.getdoc(cls) or ""
    return EstimatorView(
        name=cls.name,
        parameters={name: str(parameters[name].default) for name in cls.param_names()},
        evaluation_only=cls.evaluation_only,
        allowed=not cls.evaluation_only,
        description=docstring.partition("\n")[0],
        trained_model=False,
    )


def parse_caps(texts: Iterable[str]) -> dict[str, dict[str, float]]:
    """The built-in caps (`ESTIMATOR_CAPS`) with the `--estimator-limit` values (`NAME:param=max,...`) over
    them, as {name: {param: max}}.

    The parameter names are checked when the estimator is first asked for, so
    that starting a server does not import every estimator (LightGBM's import
    alone takes half a second).
    """
    caps = {name: dict(params) for name, params in ESTIMATOR_CAPS.items()}
    for text in texts:
        try:
            name, params = parse_spec(text)
            caps.setdefault(name, {}).update({key: float(value) for key, value in params.items()})
        except (SpecError, ValueError):
            raise UsageError(f"--estimator-limit {text!r}: expected NAME:param=number,...") from None
        if not params:
            raise UsageError(f"--estimator-limit {text!r}: names no parameter")
    return caps
