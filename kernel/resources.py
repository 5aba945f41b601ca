"""What a job asked of a cluster beyond a processor count: nodes, tasks, memory, GPUs, partition, QOS.

Batch systems record more than a size: Slurm's `ReqTRES`, `NNodes`, `ReqMem`,
`Partition` and `QOS`, PBS's `Resource_List`. The readers turn those into a
`ResourceRequest`, the node allocator (`simulator.nodes`) places it, and a
predictor may use it as a feature; it sits in the kernel because all three
layers speak it. Every field is optional: an SWF job only knows its
processors, and a request that says nothing more is a request for that many
CPUs anywhere.

Units are Slurm's: memory in MB (1024**2 bytes), counts as whole numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: `mem_per_node` value that asks for all of each node's memory (Slurm's `--mem=0`).
ALL_MEMORY = 0


@dataclass(frozen=True, slots=True)
class ResourceRequest:
    """A job's request, field by field as Slurm's `sbatch` options name them (None: not asked).

    - `nodes`/`max_nodes`: `-N MIN[-MAX]`; `nodes=None` is Slurm's default (one node, or as many as
      the tasks need when the nodes may be shared), `max_nodes=None` no maximum;
    - `tasks` (`-n`), `cpus_per_task` (`-c`), `tasks_per_node` (`--ntasks-per-node`); without
      `tasks`, one task per node (or `tasks_per_node` per node);
    - memory per node (`--mem`, MB; `ALL_MEMORY` for all of it) or per CPU (`--mem-per-cpu`);
      neither: the cluster's default (`DefMemPerCPU`/`DefMemPerNode`);
    - GPUs per job (`--gpus`), per node (`--gres=gpu:N`, `--gpus-per-node`) or per task
      (`--gpus-per-task`), of `gpu_type` if given;
    - `partitions` in the order Slurm tries them (empty: the default partition), `qos`,
      `exclusive` (`--exclusive`: whole nodes), and the advance `reservation` it runs in
      (`--reservation`: only on the reservation's nodes, only while it lasts);
    - `nodelist`: the nodes it runs on, and no others (`--nodelist` naming every node of the job; what a running
      job holds, as squeue's NodeList shows it, so that a forecast keeps it there).
    """

    nodes: int | None = None
    max_nodes: int | None = None
    tasks: int | None = None
    cpus_per_task: int = 1
    tasks_per_node: int | None = None
    mem_per_node: int | None = None
    mem_per_cpu: int | None = None
    gpus: int | None = None
    gpus_per_node: int | None = None
    gpus_per_task: int | None = None
    gpu_type: str | None = None
    partitions: tuple[str, ...] = ()
    qos: str | None = None
    exclusive: bool = False
    reservation: str | None = None
    nodelist: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("nodes", "max_nodes", "tasks", "tasks_per_node", "gpus", "gpus_per_node", "gpus_per_task"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.cpus_per_task < 1:
            raise ValueError(f"cpus_per_task must be at least 1, got {self.cpus_per_task}")
        if self.mem_per_node is not None and self.mem_per_node < 0:
            raise ValueError(f"mem_per_node must not be negative, got {self.mem_per_node}")
        if self.mem_per_cpu is not None and self.mem_per_cpu < 1:
            raise ValueError(f"mem_per_cpu must be at least 1 MB, got {self.mem_per_cpu}")
        if self.mem_per_node is not None and self.mem_per_cpu is not None:
            raise ValueError("memory is asked per node or per CPU, not both")
        if sum(value is not None for value in (self.gpus, self.gpus_per_node, self.gpus_per_task)) > 1:
            raise ValueError("GPUs are asked per job, per node or per task, not several of these")
        if self.nodes is not None and self.max_nodes is not None and self.max_nodes < self.nodes:
            raise ValueError(f"max_nodes ({self.max_nodes}) is below nodes ({self.nodes})")
        if self.nodelist:
            self._check_nodelist()

    def _check_nodelist(self) -> None:
        """A node list names each of the job's nodes once, and so says how many it runs on."""
        count = len(self.nodelist)
        if len(set(self.nodelist)) != count:
            raise ValueError(f"nodelist names a node twice: {','.join(self.nodelist)}")
        if (self.nodes, self.max_nodes) != (count, count):
            raise ValueError(f"nodelist names {count} nodes; nodes and max_nodes must be {count}")

    @property
    def min_nodes(self) -> int:
        """The fewest nodes the job may run on."""
        return self.nodes or 1

    @property
    def task_count(self) -> int:
        """Tasks: as asked, else one (or `tasks_per_node`) per node."""
        if self.tasks is not None:
            return self.tasks
        return self.min_nodes * (self.tasks_per_node or 1)

    @property
    def cpus(self) -> int:
        """The CPUs the job needs at least: tasks x CPUs per task."""
        return self.task_count * self.cpus_per_task

    @property
    def total_gpus(self) -> int:
        """GPUs the job needs at least (per node and per task requests over the fewest nodes and all tasks)."""
        if self.gpus is not None:
            return self.gpus
        if self.gpus_per_node is not None:
            return self.gpus_per_node * self.min_nodes
        if self.gpus_per_task is not None:
            return self.gpus_per_task * self.task_count
        return 0

    @classmethod
    def processors(cls, count: int) -> ResourceRequest:
        """A request for `count` CPUs anywhere: what an SWF job says."""
        return cls(tasks=count)

    @classmethod
    def from_totals(
        cls,
        procs: int,
        nodes: int = 0,
        memory_mb: int = 0,
        gpus: int = 0,
        exclusive: bool = False,
        partition: str = "",
        qos: str = "",
        nodelist: Sequence[str] = (),
    ) -> ResourceRequest:
        """A request from a job's totals, as a scheduler reports a job to the service (`kernel.jobs.JobRequest`'s
        fields, its partition and QOS by name; partitions separated by commas, in the order Slurm tries them).

        `procs` one-CPU tasks on at least `nodes` nodes (0: as Slurm places
        them), exactly that many when more than one, as `-N` asks; `memory_mb`
        in all (0: the cluster's default), per node on one node, else per CPU
        (spread with the tasks); `gpus` in all, per node when they split evenly
        over fixed nodes, else per job. What totals cannot say (CPUs per task,
        a range of nodes, a GPU type) is left to Slurm's defaults, as sacct's
        totals are read (`simulator.workloads.tres`). A `nodelist` (where a
        running job runs) keeps it on those nodes, as many as it names.
        """
        if nodelist:
            if nodes not in (0, len(nodelist)):
                raise ValueError(f"nodelist names {len(nodelist)} nodes, not the {nodes} the job runs on")
            nodes = len(nodelist)
        fixed = nodes > 1
        per_node = gpus // nodes if gpus and fixed and gpus % nodes == 0 else None
        return cls(
            nodes=nodes or None,
            max_nodes=nodes if fixed or nodelist else None,
            tasks=procs,
            mem_per_node=memory_mb if memory_mb and nodes == 1 else None,
            mem_per_cpu=-(-memory_mb // procs) if memory_mb and nodes != 1 else None,
            gpus=gpus if gpus and per_node is None else None,
            gpus_per_node=per_node,
            partitions=tuple(name for name in partition.split(",") if name),
            qos=qos or None,
            exclusive=exclusive,
            nodelist=tuple(nodelist),
        )
