"""`pick` against a line-by-line transliteration of Slurm 22.05's choose_nodes and _eval_nodes.

The transliteration below follows src/plugins/select/cons_tres/job_test.c
node by node (equal node weights, no GPUs, no required or contiguous nodes),
loops and all; `simulator.nodes` takes shortcuts (runs as arrays, one
cumulative sum where no node can be skipped). Random states must give both
the same nodes and CPUs.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.resources import ResourceRequest
from simulator.cluster import Cluster, Node, Partition, SelectSettings
from simulator.nodes import Allocation, NodeState, NodeTable, demand


def cpus_to_use(avail: int, rem_max: int, rem_nodes: int, pn_min: int, whole: bool) -> int:
    if whole:
        return avail
    limit = rem_max - max(rem_nodes - 1, 0)
    return max(limit, pn_min) if avail > limit else avail


def consecutive_sets(avail: list[int]) -> list[list[int]]:
    """_eval_nodes's runs of consecutive nodes with CPUs available: [start, end, cpus, nodes] each."""
    sets: list[list[int]] = []
    current = None
    for index, cpus in enumerate(avail):
        if cpus:
            if current is None:
                current = [index, index, 0, 0]
                sets.append(current)
            current[1], current[2], current[3] = index, current[2] + cpus, current[3] + 1
        else:
            current = None
    return sets


def best_set(sets: list[list[int]], rem_cpus: int, rem_nodes: int) -> int | None:
    """_eval_nodes's choice of run: the first sufficient one with the fewest CPUs, else the one with the most."""
    best = None
    best_cpus = best_nodes = best_sufficient = 0
    for position, (_, _, cpus, nodes) in enumerate(sets):
        if nodes == 0:
            continue
        sufficient = cpus >= rem_cpus and nodes >= rem_nodes
        new_best = best_nodes == 0
        if not new_best and (
            (sufficient and not best_sufficient)
            or (sufficient and cpus < best_cpus)
            or (not sufficient and cpus > best_cpus)
        ):
            new_best = True
        if new_best:
            best, best_cpus, best_nodes, best_sufficient = position, cpus, nodes, sufficient
    return best


def eval_nodes(avail: list[int], min_nodes: int, max_nodes: int, min_cpus: int, pn_min: int, whole: bool):
    """_eval_nodes as written (no weights, GPUs, required nodes): {node: CPUs} or None."""
    rem_cpus = rem_max = min_cpus
    rem_nodes = min_rem_nodes = min_nodes
    sets = consecutive_sets(avail)
    chosen: dict[int, int] = {}
    per_node = list(avail)
    while sets and max_nodes > 0:
        best = best_set(sets, rem_cpus, rem_nodes)
        if best is None:
            break
        first, last = sets[best][0], sets[best][1]
        if rem_nodes <= 1:
            fit, size = -1, 0
            for index in range(first, last + 1):
                if index in chosen or per_node[index] < rem_cpus:
                    continue
                if fit == -1 or per_node[index] < size:
                    fit, size = index, per_node[index]
                    if size == rem_cpus:
                        break
            if fit != -1:
                for index in range(first, last + 1):
                    if index != fit:
                        per_node[index] = 0
        for index in range(first, last + 1):
            if max_nodes == 0 or (rem_nodes <= 0 and rem_cpus <= 0):
                break
            if index in chosen or per_node[index] <= 0:
                continue
            cpus = per_node[index]
            if max_nodes == 1 and cpus < rem_cpus:
                continue
            cpus = cpus_to_use(cpus, rem_max, min_rem_nodes, pn_min, whole)
            chosen[index] = cpus
            rem_cpus -= cpus
            rem_max -= cpus
            rem_nodes -= 1
            min_rem_nodes -= 1
            max_nodes -= 1
        if rem_nodes <= 0 and rem_cpus <= 0:
            return chosen
        sets[best][2] = sets[best][3] = 0
    return chosen if rem_cpus <= 0 and rem_nodes <= 0 else None


def choose_nodes(avail: list[int], min_nodes: int, max_nodes: int, min_cpus: int, pn_min: int, whole: bool):
    """choose_nodes: _eval_nodes, then again without the nodes of fewest CPUs, level by level."""
    found = eval_nodes(avail, min_nodes, max_nodes, min_cpus, pn_min, whole)
    if found is not None:
        return found
    remaining = sum(1 for cpus in avail if cpus)
    if remaining <= min_nodes:
        return None
    kept = list(avail)
    for count in range(1, max(avail)):
        changed = False
        for index, cpus in enumerate(kept):
            if 0 < cpus <= count:
                kept[index] = 0
                changed = True
                remaining -= 1
                if remaining <= min_nodes:
                    break
        if not changed and count != 1:
            continue
        found = eval_nodes(kept, min_nodes, max_nodes, min_cpus, pn_min, whole)
        if found is not None or remaining <= min_nodes:
            return found
    return None


@settings(max_examples=400, deadline=None)
@given(
    shape=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 8)), min_size=1, max_size=12),
    tasks=st.integers(1, 40),
    min_nodes=st.integers(1, 4),
    extra_nodes=st.one_of(st.none(), st.integers(0, 3)),
    exclusive=st.booleans(),
)
def test_pick_chooses_what_slurms_loops_choose(shape, tasks, min_nodes, extra_nodes, exclusive):
    nodes = tuple(Node(f"n{i}", cpus) for i, (cpus, _) in enumerate(shape))
    machine = Cluster(
        "random",
        nodes=nodes,
        partitions=(Partition("p", tuple(range(len(nodes))), default=True),),
        select=SelectSettings(unit="cpu", memory=False),
    )
    state = NodeState(NodeTable(machine))
    nothing = np.zeros(1, dtype=np.int64)
    for index, (cpus, used) in enumerate(shape):
        if min(used, cpus):
            state.allocate(1000 + index, Allocation(np.array([index]), np.array([min(used, cpus)]), nothing, nothing))
    tasks = max(tasks, min_nodes)
    request = ResourceRequest(
        nodes=min_nodes,
        max_nodes=None if extra_nodes is None else min_nodes + extra_nodes,
        tasks=tasks,
        exclusive=exclusive,
    )
    job = demand(request, machine, machine.partitions[0])
    allocation = state.pick(job, state.table.partition_masks["p"])
    free = state.free_cpus.tolist()
    totals = state.table.cpus.tolist()
    avail = [
        cpus if not exclusive else (total if cpus == total else 0) for cpus, total in zip(free, totals, strict=True)
    ]
    if job.max_nodes == 1:
        avail = [cpus if cpus >= job.min_cpus else 0 for cpus in avail]
    if sum(1 for cpus in avail if cpus) < job.min_nodes or sum(avail) < job.min_cpus:
        expected = None
    else:
        expected = choose_nodes(avail, job.min_nodes, job.max_nodes, job.min_cpus, job.pn_min_cpus, exclusive)
    if expected is None:
        assert allocation is None
        return
    assert allocation is not None
    assert allocation.nodes.tolist() == sorted(expected)
    if exclusive:
        assert allocation.cpus.tolist() == [int(state.table.cpus[i]) for i in sorted(expected)]
    elif sum(expected.values()) == job.tasks:
        assert allocation.cpus.tolist() == [expected[i] for i in sorted(expected)]
