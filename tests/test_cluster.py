"""The cluster model and its readers: slurm.conf (with gres.conf and Include), the TOML form, host lists."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from kernel.hostlist import expand_hostlist
from simulator.cluster import Cluster, Node, Partition, natural_key
from simulator.clusterconf import ClusterConfigError, read_cluster, read_cluster_toml, read_slurm_conf
from simulator.clusterconf.settings import memory_mb, parse_gres, slurm_minutes

SITE = """\
# A small site: two kinds of nodes, partitions that share a node.
ClusterName=mini
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerParameters=bf_interval=1,bf_window=120,bf_resolution=1,bf_max_job_test=1000,bf_continue,default_queue_depth=1000,\\
sched_min_interval=100000,bf_max_job_user=5
PriorityType=priority/basic
OverTimeLimit=2
KillWait=10
DefMemPerCPU=1000
GresTypes=gpu

NodeName=DEFAULT Sockets=2 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=16000
NodeName=n[01-03] Weight=10   # three CPU nodes
nodename=g[1-2]x gres=gpu:a100:2 Features=gpu,big  realmemory=32000
PartitionName=DEFAULT State=UP MaxTime=1-00:00:00
PartitionName=cpu Nodes=n[01-03],g1x Default=YES MaxNodes=2 PriorityTier=2
PartitionName=gpu Nodes=g[1-2]x MaxTime=60 DefMemPerCPU=2000 OverSubscribe=EXCLUSIVE
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_a_site_slurm_conf_becomes_nodes_partitions_and_settings(tmp_path):
    cluster = read_slurm_conf(write(tmp_path, "slurm.conf", SITE))
    assert cluster.name == "mini"
    assert [node.name for node in cluster.nodes] == ["g1x", "g2x", "n01", "n02", "n03"]
    g1 = cluster.nodes[cluster.node_index("g1x")]
    assert (g1.cpus, g1.memory, g1.gpus, g1.gres["gpu:a100"], g1.features) == (8, 32000, 2, 2, {"gpu", "big"})
    n01 = cluster.nodes[cluster.node_index("n01")]
    assert (n01.cpus, n01.sockets, n01.cores_per_socket, n01.memory, n01.weight, n01.gpus) == (8, 2, 4, 16000, 10, 0)
    cpu, gpu = cluster.partition("cpu"), cluster.partition("gpu")
    assert cpu.nodes == (0, 2, 3, 4) and gpu.nodes == (0, 1)
    assert (cpu.default, cpu.max_nodes, cpu.priority_tier, cpu.max_time) == (True, 2, 2, 86400)
    assert (gpu.max_time, gpu.def_mem_per_cpu, gpu.exclusive, gpu.default) == (3600, 2000, True, False)
    assert cluster.default_partition is cpu
    assert (cluster.select.unit, cluster.select.memory) == ("core", True)
    assert cluster.memory.def_mem_per_cpu == 1000
    scheduler = cluster.scheduler
    assert (scheduler.bf_interval, scheduler.bf_window, scheduler.bf_resolution) == (1, 7200, 1)
    assert (scheduler.bf_max_job_test, scheduler.bf_continue, scheduler.default_queue_depth) == (1000, True, 1000)
    assert (scheduler.bf_max_job_user, scheduler.sched_min_interval) == (5, 100000)
    assert (scheduler.over_time_limit, scheduler.kill_wait, scheduler.priority_type) == (2, 10, "priority/basic")
    assert cluster.procs == 40 and not cluster.pool and cluster.pool_size is None


def test_job_requeue_and_the_credentials_lifetime_are_read(tmp_path):
    """JobRequeue and AuthInfo's cred_expire (when a requeued job may start again); a cred_expire Slurm refuses
    (under 5 s) is said and the default kept, as slurm_cred.c does."""
    base = "NodeName=a CPUs=4\nPartitionName=p Nodes=ALL\n"
    conf = write(tmp_path, "slurm.conf", base + "JobRequeue=0\nAuthInfo=socket=/run/munge.sock,cred_expire=60\n")
    scheduler = read_slurm_conf(conf).scheduler
    assert (scheduler.job_requeue, scheduler.cred_expire) == (False, 60)
    refused = read_slurm_conf(write(tmp_path, "refused.conf", base + "AuthInfo=cred_expire=2\n"))
    assert refused.scheduler.cred_expire == 1200
    assert any("refused.conf line 3: AuthInfo: cred_expire=2 is invalid" in note for note in refused.notes)


