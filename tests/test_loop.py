"""The event loop (`simulator.loop`) and the pass it drives (`simulator.scheduler`), on the real scheduler.

A small driver (`ProbeRun`) replays jobs given as (arrival, procs, t_req,
t_est, runtime) and logs what the loop hands it, so that the order of events
within an instant, the rounds, the wake-ups and the observers can be checked
step by step. The machine has 10 processors unless a test says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from simulator.backfill import ConservativeBackfill, EasyBackfill, make_backfill
from simulator.jobs import WaitingJob
from simulator.loop import EventKind, Observer, Round, Simulation
from simulator.machine import Machine, ProcessorPool, make_correction, planning_mode
from simulator.policies import FCFS, Planner, make_policy
from simulator.scheduler import QueueScheduler

#: One job: (arrival, procs, t_req, t_est, runtime). Its index is its position in the list.
Job = tuple[int, int, int, int, int]


class ProbeRun(Simulation[WaitingJob, QueueScheduler]):
    """Jobs arrive as given and run their runtime; every admission and external event is logged."""

    def __init__(self, scheduler: QueueScheduler, jobs: Sequence[Job]) -> None:
        super().__init__(scheduler)
        self.runtimes = [runtime for *_, runtime in jobs]
        self.log: list[tuple[Any, ...]] = []
        for index, (arrival, procs, t_req, t_est, _) in enumerate(jobs):
            self.schedule(arrival, EventKind.ARRIVAL, WaitingJob(index, index + 1, arrival, procs, t_req, t_est))

    def admit(self, completed: list[int], arrived: list[WaitingJob]) -> list[WaitingJob]:
        self.log.append(("admit", self.now, list(completed), [job.index for job in arrived]))
        return arrived

    def completion_time(self, job: WaitingJob) -> int:
        return self.now + self.runtimes[job.index]

    def external(self, payload: Any) -> None:
        machine = self.scheduler.machine
        self.log.append(("external", self.now, payload, machine.free, len(self.scheduler)))


def scheduler(backfill: str = "easy", machine: Machine | None = None) -> QueueScheduler:
    return QueueScheduler(make_policy("fcfs"), make_backfill(backfill), machine or ProcessorPool(10))


def rounds(run: Simulation[Any, Any]) -> list[Round]:
    """Every round until no event is left."""
    done = []
    while run.peek() is not None:
        done.append(run.step())
    return done


def started(done: list[Round]) -> list[tuple[int, list[int]]]:
    """(time, trace indexes started) of each round."""
    return [(step.time, [job.index for job in step.started]) for step in done]


def test_at_one_time_completions_then_external_events_then_the_arrivals_together_then_one_pass() -> None:
    # A (10 procs) runs [0, 100). At 100, scheduled in the opposite order: C and B arrive (B with a lower rank),
    # an external event, and A's completion. The external event sees A's processors back and neither arrival
    # queued; both arrivals are admitted in one call with the completion, B first; one pass starts both.
    run = ProbeRun(scheduler(), [(0, 10, 100, 100, 100)])
    run.step()
    run.schedule(100, EventKind.ARRIVAL, WaitingJob(2, 3, 100, 5, 10, 10), rank=2)
    run.schedule(100, EventKind.ARRIVAL, WaitingJob(1, 2, 100, 5, 10, 10), rank=1)
    run.schedule(100, EventKind.EXTERNAL, "drain")
    run.runtimes += [10, 10]
    step = run.step()
    assert run.log[1:] == [("external", 100, "drain", 10, 0), ("admit", 100, [0], [1, 2])]
    assert (step.time, step.completed, [job.index for job in step.submitted]) == (100, [0], [1, 2])
    assert [job.index for job in step.started] == [1, 2]


def test_a_job_that_ends_as_it_starts_ends_in_a_second_round_with_its_own_pass() -> None:
    # A (10 procs) runs 0 s, B (10 procs, 50 s) arrives with it: the first round starts A, the second (still at
    # 0) learns A's end and starts B. Observers see each round before its pass, and the instant once, settled.
    class Watch(Observer):
        def __init__(self) -> None:
            self.seen: list[tuple[str, int, list[int]]] = []

        def admitted(self, now: int, completed: Sequence[int], submitted: Sequence[WaitingJob]) -> None:
            self.seen.append(("admitted", now, [*completed, *(job.index for job in submitted)]))

        def settled(self, now: int) -> None:
            self.seen.append(("settled", now, []))

    run = ProbeRun(scheduler(), [(0, 10, 10, 10, 0), (0, 10, 50, 50, 50)])
    watch = Watch()
    run.observers.append(watch)
    assert started(rounds(run)) == [(0, [0]), (0, [1]), (50, [])]
    assert watch.seen == [
        ("admitted", 0, [0, 1]),
        ("admitted", 0, [0]),
        ("settled", 0, []),
        ("admitted", 50, [1]),
        ("settled", 50, []),
    ]


def test_a_wake_up_runs_a_pass_where_the_scheduler_asks_and_a_moved_one_is_cancelled() -> None:
    # Regular mode, conservative backfilling. J1 (6 procs) asks 1000 s, is predicted 100 and runs 500; J2 (8)
    # arrives at 1 and is reserved at J1's expected end, 100, when nothing happens: the scheduler asks to be woken
    # then. At 100 J1 is seen to overrun, its expected end becomes 1000, and J2's reservation with it: the
    # wake-up at 1000 replaces the one at 100. J1 ends at 500 and J2 starts then; no pass runs at 1000.
    machine = ProcessorPool(10, planning_mode("regular"), make_correction("request"))
    run = ProbeRun(scheduler("conservative", machine), [(0, 6, 1000, 100, 500), (1, 8, 100, 100, 100)])
    assert started(rounds(run)) == [(0, [0]), (1, []), (100, []), (500, [1]), (600, [])]
    assert run.log[2] == ("admit", 100, [], [])


def test_run_until_stops_before_that_time_and_moves_the_clock_there() -> None:
    run = ProbeRun(scheduler(), [(0, 10, 100, 100, 100), (50, 10, 10, 10, 10)])
    run.run(until=100)
    assert run.now == 100
    assert [entry[1] for entry in run.log] == [0, 50]  # the completion at 100 is left for later
    run.run()
    assert run.now == 110 and run.peek() is None
    with pytest.raises(IndexError, match="no event left"):
        run.step()


def test_an_event_before_now_and_an_external_event_without_a_handler_are_refused() -> None:
    class NoExternal(Simulation[WaitingJob, QueueScheduler]):
        def admit(self, completed: list[int], arrived: list[WaitingJob]) -> list[WaitingJob]:
            return arrived

        def completion_time(self, job: WaitingJob) -> int:
            return self.now + 1

    run = NoExternal(scheduler(), 10)
    with pytest.raises(ValueError, match="before now"):
        run.schedule(9, EventKind.ARRIVAL)
    run.schedule(10, EventKind.EXTERNAL, "node 3 down")
    with pytest.raises(NotImplementedError, match="no external events, got 'node 3 down'"):
        run.step()


# ---------------------------------------------------------------------------------------------
# The pass


class DecisionsLogged(FCFS):
    """FCFS that logs each call of the decision hook."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, bool, bool]] = []

    def decide(self, now: int, planner: Planner, submitted: bool, completed: bool) -> None:
        self.calls.append((now, submitted, completed))


