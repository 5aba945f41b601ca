"""What a PBS job asked for, from its accounting record's `Resource_List.*` keys.

PBS Pro / OpenPBS ask in chunks: `select=2:ncpus=8:mem=16gb:ngpus=1+1:ncpus=4`
is two chunks of 8 CPUs, 16 GB and a GPU each and one chunk of 4 CPUs; a
chunk lives on one host, and `place` says how chunks share hosts
(`free`, `pack`: all on one host, `scatter`: one per host; `excl`: hosts to
the job alone). Torque asks in nodes: `nodes=2:ppn=8:gpus=1`. Job-wide keys
are `ncpus`, `mem`, `ngpus`, `nodect`. Sizes are PBS's: a number with an
optional k/m/g/t/p and b (bytes) or w (8-byte words), bytes without a unit
(OpenPBS's `to_size`, `src/lib/Libattr/attr_fn_size.c`).

As a Slurm-shaped `ResourceRequest`: a chunk is a task of `ncpus` CPUs
(its memory per CPU, its GPUs per task); chunks of different shapes become
one-CPU tasks with the memory and GPUs spread over all CPUs. Torque's nodes
are nodes with `ppn` tasks each.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kernel.resources import ResourceRequest

_SIZE = re.compile(r"(\d+)([kmgtp]?)([bw]?)", re.IGNORECASE)
_SHIFT = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50}
WORD_BYTES = 8


def size_mb(text: str) -> int:
    """MB (rounded up) in a PBS size: `16gb`, `1048576kb`, `8w`, `512` (bytes). ValueError otherwise."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a PBS size (a number with kb, mb, gb, tb, pb, b or w)")
    number, unit, kind = int(match.group(1)), match.group(2).lower(), match.group(3).lower()
    size_bytes = (number << _SHIFT[unit]) * (WORD_BYTES if kind == "w" else 1)
    return -(-size_bytes // 2**20)


@dataclass(frozen=True, slots=True)
class Chunk:
    """`count` alike chunks of a select statement (or Torque nodes of a nodes= spec)."""

    count: int
    ncpus: int = 1
    mem: int | None = None  # MB per chunk
    ngpus: int = 0
    host: str | None = None  # a named host (Torque `nodes=n5`)


def _chunk(spec: str, cpu_key: str, gpu_key: str) -> Chunk:
    head, *resources = spec.split(":")
    count, host = 1, None
    if head.isdigit():
        count = int(head)
    elif "=" in head:
        resources = [head, *resources]
    elif head:
        host = head
    values: dict[str, str] = {}
    for resource in resources:
        key, equals, value = resource.partition("=")
        if not equals or not key:
            raise ValueError(f"{resource!r} in {spec!r} is not KEY=VALUE")
        values[key.strip().lower()] = value.strip()
    for key in (cpu_key, gpu_key):
        if key in values and not values[key].isdigit():
            raise ValueError(f"{key}={values[key]!r} in {spec!r} is not a whole number")
    if count < 1 or int(values.get(cpu_key, "1")) < 1:
        raise ValueError(f"{spec!r} asks for no CPU")
    return Chunk(
        count=count,
        ncpus=int(values.get(cpu_key, "1")),
        mem=size_mb(values["mem"]) if "mem" in values else None,
        ngpus=int(values.get(gpu_key, "0")),
        host=host,
    )


def parse_select(text: str) -> list[Chunk]:
    """The chunks of a PBS Pro select statement (`2:ncpus=8:mem=16gb:ngpus=1+1:ncpus=4`)."""
    return [_chunk(part, "ncpus", "ngpus") for part in text.split("+") if part.strip()]


def parse_nodes(text: str) -> list[Chunk]:
    """The node groups of a Torque nodes= spec (`2:ppn=8:gpus=1+n5:ppn=4`, `4`)."""
    return [_chunk(part, "ppn", "gpus") for part in text.split("+") if part.strip()]


def _from_chunks(chunks: list[Chunk], place: str) -> dict[str, Any]:
    """Request fields of a select statement."""
    words = set(place.lower().replace("=", ":").split(":")) if place else set()
    count = sum(chunk.count for chunk in chunks)
    fields: dict[str, Any] = {"exclusive": bool(words & {"excl", "exclhost"})}
    if "scatter" in words or "vscatter" in words:
        fields |= {"nodes": count, "max_nodes": count}
    elif "pack" in words:
        fields |= {"nodes": 1, "max_nodes": 1}
    shape = {(chunk.ncpus, chunk.mem, chunk.ngpus) for chunk in chunks}
    if len(shape) == 1:
        first = chunks[0]
        fields |= {"tasks": count, "cpus_per_task": first.ncpus}
        if first.mem is not None:
            fields["mem_per_cpu"] = max(-(-first.mem // first.ncpus), 1)
        if first.ngpus:
            fields["gpus_per_task"] = first.ngpus
        return fields
    cpus = sum(chunk.count * chunk.ncpus for chunk in chunks)
    memory = sum(chunk.count * chunk.mem for chunk in chunks if chunk.mem is not None)
    gpus = sum(chunk.count * chunk.ngpus for chunk in chunks)
    fields["tasks"] = cpus
    if memory:
        fields["mem_per_cpu"] = max(-(-memory // cpus), 1)
    if gpus:
        fields["gpus"] = gpus
    return fields


def _from_nodes(groups: list[Chunk]) -> dict[str, Any]:
    """Request fields of a Torque nodes= spec: nodes, with ppn tasks each."""
    nodes = sum(group.count for group in groups)
    fields: dict[str, Any] = {"nodes": nodes, "max_nodes": nodes}
    if len({(group.ncpus, group.ngpus) for group in groups}) == 1:
        fields["tasks_per_node"] = groups[0].ncpus
        if groups[0].ngpus:
            fields["gpus_per_node"] = groups[0].ngpus
    else:
        fields["tasks"] = sum(group.count * group.ncpus for group in groups)
        gpus = sum(group.count * group.ngpus for group in groups)
        if gpus:
            fields["gpus"] = gpus
    return fields


def pbs_request(resources: Mapping[str, str], queue: str = "") -> ResourceRequest:
    """A job's request from its `Resource_List.KEY=VALUE` items (keys without the prefix).

    select (with place) first, else Torque's nodes, else ncpus; job-wide mem
    and ngpus fill in what the chunks do not say. ValueError names the key.
    """
    fields: dict[str, Any] = {}
    try:
        if resources.get("select"):
            fields = _from_chunks(parse_select(resources["select"]), resources.get("place", ""))
        elif resources.get("nodes"):
            fields = _from_nodes(parse_nodes(resources["nodes"]))
            if "excl" in resources.get("place", "").lower():
                fields["exclusive"] = True
    except ValueError as error:
        raise ValueError(f"Resource_List.{'select' if resources.get('select') else 'nodes'}: {error}") from None
    _job_wide(resources, fields)
    if queue:
        fields["partitions"] = (queue,)
    return replace(ResourceRequest(), **fields)


def _job_wide(resources: Mapping[str, str], fields: dict[str, Any]) -> None:
    """ncpus, mem (pmem) and ngpus of the whole job, where the chunks left them out."""
    for key in ("ncpus", "ngpus"):
        if key in resources and not resources[key].isdigit():
            raise ValueError(f"Resource_List.{key}={resources[key]!r} is not a whole number")
    if "tasks" not in fields and "tasks_per_node" not in fields:
        fields["tasks"] = int(resources.get("ncpus", "1")) or 1
    shape = {key: fields[key] for key in ("tasks", "cpus_per_task", "nodes", "tasks_per_node") if key in fields}
    cpus = replace(ResourceRequest(), **shape).cpus
    for key in ("mem", "pmem"):
        if key in resources and "mem_per_cpu" not in fields:
            try:
                megabytes = size_mb(resources[key])
            except ValueError as error:
                raise ValueError(f"Resource_List.{key}: {error}") from None
            fields["mem_per_cpu"] = megabytes if key == "pmem" else max(-(-megabytes // cpus), 1)
    gpus = int(resources.get("ngpus", "0"))
    if gpus and not {"gpus", "gpus_per_task", "gpus_per_node"} & set(fields):
        fields["gpus"] = gpus
