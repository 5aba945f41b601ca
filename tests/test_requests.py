"""Job requests: the typed request, Slurm's TRES strings, ReqMem and submit lines, PBS's Resource_List."""

from __future__ import annotations

import pytest

from kernel.resources import ALL_MEMORY, ResourceRequest
from simulator.workloads.pbsresources import Chunk, parse_nodes, parse_select, pbs_request, size_mb
from simulator.workloads.tres import (
    memory_mb,
    parse_req_mem,
    parse_tres,
    sacct_request,
    submit_options,
    tres_gpus,
)


def test_a_request_counts_tasks_cpus_and_gpus():
    assert ResourceRequest().cpus == 1 and ResourceRequest.processors(16).cpus == 16
    assert ResourceRequest(nodes=2, tasks_per_node=4, cpus_per_task=2).cpus == 16
    assert ResourceRequest(nodes=3).task_count == 3
    assert ResourceRequest(nodes=2, gpus_per_node=2).total_gpus == 4
    assert ResourceRequest(tasks=3, gpus_per_task=1).total_gpus == 3
    assert ResourceRequest(gpus=5).total_gpus == 5


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tasks": 0}, "tasks must be at least 1"),
        ({"mem_per_node": 10, "mem_per_cpu": 1}, "not both"),
        ({"gpus": 1, "gpus_per_node": 1}, "not several"),
        ({"nodes": 3, "max_nodes": 2}, "below nodes"),
        ({"cpus_per_task": 0}, "cpus_per_task"),
    ],
)
def test_a_request_refuses_contradictions(fields, message):
    with pytest.raises(ValueError, match=message):
        ResourceRequest(**fields)


def test_tres_strings():
    assert parse_tres("billing=4,cpu=4,gres/gpu=2,mem=8G,node=1") == {
        "billing": 4,
        "cpu": 4,
        "gres/gpu": 2,
        "mem": 8192,
        "node": 1,
    }
    assert parse_tres("cpu=2,mem=1.50G,gres/gpu:a100=1,gres/gpu=1,energy=10") == {
        "cpu": 2,
        "mem": 1536,
        "gres/gpu:a100": 1,
        "gres/gpu": 1,
        "energy": 10,
    }
    assert parse_tres("") == {}
    assert tres_gpus(parse_tres("gres/gpu:a100=2,gres/gpu=2")) == (2, "a100")
    assert tres_gpus(parse_tres("gres/gpu:a100=2")) == (2, "a100")
    assert [memory_mb(text) for text in ("4000M", "4000", "2G", "512K")] == [4000, 4000, 2048, 1]
    for bad in ("cpu", "cpu=x", "mem=lots"):
        with pytest.raises(ValueError, match=r"cpu|mem"):
            parse_tres(bad)


def test_req_mem_in_22_05_and_older_formats():
    assert parse_req_mem("4000M") == (4000, "job")
    assert parse_req_mem("4Gn") == (4096, "node")
    assert parse_req_mem("2Gc") == (2048, "cpu")
    assert parse_req_mem("") is None and parse_req_mem("0") is None
    with pytest.raises(ValueError, match="ReqMem"):
        parse_req_mem("4Gx")


