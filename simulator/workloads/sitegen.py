"""A generated site: a large GPU cluster's nodes and partitions, and a year of jobs asking for them.

Issue 26's scale benchmark needs a year of a 5,000-node cluster (cores,
memory, GPUs, several partitions, accounts) with a million jobs, and no site
lends its log for that; sites comparing settings want the same at their own
scale. The jobs come from the built-in model (`simulator.workloads.synthetic`:
users in projects, applications with their runtimes and sizes, bursts, daily
and weekly cycles, users' requests); this module gives them a site:

- **Nodes.** Four in five are CPU nodes (128 cores, 256 GB), one in twenty
  large-memory nodes (128 cores, 1 TB) and the rest GPU nodes (64 cores,
  512 GB, 4 GPUs), named `c…`, `g…` and `m…` so that Slurm's order groups
  them.
- **Partitions.** `cpu` (the default: CPU and large-memory nodes), `bigmem`
  (the large-memory nodes) and `gpu`, each with a 48 h limit (the model's
  longest request); `cpu` and `bigmem` share nodes, as sites' partitions do.
- **Requests.** Each application runs in one partition (GPU codes one in
  seven, large-memory one in twenty). A job smaller than a node asks for
  tasks and memory per CPU on a shared node; a larger one asks for whole
  nodes (`--exclusive`), a GPU job for all four GPUs of each of its nodes, or
  one GPU per 16 cores below a node. Sizes are scaled so that the offered
  load over the span meets `load`, and capped at a quarter of the partition.

- **Priority.** priority/multifactor with Fair Tree fair-share between the
  projects (`SITE_PRIORITY`); the SWF group is the job's project, its
  account, every account and user with equal shares.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kernel.errors import UsageError
from kernel.resources import ResourceRequest
from simulator.cluster import Cluster, Node, Partition, PrioritySettings, SchedulerSettings, SelectSettings
from simulator.workloads.synthetic import (
    DAY,
    MAX_WALLTIME,
    draw_jobs,
    offered_load,
    swf_header,
    swf_records,
    with_arrivals,
)
from simulator.workloads.trace import GENERATED_PATH, Trace

CPU, BIGMEM, GPU = 1, 2, 3
#: Partition names by the SWF partition number a job carries.
PARTITION_NAMES = {CPU: "cpu", BIGMEM: "bigmem", GPU: "gpu"}
#: Per node kind: cores, memory (MB), GPUs, and the share of the cluster's nodes.
NODE_KINDS = {CPU: (128, 256_000, 0, 0.80), BIGMEM: (128, 1_024_000, 0, 0.05), GPU: (64, 512_000, 4, 0.15)}
#: Share of applications that run in each partition.
APPLICATION_SHARES = {CPU: 0.80, BIGMEM: 0.05, GPU: 0.15}
MEM_PER_CPU = 1_900  # MB a shared-node job asks per CPU (a CPU node's memory per core, less the system's)
CORES_PER_GPU = 16
SCALING_ROUNDS = 6
#: priority/multifactor as large sites weigh it: fair-share first, then age, size and partition (Fair Tree,
#: a week's half-life, Slurm's 5-minute recalculation).
SITE_PRIORITY = PrioritySettings(
    weight_fairshare=10_000, weight_age=1_000, weight_job_size=1_000, weight_partition=1_000
)


@dataclass(frozen=True)
class SiteWorkload:
    """A generated cluster, its jobs (a trace) and what each job asked for, by job id."""

    cluster: Cluster
    trace: Trace
    requests: dict[int, ResourceRequest]


def generate_site(
    nodes: int = 5_000, jobs: int = 1_000_000, days: float = 365, load: float = 0.8, seed: int = 26
) -> SiteWorkload:
    """A cluster of `nodes` nodes and `jobs` jobs over `days` days at offered load `load`; same arguments, same
    workload."""
    if nodes < 20:
        raise UsageError(f"--nodes must be at least 20 (every kind of node needs one), not {nodes}")
    if jobs < 1 or not days > 0 or not 0 < load <= 1:
        raise UsageError("jobs must be at least 1, days positive and load in (0, 1]")
    cluster = site_cluster(nodes)
    rng = np.random.default_rng(seed)
    table = draw_jobs(rng, jobs, cluster.procs)
    kinds, shares = list(APPLICATION_SHARES), list(APPLICATION_SHARES.values())
    partition_of_app = rng.choice(kinds, size=int(table["app"].max()) + 1, p=shares)
    table["partition"] = partition_of_app[table["app"].to_numpy()]
    span = days * DAY
    table["size"] = _sizes(table, load * span, cluster, node_counts(nodes))
    table = with_arrivals(rng, table, span)
    achieved = offered_load(table["submit"], table["size"], table["run"], cluster.procs)
    header = swf_header(
        jobs,
        cluster.procs,
        [
            f"; Computer: generated site ({cluster.summary()})",
            f"; Installation: tsched generated site (simulator.workloads.sitegen, seed {seed})",
            f"; Note: {days:g} days, offered load target {load:.3f}, achieved {achieved:.3f}",
        ],
        [f"; MaxPartitions: {len(PARTITION_NAMES)}"]
        + [f"; Partition: {number} {name}" for number, name in PARTITION_NAMES.items()],
    )
    trace = Trace.from_records(GENERATED_PATH, header, swf_records(table))
    return SiteWorkload(cluster, trace, _requests(table))


def site_cluster(nodes: int) -> Cluster:
    """`nodes` nodes of the three kinds, in Slurm's order, with the `cpu`, `bigmem` and `gpu` partitions."""
    counts = node_counts(nodes)
    prefixes = {CPU: "c", GPU: "g", BIGMEM: "m"}  # Slurm's order: c..., g..., m...
    width = len(str(nodes))
    table: list[Node] = []
    indices: dict[int, tuple[int, ...]] = {}
    for kind in (CPU, GPU, BIGMEM):
        cores, memory, gpus, _ = NODE_KINDS[kind]
        first = len(table)
        table += [
            Node(f"{prefixes[kind]}{n:0{width}d}", cpus=cores, memory=memory, gres={"gpu": gpus} if gpus else {})
            for n in range(1, counts[kind] + 1)
        ]
        indices[kind] = tuple(range(first, len(table)))
    partitions = (
        Partition("cpu", tuple(sorted(indices[CPU] + indices[BIGMEM])), max_time=MAX_WALLTIME, default=True),
        Partition("bigmem", indices[BIGMEM], max_time=MAX_WALLTIME),
        Partition("gpu", indices[GPU], max_time=MAX_WALLTIME),
    )
    return Cluster(
        f"site{nodes}",
        tuple(table),
        partitions,
        select=SelectSettings(unit="core", memory=True),
        scheduler=SchedulerSettings(priority_type="priority/multifactor"),
        priority=SITE_PRIORITY,
        source=f"tsched generated site of {nodes} nodes",
    )


