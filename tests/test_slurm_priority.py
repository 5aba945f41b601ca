"""priority/multifactor, fair-share and QOS/association limits (simulator.priority, simulator.fairshare,
simulator.limits, simulator.clusterconf.sacctmgr), checked against hand computations of Slurm 22.05's formulas.

Slurm's source (tag slurm-22-05-8-1) each expectation follows:
- job priority: `_get_priority_internal` and `set_priority_factors` (src/plugins/priority/multifactor/
  priority_multifactor.c): sum of weighted factors, truncated, at least 1;
- classic fair-share: `_set_usage_efctv`, `priority_p_calc_fs_factor` (2**(-(efctv / shares_norm) / damp));
  shares: `_normalize_assoc_shares_traditional` (src/common/assoc_mgr.c);
- Fair Tree: `_calc_tree_fs`, `_calc_assoc_fs` (fair_tree.c): level_fs = S / U, rank / user count;
- usage: `_apply_new_usage` (delta * decay_factor**delta * CPUs), `_apply_decay`, decay_factor = 1 - 0.693 / half-life;
- limits: `acct_policy_job_runnable_pre_select` / `_post_select` (src/slurmctld/acct_policy.c), reasons as
  `job_reason_string` (src/common/slurm_protocol_defs.c).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from kernel.resources import ResourceRequest
from simulator.cluster import Cluster, PrioritySettings
from simulator.clusterconf import ClusterConfigError, read_cluster_toml, read_slurm_conf
from simulator.clusterconf.sacctmgr import Accounts, Association, Qos, TresLimits, read_associations, read_qos
from simulator.clusterreplay import SLURM, simulate_cluster
from simulator.engine import SimulationConfig
from simulator.experiment import open_session
from simulator.fairshare import FairShare, RunningUsage, next_reset
from simulator.jobs import WaitingJob
from simulator.limits import LimitedJob, Limits
from simulator.priority import Multifactor, PriorityJob
from simulator.slurmpolicy import SiteAccounting
from tsched.cli import main

CAPTURES = Path(__file__).parent / "data" / "slurm-22.05-cluster"
DATA = CAPTURES.parent


def tree(shares_a: int = 2, shares_b: int = 1) -> Accounts:
    """root -> A (shares_a) -> a1, a2; root -> B (shares_b) -> b1; every user one share."""
    return Accounts(
        (
            Association("root", parent=None),
            Association("A", shares=shares_a),
            Association("B", shares=shares_b),
            Association("A", "a1", parent="A"),
            Association("A", "a2", parent="A"),
            Association("B", "b1", parent="B"),
        )
    )


def with_usage(settings: PrioritySettings, usage: dict[int, float]) -> FairShare:
    fairshare = FairShare(tree(), settings)
    for assoc, amount in usage.items():
        fairshare.usage[assoc] = amount
    fairshare.calculate(None, [], 0)
    return fairshare


def test_classic_fairshare_is_two_to_the_minus_effective_usage_over_shares() -> None:
    """a1 used 300, a2 0, b1 100 of 400. shares_norm: a1 = 2/3 * 1/2 = 1/3, b1 = 1/3 * 1 = 1/3.
    Effective usage: A = 300/400 = 0.75 (a child of root: its usage_norm); a1 = 0.75 + (0.75 - 0.75) * 1/2
    = 0.75; a2 = 0 + (0.75 - 0) * 1/2 = 0.375; b1 = B = 0.25. Factor 2**(-efctv / shares_norm)."""
    fairshare = with_usage(PrioritySettings(flags=frozenset({"NO_FAIR_TREE"})), {3: 300.0, 5: 100.0})
    assert fairshare.shares_norm[3] == pytest.approx(1 / 3)
    assert fairshare.factor(3) == pytest.approx(2 ** (-0.75 / (1 / 3)))
    assert fairshare.factor(4) == pytest.approx(2 ** (-0.375 / (1 / 3)))
    assert fairshare.factor(5) == pytest.approx(2 ** (-0.25 / (1 / 3)))


def test_classic_dampening_divides_the_exponent() -> None:
    settings = PrioritySettings(flags=frozenset({"NO_FAIR_TREE"}), dampening_factor=3)
    fairshare = with_usage(settings, {3: 300.0, 5: 100.0})
    assert fairshare.factor(5) == pytest.approx(2 ** (-(0.25 / (1 / 3)) / 3))


def test_fair_tree_ranks_users_under_the_less_served_account_first() -> None:
    """Level 1: A's level_fs = (2/3) / (300/400) = 0.889, B's = (1/3) / (100/400) = 1.333: B first, so b1
    gets rank 3 of 3 users (factor 1). Under A: a2 has no usage (level_fs infinite) before a1
    ((1/2) / (300/300) = 0.5): a2 rank 2 (2/3), a1 rank 1 (1/3)."""
    fairshare = with_usage(PrioritySettings(), {3: 300.0, 5: 100.0})
    assert [fairshare.factor(index) for index in (5, 4, 3)] == pytest.approx([1.0, 2 / 3, 1 / 3])


def test_fair_tree_ties_share_a_rank() -> None:
    """Without usage every level_fs is infinite: B and A tie, users before accounts, so all three users are
    tied with the first ranked and share rank 3 (the rank only drops after a user that is not tied)."""
    fairshare = with_usage(PrioritySettings(), {})
    assert [fairshare.factor(index) for index in (3, 4, 5)] == [1.0, 1.0, 1.0]


def test_usage_decays_and_grows_as_the_decay_thread_adds_it() -> None:
    """A 4-CPU job from 0 to 150, calculations at 0 (the first: no usage), 60 and 120, half-life 100 s:
    decay_factor d = 1 - 0.693/100; at 60: 60 d**60 x 4; at 120: that x d**60 + 60 d**60 x 4; at its end
    (150): + 30 d**30 x 4."""
    fairshare = FairShare(tree(), PrioritySettings(decay_half_life=100))
    d = 1 - 0.693 / 100
    job = RunningUsage(0, 4.0, 3)
    fairshare.calculate(None, [job], 0)
    assert fairshare.usage[3] == 0
    fairshare.calculate(60, [job], 60)
    assert fairshare.usage[3] == pytest.approx(60 * d**60 * 4)
    fairshare.calculate(60, [job], 120)
    second = 60 * d**60 * 4 * d**60 + 60 * d**60 * 4
    assert fairshare.usage[3] == pytest.approx(second)
    fairshare.add(job, 150)
    assert fairshare.usage[3] == pytest.approx(second + 30 * d**30 * 4)
    fairshare.calculate(None, [], 150)
    assert fairshare._totals[0] == pytest.approx(fairshare.usage[3])  # root's usage: the sum below it


def test_usage_reset_periods_fall_on_calendar_boundaries() -> None:
    monday_noon = 1_700_568_000  # 2023-11-21 12:00 UTC is a Tuesday
    assert next_reset("DAILY", monday_noon) == 1_700_611_200  # Wednesday 00:00
    assert next_reset("WEEKLY", monday_noon) == 1_700_956_800  # Sunday 26 November 00:00
    assert next_reset("MONTHLY", monday_noon) == 1_701_388_800  # 1 December
    assert next_reset("QUARTERLY", monday_noon) == 1_704_067_200  # 1 January 2024
    assert next_reset("NONE", monday_noon) is None


def cluster_4x4(tmp_path: Path, settings: PrioritySettings) -> Cluster:
    """Four nodes of 4 CPUs, partitions `low` (PriorityJobFactor 1) and `high` (2), priority/multifactor."""
    text = "\n".join(
        [
            'name = "four"',
            'select = "CR_CPU"',
            "[[nodes]]",
            'names = "n[1-4]"',
            "cpus = 4",
            "[[partitions]]",
            'name = "low"',
            'nodes = "ALL"',
            "default = true",
            "[[partitions]]",
            'name = "high"',
            'nodes = "ALL"',
            "priority_job_factor = 2",
            "[scheduler]",
            'parameters = "bf_interval=1,bf_resolution=1"',
            'priority_type = "priority/multifactor"',
        ]
    )
    path = tmp_path / "cluster.toml"
    path.write_text(text + "\n")
    return replace(read_cluster_toml(path), priority=settings)


WEIGHTS = PrioritySettings(
    max_age=60,
    weight_age=2000,
    weight_fairshare=10_000,
    weight_job_size=1000,
    weight_partition=100,
    weight_qos=400,
    calc_period=60,
)


def test_priority_sums_the_weighted_factors(tmp_path: Path) -> None:
    """A job of 2 nodes and 8 CPUs in `low`, QOS priority 5 of at most 10, user a2 (no usage: Fair Tree
    factor 1 for all, tied), at 30 s of age: age 30/60 x 2000 = 1000; fair-share 1 x 10000; job size
    (2/4 + 8/16) / 2 x 1000 = 500; partition 1/2 x 100 = 50; QOS 5/10 x 400 = 200: 11750."""
    cluster = cluster_4x4(tmp_path, WEIGHTS)
    job = PriorityJob(assoc=4, cpus=8, nodes=2, time_limit=600, partition_factor=1, qos_priority=5)
    multifactor = Multifactor(cluster, tree(), [job], start=0, qos_max=10)
    multifactor.advance(0)
    assert multifactor.priority(0, eligible=0, now=30) == 1000 + 10_000 + 500 + 50 + 200
    assert multifactor.priority(0, eligible=0, now=600) == 2000 + 10_000 + 500 + 50 + 200  # age caps at 1


def test_favor_small_and_size_relative_to_time(tmp_path: Path) -> None:
    """PriorityFavorSmall: ((4 - 2)/4 + (16 - 8)/16) / 2 = 0.5 of 1000 -> 500; a 1-node 2-CPU job:
    (3/4 + 14/16) / 2 = 0.8125 -> 812. SMALL_RELATIVE_TO_TIME (favour small): 1 - max(1 x 16/4, 2) / 10 min
    / 16 = 0.975 -> 975."""
    small = replace(WEIGHTS, weight_fairshare=0, weight_age=0, favor_small=True)
    jobs = [PriorityJob(4, 8, 2, 600, 0, 0), PriorityJob(4, 2, 1, 600, 0, 0)]
    multifactor = Multifactor(cluster_4x4(tmp_path, small), tree(), jobs, start=0)
    assert [multifactor.priority(index, 0, 0) for index in (0, 1)] == [500, 812]
    relative = replace(small, flags=frozenset({"SMALL_RELATIVE_TO_TIME"}))
    multifactor = Multifactor(cluster_4x4(tmp_path, relative), tree(), jobs, start=0)
    assert multifactor.priority(1, 0, 0) == 975


def waiting(index: int, submit: int) -> WaitingJob:
    return WaitingJob(index, index + 1, submit, 1, 600, 600)


def test_priorities_stay_fixed_between_calculations(tmp_path: Path) -> None:
    """Age weighs alone (2000 over 60 s): job 0 (submitted at 5) and job 1 (at 10) get priority 1 at
    submission (age 0, the floor), ordered by submission; at the calculation at 60 both are recomputed
    (1833, 1666); at 90 nothing is recomputed yet; at 120 both cap at 2000 and tie again."""
    settings = replace(WEIGHTS, weight_fairshare=0, weight_job_size=0, weight_partition=0, weight_qos=0)
    jobs = [PriorityJob(3, 1, 1, 600, 1, 0), PriorityJob(5, 1, 1, 600, 1, 0)]
    multifactor = Multifactor(cluster_4x4(tmp_path, settings), tree(), jobs, start=0)
    multifactor.add(waiting(0, 5))
    multifactor.add(waiting(1, 10))
    assert multifactor.priorities == {0: 1, 1: 1}
    multifactor.advance(60)
    assert multifactor.priorities == {0: int(55 / 60 * 2000), 1: int(50 / 60 * 2000)}
    version = multifactor.version
    multifactor.advance(90)
    assert multifactor.version == version and multifactor.next_calculation() == 120
    multifactor.advance(120)
    assert multifactor.priorities == {0: 2000, 1: 2000}
    assert [job.index for job in multifactor.ordered(120)] == [0, 1]


def test_fairshare_reorders_the_queue_after_usage(tmp_path: Path) -> None:
    """a1's 4-CPU job runs from 0 to 50; then a1's job 1 and b1's job 2 wait. Fair Tree at 60: A used
    everything (level_fs 2/3 / 1), B nothing (infinite): b1 ranks first (3/3), then A's users a2 (no usage,
    2/3) and a1 (1/3). Job 2, submitted later, goes first."""
    settings = replace(WEIGHTS, weight_age=0, weight_job_size=0, weight_partition=0, weight_qos=0)
    jobs = [PriorityJob(3, 4, 1, 600, 1, 0), PriorityJob(3, 1, 1, 600, 1, 0), PriorityJob(5, 1, 1, 600, 1, 0)]
    multifactor = Multifactor(cluster_4x4(tmp_path, settings), tree(), jobs, start=0)
    multifactor.add(waiting(0, 0))
    multifactor.started(waiting(0, 0), 4, 0)
    multifactor.remove(waiting(0, 0))
    multifactor.ended(0, 50)
    multifactor.add(waiting(1, 55))
    multifactor.add(waiting(2, 56))
    multifactor.advance(60)
    assert multifactor.priorities[1] == int(10_000 / 3)
    assert multifactor.priorities[2] == 10_000
    assert [job.index for job in multifactor.ordered(60)] == [2, 1]


def limited(index: int, user: str = "a1", qos: str = "normal", cpus: int = 2, limit: int = 600) -> LimitedJob:
    assoc = {"a1": 3, "a2": 4, "b1": 5}[user]
    return LimitedJob(user, "A" if user != "b1" else "B", assoc, qos, cpus, 1, 0, limit)


def test_qos_max_jobs_per_user_holds_the_second_job() -> None:
    qos = {"normal": Qos("normal", max_jobs_per_user=1)}
    limits = Limits(tree(), qos, [limited(0), limited(1), limited(2, user="b1")])
    assert not limits.holds(waiting(0, 0))
    limits.started(0)
    assert limits.holds(waiting(1, 0)) and limits.reasons[1] == "QOSMaxJobsPerUserLimit"
    assert not limits.holds(waiting(2, 0))
    limits.ended(0)
    assert not limits.holds(waiting(1, 0))


def test_account_grp_tres_counts_every_user_below_and_qos_limits_come_first() -> None:
    """A's GrpTRES=cpu=3: a1's 2 CPUs running leave 1, so a2's 2-CPU job waits (AssocGrpCpuLimit). With a
    QOS GrpTRES cpu limit of 8 the QOS's limit replaces the association's."""
    assocs = tree().associations
    accounts = Accounts((*assocs[:1], replace(assocs[1], grp_tres=TresLimits(cpu=3)), *assocs[2:]))
    jobs = [limited(0), limited(1, user="a2")]
    limits = Limits(accounts, {}, jobs)
    limits.started(0)
    assert limits.holds(waiting(1, 0)) and limits.reasons[1] == "AssocGrpCpuLimit"
    overriding = Limits(accounts, {"normal": Qos("normal", grp_tres=TresLimits(cpu=8))}, jobs)
    overriding.started(0)
    assert not overriding.holds(waiting(1, 0))


def test_association_max_jobs_and_grp_jobs() -> None:
    assocs = tree().associations
    accounts = Accounts((*assocs[:3], replace(assocs[3], max_jobs=1), assocs[4], assocs[5]))
    limits = Limits(accounts, {}, [limited(0), limited(1)])
    limits.started(0)
    assert limits.holds(waiting(1, 0)) and limits.reasons[1] == "AssocMaxJobsLimit"
    grouped = Accounts((*assocs[:1], replace(assocs[1], grp_jobs=1), *assocs[2:]))
    limits = Limits(grouped, {}, [limited(0), limited(1, user="a2")])
    limits.started(0)
    assert limits.holds(waiting(1, 0)) and limits.reasons[1] == "AssocGrpJobsLimit"


def test_per_job_limits_mean_a_job_never_starts() -> None:
    qos = {"short": Qos("short", max_wall=300, max_tres=TresLimits(cpu=4)), "normal": Qos("normal")}
    jobs = [limited(0, qos="short", limit=600), limited(1, qos="short", cpus=8), limited(2, qos="short")]
    limits = Limits(tree(), qos, [*jobs, limited(3, qos="normal", cpus=2)])
    assert limits.never_runs(0) == "QOSMaxWallDurationPerJobLimit"
    limits.jobs[1:2] = [limited(1, qos="short", cpus=8, limit=300)]
    assert limits.never_runs(1) == "QOSMaxCpuPerJobLimit"
    assert limits.never_runs(3) is None


ASSOC_HEADER = (
    "Cluster|Account|User|Partition|Share|Priority|GrpJobs|GrpTRES|GrpSubmit|GrpWall|GrpTRESMins|MaxJobs|MaxTRES|"
    "MaxTRESPerNode|MaxSubmit|MaxWall|MaxTRESMins|QOS|Def QOS|GrpTRESRunMins"
)
ASSOC_FIELDS = ASSOC_HEADER.split("|")


def assoc_line(**values: str) -> str:
    """One line of `sacctmgr show assoc --parsable2` (its default fields), the others empty."""
    return "|".join({"Cluster": "tsched", "QOS": "normal", **values}.get(name, "") for name in ASSOC_FIELDS)


ASSOC_DUMP = (
    "\n".join(
        [
            "|".join(ASSOC_FIELDS),
            assoc_line(Account="root", Share="1"),
            assoc_line(Account="root", User="root", Share="1"),
            assoc_line(Account="chem", Share="2", GrpTRES="cpu=16"),
            assoc_line(Account="chem", User="tsched-carol", Share="1", MaxJobs="2"),
            assoc_line(Account="physics", Share="1", MaxWall="1-00:00:00"),
            assoc_line(Account="physics", User="tsched-alice", Share="parent"),
        ]
    )
    + "\n"
)


def test_read_associations_as_sacctmgr_prints_them(tmp_path: Path) -> None:
    path = tmp_path / "assoc.txt"
    path.write_text(ASSOC_DUMP)
    accounts = read_associations(path)
    chem = accounts.associations[accounts.account("chem") or 0]
    assert chem.shares == 2 and chem.grp_tres == TresLimits(cpu=16) and chem.parent == "root"
    carol = accounts.associations[accounts.find("tsched-carol", "chem", None) or 0]
    assert carol.max_jobs == 2
    alice = accounts.associations[accounts.find("tsched-alice", "physics", None) or 0]
    assert alice.shares is None and alice.max_wall == 86_400  # inherited from physics


def test_nested_accounts_from_parent_name_or_tree_indentation(tmp_path: Path) -> None:
    named = tmp_path / "named.txt"
    named.write_text("Account|User|ParentName|Share\nroot|||1\nscience|||3\nbio||science|2\nbio|bob||1\n")
    indented = tmp_path / "tree.txt"
    indented.write_text("Account|User|Share\nroot||1\n science||3\n  bio||2\n  bio|bob|1\n")
    for path in (named, indented):
        accounts = read_associations(path)
        assert accounts.associations[accounts.account("bio") or 0].parent == "science"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Account|User|Share\nroot||1\nchem||lots\n", r"assoc\.txt line 3: Share: 'lots' is not"),
        ("Account|User|Share\nroot||1\nchem|1\n", r"assoc\.txt line 3: 2 fields where the header has 3"),
        ("Name|Share\nx|1\n", r"assoc\.txt line 1: no Account or User field"),
        ("Account|User|GrpTRES\nroot||cpu=many\n", r"line 2: GrpTRES: 'cpu=many': the count is not"),
        ("Account|User|Share\nroot||1\nchem|carl|1\n", r"user carl is in account chem, which has no line"),
    ],
)
def test_bad_association_files_name_the_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "assoc.txt"
    path.write_text(text)
    with pytest.raises(ClusterConfigError, match=message):
        read_associations(path)


def test_read_qos(tmp_path: Path) -> None:
    path = tmp_path / "qos.txt"
    header = (
        "Name|Priority|GraceTime|Preempt|PreemptExemptTime|PreemptMode|Flags|UsageThres|UsageFactor|GrpTRES|"
        "GrpTRESMins|GrpTRESRunMins|GrpJobs|GrpSubmit|GrpWall|MaxTRES|MaxTRESPerNode|MaxTRESMins|MaxWall|MaxTRESPU|"
        "MaxJobsPU|MaxSubmitPU|MaxTRESPA|MaxJobsPA|MaxSubmitPA|MinTRES"
    )
    fields = header.split("|")
    rows = [
        {"Name": "normal", "Priority": "0", "UsageFactor": "1.000000"},
        {"Name": "long", "Priority": "10", "UsageFactor": "0.500000", "GrpTRES": "gres/gpu=4", "MaxTRES": "cpu=8"},
    ]
    rows[1] |= {"MaxWall": "02:00:00", "MaxTRESPU": "node=2", "MaxJobsPU": "3", "Flags": "DenyOnLimit"}
    lines = ["|".join(fields)] + ["|".join(row.get(name, "") for name in fields) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    table = read_qos(path)
    long = table["long"]
    assert (long.priority, long.usage_factor, long.grp_tres.gpu, long.max_tres.cpu) == (10, 0.5, 4, 8)
    assert (long.max_wall, long.max_tres_per_user.node, long.max_jobs_per_user) == (7200, 2, 3)
    path.write_text("Name|UsageFactor\nlong|-1\n")
    with pytest.raises(ClusterConfigError, match=r"qos\.txt line 2: UsageFactor: '-1' is negative"):
        read_qos(path)


def test_slurm_conf_priority_keys(tmp_path: Path) -> None:
    conf = (CAPTURES / "mixed" / "slurm.conf").read_text()
    path = tmp_path / "slurm.conf"
    extra = (
        "PriorityType=priority/multifactor\nPriorityDecayHalfLife=0-00:10\nPriorityCalcPeriod=2\n"
        "PriorityWeightFairshare=5000\nPriorityFlags=NO_FAIR_TREE,SMALL_RELATIVE_TO_TIME\n"
        "PriorityFavorSmall=YES\nAccountingStorageEnforce=associations,limits\n"
    )
    path.write_text(conf + extra)
    (tmp_path / "gres.conf").write_text((CAPTURES / "mixed" / "gres.conf").read_text())
    settings = read_slurm_conf(path).priority
    assert (settings.decay_half_life, settings.calc_period, settings.weight_fairshare) == (600, 120, 5000)
    assert not settings.fair_tree and settings.favor_small and settings.limits_enforced
    assert read_slurm_conf(CAPTURES / "mixed" / "slurm.conf").priority == PrioritySettings()
    assert PrioritySettings().fair_tree  # 22.05's default
    path.write_text(conf + "PriorityWeightAge=lots\n")
    with pytest.raises(ClusterConfigError, match=r"slurm\.conf line \d+: priorityweightage: 'lots' is not"):
        read_slurm_conf(path)


def test_the_toml_priority_table_reads_as_the_slurm_conf_keys(tmp_path: Path) -> None:
    """The live multifactor workload's Priority* keys (tests/data/slurm-22.05-calendar) written as a TOML cluster's
    [priority] table give the same settings; a bad value names the file, the table and the key."""
    conf = read_slurm_conf(DATA / "slurm-22.05-calendar" / "multifactor" / "slurm.conf")
    table = (
        '[priority]\nweight_fairshare = 10000\nweight_age = 1000\nmax_age = 10\ndecay_half_life = "0-00:05"\n'
        'calc_period = 1\nenforce = ["limits", "qos"]\n'
    )
    head = '[[nodes]]\nnames = "n[1-6]"\ncpus = 8\n[[partitions]]\nname = "batch"\nnodes = "ALL"\ndefault = true\n'
    path = tmp_path / "multifactor.toml"
    path.write_text(head + '[scheduler]\npriority_type = "priority/multifactor"\n' + table)
    cluster = read_cluster_toml(path)
    assert cluster.priority == conf.priority and cluster.priority.limits_enforced
    assert cluster.scheduler.priority_type == conf.scheduler.priority_type == "priority/multifactor"
    path.write_text(head + table.replace("calc_period = 1", "calc_period = 0"))
    with pytest.raises(ClusterConfigError, match=r"multifactor\.toml \[priority\]: calc_period: '0' is below"):
        read_cluster_toml(path)
    path.write_text(head + table.replace('decay_half_life = "0-00:05"', "favor_small = 3"))
    with pytest.raises(ClusterConfigError, match=r"\[priority\]: favor_small: "):
        read_cluster_toml(path)
    path.write_text(head + "[priority]\nweight_luck = 1\n")
    with pytest.raises(ClusterConfigError, match=r"\[priority\]: weight_luck: is not a key here"):
        read_cluster_toml(path)


def test_replay_orders_by_fairshare_and_holds_by_limits(tmp_path: Path) -> None:
    """One node of 4 CPUs; every job runs 100 s. u1 (account A) runs job 1 (4 CPUs) from 0; at 10 u1 submits
    job 2 (2 CPUs), at 20 u2 (account B) job 3 (4 CPUs), at 30 u1 job 4 (2 CPUs). priority/basic: 2 at 100,
    3 reserves the node for 200, 4 cannot backfill before it: 300. Multifactor (Fair Tree, every minute)
    puts B's job 3 first at 100 (A has used the machine), then 2 and 4 share the node at 200; with QOS
    MaxJobsPerUser=1, u1's job 4 waits for job 2 to end, held by QOSMaxJobsPerUserLimit."""
    path = tmp_path / "one.toml"
    path.write_text(
        'name = "one"\nselect = "CR_CPU"\n[[nodes]]\nnames = "n1"\ncpus = 4\n[[partitions]]\nname = "p"\n'
        'nodes = "ALL"\ndefault = true\n[scheduler]\nparameters = "bf_interval=1,bf_resolution=1"\n'
    )
    basic = read_cluster_toml(path)
    jobs = pd.DataFrame(
        {
            "job_id": [1, 2, 3, 4],
            "submit": [0, 10, 20, 30],
            "user": [1, 1, 2, 1],
            "group": [1, 1, 2, 1],
            "t_req": 600,
            "procs": [4, 2, 4, 2],
            "queue": 1,
            "executable": 1,
            "t_act": 100,
            "run": 100,
            "wait": 0,
        }
    )
    requests = {job_id: ResourceRequest(tasks=cpus) for job_id, cpus in zip([1, 2, 3, 4], [4, 2, 4, 2], strict=True)}
    names = {"user": {1: "u1", 2: "u2"}, "group": {1: "A", 2: "B"}}

    def run(cluster: Cluster, qos: dict[str, Qos]) -> pd.DataFrame:
        config = SimulationConfig(cluster.procs, backfill=SLURM)
        accounting = SiteAccounting(None, qos)
        result = simulate_cluster(
            jobs, config, open_session("request", jobs), cluster, requests, None, accounting, names
        )
        return result.jobs.set_index("job_id")

    assert run(basic, {})["start"].tolist() == [0, 100, 200, 300]
    multifactor = replace(
        basic,
        scheduler=replace(basic.scheduler, priority_type="priority/multifactor"),
        priority=PrioritySettings(weight_fairshare=1000, calc_period=60, accounting_enforce=frozenset({"limits"})),
    )
    assert run(multifactor, {})["start"].tolist() == [0, 200, 100, 200]
    result = run(multifactor, {"normal": Qos("normal", max_jobs_per_user=1)})
    assert result["start"].tolist() == [0, 200, 100, 300]
    assert result.loc[4, "pending_reason"] == "QOSMaxJobsPerUserLimit"
    # at submission (as sacct's Priority) every job had the first calculation's factor: all users tied at 1
    assert result["priority"].tolist() == [1000, 1000, 1000, 1000]


