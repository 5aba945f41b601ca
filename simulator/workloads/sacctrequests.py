"""What each job of a `sacct --parsable2` dump asked for: nodes, CPUs, memory, GPUs, partition, QOS.

`read_sacct` turns a dump into SWF records, which know a processor count;
the `slurm` scheduler needs the whole request. This reads it from the same
file, by job id (JobIDRaw; the last attempt of a requeued job, as the trace
keeps it; job steps left out), with `simulator.workloads.tres.sacct_request`:
ReqTRES, AllocTRES, ReqMem, Partition, QOS and, when the dump has it,
SubmitLine. With the cluster, NodeList tells an exclusive job (given all
the CPUs of its nodes) from one given whole cores.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from kernel.errors import TraceError
from kernel.hostlist import expand_hostlist
from kernel.resources import ResourceRequest
from simulator.cluster import Cluster
from simulator.workloads.trace import read_trace_bytes
from simulator.workloads.tres import sacct_request

#: Fields a request is read from; only ReqTRES (and the job id) must be there.
REQUEST_FIELDS = ("ReqTRES", "AllocTRES", "ReqMem", "Partition", "QOS", "Reservation", "SubmitLine", "NodeList")


def _allocations(path: str | Path, needed: tuple[str, ...], what: str) -> Iterator[tuple[int, int, dict[str, str]]]:
    """(line, job id, fields) of every job allocation of the dump; job steps and jobs never allocated left out.
    A dump without a field of `needed` is an error saying that `what` cannot be read."""
    source = str(path)
    text = read_trace_bytes(Path(path), source).decode("utf-8", errors="replace")
    rows = csv.DictReader(io.StringIO(text), delimiter="|", quoting=csv.QUOTE_NONE)
    missing = [name for name in ("JobIDRaw", *needed) if name not in (rows.fieldnames or ())]
    if missing:
        raise TraceError(f"{source}: line 1: no {' or '.join(missing)} field: {what} cannot be read")
    for row in rows:
        job = row["JobIDRaw"] or ""
        if job.isdigit() and row.get("AllocTRES", "x"):
            yield rows.line_num, int(job), {name: row.get(name) or "" for name in REQUEST_FIELDS}


def read_sacct_nodes(path: str | Path, cluster: Cluster) -> dict[int, tuple[int, ...]]:
    """Job id -> the indices of the cluster's nodes it ran on (NodeList), for the jobs that ran on known nodes."""
    nodes: dict[int, tuple[int, ...]] = {}
    for _, job, fields in _allocations(path, ("NodeList",), "where the jobs ran"):
        try:
            nodes[job] = tuple(cluster.node_index(name) for name in expand_hostlist(fields["NodeList"]))
        except (KeyError, ValueError):
            continue  # "None assigned", or nodes the cluster lacks: the job says nothing about its nodes
    return nodes


def read_sacct_requests(path: str | Path, cluster: Cluster | None = None) -> dict[int, ResourceRequest]:
    """Job id -> request, for every job allocation of the dump (TraceError naming the line and field)."""
    source = str(path)
    requests: dict[int, ResourceRequest] = {}
    for line, job, fields in _allocations(path, ("ReqTRES",), "the requests"):
        try:
            requests[job] = sacct_request(
                fields["ReqTRES"],
                alloc_tres=fields["AllocTRES"],
                req_mem=fields["ReqMem"],
                partition=fields["Partition"],
                qos=fields["QOS"],
                reservation=fields["Reservation"],
                node_cpus=_node_cpus(fields["NodeList"], cluster),
                submit_line=fields["SubmitLine"],
            )
        except ValueError as error:
            raise TraceError(f"{source}: line {line}: job {job}: {error}") from None
    return requests


def _node_cpus(node_list: str, cluster: Cluster | None) -> int | None:
    """The CPUs of the nodes a job ran on, if the cluster knows them all."""
    if cluster is None or not node_list or node_list == "None assigned":
        return None
    try:
        return sum(cluster.nodes[cluster.node_index(name)].cpus for name in expand_hostlist(node_list))
    except (KeyError, ValueError):
        return None
