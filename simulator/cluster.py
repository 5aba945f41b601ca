"""A cluster as a site configures it: nodes with CPUs, memory and GPUs, partitions, and Slurm's settings.

Read from a site's `slurm.conf` (`simulator.clusters.slurmconf`) or a short
TOML file (`simulator.clusters.tomlform`), or made for an SWF trace, which
knows nothing but a processor count: `Cluster.pool(procs)` is one partition
of `procs` processors without node boundaries, the machine every published
figure was computed on, and the schedulers keep treating it as the pool.

Nodes are kept in Slurm's order, which decides which nodes a job gets:
`slurmctld` sorts its node table by name, numbers compared as numbers
(`n2` before `n10`; `_sort_node_record_table_ptr` in 22.05's
`slurmctld/read_config.c`). Partitions name their nodes by index into that
order. Times are seconds, memory MB, as in Slurm's accounting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

#: Node states Slurm can be told in slurm.conf; FUTURE nodes do not exist yet, DOWN and DRAIN ones take no jobs.
NODE_STATES = frozenset({"UNKNOWN", "IDLE", "DOWN", "DRAIN", "FAIL", "FAILING", "FUTURE", "CLOUD"})
UNUSABLE_NODE_STATES = frozenset({"DOWN", "DRAIN", "FAIL", "FAILING", "FUTURE"})
PARTITION_STATES = frozenset({"UP", "DOWN", "DRAIN", "INACTIVE"})
#: Allocation units of select/cons_tres (`SelectTypeParameters` CR_CPU, CR_Core, CR_Socket).
UNITS = ("cpu", "core", "socket")
_NUMBER = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key of a node name as Slurm orders its nodes: runs of digits compare as numbers (`n2` < `n10`)."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in _NUMBER.split(name) if part)


@dataclass(frozen=True, slots=True)
class Node:
    """One compute node: what slurm.conf's NodeName line (with gres.conf) says of it."""

    name: str
    cpus: int
    memory: int = 1  # RealMemory, MB (Slurm's default is 1)
    gres: Mapping[str, int] = field(default_factory=dict)  # "gpu": 4, "gpu:a100": 4, ...
    features: frozenset[str] = frozenset()
    weight: int = 1
    sockets: int = 0  # 0: as Slurm infers it, CPUs / (cores per socket x threads per core)
    cores_per_socket: int = 1
    threads_per_core: int = 1
    core_spec_count: int = 0  # cores kept for the system (CoreSpecCount)
    mem_spec_limit: int = 0  # MB kept for the system (MemSpecLimit)
    state: str = "UNKNOWN"

    def __post_init__(self) -> None:
        if self.cpus < 1:
            raise ValueError(f"node {self.name}: CPUs must be at least 1, got {self.cpus}")
        if self.sockets == 0:
            per_socket = self.cores_per_socket * self.threads_per_core
            object.__setattr__(self, "sockets", max(self.cpus // per_socket, 1) if self.cpus % per_socket == 0 else 1)
        if min(self.sockets, self.cores_per_socket, self.threads_per_core) < 1:
            raise ValueError(f"node {self.name}: sockets, cores per socket and threads per core must be at least 1")
        if not 0 <= self.core_spec_count < self.cores:
            raise ValueError(f"node {self.name}: CoreSpecCount {self.core_spec_count} leaves no core for jobs")
        if self.memory < 0 or self.mem_spec_limit < 0:
            raise ValueError(f"node {self.name}: memory must not be negative")
        if any(count < 0 for count in self.gres.values()):
            raise ValueError(f"node {self.name}: a generic resource count is negative")
        if self.state not in NODE_STATES:
            raise ValueError(f"node {self.name}: unknown state {self.state!r}")
        object.__setattr__(self, "gres", MappingProxyType(dict(self.gres)))

    @property
    def gpus(self) -> int:
        """GPUs of every type."""
        return self.gres.get("gpu", 0)

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def cpus_per_core(self) -> int:
        """CPUs a core counts for: its threads, unless CPUs= counts cores only."""
        return max(self.cpus // self.cores, 1)

    @property
    def usable_cpus(self) -> int:
        """CPUs jobs may use: all but the cores kept for the system (CoreSpecCount)."""
        return self.cpus - self.core_spec_count * self.cpus_per_core

    @property
    def usable_memory(self) -> int:
        """Memory jobs may use: RealMemory less MemSpecLimit."""
        return max(self.memory - self.mem_spec_limit, 0)

    @property
    def usable(self) -> bool:
        """Whether the node takes jobs (not DOWN, DRAIN or FUTURE in slurm.conf)."""
        return self.state not in UNUSABLE_NODE_STATES


@dataclass(frozen=True, slots=True)
class Partition:
    """A set of nodes with limits (PartitionName line); partitions may share nodes."""

    name: str
    nodes: tuple[int, ...]  # indices into Cluster.nodes, ascending
    max_time: int | None = None  # seconds; None: INFINITE
    default_time: int | None = None  # seconds; None: max_time
    max_nodes: int | None = None  # None: UNLIMITED
    min_nodes: int = 1
    priority_tier: int = 1
    priority_job_factor: int = 1
    default: bool = False
    state: str = "UP"
    exclusive: bool = False  # OverSubscribe=EXCLUSIVE: every job gets whole nodes
    def_mem_per_cpu: int | None = None
    def_mem_per_node: int | None = None
    max_mem_per_cpu: int | None = None
    max_mem_per_node: int | None = None
    max_cpus_per_node: int | None = None
    over_time_limit: int | None = None  # minutes; None: the cluster's; -1: UNLIMITED
    lln: bool = False  # LLN=YES: least loaded nodes first

    def __post_init__(self) -> None:
        if self.state not in PARTITION_STATES:
            raise ValueError(f"partition {self.name}: unknown state {self.state!r}")
        if list(self.nodes) != sorted(set(self.nodes)):
            raise ValueError(f"partition {self.name}: node indices must be ascending and distinct")


@dataclass(frozen=True, slots=True)
class SelectSettings:
    """How CPUs and memory are consumed (SelectType, SelectTypeParameters)."""

    plugin: str = "select/cons_tres"
    unit: str = "core"  # what a job is given: cpu, core or socket
    memory: bool = True  # memory is a consumable resource (CR_*_Memory)
    lln: bool = False  # CR_LLN: least loaded nodes first
    one_task_per_core: bool = False

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unknown allocation unit {self.unit!r}; choose one of {', '.join(UNITS)}")

    @property
    def whole_nodes(self) -> bool:
        """select/linear: every job is given whole nodes."""
        return self.plugin == "select/linear"


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """The scheduler's configuration, as the `slurm` scheduler reads it (Slurm 22.05's defaults).

    Times in seconds (`bf_window`, `over_time_limit` and `resv_over_run` are minutes in slurm.conf);
    `over_time_limit=None` and `resv_over_run=None` are UNLIMITED. Parameters of SchedulerParameters that
    are not modelled are kept in `other`, as given.
    """

    scheduler_type: str = "sched/backfill"
    priority_type: str = "priority/basic"
    bf_interval: int = 30
    bf_window: int = 86_400
    bf_resolution: int = 60
    bf_max_job_test: int = 500
    bf_max_job_user: int = 0
    bf_max_job_part: int = 0
    bf_max_job_start: int = 0
    bf_max_time: int | None = None  # None: bf_interval
    bf_min_age_reserve: int = 0
    bf_continue: bool = False
    bf_busy_nodes: bool = False
    bf_window_linear: int = 0  # seconds added per failed start estimate instead of doubling
    default_queue_depth: int = 100
    partition_job_depth: int = 0
    sched_interval: int = 60
    sched_min_interval: int = 2  # microseconds
    sched_max_job_start: int = 0
    over_time_limit: int | None = 0  # minutes
    kill_wait: int = 30
    resv_over_run: int | None = 0  # minutes a job in a reservation may run past its end; None: UNLIMITED
    job_requeue: bool = True  # JobRequeue: a batch job a node failure ended is queued again
    cred_expire: int = 1200  # AuthInfo=cred_expire=: a requeued job may start this + 1 s after its requeue, no sooner
    other: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "other", MappingProxyType(dict(self.other)))


#: PriorityFlags Slurm 22.05 reads (`src/common/read_config.c`); FAIR_TREE is on unless NO_FAIR_TREE or
#: DEPTH_OBLIVIOUS is given.
PRIORITY_FLAGS = frozenset(
    {
        "ACCRUE_ALWAYS", "SMALL_RELATIVE_TO_TIME", "CALCULATE_RUNNING", "DEPTH_OBLIVIOUS", "NO_FAIR_TREE",
        "INCR_ONLY", "MAX_TRES", "NO_NORMAL_ALL", "NO_NORMAL_ASSOC", "NO_NORMAL_PART", "NO_NORMAL_QOS",
        "NO_NORMAL_TRES", "FAIR_TREE",
    }
)  # fmt: skip
#: PriorityUsageResetPeriod values.
RESET_PERIODS = ("NONE", "NOW", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY")


@dataclass(frozen=True, slots=True)
class PrioritySettings:
    """priority/multifactor's configuration (slurm.conf's Priority* keys), with Slurm 22.05's defaults.

    Times in seconds (slurm.conf gives them in Slurm's time formats, whole
    minutes). `flags` holds the PriorityFlags words as given (upper case).
    """

    decay_half_life: int = 7 * 86_400  # PriorityDecayHalfLife; 0: no decay
    calc_period: int = 300  # PriorityCalcPeriod
    max_age: int = 7 * 86_400  # PriorityMaxAge
    favor_small: bool = False  # PriorityFavorSmall
    usage_reset_period: str = "NONE"  # PriorityUsageResetPeriod
    flags: frozenset[str] = frozenset()
    weight_age: int = 0
    weight_assoc: int = 0
    weight_fairshare: int = 0
    weight_job_size: int = 0
    weight_partition: int = 0
    weight_qos: int = 0
    dampening_factor: int = 1  # FairShareDampeningFactor
    accounting_enforce: frozenset[str] = frozenset()  # AccountingStorageEnforce words, lower case

    def __post_init__(self) -> None:
        if self.calc_period < 1:
            raise ValueError("PriorityCalcPeriod must be at least a minute")
        if self.usage_reset_period not in RESET_PERIODS:
            raise ValueError(f"unknown PriorityUsageResetPeriod {self.usage_reset_period!r}")
        unknown = sorted(self.flags - PRIORITY_FLAGS)
        if unknown:
            raise ValueError(f"unknown PriorityFlags {', '.join(unknown)}")

    @property
    def fair_tree(self) -> bool:
        """Whether fair-share is Fair Tree (22.05's default) rather than the classic algorithm."""
        return not ({"NO_FAIR_TREE", "DEPTH_OBLIVIOUS"} & self.flags)

    def normalised(self, factor: str) -> bool:
        """Whether the `factor` (ASSOC, PART, QOS) is divided by its maximum (no NO_NORMAL_<factor> flag)."""
        return not ({f"NO_NORMAL_{factor}", "NO_NORMAL_ALL"} & self.flags)

    @property
    def limits_enforced(self) -> bool:
        """Whether association and QOS limits hold jobs (AccountingStorageEnforce has limits, safe or all)."""
        return bool({"limits", "safe", "all", "2"} & self.accounting_enforce)


@dataclass(frozen=True, slots=True)
class MemoryDefaults:
    """Memory a job gets when it asks none (DefMemPerCPU / DefMemPerNode), and the caps; MB, None: unset."""

    def_mem_per_cpu: int | None = None
    def_mem_per_node: int | None = None
    max_mem_per_cpu: int | None = None
    max_mem_per_node: int | None = None


@dataclass(frozen=True, eq=False)
class Cluster:
    """Nodes in Slurm's order, partitions over them, and the settings the scheduler reads.

    `pool` marks the processor pool of an SWF trace: one node standing for
    `procs` processors without node boundaries.
    """

    name: str
    nodes: tuple[Node, ...]
    partitions: tuple[Partition, ...]
    select: SelectSettings = SelectSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    memory: MemoryDefaults = MemoryDefaults()
    priority: PrioritySettings = PrioritySettings()
    pool: bool = False
    source: str = ""
    notes: tuple[str, ...] = ()  # what was read but is not modelled (keys, GRES other than GPUs, ...)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError(f"cluster {self.name}: no nodes")
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"cluster {self.name}: a node name appears twice")
        if names != sorted(names, key=natural_key):
            raise ValueError(f"cluster {self.name}: nodes must be in Slurm's order (names, numbers as numbers)")
        if not self.partitions:
            raise ValueError(f"cluster {self.name}: no partitions")
        partition_names = [partition.name for partition in self.partitions]
        if len(set(partition_names)) != len(partition_names):
            raise ValueError(f"cluster {self.name}: a partition name appears twice")
        if sum(partition.default for partition in self.partitions) > 1:
            raise ValueError(f"cluster {self.name}: more than one default partition")
        for partition in self.partitions:
            if partition.nodes and partition.nodes[-1] >= len(self.nodes):
                raise ValueError(f"partition {partition.name}: a node index past the cluster's {len(self.nodes)}")
        if self.pool and (len(self.nodes) != 1 or len(self.partitions) != 1):
            raise ValueError("a processor pool is one node in one partition")

    @classmethod
    def processor_pool(cls, procs: int, name: str = "pool") -> Cluster:
        """`procs` processors as one partition without node boundaries: an SWF trace's machine."""
        return cls(
            name=name,
            nodes=(Node(name, cpus=procs, memory=0),),
            partitions=(Partition(name, nodes=(0,), default=True),),
            select=SelectSettings(unit="cpu", memory=False),
            pool=True,
            source=f"{procs} processors",
        )

    @property
    def procs(self) -> int:
        """CPUs jobs may use, over every usable node."""
        return sum(node.usable_cpus for node in self.nodes if node.usable)

    @property
    def pool_size(self) -> int | None:
        """The processor count if this is a pool (no node boundaries), else None."""
        return self.nodes[0].cpus if self.pool else None

    @property
    def default_partition(self) -> Partition | None:
        """The partition jobs that name none go to (Default=YES; else none, as in Slurm)."""
        return next((partition for partition in self.partitions if partition.default), None)

    def partition(self, name: str) -> Partition:
        """The partition called `name` (KeyError naming the known ones)."""
        for partition in self.partitions:
            if partition.name == name:
                return partition
        raise KeyError(f"no partition {name!r} in cluster {self.name} (it has {', '.join(self.partition_names)})")

    @property
    def partition_names(self) -> tuple[str, ...]:
        return tuple(partition.name for partition in self.partitions)

    def node_index(self, name: str) -> int:
        """The position of node `name` in Slurm's order (KeyError if there is none)."""
        index = self._index.get(name)
        if index is None:
            raise KeyError(f"no node {name!r} in cluster {self.name}")
        return index

    @cached_property
    def _index(self) -> dict[str, int]:
        return {node.name: position for position, node in enumerate(self.nodes)}

    def summary(self) -> str:
        """One line: nodes, CPUs, memory, GPUs and partitions, for logs and reports."""
        if self.pool:
            return f"a pool of {self.procs} processors"
        gpus = sum(node.gpus for node in self.nodes)
        memory = sum(node.memory for node in self.nodes) / 1024
        parts = ", ".join(f"{p.name}{'*' if p.default else ''} ({len(p.nodes)} nodes)" for p in self.partitions)
        return (
            f"{self.name}: {len(self.nodes)} nodes, {self.procs} CPUs, {memory:.0f} GB"
            + (f", {gpus} GPUs" if gpus else "")
            + f"; partitions {parts}; {self.select.plugin} by {self.select.unit}"
            + (" and memory" if self.select.memory else "")
        )
