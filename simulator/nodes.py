"""Jobs placed on nodes as Slurm's select/cons_tres places them: CPUs, memory and GPUs per node.

The scheduler's side of the cluster model: no runtimes here, only what is
free and what a job asks. `NodeState` holds what each node has free and
which job holds what; `Demand` is a job's request resolved against the
cluster (defaults, allocation unit, partition); `pick` chooses the nodes
and the CPUs, memory and GPUs on each, following Slurm 22.05:

- which nodes can take the job and how many CPUs each offers
  (`can_job_run_on_node` and `_verify_node_state`: free cores, memory per
  CPU or per node, GPUs, whole idle nodes for an exclusive job);
- which of them it gets (`_eval_nodes`): runs of consecutive usable nodes
  of equal weight, the lowest weight first, then the first run large
  enough with the fewest CPUs (best fit) or else the largest; in a run, a
  single node that fits with the fewest CPUs, else the nodes in order,
  each giving what is still needed (`_cpus_to_use`); GPU jobs prefer
  nodes with more free GPUs (the weight's low byte); LLN partitions take
  the least loaded nodes first (`_eval_nodes_lln`);
- when that fails although enough is free, nodes with the fewest
  resources are dropped one level at a time and the choice tried again
  (`choose_nodes`);
- how the tasks spread over the chosen nodes (`dist_tasks_compute_c_b`:
  one task per node, then round robin), which sets the CPUs per node,
  rounded up to whole cores under CR_Core.

Node sets are numpy boolean masks over the nodes in Slurm's order where
resources are counted per node, and Python integers used as bit sets (bit i
is node i) where only membership counts: a running job's nodes
(`NodeState.holdings`), the nodes with a free CPU, the nodes a job gets on
nodes of one CPU (`pick_unit_nodes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from kernel.resources import ALL_MEMORY, ResourceRequest
from simulator.cluster import Cluster, Partition

IntArray = np.ndarray  # int64 per node
BoolArray = np.ndarray  # bool per node


def to_bits(mask: BoolArray) -> int:
    """A node mask as a bit set."""
    return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")


def from_bits(bits: int, size: int) -> BoolArray:
    """A bit set as a node mask of `size` nodes."""
    raw = np.frombuffer(bits.to_bytes((size + 7) // 8, "little"), dtype=np.uint8)
    return np.unpackbits(raw, count=size, bitorder="little").astype(bool)


class NodeTable:
    """What each node has in all, as arrays in Slurm's node order (the cluster's static side)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        nodes = cluster.nodes
        self.size = len(nodes)
        self.cpus = np.array([node.usable_cpus for node in nodes], dtype=np.int64)
        self.memory = np.array([node.usable_memory for node in nodes], dtype=np.int64)
        self.gpus = np.array([node.gpus for node in nodes], dtype=np.int64)
        self.weight = np.array([node.weight for node in nodes], dtype=np.int64)
        self.sched_weight = (self.weight << 8) | 0xFF  # the low byte is for GPU jobs
        self.uniform_weight = bool((self.weight == self.weight[0]).all())
        unit = cluster.select.unit
        self.unit = np.array(
            [
                1 if unit == "cpu" else node.cpus_per_core * (node.cores_per_socket if unit == "socket" else 1)
                for node in nodes
            ],
            dtype=np.int64,
        )
        self.one_cpu_units = bool((self.unit == 1).all())
        #: Every node one CPU, all of one weight: a node is free or not, and a job of CPUs alone takes runs of
        #: free nodes (`pick_unit_nodes`).
        self.unit_nodes = bool((self.cpus == 1).all()) and self.uniform_weight and self.one_cpu_units
        self.usable = np.array([node.usable for node in nodes], dtype=bool)
        self.partition_masks = {partition.name: self._mask(partition.nodes) for partition in cluster.partitions}

    def _mask(self, indices: tuple[int, ...]) -> BoolArray:
        mask = np.zeros(self.size, dtype=bool)
        mask[list(indices)] = True
        mask &= self.usable
        return mask


