"""A cluster written by hand, in TOML: node groups, partitions and the scheduler's settings.

The keys are slurm.conf's, in lower case with underscores, and the values
are read as Slurm reads them (times in Slurm's formats or minutes, memory in
MB or with a unit)::

    name = "mixed"
    select = "CR_Core_Memory"          # SelectTypeParameters (select/cons_tres; select_type to change it)
    def_mem_per_cpu = 2000             # MB; also def_mem_per_node, max_mem_per_cpu, max_mem_per_node

    [[nodes]]                          # a group of alike nodes
    names = "n[1-3]"
    cpus = 8
    memory = "16G"                     # RealMemory
    # optional: gpus = 2 or gres = "gpu:a100:2", features = ["avx512"], weight, sockets,
    # cores_per_socket, threads_per_core, boards, core_spec_count, mem_spec_limit, state

    [[nodes]]
    names = "g[1-2]"
    cpus = 16
    memory = 64000
    gpus = 4

    [[partitions]]
    name = "cpu"
    nodes = "n[1-3],g1"                # host lists, or "ALL"
    default = true
    max_time = "1-00:00:00"            # or minutes: 1440
    # optional: default_time, max_nodes, min_nodes, priority_tier, priority_job_factor, state,
    # oversubscribe = "EXCLUSIVE", def_mem_per_cpu, max_mem_per_node, max_cpus_per_node, lln

    [scheduler]
    parameters = "bf_interval=30,bf_window=1440,bf_resolution=60"   # SchedulerParameters
    priority_type = "priority/multifactor"                          # or "priority/basic" (the default)
    over_time_limit = 0                # minutes
    kill_wait = 30                     # seconds
    job_requeue = 1                    # JobRequeue: a job a node failure ended runs again (0: it stays ended)
    auth_info = "cred_expire=1200"     # AuthInfo: a requeued job may start cred_expire + 1 s after, no sooner

    [priority]                         # priority/multifactor's Priority* keys, read as slurm.conf's
    weight_fairshare = 10000           # PriorityWeightFairshare; also weight_age, weight_job_size,
    weight_age = 1000                  # weight_partition, weight_qos, weight_assoc, weight_tres
    max_age = "7-0"                    # PriorityMaxAge (Slurm time or minutes); decay_half_life, calc_period
    usage_reset_period = "NONE"        # PriorityUsageResetPeriod
    flags = ["SMALL_RELATIVE_TO_TIME"] # PriorityFlags; favor_small, fair_share_dampening_factor
    enforce = "limits,qos"             # AccountingStorageEnforce: QOS and association limits hold jobs

Unknown keys are errors naming the file, the table and the key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernel.hostlist import expand_hostlist
from simulator.cluster import Cluster, Node, natural_key
from simulator.clusterconf.prioritykeys import priority_settings
from simulator.clusterconf.settings import (
    ClusterConfigError,
    Value,
    Where,
    make_node,
    make_partition,
    memory_defaults,
    memory_mb,
    resolve_nodes,
    scheduler_settings,
    select_settings,
)

#: TOML key -> slurm.conf key (lower case) of a node group.
NODE_KEYS = {
    "names": "nodename",
    "cpus": "cpus",
    "memory": "realmemory",
    "gres": "gres",
    "gpus": "gres",
    "features": "features",
    "weight": "weight",
    "boards": "boards",
    "sockets": "sockets",
    "cores_per_socket": "corespersocket",
    "threads_per_core": "threadspercore",
    "core_spec_count": "corespeccount",
    "mem_spec_limit": "memspeclimit",
    "state": "state",
}
PARTITION_KEYS = {
    "name": "partitionname",
    "nodes": "nodes",
    "default": "default",
    "max_time": "maxtime",
    "default_time": "defaulttime",
    "max_nodes": "maxnodes",
    "min_nodes": "minnodes",
    "priority_tier": "prioritytier",
    "priority_job_factor": "priorityjobfactor",
    "state": "state",
    "oversubscribe": "oversubscribe",
    "def_mem_per_cpu": "defmempercpu",
    "def_mem_per_node": "defmempernode",
    "max_mem_per_cpu": "maxmempercpu",
    "max_mem_per_node": "maxmempernode",
    "max_cpus_per_node": "maxcpuspernode",
    "over_time_limit": "overtimelimit",
    "lln": "lln",
}
SCHEDULER_KEYS = {
    "type": "schedulertype",
    "parameters": "schedulerparameters",
    "priority_type": "prioritytype",
    "over_time_limit": "overtimelimit",
    "kill_wait": "killwait",
    "resv_over_run": "resvoverrun",
    "job_requeue": "jobrequeue",
    "auth_info": "authinfo",
}
#: TOML key -> slurm.conf key (lower case) of the [priority] table.
PRIORITY_KEYS = {
    "weight_age": "priorityweightage",
    "weight_assoc": "priorityweightassoc",
    "weight_fairshare": "priorityweightfairshare",
    "weight_job_size": "priorityweightjobsize",
    "weight_partition": "priorityweightpartition",
    "weight_qos": "priorityweightqos",
    "weight_tres": "priorityweighttres",
    "decay_half_life": "prioritydecayhalflife",
    "calc_period": "prioritycalcperiod",
    "max_age": "prioritymaxage",
    "usage_reset_period": "priorityusageresetperiod",
    "favor_small": "priorityfavorsmall",
    "flags": "priorityflags",
    "fair_share_dampening_factor": "fairsharedampeningfactor",
    "enforce": "accountingstorageenforce",
}
TOP_KEYS = {
    "name",
    "select",
    "select_type",
    "def_mem_per_cpu",
    "def_mem_per_node",
    "max_mem_per_cpu",
    "max_mem_per_node",
    "nodes",
    "partitions",
    "scheduler",
    "priority",
}


def _text(value: object, where: Where, key: str) -> str:
    """A TOML value as slurm.conf would spell it."""
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ",".join(value)
    raise where.error(key, f"{value!r} is not a number, a string or a list of strings")


def _slurm_values(table: Mapping[str, Any], keys: Mapping[str, str], where: Where) -> dict[str, Value]:
    """A TOML table's values under slurm.conf's lower-case keys (unknown keys raise); their errors name the TOML
    key."""
    where = replace(where, names=tuple((slurm_key, toml_key) for toml_key, slurm_key in keys.items()))
    values: dict[str, Value] = {}
    for key, raw in table.items():
        if key not in keys:
            raise where.error(key, f"is not a key here (known: {', '.join(sorted(keys))})")
        text = _text(raw, where, key)
        if key == "memory":
            try:
                text = str(memory_mb(text))
            except ValueError as error:
                raise where.error(key, str(error)) from None
        elif key == "gpus":
            if "gres" in table:
                raise where.error(key, "give gpus or gres, not both")
            text = f"gpu:{text}"
        values[keys[key]] = Value(text, where)
    return values


def _table(document: Mapping[str, Any], key: str, where: Where) -> Mapping[str, Any]:
    table = document.get(key, {})
    if not isinstance(table, dict):
        raise where.error(key, f"must be a table ([{key}])")
    return table


def _tables(document: Mapping[str, Any], key: str, source: str) -> list[tuple[Where, Mapping[str, Any]]]:
    entries = document.get(key, [])
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ClusterConfigError(f"{source}: {key} must be an array of tables ([[{key}]])")
    return [(Where(f"{source} [[{key}]] #{number}"), entry) for number, entry in enumerate(entries, start=1)]


def _nodes(document: Mapping[str, Any], source: str) -> list[Node]:
    nodes: dict[str, Node] = {}
    for where, table in _tables(document, "nodes", source):
        values = _slurm_values(table, NODE_KEYS, where)
        if "nodename" not in values:
            raise where.error("names", "is missing (the group's host list, e.g. n[1-4])")
        try:
            names = expand_hostlist(values.pop("nodename").text)
        except ValueError as error:
            raise where.error("names", str(error)) from None
        for name in names:
            if name in nodes:
                raise where.error("names", f"node {name} is in two groups")
            nodes[name] = make_node(name, values, where)
    if not nodes:
        raise ClusterConfigError(f"{source}: no [[nodes]]")
    return sorted(nodes.values(), key=lambda node: natural_key(node.name))


def read_cluster_toml(path: str | Path) -> Cluster:
    """The cluster a TOML file describes (see the module docstring for the form)."""
    source = str(path)
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ClusterConfigError(f"{source}: cannot read: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ClusterConfigError(f"{source}: not TOML: {error}") from None
    top = Where(source)
    unknown = sorted(set(document) - TOP_KEYS)
    if unknown:
        raise top.error(unknown[0], f"is not a key of a cluster file (known: {', '.join(sorted(TOP_KEYS))})")
    nodes = _nodes(document, source)
    index = {node.name: [position] for position, node in enumerate(nodes)}
    notes: list[str] = []
    partitions = []
    for where, table in _tables(document, "partitions", source):
        values = _slurm_values(table, PARTITION_KEYS, where)
        if "partitionname" not in values:
            raise where.error("name", "is missing")
        indices = resolve_nodes(values["nodes"], "nodes", index.get, len(nodes)) if "nodes" in values else ()
        partitions.append(make_partition(values["partitionname"].text, indices, values, notes))
    if not partitions:
        raise ClusterConfigError(f"{source}: no [[partitions]]: jobs could not run anywhere")
    scheduler_table, priority_table = (_table(document, key, top) for key in ("scheduler", "priority"))
    select_type = Value(_text(document.get("select_type", "select/cons_tres"), top, "select_type"), top)
    select_params = Value(_text(document["select"], top, "select"), top) if "select" in document else None
    memory = {
        key.replace("_", ""): Value(_text(document[key], top, key), top)
        for key in ("def_mem_per_cpu", "def_mem_per_node", "max_mem_per_cpu", "max_mem_per_node")
        if key in document
    }
    try:
        return Cluster(
            name=_text(document.get("name", Path(path).stem), top, "name"),
            nodes=tuple(nodes),
            partitions=tuple(partitions),
            select=select_settings(select_type, select_params),
            scheduler=scheduler_settings(
                _slurm_values(scheduler_table, SCHEDULER_KEYS, Where(f"{source} [scheduler]")), notes
            ),
            priority=priority_settings(
                _slurm_values(priority_table, PRIORITY_KEYS, Where(f"{source} [priority]")), notes
            ),
            memory=memory_defaults(memory),
            source=source,
            notes=tuple(notes),
        )
    except ValueError as error:
        if isinstance(error, ClusterConfigError):
            raise
        raise ClusterConfigError(f"{source}: {error}") from None
