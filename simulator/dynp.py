"""dynP (Streit): a queue policy that switches between FCFS, SJF and LJF as the queue changes.

Streit's scheduler is planning-based: every waiting job holds a reservation.
Two variants decide which policy orders the queue:

- basic (Streit 2001): at each submission, with at least 5 jobs waiting, the
  average estimated runtime of the waiting jobs picks SJF (up to `lower`),
  FCFS (up to `upper`) or LJF (above);
- self-tuning (Streit 2003): at each submission and each completion, with at
  least 2 jobs waiting, a virtual schedule of the whole queue is planned in
  each of the three orders, each is scored by a quality metric, and a decider
  (Table 1: `simple` or `advanced`) picks the policy.

A virtual schedule is the plan the backfilling would make in that order at
this pass (`Planner.plan`, which is `Backfill.plan`). Under `replan`, Streit's CCS, and without a plan
of its own (none, EASY) that is Streit's: every job in turn at its earliest
slot after the running jobs' expected ends. Conservative backfilling keeps the
reservations it gave, so its virtual schedules are its own plan compressed and
extended in that order: scoring a full replan there would choose for a
schedule the scheduler never follows (on SDSC-SP2 the choice came out worse
than each single policy; docs/dynp.md).

The virtual schedules are planned with the estimates the scheduler has
(`WaitingJob.t_est`: t_req, or t_sched from any estimator) and never see an
actual runtime. Qualities are exact fractions: the deciders turn on equal
scores (Table 1's `=` cases), which floating point would blur.

Policy SPECs, parsed and checked here and nowhere else (docs/dynp.md):
`fcfs`, `wfp`, `sjf`, `ljf`, or `dynp[:key=value,...]` with
`variant=self-tuning` (default; `decider=simple|advanced`, default advanced;
`quality=art|artww|sldwa|makespan`, default artww) or `variant=basic`
(`lower`, `upper`: seconds, defaults 7200 and 9000).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kernel.specs import parse_spec
from simulator.jobs import WaitingJob
from simulator.policies import FCFS, LJF, POLICIES, SJF, Planner, QueuePolicy, make_policy

DYNAMIC = "dynp"
VARIANTS = ("self-tuning", "basic")
DECIDERS = ("simple", "advanced")
QUALITIES = ("art", "artww", "sldwa", "makespan")
#: The policies dynP switches between; it starts with FCFS (Streit: "The initial policy is FCFS").
SWITCHED = ("fcfs", "sjf", "ljf")
#: Each variant's own parameters (`variant` itself is accepted by both).
PARAMETERS = {"self-tuning": ("decider", "quality"), "basic": ("lower", "upper")}


@dataclass(frozen=True)
class DynPSpec:
    """A dynP configuration; the defaults are Streit's (advanced decider and ARTwW; bounds 7200 s and 9000 s)."""

    variant: str = "self-tuning"
    decider: str = "advanced"
    quality: str = "artww"
    lower: int = 7200
    upper: int = 9000

    @property
    def spec(self) -> str:
        """The SPEC with every parameter of the variant spelled out."""
        if self.variant == "basic":
            return f"{DYNAMIC}:variant=basic,lower={self.lower},upper={self.upper}"
        return f"{DYNAMIC}:variant=self-tuning,decider={self.decider},quality={self.quality}"


_DEFAULT = DynPSpec()


def is_dynamic(spec: str) -> bool:
    """Whether a policy SPEC names dynP (whatever its parameters)."""
    return spec.strip().partition(":")[0].strip() == DYNAMIC


