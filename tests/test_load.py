"""Load scaling: inter-arrival times divided by F, nothing else changed (simulator.workloads.load)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas.testing as pdt
import pytest

from kernel.errors import UsageError
from simulator.workloads.load import scale_load
from simulator.workloads.swf import read_swf
from simulator.workloads.synthetic import generate_workload, offered_load
from simulator.workloads.trace import SWFHeader, Trace

#: The job fields that load scaling must leave alone.
KEPT = ["job_id", "run", "procs", "t_req", "t_act", "user", "group", "executable", "queue", "status"]


def trace_with_submits(submits: list[int]) -> Trace:
    """A generated trace of len(`submits`) jobs, submitted at `submits` instead."""
    records = generate_workload(jobs=len(submits), procs=4, load=0.5, seed=1).records.assign(submit=submits)
    return Trace.from_records("<test>", SWFHeader(), records)


def test_inter_arrival_times_are_divided_by_the_factor() -> None:
    # Gaps 10, 30, 0, 61 from a first submit of 100: halved they are 5, 15, 0, 30.5; the offsets
    # from 100 (10, 40, 40, 101) halve to 5, 20, 20, 50.5, rounded half up to 51.
    scaled = scale_load(trace_with_submits([100, 110, 140, 140, 201]), 2.0)
    assert scaled.records["submit"].tolist() == [100, 105, 120, 120, 151]
    # A factor below 1 stretches: offsets x 4.
    stretched = scale_load(trace_with_submits([100, 110, 140, 140, 201]), 0.25)
    assert stretched.records["submit"].tolist() == [100, 140, 260, 260, 504]


def test_factor_one_changes_nothing_but_the_header_note() -> None:
    trace = generate_workload(jobs=500, procs=32, load=0.7, seed=3)
    scaled = scale_load(trace, 1.0)
    pdt.assert_frame_equal(scaled.records, trace.records)
    pdt.assert_frame_equal(scaled.jobs, trace.jobs)
    assert scaled.header.lines == [*trace.header.lines, scaled.header.lines[-1]]
    assert "load scaled by 1" in scaled.header.lines[-1]


@pytest.mark.parametrize("factor", [0.0, -1.5, float("nan"), float("inf")])
def test_a_factor_that_is_not_a_positive_number_is_refused(factor: float) -> None:
    with pytest.raises(UsageError, match="load factor"):
        scale_load(generate_workload(jobs=10, procs=4, load=0.5, seed=1), factor)


def assert_scaled(trace: Trace, factor: float, procs: int) -> None:
    """Order, integer seconds, kept fields and offered load x factor (within a second of rounding)."""
    scaled = scale_load(trace, factor)
    before, after = trace.jobs, scaled.jobs
    assert after["submit"].dtype == np.int64
    assert after["submit"].iloc[0] == before["submit"].iloc[0]
    # The records keep their order and their submit times never decrease where the original's did not.
    order = np.argsort(trace.records["submit"].to_numpy(), kind="stable")
    assert (np.diff(scaled.records["submit"].to_numpy()[order]) >= 0).all()
    pdt.assert_frame_equal(after[KEPT], before[KEPT])
    load_before = offered_load(before["submit"], before["procs"], before["t_act"], procs)
    load_after = offered_load(after["submit"], after["procs"], after["t_act"], procs)
    span_after = int(after["submit"].max() - after["submit"].min())
    assert load_after / load_before == pytest.approx(factor, rel=2 / span_after)


@pytest.mark.parametrize("factor", [0.5, 1.3, 2.0])
def test_offered_load_scales_on_the_synthetic_workload(factor: float) -> None:
    assert_scaled(generate_workload(jobs=3000, procs=128, load=0.6, seed=5), factor, 128)


@pytest.mark.slow
@pytest.mark.parametrize("factor", [0.8, 1.25])
def test_offered_load_scales_on_a_real_trace(traces_dir: Path, factor: float) -> None:
    trace = read_swf(traces_dir / "KTH-SP2-1996-2.1-cln.swf.gz")
    assert_scaled(trace, factor, trace.machine_procs())


def test_an_empty_trace_stays_empty() -> None:
    trace = Trace.from_records("<test>", SWFHeader(), generate_workload(jobs=5, procs=4, seed=1).records.iloc[[]])
    scaled = scale_load(trace, 2.0)
    assert scaled.records.empty and scaled.jobs.empty
