"""The simulator's shortcuts give what the general code gives: `Profile.earlier_slot` (conservative backfilling's
compression without a release), and the node choice and start estimates on clusters of one-CPU nodes
(`nodes.pick_unit_nodes`, `nodeplan.earliest_start`'s bit sets)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.resources import ResourceRequest
from simulator.backfill import Profile
from simulator.clusterreplay import single_cpu_nodes
from simulator.nodeplan import RunningEnd, earliest_start
from simulator.nodes import NodeState, NodeTable, demand, pick


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
    found = profile.earlier_slot(size, duration, old, first)
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
    fast = earliest_start(wanted, state, ends, available, now, window_scale=scale)
    table.unit_nodes = False  # the general planner and chooser
    general = earliest_start(wanted, state, ends, available, now, window_scale=scale)
    assert (fast is None) == (general is None)
    if fast is not None and general is not None:
        assert fast.start == general.start
        assert fast.allocation.nodes.tolist() == general.allocation.nodes.tolist()
