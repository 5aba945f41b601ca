"""How closely `tsched simulate --scheduler slurm` replays a captured Slurm run (shared by the offline and live tests).

A run folder (cluster_workloads.py writes one) holds the slurm.conf Slurm ran
with and its sacct. The replay runs the command a site would
(`tsched simulate --trace jobs.sacct --cluster slurm.conf --scheduler slurm
--jobs-csv ...`) and is compared job by job with what Slurm did: waits
(Start - Eligible), their mean, and the utilization (CPU-seconds over the
cluster's CPUs from the first submission to the last end), and the order of
starts (Spearman's correlation of Slurm's and the replay's start times). A
run with accounts and QOS (`assoc.txt`, `qos.txt`: `sacctmgr show assoc|qos
--parsable2`) is replayed with them (`--associations`, `--qos-file`). The chaos floor
is the simulator against itself: the mean absolute difference of starts
between the replay and replays with every submission moved by at most 1 s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from slurm.checks import Run
from tsched.cli import main


@dataclass(frozen=True)
class Agreement:
    """A replay against Slurm: mean waits (s), utilizations, per-job wait error and the chaos floor (s)."""

    workload: str
    jobs: int
    slurm_wait: float
    replay_wait: float
    slurm_utilization: float
    replay_utilization: float
    wait_mae: float
    chaos_floor: float
    start_order: float  # Spearman's correlation of Slurm's and the replay's starts
    order_floor: float  # the mean Spearman correlation of the replay's starts and its replicates'
    replicate_waits: tuple[float, ...]  # the replicates' mean waits
    replicate_utilizations: tuple[float, ...]

    @property
    def wait_error(self) -> float:
        """The replay's mean wait relative to Slurm's (0.05: 5% longer)."""
        return self.replay_wait / self.slurm_wait - 1

    @property
    def utilization_points(self) -> float:
        """The replay's utilization minus Slurm's, in percentage points."""
        return 100 * (self.replay_utilization - self.slurm_utilization)

    @property
    def replicate_spread(self) -> float:
        """How far the replicates' mean waits lie from the replay's, at most (a share of it)."""
        return max(abs(wait / self.replay_wait - 1) for wait in self.replicate_waits)

    @property
    def replicate_points(self) -> float:
        """How far the replicates' utilizations lie from the replay's, at most, in percentage points."""
        return max(100 * abs(value - self.replay_utilization) for value in self.replicate_utilizations)

    @property
    def pooled_points(self) -> float:
        """The mean utilization of the replay and its replicates minus Slurm's, in percentage points: a run this
        short ends with a few late jobs, so one replay's makespan is one draw as Slurm's is."""
        pooled = np.mean([self.replay_utilization, *self.replicate_utilizations])
        return float(100 * (pooled - self.slurm_utilization))

    def line(self) -> str:
        return (
            f"{self.workload}: {self.jobs} jobs, mean wait Slurm {self.slurm_wait:.1f} s, "
            f"replay {self.replay_wait:.1f} s ({self.wait_error:+.1%}; replicates within {self.replicate_spread:.1%}), "
            f"utilization {self.slurm_utilization:.3f} vs {self.replay_utilization:.3f} "
            f"({self.utilization_points:+.1f} points; replicates within {self.replicate_points:.1f}, "
            f"with them {self.pooled_points:+.1f}), "
            f"per-job wait MAE {self.wait_mae:.1f} s, chaos floor {self.chaos_floor:.1f} s, "
            f"start order Spearman {self.start_order:.3f} (replicates {self.order_floor:.3f})"
        )


#: The files a capture may hold beside its sacct and slurm.conf, and the options that give them to the replay (the
#: calendar's local times are UTC, `tsched simulate`'s default zone, as the capture's sacct).
CAPTURED_FILES = (
    ("--associations", "assoc.txt"),
    ("--qos-file", "qos.txt"),
    ("--reservations", "reservations.txt"),
    ("--node-events", "events.txt"),
)


def replay(folder: Path, out: Path, replicate: int = 0) -> tuple[pd.DataFrame, dict[str, object]]:
    """The command's per-job CSV and JSON summary for the run in `folder` (replicate N: submissions moved)."""
    out.mkdir(parents=True, exist_ok=True)
    csv, summary = out / f"jobs-{replicate}.csv", out / f"summary-{replicate}.json"
    arguments = ["simulate", "--trace", str(folder / "jobs.sacct"), "--cluster", str(folder / "slurm.conf")]
    arguments += ["--scheduler", "slurm", "--json", str(summary), "--jobs-csv", str(csv)]
    arguments += ["--replicate", str(replicate), "--jitter", "1"]
    for option, name in CAPTURED_FILES:
        if (folder / name).exists():
            arguments += [option, str(folder / name)]
    assert main(arguments) == 0
    return pd.read_csv(csv).set_index("job_id").sort_index(), json.loads(summary.read_text())


