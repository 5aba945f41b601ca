"""slurm.conf's Priority* keys (and AccountingStorageEnforce) as `PrioritySettings`, read as Slurm 22.05 reads them.

`src/common/read_config.c` (`_validate_and_set_defaults`): PriorityDecayHalfLife,
PriorityCalcPeriod and PriorityMaxAge are Slurm times in whole minutes
(`time_str2mins`); the weights are unsigned 32-bit numbers; PriorityFlags is a
comma-separated list in which FAIR_TREE is on unless NO_FAIR_TREE or
DEPTH_OBLIVIOUS is given. Bad values raise `ClusterConfigError` naming the
file, line and key, as slurmctld refuses to start on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from simulator.cluster import PRIORITY_FLAGS, RESET_PERIODS, PrioritySettings
from simulator.clusterconf.settings import Value, _boolean, slurm_minutes

#: The integer keys: slurm.conf key (lower case) -> PrioritySettings field.
_WEIGHTS = {
    "priorityweightage": "weight_age",
    "priorityweightassoc": "weight_assoc",
    "priorityweightfairshare": "weight_fairshare",
    "priorityweightjobsize": "weight_job_size",
    "priorityweightpartition": "weight_partition",
    "priorityweightqos": "weight_qos",
    "fairsharedampeningfactor": "dampening_factor",
}
#: The time keys: slurm.conf key (lower case) -> (PrioritySettings field, the smallest value in minutes).
_TIMES = {
    "prioritydecayhalflife": ("decay_half_life", 0),
    "prioritycalcperiod": ("calc_period", 1),
    "prioritymaxage": ("max_age", 0),
}
#: AccountingStorageEnforce's words (read_config.c `_set_enforce`).
ENFORCE_WORDS = frozenset(
    {"0", "1", "2", "associations", "limits", "nojobs", "nosteps", "qos", "safe", "wckeys", "all"}
)
#: Keys read but not modelled: said in the cluster's notes when set.
_NOT_MODELLED = {
    "priorityweighttres": "PriorityWeightTRES (TRES factors) is not modelled",
    "prioritysitefactorplugin": "PrioritySiteFactorPlugin (site factors) is not modelled",
}
_UINT32 = 0xFFFFFFFF


def priority_settings(values: Mapping[str, Value], notes: list[str]) -> PrioritySettings:
    """The multifactor settings from a slurm.conf's global keys (lower-case keys; absent keys keep the defaults)."""
    settings: dict[str, Any] = {}
    for key, field_name in _WEIGHTS.items():
        if key in values:
            settings[field_name] = _uint32(values[key], key)
    for key, (field_name, smallest) in _TIMES.items():
        if key in values:
            settings[field_name] = _minutes(values[key], key, smallest) * 60
    if "priorityfavorsmall" in values:
        settings["favor_small"] = _boolean(values["priorityfavorsmall"], "PriorityFavorSmall")
    if "priorityusageresetperiod" in values:
        settings["usage_reset_period"] = _reset_period(values["priorityusageresetperiod"])
    if "priorityflags" in values:
        settings["flags"] = _words(values["priorityflags"], "PriorityFlags", PRIORITY_FLAGS, upper=True)
    if "accountingstorageenforce" in values:
        words = _words(values["accountingstorageenforce"], "AccountingStorageEnforce", ENFORCE_WORDS, upper=False)
        settings["accounting_enforce"] = words
    chosen = replace(PrioritySettings(), **settings)
    if chosen.decay_half_life == 0 and chosen.usage_reset_period == "NONE" and "prioritydecayhalflife" in values:
        raise values["prioritydecayhalflife"].where.error(
            "PriorityDecayHalfLife", "0 needs a PriorityUsageResetPeriod (Slurm refuses it: usage would roll over)"
        )
    if "DEPTH_OBLIVIOUS" in chosen.flags:
        notes.append("PriorityFlags=DEPTH_OBLIVIOUS is not modelled: fair-share is computed as the classic algorithm")
    notes.extend(message for key, message in _NOT_MODELLED.items() if key in values)
    return chosen


def _uint32(value: Value, key: str) -> int:
    text = value.text.strip()
    if not text.isdigit() or int(text) > _UINT32:
        raise value.where.error(key, f"{text!r} is not a whole number from 0 to {_UINT32}")
    return int(text)


def _minutes(value: Value, key: str, smallest: int) -> int:
    try:
        minutes = slurm_minutes(value.text)
    except ValueError as error:
        raise value.where.error(key, str(error)) from None
    if minutes is None:  # INFINITE: a half-life or an age that is never reached
        return 0 if key == "prioritydecayhalflife" else _UINT32 // 60
    if minutes < smallest:
        raise value.where.error(key, f"{value.text!r} is below {smallest} minute(s)")
    return minutes


def _reset_period(value: Value) -> str:
    text = value.text.strip().upper()
    if text not in RESET_PERIODS:
        raise value.where.error("PriorityUsageResetPeriod", f"{value.text!r} is not one of {', '.join(RESET_PERIODS)}")
    return text


def _words(value: Value, key: str, known: frozenset[str], *, upper: bool) -> frozenset[str]:
    words = {word.strip().upper() if upper else word.strip().lower() for word in value.text.split(",")}
    words.discard("")
    unknown = sorted(words - known)
    if unknown:
        raise value.where.error(key, f"{', '.join(unknown)}: not one of {', '.join(sorted(known))}")
    return frozenset(words)