def parse_dynp(spec: str) -> DynPSpec:
    """The dynP configuration a `dynp[:key=value,...]` SPEC names; ValueError naming what is wrong."""
    name, params = parse_spec(spec, "policy")
    if name != DYNAMIC:
        raise ValueError(f"policy {spec!r} is not dynp")
    variant = params.pop("variant", _DEFAULT.variant)
    _check_choice(spec, "variant", variant, VARIANTS)
    for key in params:
        if key not in PARAMETERS[variant]:
            owner = [other for other, keys in PARAMETERS.items() if key in keys]
            hint = f" (it belongs to variant={owner[0]})" if owner else ""
            raise ValueError(
                f"policy {spec!r}: unknown parameter {key!r}{hint}; variant={variant} takes "
                f"{', '.join(PARAMETERS[variant])}"
            )
    if variant == "basic":
        lower = _seconds(spec, "lower", params.get("lower", str(_DEFAULT.lower)))
        upper = _seconds(spec, "upper", params.get("upper", str(_DEFAULT.upper)))
        if lower > upper:
            raise ValueError(f"policy {spec!r}: lower ({lower}) must not exceed upper ({upper})")
        return DynPSpec(variant, lower=lower, upper=upper)
    decider = params.get("decider", _DEFAULT.decider)
    quality = params.get("quality", _DEFAULT.quality)
    _check_choice(spec, "decider", decider, DECIDERS)
    _check_choice(spec, "quality", quality, QUALITIES)
    return DynPSpec(variant, decider, quality)


def _check_choice(spec: str, key: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"policy {spec!r}: {key} {value!r} is not one of {', '.join(allowed)}")


def _seconds(spec: str, key: str, value: str) -> int:
    """A bound on the average estimated runtime: a positive whole number of seconds."""
    if not value.isdigit() or int(value) <= 0:
        raise ValueError(f"policy {spec!r}: {key} {value!r} is not a positive whole number of seconds")
    return int(value)


def canonical_policy(spec: str) -> str:
    """Check any policy SPEC; return it with every parameter spelled out (a static policy is its name)."""
    name, sep, _ = spec.strip().partition(":")
    name = name.strip()
    if name in POLICIES:
        if sep:
            raise ValueError(f"policy {spec!r}: {name} takes no parameters")
        return name
    if name == DYNAMIC:
        return parse_dynp(spec).spec
    raise ValueError(
        f"unknown policy {spec!r}; choose one of {', '.join((*POLICIES, DYNAMIC))} "
        f"({DYNAMIC} takes variant={'|'.join(VARIANTS)}, decider, quality, lower, upper)"
    )


def make_queue_policy(spec: str) -> QueuePolicy:
    """The queue policy a SPEC names: a static one (`make_policy`) or a dynP variant."""
    canonical = canonical_policy(spec)
    if canonical in POLICIES:
        return make_policy(canonical)
    config = parse_dynp(canonical)
    return BasicDynP(config) if config.variant == "basic" else SelfTuningDynP(config)


# --- virtual schedules and their quality -----------------------------------------------------


#: A quality of a virtual schedule (lower is better): (jobs, their starts, when the running jobs are expected
#: to have ended) -> an exact number.
Quality = Callable[[Sequence[WaitingJob], Sequence[int], int], Fraction]


def _responses(jobs: Sequence[WaitingJob], starts: Sequence[int]) -> list[int]:
    """Planned end minus submit: a virtual schedule's jobs run for their estimate."""
    return [start + job.t_est - job.submit for job, start in zip(jobs, starts, strict=True)]


def average_response(jobs: Sequence[WaitingJob], starts: Sequence[int], busy_until: int) -> Fraction:
    """ART: the mean response time."""
    return Fraction(sum(_responses(jobs, starts)), len(jobs))


def response_weighted_by_width(jobs: Sequence[WaitingJob], starts: Sequence[int], busy_until: int) -> Fraction:
    """ARTwW: response times weighted by job width, so that wide jobs count for more than many narrow ones."""
    weighted = sum(job.size * response for job, response in zip(jobs, _responses(jobs, starts), strict=True))
    return Fraction(weighted, sum(job.size for job in jobs))


def slowdown_weighted_by_area(jobs: Sequence[WaitingJob], starts: Sequence[int], busy_until: int) -> Fraction:
    """SLDwA: slowdowns weighted by area (width x runtime), i.e. sum(width x response) / sum(width x runtime)."""
    weighted = sum(job.size * response for job, response in zip(jobs, _responses(jobs, starts), strict=True))
    return Fraction(weighted, sum(job.size * job.t_est for job in jobs))


