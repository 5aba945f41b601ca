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
from pathlib import Path

from kernel.errors import TraceError
from kernel.resources import ResourceRequest
from simulator.cluster import Cluster
from simulator.clusterconf.hostlist import expand_hostlist
from simulator.workloads.trace import read_trace_bytes
from simulator.workloads.tres import sacct_request

#: Fields a request is read from; only ReqTRES (and the job id) must be there.
REQUEST_FIELDS = ("ReqTRES", "AllocTRES", "ReqMem", "Partition", "QOS", "SubmitLine", "NodeList")


def read_sacct_requests(path: str | Path, cluster: Cluster | None = None) -> dict[int, ResourceRequest]:
    """Job id -> request, for every job allocation of the dump (TraceError naming the line and field)."""
    source = str(path)
    text = read_trace_bytes(Path(path), source).decode("utf-8", errors="replace")
    rows = csv.DictReader(io.StringIO(text), delimiter="|", quoting=csv.QUOTE_NONE)
    missing = [name for name in ("JobIDRaw", "ReqTRES") if name not in (rows.fieldnames or ())]
    if missing:
        raise TraceError(f"{source}: line 1: no {' or '.join(missing)} field: the requests cannot be read")
    requests: dict[int, ResourceRequest] = {}
    for row in rows:
        job = row["JobIDRaw"] or ""
        if not job.isdigit() or not row.get("AllocTRES", "x"):
            continue  # a job step, or a job that never got an allocation
        fields = {name: row.get(name) or "" for name in REQUEST_FIELDS}
        try:
            requests[int(job)] = sacct_request(
                fields["ReqTRES"],
                alloc_tres=fields["AllocTRES"],
                req_mem=fields["ReqMem"],
                partition=fields["Partition"],
                qos=fields["QOS"],
                node_cpus=_node_cpus(fields["NodeList"], cluster),
                submit_line=fields["SubmitLine"],
            )
        except ValueError as error:
            raise TraceError(f"{source}: line {rows.line_num}: job {job}: {error}") from None
    return requests


def _node_cpus(node_list: str, cluster: Cluster | None) -> int | None:
    """The CPUs of the nodes a job ran on, if the cluster knows them all."""
    if cluster is None or not node_list or node_list == "None assigned":
        return None
    try:
        return sum(cluster.nodes[cluster.node_index(name)].cpus for name in expand_hostlist(node_list))
    except (KeyError, ValueError):
        return None
