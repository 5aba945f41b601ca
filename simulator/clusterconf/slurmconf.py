"""A site's `slurm.conf` (and the `gres.conf` beside it) as a cluster.

The file format of Slurm 22.05's `src/common/parse_config.c`: `KEY=VALUE`
pairs separated by blanks (keys case-insensitive, values in double quotes
may hold blanks), `#` starts a comment unless escaped (`\\#`), a line ending
in an odd number of backslashes continues on the next, `Include FILE` reads
another file (relative to the including file's folder; `%c` is the
ClusterName). `NodeName=DEFAULT` and `PartitionName=DEFAULT` lines give
defaults to the lines after them. What is read: NodeName, PartitionName,
NodeSet and DownNodes lines; SelectType(Parameters), SchedulerType,
SchedulerParameters, PriorityType, OverTimeLimit, KillWait, ResvOverRun,
JobRequeue, AuthInfo's cred_expire, DefMemPer{CPU,Node}, MaxMemPer{CPU,Node}, GresTypes, ClusterName, the
priority/multifactor keys (`Priority*`, FairShareDampeningFactor) and
AccountingStorageEnforce (`simulator.clusterconf.prioritykeys`). Every
other global key is accepted and left alone (slurm.conf has hundreds);
an unknown key on a NodeName or PartitionName line is an error, as in Slurm.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from kernel.hostlist import expand_hostlist
from simulator.cluster import Cluster, Node, Partition, natural_key
from simulator.clusterconf.conffile import Line, read_lines
from simulator.clusterconf.gresconf import check_gres_conf
from simulator.clusterconf.prioritykeys import priority_settings
from simulator.clusterconf.settings import (
    MEMORY_KEYS,
    NODE_KEYS,
    PARTITION_KEYS,
    ClusterConfigError,
    Value,
    lower_keys,
    make_node,
    make_partition,
    memory_defaults,
    parse_gres,
    resolve_nodes,
    scheduler_settings,
    select_settings,
)


@dataclass
class _Collected:
    """The lines of a slurm.conf sorted by kind, defaults merged in."""

    globals: dict[str, Value] = field(default_factory=dict)
    nodes: list[tuple[Value, dict[str, Value]]] = field(default_factory=list)
    partitions: list[tuple[Value, dict[str, Value]]] = field(default_factory=list)
    node_sets: dict[str, tuple[Value, dict[str, Value]]] = field(default_factory=dict)
    down: list[tuple[Value, dict[str, Value]]] = field(default_factory=list)


def _collect(lines: Iterator[Line]) -> _Collected:
    collected = _Collected()
    defaults: dict[str, dict[str, Value]] = {"nodename": {}, "partitionname": {}}
    for line in lines:
        kind, (_, head) = line.kind, line.pairs[0]
        if kind == "global":
            collected.globals.update((key.lower(), value) for key, value in line.pairs)
        elif kind in defaults:  # NodeName=DEFAULT and PartitionName=DEFAULT give defaults to the lines after
            keys, label, found = (
                (NODE_KEYS, "NodeName", collected.nodes)
                if kind == "nodename"
                else (PARTITION_KEYS, "PartitionName", collected.partitions)
            )
            values = lower_keys(line.pairs[1:], keys, label)
            if head.text.upper() == "DEFAULT":
                defaults[kind] = defaults[kind] | values
            else:
                found.append((head, defaults[kind] | values))
        elif kind == "nodeset":
            collected.node_sets[head.text] = (head, lower_keys(line.pairs[1:], _NODESET_KEYS, "NodeSet"))
        elif kind == "downnodes":
            collected.down.append((head, lower_keys(line.pairs[1:], _DOWN_KEYS, "DownNodes")))
    return collected


_NODESET_KEYS = frozenset({"feature", "nodes"})
_DOWN_KEYS = frozenset({"reason", "state"})


def _build_nodes(collected: _Collected, source: Path) -> list[Node]:
    """Every node, in Slurm's order (names, numbers as numbers), DownNodes states applied."""
    nodes: dict[str, Node] = {}
    defined: dict[str, int | None] = {}
    for head, values in collected.nodes:
        try:
            names = expand_hostlist(head.text)
        except ValueError as error:
            raise head.where.error("NodeName", str(error)) from None
        for name in names:
            if name in defined:
                raise head.where.error("NodeName", f"node {name} is already defined at line {defined[name]}")
            defined[name] = head.where.line
            nodes[name] = make_node(name, values, head.where)
    if not nodes:
        raise ClusterConfigError(f"{source}: no NodeName line: not a cluster's slurm.conf?")
    for head, values in collected.down:
        state = values["state"].text.upper() if "state" in values else "DOWN"
        for name in _names_of(head, "DownNodes"):
            if name not in nodes:
                raise head.where.error("DownNodes", f"no node {name!r} is defined")
            nodes[name] = replace(nodes[name], state=state.split("+")[0])
    return sorted(nodes.values(), key=lambda node: natural_key(node.name))


