"""Slurm 22.05's fair-share factor: usage decayed with a half-life, classic or Fair Tree.

Read in `src/plugins/priority/multifactor/priority_multifactor.c` and
`fair_tree.c` (tag slurm-22-05-8-1) and `src/common/assoc_mgr.c`:

- usage: a job adds `delta x decay_factor**delta x CPUs x UsageFactor` to its
  association and every one above it, where `delta` is the seconds since the
  later of its start and the last calculation, at each calculation
  (`_apply_new_usage`, from the decay thread) and at its end
  (`priority_p_job_end`); `decay_factor = 1 - 0.693 / PriorityDecayHalfLife`
  (`_decay_thread`, a first-order approximation of 2**(-1/half-life)); every
  calculation first multiplies all usage by `decay_factor**(seconds since the
  last)` (`_apply_decay`); PriorityUsageResetPeriod zeroes it (`_reset_usage`);
- shares: `level_shares` is the sum of the siblings' raw shares; classic
  normalises a share as the product of share / level_shares up to root
  (`_normalize_assoc_shares_traditional`), Fair Tree as its own ratio
  (`_normalize_assoc_shares_fair_tree`);
- classic: usage_norm = usage / root's usage; effective usage = usage_norm +
  (parent's effective - usage_norm) x shares / level_shares (`_set_usage_efctv`;
  children of root: usage_norm); factor = 2**(-(effective / shares_norm) /
  FairShareDampeningFactor) (`priority_p_calc_fs_factor`). Accounts' effective
  usage is computed at the start of each calculation, before the decay
  (`_set_children_usage_efctv`); a user's when first needed after it;
- Fair Tree (`_calc_tree_fs`): each level's associations are sorted by
  level_fs = shares_norm / (usage / parent's usage) (infinite without usage),
  users before accounts on ties; walking the tree in that order ranks users
  from the number of user associations down, tied users sharing a rank; the
  factor is rank / number of users.

An association is a position in `Accounts.associations`; only users run jobs,
so the usage of an account is the sum of its users' below it.
"""

from __future__ import annotations

import math
import sys
from calendar import monthrange
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from simulator.cluster import PrioritySettings
from simulator.clusterconf.sacctmgr import Accounts, Association

#: Slurm's clamp on the decay of one calculation (`real_decay < DBL_MIN`).
DBL_MIN = sys.float_info.min


@dataclass(slots=True)
class RunningUsage:
    """A running job as usage sees it: when usage was last added for it, at what rate, to which association."""

    since: int
    rate: float  # billable CPUs x the QOS's UsageFactor
    assoc: int