class SelectsLogged(EasyBackfill):
    """EASY that logs the time of each selection."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        self.calls.append(now)
        return super().select(now, queue, machine)


def test_a_full_machine_rests_and_a_pass_that_can_start_nothing_decides_but_does_not_select() -> None:
    # J1 (10 procs) runs [0, 100); J2 (8) arrives at 10: full machine, no decision. At 100 J1 ends and J2
    # starts; J3 (8) arrives at 110 with 2 processors free: the policy decides, nothing is selected. J4 (2)
    # arrives at 120 and is selected (and backfilled).
    policy, backfill = DecisionsLogged(), SelectsLogged()
    run = ProbeRun(
        QueueScheduler(policy, backfill, ProcessorPool(10)),
        [(0, 10, 100, 100, 100), (10, 8, 100, 100, 100), (110, 8, 100, 100, 100), (120, 2, 50, 50, 50)],
    )
    assert started(rounds(run))[:5] == [(0, [0]), (10, []), (100, [1]), (110, []), (120, [3])]
    assert policy.calls[:4] == [(0, True, False), (100, False, True), (110, True, False), (120, True, False)]
    assert backfill.calls[:3] == [0, 100, 120]


def test_a_planning_backfill_is_never_cut_short() -> None:
    # Conservative backfilling keeps reservations at every pass, even one that cannot start anything.
    class Passes(ConservativeBackfill):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[int] = []

        def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
            self.calls.append(now)
            return super().select(now, queue, machine)

    # Whole-machine jobs of 100 s arrive at 0, 0 and 50: the pass at 50 (full machine) still runs, and places
    # the third job; the others start at 0, 100 and 200.
    backfill = Passes()
    jobs: list[Job] = [(0, 10, 100, 100, 100), (0, 10, 100, 100, 100), (50, 10, 100, 100, 100)]
    run = ProbeRun(QueueScheduler(make_policy("fcfs"), backfill, ProcessorPool(10)), jobs)
    assert started(rounds(run)) == [(0, [0]), (50, []), (100, [1]), (200, [2]), (300, [])]
    assert backfill.calls == [0, 50, 100, 200]
