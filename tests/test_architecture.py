"""The layout's rules, checked on the source: no import cycle, and the dependencies that must not exist.

Imports inside functions count: a lazy import is still a dependency. CI also
runs import-linter on the contracts in pyproject.toml; this test keeps the
same rules in the plain test run, without the linter installed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The layers, top first: a package may import only the packages below it (pyproject.toml's `layers` contract).
LAYERS = ("tsched", "sites", "simulator", "predictor", "kernel")
PACKAGES = LAYERS
GENERATED = "predictor/proto/tsched"


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if relative.as_posix().startswith(GENERATED):
                continue
            parts = list(relative.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(path: Path, module: str) -> Iterator[str]:
    """Every module name an import statement in `path` names (absolute, with `from X import Y` as X and X.Y)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(path, module):
            if (ROOT / name.replace(".", "/")).is_dir() and name not in modules:
                continue  # a namespace package (no __init__): `from a.b import module` names only the module
            target = name
            while target and target not in modules:  # `from a.b import name` where name is not a module
                target = target.rpartition(".")[0]
            if target and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_there_is_no_import_cycle(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def reaches(graph: dict[str, set[str]], source: str, forbidden: str) -> list[str]:
    """Modules under `source` that import a module under `forbidden` directly."""
    return sorted(
        module
        for module, targets in graph.items()
        if (module == source or module.startswith(source + "."))
        and any(target == forbidden or target.startswith(forbidden + ".") for target in targets)
    )


@pytest.mark.parametrize(
    ("source", "forbidden"),
    [
        *[(lower, upper) for position, lower in enumerate(LAYERS) for upper in LAYERS[:position]],
        *[
            (scheduler, other)
            for scheduler in (
                "simulator.policies",
                "simulator.backfill",
                "simulator.machine",
                "simulator.jobs",
                "simulator.dynp",
                "simulator.scheduler",
                "simulator.cluster",
                "simulator.nodes",
                "simulator.nodeplan",
                "simulator.slurmsched",
            )
            for other in ("simulator.engine", "simulator.evaluation", "simulator.experiment", "predictor")
        ],
        ("predictor.estimators", "predictor.service"),
        ("simulator.engine", "simulator.evaluation"),
    ],
)
def test_forbidden_dependencies_are_absent(graph: dict[str, set[str]], source: str, forbidden: str) -> None:
    assert reaches(graph, source, forbidden) == []


def test_the_service_domain_core_knows_nothing_of_grpc() -> None:
    modules = project_modules()
    for module in ("predictor.service.core", "predictor.service.state"):
        names = set(imported_names(modules[module], module))
        assert not {name for name in names if name.split(".")[0] == "grpc" or name.startswith("predictor.proto")}


def test_the_graph_sees_lazy_imports(graph: dict[str, set[str]]) -> None:
    assert "predictor.estimators.lgbm.store" in graph["predictor.service.server"]  # imported inside serve()


def test_the_command_line_starts_without_lightgbm() -> None:
    """`tsched --help` and a `request` replay must not pay LightGBM's import (about 1.2 s)."""
    import subprocess
    import sys

    probe = "import sys; from tsched.cli import build_parser; build_parser(); print('lightgbm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "False\n"