def test_cli_simulates_with_associations_and_qos(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mixed = CAPTURES / "mixed"
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        (mixed / "slurm.conf").read_text()
        + "PriorityType=priority/multifactor\nPriorityDecayHalfLife=5\nPriorityCalcPeriod=1\n"
        + "PriorityWeightFairshare=10000\nPriorityWeightAge=1000\nAccountingStorageEnforce=limits\n"
    )
    (tmp_path / "gres.conf").write_text((mixed / "gres.conf").read_text())
    assoc = tmp_path / "assoc.txt"
    assoc.write_text(ASSOC_DUMP)
    qos = tmp_path / "qos.txt"
    qos.write_text("Name|Priority|MaxJobsPU\nnormal|0|\nlong|10|1\n")
    out = tmp_path / "jobs.csv"
    args = ["simulate", "--trace", str(mixed / "jobs.sacct"), "--cluster", str(conf), "--scheduler", "slurm"]
    args += ["--machine-procs", "48", "--associations", str(assoc), "--qos-file", str(qos), "--jobs-csv", str(out)]
    assert main(args) == 0
    jobs = pd.read_csv(out)
    assert {"priority", "pending_reason"} <= set(jobs.columns)
    assert jobs["priority"].nunique() > 1
    assert "QOSMaxJobsPerUserLimit" in set(jobs["pending_reason"].dropna())
    assoc.write_text("Account|User|Share\nroot||1\nchem||x\n")
    assert main(args) != 0
    assert "assoc.txt line 3: Share: 'x' is not a whole number" in capsys.readouterr().err
