"""Placing jobs on nodes as select/cons_tres does: hand-worked cases, several checked on the one-host Slurm."""

from __future__ import annotations

import numpy as np
import pytest

from kernel.resources import ALL_MEMORY, ResourceRequest
from simulator.cluster import Cluster, MemoryDefaults, Node, Partition, SelectSettings
from simulator.nodes import Allocation, NodeState, NodeTable, demand, spread_tasks


def cluster(
    *nodes: Node, select: SelectSettings | None = None, memory: MemoryDefaults | None = None, **partition: object
) -> Cluster:
    return Cluster(
        "test",
        nodes=nodes,
        partitions=(Partition("p", tuple(range(len(nodes))), default=True, **partition),),  # type: ignore[arg-type]
        select=select or SelectSettings(unit="cpu", memory=False),
        memory=memory or MemoryDefaults(),
    )


def state_of(machine: Cluster) -> NodeState:
    return NodeState(NodeTable(machine))


def place(state: NodeState, request: ResourceRequest, key: int | None = None) -> dict[str, tuple[int, int, int]] | None:
    """{node: (CPUs, MB, GPUs)} the job gets, allocated under `key` if given."""
    machine = state.table.cluster
    partition = machine.partitions[0]
    allocation = state.pick(demand(request, machine, partition), state.table.partition_masks[partition.name])
    if allocation is None:
        return None
    if key is not None:
        state.allocate(key, allocation)
    return {
        machine.nodes[node].name: (int(cpus), int(memory), int(gpus))
        for node, cpus, memory, gpus in zip(
            allocation.nodes, allocation.cpus, allocation.memory, allocation.gpus, strict=True
        )
    }


def busy(state: NodeState, **cpus_in_use: int) -> None:
    """Occupy CPUs on named nodes with filler jobs (keys from 1000)."""
    machine = state.table.cluster
    for key, (name, cpus) in enumerate(cpus_in_use.items(), start=1000):
        index = machine.node_index(name)
        state.allocate(key, Allocation(np.array([index]), np.array([cpus]), np.array([0]), np.array([0])))


MEMORY = SelectSettings(unit="core", memory=True)


def mixed() -> NodeState:
    """The probe cluster: 3 nodes x 8 CPUs, 16000 MB, CR_Core_Memory, DefMemPerCPU=1000; n1 has 3 CPUs
    and 11000 MB free, n2 5 and 13000, n3 none."""
    machine = cluster(*(Node(f"n{i}", 8, 16000) for i in (1, 2, 3)), select=MEMORY, memory=MemoryDefaults(1000))
    state = state_of(machine)
    for key, (node, cpus) in enumerate(((0, 5), (1, 3), (2, 8))):
        state.allocate(key, Allocation(np.array([node]), np.array([cpus]), np.array([cpus * 1000]), np.array([0])))
    return state


def test_best_fit_as_the_one_host_slurm_placed_jobs():
    # sbatch -n 4: the node with the fewest free CPUs that holds it all (Slurm put it on n2)
    assert place(mixed(), ResourceRequest(tasks=4)) == {"n2": (4, 4000, 0)}
    # -n 7: no node holds it; the nodes in order, each giving what is still needed (n[1-2])
    assert place(mixed(), ResourceRequest(tasks=7)) == {"n1": (3, 3000, 0), "n2": (4, 4000, 0)}
    # -N 2 -n 2: one task on each of the first two nodes
    assert place(mixed(), ResourceRequest(nodes=2, max_nodes=2, tasks=2)) == {"n1": (1, 1000, 0), "n2": (1, 1000, 0)}
    # -n 2 --mem-per-cpu=7000: memory leaves one CPU on each of n1 (11000 MB) and n2 (13000 MB)
    assert place(mixed(), ResourceRequest(tasks=2, mem_per_cpu=7000)) == {"n1": (1, 7000, 0), "n2": (1, 7000, 0)}
    # -n 3 --mem-per-cpu=5000: two CPUs fit on n1, the third on n2
    assert place(mixed(), ResourceRequest(tasks=3, mem_per_cpu=5000)) == {"n1": (2, 10000, 0), "n2": (1, 5000, 0)}
    # -N 1 -n 6 fits nowhere; --mem=12000 fits on n2 only by memory, but n2 lacks CPUs for -n 6
    assert place(mixed(), ResourceRequest(nodes=1, max_nodes=1, tasks=6)) is None
    assert place(mixed(), ResourceRequest(tasks=2, mem_per_node=12000)) == {"n2": (2, 12000, 0)}


def test_a_job_spread_over_nodes_leaves_a_cpu_for_each_node_still_needed():
    state = state_of(cluster(*(Node(f"n{i}", 8) for i in (1, 2, 3))))
    assert place(state, ResourceRequest(nodes=3, max_nodes=3, tasks=3)) == {f"n{i}": (1, 0, 0) for i in (1, 2, 3)}
    assert place(state, ResourceRequest(tasks=12)) == {"n1": (8, 0, 0), "n2": (4, 0, 0)}
    assert place(state, ResourceRequest(nodes=2, max_nodes=2, tasks=10)) == {"n1": (8, 0, 0), "n2": (2, 0, 0)}


