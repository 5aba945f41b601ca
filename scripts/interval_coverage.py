"""Do an estimator's prediction intervals mean what they say? Coverage of its quantiles over a causal replay.

Replays a trace in submission order (each job predicted knowing only the jobs
finished before it, `predictor.offline.causal_replay`), asks the estimator for
the interval behind every answer, and reports for how many jobs it gave one,
the share of runtimes at or below each quantile, and the mean P(runtime >
t_sched) against the share of jobs that ran longer than t_sched.

    python scripts/interval_coverage.py TRACE SPEC [SPEC ...]
"""

from __future__ import annotations

import argparse

import numpy as np

from kernel.jobs import INTERVAL_PROBABILITIES, JobRequest, Prediction
from predictor.frames import finished_from_frame, jobs_to_requests
from predictor.offline import causal_replay
from predictor.registry import make_estimator
from simulator.workloads.formats import read_trace


def coverage(jobs_path: str, spec: str) -> str:
    """One line: jobs with an interval, coverage per quantile, mean P(under) against the share underestimated."""
    jobs = read_trace(jobs_path).jobs
    estimator = make_estimator(spec)
    runtimes = dict(zip(jobs["job_id"].tolist(), jobs["t_act"].tolist(), strict=True))
    covered = dict.fromkeys(INTERVAL_PROBABILITIES, 0)
    p_under, under = [], 0

    def answer(job: JobRequest) -> Prediction:
        prediction, interval = estimator.predict_with_interval(job)
        if interval is not None:
            nonlocal under
            runtime = runtimes[job.job_id]
            for probability, quantile in interval.quantiles:
                covered[probability] += runtime <= quantile
            p_under.append(interval.p_underestimate)
            under += runtime > prediction.t_sched
        return prediction

    causal_replay(jobs_to_requests(jobs), finished_from_frame(jobs), estimator.observe, answer)
    count = len(p_under)
    if not count:
        return f"{spec}: no interval for any of {len(jobs):,} jobs"
    shares = ", ".join(f"{probability:g}: {covered[probability] / count:.1%}" for probability in covered)
    return (
        f"{spec}: an interval for {count:,} of {len(jobs):,} jobs; runtimes at or below each quantile {shares}; "
        f"mean P(runtime > t_sched) {np.mean(p_under):.3f}, jobs that ran longer {under / count:.1%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="a trace any `tsched` command reads")
    parser.add_argument("specs", nargs="+", metavar="SPEC", help="estimators with intervals")
    args = parser.parse_args()
    for spec in args.specs:
        print(coverage(args.trace, spec), flush=True)


if __name__ == "__main__":
    main()
