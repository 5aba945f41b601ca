"""A site's accounts, users, shares, QOS and limits, from the files `sacctmgr --parsable2` writes.

Two commands a site runs (any order of fields; the ones not modelled are ignored)::

    sacctmgr show assoc --parsable2 > assoc.txt       # or: sacctmgr show assoc tree --parsable2
    sacctmgr show qos --parsable2 > qos.txt

The association file gives the account tree (the parent of an account is the
`ParentName` field when the dump has it, else its indentation under `tree`,
else root), each association's `Share` (FairShare; `parent` for a user who
shares its account's), `Priority`, and the limits `GrpJobs`, `GrpTRES`,
`MaxJobs`, `MaxTRES` and `MaxWall`; the QOS file each QOS's `Priority`,
`UsageFactor` and `GrpJobs`, `GrpTRES`, `MaxTRES`, `MaxWall`,
`MaxTRESPU`/`MaxJobsPU`, `MaxTRESPA`/`MaxJobsPA`. TRES limits are read for
`cpu`, `node` and `gres/gpu`; others (memory, billing, licences) are listed in
`notes`. As slurmdbd stores them, a user association's Max* limits and
priority that are unset come from the nearest account above that sets them
(acct_policy.c relies on it: "we have pre-propagated them").

Bad input raises `ClusterConfigError` naming the file, line and field.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from simulator.clusterconf.settings import ClusterConfigError, Where, slurm_minutes

ROOT = "root"
ASSOC_COMMAND = "sacctmgr show assoc --parsable2"
QOS_COMMAND = "sacctmgr show qos --parsable2"
#: The TRES a limit is read for: sacctmgr's name -> TresLimits field.
TRES_NAMES = {"cpu": "cpu", "node": "node", "gres/gpu": "gpu"}


@dataclass(frozen=True, slots=True)
class TresLimits:
    """Counts of CPUs, nodes and GPUs a limit allows (None: no limit)."""

    cpu: int | None = None
    node: int | None = None
    gpu: int | None = None

    def inherit(self, parent: TresLimits) -> TresLimits:
        """These limits, each unset one taken from `parent`."""
        return TresLimits(*(mine if mine is not None else theirs for mine, theirs in zip(self, parent, strict=True)))

    def __iter__(self) -> Iterator[int | None]:
        return iter((self.cpu, self.node, self.gpu))


@dataclass(frozen=True, slots=True)
class Association:
    """One association: an account (`user` None) or a user in an account, optionally for one partition."""

    account: str
    user: str | None = None
    parent: str | None = ROOT  # the parent account; None for root itself
    partition: str | None = None
    shares: int | None = 1  # FairShare; None: `parent` (the account's)
    priority: int | None = None
    grp_jobs: int | None = None
    grp_tres: TresLimits = TresLimits()
    max_jobs: int | None = None
    max_tres: TresLimits = TresLimits()  # per job
    max_wall: int | None = None  # seconds

    @property
    def key(self) -> tuple[str, str | None, str | None]:
        return (self.account, self.user, self.partition)


@dataclass(frozen=True, slots=True)
class Qos:
    """One QOS: its priority, usage factor and limits (None: no limit; times in seconds)."""

    name: str
    priority: int = 0
    usage_factor: float = 1.0
    grp_jobs: int | None = None
    grp_tres: TresLimits = TresLimits()
    max_tres: TresLimits = TresLimits()  # per job
    max_wall: int | None = None
    max_tres_per_user: TresLimits = TresLimits()
    max_jobs_per_user: int | None = None
    max_tres_per_account: TresLimits = TresLimits()
    max_jobs_per_account: int | None = None


@dataclass(frozen=True)
class Accounts:
    """The association tree: root first, every account after its parent; `notes` says what was not modelled."""

    associations: tuple[Association, ...]
    source: str = ""
    notes: tuple[str, ...] = ()
    _index: dict[tuple[str, str | None, str | None], int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._index.update((assoc.key, position) for position, assoc in enumerate(self.associations))

    def find(self, user: str, account: str, partition: str | None) -> int | None:
        """The position of the user's association in `account` (for `partition` if it has its own), or None."""
        index = self._index.get((account, user, partition))
        return self._index.get((account, user, None)) if index is None else index

    def account(self, name: str) -> int | None:
        """The position of the account's own association, or None."""
        return self._index.get((name, None, None))

    def with_users(self, owners: Iterable[tuple[str, str]]) -> tuple[Accounts, int]:
        """These associations with each (user, account) pair that has none added with one share (its account
        under root if it is missing too), as `sacctmgr add user` would; and how many were added."""
        added: list[Association] = []
        known = set(self._index)
        for user, account in sorted(set(owners)):
            if (account, None, None) not in known:
                added.append(Association(account))
                known.add((account, None, None))
            if (account, user, None) not in known:
                added.append(Association(account, user, parent=account))
                known.add((account, user, None))
        if not added:
            return self, 0
        return Accounts(self.associations + tuple(added), self.source, self.notes), len(added)