def pool_wait_mae(folder: Path, out: Path, backfill: str) -> float:
    """The per-job wait error of today's processor-pool replay (FCFS with `backfill` on the cluster's CPUs)."""
    run = Run(folder)
    waits = pd.Series({job.id: job.wait for job in run.jobs})
    out.mkdir(parents=True, exist_ok=True)
    csv = out / f"pool-{backfill}.csv"
    arguments = ["simulate", "--trace", str(folder / "jobs.sacct"), "--machine-procs", str(run.cluster.procs)]
    assert main([*arguments, "--backfill", backfill, "--jobs-csv", str(csv)]) == 0
    replayed = pd.read_csv(csv).set_index("job_id")["wait"]
    return float((replayed - waits).abs().mean())


def _utilization(size: np.ndarray, start: np.ndarray, end: np.ndarray, first: int, procs: int) -> float:
    return float((size * (end - start)).sum() / (procs * (end.max() - first)))


def _spearman(first: np.ndarray, second: np.ndarray) -> float:
    return float(pd.Series(first).rank().corr(pd.Series(second).rank()))


def agreement(folder: Path, out: Path, replicates: int = 3) -> Agreement:
    """The replay of the run in `folder` against Slurm, with the chaos floor from `replicates` replicates."""
    run = Run(folder)
    jobs = sorted(run.jobs, key=lambda job: job.id)
    waits = pd.Series([job.wait for job in jobs], index=[job.id for job in jobs])
    eligible = np.array([job.start - job.wait for job in jobs])
    starts, ends = np.array([job.start for job in jobs]), np.array([job.end for job in jobs])
    cpus = np.array([int(job.given["cpu"]) for job in jobs])
    procs = run.cluster.procs
    replayed, summary = replay(folder, out)
    assert list(replayed.index) == list(waits.index), "the replay left jobs out"
    others = [replay(folder, out, replicate) for replicate in range(1, replicates + 1)]
    utilizations = [float(str(summary["utilization"])) for _, summary in others]
    return Agreement(
        workload=folder.name,
        jobs=len(jobs),
        slurm_wait=float(waits.mean()),
        replay_wait=float(replayed["wait"].mean()),
        slurm_utilization=_utilization(cpus, starts, ends, int(eligible.min()), procs),
        replay_utilization=float(str(summary["utilization"])),
        wait_mae=float((replayed["wait"] - waits).abs().mean()),
        chaos_floor=float(np.mean([(other["start"] - replayed["start"]).abs().mean() for other, _ in others])),
        start_order=_spearman(starts, replayed["start"].to_numpy()),
        order_floor=float(
            np.mean([_spearman(replayed["start"].to_numpy(), other["start"].to_numpy()) for other, _ in others])
        ),
        replicate_waits=tuple(float(other["wait"].mean()) for other, _ in others),
        replicate_utilizations=tuple(utilizations),
    )


#: What one live run must show: per-job wait error within this many chaos floors, mean wait within this share.
LIVE_FLOORS = 2.0
LIVE_WAIT_SHARE = 0.15


def check_live(result: Agreement) -> None:
    """A single run is one draw of a chaotic schedule: issue 24's targets are checked on the committed captures
    (`check_agreement`); a new run must come within twice the chaos floor, 15% of the mean wait, and the
    utilization targets as `check_agreement` states them (docs/cluster.md gives every run's numbers)."""
    print(result.line())
    assert result.wait_mae <= LIVE_FLOORS * result.chaos_floor, result.line()
    assert abs(result.wait_error) <= LIVE_WAIT_SHARE, result.line()
    assert abs(result.utilization_points) <= max(2.0, result.replicate_points), result.line()


#: The least chaos floor a fresh run is held to: about the smallest the committed runs measured (12.7 s, run 1's
#: fcfs-tight). Three replicates of a fresh run may move less (6.5 s on a CI run of fcfs-tight, whose per-job
#: error, 17.0 s, was the committed runs' 8.8-15.5 s), while Slurm's own launch and completion timing does not
#: shrink with them.
MIN_FRESH_FLOOR = 12.0


def check_fresh(result: Agreement) -> None:
    """A run made now is held to the per-job error only, within `LIVE_FLOORS` chaos floors (at least
    `MIN_FRESH_FLOOR`; the processor pool misses the mixed cluster by more); its mean wait and utilization are
    printed, not asserted: a fresh run at load 10 missed Slurm's mean wait by 27% and its utilization by 3.2
    points (docs/cluster.md)."""
    print(result.line())
    assert result.wait_mae <= LIVE_FLOORS * max(result.chaos_floor, MIN_FRESH_FLOOR), result.line()


