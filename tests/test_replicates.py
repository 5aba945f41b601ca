"""Replicates: every submission moved by at most the jitter, nothing else changed (simulator.workloads.replicates)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas.testing as pdt
import pytest

from kernel.errors import UsageError
from simulator.workloads.replicates import replicate_trace
from simulator.workloads.swf import write_swf
from simulator.workloads.synthetic import generate_workload
from tsched.cli import main

#: The job fields a replicate must leave alone.
KEPT = ["job_id", "run", "procs", "t_req", "t_act", "user", "group", "executable", "queue", "status"]


def test_replicate_zero_is_the_trace_itself() -> None:
    trace = generate_workload(jobs=200, procs=16, seed=2)
    assert replicate_trace(trace, 0) is trace


def test_a_replicate_moves_submissions_by_at_most_the_jitter_and_keeps_every_other_field() -> None:
    trace = generate_workload(jobs=3000, procs=64, load=0.8, seed=4)
    moved = replicate_trace(trace, 3, jitter=7)
    offsets = moved.records["submit"].to_numpy() - trace.records["submit"].to_numpy()
    first = trace.records["submit"].min()
    assert np.abs(offsets).max() <= 7 and (offsets != 0).mean() > 0.8  # 14 of 15 offsets are not 0
    assert moved.records["submit"].min() >= first  # never before the trace's first submission
    by_id = moved.jobs.set_index("job_id").loc[trace.jobs["job_id"]].reset_index()
    pdt.assert_frame_equal(by_id[KEPT], trace.jobs[KEPT])
    assert "replicate 3" in moved.header.lines[-1] and "7 s" in moved.header.lines[-1]
    assert (np.diff(moved.jobs["submit"].to_numpy()) >= 0).all()  # replayed in the new submission order


def test_replicates_are_reproducible_and_differ_by_seed() -> None:
    trace = generate_workload(jobs=500, procs=32, seed=1)
    pdt.assert_frame_equal(replicate_trace(trace, 5).records, replicate_trace(trace, 5).records)
    assert not replicate_trace(trace, 5).records["submit"].equals(replicate_trace(trace, 6).records["submit"])
    pdt.assert_frame_equal(replicate_trace(trace, 5, jitter=0).jobs, trace.jobs)


@pytest.mark.parametrize(("replicate", "jitter"), [(-1, 10), (1, -3)])
def test_a_negative_replicate_or_jitter_is_refused(replicate: int, jitter: int) -> None:
    with pytest.raises(UsageError, match="replicate" if replicate < 0 else "jitter"):
        replicate_trace(generate_workload(jobs=10, procs=4, seed=1), replicate, jitter)


def test_simulate_runs_a_replicate_and_records_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.swf"
    write_swf(generate_workload(jobs=2000, procs=32, load=0.9, seed=8), path)
    summaries = []
    for replicate in (0, 1, 2):
        out = tmp_path / f"r{replicate}.json"
        arguments = ["simulate", "--trace", str(path), "--backfill-order", "sjf", "--replicate", str(replicate)]
        assert main([*arguments, "--jitter", "30", "--json", str(out)]) == 0
        summaries.append(json.loads(out.read_text()))
    assert "replicate 2 (±30 s)" in capsys.readouterr().out
    assert [(s["replicate"], s["jitter"]) for s in summaries] == [(0, 0), (1, 30), (2, 30)]
    assert all(s["jobs"] == 2000 for s in summaries)
    # The same jobs on the same machine, submitted seconds apart: a different schedule.
    assert len({s["avg_wait"] for s in summaries}) == 3