def makespan(jobs: Sequence[WaitingJob], starts: Sequence[int], busy_until: int) -> Fraction:
    """MS: when the last job of the schedule, running or waiting, is planned to end."""
    return Fraction(max([busy_until, *(start + job.t_est for job, start in zip(jobs, starts, strict=True))]))


QUALITY_METRICS: dict[str, Quality] = {
    "art": average_response,
    "artww": response_weighted_by_width,
    "sldwa": slowdown_weighted_by_area,
    "makespan": makespan,
}


# --- the deciders (Streit 2003, Table 1) -----------------------------------------------------

#: Table 1's cases, as Table 6 counts them: 7 is a part of 2, 9 of 3, and 5 is 4b.
CASES = ("1", "2_7", "3_9", "4a", "4b_5", "4c", "6a", "6b", "6c", "8a", "8b", "8c", "10a", "10b", "10c")
KEEP = "keep"
#: Table 1, column "simple decider": per case, the policy to take, or KEEP the current one.
SIMPLE_DECIDER = {
    "1": "fcfs",
    "2_7": "sjf",
    "3_9": "fcfs",
    "4a": "ljf",
    "4b_5": "ljf",
    "4c": "ljf",
    "6a": KEEP,
    "6b": "fcfs",
    "6c": "fcfs",
    "8a": KEEP,
    "8b": "fcfs",
    "8c": "fcfs",
    "10a": "sjf",
    "10b": KEEP,
    "10c": "sjf",
}
#: Table 1, column "advanced decider": the simple decider but in the four cases (1, 6b, 8c, 10c) where it
#: favours FCFS or SJF over a current policy that is as good.
ADVANCED_DECIDER = SIMPLE_DECIDER | {"1": KEEP, "6b": KEEP, "8c": KEEP, "10c": KEEP}
DECISIONS = {"simple": SIMPLE_DECIDER, "advanced": ADVANCED_DECIDER}


def table1_case(fcfs: Fraction, sjf: Fraction, ljf: Fraction, current: str) -> str:
    """Which row of Table 1 the three schedules' qualities (lower is better) and the current policy fall in."""
    if fcfs == sjf == ljf:
        return "1"
    if sjf < fcfs and sjf < ljf:
        return "2_7"
    if fcfs < sjf and fcfs < ljf:
        return "3_9"
    if ljf < fcfs and ljf < sjf:
        return "4a" if fcfs < sjf else "4b_5" if fcfs == sjf else "4c"
    # Two tie for the best and the third is worse: the pair and the current policy decide.
    suffix = {"fcfs": "a", "sjf": "b", "ljf": "c"}[current]
    if fcfs == sjf:
        return "6" + suffix
    if fcfs == ljf:
        return "8" + suffix
    return "10" + suffix


def switch_to_best_policy(decider: str, fcfs: Fraction, sjf: Fraction, ljf: Fraction, current: str) -> tuple[str, str]:
    """Streit's `switch_to_best_policy`: the policy `decider` takes for these qualities, and the Table 1 case."""
    case = table1_case(fcfs, sjf, ljf, current)
    choice = DECISIONS[decider][case]
    return (current if choice == KEEP else choice), case


# --- the policies ----------------------------------------------------------------------------


@dataclass
class DynPStats:
    """What a dynP run did: Streit's Table 5 (and, for self-tuning, Table 6's case counts)."""

    decisions: int = 0  # Streit's "total tries of switches"
    kept: int = 0  # decisions that left the policy as it was ("same policy")
    backlog: int = 0  # waiting jobs, summed over the decisions
    switches: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SWITCHED, 0))
    jobs_started: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SWITCHED, 0))
    cases: dict[str, int] | None = None

    def record(self, backlog: int, before: str, after: str, case: str | None) -> None:
        self.decisions += 1
        self.backlog += backlog
        if after == before:
            self.kept += 1
        else:
            self.switches[after] += 1
        if self.cases is not None and case is not None:
            self.cases[case] += 1

    def summary(self) -> dict[str, Any]:
        """The JSON summary's `dynp` entry."""
        summary: dict[str, Any] = {
            "decisions": self.decisions,
            "kept": self.kept,
            "switches": dict(self.switches),
            "jobs_started": dict(self.jobs_started),
            "mean_backlog": self.backlog / self.decisions if self.decisions else 0.0,
        }
        if self.cases is not None:
            summary["cases"] = dict(self.cases)
        return summary


