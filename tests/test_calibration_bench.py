"""benchmarks/bench_calibration.py's fan-out gives each SPEC the answers of its own replay."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from predictor.offline import replay
from predictor.registry import make_estimator
from simulator.workloads.synthetic import generate_workload

SMALL = "lgbm-quantile:window=10d,retrain=2d,calibration=5d,min_train=200,trees=5"


def _bench():  # type: ignore[no-untyped-def]
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_calibration.py"
    spec = importlib.util.spec_from_file_location("bench_calibration", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_fanned_out_calibrations_answer_as_their_own_replays() -> None:
    bench = _bench()
    jobs = generate_workload(jobs=2500, procs=128, load=0.7, seed=11).jobs
    specs = [
        f"{SMALL},target_under=0.1",
        f"{SMALL},target_under=0.03,recalibrate=false,be_share=0.5",
        f"{SMALL},target_under=0,alpha=0.8",
    ]
    frames = bench.replay(jobs, f"{SMALL},target_under=0.062", specs)
    for spec in specs:
        alone = replay(make_estimator(spec), jobs)
        assert np.array_equal(frames[spec]["t_sched"].to_numpy(), alone["t_sched"].to_numpy()), spec
    quantiles = frames[specs[2]]
    modelled = quantiles.dropna()
    assert len(modelled) > 2000
    assert (modelled["q0.5"] <= modelled["q0.9"]).all() and (modelled["q0.9"] <= modelled["q0.95"]).all()


def test_a_spec_that_changes_the_model_cannot_fan_out() -> None:
    with pytest.raises(ValueError, match="trees"):
        _bench().fan_out(SMALL, [f"{SMALL.replace('trees=5', 'trees=6')}"])