def test_runs_of_consecutive_nodes_best_fit_and_weights():
    machine = cluster(*(Node(f"n{i}", 4, weight=2 if i == 5 else 1) for i in range(1, 7)))
    state = state_of(machine)
    busy(state, n3=4)  # runs of free nodes: n1-n2 (8 CPUs), n4 (weight 1), n5 (weight 2), n6 (weight 1)
    # 3 CPUs: the first run with fewest CPUs that suffices is n4 (4 CPUs), not n1-n2 (8)
    assert place(state, ResourceRequest(tasks=3)) == {"n4": (3, 0, 0)}
    # 6 CPUs: n1-n2 is the only sufficient run of the lowest weight
    assert place(state, ResourceRequest(tasks=6)) == {"n1": (4, 0, 0), "n2": (2, 0, 0)}
    busy(state, n1=4, n2=4, n4=4, n6=4)
    assert place(state, ResourceRequest(tasks=1)) == {"n5": (1, 0, 0)}  # only the heavier node is left


def test_an_insufficient_larger_run_replaces_a_sufficient_one_as_slurm_writes_it():
    # -N 2 -n 2: run n1-n2 has 2 free CPUs and 2 nodes (sufficient); run n4 has 8 free CPUs on one node
    # (insufficient: one node). _eval_nodes' third clause makes the larger run best: n4, then n1.
    machine = cluster(Node("n1", 8), Node("n2", 8), Node("n3", 8), Node("n4", 8))
    state = state_of(machine)
    busy(state, n1=7, n2=7, n3=8)
    assert place(state, ResourceRequest(nodes=2, max_nodes=2, tasks=2)) == {"n1": (1, 0, 0), "n4": (1, 0, 0)}


def test_dropping_small_nodes_when_max_nodes_forbids_using_them():
    # -N 1-2 -n 8 over free CPUs 1, 1, 4, 4: the first pass takes n1 and then can take one node only;
    # choose_nodes drops the one-CPU nodes and tries again: n3 and n4
    state = state_of(cluster(*(Node(f"n{i}", 4) for i in (1, 2, 3, 4))))
    busy(state, n1=3, n2=3)
    assert place(state, ResourceRequest(nodes=1, max_nodes=2, tasks=8)) == {"n3": (4, 0, 0), "n4": (4, 0, 0)}


def test_exclusive_jobs_take_idle_nodes_whole():
    machine = cluster(Node("n1", 8, 16000), Node("n2", 8, 16000), select=MEMORY, memory=MemoryDefaults(1000))
    state = state_of(machine)
    busy(state, n1=1)
    assert place(state, ResourceRequest(tasks=1, exclusive=True), key=1) == {"n2": (8, 8000, 0)}
    assert place(state, ResourceRequest(tasks=1)) == {"n1": (1, 1000, 0)}
    assert place(state, ResourceRequest(tasks=1, exclusive=True)) is None
    state.release(1)
    assert place(state, ResourceRequest(nodes=2, tasks=2, exclusive=True)) is None  # n1 is not idle
    exclusive_partition = cluster(Node("n1", 4), Node("n2", 4), exclusive=True)
    assert place(state_of(exclusive_partition), ResourceRequest(tasks=2)) == {"n1": (4, 0, 0)}


def test_memory_defaults_and_the_whole_node_without_them():
    nodes = (Node("n1", 4, 8000), Node("n2", 4, 8000))
    state = state_of(cluster(*nodes, select=MEMORY))
    assert place(state, ResourceRequest(tasks=1), key=1) == {"n1": (1, 8000, 0)}  # no default: all memory
    assert place(state, ResourceRequest(tasks=1), key=2) == {"n2": (1, 8000, 0)}
    assert place(state, ResourceRequest(tasks=1, mem_per_node=1)) is None  # CPUs are free, memory is not
    per_node = state_of(cluster(*nodes, select=MEMORY, memory=MemoryDefaults(def_mem_per_node=3000)))
    assert place(per_node, ResourceRequest(tasks=4)) == {"n1": (4, 3000, 0)}
    partition_default = state_of(cluster(*nodes, select=MEMORY, def_mem_per_cpu=500))
    assert place(partition_default, ResourceRequest(tasks=2, mem_per_node=ALL_MEMORY), key=1) == {"n1": (2, 8000, 0)}
    assert place(partition_default, ResourceRequest(tasks=2)) == {"n2": (2, 1000, 0)}
    assert place(state_of(cluster(*nodes)), ResourceRequest(tasks=2)) == {"n1": (2, 0, 0)}  # memory not consumed