def _names_of(head: Value, key: str) -> list[str]:
    try:
        return expand_hostlist(head.text)
    except ValueError as error:
        raise head.where.error(key, str(error)) from None


def _lookup(nodes: list[Node], collected: _Collected) -> dict[str, list[int]]:
    """Node names and NodeSet names to node indices."""
    index = {node.name: [position] for position, node in enumerate(nodes)}
    for name, (head, values) in collected.node_sets.items():
        chosen: set[int] = set()
        if "nodes" in values:
            chosen.update(resolve_nodes(values["nodes"], "Nodes", index.get, len(nodes)))
        if "feature" in values:
            feature = values["feature"].text
            chosen.update(position for position, node in enumerate(nodes) if feature in node.features)
        if not chosen:
            raise head.where.error("NodeSet", f"{name} names no node (give Nodes= or Feature=)")
        index[name] = sorted(chosen)
    return index


def _check_gres_types(collected: _Collected) -> None:
    """Every generic resource a node has must be declared in GresTypes, or Slurm refuses the node."""
    types = collected.globals.get("grestypes")
    declared = {name.strip().lower() for name in types.text.split(",")} if types else set()
    for head, values in collected.nodes:
        gres = values.get("gres")
        if gres is None:
            continue
        for name in parse_gres(gres.text):
            if ":" not in name and name.lower() not in declared:
                raise gres.where.error("Gres", f"{name} is not in GresTypes (Slurm refuses the node {head.text})")


def read_slurm_conf(path: str | Path, gres_conf: str | Path | None = None) -> Cluster:
    """The cluster a slurm.conf describes; `gres_conf` (default: gres.conf beside it, if any) is checked against it."""
    path = Path(path)
    collected = _collect(read_lines(path))
    nodes = _build_nodes(collected, path)
    _check_gres_types(collected)
    lookup = _lookup(nodes, collected)
    notes: list[str] = []
    partitions: list[Partition] = []
    for head, values in collected.partitions:
        indices = resolve_nodes(values["nodes"], "Nodes", lookup.get, len(nodes)) if "nodes" in values else ()
        partition = make_partition(head.text, indices, values, notes)
        if partition.default:  # as slurmctld: the last Default=YES wins
            for position, earlier in enumerate(partitions):
                if earlier.default:
                    notes.append(
                        f"{head.where.source} line {head.where.line}: {partition.name} is the default "
                        f"partition, not {earlier.name} (the last Default=YES wins)"
                    )
                    partitions[position] = replace(earlier, default=False)
        partitions.append(partition)
    if not partitions:
        raise ClusterConfigError(f"{path}: no PartitionName line: jobs could not run anywhere")
    globals_ = collected.globals
    select = select_settings(globals_.get("selecttype"), globals_.get("selecttypeparameters"))
    memory = memory_defaults({key: value for key, value in globals_.items() if key in MEMORY_KEYS})
    scheduler = scheduler_settings(globals_, notes)
    priority = priority_settings(globals_, notes)
    gres_path = Path(gres_conf) if gres_conf is not None else path.with_name("gres.conf")
    if gres_conf is not None or gres_path.exists():
        notes.extend(check_gres_conf(gres_path, nodes))
    notes.extend(_model_notes(nodes, select.memory, memory.def_mem_per_cpu, memory.def_mem_per_node))
    name = globals_["clustername"].text if "clustername" in globals_ else path.stem
    try:
        return Cluster(
            name=name,
            nodes=tuple(nodes),
            partitions=tuple(partitions),
            select=select,
            scheduler=scheduler,
            memory=memory,
            priority=priority,
            source=str(path),
            notes=tuple(notes),
        )
    except ValueError as error:
        raise ClusterConfigError(f"{path}: {error}") from None


def _model_notes(nodes: list[Node], memory: bool, per_cpu: int | None, per_node: int | None) -> list[str]:
    """What a reader of results should know about how this cluster is modelled."""
    notes = []
    others = sorted({name for node in nodes for name in node.gres if name.split(":")[0] != "gpu"})
    if others:
        notes.append(f"generic resources other than GPUs ({', '.join(others)}) are not scheduled")
    if memory and per_cpu is None and per_node is None:
        notes.append(
            "memory is consumable and neither DefMemPerCPU nor DefMemPerNode is set: as in Slurm, "
            "a job that asks no memory is given all of each node's memory"
        )
    return notes
