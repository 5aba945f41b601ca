"""From Slurm's keys and values to the cluster model: the one place both readers (slurm.conf, TOML) build in.

Values are read as Slurm 22.05 reads them (`src/common/read_config.c`,
`src/plugins/sched/backfill/backfill.c`, `slurmctld/job_scheduler.c`):
times in Slurm's formats, memory in MB, node shapes completed from sockets,
cores and threads. Bad values raise `ClusterConfigError` naming the file,
line and key; a SchedulerParameters value Slurm would refuse falls back to
Slurm's default, as Slurm does, and says so in the cluster's notes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from kernel.errors import TschedError
from kernel.hostlist import expand_expression, split_list
from simulator.cluster import (
    NODE_STATES,
    PARTITION_STATES,
    MemoryDefaults,
    Node,
    Partition,
    SchedulerSettings,
    SelectSettings,
)

UNLIMITED = frozenset({"UNLIMITED", "INFINITE"})
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_SIZE = re.compile(r"(\d+)([KMGTP]?)", re.IGNORECASE)
_MB_PER_UNIT = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
_GRES_COUNT = re.compile(r"(\d+)([KMG]?)", re.IGNORECASE)


class ClusterConfigError(TschedError, ValueError):
    """A cluster description (slurm.conf, gres.conf, TOML) that cannot be used; names the file, line and key."""


@dataclass(frozen=True, slots=True)
class Where:
    """A place in a configuration file, for error messages; `names` maps slurm.conf's lower-case keys to the
    file's own (a TOML table's), so that an error names the key the user wrote."""

    source: str
    line: int | None = None
    names: tuple[tuple[str, str], ...] = ()

    def error(self, key: str, message: str) -> ClusterConfigError:
        place = self.source if self.line is None else f"{self.source} line {self.line}"
        written = dict(self.names).get(key.lower(), key)
        return ClusterConfigError(f"{place}: {written}: {message}")


@dataclass(frozen=True, slots=True)
class Value:
    """A value as written, with where it was written."""

    text: str
    where: Where


def slurm_minutes(text: str) -> int | None:
    """Minutes in Slurm's time formats (`30`, `MM:SS`, `HH:MM:SS`, `D-HH[:MM[:SS]]`); None for UNLIMITED.

    As Slurm's time_str2mins: seconds round up to the next minute. ValueError if not a time.
    """
    text = text.strip()
    if text.upper() in UNLIMITED:
        return None
    match = _TIME.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not a time (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED)")
    days, first, second, third = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = int(first), int(second or 0), int(third or 0)
        total = ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    elif third is not None:  # HH:MM:SS
        total = (int(first) * 60 + int(second)) * 60 + int(third)
    elif second is not None:  # MM:SS
        total = int(first) * 60 + int(second)
    else:
        total = int(first) * 60
    return -(-total // 60)


def memory_mb(text: str) -> int:
    """MB in `16000`, `16000M`, `64G`, `1T` (no unit: MB, as RealMemory). ValueError otherwise."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a memory size (MB, or a number with K, M, G, T or P)")
    return int(int(match.group(1)) * _MB_PER_UNIT[match.group(2).upper()])


def parse_gres(text: str) -> dict[str, int]:
    """Counts of a Gres= list (`gpu:2`, `gpu:a100:4(S:0-1)`, `gpu:2,mps:200`): name and name:type totals.

    A count may end in K, M or G (x1024); no count is one; `no_consume` is
    dropped. ValueError on a malformed entry.
    """
    counts: dict[str, int] = {}
    for entry in _split_outside_parentheses(text):
        spec = entry.split("(", 1)[0].strip()
        parts = [part for part in spec.split(":") if part.lower() != "no_consume"]
        if not parts or not parts[0] or not re.fullmatch(r"[A-Za-z][\w/-]*", parts[0]):
            raise ValueError(f"{entry!r} is not NAME[:TYPE][:COUNT]")
        name, *rest = parts
        count = 1
        if rest and _GRES_COUNT.fullmatch(rest[-1]):
            number = _GRES_COUNT.fullmatch(rest[-1])
            assert number is not None
            count = int(number.group(1)) * 1024 ** " KMG".index(number.group(2).upper() or " ")
            rest = rest[:-1]
        if len(rest) > 1:
            raise ValueError(f"{entry!r} is not NAME[:TYPE][:COUNT]")
        counts[name] = counts.get(name, 0) + count
        if rest:
            key = f"{name}:{rest[0]}"
            counts[key] = counts.get(key, 0) + count
    return counts