class DynamicPolicy(QueuePolicy):
    """The waiting jobs in FCFS, SJF and LJF order at once; `decide` picks the order the queue is listed in.

    The scheduler calls `decide` before each pass, after the running jobs'
    expected ends are up to date; it decides at the passes that follow a
    submission (or a completion). A job leaves the queue only when it starts,
    so `remove` counts it as started by the current policy.
    """

    name = DYNAMIC
    #: Whether a completion, not only a submission, calls the decider.
    decides_on_completion: bool
    #: The fewest waiting jobs that are worth a decision.
    min_backlog: int

    def __init__(self, config: DynPSpec, cases: bool) -> None:
        self.config = config
        self.current = SWITCHED[0]
        self.stats = DynPStats(cases=dict.fromkeys(CASES, 0) if cases else None)
        self._orders: dict[str, QueuePolicy] = {"fcfs": FCFS(), "sjf": SJF(), "ljf": LJF()}

    def add(self, job: WaitingJob) -> None:
        for order in self._orders.values():
            order.add(job)

    def remove(self, job: WaitingJob) -> None:
        for order in self._orders.values():
            order.remove(job)
        self.stats.jobs_started[self.current] += 1

    def ordered(self, now: int) -> list[WaitingJob]:
        return self._orders[self.current].ordered(now)

    def __len__(self) -> int:
        return len(self._orders[self.current])

    def decide(self, now: int, planner: Planner, submitted: bool, completed: bool) -> None:
        """Run the decider if this pass follows an event it runs at and enough jobs wait; `planner` plans the
        virtual schedule of each order."""
        if not (submitted or (completed and self.decides_on_completion)) or len(self) < self.min_backlog:
            return
        choice, case = self._choose(now, planner)
        self.stats.record(len(self), self.current, choice, case)
        self.current = choice

    def decisions(self) -> dict[str, Any]:
        return self.stats.summary()

    @abstractmethod
    def _choose(self, now: int, planner: Planner) -> tuple[str, str | None]:
        """The policy to use from now on, and the Table 1 case that chose it (None: no table)."""


class BasicDynP(DynamicPolicy):
    """Streit's basic dynP: the average estimated runtime of the waiting jobs against two bounds."""

    decides_on_completion = False
    min_backlog = 5  # Streit: "a threshold of 5 jobs to prevent unnecessary policy switches"

    def __init__(self, config: DynPSpec) -> None:
        super().__init__(config, cases=False)

    def _choose(self, now: int, planner: Planner) -> tuple[str, str | None]:
        jobs = self.ordered(now)
        total = sum(job.t_est for job in jobs)  # compared as total <= bound x count: exact at the bounds
        if total <= self.config.lower * len(jobs):
            return "sjf", None
        if total <= self.config.upper * len(jobs):
            return "fcfs", None
        return "ljf", None


class SelfTuningDynP(DynamicPolicy):
    """Streit's self-tuning dynP: plan the queue in each order, score the plans, let Table 1 decide."""

    decides_on_completion = True
    min_backlog = 2  # with one job waiting every order is the same schedule

    def __init__(self, config: DynPSpec) -> None:
        super().__init__(config, cases=True)
        self._quality = QUALITY_METRICS[config.quality]

    def _choose(self, now: int, planner: Planner) -> tuple[str, str | None]:
        busy_until = planner.busy_until(now)
        scores: dict[tuple[int, ...], Fraction] = {}  # orders that coincide share their schedule
        quality: dict[str, Fraction] = {}
        for policy in SWITCHED:
            jobs = self._orders[policy].ordered(now)
            key = tuple(job.index for job in jobs)
            if key not in scores:
                scores[key] = self._quality(jobs, planner.plan(now, jobs), busy_until)
            quality[policy] = scores[key]
        return switch_to_best_policy(self.config.decider, quality["fcfs"], quality["sjf"], quality["ljf"], self.current)
