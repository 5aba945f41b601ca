"""What the service says about itself, as typed values shared by the core, the servicer, the client and the CLI.

The core builds them, the servicer writes them into messages and the client
reads them back (`codec`), and the command line prints them
(`dataclasses.asdict` gives their JSON form). They are frozen: each is what
the server held when it was asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from predictor.service.live import LiveSummary


@dataclass(frozen=True)
class EstimatorView:
    """An estimator a server can build (`ListEstimators`): a built-in, or a trained model it was started with."""

    name: str
    #: Each parameter's default, as written in a SPEC.
    parameters: Mapping[str, str]
    #: The oracle: never served (evaluations run it in-process).
    evaluation_only: bool
    #: The server answers with it.
    allowed: bool
    description: str
    trained_model: bool


@dataclass(frozen=True)
class Description:
    """The estimators a server can build, its default SPECs, and what one namespace holds (`ListEstimators`)."""

    estimators: tuple[EstimatorView, ...]
    #: The first answers requests that name no estimator.
    default_specs: tuple[str, ...]
    namespace_exists: bool = False
    #: The canonical SPECs of the estimators the namespace holds.
    namespace_specs: tuple[str, ...] = ()
    completions: int = 0
    clock: int = 0


@dataclass(frozen=True)
class NamespaceView:
    """One namespace in a listing (`ListNamespaces`, `tsched namespaces list`)."""

    name: str
    completions: int
    clock: int
    #: The canonical SPECs it holds.
    estimators: tuple[str, ...]


@dataclass(frozen=True)
class NamespaceStatus:
    """A namespace at a glance: its history, clock, answers and live scores (metrics, `tsched status`)."""

    name: str
    completions: int
    clock: int
    predictions: int
    fallbacks: int
    pending: int
    estimators: tuple[LiveSummary, ...]


@dataclass(frozen=True)
class CallCount:
    """Calls a server answered since it started, by RPC and status code name."""

    rpc: str
    code: str
    count: int


@dataclass(frozen=True)
class ServiceStatus:
    """How a namespace and the server are doing (`Status`, `tsched status`): every field, zeros included."""

    namespace: str
    namespace_exists: bool
    completions: int
    clock: int
    predictions: int
    fallbacks: int
    estimators: tuple[LiveSummary, ...]
    namespaces: int
    training_runs: int
    calls: tuple[CallCount, ...]
