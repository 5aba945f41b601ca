"""Offline replay and the predict-eval report."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kernel.errors import SpecError
from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.estimators.base import Estimator
from predictor.frames import finished_from_frame, jobs_to_requests
from predictor.offline import (
    GRID_FLOORS,
    GRID_PERCENTILES,
    evaluate,
    percentile_grid,
    replay,
)
from predictor.registry import make_estimator
from simulator.workloads.swf import read_swf
from simulator.workloads.synthetic import generate_workload


def job_table(rows: list[tuple[int, int, int, int, int]], user: int = 1) -> pd.DataFrame:
    """A job table as the trace layer builds it, from (job_id, submit, wait, t_act, t_req) rows."""
    table = pd.DataFrame(rows, columns=["job_id", "submit", "wait", "t_act", "t_req"])
    table["run"] = table["t_act"]
    table["end"] = table["submit"] + table["wait"] + table["t_act"]
    table["procs"] = 1
    table["user"] = user
    table["group"] = 1
    table["executable"] = -1
    table["queue"] = -1
    return table


#: last2 on these jobs, by hand: jobs 1 and 2 have no history (t_req); job 3 averages jobs 1 and 2
#: (50, 100 -> 75); job 4 averages jobs 1 and 3 (100, 300 -> 200); job 5 jobs 3 and 4 (300, 10 -> 155).
TINY = job_table(
    [(1, 0, 0, 100, 200), (2, 10, 0, 50, 100), (3, 200, 0, 300, 400), (4, 600, 0, 10, 1000), (5, 700, 0, 3000, 4000)]
)


def test_evaluate_reports_the_issue_json_with_hand_computed_values() -> None:
    report = evaluate(TINY, ["request", "last2"], "tiny.swf")
    assert report["trace"] == "tiny.swf"
    assert report["jobs"] == 5
    request, last2 = report["results"]
    keys = [
        "estimator",
        "accuracy_mean",
        "accuracy_median",
        "underestimated",
        "NA",
        "OE",
        "UE",
        "BE",
        "mae",
        "medae",
        "lambda",
        "us_per_prediction",
        "fallback",
    ]
    assert list(request) == keys and list(last2) == keys
    assert request["us_per_prediction"] > 0
    del request["us_per_prediction"], last2["us_per_prediction"]
    # request: accuracy 0.5, 0.5, 0.75, 0.01, 0.75; errors 100, 50, 100, 990, 1000
    assert request == pytest.approx(
        {
            "estimator": "request",
            "accuracy_mean": 2.51 / 5,
            "accuracy_median": 0.5,
            "underestimated": 0.0,
            "NA": 1.0,
            "OE": 0.0,
            "UE": 0.0,
            "BE": 0.0,
            "mae": 448.0,
            "medae": 100.0,
            "lambda": 1.0,
            "fallback": 1.0,  # the request is every job's fallback
        }
    )
    # last2: t_sched 200, 100, 75, 200, 155 -> accuracy 0.5, 0.5, 0.25, 0.05, 155/3000;
    # job 3 under by 225 s (UE), job 5 under by 2845 s (BE), job 4 over (OE); errors 100, 50, 225, 190, 2845
    assert last2 == pytest.approx(
        {
            "estimator": "last2",
            "accuracy_mean": (1.3 + 155 / 3000) / 5,
            "accuracy_median": 0.25,
            "underestimated": 0.4,
            "NA": 0.4,
            "OE": 0.2,
            "UE": 0.2,
            "BE": 0.2,
            "mae": 682.0,
            "medae": 190.0,
            "lambda": 682.0 / 448.0,
            "fallback": 0.4,  # jobs 1 and 2: no finished job of their user yet
        }
    )


def test_evaluate_rejects_a_bad_spec_before_replaying() -> None:
    with pytest.raises(SpecError, match="unknown estimator 'last3'"):
        evaluate(TINY, ["request", "last3"], "tiny.swf")


def test_lambda_is_undefined_when_every_request_was_exact() -> None:
    exact = job_table([(1, 0, 0, 100, 100), (2, 5, 0, 60, 60)])
    assert evaluate(exact, ["request"], "exact")["results"][0]["lambda"] is None


class Recorder(Estimator):
    """Answers t_req and remembers which jobs it had been told about at each prediction."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.seen_at: dict[int, list[int]] = {}
        self.ends: list[int] = []

    def reset(self) -> None:
        self.seen, self.seen_at, self.ends = [], {}, []

    def observe(self, job: FinishedJob) -> None:
        self.seen.append(job.request.job_id)
        self.ends.append(job.end)

    def predict(self, job: JobRequest) -> Prediction:
        self.seen_at[job.job_id] = list(self.seen)
        return Prediction(job.t_req, None, 0, True)