def test_gpus_per_node_per_job_and_per_task():
    machine = cluster(Node("c1", 8), Node("g1", 8, gres={"gpu": 2}), Node("g2", 8, gres={"gpu": 4}))
    state = state_of(machine)
    assert place(state, ResourceRequest(tasks=2, gpus_per_node=1)) == {"g1": (2, 0, 1)}  # best fit, not more GPUs
    # per job: the nodes g1 and g2 (each node's GPUs count toward the five), then in node order each takes
    # what it has while leaving one for each node after it (_set_job_bits1): g1 two, g2 three
    assert place(state, ResourceRequest(tasks=2, gpus=5)) == {"g1": (1, 0, 2), "g2": (1, 0, 3)}
    assert place(state, ResourceRequest(tasks=1, gpus=3), key=1) == {"g2": (1, 0, 3)}
    assert place(state, ResourceRequest(nodes=2, max_nodes=2, tasks=2, gpus_per_node=2)) is None  # g2 has one left
    assert place(state, ResourceRequest(tasks=3, gpus_per_task=1)) == {"g1": (2, 0, 2), "g2": (1, 0, 1)}
    assert place(state, ResourceRequest(tasks=1)) == {"g2": (1, 0, 0)}  # best fit: GPU nodes are no different


def test_whole_cores_under_cr_core_and_the_partition_cpu_cap():
    two_threads = Node("n1", 8, sockets=1, cores_per_socket=4, threads_per_core=2)
    state = state_of(cluster(two_threads, select=SelectSettings(unit="core", memory=False)))
    assert place(state, ResourceRequest(tasks=1), key=1) == {"n1": (2, 0, 0)}  # a core is two CPUs
    assert place(state, ResourceRequest(tasks=3)) == {"n1": (4, 0, 0)}
    assert place(state_of(cluster(Node("n1", 8), Node("n2", 8), max_cpus_per_node=2)), ResourceRequest(tasks=3)) == {
        "n1": (2, 0, 0),
        "n2": (1, 0, 0),
    }


def test_least_loaded_nodes_first_in_an_lln_partition():
    state = state_of(cluster(*(Node(f"n{i}", 4) for i in (1, 2, 3)), lln=True))
    busy(state, n1=2, n2=1)
    assert place(state, ResourceRequest(tasks=2)) == {"n3": (2, 0, 0)}
    assert place(state, ResourceRequest(tasks=6)) == {"n2": (2, 0, 0), "n3": (4, 0, 0)}


def test_allocate_and_release_keep_the_books():
    state = state_of(cluster(Node("n1", 4, 100, gres={"gpu": 1}), select=MEMORY))
    place(state, ResourceRequest(tasks=3, mem_per_node=60, gpus_per_node=1), key=7)
    assert (state.free_cpus.tolist(), state.free_memory.tolist(), state.free_gpus.tolist()) == ([1], [40], [0])
    with pytest.raises(AssertionError, match="job 8"):
        state.allocate(8, state.allocations[7])
    state.release(7)
    assert (state.free_cpus.tolist(), state.free_memory.tolist(), state.free_gpus.tolist()) == ([4], [100], [1])


def test_tasks_spread_one_per_node_then_round_robin():
    machine = cluster(Node("n1", 8), Node("n2", 8), Node("n3", 8))
    request = demand(ResourceRequest(tasks=3, cpus_per_task=2), machine, machine.partitions[0])
    assert spread_tasks(request, np.array([5, 2])).tolist() == [2, 1]  # dist_tasks: [4, 2] CPUs
    even = demand(ResourceRequest(tasks=7), machine, machine.partitions[0])
    assert spread_tasks(even, np.array([8, 8, 8])).tolist() == [3, 2, 2]
    assert spread_tasks(even, np.array([1, 8, 8])).tolist() == [1, 3, 3]


def test_requests_slurm_refuses():
    machine = cluster(Node("n1", 4))
    with pytest.raises(ValueError, match="cannot spread"):
        demand(ResourceRequest(nodes=3, tasks=2), machine, machine.partitions[0])


def test_a_whole_node_job_gets_no_more_gpus_per_task_than_its_nodes_have():
    """Its tasks spread over the CPUs the GPUs let each node offer, not over every CPU it is given (the round robin
    over all CPUs put 2 one-GPU tasks on a one-GPU node: an allocation that could not be made)."""
    state = state_of(cluster(Node("n1", 2, gres={"gpu": 1}), Node("n2", 4, gres={"gpu": 2})))
    assert place(state, ResourceRequest(tasks=3, exclusive=True, gpus_per_task=1), key=1) == {
        "n1": (2, 0, 1),
        "n2": (4, 0, 2),
    }


def test_a_whole_node_job_needs_memory_for_every_cpu_it_is_given():
    """MaxCPUsPerNode caps the CPUs a node offers, but a whole node is given all of its CPUs and memory per CPU for
    each: a node without that memory free cannot take it (it was chosen, and its allocation could not be made)."""
    state = state_of(cluster(Node("n1", 10, 1000), select=MEMORY, max_cpus_per_node=2))
    assert place(state, ResourceRequest(tasks=1, exclusive=True, mem_per_cpu=200)) is None
    assert place(state, ResourceRequest(tasks=1, exclusive=True, mem_per_cpu=100), key=1) == {"n1": (10, 1000, 0)}