# sacct lines of the project's one-host Slurm (4 nodes x 8 CPUs, 16000 MB, GPUs on two, DefMemPerCPU=1000):
# (ReqTRES, AllocTRES, ReqMem, SubmitLine options) and what the job asked for.
LIVE = [
    ("billing=4,cpu=4,mem=4000M,node=1", "billing=4,cpu=4,mem=4000M,node=1", "4000M", "-n 4"),
    ("billing=12,cpu=12,mem=12000M,node=1", "billing=12,cpu=12,mem=12000M,node=2", "12000M", "-n 12"),
    ("billing=4,cpu=4,mem=4000M,node=2", "billing=4,cpu=4,mem=4000M,node=2", "4000M", "-N 2 -n 4"),
    ("billing=3,cpu=3,mem=7500M,node=1", "billing=3,cpu=3,mem=7500M,node=1", "7500M", "-n 3 --mem-per-cpu=2500"),
    ("billing=1,cpu=1,mem=1000M,node=1", "billing=8,cpu=8,mem=8000M,node=1", "1000M", "--exclusive -n 1"),
    (
        "billing=2,cpu=2,gres/gpu=3,mem=2000M,node=1",
        "billing=2,cpu=2,gres/gpu=3,mem=2000M,node=2",
        "2000M",
        "-p gpu --gpus=3 -n 2",
    ),
    (
        "billing=4,cpu=4,gres/gpu=4,mem=16384M,node=2",
        "billing=4,cpu=4,gres/gpu=4,mem=16384M,node=2",
        "16384M",
        "-p gpu -N 2 --gres=gpu:2 --mem=8G -n 4",
    ),
    ("billing=6,cpu=6,mem=6000M,node=1", "billing=6,cpu=6,mem=6000M,node=2", "6000M", "-n 6 -N 1-3"),
]


def test_sacct_requests_guessed_from_tres():
    guessed = [sacct_request(req, alloc_tres=alloc, req_mem=mem) for req, alloc, mem, _ in LIVE]
    assert guessed[0] == ResourceRequest(nodes=1, tasks=4, mem_per_node=4000)
    assert guessed[1] == ResourceRequest(nodes=1, tasks=12, mem_per_cpu=1000)  # spread over two nodes
    assert guessed[2] == ResourceRequest(nodes=2, max_nodes=2, tasks=4, mem_per_cpu=1000)
    assert guessed[3] == ResourceRequest(nodes=1, tasks=3, mem_per_node=7500)
    assert guessed[4] == ResourceRequest(nodes=1, tasks=1, mem_per_node=1000, exclusive=True)
    assert guessed[5] == ResourceRequest(nodes=1, tasks=2, mem_per_cpu=1000, gpus=3)
    assert guessed[6] == ResourceRequest(nodes=2, max_nodes=2, tasks=4, mem_per_cpu=4096, gpus_per_node=2)
    assert guessed[7] == ResourceRequest(nodes=1, tasks=6, mem_per_cpu=1000)


def test_the_submit_line_overrides_the_guesses():
    told = [
        sacct_request(req, alloc_tres=alloc, req_mem=mem, submit_line=f"sbatch --parsable {options} --wrap 'sleep 9'")
        for req, alloc, mem, options in LIVE
    ]
    assert told[3] == ResourceRequest(nodes=1, tasks=3, mem_per_cpu=2500)
    assert told[5] == ResourceRequest(nodes=1, tasks=2, mem_per_cpu=1000, gpus=3, partitions=("gpu",))
    assert told[7] == ResourceRequest(nodes=1, max_nodes=3, tasks=6, mem_per_cpu=1000)
    assert told[4].exclusive
    assert told[6] == ResourceRequest(
        nodes=2, max_nodes=2, tasks=4, mem_per_node=8192, gpus_per_node=2, partitions=("gpu",)
    )


def test_submit_options():
    line = "sbatch -N2 -n 8 -c2 --mem=4G --gres=gpu:a100:1 -p gpu,cpu --qos=high --exclusive job.sh -n 99"
    assert submit_options(line) == {
        "--nodes": "2",
        "--ntasks": "8",
        "--cpus-per-task": "2",
        "--mem": "4G",
        "--gres": "gpu:a100:1",
        "--partition": "gpu,cpu",
        "--qos": "high",
        "--exclusive": "yes",
    }
    request = sacct_request("cpu=16,node=2", submit_line=line)
    assert (request.nodes, request.max_nodes, request.tasks, request.cpus_per_task) == (2, 2, 8, 2)
    assert (request.mem_per_node, request.gpus_per_node, request.gpu_type) == (4096, 1, "a100")
    assert (request.partitions, request.qos, request.exclusive) == (("gpu", "cpu"), "high", True)
    assert sacct_request("cpu=4", submit_line="sbatch -G a100:2 x").gpus == 2
    assert sacct_request("cpu=4", submit_line="sbatch --gpus-per-task=1 x").gpus_per_task == 1