@dataclass(frozen=True, slots=True)
class Allocation:
    """What a job holds: per chosen node (ascending indices) its CPUs, memory (MB) and GPUs."""

    nodes: IntArray
    cpus: IntArray
    memory: IntArray
    gpus: IntArray
    exclusive: bool = False


@dataclass(frozen=True, slots=True)
class Demand:
    """A job's request resolved against the cluster and its partition, in the terms cons_tres tests.

    `mem_per_cpu`/`mem_per_node` in MB (per node `ALL_MEMORY`: the whole
    node); both None when memory is not consumable. `gpus_per_job` is a
    job-wide GPU count gathered over nodes, `gpus_per_node` a per-node
    minimum, `gpus_per_task` GPUs each task needs on its node.
    """

    partition: str
    min_nodes: int
    max_nodes: int
    tasks: int
    cpus_per_task: int
    tasks_per_node: int  # 0: not asked
    min_cpus: int
    pn_min_cpus: int
    mem_per_cpu: int | None
    mem_per_node: int | None
    gpus_per_job: int
    gpus_per_node: int
    gpus_per_task: int
    exclusive: bool
    max_cpus_per_node: int | None
    lln: bool

    @property
    def gpu_job(self) -> bool:
        return bool(self.gpus_per_job or self.gpus_per_node or self.gpus_per_task)