#: Issue 26's targets on the multifactor workload: starts in Slurm's order (Spearman; 0.966 and 0.964 on the
#: two runs of docs/cluster.md), and what a fresh run is held to where single runs miss the target: its mean
#: wait within 15% (as `check_live`; the runs missed 5% by -6.6% and +6.3%, replicates moving it by 8.1% and
#: 5.1%) and the mean utilization of the replay and its replicates within 5 points of Slurm's (the two runs:
#: +2.8 and -0.7; two CI runs: -1.6 and -3.8). One replay's utilization is one draw of the makespan, which a
#: few late jobs set: run 1's replay missed by 4.1 points; a CI run's by 5.9 points, its replicates 2.8 to 3.1
#: points nearer Slurm's.
START_ORDER = 0.95
MULTIFACTOR_WAIT_SHARE = 0.15
MULTIFACTOR_POINTS = 5.0


def order_bound(result: Agreement) -> float:
    """The least start order a fresh run is held to: `START_ORDER`, or where the replay's own replicates disorder
    its starts more, as far from 1 as `LIVE_FLOORS` times theirs, as the per-job error is held to its chaos floor.

    One replay's order is one draw: on the five committed multifactor runs, the replay's starts against its ten
    replicates' came to 0.955-0.974 on the mean (0.890 at the least), and the replicates' against Slurm's to
    0.867-0.992, where the replays' own were 0.962-0.972; a CI run at load (2026-12-07) came to 0.930."""
    return min(START_ORDER, 1 - LIVE_FLOORS * (1 - result.order_floor))


def check_multifactor(result: Agreement) -> None:
    """Issue 26's targets on a fresh multifactor run where one run reaches them: starts in Slurm's order (Spearman
    at least 0.95, or within twice the replicates' own disorder, `order_bound`); per-job wait error within
    `LIVE_FLOORS` chaos floors as every fresh run (the runs: 0.96 and 1.05 floors); mean wait and, with the
    replicates, utilization within what one run reaches (`MULTIFACTOR_WAIT_SHARE`, `_POINTS`). The committed runs
    are held to the order target itself (tests/test_calendar.py)."""
    print(result.line())
    assert result.start_order >= order_bound(result), result.line()
    assert result.wait_mae <= LIVE_FLOORS * result.chaos_floor, result.line()
    assert abs(result.wait_error) <= MULTIFACTOR_WAIT_SHARE, result.line()
    assert abs(result.pooled_points) <= MULTIFACTOR_POINTS, result.line()


def check_agreement(result: Agreement) -> None:
    """Issue 24's targets: per-job wait error within the chaos floor; mean wait within 5% and utilization within 2
    points of Slurm's, or, where missed, within what moving submissions by at most 1 s does to the replay itself."""
    print(result.line())
    assert result.wait_mae <= result.chaos_floor, result.line()
    assert abs(result.wait_error) <= max(0.05, result.replicate_spread), result.line()
    assert abs(result.utilization_points) <= max(2.0, result.replicate_points), result.line()


def per_job(folder: Path, out: Path) -> pd.DataFrame:
    """Slurm's and the replay's start and wait of every job of the run in `folder` (job id, seconds from the
    first submission)."""
    run = Run(folder)
    jobs = sorted(run.jobs, key=lambda job: job.id)
    first = min(job.start - job.wait for job in jobs)
    replayed, _ = replay(folder, out)
    table = pd.DataFrame(
        {
            "job_id": [job.id for job in jobs],
            "submit": [job.start - job.wait - first for job in jobs],
            "slurm_start": [job.start - first for job in jobs],
            "slurm_wait": [job.wait for job in jobs],
        }
    ).set_index("job_id")
    table["replay_start"] = replayed["start"] + table["submit"] - replayed["submit"]
    table["replay_wait"] = replayed["wait"]
    return table.reset_index()


if __name__ == "__main__":  # python -m slurm.agreement FOLDER... OUT: the lines docs/cluster.md shows, per-job CSVs
    import sys
    import tempfile

    *folders, target = (Path(argument) for argument in sys.argv[1:])
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        lines = [agreement(folder, Path(scratch) / folder.name).line() for folder in folders]
        for folder in folders:
            per_job(folder, Path(scratch) / folder.name).to_csv(
                target / f"{folder.parent.name}-{folder.name}.csv", index=False
            )
    print("\n".join(lines))
