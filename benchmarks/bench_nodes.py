"""Speed of node-level allocation and planning: cons_tres picks, grouped start estimates, the backfill map.

The `slurm` scheduler will call these for every queued job it tests in every
cycle; this measures each on the machines it must handle: SDSC-SP2 as 128
one-CPU nodes (the target: the whole trace within 3x FCFS + EASY's time,
0.73 s in README, i.e. about 40 us per job for everything), and clusters of
5,000 nodes x 64 CPUs with GPUs on a fifth of them. Each state is a random
occupancy with the given share of CPUs busy; times are medians of CPU time
(not wall time: the machine is shared) over repeats.
Usage:

    python benchmarks/bench_nodes.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import numpy as np

from kernel.resources import ResourceRequest
from simulator.cluster import Cluster, MemoryDefaults, Node, Partition, SelectSettings
from simulator.nodeplan import NodeSpace, RunningEnd, earliest_start
from simulator.nodes import Demand, NodeState, NodeTable, demand, from_bits, to_bits


def machine(nodes: int, cpus: int, gpu_nodes: int = 0, memory: int = 0) -> Cluster:
    width = len(str(nodes))
    return Cluster(
        f"{nodes}x{cpus}",
        nodes=tuple(
            Node(f"n{i:0{width}d}", cpus, memory or 1, gres={"gpu": 4} if i < gpu_nodes else {}) for i in range(nodes)
        ),
        partitions=(Partition("all", tuple(range(nodes)), default=True),),
        select=SelectSettings(unit="cpu", memory=bool(memory)),
        memory=MemoryDefaults(def_mem_per_cpu=memory // cpus // 2 if memory else None),
    )


def busy_state(cluster: Cluster, share: float, rng: random.Random) -> tuple[NodeState, list[RunningEnd]]:
    """Fill `share` of the CPUs with jobs of random sizes and ends; the running ends, earliest first."""
    state = NodeState(NodeTable(cluster))
    partition = cluster.partitions[0]
    mask = state.table.partition_masks[partition.name]
    ends, key = [], 0
    target = share * int(state.table.cpus.sum())
    cpus_per_node = int(state.table.cpus[0])
    while int(state.table.cpus.sum() - state.free_cpus.sum()) < target:
        size = rng.choice((1, 1, 2, 4, 8, cpus_per_node, 2 * cpus_per_node, 4 * cpus_per_node))
        job = demand(ResourceRequest(tasks=size), cluster, partition)
        allocation = state.pick(job, mask)
        if allocation is None:
            break
        key += 1
        state.allocate(key, allocation)
        ends.append(RunningEnd(rng.randrange(100, 20_000), key))
    return state, sorted(ends)


def median_us(action: Callable[[], object], repeat: int) -> float:
    """Median CPU time of a call (process time, in batches of ten: the machine is shared and loaded)."""
    times = []
    for _ in range(max(repeat // 10, 3)):
        began = time.process_time()
        for _ in range(10):
            action()
        times.append((time.process_time() - began) / 10)
    return statistics.median(times) * 1e6


def requests(cluster: Cluster, sizes: tuple[int, ...], **extra: object) -> list[Demand]:
    partition = cluster.partitions[0]
    return [demand(ResourceRequest(tasks=size, **extra), cluster, partition) for size in sizes]  # type: ignore[arg-type]


def bench_machine(label: str, cluster: Cluster, sizes: tuple[int, ...], repeat: int, gpus: bool = False) -> None:
    rng = random.Random(3)
    state, ends = busy_state(cluster, 0.85, rng)
    mask = state.table.partition_masks[cluster.partitions[0].name]
    bits = to_bits(mask)
    jobs = requests(cluster, sizes)
    if gpus:
        jobs += requests(cluster, (1, 4), gpus_per_node=1) + requests(cluster, (8,), gpus=8)
    picks = [median_us(lambda job=job: state.pick(job, mask), repeat) for job in jobs]
    slow = max(repeat // 10, 5)
    estimates = [median_us(lambda job=job: earliest_start(job, state, ends, bits, 0), slow) for job in jobs]
    started = [earliest_start(job, state, ends, bits, 0) for job in jobs]
    print(f"{label}: {len(state.allocations)} running jobs, {int(state.free_cpus.sum())} CPUs free")
    for job, pick_us, estimate_us, found in zip(jobs, picks, estimates, started, strict=True):
        gpus = job.gpus_per_node or job.gpus_per_job
        what = f"{job.min_cpus} CPUs" + (f", GPUs {gpus}/node|job" if job.gpu_job else "")
        when = "never" if found is None else ("now" if found.start == 0 else f"at {found.start}")
        print(f"  {what:28} pick {pick_us:8.1f} us   earliest start {estimate_us:9.1f} us ({when})")


def bench_space(label: str, size: int, reservations: int, repeat: int) -> None:
    rng = random.Random(5)
    everything = (1 << size) - 1
    chosen = [sum(1 << rng.randrange(size) for _ in range(8)) for _ in range(reservations)]
    spans = [(rng.randrange(0, 80_000), rng.randrange(60, 20_000)) for _ in range(reservations)]

    def build() -> NodeSpace:
        space = NodeSpace(0, 86_400, 60, everything)
        for nodes, (start, length) in zip(chosen, spans, strict=True):
            space.reserve(start // 60 * 60, (start + length) // 60 * 60, nodes)
        return space

    space = build()
    build_us = median_us(build, max(repeat // 20, 3))
    free_us = median_us(lambda: space.free_over(40_000, 43_600, everything), repeat)
    overlap_us = median_us(lambda: space.overlaps(chosen[0], 40_000, 43_600), repeat)
    mask = np.zeros(size, dtype=bool)
    mask[::3] = True
    bits = to_bits(mask)
    to_us = median_us(lambda: to_bits(mask), repeat)
    from_us = median_us(lambda: from_bits(bits, size), repeat)
    print(
        f"{label}: {len(space.records())} records after {reservations} reservations "
        f"({build_us / reservations:.1f} us each); free_over {free_us:.1f} us, overlaps {overlap_us:.1f} us; "
        f"mask -> bits {to_us:.1f} us, bits -> mask {from_us:.1f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    bench_machine("SDSC-SP2 as 128 one-CPU nodes", machine(128, 1), (1, 8, 32, 64, 128), args.repeat)
    bench_machine(
        "5,000 nodes x 64 CPUs, 256 GB, GPUs on 1,000",
        machine(5000, 64, gpu_nodes=1000, memory=256_000),
        (1, 16, 64, 640, 6400),
        args.repeat,
        gpus=True,
    )
    bench_space("backfill map, 128 nodes", 128, 500, args.repeat)
    bench_space("backfill map, 5,000 nodes", 5000, 500, args.repeat)


if __name__ == "__main__":
    main()