class FairShare:
    """Usage per association and the fair-share factor of each user association (module docstring)."""

    def __init__(self, accounts: Accounts, settings: PrioritySettings) -> None:
        assocs = accounts.associations
        position = {assoc.key: index for index, assoc in enumerate(assocs)}
        self.settings = settings
        self.size = len(assocs)
        self.parent = [_parent(assoc, position) for assoc in assocs]
        self.is_user = [assoc.user is not None for assoc in assocs]
        self.shares = [assoc.shares for assoc in assocs]  # None: `parent`
        self.children: list[list[int]] = [[] for _ in assocs]
        for index, parent in enumerate(self.parent):
            if parent >= 0:
                self.children[parent].append(index)
        self.users = sum(self.is_user)
        self.level_shares = [0] * self.size
        for index, parent in enumerate(self.parent):
            if parent >= 0:
                self.level_shares[index] = sum(s for s in (self.shares[c] for c in self.children[parent]) if s)
        self.shares_norm = [self._shares_norm(index) for index in range(self.size)]
        half_life = settings.decay_half_life
        self.decay_factor = 1 - 0.693 / half_life if half_life > 0 else 1.0
        self.usage = np.zeros(self.size)  # usage_raw of the user associations (accounts: sums below them)
        self.factors = np.zeros(self.size)  # each user association's fair-share factor, as last computed
        self._account_effective: list[float] = [0.0] * self.size
        self._user_effective: dict[int, float] = {}
        self._totals = np.zeros(self.size)
        self._stale = False  # usage changed since `_totals` was summed

    def _shares_norm(self, index: int) -> float:
        """The normalised share, as assoc_mgr's normalisation for the algorithm in use computes it."""
        if self.parent[index] < 0:
            return 1.0
        if self.shares[index] is None:  # FairShare=parent: the account's
            return self._shares_norm(self.parent[index])
        if self.settings.fair_tree:
            level = self.level_shares[index]
            return (self.shares[index] or 0) / level if level else 0.0
        norm, at = 1.0, index
        while self.parent[at] >= 0:
            level = self.level_shares[at]
            norm = norm * (self.shares[at] or 0) / level if level else 0.0
            at = self.parent[at]
        return norm

    def add(self, job: RunningUsage, until: int) -> None:
        """Usage of `job` from `job.since` to `until`, decayed as _apply_new_usage decays it."""
        delta = until - job.since
        if delta > 0:
            self.usage[job.assoc] += delta * self.decay_factor**delta * job.rate
            self._stale = True
        job.since = max(job.since, until)

    def calculate(self, elapsed: int | None, running: list[RunningUsage], now: int) -> None:
        """One pass of the decay thread at `now`, `elapsed` seconds after the last (None: the first, which only
        computes the factors)."""
        if not self.settings.fair_tree:
            self._totals = self._subtree_usage()
            self._set_account_effective()
        if elapsed is not None and elapsed > 0:
            self.usage *= max(self.decay_factor**elapsed, DBL_MIN)
            for job in running:
                self.add(job, now)
        self._totals = self._subtree_usage()
        if self.settings.fair_tree:
            self._fair_tree()

    def reset(self) -> None:
        """PriorityUsageResetPeriod: all usage back to zero."""
        self.usage[:] = 0.0
        self._stale = True

    def factor(self, assoc: int) -> float:
        """The fair-share factor a job of user association `assoc` gets now (0 to 1)."""
        if self.settings.fair_tree:
            return float(self.factors[assoc])
        fs_assoc = self.parent[assoc] if self.shares[assoc] is None else assoc
        norm = self.shares_norm[fs_assoc]
        if norm <= 0:
            return 0.0
        return float(2.0 ** (-(self._effective(fs_assoc) / norm) / self.settings.dampening_factor))

    def _subtree_usage(self) -> np.ndarray:
        """usage_raw of every association: its users' usage summed up the tree (children come after parents)."""
        self._stale = False
        totals = self.usage.copy()
        for index in range(self.size - 1, -1, -1):
            if self.parent[index] >= 0:
                totals[self.parent[index]] += totals[index]
        return totals

    def _usage_norm(self, index: int) -> float:
        root = self._totals[0]
        return 0.0 if not root else min(float(self._totals[index] / root), 1.0)

    def _effective_of(self, index: int, parent_effective: float) -> float:
        """_set_assoc_usage_efctv for the classic algorithm."""
        if self.parent[index] == 0:
            return self._usage_norm(index)
        if self.shares[index] is None:
            return parent_effective
        level = self.level_shares[index]
        if not level:
            return parent_effective
        usage = self._usage_norm(index)
        return usage + (parent_effective - usage) * ((self.shares[index] or 0) / level)

    def _set_account_effective(self) -> None:
        """_set_children_usage_efctv: every account's effective usage, top down; users' to be computed anew."""
        for index in range(1, self.size):
            if not self.is_user[index]:
                parent = self.parent[index]
                self._account_effective[index] = self._effective_of(index, self._account_effective[parent])
        self._user_effective.clear()

    def _effective(self, index: int) -> float:
        if not self.is_user[index]:
            return self._account_effective[index]
        if index not in self._user_effective:
            if self._stale:
                self._totals = self._subtree_usage()
            self._user_effective[index] = self._effective_of(index, self._account_effective[self.parent[index]])
        return self._user_effective[index]

    def _level_fs(self, index: int) -> float:
        """_calc_assoc_fs: shares_norm / (usage / parent's usage); users with FairShare=parent rank first."""
        if self.shares[index] is None:
            return math.inf
        parent_usage = self._totals[self.parent[index]]
        usage = float(self._totals[index] / parent_usage) if parent_usage else 0.0
        norm = self.shares_norm[index]
        if norm == 0:
            return 0.0
        return math.inf if usage == 0 else norm / usage

    def _fair_tree(self) -> None:
        """_apply_priority_fs: rank every user from the root down."""
        state = [self.users, self.users]  # rank, rank without ties
        self._rank_level(self.children[0], state, account_tied=False)

    def _rank_level(self, siblings: list[int], state: list[int], account_tied: bool) -> None:
        """_calc_tree_fs for one level: sort by level_fs (users first on ties), rank users, recurse into accounts.

        Tied accounts are never merged in 22.05: `_count_tied_accounts` stops at the first account it meets.
        """
        level = {index: self._level_fs(index) for index in siblings}
        ordered = sorted(siblings, key=lambda index: (-level[index], not self.is_user[index]))
        previous: float | None = None
        for position, index in enumerate(ordered):
            tied = account_tied if position == 0 and account_tied else previous == level[index]
            if self.is_user[index]:
                if not tied:
                    state[0] = state[1]
                self.factors[index] = state[0] / self.users
                state[1] -= 1
            else:
                self._rank_level(self.children[index], state, tied)
            previous = level[index]


def _parent(assoc: Association, position: dict[tuple[str, str | None, str | None], int]) -> int:
    """The position of an association's parent (its account's for a user, its parent account's for an account;
    -1 for root)."""
    if assoc.user is None and assoc.parent is None:
        return -1
    name = assoc.account if assoc.user is not None else assoc.parent
    return position[(name or "", None, None)]


def next_reset(period: str, last: int) -> int | None:
    """_next_reset: when usage is next zeroed after a reset at `last` (seconds, UTC); None: never."""
    if period in ("NONE", "NOW"):
        return None
    day = datetime.fromtimestamp(last, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "DAILY":
        moment = day + timedelta(days=1)
    elif period == "WEEKLY":
        moment = day + timedelta(days=7 - (day.weekday() + 1) % 7)  # tm_wday counts from Sunday
    elif period == "MONTHLY":
        moment = day.replace(day=1) + timedelta(days=monthrange(day.year, day.month)[1])
    elif period == "QUARTERLY":
        quarter = (day.month - 1) // 3 * 3 + 4
        moment = day.replace(year=day.year + quarter // 13, month=(quarter - 1) % 12 + 1, day=1)
    else:  # YEARLY
        moment = day.replace(year=day.year + 1, month=1, day=1)
    return int(moment.timestamp())
