"""What a Slurm job asked for, from its accounting: TRES strings, ReqMem, NNodes, Partition, QOS, SubmitLine.

`sacct` (22.05) records a job's request as trackable resources:
`ReqTRES=billing=4,cpu=4,gres/gpu=2,mem=8G,node=1` is what was asked (node is
the *minimum* node count), `AllocTRES` what was given; `ReqMem` is the job's
total memory (`4000M`; Slurm 21.08 and older printed it per node or per CPU
as `4Gn` / `2Gc`). Memory in TRES strings is MB unless it carries a unit.

What the accounting cannot tell, `sacct_request` decides as follows (checked
on the project's one-host Slurm, `tests/slurm`):

- nodes: `ReqTRES node=N`; N > 1 is a `-N N` (Slurm only raises the minimum
  when asked), so exactly N; N = 1 may be `-n K` spread over as many nodes as
  the CPUs need (what Slurm does without `-N`), so at least one;
- memory: on one node, per node; on several, per CPU (the total over the
  CPUs), as DefMemPerCPU and `--mem-per-cpu` give it (a `--mem` per node
  shows in the submit line, or as `Mn` in older ReqMem);
- GPUs: `gres/gpu` is the job's total; per node when it splits evenly over
  N fixed nodes (`--gres=gpu:G`), else per job (`--gpus=G`);
- exclusive: given more CPUs than asked, all the CPUs of its nodes.

The job's `SubmitLine` (22.05 keeps the command line, not `#SBATCH` lines of
the script) overrides these guesses with the options it names.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from typing import Any

from kernel.resources import ALL_MEMORY, ResourceRequest

_MEMORY = re.compile(r"(\d+(?:\.\d+)?)([KMGTP]?)", re.IGNORECASE)
_MB_PER_UNIT = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}
_REQ_MEM = re.compile(r"(\d+(?:\.\d+)?)([KMGTP]?)([nc]?)", re.IGNORECASE)
#: TRES whose values are sizes (MB), not counts.
SIZE_TRES = frozenset({"mem", "fs/disk", "vmem", "pages"})


def memory_mb(text: str) -> int:
    """MB in a Slurm size (`8G`, `4000M`, `1.50G`, `512K`; no unit: MB), rounded up. ValueError otherwise."""
    match = _MEMORY.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a memory size (a number with K, M, G, T or P)")
    return int(-(-float(match.group(1)) * _MB_PER_UNIT[match.group(2).upper()] // 1))


def parse_tres(text: str) -> dict[str, int]:
    """A TRES list (`billing=4,cpu=4,gres/gpu:a100=2,mem=8G,node=1`) as counts, sizes in MB.

    Empty text is an empty dict; ValueError names the malformed entry.
    """
    counts: dict[str, int] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, equals, value = entry.partition("=")
        if not equals or not name:
            raise ValueError(f"{entry!r} is not NAME=COUNT")
        if name in SIZE_TRES or name.startswith("mem"):
            counts[name] = memory_mb(value)
        elif value.isdigit():
            counts[name] = int(value)
        else:
            raise ValueError(f"{entry!r}: {value!r} is not a count")
    return counts


def tres_gpus(tres: dict[str, int]) -> tuple[int, str | None]:
    """(GPUs, their type if one type is named) of a parsed TRES list."""
    total = tres.get("gres/gpu", 0)
    types = [name.split(":", 1)[1] for name in tres if name.startswith("gres/gpu:")]
    if not total:
        total = sum(count for name, count in tres.items() if name.startswith("gres/gpu:"))
    return total, types[0] if len(types) == 1 else None


def parse_req_mem(text: str) -> tuple[int, str] | None:
    """(MB, per) of a ReqMem value: per is "job" (22.05: `4000M`), "node" (`4Gn`) or "cpu" (`2Gc`); None if empty."""
    text = text.strip()
    if not text or text == "0":
        return None
    match = _REQ_MEM.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not a ReqMem value (4000M, or 4Gn / 2Gc from Slurm 21.08 and older)")
    megabytes = int(-(-float(match.group(1)) * _MB_PER_UNIT[match.group(2).upper()] // 1))
    return megabytes, {"": "job", "n": "node", "c": "cpu"}[match.group(3).lower()]


def _node_range(text: str) -> tuple[int, int | None]:
    low, _, high = text.partition("-")
    if not low.isdigit() or (high and not high.isdigit()):
        raise ValueError(f"--nodes={text!r} is not a node count or range MIN[-MAX]")
    return int(low), int(high) if high else int(low)


def _gres_gpus(spec: str) -> tuple[int, str | None]:
    """(GPUs per node, type) of a --gres value (`gpu:2`, `gpu:a100:2`, `gpu`)."""
    for entry in spec.split(","):
        parts = entry.split(":")
        if parts[0] == "gpu":
            count = int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
            gpu_type = parts[1] if len(parts) == 3 or (len(parts) == 2 and not parts[1].isdigit()) else None
            return count, gpu_type
    return 0, None


def _typed_count(value: str) -> tuple[int, str | None]:
    """(count, type) of a --gpus value (`3`, `a100:3`)."""
    gpu_type, _, count = value.rpartition(":")
    if not count.isdigit():
        raise ValueError(f"{value!r} is not [TYPE:]COUNT")
    return int(count), gpu_type or None


#: sbatch options (long form) and the short ones that mean the same.
_SHORT = {"-N": "--nodes", "-n": "--ntasks", "-c": "--cpus-per-task", "-p": "--partition", "-q": "--qos"}
_OPTIONS = {
    "--nodes",
    "--ntasks",
    "--cpus-per-task",
    "--ntasks-per-node",
    "--mem",
    "--mem-per-cpu",
    "--gres",
    "--gpus",
    "-G",
    "--gpus-per-node",
    "--gpus-per-task",
    "--partition",
    "--reservation",
    "--qos",
}


def submit_options(line: str) -> dict[str, str]:
    """The resource options of an `sbatch`/`srun`/`salloc` command line, long names (`-N 2` -> --nodes: 2).

    Options after the script name (or `--wrap`'s command) are the job's own and not read.
    """
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    options: dict[str, str] = {}
    position = 1
    while position < len(words):
        word = words[position]
        position += 1
        if word == "--wrap" or not word.startswith("-"):
            break
        if word == "--exclusive" or word.startswith("--exclusive="):
            options["--exclusive"] = word.partition("=")[2] or "yes"
            continue
        name, equals, value = word.partition("=")
        if not equals and name[:2] in _SHORT and len(name) > 2:  # -N2
            name, value, equals = name[:2], name[2:], "="
        name = "--gpus" if name == "-G" else _SHORT.get(name, name)
        if name not in _OPTIONS:
            continue
        if not equals:
            if position >= len(words):
                break
            value = words[position]
            position += 1
        options[name] = value
    return options


def request_from_options(options: dict[str, str], base: ResourceRequest) -> ResourceRequest:
    """`base` with what the command line's options say instead (ValueError on a malformed value)."""
    changes: dict[str, Any] = {}
    if "--nodes" in options:
        changes["nodes"], changes["max_nodes"] = _node_range(options["--nodes"])
    for option, field_name in (
        ("--ntasks", "tasks"),
        ("--cpus-per-task", "cpus_per_task"),
        ("--ntasks-per-node", "tasks_per_node"),
    ):
        if option in options:
            if not options[option].isdigit():
                raise ValueError(f"{option}={options[option]!r} is not a whole number")
            changes[field_name] = int(options[option])
    if "--ntasks" in options and "--cpus-per-task" not in options:
        changes["cpus_per_task"] = 1
    if "--mem" in options:
        changes["mem_per_node"], changes["mem_per_cpu"] = memory_mb(options["--mem"]), None
    if "--mem-per-cpu" in options:
        changes["mem_per_cpu"], changes["mem_per_node"] = memory_mb(options["--mem-per-cpu"]), None
    gpus = _gpu_options(options)
    if gpus:
        changes |= {"gpus": None, "gpus_per_node": None, "gpus_per_task": None} | gpus
    if "--partition" in options:
        changes["partitions"] = tuple(part for part in options["--partition"].split(",") if part)
    if "--qos" in options:
        changes["qos"] = options["--qos"]
    if "--reservation" in options:  # sacct's Reservation is empty for some jobs that ran in one (seen on 22.05)
        changes["reservation"] = options["--reservation"] or None
    if "--exclusive" in options:
        changes["exclusive"] = True
    return replace(base, **changes)


def _gpu_options(options: dict[str, str]) -> dict[str, Any]:
    if "--gres" in options:
        count, gpu_type = _gres_gpus(options["--gres"])
        return {"gpus_per_node": count, "gpu_type": gpu_type} if count else {}
    for option, field_name in (
        ("--gpus", "gpus"),
        ("--gpus-per-node", "gpus_per_node"),
        ("--gpus-per-task", "gpus_per_task"),
    ):
        if option in options:
            count, gpu_type = _typed_count(options[option])
            return {field_name: count, "gpu_type": gpu_type}
    return {}


def sacct_request(
    req_tres: str,
    *,
    alloc_tres: str = "",
    req_mem: str = "",
    partition: str = "",
    qos: str = "",
    reservation: str = "",
    node_cpus: int | None = None,
    submit_line: str = "",
) -> ResourceRequest:
    """The request of one sacct line (see the module docstring for what is guessed and how).

    `node_cpus` is the CPU count of the nodes the job ran on (from NodeList and
    the cluster), to tell an exclusive job from one given CPUs in whole cores.
    ValueError names the field that is malformed.
    """
    asked, given = _tres_field(req_tres, "ReqTRES"), _tres_field(alloc_tres, "AllocTRES")
    cpus = asked.get("cpu") or given.get("cpu") or 1
    nodes = asked.get("node") or 1
    spread = given.get("node", nodes)
    fixed = nodes > 1
    memory = asked.get("mem")
    per = "job"
    if memory is None and req_mem:
        parsed = parse_req_mem(req_mem)
        if parsed:
            memory, per = parsed
    request = replace(
        ResourceRequest(
            nodes=nodes,
            max_nodes=nodes if fixed else None,
            tasks=cpus,
            partitions=tuple(part for part in partition.split(",") if part),
            qos=qos or None,
            exclusive=_exclusive(cpus, given.get("cpu"), node_cpus),
            reservation=reservation or None,
        ),
        **_memory_fields(memory, per, cpus, nodes == spread == 1),
        **_gpu_fields(asked or given, nodes, fixed or spread == 1),
    )
    if submit_line:
        try:
            request = request_from_options(submit_options(submit_line), request)
        except ValueError as error:
            raise ValueError(f"SubmitLine: {error}") from None
    return request


def _tres_field(text: str, name: str) -> dict[str, int]:
    try:
        return parse_tres(text)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None


def _exclusive(asked: int, given: int | None, node_cpus: int | None) -> bool:
    if given is None or given <= asked:
        return False
    return node_cpus is None or given == node_cpus


def _memory_fields(memory: int | None, per: str, cpus: int, one_node: bool) -> dict[str, Any]:
    if memory is None:
        return {}
    if per == "cpu":
        return {"mem_per_cpu": memory}
    if per == "node" or one_node:
        return {"mem_per_node": memory if memory else ALL_MEMORY}
    return {"mem_per_cpu": max(-(-memory // cpus), 1)}


def _gpu_fields(tres: dict[str, int], nodes: int, fixed: bool) -> dict[str, Any]:
    gpus, gpu_type = tres_gpus(tres)
    if not gpus:
        return {}
    if fixed and gpus % nodes == 0:
        return {"gpus_per_node": gpus // nodes, "gpu_type": gpu_type}
    return {"gpus": gpus, "gpu_type": gpu_type}