def test_replay_feeds_exactly_the_jobs_finished_before_each_submission() -> None:
    frame = job_table(
        [
            (1, 0, 0, 100, 200),  # ends at 100: exactly when job 2 is submitted
            (2, 100, 5, 10, 50),  # ends at 115
            (3, 114, 0, 0, 10),  # ends at 114, before job 2
            (4, 115, 0, 0, 10),  # no wait, no runtime: ends the second it is submitted
            (5, 115, 0, 30, 40),  # submitted the same second as job 4
            (6, 116, 0, 1, 10),
        ]
    )
    recorder = Recorder()
    out = replay(recorder, frame.sample(frac=1, random_state=3))  # row order of the input does not matter
    assert out["job_id"].tolist() == [1, 2, 3, 4, 5, 6]
    assert recorder.seen_at == {1: [], 2: [1], 3: [1], 4: [1, 3, 2], 5: [1, 3, 2], 6: [1, 3, 2, 4]}
    assert recorder.ends == sorted(recorder.ends)


def test_replay_rows_explain_each_prediction() -> None:
    out = replay(make_estimator("last2"), TINY)
    assert list(out.columns) == ["job_id", "t_req", "t_act", "t_sched", "factor", "basis", "fallback"]
    assert out["t_sched"].tolist() == [200, 100, 75, 200, 155]
    assert out["basis"].tolist() == [0, 0, 2, 2, 2]  # job 1 is still running when job 2 arrives
    assert out["fallback"].tolist() == [True, True, False, False, False]
    assert out["factor"].isna().all()
    # job 4 rests on R = 0.5, 0.5, 0.75: the 85th percentile lies 0.7 of the way from 0.5 to 0.75
    percentile = replay(make_estimator("percentile:key=user,min_jobs=1"), TINY).iloc[3]
    assert percentile["factor"] == pytest.approx(0.675)
    assert (percentile["t_sched"], percentile["basis"], percentile["fallback"]) == (675, 3, False)


def test_oracle_replay_is_the_truth_floored_at_one_second() -> None:
    frame = job_table([(1, 0, 0, 0, 10), (2, 5, 0, 7, 10)])
    assert replay(make_estimator("oracle"), frame)["t_sched"].tolist() == [1, 7]


def test_frame_conversions_and_their_errors() -> None:
    requests = jobs_to_requests(TINY)
    assert requests[2] == JobRequest(job_id=3, submit=200, user=1, group=1, t_req=400, procs=1)
    finished = finished_from_frame(TINY.iloc[::-1])
    assert [job.request.job_id for job in finished] == [2, 1, 3, 4, 5]
    assert (finished[0].end, finished[0].runtime) == (60, 50)
    with pytest.raises(ValueError, match="lacks column"):
        replay(make_estimator("request"), TINY.drop(columns=["end", "user"]))
    with pytest.raises(ValueError, match="t_act must hold integers"):
        finished_from_frame(TINY.astype({"t_act": float}))
    with pytest.raises(ValueError, match="t_req must hold integers"):
        jobs_to_requests(TINY.astype({"t_req": float}))


def test_percentile_grid_sweeps_keys_windows_percentiles_and_floors() -> None:
    jobs = generate_workload(jobs=400, procs=64, load=0.7, seed=5).jobs
    grid = percentile_grid(jobs, "generated")
    assert len(grid) == 4 * 6 * len(GRID_PERCENTILES) * len(GRID_FLOORS)
    assert not grid[["key", "window", "q", "floor"]].duplicated().any()
    row = grid[(grid["key"] == "user") & (grid["window"] == "all") & (grid["q"] == 70) & (grid["floor"] == 0)]
    spec = row["estimator"].item()
    assert spec == "percentile:key=user,window=all,q=70,floor=0"
    expected = evaluate(jobs, [spec], "generated")["results"][0]
    for column in ("accuracy_mean", "underestimated", "NA", "OE", "UE", "BE", "mae", "lambda"):
        assert row[column].item() == pytest.approx(expected[column])
    assert (grid["NA"] < 1).any()  # the sweep adjusted something


@pytest.mark.slow
def test_percentile_on_kth_equals_an_independent_numpy_computation(traces_dir) -> None:
    jobs = read_swf(traces_dir / "KTH-SP2-1996-2.1-cln.swf.gz").jobs
    out = replay(make_estimator("percentile"), jobs)
    ordered = jobs.sort_values(["submit", "job_id"], kind="stable")
    ratio = np.minimum(1.0, ordered["t_act"].to_numpy() / ordered["t_req"].to_numpy())
    end, submit, t_req = (ordered[c].to_numpy() for c in ("end", "submit", "t_req"))
    expected = t_req.copy()
    for members in ordered.reset_index(drop=True).groupby(["user", "group", "t_req"]).groups.values():
        rows = np.asarray(members)
        for row in rows:
            eligible = (end[rows] <= submit[row]) & (end[rows] >= submit[row] - 30 * 86_400)
            if eligible.sum() >= 10:
                factor = max(np.percentile(ratio[rows][eligible], 85), 0.5)
                expected[row] = max(1, min(t_req[row], round(t_req[row] * factor)))
    assert np.array_equal(out["t_sched"].to_numpy(), expected)
