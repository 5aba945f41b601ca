"""lgbm-sched: lgbm-quantile's distribution at a scheduling quantile, scaled by a safety margin."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernel.errors import SpecError
from predictor.estimators.lgbm import LGBMSchedEstimator
from predictor.estimators.lgbm.store import train
from predictor.offline import replay
from predictor.registry import make_estimator
from simulator.workloads.synthetic import generate_workload

#: Small enough to train in a blink on a few thousand jobs (as in test_lgbm).
SMALL = "window=10d,retrain=2d,calibration=5d,min_train=200,trees=5"


@pytest.fixture(scope="module")
def jobs() -> pd.DataFrame:
    """3000 generated jobs over about 17 days."""
    return generate_workload(jobs=3000, procs=128, load=0.7, seed=7).jobs


def test_defaults_are_a_low_quantile_with_a_margin_and_no_calibration() -> None:
    estimator = make_estimator("lgbm-sched")
    assert isinstance(estimator, LGBMSchedEstimator)
    assert (estimator.alpha, estimator.scale, estimator.target_under) == (0.3, 1.0, 0.0)
    assert make_estimator(estimator.spec).get_params() == estimator.get_params()


@pytest.mark.parametrize("spec", ["lgbm-sched:scale=0", "lgbm-sched:scale=101", "lgbm-sched:alpha=1"])
def test_bad_parameters_are_rejected(spec: str) -> None:
    with pytest.raises(SpecError):
        make_estimator(spec)


@pytest.mark.slow
def test_by_default_it_is_lgbm_quantile_uncalibrated_at_the_0_3_quantile(jobs: pd.DataFrame) -> None:
    sched = replay(make_estimator(f"lgbm-sched:{SMALL}"), jobs)
    quantile = replay(make_estimator(f"lgbm-quantile:{SMALL},alpha=0.3,target_under=0,recalibrate=false"), jobs)
    pd.testing.assert_frame_equal(sched, quantile)


@pytest.mark.slow
def test_the_margin_multiplies_the_quantile_within_the_request(jobs: pd.DataFrame) -> None:
    plain = replay(make_estimator(f"lgbm-sched:{SMALL},scale=1"), jobs)
    scaled = replay(make_estimator(f"lgbm-sched:{SMALL},scale=1.5"), jobs)
    modelled = ~plain["fallback"]
    assert modelled.mean() > 0.8
    expected = np.clip(np.rint(plain["t_req"] * np.minimum(1.0, plain["factor"] * 1.5)), 1, plain["t_req"])
    assert (scaled.loc[modelled, "t_sched"] == expected[modelled]).all()
    assert (scaled.loc[modelled, "factor"] == np.minimum(1.0, plain.loc[modelled, "factor"] * 1.5)).all()
    assert (scaled.loc[~modelled, "t_sched"] == plain.loc[~modelled, "t_req"]).all()


@pytest.mark.slow
def test_a_lower_quantile_never_estimates_more(jobs: pd.DataFrame) -> None:
    low = replay(make_estimator(f"lgbm-sched:{SMALL},alpha=0.2"), jobs)
    high = replay(make_estimator(f"lgbm-sched:{SMALL},alpha=0.8"), jobs)
    assert (low["t_sched"] <= high["t_sched"]).all()
    assert (low["t_sched"] < high["t_sched"]).mean() > 0.3


@pytest.mark.slow
def test_causality_future_runtimes_do_not_change_earlier_predictions(jobs: pd.DataFrame) -> None:
    cutoff = int(jobs["submit"].quantile(0.6))
    changed = jobs.copy()
    later = changed["end"] > cutoff
    changed.loc[later, "t_act"] = np.minimum(changed["t_req"], changed["t_act"] * 2 + 10)[later]
    changed.loc[later, "end"] = (changed["submit"] + changed["wait"].clip(lower=0) + changed["t_act"])[later]
    first = replay(make_estimator(f"lgbm-sched:{SMALL}"), jobs)
    second = replay(make_estimator(f"lgbm-sched:{SMALL}"), changed)
    before = (jobs.sort_values(["submit", "job_id"], kind="stable")["submit"] <= cutoff).to_numpy()
    assert (~first["fallback"].to_numpy()[before]).any()
    columns = ["t_sched", "factor", "basis", "fallback"]
    pd.testing.assert_frame_equal(first.loc[before, columns], second.loc[before, columns])
    assert not first["t_sched"].equals(second["t_sched"])


def test_train_keeps_lgbm_quantile_models_only(tmp_path: Path) -> None:
    trace = generate_workload(jobs=300, procs=64, seed=3)
    with pytest.raises(SpecError, match="lgbm-sched"):
        train(trace, tmp_path, "lgbm-sched", until=86_400)
