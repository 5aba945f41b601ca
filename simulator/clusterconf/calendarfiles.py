"""A site's calendar from the files its Slurm writes: reservations and node events (`simulator.calendar`).

Two commands a site runs::

    scontrol show reservation > reservations.txt        # --oneliner too
    sacctmgr show event --parsable2 start=2024-01-01 > events.txt

Times are the local times these commands print: `timezone` names the zone
of the machine that ran them, as for the sacct trace they go with (both are
Unix seconds once read). Reservations hold whole nodes: a reservation of
cores on shared nodes (`CoreCnt` below its nodes' cores) and recurring
reservations (DAILY, WEEKLY, ...) are read as their one stated occurrence on
whole nodes, and said in the calendar's notes. A node event's state names
what it did: DOWN ends the jobs on the node; DRAIN, FAIL, MAINT, FUTURE and
the power-saving states keep new jobs off and let running ones finish.
slurmctld records a drain when the node has drained, so a node that drained
while busy took no new job for a while before its event begins. Cluster
events (no node) are skipped. Bad input raises `ClusterConfigError` naming
the file, line and field.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kernel.durations import slurm_duration
from kernel.hostlist import expand_hostlist
from simulator.calendar import PURGE_COMP_DEFAULT, Calendar, NodeEvent, Reservation
from simulator.cluster import Cluster
from simulator.clusterconf.sacctmgr import parsable_rows
from simulator.clusterconf.settings import ClusterConfigError, Where

RESERVATIONS_COMMAND = "scontrol show reservation"
EVENTS_COMMAND = "sacctmgr show event --parsable2 start=YYYY-MM-DD"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
#: Flags whose reservation recurs: read as its one stated occurrence.
RECURRING = frozenset({"HOURLY", "DAILY", "WEEKDAY", "WEEKEND", "WEEKLY"})
#: Flags that make a reservation act in ways the model does not follow (scontrol(1)): read as a plain reservation of
#: its nodes from its start to its end, and said. NO_HOLD_JOBS_AFTER_END is modelled on a FLEX reservation, whose
#: jobs slurmctld never tests against its end; on another, a job tested between the end and the purge is held all
#: the same (`job_test_resv`), which the model does not time.
UNMODELLED_FLAGS = {
    "OVERLAP": "its jobs may use the nodes it shares with other reservations but maintenance ones",
    "NO_HOLD_JOBS_AFTER_END": "its jobs still waiting at its end run elsewhere rather than being held",
    "REPLACE": "its busy or down nodes are replaced by idle ones",
    "REPLACE_DOWN": "its down nodes are replaced by idle ones",
    "TIME_FLOAT": "its start moves forward with the clock",
}
#: Flag spellings scontrol takes (and a file written by hand may hold) -> the one it prints.
FLAG_SPELLINGS = {"NO_HOLD_JOBS_AFTER": "NO_HOLD_JOBS_AFTER_END"}
#: Node state words of an event that end the node's jobs; the others (DRAIN, FAIL, ...) only keep new ones off.
DOWN_STATES = frozenset({"DOWN"})
DRAIN_STATES = frozenset(
    {"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "MAINT", "FUTURE", "REBOOT", "REBOOT_REQUESTED",
     "REBOOT_ISSUED", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "POWERING_UP", "NO_RESPOND", "INVALID_REG",
     "PLANNED", "RESERVED"}
)  # fmt: skip
#: Base states that may come with those (IDLE+DRAIN).
BASE_STATES = frozenset({"IDLE", "ALLOCATED", "MIXED", "COMPLETING", "UNKNOWN"})
_PAIR = re.compile(r"(\w+)=(\S*)")


def local_time(text: str, zone: ZoneInfo, where: Where, field: str) -> int:
    """Unix seconds of a local time as Slurm's commands print it (2024-03-01T12:00:00)."""
    try:
        moment = datetime.strptime(text, TIME_FORMAT)
    except ValueError:
        raise where.error(field, f"{text!r} is not a time like 2024-03-01T12:00:00") from None
    return int(moment.replace(tzinfo=zone).timestamp())


