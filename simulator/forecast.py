"""Forward simulation from a scheduler's state: when will each waiting job start?

The forecast runs the simulator's own event loop, queue policy and backfilling
(`simulator.loop`, `make_policy`, `make_backfill`) forward from `now`, with no
arrival after it. The scheduler plans as the real one does, with the users' requests;
the jobs end as the forecast assumes: running job i at `running_ends[i]`,
waiting job j `waiting_runtimes[j]` seconds after it starts. With requests as
runtimes this is what Slurm's `squeue --start` reports; with good runtime
estimates it is what the scheduler will most likely do.

Pure: no actual runtime, no clock, no I/O. `FORWARD_SIMULATION` is the
`predictor.forecasting.StartForecaster` the service runs (installed by `tsched
serve`); `tsched wait-eval` calls `forecast_starts_of` to stop once the jobs it
asks about have started.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence

from predictor.forecasting import ON_NODES, QueueState, Scheduler
from simulator.backfill import BACKFILL_ORDERS, BACKFILLS, make_backfill
from simulator.jobs import WaitingJob
from simulator.loop import EventKind, Simulation
from simulator.machine import ProcessorPool
from simulator.policies import POLICIES, make_policy
from simulator.scheduler import QueueScheduler

#: How often (in scheduling passes) a forecast asks whether it is still wanted: every pass, since a pass over a
#: long queue with conservative backfilling takes up to ~0.3 CPU s on this machine (issue 25's largest forecast,
#: benchmarks/chaos.py), a check about a microsecond.
CHECK_EVERY_PASSES = 1


def forecast_starts(
    state: QueueState,
    scheduler: Scheduler,
    running_ends: Sequence[int],
    waiting_runtimes: Sequence[int],
    check: Callable[[], None] | None = None,
) -> list[int]:
    """Every waiting job's start, in `state.waiting` order; `check` is called every `CHECK_EVERY_PASSES`
    scheduling passes (it raises to stop a run nobody waits for any more)."""
    starts = [0] * len(state.waiting)
    for position, start in ForwardRun(state, scheduler, running_ends, waiting_runtimes).starts(check):
        starts[position] = start
    return starts


def forecast_starts_of(
    state: QueueState,
    scheduler: Scheduler,
    running_ends: Sequence[int],
    waiting_runtimes: Sequence[int],
    positions: Collection[int],
) -> dict[int, int]:
    """The starts of the waiting jobs at `positions` only: the run stops once they have all started."""
    wanted = set(positions)
    found: dict[int, int] = {}
    if not wanted:
        return found
    for position, start in ForwardRun(state, scheduler, running_ends, waiting_runtimes).starts():
        if position in wanted:
            found[position] = start
            if len(found) == len(wanted):
                break
    return found


class ForwardSimulation:
    """The `predictor.forecasting.StartForecaster` the service runs: `forecast_starts`, and the check of a
    scheduler's names that lets it refuse a bad one naming the field."""

    def check(self, scheduler: Scheduler, state: QueueState) -> None:
        if scheduler.backfill == ON_NODES:
            raise ValueError(
                "backfill: 'slurm' runs on a cluster's nodes; this server has none (tsched serve --cluster slurm.conf)"
            )
        for field, value, choices in (
            ("policy", scheduler.policy, POLICIES),
            ("backfill", scheduler.backfill, BACKFILLS),
            ("backfill_order", scheduler.backfill_order, BACKFILL_ORDERS),
        ):
            if value not in choices:
                raise ValueError(f"{field}: {value!r} is not one of {', '.join(choices)}")
        try:
            make_backfill(scheduler.backfill, scheduler.backfill_order)
        except ValueError as error:  # an order that needs backfilling
            raise ValueError(f"backfill_order: {error}") from None

    #: Runs the scheduler forward: `forecast_starts`.
    starts = staticmethod(forecast_starts)


FORWARD_SIMULATION = ForwardSimulation()


class ForwardRun(Simulation[WaitingJob, QueueScheduler]):
    """The scheduler run forward from `state`: the waiting jobs arrive at `now`, and every job ends as assumed.

    Machine indexes: waiting job j is j, running job i is len(waiting) + i.
    The waiting jobs are admitted in their order (FCFS keeps it) and planned
    with their requests.
    """

    def __init__(
        self, state: QueueState, scheduler: Scheduler, running_ends: Sequence[int], waiting_runtimes: Sequence[int]
    ) -> None:
        now, waiting = state.now, state.waiting
        if len(running_ends) != len(state.running) or len(waiting_runtimes) != len(waiting):
            raise ValueError("one end per running job and one runtime per waiting job are needed")
        machine = ProcessorPool(state.procs)
        backfill = make_backfill(scheduler.backfill, scheduler.backfill_order)
        super().__init__(QueueScheduler(make_policy(scheduler.policy), backfill, machine), now)
        self._runtimes = waiting_runtimes
        for offset, (started, end) in enumerate(zip(state.running, running_ends, strict=True)):
            job = started.job
            if end <= now:
                raise ValueError(f"running job {job.job_id} is expected to end at {end}, not after now ({now})")
            if job.procs > machine.free:
                raise ValueError(f"the running jobs hold more than the machine's {state.procs} processors")
            index = len(waiting) + offset
            machine.start(WaitingJob(index, job.job_id, job.submit, job.procs, job.t_req, job.t_req), started.start)
            self.schedule(end, EventKind.COMPLETION, index, index)
        for position, job in enumerate(waiting):
            if job.procs > state.procs:
                raise ValueError(
                    f"waiting job {job.job_id} needs {job.procs} processors; the machine has {state.procs}"
                )
            queued = WaitingJob(position, job.job_id, job.submit, job.procs, job.t_req, job.t_req)
            self.schedule(now, EventKind.ARRIVAL, queued, position)

    def admit(self, completed: list[int], arrived: list[WaitingJob]) -> list[WaitingJob]:
        return arrived

    def completion_time(self, job: WaitingJob) -> int:
        return self.now + self._runtimes[job.index]

    def starts(self, check: Callable[[], None] | None = None) -> Iterator[tuple[int, int]]:
        """(position in the state's waiting jobs, start) of each, in start order; the run stops once none waits.

        `check` is called every `CHECK_EVERY_PASSES` steps: it raises to stop a run nobody waits for any more.
        """
        steps = 0
        while self.peek() is not None:
            steps += 1
            if check is not None and steps % CHECK_EVERY_PASSES == 0:
                check()
            step = self.step()
            for job in step.started:
                yield job.index, step.time
            if not len(self.scheduler):
                return
        if len(self.scheduler):
            raise AssertionError(f"{len(self.scheduler)} job(s) left waiting on an idle machine")
