"""Shared fixtures: the real traces (when present) and a small generated workload."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from service_support import Certificates, make_certificates

from simulator.workloads.synthetic import generate_workload
from simulator.workloads.trace import Trace

#: The Parallel Workloads Archive traces live outside the repository, in ../shared/traces.
TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
#: A live Slurm test's first use of its module's cluster runs every workload in real time (four of them, minutes
#: each), so it gets longer than the 15 minutes pyproject.toml allows any other test before calling it hung.
LIVE_SLURM_TIMEOUT = 3600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads the real traces is marked `traces`, so that `-m "not traces"` leaves it out; a live Slurm
    test gets its longer timeout."""
    for item in items:
        if "traces_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.traces)
        if item.get_closest_marker("slurm") is not None:
            item.add_marker(pytest.mark.timeout(LIVE_SLURM_TIMEOUT))


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The folder of real SWF traces; the test is skipped on a machine without it."""
    if not TRACES.is_dir():
        pytest.skip(f"real traces not available ({TRACES} is absent)")
    return TRACES


@pytest.fixture
def small_trace() -> Trace:
    """A generated trace of 2000 jobs on 128 processors (fresh per test: Trace holds mutable frames)."""
    return generate_workload(jobs=2000, procs=128, load=0.7, seed=7)


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """Test certificates (a CA, a server certificate for localhost, a client one), made with openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    return make_certificates(tmp_path_factory.mktemp("tls"))
