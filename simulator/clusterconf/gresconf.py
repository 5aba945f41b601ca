"""A gres.conf checked against the nodes slurm.conf defines.

slurm.conf's `Gres=` is what the scheduler counts; gres.conf says where each
device is. When gres.conf gives a node a different count, Slurm marks the
node invalid at registration: the site would see it, and the reader says so
in the cluster's notes. Lines naming no node apply to every node; nodes
whose devices are found by `AutoDetect` are not checked.
"""

from __future__ import annotations

from pathlib import Path

from kernel.hostlist import expand_hostlist, split_list
from simulator.cluster import Node
from simulator.clusterconf.conffile import read_lines
from simulator.clusterconf.settings import Value, lower_keys, parse_gres

GRES_KEYS = frozenset(
    {"autodetect", "count", "cores", "file", "flags", "links", "multiplefiles", "name", "nodename", "type"}
)


def _count(values: dict[str, Value]) -> int:
    """Devices a line describes: Count=, else the files File= (or MultipleFiles=) names, else one."""
    if "count" in values:
        try:
            return parse_gres(f"x:{values['count'].text}")["x"]
        except ValueError:
            raise values["count"].where.error("Count", f"{values['count'].text!r} is not a count") from None
    if "file" in values:
        try:
            return sum(len(expand_hostlist(part)) for part in split_list(values["file"].text))
        except ValueError as error:
            raise values["file"].where.error("File", str(error)) from None
    return 1


def check_gres_conf(path: Path, nodes: list[Node]) -> list[str]:
    """Notes on where gres.conf and slurm.conf disagree (ClusterConfigError if gres.conf is malformed)."""
    known = {node.name for node in nodes}
    counts: dict[str, dict[str, int]] = {}
    detected: set[str] = set()
    notes: list[str] = []
    for line in read_lines(path):
        values = lower_keys(line.pairs, GRES_KEYS, "gres.conf")
        names = sorted(known)
        if "nodename" in values:
            try:
                names = expand_hostlist(values["nodename"].text)
            except ValueError as error:
                raise values["nodename"].where.error("NodeName", str(error)) from None
            unknown = [name for name in names if name not in known]
            if unknown:
                notes.append(f"{path} line {line.where.line}: nodes {', '.join(unknown)} are not in slurm.conf")
        if "autodetect" in values and values["autodetect"].text.lower() != "off":
            detected.update(names)
        if "name" not in values:
            continue
        gres = values["name"].text
        for name in names:
            per_node = counts.setdefault(name, {})
            per_node[gres] = per_node.get(gres, 0) + _count(values)
    for node in nodes:
        if node.name in detected or node.name not in counts:
            continue
        for gres, count in counts[node.name].items():
            configured = node.gres.get(gres, 0)
            if configured != count:
                notes.append(
                    f"node {node.name}: slurm.conf gives {gres}:{configured}, {path} {count}: "
                    "Slurm marks such a node invalid when it registers"
                )
    return notes