def time_zone(name: str) -> ZoneInfo:
    """The zone called `name` (a ClusterConfigError if there is none)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ClusterConfigError(f"unknown time zone {name!r} (e.g. UTC, Europe/Berlin)") from None


def read_calendar(
    cluster: Cluster, reservations: str | Path | None, events: str | Path | None, timezone: str = "UTC"
) -> tuple[Calendar, list[str]]:
    """The calendar of `cluster` from either file or both, and what was read but is not modelled."""
    zone = time_zone(timezone)
    notes: list[str] = []
    held = read_reservations(reservations, cluster, zone, notes) if reservations else ()
    happened = read_node_events(events, cluster, zone) if events else ()
    return Calendar(held, happened), notes


def read_reservations(path: str | Path, cluster: Cluster, zone: ZoneInfo, notes: list[str]) -> tuple[Reservation, ...]:
    """Each reservation of `scontrol show reservation` output (blocks of key=value pairs), in start order."""
    made = [_reservation(block, where, cluster, zone, notes) for where, block in _blocks(Path(path))]
    names = [resv.name for resv in made]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise ClusterConfigError(f"{path}: reservation {twice} appears twice")
    return tuple(sorted(made, key=lambda resv: (resv.start, resv.name)))


def _blocks(path: Path) -> Iterator[tuple[Where, dict[str, str]]]:
    """Each reservation's pairs, with where it begins: a block begins at a line starting with ReservationName=."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise ClusterConfigError(f"{source}: cannot be read ({error.strerror or error})") from None
    block: dict[str, str] | None = None
    where = Where(source)
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("No reservations"):
            continue
        if stripped.startswith("ReservationName="):
            if block is not None:
                yield where, block
            block, where = {}, Where(source, number)
        elif block is None:
            raise ClusterConfigError(
                f"{source} line {number}: expected ReservationName=...; is this `{RESERVATIONS_COMMAND}` output?"
            )
        block.update(_PAIR.findall(stripped))
    if block is not None:
        yield where, block


def _reservation(
    pairs: dict[str, str], where: Where, cluster: Cluster, zone: ZoneInfo, notes: list[str]
) -> Reservation:
    """One reservation block, its nodes resolved against the cluster."""
    for field in ("ReservationName", "StartTime", "EndTime", "Nodes"):
        if not pairs.get(field):
            raise where.error(field, "missing")
    name = pairs["ReservationName"]
    start = local_time(pairs["StartTime"], zone, where, "StartTime")
    end = local_time(pairs["EndTime"], zone, where, "EndTime")
    if end <= start:
        raise where.error("EndTime", f"{pairs['EndTime']} is not after StartTime {pairs['StartTime']}")
    if pairs["Nodes"] == "(null)":
        raise where.error("Nodes", f"reservation {name} holds no nodes (licenses or burst buffers only): not modelled")
    nodes = _node_indices(pairs["Nodes"], cluster, where, "Nodes")
    given = [flag for flag in pairs.get("Flags", "").upper().split(",") if flag and flag != "(NULL)"]
    flags = frozenset(FLAG_SPELLINGS.get(flag, flag) for flag in (flag.split("=")[0] for flag in given))
    if flags & RECURRING:
        notes.append(f"{where.source}: reservation {name} recurs ({', '.join(sorted(flags & RECURRING))}): "
                     "only its stated occurrence is modelled")  # fmt: skip
    notes.extend(_unmodelled(pairs, flags, f"{where.source}: reservation {name}"))
    cores = pairs.get("CoreCnt", "")
    if cores.isdigit() and int(cores) < sum(cluster.nodes[index].cores for index in nodes):
        notes.append(f"{where.source}: reservation {name} holds {cores} cores: modelled as its whole nodes")
    users, accounts = _access_list(pairs.get("Users", "")), _access_list(pairs.get("Accounts", ""))
    if "MAGNETIC" in flags and pairs.get("Groups", "(null)") != "(null)":
        notes.append(f"{where.source}: reservation {name} lets in Groups={pairs['Groups']}: not modelled (MAGNETIC "
                     "attracts only the jobs of its Users and Accounts)")  # fmt: skip
    purge_after = _purge_after(given, where)
    return Reservation(name, start, end, nodes, flags, users, accounts, purge_after)


