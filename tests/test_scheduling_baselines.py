"""The simulator against Gaussier et al.'s published AVEbsld (SC'15), through scripts/scheduling_baselines.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "scheduling_baselines.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scheduling_baselines", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


baselines = _load_script()

#: The configurations the simulator must reproduce within 5% on every trace.
WITHIN_FIVE_PERCENT = ("EASY, users' requests", "EASY-SJBF, users' requests", "EASY++, clairvoyant")


@pytest.mark.slow
@pytest.mark.parametrize("trace", ["KTH-SP2", "SDSC-SP2"])
def test_published_easy_baselines_are_reproduced_within_five_percent(traces_dir: Path, trace: str) -> None:
    chosen = tuple(b for b in baselines.BASELINES if b.label in WITHIN_FIVE_PERCENT)
    assert len(chosen) == len(WITHIN_FIVE_PERCENT)
    measured = baselines.average_bounded_slowdowns(traces_dir / baselines.TRACES[trace], chosen)
    differences = {
        b.label: baselines.difference(ours, b.published[trace]) for b, ours in zip(chosen, measured, strict=True)
    }
    assert all(abs(d) < 5 for d in differences.values()), differences


def test_difference_is_relative_to_the_published_value() -> None:
    assert baselines.difference(105.0, 100.0) == pytest.approx(5.0)
    assert baselines.difference(45.0, 50.0) == pytest.approx(-10.0)