def test_defaults_are_slurm_22_05s(tmp_path):
    conf = write(tmp_path, "slurm.conf", "NodeName=a CPUs=4\nPartitionName=p Nodes=ALL\n")
    cluster = read_slurm_conf(conf)
    node = cluster.nodes[0]
    assert (node.cpus, node.memory, node.sockets, node.weight, node.state) == (4, 1, 4, 1, "UNKNOWN")
    assert cluster.select.plugin == "select/linear" and cluster.select.whole_nodes
    assert cluster.scheduler.bf_interval == 30 and cluster.scheduler.bf_resolution == 60
    assert cluster.scheduler.bf_window == 86400 and cluster.scheduler.bf_max_job_test == 500
    assert cluster.scheduler.kill_wait == 30 and cluster.scheduler.over_time_limit == 0
    assert cluster.scheduler.job_requeue and cluster.scheduler.cred_expire == 1200
    assert cluster.scheduler.scheduler_type == "sched/backfill" and cluster.scheduler.priority_type == "priority/basic"
    assert cluster.partitions[0].max_time is None and cluster.default_partition is None
    assert cluster.name == "slurm"  # no ClusterName: the file's name
    tres = write(tmp_path, "tres.conf", "SelectType=select/cons_tres\nNodeName=a CPUs=4\nPartitionName=p Nodes=a\n")
    assert (read_slurm_conf(tres).select.unit, read_slurm_conf(tres).select.memory) == ("core", True)


def test_node_shapes_are_completed_as_slurm_does(tmp_path):
    conf = write(
        tmp_path,
        "slurm.conf",
        "NodeName=a Sockets=2 CoresPerSocket=8 ThreadsPerCore=2\n"  # CPUs = 32
        "NodeName=b CPUs=16 CoresPerSocket=4 ThreadsPerCore=2\n"  # Sockets inferred: 2
        "NodeName=c CPUs=7 Sockets=2 CoresPerSocket=2\n"  # CPUs match nothing: reset to 4
        "NodeName=d CPUs=8 Sockets=2 CoresPerSocket=4 ThreadsPerCore=2 CoreSpecCount=1\n"  # CPUs = cores
        "PartitionName=p Nodes=ALL\n",
    )
    a, b, c, d = read_slurm_conf(conf).nodes
    assert (a.cpus, a.sockets, a.cpus_per_core) == (32, 2, 2)
    assert (b.cpus, b.sockets) == (16, 2)
    assert c.cpus == 4
    assert (d.cpus, d.cpus_per_core, d.usable_cpus) == (8, 1, 7)


def test_node_order_is_slurms_names_with_numbers_as_numbers(tmp_path):
    conf = write(
        tmp_path, "slurm.conf", "NodeName=n10,n9,n2 CPUs=1\nNodeName=m1 CPUs=1\nPartitionName=p Nodes=n[2,9-10]\n"
    )
    cluster = read_slurm_conf(conf)
    assert [node.name for node in cluster.nodes] == ["m1", "n2", "n9", "n10"]
    assert cluster.partitions[0].nodes == (1, 2, 3)
    assert sorted(["n10", "n9", "a", "n1x"], key=natural_key) == ["a", "n1x", "n9", "n10"]


def test_comments_escapes_quotes_continuations_and_include(tmp_path):
    (tmp_path / "conf.d").mkdir()
    write(tmp_path / "conf.d", "nodes-mini.conf", 'NodeName=x[1-2] CPUs=2 Feature="a,b"\n')
    conf = write(
        tmp_path,
        "slurm.conf",
        "ClusterName=mini   # the name\n"
        "Include conf.d/nodes-%c.conf\n"
        "PartitionName=p \\\n"
        "   Nodes=x[1-2] \\\n"
        "   AllowAccounts=a\\#b\n",
    )
    cluster = read_slurm_conf(conf)
    assert [node.name for node in cluster.nodes] == ["x1", "x2"]
    assert cluster.nodes[0].features == {"a", "b"}
    assert cluster.partitions[0].nodes == (0, 1)