def demand(request: ResourceRequest, cluster: Cluster, partition: Partition) -> Demand:
    """`request` as Slurm sees it in `partition`: node counts, CPUs, memory with the defaults, GPUs."""
    mem_per_cpu, mem_per_node = _memory(request, cluster, partition)
    tasks = request.task_count
    min_nodes = request.min_nodes
    if tasks < min_nodes:
        raise ValueError(f"{tasks} tasks cannot spread over at least {min_nodes} nodes")
    if request.tasks_per_node and request.tasks is not None:
        min_nodes = max(min_nodes, -(-request.tasks // request.tasks_per_node))
    limit = len(partition.nodes) if partition.max_nodes is None else min(partition.max_nodes, len(partition.nodes))
    max_nodes = limit if request.max_nodes is None else min(request.max_nodes, limit)
    max_nodes = min(max_nodes, max(tasks, min_nodes))  # choose_nodes: no more nodes than tasks
    gpus_per_job = request.gpus or 0
    return Demand(
        partition=partition.name,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        tasks=tasks,
        cpus_per_task=request.cpus_per_task,
        tasks_per_node=request.tasks_per_node or 0,
        min_cpus=tasks * request.cpus_per_task,
        pn_min_cpus=(request.tasks_per_node or 1) * request.cpus_per_task,
        mem_per_cpu=mem_per_cpu,
        mem_per_node=mem_per_node,
        gpus_per_job=gpus_per_job,
        gpus_per_node=request.gpus_per_node or 0,
        gpus_per_task=request.gpus_per_task or 0,
        exclusive=request.exclusive or partition.exclusive or cluster.select.whole_nodes,
        max_cpus_per_node=partition.max_cpus_per_node,
        lln=partition.lln or cluster.select.lln,
    )


def _memory(request: ResourceRequest, cluster: Cluster, partition: Partition) -> tuple[int | None, int | None]:
    """(per CPU, per node) in MB: as asked, else the partition's or cluster's default, else the whole node."""
    if not cluster.select.memory:
        return None, None
    if request.mem_per_cpu is not None:
        return request.mem_per_cpu, None
    if request.mem_per_node is not None:
        return None, request.mem_per_node
    for per_cpu, per_node in (
        (partition.def_mem_per_cpu, partition.def_mem_per_node),
        (cluster.memory.def_mem_per_cpu, cluster.memory.def_mem_per_node),
    ):
        if per_cpu is not None:
            return per_cpu, None
        if per_node is not None:
            return None, per_node
    return None, ALL_MEMORY  # Slurm: no request and no default is all of each node's memory


class Holding(NamedTuple):
    """A running job's nodes as a bit set (bit i: node i), and its CPUs and GPUs over all of them: what the start
    estimates count a job's end by, before they give its resources back node by node."""

    nodes: int
    cpus: int
    gpus: int


class Free(NamedTuple):
    """What each node has free: CPUs, memory (MB) and GPUs."""

    cpus: IntArray
    memory: IntArray
    gpus: IntArray

    def copy(self) -> Free:
        return Free(self.cpus.copy(), self.memory.copy(), self.gpus.copy())

    def add(self, allocation: Allocation) -> None:
        """Give back what `allocation` held."""
        nodes = allocation.nodes
        self.cpus[nodes] += allocation.cpus
        self.memory[nodes] += allocation.memory
        self.gpus[nodes] += allocation.gpus

    def add_all(self, allocations: list[Allocation]) -> None:
        """Give back what every one of `allocations` (at least one) held: one scatter per resource, nodes may
        repeat."""
        if len(allocations) == 1:
            self.add(allocations[0])
            return
        nodes = np.concatenate([allocation.nodes for allocation in allocations])
        np.add.at(self.cpus, nodes, np.concatenate([allocation.cpus for allocation in allocations]))
        np.add.at(self.memory, nodes, np.concatenate([allocation.memory for allocation in allocations]))
        np.add.at(self.gpus, nodes, np.concatenate([allocation.gpus for allocation in allocations]))


class NodeState:
    """What each node has free now, and the allocation of every running job (by the caller's key)."""

    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self.free = Free(table.cpus.copy(), table.memory.copy(), table.gpus.copy())
        self.allocations: dict[int, Allocation] = {}
        self.holdings: dict[int, Holding] = {}  # every allocation's nodes and totals, by key
        self._free_nodes: int | None = None  # `nodes_with_free_cpus`, until the next change

    @property
    def free_cpus(self) -> IntArray:
        return self.free.cpus

    @property
    def free_memory(self) -> IntArray:
        return self.free.memory

    @property
    def free_gpus(self) -> IntArray:
        return self.free.gpus

    def allocate(self, key: int, allocation: Allocation) -> None:
        """Give `allocation` to job `key` (AssertionError if it is not free: the caller's bug)."""
        nodes = allocation.nodes
        if (
            (self.free_cpus[nodes] < allocation.cpus).any()
            or (self.free_memory[nodes] < allocation.memory).any()
            or (self.free_gpus[nodes] < allocation.gpus).any()
        ):
            raise AssertionError(f"job {key}: its allocation is not free")
        self.free_cpus[nodes] -= allocation.cpus
        self.free_memory[nodes] -= allocation.memory
        self.free_gpus[nodes] -= allocation.gpus
        self.allocations[key] = allocation
        self.holdings[key] = Holding(bits_of(nodes), int(allocation.cpus.sum()), int(allocation.gpus.sum()))
        self._free_nodes = None

    def nodes_with_free_cpus(self) -> int:
        """The nodes with at least one free CPU, as a bit set."""
        if self._free_nodes is None:
            self._free_nodes = to_bits(self.free.cpus > 0)
        return self._free_nodes

    def release(self, key: int) -> Allocation:
        """Take back what job `key` held."""
        del self.holdings[key]
        allocation = self.allocations.pop(key)
        self.free.add(allocation)
        self._free_nodes = None
        return allocation

    def pick(self, demand: Demand, available: BoolArray) -> Allocation | None:
        """Where `demand` would start now among the `available` nodes (None: it does not fit)."""
        return pick(demand, self.table, self.free, available)


def offered_cpus(demand: Demand, table: NodeTable, free: Free, available: BoolArray) -> IntArray:
    """CPUs each node can give the job (0: it cannot take it), as can_job_run_on_node counts them."""
    free_cpus, free_memory, free_gpus = free
    if demand.exclusive:  # whole nodes, idle ones only
        cpus = np.where(available & (free_cpus == table.cpus), table.cpus, 0)
    else:
        cpus = np.where(available, free_cpus, 0)
    if demand.max_cpus_per_node is not None:
        cpus = np.minimum(cpus, demand.max_cpus_per_node)
    if demand.mem_per_cpu is not None:
        if demand.exclusive:  # it is given every CPU of the node, and memory for each
            cpus = np.where(demand.mem_per_cpu * table.cpus > free_memory, 0, cpus)
        else:
            fit = free_memory // demand.mem_per_cpu
            cpus = np.minimum(cpus, fit - fit % table.unit)
            cpus -= cpus % demand.cpus_per_task
    elif demand.mem_per_node == ALL_MEMORY:
        cpus = np.where(free_memory == table.memory, cpus, 0)
    elif demand.mem_per_node is not None:
        cpus = np.where(free_memory >= demand.mem_per_node, cpus, 0)
    if demand.gpus_per_node:
        cpus = np.where(free_gpus >= demand.gpus_per_node, cpus, 0)
    elif demand.gpus_per_task:
        cpus = np.minimum(cpus, (free_gpus // demand.gpus_per_task) * demand.cpus_per_task)
    elif demand.gpus_per_job:
        cpus = np.where(free_gpus > 0, cpus, 0)
    single = demand.max_nodes == 1 and not demand.tasks_per_node
    floor = demand.min_cpus if single else demand.pn_min_cpus
    return np.where(cpus >= floor, cpus, 0)


def pick(demand: Demand, table: NodeTable, free: Free, available: BoolArray) -> Allocation | None:
    """The nodes and resources Slurm would give `demand` (None: not enough is free among `available`)."""
    if table.unit_nodes and cpus_in_runs(demand):
        taken = pick_unit_nodes(demand.min_cpus, to_bits(available & (free.cpus > 0)))
        return None if taken is None else unit_allocation(taken)
    offered = offered_cpus(demand, table, free, available)
    free_gpus = free.gpus
    usable = np.flatnonzero(offered)
    if len(usable) < demand.min_nodes or int(offered[usable].sum()) < demand.min_cpus:
        return None
    if demand.gpus_per_job and int(free_gpus[usable].sum()) < demand.gpus_per_job:
        return None
    chooser = _Chooser(demand, table, offered, free_gpus)
    chosen = chooser.choose()
    if chosen is None:
        return None
    nodes, caps, _ = chosen
    return _allocation(demand, table, nodes, caps, offered[nodes], free_gpus[nodes])


def cpus_in_runs(demand: Demand) -> bool:
    """Whether on nodes of one CPU `demand` is CPUs alone, one per node, taken in runs of free nodes: no memory,
    GPUs, per-node counts or exclusivity, at most one node required and enough nodes allowed."""
    return (
        demand.min_nodes <= 1
        and demand.max_nodes >= demand.min_cpus
        and demand.cpus_per_task == 1
        and not demand.tasks_per_node
        and not demand.exclusive
        and not demand.lln
        and demand.mem_per_cpu is None
        and demand.mem_per_node is None
        and not demand.gpu_job
        and (demand.max_cpus_per_node is None or demand.max_cpus_per_node >= 1)
    )


def pick_unit_nodes(cpus: int, usable: int) -> int | None:
    """`pick` on nodes of one CPU for a job of `cpus` CPUs alone (`cpus_in_runs`), on the `usable` free nodes (a
    bit set): the nodes it gets, as a bit set (`unit_allocation` makes what it holds on them), or None.

    What `_eval_nodes` does there, without the general counters: each node
    offers one CPU, so a run offers its length; the run taken next is the
    shortest one that satisfies what is still needed (the first such), else
    the longest (the first such), and it gives its first nodes.
    """
    if usable.bit_count() < cpus:
        return None
    runs = _runs_of(usable)
    chosen = 0
    needed = cpus
    while needed > 0:
        lengths = [stop - start for start, stop in runs]
        fits = [length for length in lengths if length >= needed]
        position = lengths.index(min(fits)) if fits else lengths.index(max(lengths))
        start, stop = runs.pop(position)
        taken = min(needed, stop - start)
        chosen |= ((1 << taken) - 1) << start
        needed -= taken
    return chosen


def unit_allocation(nodes: int) -> Allocation:
    """One CPU on each of `nodes` (a bit set) of one CPU, and nothing else."""
    indices = np.concatenate([np.arange(start, stop, dtype=np.int64) for start, stop in _runs_of(nodes)])
    ones, zeros = np.ones(len(indices), dtype=np.int64), np.zeros(len(indices), dtype=np.int64)
    return Allocation(nodes=indices, cpus=ones, memory=zeros, gpus=zeros.copy())


def bits_of(indices: IntArray) -> int:
    """Node indices as a bit set."""
    return sum(1 << node for node in indices.tolist())


def _runs_of(nodes: int) -> list[tuple[int, int]]:
    """The runs of consecutive nodes in a bit set, as [start, stop) in node order."""
    runs = []
    while nodes:
        start = (nodes & -nodes).bit_length() - 1
        shifted = nodes >> start
        length = (~shifted & (shifted + 1)).bit_length() - 1  # the run's ones up to its first zero
        runs.append((start, start + length))
        nodes = (shifted >> length) << (start + length)
    return runs


class _Chooser:
    """choose_nodes and _eval_nodes for one job over the CPUs each node offers."""

    def __init__(self, demand: Demand, table: NodeTable, offered: IntArray, free_gpus: IntArray) -> None:
        self.demand = demand
        self.table = table
        self.offered = offered
        self.free_gpus = free_gpus
        if demand.gpu_job:  # favour nodes with more usable GPUs (the low byte of sched_weight)
            cap = demand.gpus_per_node or demand.gpus_per_job
            near = np.minimum(free_gpus, cap) if cap else free_gpus
            self.weight = (table.weight << 8) | (0xFF - np.minimum(near, 0xFF))
            self.uniform = False
        else:
            self.weight = table.sched_weight
            self.uniform = table.uniform_weight

    def choose(self) -> tuple[IntArray, IntArray, IntArray] | None:
        """(nodes, CPUs each gives, GPUs each gives), or None; with choose_nodes' retries."""
        candidates = self.offered > 0
        found = self._evaluate(candidates)
        if found is not None:
            return found
        remaining = int(candidates.sum())
        if remaining <= self.demand.min_nodes:
            return None
        resources = self.offered + (self.free_gpus if self.demand.gpu_job else 0)
        most = int(resources[candidates].max())
        for count in range(1, most):
            drop = candidates & (resources <= count)
            if not drop.any() and count != 1:
                continue
            for index in np.flatnonzero(drop):
                candidates[index] = False
                remaining -= 1
                if remaining <= self.demand.min_nodes:
                    break
            found = self._evaluate(candidates)
            if found is not None or remaining <= self.demand.min_nodes:
                return found
        return None

    def _evaluate(self, candidates: BoolArray) -> tuple[IntArray, IntArray, IntArray] | None:
        if self.demand.lln:
            return _Fill(self, candidates).least_loaded()
        return _Fill(self, candidates).best_fit()


class _Runs:
    """Runs of consecutive usable nodes of equal weight (_eval_nodes' consecutive sets), as arrays."""

    def __init__(self, offered: IntArray, weight: IntArray | None, free_gpus: IntArray | None) -> None:
        """`weight` None: every node weighs the same; `free_gpus` None: the job gathers no GPUs per job."""
        usable = offered > 0
        if weight is None:
            edges = np.flatnonzero(np.diff(np.concatenate(([0], usable.view(np.int8), [0]))))
            self.starts, self.ends = edges[::2], edges[1::2]
            self.weight = None
        else:
            indices = np.flatnonzero(usable)
            breaks = np.flatnonzero((np.diff(indices) != 1) | (np.diff(weight[indices]) != 0)) + 1
            first = np.concatenate(([0], breaks)) if len(indices) else breaks
            self.starts = indices[first]
            self.ends = indices[np.concatenate((breaks - 1, [len(indices) - 1]))] + 1 if len(indices) else first
            self.weight = weight[self.starts]
        self.nodes = self.ends - self.starts
        total = np.concatenate(([0], np.cumsum(offered)))
        self.cpus = total[self.ends] - total[self.starts]
        self.gpus = None
        if free_gpus is not None:
            gpu_total = np.concatenate(([0], np.cumsum(np.where(usable, free_gpus, 0))))
            self.gpus = gpu_total[self.ends] - gpu_total[self.starts]

    def best(self, rem_cpus: int, rem_nodes: int, rem_gpus: int) -> int | None:
        """The run _eval_nodes takes next: lowest weight; then its three clauses, in order, as written."""
        alive = self.nodes > 0
        if self.weight is not None and alive.any():
            alive &= self.weight == self.weight[alive].min()
        candidates = np.flatnonzero(alive)
        if not len(candidates):
            return None
        sufficient = (self.cpus >= rem_cpus) & (self.nodes >= rem_nodes)
        if self.gpus is not None:
            sufficient &= self.gpus >= rem_gpus
        if rem_nodes <= 1 and rem_gpus <= 0:
            # a run short of CPUs has fewer than a sufficient one: the clauses reduce to these
            fits = candidates[sufficient[candidates]]
            if len(fits):
                return int(fits[np.argmin(self.cpus[fits])])
            return int(candidates[np.argmax(self.cpus[candidates])])
        best, best_sufficient = int(candidates[0]), bool(sufficient[candidates[0]])
        for position in candidates[1:].tolist():
            good, cpus, best_cpus = bool(sufficient[position]), int(self.cpus[position]), int(self.cpus[best])
            if (good and not best_sufficient) or (good and cpus < best_cpus) or (not good and cpus > best_cpus):
                best, best_sufficient = position, good
        return best


class _Fill:
    """One evaluation (_eval_nodes): the counters of what is still needed, and the nodes taken so far."""

    def __init__(self, chooser: _Chooser, candidates: BoolArray) -> None:
        demand = chooser.demand
        self.chooser = chooser
        self.demand = demand
        self.offered = np.where(candidates, chooser.offered, 0)
        self.rem_cpus = demand.min_cpus
        self.rem_max_cpus = demand.min_cpus
        self.min_rem_nodes = demand.min_nodes
        self.rem_nodes = demand.min_nodes
        self.max_nodes = demand.max_nodes
        self.rem_gpus = demand.gpus_per_job
        self.nodes: list[IntArray] = []
        self.caps: list[IntArray] = []
        self.gpus: list[IntArray] = []

    @property
    def done(self) -> bool:
        return self.rem_nodes <= 0 and self.rem_cpus <= 0 and self.rem_gpus <= 0

    def take(self, index: int, offered: int) -> None:
        """Add node `index` with what _cpus_to_use leaves of its `offered` CPUs."""
        demand = self.demand
        cpus = offered
        if not demand.exclusive:
            reserve = max(self.min_rem_nodes - 1, 0) * int(self.chooser.table.unit[index])
            limit = self.rem_max_cpus - reserve
            if cpus > limit:
                cpus = max(limit, demand.pn_min_cpus)
        gpus = 0
        if demand.gpus_per_job:
            gpus = min(int(self.chooser.free_gpus[index]), max(self.rem_gpus, 0))
            self.rem_gpus -= gpus
        self._record(np.array([index]), np.array([cpus]), np.array([gpus]))

    def _record(self, nodes: IntArray, caps: IntArray, gpus: IntArray) -> None:
        self.nodes.append(nodes)
        self.caps.append(caps)
        self.gpus.append(gpus)
        count, given = len(nodes), int(caps.sum())
        self.rem_cpus -= given
        self.rem_max_cpus -= given
        self.rem_nodes -= count
        self.min_rem_nodes -= count
        self.max_nodes -= count

    def result(self) -> tuple[IntArray, IntArray, IntArray] | None:
        if not self.done or not self.nodes:
            return None
        nodes = np.concatenate(self.nodes)
        order = np.argsort(nodes, kind="stable")
        return nodes[order], np.concatenate(self.caps)[order], np.concatenate(self.gpus)[order]

    def best_fit(self) -> tuple[IntArray, IntArray, IntArray] | None:
        """_eval_nodes: take runs of nodes, best first, until the job is satisfied."""
        chooser = self.chooser
        runs = _Runs(
            self.offered,
            None if chooser.uniform else chooser.weight,
            chooser.free_gpus if self.demand.gpus_per_job else None,
        )
        while self.max_nodes > 0:
            chosen = runs.best(self.rem_cpus, self.rem_nodes, self.rem_gpus)
            if chosen is None:
                break
            first, stop = int(runs.starts[chosen]), int(runs.ends[chosen])
            offered = self.offered[first:stop].copy()
            if self.rem_nodes <= 1:
                single = self._single_node(first, offered)
                if single is not None:
                    keep = offered[single - first]
                    offered[:] = 0
                    offered[single - first] = keep
            self._fill_run(first, offered)
            if self.done:
                break
            runs.cpus[chosen] = runs.nodes[chosen] = 0
        return self.result()

    def _fill_run(self, first: int, offered: IntArray) -> None:
        """The run's nodes in order, each giving what is still needed (_cpus_to_use), until satisfied."""
        usable = np.flatnonzero(offered)
        # a shared node keeps a CPU for each node still required; a whole node gives all it offers
        at_once = self.demand.exclusive or self.min_rem_nodes <= 1
        if at_once and self.rem_gpus <= 0 and self._fill_at_once(first, offered, usable):
            return
        for position in usable.tolist():
            if self.max_nodes == 0 or self.done:
                break
            cpus = int(offered[position])
            if self.max_nodes == 1 and cpus < self.rem_cpus:
                continue
            self.take(first + position, cpus)

    def _fill_at_once(self, first: int, offered: IntArray, usable: IntArray) -> bool:
        """The node-by-node fill as one cumulative sum, when no CPU is kept for later nodes (a whole node, or no
        further node required) and the node limit cannot skip a node; False (nothing taken) when it could."""
        given = offered[usable]
        reached = np.flatnonzero(np.cumsum(given) >= self.rem_cpus)
        count = max(int(reached[0]) + 1 if len(reached) else len(usable), min(self.rem_nodes, len(usable)))
        if count > self.max_nodes or (count == self.max_nodes and not len(reached)):
            return False
        caps = given[:count].copy()
        if not self.demand.exclusive and count:
            before = int(caps[:-1].sum())
            if caps[-1] > self.rem_max_cpus - before:
                caps[-1] = max(self.rem_max_cpus - before, self.demand.pn_min_cpus)
        self._record(first + usable[:count], caps, np.zeros(count, dtype=np.int64))
        return True

    def _single_node(self, first: int, offered: IntArray) -> int | None:
        """The node of a run that alone satisfies the job with the fewest CPUs (the first such), if any."""
        fits = offered >= self.rem_cpus
        if self.rem_gpus > 0:
            fits &= self.chooser.free_gpus[first : first + len(offered)] >= self.rem_gpus
        candidates = np.flatnonzero(fits)
        if not len(candidates):
            return None
        return first + int(candidates[np.argmin(offered[candidates])])

    def least_loaded(self) -> tuple[IntArray, IntArray, IntArray] | None:
        """_eval_nodes_lln: by weight, the nodes with the largest share of free CPUs first."""
        indices = np.flatnonzero(self.offered > 0)
        share = self.offered[indices] / self.chooser.table.cpus[indices]
        order = np.lexsort((indices, -share, self.chooser.weight[indices]))
        for index in indices[order]:
            if self.max_nodes == 0 or self.done:
                break
            self.take(int(index), int(self.offered[index]))
        return self.result()


def spread_tasks(demand: Demand, caps: IntArray) -> IntArray:
    """Tasks per chosen node (dist_tasks_compute_c_b): one each, then round robin within each node's CPUs.

    One task per node and round, as on nodes of one thread per core; with
    more threads the rounds give a core's worth at a time, which the caller's
    rounding up to whole cores stands for.
    """
    per_task = demand.cpus_per_task
    hosts = len(caps)
    total = max(hosts * max(demand.tasks_per_node, 1), demand.min_cpus, hosts * demand.pn_min_cpus)
    tasks_wanted = demand.tasks_per_node * hosts if (per_task > 1 and demand.tasks_per_node) else total // per_task
    room = np.maximum(caps // per_task, 1)
    tasks = np.ones(hosts, dtype=np.int64)
    remaining = max(tasks_wanted, 1) - hosts
    if remaining <= 0:
        tasks[max(tasks_wanted, 1) :] = 0
        return tasks
    extra = room - 1
    if demand.tasks_per_node:
        extra = np.minimum(extra, demand.tasks_per_node - 1)
    # the largest number of full rounds, then what is left in node order
    level = _rounds(extra, remaining)
    given = np.minimum(extra, level)
    left = remaining - int(given.sum())
    open_nodes = np.flatnonzero(extra > level)
    given[open_nodes[:left]] += 1
    spread: IntArray = tasks + given
    return spread


def _rounds(extra: IntArray, remaining: int) -> int:
    """The most full rounds of one task per node with room that do not give out more than `remaining`."""
    low, high = 0, int(extra.max()) if len(extra) else 0
    while low < high:
        middle = (low + high + 1) // 2
        if int(np.minimum(extra, middle).sum()) <= remaining:
            low = middle
        else:
            high = middle - 1
    return low


def _allocation(
    demand: Demand, table: NodeTable, nodes: IntArray, caps: IntArray, offered: IntArray, free_gpus: IntArray
) -> Allocation:
    """CPUs (whole allocation units, within what each node offered), memory and GPUs on each chosen node."""
    tasks: IntArray | None = None  # tasks per node: what GPUs per task count, made only where they are asked
    if demand.exclusive:
        cpus = table.cpus[nodes].copy()
    elif demand.cpus_per_task == 1 and int(caps.sum()) == demand.tasks and table.one_cpu_units:
        tasks = cpus = caps  # dist_tasks fills every node to what _eval_nodes gave it
    else:
        tasks = spread_tasks(demand, caps)
        unit = table.unit[nodes]
        cpus = np.minimum(-(-(tasks * demand.cpus_per_task) // unit) * unit, offered)
    if demand.mem_per_cpu is not None:
        memory = demand.mem_per_cpu * cpus
    elif demand.mem_per_node == ALL_MEMORY:
        memory = table.memory[nodes].copy()
    elif demand.mem_per_node is not None:
        memory = np.full(len(nodes), demand.mem_per_node, dtype=np.int64)
    else:
        memory = np.zeros(len(nodes), dtype=np.int64)
    if demand.gpus_per_node:
        gpus = np.full(len(nodes), demand.gpus_per_node, dtype=np.int64)
    elif demand.gpus_per_task:  # a whole node spreads its tasks over the CPUs its GPUs let it offer (`caps`)
        gpus = (spread_tasks(demand, caps) if tasks is None else tasks) * demand.gpus_per_task
    elif demand.gpus_per_job:
        gpus = _job_gpus(demand.gpus_per_job, free_gpus)
    else:
        gpus = np.zeros(len(nodes), dtype=np.int64)
    return Allocation(nodes=nodes, cpus=cpus, memory=memory, gpus=gpus, exclusive=demand.exclusive)


def _job_gpus(wanted: int, free: IntArray) -> IntArray:
    """A job's GPUs over its nodes (_set_job_bits1, then _set_job_bits2): in node order, each node as many
    as it has while one is left for each node after it; then what is still missing from any node."""
    gpus = np.zeros(len(free), dtype=np.int64)
    remaining = wanted
    for position, available in enumerate(free.tolist()):
        taken = max(min(available, remaining - (len(free) - position - 1)), 0)
        gpus[position] = taken
        remaining -= taken
    for position, available in enumerate(free.tolist()):
        if remaining <= 0:
            break
        extra = min(available - int(gpus[position]), remaining)
        gpus[position] += extra
        remaining -= extra
    return gpus
