"""The simulator's shortcuts give what the general code gives: `Profile.earlier_slot` (conservative backfilling's
compression without a release), and the node choice and start estimates on clusters of one-CPU nodes
(`nodes.pick_unit_nodes`, `nodeplan.earliest_start`'s bit sets), and start estimates on nodes with memory and GPUs
with the ends of running jobs counted before they are given back."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.resources import ResourceRequest
from predictor.registry import make_estimator
from predictor.session import LocalSession
from simulator.backfill import ConservativeBackfill, Profile
from simulator.cluster import Cluster, Node, Partition, SelectSettings
from simulator.clusterreplay import single_cpu_nodes
from simulator.engine import SimulationConfig, simulate
from simulator.nodeplan import RunningEnd, _batches, earliest_start, guess_end
from simulator.nodes import Demand, NodeState, NodeTable, demand, pick, to_bits
from simulator.workloads.synthetic import generate_workload


@settings(max_examples=150, deadline=None)
@given(
    releases=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 4)), max_size=6),
    held=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 40)), min_size=1, max_size=10),
    job=st.tuples(st.integers(1, 8), st.integers(1, 40)),
)
def test_earlier_slot_is_where_place_puts_a_released_job(
    releases: list[tuple[int, int]], held: list[tuple[int, int]], job: tuple[int, int]
) -> None:
    """A job holding [old, old + duration) moves to `earlier_slot` exactly when release + place moves it there
    (after a hold placed before it is given back, as an early end gives it back)."""
    free_now = 16 - sum(size for _, size in releases)
    if free_now < 0:
        return
    profile = Profile(0, free_now, releases)
    holds = [(profile.place(size, duration), duration, size) for size, duration in held]
    size, duration = job
    old = profile.place(size, duration)
    profile.release(*holds[0])  # an early end: the job may now start earlier
    room: list[int] = []
    profile.extend_room(room, len(profile.times) - 1)
    first = next((i for i, peak in enumerate(room) if peak >= size), len(room))
    step = profile.earlier_slot(size, duration, bisect_left(profile.times, old), first)
    found = None if step is None else profile.times[step]
    released = profile.copy()
    released.release(old, duration, size)
    placed = released.place(size, duration)
    assert found == (placed if placed < old else None)
    assert room == [max(profile.free[: i + 1]) for i in range(len(profile.free))]


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    share_free=st.floats(0.1, 1.0),
    tasks=st.integers(1, 40),
)
def test_unit_nodes_are_picked_as_the_general_chooser_picks_them(
    nodes: int, seed: int, share_free: float, tasks: int
) -> None:
    cluster = single_cpu_nodes(nodes)
    if tasks > nodes:
        return
    table = NodeTable(cluster)
    assert table.unit_nodes
    rng = np.random.default_rng(seed)
    state = NodeState(table)
    state.free.cpus[:] = rng.random(nodes) < share_free
    available = rng.random(nodes) < 0.9
    wanted = demand(ResourceRequest(tasks=tasks), cluster, cluster.partitions[0])
    fast = pick(wanted, table, state.free, available)
    table.unit_nodes = False  # the general chooser
    general = pick(wanted, table, state.free, available)
    assert (fast is None) == (general is None)
    if fast is not None and general is not None:
        for field in ("nodes", "cpus", "memory", "gpus"):
            ours, theirs = getattr(fast, field), getattr(general, field)
            assert ours.dtype == theirs.dtype and ours.tolist() == theirs.tolist(), field
        assert fast.exclusive == general.exclusive


@settings(max_examples=200, deadline=None)
@given(nodes=st.integers(2, 40), seed=st.integers(0, 2**32 - 1), tasks=st.integers(1, 40), now=st.integers(0, 400))
def test_start_estimates_on_unit_nodes_are_the_general_ones(nodes: int, seed: int, tasks: int, now: int) -> None:
    """Running jobs on random nodes with random expected ends (some already past, some without a limit)."""
    cluster = single_cpu_nodes(nodes)
    if tasks > nodes:
        return
    table = NodeTable(cluster)
    state = NodeState(table)
    rng = np.random.default_rng(seed)
    ends = []
    for key in range(int(rng.integers(0, nodes + 1))):
        width = int(rng.integers(1, 4))
        wanted = demand(ResourceRequest(tasks=width), cluster, cluster.partitions[0])
        allocation = state.pick(wanted, rng.random(nodes) < 0.7)
        if allocation is None:
            continue
        state.allocate(key, allocation)
        limit = None if rng.random() < 0.2 else int(rng.integers(60, 600))
        ends.append(RunningEnd(int(rng.integers(0, 500)), key, limit, int(rng.integers(0, 3))))
    ends.sort()
    available = rng.random(nodes) < 0.85
    wanted = demand(ResourceRequest(tasks=tasks), cluster, cluster.partitions[0])
    scale = int(rng.choice([0, 30]))
    fast = earliest_start(wanted, state, ends, to_bits(available), now, window_scale=scale)
    table.unit_nodes = False  # the general planner and chooser
    general = earliest_start(wanted, state, ends, to_bits(available), now, window_scale=scale)
    assert (fast is None) == (general is None)
    if fast is not None and general is not None:
        assert fast.start == general.start
        assert fast.allocation().nodes.tolist() == general.allocation().nodes.tolist()
        assert fast.nodes == general.nodes


def _given_back_batch_by_batch(
    wanted: Demand, state: NodeState, ends: list[RunningEnd], available: np.ndarray, now: int, scale: int
) -> tuple[int, list[int], list[int], list[int], list[int]] | None:
    """`earliest_start` as _will_run_test does it, without the counting shortcut: every batch of ends given back
    node by node, and a placement tried after each."""
    found = state.pick(wanted, available)
    last_end = None
    free = state.free.copy()
    for batch in [None, *_batches(ends, state.holdings, to_bits(available), scale)]:
        if batch is not None:
            for job in batch:
                free.add(state.allocations[job.key])
            found = pick(wanted, state.table, free, available)
            last_end = batch[-1]
        if found is not None:
            start = now if last_end is None else (guess_end(last_end, now, 30) if last_end.end <= now else last_end.end)
            return (start, *(getattr(found, field).tolist() for field in ("nodes", "cpus", "memory", "gpus")))
    return None


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), now=st.integers(0, 400))
def test_start_estimates_with_memory_and_gpus_are_those_of_giving_back_every_batch(seed: int, now: int) -> None:
    """Nodes with CPUs, memory and GPUs, jobs of every kind running and asked about: counting what a batch frees
    before giving it back (`earliest_start`) changes no estimate."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 12))
    nodes = tuple(
        Node(
            f"n{i}",
            int(rng.choice([2, 4, 8])),
            memory=int(rng.choice([4000, 8000])),
            gres={"gpu": int(rng.integers(0, 3))},
        )
        for i in range(size)
    )
    cluster = Cluster(
        "random",
        nodes=nodes,
        partitions=(Partition("p", tuple(range(size)), default=True),),
        select=SelectSettings(unit="cpu", memory=True),
    )

    def request() -> ResourceRequest:
        gpus = int(rng.integers(0, 4))
        kind = int(rng.integers(0, 4))
        return ResourceRequest(
            tasks=int(rng.integers(1, 9)),
            mem_per_cpu=int(rng.choice([100, 500, 1500])),
            exclusive=bool(rng.random() < 0.25),
            gpus=gpus if kind == 1 and gpus else None,
            gpus_per_node=gpus if kind == 2 and gpus else None,
            gpus_per_task=1 if kind == 3 and gpus else None,
        )

    table = NodeTable(cluster)
    state = NodeState(table)
    ends = []
    for key in range(int(rng.integers(0, 3 * size))):
        allocation = state.pick(demand(request(), cluster, cluster.partitions[0]), rng.random(size) < 0.8)
        if allocation is not None:
            state.allocate(key, allocation)
            limit = None if rng.random() < 0.2 else int(rng.integers(60, 600))
            ends.append(RunningEnd(int(rng.integers(0, 500)), key, limit, int(rng.integers(0, 3))))
    ends.sort()
    available = rng.random(size) < 0.8
    scale = int(rng.choice([0, 30]))
    for _ in range(4):
        wanted = demand(request(), cluster, cluster.partitions[0])
        counted = earliest_start(wanted, state, ends, to_bits(available), now, window_scale=scale)
        expected = _given_back_batch_by_batch(wanted, state, ends, available, now, scale)
        if counted is None or expected is None:
            assert counted is None and expected is None
            continue
        allocation = counted.allocation()
        assert (
            counted.start,
            *(getattr(allocation, field).tolist() for field in ("nodes", "cpus", "memory", "gpus")),
        ) == expected
        assert counted.nodes == to_bits(np.isin(np.arange(size), allocation.nodes))