def test_nodesets_downnodes_and_future_nodes(tmp_path):
    conf = write(
        tmp_path,
        "slurm.conf",
        "NodeName=a[1-4] CPUs=2 Features=fast\nNodeName=b1 CPUs=2 State=FUTURE\n"
        "NodeSet=quick Feature=fast\nDownNodes=a4 State=DRAIN Reason=broken\n"
        "PartitionName=p Nodes=quick,b1\n",
    )
    cluster = read_slurm_conf(conf)
    assert cluster.partitions[0].nodes == (0, 1, 2, 3, 4)
    assert [node.usable for node in cluster.nodes] == [True, True, True, False, False]
    assert cluster.procs == 6


def test_gres_conf_beside_slurm_conf_is_checked(tmp_path):
    conf = write(
        tmp_path, "slurm.conf", "GresTypes=gpu\nNodeName=g[1-2] CPUs=4 Gres=gpu:2\nPartitionName=p Nodes=ALL\n"
    )
    write(tmp_path, "gres.conf", "NodeName=g1 Name=gpu File=/dev/nvidia[0-1]\nNodeName=g2 Name=gpu File=/dev/nvidia0\n")
    cluster = read_slurm_conf(conf)
    assert [node.gpus for node in cluster.nodes] == [2, 2]
    assert any("g2" in note and "gpu:2" in note and "invalid" in note for note in cluster.notes)
    assert not any("g1" in note for note in cluster.notes)
    write(tmp_path, "gres.conf", "AutoDetect=nvml\nName=gpu Type=a100 Count=1\n")
    assert not any("invalid" in note for note in read_slurm_conf(conf).notes)
    write(tmp_path, "gres.conf", "Name=gpu Bogus=1\n")
    with pytest.raises(ClusterConfigError, match=r"gres.conf line 1: Bogus: is not a key"):
        read_slurm_conf(conf)


def test_the_last_default_partition_wins_as_in_slurmctld(tmp_path):
    conf = write(
        tmp_path,
        "slurm.conf",
        "NodeName=a CPUs=2\nPartitionName=p Nodes=a Default=YES\nPartitionName=q Nodes=a Default=YES\n",
    )
    cluster = read_slurm_conf(conf)
    assert cluster.default_partition is cluster.partition("q") and not cluster.partition("p").default
    assert any("the last Default=YES wins" in note for note in cluster.notes)


def test_notes_say_what_is_not_modelled(tmp_path):
    conf = write(
        tmp_path,
        "slurm.conf",
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU_Memory\nGresTypes=gpu,mps\n"
        "SchedulerParameters=bf_interval=0,bf_frobnicate=3\n"
        "NodeName=a CPUs=4 Gres=gpu:1,mps:100\nPartitionName=p Nodes=a OverSubscribe=FORCE:4\n",
    )
    cluster = read_slurm_conf(conf)
    text = " ".join(cluster.notes)
    assert "mps" in text and "OverSubscribe=FORCE:4" in text and "all of each node's memory" in text
    assert "bf_interval=0" in text and cluster.scheduler.bf_interval == 30
    assert cluster.scheduler.other == {"bf_frobnicate": "3"}
    assert cluster.select.unit == "cpu"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("NodeName=a CPUs=four\nPartitionName=p Nodes=a\n", r"slurm.conf line 1: cpus: 'four' is not a whole number"),
        ("NodeName=a CPUs=2 Colour=red\nPartitionName=p Nodes=a\n", r"line 1: Colour: is not a key of a NodeName line"),
        ("NodeName=a[3-1] CPUs=2\nPartitionName=p Nodes=a\n", r"line 1: NodeName: range '3-1' .* runs backwards"),
        (
            "NodeName=a CPUs=2\nNodeName=a CPUs=4\nPartitionName=p Nodes=a\n",
            r"line 2: NodeName: node a is already defined at line 1",
        ),
        ("NodeName=a CPUs=2\nPartitionName=p Nodes=b\n", r"line 2: Nodes: no node 'b' is defined"),
        ("NodeName=a CPUs=2\nPartitionName=p Nodes=a MaxTime=soon\n", r"line 2: MaxTime: 'soon' is not a time"),
        ("NodeName=a CPUs=2 Gres=gpu:2\nPartitionName=p Nodes=a\n", r"line 1: Gres: gpu is not in GresTypes"),
        ("NodeName=a CPUs=2\nPartitionName=p Nodes=a State=SLEEPY\n", r"line 2: State: 'SLEEPY' is not UP"),
        ("NodeName=a CPUs=2\n", r"no PartitionName line"),
        ("PartitionName=p Nodes=ALL\n", r"no NodeName line"),
        (
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Memory\nNodeName=a\nPartitionName=p Nodes=a\n",
            "names no CR_CPU",
        ),
        ("NodeName=a CPUs=2 just words\nPartitionName=p Nodes=a\n", r"line 1: just: is not KEY=VALUE"),
        ("Include missing.conf\n", r"missing.conf: cannot read"),
    ],
)
def test_bad_slurm_conf_names_file_line_and_key(tmp_path, text, message):
    with pytest.raises(ClusterConfigError, match=message):
        read_slurm_conf(write(tmp_path, "slurm.conf", text))


