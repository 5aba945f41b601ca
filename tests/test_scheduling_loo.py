"""Leave-one-trace-out (scripts/scheduling_loo.py): a held-out trace's setting is chosen on the other traces only."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pandas as pd
import pytest
from script_support import imported_script


@pytest.fixture(scope="module")
def loo() -> Iterator[ModuleType]:
    with imported_script("scheduling_loo") as module:
        yield module


def runs(bsld: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    """Runs from AVEbsld per trace, configuration and replicate."""
    return pd.DataFrame(
        [
            {"trace": trace, "replicate": replicate, "configuration": configuration, "avg_bounded_slowdown": value}
            for trace, by_configuration in bsld.items()
            for configuration, values in by_configuration.items()
            for replicate, value in enumerate(values)
        ]
    )


def test_the_held_out_trace_never_chooses_its_own_setting(loo: ModuleType) -> None:
    """alpha 0.2 is by far the best on trace C and the default (0.3) on A and B. Held out, C is shown with the
    default (A and B choose it), though hindsight on C says 0.2; A, held out, gets 0.2 (B and C choose it)."""
    default, low = loo.label(0.3), loo.label(0.2)
    easy, sjbf, last2 = loo.EASY, loo.SJBF, loo.LAST2
    traces = {
        "A": {easy: [100, 100], sjbf: [80, 80], last2: [70, 70], default: [50, 52], low: [60, 61]},
        "B": {easy: [100, 100], sjbf: [80, 80], last2: [70, 70], default: [40, 42], low: [45, 47]},
        "C": {easy: [100, 100], sjbf: [80, 80], last2: [70, 70], default: [60, 60], low: [20, 20]},
    }
    gains = loo.improvements(runs(traces), [sjbf, last2, low, default]).dropna()
    table = loo.leave_one_trace_out(gains)
    assert table.loc["C", ["chosen", "hindsight"]].tolist() == [default, low]
    assert table.loc["C", ["chosen_mean", "hindsight_mean"]].tolist() == pytest.approx([0.4, 0.8])
    assert table.loc["A", "chosen"] == low and table.loc["A", "chosen_mean"] == pytest.approx(0.395)
    assert table.loc["B", "chosen"] == low  # A's and C's mean: 0.2 gives 0.60, 0.3 gives 0.45
    held = loo.per_replicate(gains, table["chosen"])  # per replicate, each trace under its own held-out choice
    assert held.tolist() == pytest.approx([(0.40 + 0.55 + 0.40) / 3, (0.39 + 0.53 + 0.40) / 3])