def equal_shares(owners: Iterable[tuple[str, str]]) -> Accounts:
    """The trace's accounts under root and its users in their accounts, every one with one share: the tree
    when the site gave none."""
    accounts, _ = Accounts((Association(ROOT, parent=None),), "the trace's accounts, equal shares").with_users(owners)
    return accounts


def read_associations(path: str | Path, cluster: str | None = None) -> Accounts:
    """The association tree of `sacctmgr show assoc --parsable2` (of `cluster` when the dump holds several)."""
    source = str(path)
    rows, notes = parsable_rows(Path(path), ("Account", "User"), ASSOC_COMMAND)
    clusters = sorted({row.get("Cluster", "") for _, row in rows} - {""})
    if len(clusters) > 1:
        if cluster not in clusters:
            raise ClusterConfigError(
                f"{source}: associations of clusters {', '.join(clusters)}: none is the simulated cluster "
                f"{cluster!r}; dump one cluster (sacctmgr show assoc cluster=NAME --parsable2)"
            )
        rows = [(line, row) for line, row in rows if row.get("Cluster") == cluster]
    made: list[Association] = []
    parents: list[tuple[int, str]] = []  # (indentation, account) of the accounts above, for a `tree` dump
    for line, row in rows:
        where = Where(source, line)
        made.append(_association(row, where, parents))
    return Accounts(_ordered(made, source), source, tuple(notes))


def _association(row: Mapping[str, str], where: Where, parents: list[tuple[int, str]]) -> Association:
    raw_account = row.get("Account", "")
    account, user = raw_account.strip(), row.get("User", "").strip() or None
    if not account:
        raise where.error("Account", "empty: every association names an account")
    depth = len(raw_account) - len(raw_account.lstrip(" "))
    if user is None:
        while parents and parents[-1][0] >= depth:
            parents.pop()
        parent: str | None = None if account == ROOT else (parents[-1][1] if parents else ROOT)
        parents.append((depth, account))
    else:
        parent = account
    named_parent = row.get("ParentName", "").strip()
    if user is None and named_parent:
        parent = named_parent
    shares = _shares(row.get("Share", ""), where)
    if shares is None and user is None:
        raise where.error("Share", "`parent` on an account is not modelled (only on users)")
    partition = row.get("Partition", "").strip() or None
    return Association(account, user, parent, partition, shares, **_read_fields(row, where, _ASSOC_FIELDS))


def _ordered(made: list[Association], source: str) -> tuple[Association, ...]:
    """Root first, each account after its parent, users after their account; Max* limits and priorities
    inherited down the tree; refuse a tree that is not one."""
    accounts = {assoc.account: assoc for assoc in made if assoc.user is None}
    if ROOT not in accounts:
        accounts[ROOT] = Association(ROOT, parent=None)
    for assoc in made:
        if assoc.user is not None and assoc.account not in accounts:
            raise ClusterConfigError(f"{source}: user {assoc.user} is in account {assoc.account}, which has no line")
        if assoc.user is None and assoc.parent is not None and assoc.parent not in accounts:
            raise ClusterConfigError(f"{source}: account {assoc.account}'s parent {assoc.parent} has no line")
    ordered: list[Association] = []
    resolved: dict[str, Association] = {}

    def visit(name: str, trail: tuple[str, ...]) -> Association:
        if name in resolved:
            return resolved[name]
        if name in trail:
            raise ClusterConfigError(f"{source}: accounts {' -> '.join((*trail, name))} form a cycle")
        assoc = accounts[name]
        if assoc.parent is not None:
            assoc = _inherit(assoc, visit(assoc.parent, (*trail, name)))
        resolved[name] = assoc
        ordered.append(assoc)
        return assoc

    for name in accounts:
        visit(name, ())
    users = [_inherit(assoc, resolved[assoc.account]) for assoc in made if assoc.user is not None]
    return tuple(ordered + users)


def _inherit(assoc: Association, parent: Association) -> Association:
    return replace(
        assoc,
        priority=assoc.priority if assoc.priority is not None else parent.priority,
        max_jobs=assoc.max_jobs if assoc.max_jobs is not None else parent.max_jobs,
        max_tres=assoc.max_tres.inherit(parent.max_tres),
        max_wall=assoc.max_wall if assoc.max_wall is not None else parent.max_wall,
    )


def read_qos(path: str | Path) -> dict[str, Qos]:
    """Each QOS of `sacctmgr show qos --parsable2`, by name."""
    source = str(path)
    rows, _ = parsable_rows(Path(path), ("Name",), QOS_COMMAND)
    table: dict[str, Qos] = {}
    for line, row in rows:
        where = Where(source, line)
        name = row["Name"].strip()
        if not name:
            raise where.error("Name", "empty: every QOS has a name")
        if name in table:
            raise where.error("Name", f"QOS {name} appears twice")
        fields = _read_fields(row, where, _QOS_FIELDS)
        fields["priority"] = fields["priority"] or 0
        table[name] = Qos(name, usage_factor=_factor(row.get("UsageFactor", ""), where), **fields)
    return table


