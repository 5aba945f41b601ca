"""`tsched trace info`: what a trace holds, and how good its users' own requests are."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernel.errors import TraceError
from predictor.scoring import summarize
from simulator.workloads.trace import Trace, utc_time


def trace_info(trace: Trace) -> dict[str, Any]:
    """What `tsched trace info` reports: size, span, users, skips, and how good the users' own requests are."""
    jobs = trace.jobs
    try:
        size = trace.machine_size()
        procs, source = size.procs, size.source + (" (a guess: give --machine-procs)" if size.guessed else "")
    except TraceError:  # no header size and no jobs: nothing to size the machine by
        procs, source = None, "unknown"
    info: dict[str, Any] = {
        "path": trace.path,
        "records": len(trace.records),
        "jobs": len(jobs),
        "procs": procs,
        "procs_source": source,
        "max_procs": trace.header.max_procs,
        "max_nodes": trace.header.max_nodes,
        "time_zone": trace.header.time_zone_string,
        "users": int(jobs["user"][jobs["user"] >= 0].nunique()),
        "groups": int(jobs["group"][jobs["group"] >= 0].nunique()),
        "skipped": dict(trace.skipped),
        "malformed": dict(trace.malformed),
    }
    if jobs.empty:
        info["span"] = None
        info["requests"] = None
        return info
    first_submit = int(jobs["submit"].min())
    last_end = int(jobs["end"].max())
    span: dict[str, Any] = {
        "first_submit": first_submit,
        "last_end": last_end,
        "days": (last_end - first_submit) / 86400,
    }
    if trace.header.unix_start_time is not None:
        span["start_utc"] = utc_time(trace.header.unix_start_time + first_submit).isoformat()
        span["end_utc"] = utc_time(trace.header.unix_start_time + last_end).isoformat()
    info["span"] = span
    t_req = jobs["t_req"].to_numpy()
    t_act = jobs["t_act"].to_numpy()
    requests = summarize(t_req, t_act, t_req)
    requests["mean_ratio"] = float((t_act / t_req).mean())
    requests["killed_at_request"] = float(np.mean(jobs["run"].to_numpy() >= t_req))
    info["requests"] = requests
    return info


def format_trace_info(info: dict[str, Any]) -> str:
    """`trace_info` as readable lines."""
    out = [
        f"trace      {info['path']}",
        f"records    {info['records']:,} ({info['jobs']:,} replayable jobs)",
        f"machine    {info['procs']} processors, from {info['procs_source']} (MaxProcs {info['max_procs']}, "
        f"MaxNodes {info['max_nodes']})",
    ]
    span = info["span"]
    if span is not None:
        dates = f", {span['start_utc']} to {span['end_utc']}" if "start_utc" in span else ""
        out.append(f"span       {span['days']:.1f} days{dates}")
    out.append(f"users      {info['users']:,} in {info['groups']:,} groups")
    out.append("skipped    " + _reasons(info["skipped"]))
    out.append("malformed  " + _reasons(info["malformed"]))
    requests = info["requests"]
    if requests is not None:
        out.append(
            f"requests   accuracy mean {requests['accuracy_mean']:.3f}, median {requests['accuracy_median']:.3f}; "
            f"mean R = t_act/t_req {requests['mean_ratio']:.3f}; "
            f"{requests['killed_at_request']:.1%} of jobs reached their request"
        )
    return "\n".join(out)


def _reasons(counts: dict[str, int]) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{count:,} {reason}" for reason, count in sorted(counts.items()))