TOML = """\
name = "mixed"
select = "CR_Core_Memory"
def_mem_per_cpu = 2000

[[nodes]]
names = "n[1-3]"
cpus = 8
memory = "16G"

[[nodes]]
names = "g[1-2]"
cpus = 16
memory = 64000
gpus = 4
features = ["a100"]

[[partitions]]
name = "cpu"
nodes = "n[1-3],g1"
default = true
max_time = "1-00:00:00"

[[partitions]]
name = "gpu"
nodes = "g[1-2]"
max_time = 120
priority_tier = 2

[scheduler]
parameters = "bf_interval=30,bf_window=1440,bf_resolution=60"
over_time_limit = 1
kill_wait = 30
"""


def test_the_toml_form_reads_like_the_slurm_conf_it_stands_for(tmp_path):
    cluster = read_cluster(write(tmp_path, "mixed.toml", TOML))
    assert cluster.name == "mixed"
    assert [(node.name, node.cpus, node.memory, node.gpus) for node in cluster.nodes] == [
        ("g1", 16, 64000, 4),
        ("g2", 16, 64000, 4),
        ("n1", 8, 16384, 0),
        ("n2", 8, 16384, 0),
        ("n3", 8, 16384, 0),
    ]
    assert cluster.partition("cpu").nodes == (0, 2, 3, 4) and cluster.partition("cpu").max_time == 86400
    assert cluster.partition("gpu").priority_tier == 2 and cluster.partition("gpu").max_time == 7200
    assert (cluster.scheduler.bf_interval, cluster.scheduler.bf_window, cluster.scheduler.over_time_limit) == (
        30,
        86400,
        1,
    )
    assert cluster.memory.def_mem_per_cpu == 2000 and cluster.select.memory
    equivalent = write(
        tmp_path,
        "slurm.conf",
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\nDefMemPerCPU=2000\nGresTypes=gpu\n"
        "SchedulerParameters=bf_interval=30,bf_window=1440,bf_resolution=60\nOverTimeLimit=1\nKillWait=30\n"
        "NodeName=n[1-3] CPUs=8 RealMemory=16384\nNodeName=g[1-2] CPUs=16 RealMemory=64000 Gres=gpu:4 Features=a100\n"
        "PartitionName=cpu Nodes=n[1-3],g1 Default=YES MaxTime=1-00:00:00\n"
        "PartitionName=gpu Nodes=g[1-2] MaxTime=120 PriorityTier=2\n",
    )
    from_conf = read_slurm_conf(equivalent)
    assert from_conf.nodes == cluster.nodes and from_conf.partitions == cluster.partitions
    assert from_conf.scheduler == cluster.scheduler and from_conf.select == cluster.select


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[nodes]]\nnames = 'a'\ncpu = 2\n", r"\[\[nodes\]\] #1: cpu: is not a key here"),
        ("[[nodes]]\ncpus = 2\n", r"\[\[nodes\]\] #1: names: is missing"),
        ("[[nodes]]\nnames='a'\ncpus=2\ngpus=1\ngres='gpu:1'\n", "give gpus or gres, not both"),
        ("[[nodes]]\nnames='a'\ncpus=2\nmemory='lots'\n", "'lots' is not a memory size"),
        ("[[nodes]]\nnames='a'\ncpus=2\n", "no \\[\\[partitions\\]\\]"),
        ("[[nodes]]\nnames='a'\ncpus=2\n[[partitions]]\nname='p'\nnodes='b'\n", "no node 'b' is defined"),
        ("colour = 'red'\n", "colour: is not a key of a cluster file"),
        ("nodes = [", "not TOML"),
        (
            "[[nodes]]\nnames='a'\ncpus=2\n[[partitions]]\nname='p'\nnodes='a'\n[scheduler]\nbf = 1\n",
            r"\[scheduler\]: bf",
        ),
    ],
)
def test_bad_toml_names_file_table_and_key(tmp_path, text, message):
    with pytest.raises(ClusterConfigError, match=message):
        read_cluster_toml(write(tmp_path, "c.toml", text))


