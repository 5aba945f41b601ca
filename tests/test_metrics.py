"""Scheduling metrics and estimate scoring, against values worked out by hand (docs/definitions.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor.scoring import accuracy, categories, summarize
from simulator.metrics import SCHEDULING_METRICS, prediction_metrics, scheduling_metrics, widest_wait_percentile


def three_jobs() -> pd.DataFrame:
    """A simulation's per-job table on 4 processors.

    job  size  submit  start  end  wait  run  t_req
     1     2      0      0    100    0   100   200
     2     4     10    100    105   90     5    10
     3     1     50    105    105   55     0    60
    """
    table = pd.DataFrame(
        {
            "job_id": [1, 2, 3],
            "size": [2, 4, 1],
            "submit": [0, 10, 50],
            "start": [0, 100, 105],
            "end": [100, 105, 105],
            "t_req": [200, 10, 60],
        }
    )
    table["wait"] = table["start"] - table["submit"]
    table["run"] = table["end"] - table["start"]
    table["t_sched"] = [150, 10, 60]
    return table


#: The WFP weights of the three jobs, (wait / t_req)^3 x size: 0, (90/10)^3 x 4 = 2916, (55/60)^3 x 1.
WFP_WEIGHTS = (0.0, 2916.0, (55 / 60) ** 3)
WFP_WEIGHTED_WAIT = (90 * WFP_WEIGHTS[1] + 55 * WFP_WEIGHTS[2]) / sum(WFP_WEIGHTS)


def test_scheduling_metrics_of_three_jobs():
    metrics = scheduling_metrics(three_jobs(), procs=4, policy="wfp")
    # responses 100, 95, 55; slowdowns 100/100, 95/5, 55/max(0, 1); bounded 1, 95/10, max(1, 55/10)
    assert metrics["avg_wait"] == pytest.approx((0 + 90 + 55) / 3)
    assert metrics["avg_response"] == pytest.approx((100 + 95 + 55) / 3)
    assert metrics["avg_slowdown"] == pytest.approx((1 + 19 + 55) / 3)
    assert metrics["avg_bounded_slowdown"] == pytest.approx((1 + 9.5 + 5.5) / 3)
    assert metrics["weighted_wait"] == pytest.approx(WFP_WEIGHTED_WAIT)
    # processor-seconds 2 x 100 + 4 x 5 + 0 over 4 processors x (105 - 0)
    assert metrics["utilization"] == pytest.approx(220 / 420)
    assert metrics["makespan"] == 105


# Tang's Eq. 4 weighs each wait with the job's priority score at its start under the policy used:
# FCFS, the wait itself: (0^2 + 90^2 + 55^2) / (0 + 90 + 55); SJF, 1 / t_req: (0/200 + 90/10 + 55/60) /
# (1/200 + 1/10 + 1/60); WFP, its own score. `weighted_wait_wfp` is the WFP-weighted wait whatever the policy.
@pytest.mark.parametrize(
    ("policy", "weighted_wait"),
    [
        ("fcfs", (90**2 + 55**2) / (90 + 55)),
        ("sjf", (90 / 10 + 55 / 60) / (1 / 200 + 1 / 10 + 1 / 60)),
        ("wfp", WFP_WEIGHTED_WAIT),
    ],
)
def test_weighted_wait_uses_the_priority_score_of_the_policy_used(policy: str, weighted_wait: float) -> None:
    metrics = scheduling_metrics(three_jobs(), procs=4, policy=policy)
    assert metrics["weighted_wait"] == pytest.approx(weighted_wait)
    assert metrics["weighted_wait_wfp"] == pytest.approx(WFP_WEIGHTED_WAIT)


def test_area_weighted_response_and_longest_wait_of_three_jobs() -> None:
    metrics = scheduling_metrics(three_jobs(), procs=4, policy="fcfs")
    # areas (size x run) 2 x 100, 4 x 5, 1 x 0 weigh the responses 100, 95, 55: the empty job weighs nothing
    assert metrics["awrt"] == pytest.approx((200 * 100 + 20 * 95) / (200 + 20))
    assert metrics["max_wait"] == 90
    # the widest tenth of three jobs is the widest job (ceil(0.3) = 1): job 2, which waited 90 s
    assert metrics["p95_wait_widest"] == 90


def test_widest_tenth_takes_every_job_as_wide_as_the_cut() -> None:
    """20 jobs: the tenth is 2 jobs, but the 2nd and 3rd widest tie (4 processors), so 3 jobs count."""
    size = np.array([8, 4, 4] + [1] * 17)
    wait = np.array([100.0, 0.0, 50.0] + [10_000.0] * 17)  # the narrow jobs' long waits must not count
    # waits 0, 50, 100: the 95th percentile lies 0.95 x 2 = 1.9 ranks in, 50 + 0.9 x 50
    assert widest_wait_percentile(wait, size) == pytest.approx(95.0)
    assert widest_wait_percentile(wait, size, 50.0) == pytest.approx(50.0)


def test_weighted_wait_needs_a_known_policy() -> None:
    with pytest.raises(ValueError, match="policy 'lifo'"):
        scheduling_metrics(three_jobs(), procs=4, policy="lifo")


def test_bounded_slowdown_is_never_below_one():
    table = three_jobs().iloc[[0]].assign(run=[4], end=[4])  # 4 s, no wait: 4 / max(4, 10) = 0.4 -> 1
    assert scheduling_metrics(table, procs=4, policy="fcfs")["avg_bounded_slowdown"] == 1.0


@pytest.mark.parametrize("policy", ["fcfs", "wfp"])
def test_weighted_wait_is_zero_when_no_job_waited(policy: str) -> None:
    metrics = scheduling_metrics(three_jobs().iloc[[0]], procs=4, policy=policy)
    assert metrics["weighted_wait"] == metrics["weighted_wait_wfp"] == 0.0


def test_metrics_of_an_empty_run_are_zero():
    metrics = scheduling_metrics(three_jobs().iloc[[]], procs=4, policy="fcfs")
    assert set(metrics.values()) == {0.0}
    assert set(metrics) == set(SCHEDULING_METRICS)


def test_prediction_metrics_score_t_sched_against_the_run():
    # job 1: 150 for 100 (over, accuracy 2/3, OE); job 2: 10 for 5 (over, 1/2, NA as t_sched = t_req);
    # job 3: 60 for 0 (accuracy 0, NA)
    quality = prediction_metrics(three_jobs())
    assert quality["accuracy_mean"] == pytest.approx((100 / 150 + 0.5 + 0) / 3)
    assert quality["accuracy_median"] == pytest.approx(0.5)
    assert (quality["NA"], quality["OE"], quality["UE"], quality["BE"]) == pytest.approx((2 / 3, 1 / 3, 0, 0))
    assert quality["underestimated"] == 0


def test_accuracy_is_the_ratio_of_the_smaller_to_the_larger():
    t_est = np.array([100, 200, 50, 0, 10, 0])
    t_act = np.array([100, 100, 100, 0, 0, 10])
    assert accuracy(t_est, t_act).tolist() == [1.0, 0.5, 0.5, 1.0, 0.0, 0.0]


def test_categories_at_the_1800_second_boundary():
    t_req = np.full(6, 10_000)
    t_est = np.array([10_000, 5_000, 5_000, 5_000, 5_000, 5_000])
    t_act = np.array([5_000, 5_000, 4_000, 5_001, 6_800, 6_801])
    # NA (t_est = t_req); OE (t_act = t_est); OE; UE (1 s short); UE (exactly 1800 s short); BE (1801 s)
    assert categories(t_est, t_act, t_req) == pytest.approx({"NA": 1 / 6, "OE": 2 / 6, "UE": 2 / 6, "BE": 1 / 6})


def test_summary_counts_underestimates_and_adds_up():
    t_req = np.full(6, 10_000)
    t_est = np.array([10_000, 5_000, 5_000, 5_000, 5_000, 5_000])
    t_act = np.array([5_000, 5_000, 4_000, 5_001, 6_800, 6_801])
    summary = summarize(t_est, t_act, t_req)
    assert summary["underestimated"] == pytest.approx(3 / 6)
    assert summary["NA"] + summary["OE"] + summary["UE"] + summary["BE"] == pytest.approx(1)
    expected = [0.5, 1.0, 0.8, 5_000 / 5_001, 5_000 / 6_800, 5_000 / 6_801]
    assert summary["accuracy_mean"] == pytest.approx(np.mean(expected))
    assert summary["accuracy_median"] == pytest.approx(np.median(expected))