def node_counts(nodes: int) -> dict[int, int]:
    """How many nodes of each kind a cluster of `nodes` nodes has."""
    counts = {kind: max(1, round(nodes * share)) for kind, (_, _, _, share) in NODE_KINDS.items()}
    counts[CPU] = nodes - counts[BIGMEM] - counts[GPU]
    return counts


def _sizes(table: pd.DataFrame, work_per_cpu: float, cluster: Cluster, counts: dict[int, int]) -> np.ndarray:
    """CPUs each job gets: its size scaled so that its partition's nodes get `work_per_cpu` CPU-seconds per CPU,
    as asked below a node and in whole nodes (at most a quarter of the partition) above it."""
    sizes = table["size"].to_numpy().copy()
    runs = table["run"].to_numpy().astype(np.float64)
    partition = table["partition"].to_numpy()
    for kind, name in PARTITION_NAMES.items():
        chosen = partition == kind
        cores, _, _, _ = NODE_KINDS[kind]
        capacity = cores * counts[kind]
        most_nodes = max(len(cluster.partition(name).nodes) // 4, 1)
        drawn, scale = sizes[chosen].astype(np.float64), 1.0
        for _ in range(SCALING_ROUNDS):  # the caps and whole nodes move the load: correct the scale, then again
            wanted = np.maximum(np.rint(drawn * scale), 1).astype(np.int64)
            whole = np.minimum(-(-wanted // cores), most_nodes) * cores
            fitted = np.where(wanted < cores, wanted, whole)
            scale *= work_per_cpu * capacity / max(float((fitted * runs[chosen]).sum()), 1.0)
        sizes[chosen] = fitted
    return sizes


def _requests(table: pd.DataFrame) -> dict[int, ResourceRequest]:
    """What each job (numbered in submit order, as `swf_records` numbers them) asks of its partition."""
    requests: dict[int, ResourceRequest] = {}
    for job_id, (kind, size) in enumerate(zip(table["partition"].tolist(), table["size"].tolist(), strict=True), 1):
        requests[job_id] = _request(kind, size)
    return requests


def _request(kind: int, size: int) -> ResourceRequest:
    """One job's request: tasks on a shared node below a node's cores, else whole nodes."""
    cores = NODE_KINDS[kind][0]
    partitions = (PARTITION_NAMES[kind],)
    if size < cores:
        gpus = -(-size // CORES_PER_GPU) if kind == GPU else None
        memory = NODE_KINDS[kind][1] // cores - 100 if kind == BIGMEM else MEM_PER_CPU
        return ResourceRequest(tasks=size, mem_per_cpu=memory, gpus=gpus, partitions=partitions)
    nodes = size // cores
    gpus_per_node = NODE_KINDS[kind][2] or None
    return ResourceRequest(
        nodes=nodes, tasks=size, gpus_per_node=gpus_per_node, partitions=partitions, exclusive=True, mem_per_node=0
    )