def parsable_rows(
    path: Path, required: tuple[str, ...], command: str
) -> tuple[list[tuple[int, dict[str, str]]], list[str]]:
    """The file's rows by field name, with their line numbers; refuse a file that is not the command's output."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise ClusterConfigError(f"{source}: cannot be read ({error.strerror or error})") from None
    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise ClusterConfigError(f"{source}: empty file; write it with: {command} > FILE")
    header_line, header = lines[0]
    fields = next(csv.reader(io.StringIO(header), delimiter="|", quoting=csv.QUOTE_NONE))
    missing = [name for name in required if name not in fields]
    if missing:
        raise ClusterConfigError(
            f"{source} line {header_line}: no {' or '.join(missing)} field in the header ({header[:120]}); "
            f"is this `{command}` output (with its header)?"
        )
    rows = []
    for number, line in lines[1:]:
        values = line.split("|")
        if len(values) != len(fields):
            raise ClusterConfigError(f"{source} line {number}: {len(values)} fields where the header has {len(fields)}")
        rows.append((number, dict(zip(fields, values, strict=True))))
    return rows, _unmodelled(rows, source)


def _unmodelled(rows: list[tuple[int, dict[str, str]]], source: str) -> list[str]:
    """What the file sets that the simulator does not enforce (each field once)."""
    ignored = ("GrpSubmit", "GrpWall", "GrpTRESMins", "GrpTRESRunMins", "MaxSubmit", "MaxTRESMins",
               "MaxTRESPerNode", "MaxSubmitPU", "MaxSubmitPA", "MinTRES", "UsageThres")  # fmt: skip
    found = sorted({name for _, row in rows for name in ignored if row.get(name, "").strip()})
    return [f"{source}: {name} limits are not modelled" for name in found]


def _read_fields(row: Mapping[str, str], where: Where, readers: Mapping[str, tuple[Reader, str]]) -> dict[str, Any]:
    """Each field of `readers` (field -> (reader, sacctmgr's column)) read from `row`."""
    return {name: reader(row, column, where) for name, (reader, column) in readers.items()}


def _number(row: Mapping[str, str], name: str, where: Where) -> int | None:
    text = row.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise where.error(name, f"{text!r} is not a whole number")
    return int(text)


def _shares(text: str, where: Where) -> int | None:
    text = text.strip()
    if text.lower() == "parent":
        return None
    if not text:
        return 1
    if not text.isdigit():
        raise where.error("Share", f"{text!r} is not a whole number or `parent`")
    return int(text)


def _factor(text: str, where: Where) -> float:
    text = text.strip()
    if not text:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        raise where.error("UsageFactor", f"{text!r} is not a number") from None
    if value < 0:
        raise where.error("UsageFactor", f"{text!r} is negative")
    return value


def _wall(row: Mapping[str, str], name: str, where: Where) -> int | None:
    text = row.get(name, "").strip()
    if not text:
        return None
    try:
        minutes = slurm_minutes(text)
    except ValueError as error:
        raise where.error(name, str(error)) from None
    return None if minutes is None else minutes * 60


def _tres(row: Mapping[str, str], name: str, where: Where) -> TresLimits:
    """A TRES list (`cpu=8,node=2,gres/gpu=4,mem=16G`): the cpu, node and gres/gpu counts."""
    text = row.get(name, "").strip()
    counts: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        tres, equals, count = item.partition("=")
        if not equals or not tres:
            raise where.error(name, f"{item!r} is not TRES=COUNT")
        if tres in TRES_NAMES:
            if not count.isdigit():
                raise where.error(name, f"{item!r}: the count is not a whole number")
            counts[TRES_NAMES[tres]] = int(count)
    return TresLimits(**counts)


Reader = Callable[[Mapping[str, str], str, Where], Any]
#: The limits of an association and of a QOS: field -> (how it is read, sacctmgr's column).
_ASSOC_FIELDS: dict[str, tuple[Reader, str]] = {
    "priority": (_number, "Priority"),
    "grp_jobs": (_number, "GrpJobs"),
    "grp_tres": (_tres, "GrpTRES"),
    "max_jobs": (_number, "MaxJobs"),
    "max_tres": (_tres, "MaxTRES"),
    "max_wall": (_wall, "MaxWall"),
}
_QOS_FIELDS: dict[str, tuple[Reader, str]] = {
    "priority": (_number, "Priority"),
    "grp_jobs": (_number, "GrpJobs"),
    "grp_tres": (_tres, "GrpTRES"),
    "max_tres": (_tres, "MaxTRES"),
    "max_wall": (_wall, "MaxWall"),
    "max_tres_per_user": (_tres, "MaxTRESPU"),
    "max_jobs_per_user": (_number, "MaxJobsPU"),
    "max_tres_per_account": (_tres, "MaxTRESPA"),
    "max_jobs_per_account": (_number, "MaxJobsPA"),
}