@pytest.mark.parametrize("order", ["queue", "sjf"])
def test_compression_never_meets_an_overbooked_profile(monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    """`earlier_slot` takes the steps from a job's own hold on to have room for it, which holds only if no time is
    promised more processors than exist: a plan that became overbooked (estimates overrun in regular mode) must be
    rebuilt, never compressed. Checked on a replay where overruns do overbook it."""
    seen = {"compressions": 0, "rebuilds": 0}
    earlier_slot, rebuild = Profile.earlier_slot, ConservativeBackfill._rebuild

    def checked(profile: Profile, *args: int) -> int | None:
        assert not profile.overbooked()
        seen["compressions"] += 1
        return earlier_slot(profile, *args)

    def counted(backfill: ConservativeBackfill, *args: Any) -> Profile:
        seen["rebuilds"] += 1
        return rebuild(backfill, *args)

    monkeypatch.setattr(Profile, "earlier_slot", checked)
    monkeypatch.setattr(ConservativeBackfill, "_rebuild", counted)
    table = generate_workload(jobs=800, procs=64, load=0.95, seed=3).jobs
    config = SimulationConfig(64, "fcfs", "conservative", "regular", "request", order)
    simulate(table, config, LocalSession(make_estimator("last2")))
    assert seen["compressions"] > 100 and seen["rebuilds"] > 10
