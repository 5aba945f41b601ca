"""Issue 28's harm checks as scripts/scheduling_adaptive.py applies them to a trace adaptive was not designed on."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pandas as pd
import pytest
from script_support import imported_script


@pytest.fixture(scope="module")
def script() -> Iterator[ModuleType]:
    with imported_script("scheduling_adaptive") as module:
        yield module


def runs(rows: dict[str, tuple[float, float, float]], trace: str = "T") -> pd.DataFrame:
    """One replicate of `trace`: per configuration label, (AVEbsld, AWRT, longest wait)."""
    return pd.DataFrame(
        [
            {"trace": trace, "replicate": 0, "configuration": label, "avg_bounded_slowdown": bsld, "avg_wait": 0.0}
            | {"awrt": awrt, "max_wait": longest, "cpu_seconds": 1.0}
            for label, (bsld, awrt, longest) in rows.items()
        ]
    )


def references(script: ModuleType) -> dict[str, tuple[float, float, float]]:
    """EASY and EASY-SJBF with requests: AVEbsld 100 and 90, AWRT 1000 s, longest wait 10 s."""
    return {script.EASY: (100.0, 1000.0, 10.0), script.SJBF: (90.0, 1000.0, 10.0)}


def checks(script: ModuleType, table: pd.DataFrame) -> list[str]:
    """The verdict lines of `summarise`."""
    return [line for line in script.summarise(table).splitlines() if line.startswith("T, ")]


def test_each_check_is_held_to_its_own_reference(script: ModuleType) -> None:
    """adaptive gains 30% (within a point of last2's 30.5%), but its AWRT is above EASY-SJBF's and its longest
    wait over twice EASY's: the two checks it misses are named, the two it meets are not."""
    rows = references(script) | {script.LAST2: (69.5, 1000.0, 10.0), script.ADAPTIVE: (70.0, 1001.0, 20.5)}
    (line,) = checks(script, runs(rows))
    assert line.startswith("T, EASY++ adaptive +30.0%")
    assert "AVEbsld no worse than EASY's: met" in line
    assert "within 1 point of the better of EASY-SJBF and last2 (+30.5%): met" in line
    assert "AWRT no worse than EASY-SJBF's (1.001x): MISSED" in line
    assert "longest wait within twice EASY's (x2.05): MISSED" in line


def test_a_bounded_adaptive_is_compared_with_last2_under_the_same_bound(script: ModuleType) -> None:
    """With the bound, last2's reference is the bounded run (40% here), not the unbounded one (20%)."""
    base = script.Baseline(script.ADAPTIVE, "adaptive", "regular", "sjf", "request", {})
    bounded = script.labelled(base, 7200)
    assert bounded == f"{script.ADAPTIVE}, bound 2h"
    assert script.labelled(base, 90) == f"{script.ADAPTIVE}, bound 90s"
    requests = script.Baseline(script.EASY, "request", "none", "queue", "request", {})
    assert script.labelled(requests, 7200) == script.EASY  # on requests the bound never acts
    rows = references(script) | {
        script.LAST2: (80.0, 1000.0, 10.0),
        f"{script.LAST2}, bound 2h": (60.0, 1000.0, 10.0),
        bounded: (65.0, 1000.0, 10.0),
    }
    (line,) = checks(script, runs(rows))
    assert "within 1 point of the better of EASY-SJBF and last2 (+40.0%): MISSED" in line


def test_a_trace_on_which_no_job_waits_meets_the_longest_wait_check(script: ModuleType) -> None:
    assert script.times(0.0, 0.0) == 1.0
    assert script.times(5.0, 0.0) == float("inf")
    rows = {
        script.EASY: (1.0, 10.0, 0.0),
        script.SJBF: (1.0, 10.0, 0.0),
        script.LAST2: (1.0, 10.0, 0.0),
        script.ADAPTIVE: (1.0, 10.0, 0.0),
    }
    (line,) = checks(script, runs(rows))
    assert "longest wait within twice EASY's (x1.00): met" in line