def _purge_after(flags: list[str], where: Where) -> int | None:
    """PURGE_COMP's idle time in seconds (`PURGE_COMP=00:05:00` as scontrol prints it; `PURGE_COMP` alone: the
    default 5 minutes); None without the flag."""
    given = next((flag for flag in flags if flag.split("=")[0] == "PURGE_COMP"), None)
    if given is None:
        return None
    _, equals, text = given.partition("=")
    if not equals:
        return PURGE_COMP_DEFAULT
    try:
        seconds = slurm_duration(text)
    except ValueError as error:
        raise where.error("Flags", f"PURGE_COMP: {error}") from None
    if seconds is None:
        raise where.error("Flags", f"PURGE_COMP={text}: an idle time is needed, not {text}")
    return seconds


def _access_list(text: str) -> frozenset[str] | None:
    """Users= or Accounts= as scontrol prints it (a comma list, "-name" to deny; "(null)": not given)."""
    return None if text in ("", "(null)") else frozenset(name for name in text.split(",") if name)


def _unmodelled(pairs: dict[str, str], flags: frozenset[str], reservation: str) -> list[str]:
    """What a reservation's flags and MaxStartDelay make it do that the model does not follow, a note each."""
    modelled = {"NO_HOLD_JOBS_AFTER_END"} if "FLEX" in flags else set()
    notes = [
        f"{reservation} has flag {flag} ({what}): modelled as a plain reservation"
        for flag, what in UNMODELLED_FLAGS.items()
        if flag in flags and flag not in modelled
    ]
    delay = pairs.get("MaxStartDelay", "")
    if delay and delay != "(null)":
        notes.append(
            f"{reservation} has MaxStartDelay={delay} (jobs that do not name it may delay its jobs by that much): "
            "not modelled"
        )
    return notes


def _node_indices(text: str, cluster: Cluster, where: Where, field: str) -> tuple[int, ...]:
    """The positions of a host list's nodes in the cluster, ascending."""
    try:
        names = expand_hostlist(text)
    except ValueError as error:
        raise where.error(field, str(error)) from None
    try:
        return tuple(sorted({cluster.node_index(name) for name in names}))
    except KeyError:
        unknown = next(name for name in names if name not in {node.name for node in cluster.nodes})
        raise where.error(field, f"node {unknown} is not in cluster {cluster.name}") from None


def read_node_events(path: str | Path, cluster: Cluster, zone: ZoneInfo) -> tuple[NodeEvent, ...]:
    """Each node's events of `sacctmgr show event --parsable2` output, in start order."""
    source = str(path)
    rows, _ = parsable_rows(Path(path), ("NodeName", "TimeStart", "TimeEnd", "State"), EVENTS_COMMAND)
    events: list[NodeEvent] = []
    for line, row in rows:
        where = Where(source, line)
        if not row["NodeName"].strip():
            continue  # a cluster event: its TRES changed
        start = local_time(row["TimeStart"].strip(), zone, where, "TimeStart")
        ended = row["TimeEnd"].strip()
        end = None if ended in ("Unknown", "None", "") else local_time(ended, zone, where, "TimeEnd")
        if end is not None and end < start:
            raise where.error("TimeEnd", f"{ended} is before TimeStart {row['TimeStart']}")
        state = _event_state(row["State"], where)
        reason = row.get("Reason", "").strip()
        nodes = _node_indices(row["NodeName"].strip(), cluster, where, "NodeName")
        events.extend(NodeEvent(node, start, end, state, reason) for node in nodes)
    return tuple(sorted(events, key=lambda event: (event.start, event.node)))


def _event_state(text: str, where: Where) -> str:
    """`down` if the state has DOWN in it (DOWN, DOWN*, DOWN+DRAIN), else `drain` for a state Slurm has."""
    words = {word.strip("*~#!%$@^-") for word in text.strip().upper().split("+")}
    if words & DOWN_STATES:
        return "down"
    if not words & DRAIN_STATES or words - DRAIN_STATES - BASE_STATES:
        raise where.error("State", f"{text.strip()!r} is not a state that takes a node out of service")
    return "drain"