def test_sacct_request_errors_name_the_field():
    with pytest.raises(ValueError, match="ReqTRES"):
        sacct_request("cpu=four")
    with pytest.raises(ValueError, match="AllocTRES"):
        sacct_request("cpu=4", alloc_tres="node")
    with pytest.raises(ValueError, match="--nodes"):
        sacct_request("cpu=4", submit_line="sbatch --nodes=lots x")


def test_a_job_given_a_whole_node_memory_asked_for_it():
    assert sacct_request("cpu=1,mem=0,node=1", req_mem="0Mn").mem_per_node == ALL_MEMORY
    assert sacct_request("cpu=2,node=1", alloc_tres="cpu=4,node=1", node_cpus=8).exclusive is False
    assert sacct_request("cpu=2,node=1", alloc_tres="cpu=8,node=1", node_cpus=8).exclusive is True


def test_pbs_sizes():
    assert [size_mb(text) for text in ("16gb", "1048576kb", "100mb", "2tb", "8w", "512", "1GB")] == [
        16384,
        1024,
        100,
        2097152,
        1,
        1,
        1024,
    ]
    for bad in ("16 gb", "gb", "1gx", "1bw"):
        with pytest.raises(ValueError, match="PBS size"):
            size_mb(bad)


def test_pbs_select_and_nodes_specs():
    assert parse_select("2:ncpus=8:mem=16gb:ngpus=1+1:ncpus=4") == [
        Chunk(count=2, ncpus=8, mem=16384, ngpus=1),
        Chunk(count=1, ncpus=4),
    ]
    assert parse_select("ncpus=4:mem=2gb") == [Chunk(count=1, ncpus=4, mem=2048)]
    assert parse_nodes("2:ppn=8:gpus=1+n5:ppn=4") == [Chunk(2, 8, None, 1), Chunk(1, 4, None, 0, host="n5")]
    with pytest.raises(ValueError, match="ncpus"):
        parse_select("2:ncpus=many")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_select("2:ncpus")


def test_pbs_requests():
    assert pbs_request({"select": "2:ncpus=8:mem=16gb:ngpus=1"}) == ResourceRequest(
        tasks=2, cpus_per_task=8, mem_per_cpu=2048, gpus_per_task=1
    )
    assert pbs_request({"select": "2:ncpus=8:mem=16gb:ngpus=1+1:ncpus=4", "place": "scatter:excl"}) == (
        ResourceRequest(nodes=3, max_nodes=3, tasks=20, mem_per_cpu=1639, gpus=2, exclusive=True)
    )
    assert pbs_request({"select": "4:ncpus=1", "place": "pack"}) == ResourceRequest(nodes=1, max_nodes=1, tasks=4)
    assert pbs_request({"nodes": "2:ppn=8:gpus=1", "mem": "32gb"}) == ResourceRequest(
        nodes=2, max_nodes=2, tasks_per_node=8, mem_per_cpu=2048, gpus_per_node=1
    )
    assert pbs_request({"ncpus": "16", "mem": "1048576kb", "ngpus": "2"}, queue="gpu") == ResourceRequest(
        tasks=16, mem_per_cpu=64, gpus=2, partitions=("gpu",)
    )
    assert pbs_request({"ncpus": "4", "pmem": "1gb"}) == ResourceRequest(tasks=4, mem_per_cpu=1024)
    assert pbs_request({}) == ResourceRequest(tasks=1)
    with pytest.raises(ValueError, match=r"Resource_List\.select"):
        pbs_request({"select": "2:ncpus=x"})
    with pytest.raises(ValueError, match=r"Resource_List\.mem"):
        pbs_request({"ncpus": "2", "mem": "lots"})