def test_the_documented_toml_example_reads(tmp_path):
    from simulator.clusterconf import tomlform

    example = tomlform.__doc__.split("::", 1)[1].split("\n\nUnknown keys", 1)[0]
    cluster = read_cluster(write(tmp_path, "example.toml", textwrap.dedent(example)))
    assert cluster.summary() == (
        "mixed: 5 nodes, 56 CPUs, 173 GB, 8 GPUs; partitions cpu* (4 nodes); select/cons_tres by core and memory"
    )
    priority = cluster.priority
    assert (priority.weight_fairshare, priority.weight_age, priority.max_age) == (10_000, 1000, 7 * 24 * 3600)
    assert "SMALL_RELATIVE_TO_TIME" in priority.flags and priority.limits_enforced


def test_a_processor_pool_is_what_an_swf_trace_runs_on():
    pool = Cluster.processor_pool(128)
    assert pool.pool and pool.pool_size == 128 and pool.procs == 128
    assert pool.summary() == "a pool of 128 processors"
    assert pool.default_partition is pool.partitions[0] and pool.partitions[0].nodes == (0,)
    with pytest.raises(ValueError, match="one node in one partition"):
        Cluster("x", nodes=(Node("a", 1), Node("b", 1)), partitions=(Partition("p", (0, 1)),), pool=True)


def test_the_model_refuses_what_slurm_would():
    with pytest.raises(ValueError, match="Slurm's order"):
        Cluster("x", nodes=(Node("n10", 1), Node("n9", 1)), partitions=(Partition("p", (0, 1)),))
    with pytest.raises(ValueError, match="past the cluster"):
        Cluster("x", nodes=(Node("a", 1),), partitions=(Partition("p", (0, 1)),))
    with pytest.raises(ValueError, match="CoreSpecCount"):
        Node("a", cpus=4, sockets=1, cores_per_socket=2, core_spec_count=2)
    with pytest.raises(KeyError, match="no partition 'q'"):
        Cluster.processor_pool(4).partition("q")


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[01-03,12]", ["n01", "n02", "n03", "n12"]),
        ("gpu[1-2]x", ["gpu1x", "gpu2x"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a,b[8-10],c", ["a", "b8", "b9", "b10", "c"]),
        ("n[098-100]", ["n098", "n099", "n100"]),
    ],
)
def test_host_lists_expand_as_slurm_expands_them(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("text", ["n[1-", "n1]", "n[a-b]", "n[[1]]", "", "n[5-2]"])
def test_bad_host_lists_are_refused(text):
    with pytest.raises(ValueError, match=r"."):
        expand_hostlist(text)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("n[1-5]", "range '1-5' in 'n[1-5]' names over 4 hosts"),
        ("r[1-2]n[1-3]", "'r[1-2]n[1-3]' names over 4 hosts"),
        ("a,b,c,n[1-2]", "'a,b,c,n[1-2]' names over 4 hosts"),
        ("n[1-999999999]", "names over 4 hosts"),  # refused before it is expanded
    ],
)
def test_a_host_list_names_no_more_than_its_limit(text, words):
    assert expand_hostlist("n[1-4]", 4) == ["n1", "n2", "n3", "n4"]
    with pytest.raises(ValueError, match=re.escape(words)):
        expand_hostlist(text, 4)


def test_slurm_values():
    assert [slurm_minutes(text) for text in ("30", "1:30", "2:00:00", "1-0", "1-2:30", "1-0:0:1")] == [
        30,
        2,
        120,
        1440,
        1590,
        1441,
    ]
    assert slurm_minutes("UNLIMITED") is None and slurm_minutes("infinite") is None
    assert [memory_mb(text) for text in ("16000", "16G", "512M", "1T")] == [16000, 16384, 512, 1048576]
    assert parse_gres("gpu:a100:2(S:0-1),gpu:v100:1,mps:2K") == {
        "gpu": 3,
        "gpu:a100": 2,
        "gpu:v100": 1,
        "mps": 2048,
    }
    assert parse_gres("gpu") == {"gpu": 1} and parse_gres("gpu:no_consume:2") == {"gpu": 2}
    with pytest.raises(ValueError, match="NAME"):
        parse_gres("gpu:a:b:c")