def _split_outside_parentheses(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def _integer(value: Value, key: str, *, minimum: int = 0, unlimited: bool = False) -> int | None:
    text = value.text.strip()
    if unlimited and text.upper() in UNLIMITED:
        return None
    if not text.isdigit() or int(text) < minimum:
        allowed = f"a whole number of at least {minimum}" + (" or UNLIMITED" if unlimited else "")
        raise value.where.error(key, f"{text!r} is not {allowed}")
    return int(text)


def _required(value: Value, key: str, *, minimum: int = 0) -> int:
    number = _integer(value, key, minimum=minimum)
    assert number is not None  # without `unlimited`, _integer returns a number or raises
    return number


def _boolean(value: Value, key: str) -> bool:
    text = value.text.strip().upper()
    if text not in ("YES", "NO", "TRUE", "FALSE", "1", "0"):
        raise value.where.error(key, f"{value.text!r} is not YES or NO")
    return text in ("YES", "TRUE", "1")


def _time(value: Value, key: str) -> int | None:
    try:
        minutes = slurm_minutes(value.text)
    except ValueError as error:
        raise value.where.error(key, str(error)) from None
    return None if minutes is None else minutes * 60


def _get(values: Mapping[str, Value], *keys: str) -> Value | None:
    return next((values[key] for key in keys if key in values), None)


#: Keys of a NodeName line in Slurm 22.05 (lower case), and keys of later versions a site's file may carry.
NODE_KEYS = frozenset(
    {
        "nodename", "bcastaddr", "boards", "corespeccount", "corespersocket", "cpus", "cpuspeclist", "cpubind",
        "feature", "features", "gres", "memspeclimit", "nodeaddr", "nodehostname", "port", "procs", "realmemory",
        "reason", "sockets", "socketsperboard", "state", "threadspercore", "tmpdisk", "tresweights", "weight",
        "restrictedcorespergpu", "parameters", "topology",
    }
)  # fmt: skip


def make_node(name: str, values: Mapping[str, Value], where: Where) -> Node:
    """A node from a NodeName line's values (lower-case keys, NodeName=DEFAULT's merged in), as Slurm completes it."""
    number = {
        key: _required(values[key], key, minimum=1)
        for key in ("boards", "socketsperboard", "sockets", "corespersocket", "threadspercore", "cpus", "procs")
        if key in values
    }
    cores, threads = number.get("corespersocket", 1), number.get("threadspercore", 1)
    cpus = number.get("cpus", number.get("procs"))
    boards = number.get("boards", 1)
    if "socketsperboard" in number:
        sockets = boards * number["socketsperboard"]
    elif "sockets" in number:
        sockets = number["sockets"]
    elif cpus is not None and cpus % (cores * threads) == 0:
        sockets = cpus // (cores * threads)
    else:
        sockets = boards
    if cpus is None or cpus not in (sockets, sockets * cores, sockets * cores * threads):
        cpus = sockets * cores * threads  # Slurm: "CPUs match no Sockets...: Resetting CPUs"
    state = values["state"].text.upper() if "state" in values else "UNKNOWN"
    if state.split("+")[0] not in NODE_STATES:
        raise values["state"].where.error("State", f"{state!r} is not a node state ({', '.join(sorted(NODE_STATES))})")
    gres_value = values.get("gres")
    try:
        gres = parse_gres(gres_value.text) if gres_value else {}
    except ValueError as error:
        assert gres_value is not None
        raise gres_value.where.error("Gres", str(error)) from None
    features = _get(values, "features", "feature")
    core_spec = _required(values["corespeccount"], "CoreSpecCount") if "corespeccount" in values else 0
    if core_spec >= sockets * cores:
        raise values["corespeccount"].where.error("CoreSpecCount", f"{core_spec} leaves node {name} no core")
    try:
        return _made_node(name, values, cpus, sockets, cores, threads, core_spec, state, gres, features)
    except ValueError as error:
        raise where.error("NodeName", str(error)) from None


def _made_node(
    name: str,
    values: Mapping[str, Value],
    cpus: int,
    sockets: int,
    cores: int,
    threads: int,
    core_spec: int,
    state: str,
    gres: dict[str, int],
    features: Value | None,
) -> Node:
    return Node(
        name=name,
        cpus=cpus,
        memory=_required(values["realmemory"], "RealMemory") if "realmemory" in values else 1,
        gres=gres,
        features=frozenset(split_list(features.text)) if features else frozenset(),
        weight=_required(values["weight"], "Weight") if "weight" in values else 1,
        sockets=sockets,
        cores_per_socket=cores,
        threads_per_core=threads,
        core_spec_count=core_spec,
        mem_spec_limit=_required(values["memspeclimit"], "MemSpecLimit") if "memspeclimit" in values else 0,
        state=state.split("+", maxsplit=1)[0],
    )


#: Keys of a PartitionName line in Slurm 22.05 (lower case), and keys of later versions.
PARTITION_KEYS = frozenset(
    {
        "partitionname", "allocnodes", "allowaccounts", "allowgroups", "allowqos", "alternate", "cpubind",
        "defcpupergpu", "defmempercpu", "defmempergpu", "defmempernode", "default", "defaulttime",
        "denyaccounts", "denyqos", "disablerootjobs", "exclusiveuser", "gracetime", "hidden", "lln",
        "maxcpuspernode", "maxmempercpu", "maxmempernode", "maxtime", "maxnodes", "minnodes", "nodes",
        "oversubscribe", "overtimelimit", "preemptmode", "priority", "priorityjobfactor", "prioritytier", "qos",
        "rootonly", "reqresv", "resumetimeout", "selecttypeparameters", "shared", "state", "suspendtime",
        "suspendtimeout", "tresbillingweights", "powerdownonidle", "maxcpuspersocket", "topology",
    }
)  # fmt: skip


def make_partition(
    name: str, node_indices: tuple[int, ...], values: Mapping[str, Value], notes: list[str]
) -> Partition:
    """A partition from a PartitionName line's values (lower-case keys, PartitionName=DEFAULT's merged in)."""
    optional: dict[str, Any] = {}
    for key, field_name in (
        ("defmempercpu", "def_mem_per_cpu"),
        ("defmempernode", "def_mem_per_node"),
        ("maxmempercpu", "max_mem_per_cpu"),
        ("maxmempernode", "max_mem_per_node"),
        ("maxcpuspernode", "max_cpus_per_node"),
        ("maxnodes", "max_nodes"),
    ):
        if key in values:
            optional[field_name] = _integer(values[key], key, unlimited=True)
    max_time = _time(values["maxtime"], "MaxTime") if "maxtime" in values else None
    default_time = _time(values["defaulttime"], "DefaultTime") if "defaulttime" in values else None
    state = values["state"].text.upper() if "state" in values else "UP"
    if state not in PARTITION_STATES:
        raise values["state"].where.error("State", f"{state!r} is not UP, DOWN, DRAIN or INACTIVE")
    sharing = _get(values, "oversubscribe", "shared")
    exclusive = bool(sharing and sharing.text.upper() == "EXCLUSIVE")
    if sharing and sharing.text.upper().split(":")[0] in ("YES", "FORCE"):
        notes.append(f"partition {name}: OverSubscribe={sharing.text} (CPUs shared by jobs) is not modelled")
    priority = _get(values, "priority")
    tier = _get(values, "prioritytier") or priority
    factor = _get(values, "priorityjobfactor") or priority
    over_time = _get(values, "overtimelimit")
    try:
        made = Partition(
            name=name,
            nodes=node_indices,
            max_time=max_time,
            default_time=default_time,
            min_nodes=_required(values["minnodes"], "MinNodes") if "minnodes" in values else 1,
            priority_tier=_required(tier, "PriorityTier") if tier else 1,
            priority_job_factor=_required(factor, "PriorityJobFactor") if factor else 1,
            default=_boolean(values["default"], "Default") if "default" in values else False,
            state=state,
            exclusive=exclusive,
            over_time_limit=_over_time(over_time) if over_time else None,
            lln=_boolean(values["lln"], "LLN") if "lln" in values else False,
        )
    except ValueError as error:
        raise ClusterConfigError(f"partition {name}: {error}") from None
    return replace(made, **optional)


def _over_time(value: Value) -> int:
    minutes = _integer(value, "OverTimeLimit", unlimited=True)
    return -1 if minutes is None else minutes


def select_settings(plugin: Value | None, parameters: Value | None) -> SelectSettings:
    """SelectType and SelectTypeParameters (cons_tres/cons_res without parameters: CR_Core_Memory, as 22.05)."""
    name = plugin.text.strip().lower() if plugin else "select/linear"
    if name not in ("select/cons_tres", "select/cons_res", "select/linear"):
        assert plugin is not None
        raise plugin.where.error("SelectType", f"{plugin.text!r} is not modelled (select/cons_tres, cons_res, linear)")
    words = [word.strip().upper() for word in parameters.text.split(",")] if parameters else []
    units = {"CR_CPU": "cpu", "CR_CPU_MEMORY": "cpu", "CR_CORE": "core", "CR_CORE_MEMORY": "core"}
    units |= {"CR_SOCKET": "socket", "CR_SOCKET_MEMORY": "socket"}
    chosen = [word for word in words if word in units]
    if name == "select/linear":
        return SelectSettings(plugin=name, unit="cpu", memory="CR_MEMORY" in words)
    if len(chosen) > 1:
        assert parameters is not None
        raise parameters.where.error("SelectTypeParameters", f"{' and '.join(chosen)} contradict each other")
    if not words:
        return SelectSettings(plugin=name, unit="core", memory=True)
    if not chosen:
        assert parameters is not None
        raise parameters.where.error(
            "SelectTypeParameters", f"{parameters.text!r} names no CR_CPU, CR_Core or CR_Socket (Slurm refuses it)"
        )
    return SelectSettings(
        plugin=name,
        unit=units[chosen[0]],
        memory=chosen[0].endswith("_MEMORY"),
        lln="CR_LLN" in words,
        one_task_per_core="CR_ONE_TASK_PER_CORE" in words,
    )


MEMORY_KEYS = ("defmempercpu", "defmempernode", "maxmempercpu", "maxmempernode")


def memory_defaults(values: Mapping[str, Value]) -> MemoryDefaults:
    """DefMemPerCPU, DefMemPerNode, MaxMemPerCPU, MaxMemPerNode (MB; UNLIMITED: None)."""
    names = {f.name.replace("_", ""): f.name for f in fields(MemoryDefaults)}
    return MemoryDefaults(**{names[key]: _integer(value, key, unlimited=True) for key, value in values.items()})


#: SchedulerParameters the `slurm` scheduler reads: name -> (settings field, minimum, scale to seconds).
_SCHEDULER_NUMBERS: dict[str, tuple[str, int, int]] = {
    "bf_interval": ("bf_interval", 1, 1),
    "bf_window": ("bf_window", 1, 60),
    "bf_resolution": ("bf_resolution", 1, 1),
    "bf_max_job_test": ("bf_max_job_test", 1, 1),
    "bf_max_job_user": ("bf_max_job_user", 0, 1),
    "bf_max_job_part": ("bf_max_job_part", 0, 1),
    "bf_max_job_start": ("bf_max_job_start", 0, 1),
    "bf_max_time": ("bf_max_time", 1, 1),
    "bf_min_age_reserve": ("bf_min_age_reserve", 0, 1),
    "bf_window_linear": ("bf_window_linear", 1, 1),
    "default_queue_depth": ("default_queue_depth", 0, 1),
    "partition_job_depth": ("partition_job_depth", 0, 1),
    "sched_interval": ("sched_interval", 0, 1),
    "sched_min_interval": ("sched_min_interval", 0, 1),
    "sched_max_job_start": ("sched_max_job_start", 0, 1),
}
_SCHEDULER_FLAGS = {"bf_continue": "bf_continue", "bf_busy_nodes": "bf_busy_nodes"}


def scheduler_parameters(value: Value, notes: list[str]) -> dict[str, Any]:
    """SchedulerSettings fields from a SchedulerParameters list; other parameters kept under `other`."""
    settings: dict[str, Any] = {}
    other: dict[str, str] = {}
    for item in (part.strip() for part in value.text.split(",")):
        if not item:
            continue
        key, has_value, text = item.partition("=")
        key = key.strip().lower()
        if key in _SCHEDULER_FLAGS and not has_value:
            settings[_SCHEDULER_FLAGS[key]] = True
        elif key in _SCHEDULER_NUMBERS:
            field_name, minimum, scale = _SCHEDULER_NUMBERS[key]
            if not text.strip().isdigit() or int(text) < minimum:
                default = getattr(SchedulerSettings(), field_name)
                notes.append(
                    f"{value.where.source} line {value.where.line}: SchedulerParameters {item!r} is invalid; "
                    f"Slurm uses its default ({default if default is None else default // scale})"
                )
                continue
            settings[field_name] = int(text) * scale
        else:
            other[key] = text.strip()
    settings["other"] = other
    return settings


def scheduler_settings(values: Mapping[str, Value], notes: list[str]) -> SchedulerSettings:
    """SchedulerType, PriorityType, SchedulerParameters, OverTimeLimit, KillWait, ResvOverRun, JobRequeue and
    AuthInfo's cred_expire (lower-case keys)."""
    settings: dict[str, Any] = {}
    if "schedulertype" in values:
        settings["scheduler_type"] = values["schedulertype"].text.strip().lower()
    if "prioritytype" in values:
        settings["priority_type"] = values["prioritytype"].text.strip().lower()
    if "schedulerparameters" in values:
        settings |= scheduler_parameters(values["schedulerparameters"], notes)
    if "overtimelimit" in values:
        settings["over_time_limit"] = _integer(values["overtimelimit"], "OverTimeLimit", unlimited=True)
    if "killwait" in values:
        settings["kill_wait"] = _required(values["killwait"], "KillWait")
    if "resvoverrun" in values:
        settings["resv_over_run"] = _integer(values["resvoverrun"], "ResvOverRun", unlimited=True)
    if "jobrequeue" in values:
        settings["job_requeue"] = _required(values["jobrequeue"], "JobRequeue") != 0  # slurmctld: any other is 1
    if "authinfo" in values and (expire := _cred_expire(values["authinfo"], notes)) is not None:
        settings["cred_expire"] = expire
    return replace(SchedulerSettings(), **settings)


def _cred_expire(value: Value, notes: list[str]) -> int | None:
    """AuthInfo's `cred_expire=N` (seconds), as slurm_cred.c reads it: under 5 is refused and the default kept."""
    for option in value.text.split(","):
        key, _, text = option.strip().partition("=")
        if key.strip().lower() == "cred_expire":
            seconds = int(text) if text.strip().isdigit() else -1
            if seconds >= 5:
                return seconds
            invalid = value.where.error("AuthInfo", f"cred_expire={text.strip()} is invalid: Slurm keeps 1200 s")
            notes.append(str(invalid))
    return None


def lower_keys(pairs: list[tuple[str, Value]], known: frozenset[str], line: str) -> dict[str, Value]:
    """A line's key/values by lower-case key; an unknown key raises (Slurm refuses it too)."""
    values: dict[str, Value] = {}
    for key, value in pairs:
        lowered = key.lower()
        if lowered not in known:
            raise value.where.error(key, f"is not a key of a {line} line")
        values[lowered] = value
    return values


def resolve_nodes(
    expression: Value, key: str, lookup: Callable[[str], list[int] | None], all_nodes: int
) -> tuple[int, ...]:
    """Node indices of a Nodes= value (`ALL`, host lists, NodeSet names), ascending."""
    if expression.text.strip().upper() == "ALL":
        return tuple(range(all_nodes))
    chosen: set[int] = set()
    try:
        parts = split_list(expression.text)
    except ValueError as error:
        raise expression.where.error(key, str(error)) from None
    for part in parts:
        named = lookup(part)
        if named is not None:
            chosen.update(named)
            continue
        try:
            names = expand_expression(part)
        except ValueError as error:
            raise expression.where.error(key, str(error)) from None
        for name in names:
            found = lookup(name)
            if found is None:
                raise expression.where.error(key, f"no node {name!r} is defined")
            chosen.update(found)
    return tuple(sorted(chosen))
