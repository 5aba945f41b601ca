"""Durations of trace time as users write them in SPECs: `30d`, `12h`, `30m`, `90s`.

One grammar for every estimator parameter that is a span of trace time
(history windows, retraining periods, calibration windows), so that `7d`
means the same everywhere and the error says the same everywhere.
"""

from __future__ import annotations

from collections.abc import Collection

SECONDS_PER_DAY = 86_400
#: Seconds per unit.
DURATION_UNITS = {"d": SECONDS_PER_DAY, "h": 3600, "m": 60, "s": 1}


def parse_duration(
    text: str,
    name: str,
    *,
    unbounded: str | None = None,
    zero: bool = False,
    allowed: Collection[str] | None = None,
) -> int | None:
    """Seconds in a duration such as `90d`, `12h`, `30m` or `90s`; None for the `unbounded` keyword.

    `unbounded` is the word for "no limit" where a parameter has one (`all`
    for a history window, `never` for a retraining period); `zero` admits a
    zero duration; `allowed`, when given, restricts the accepted spellings
    (the percentile adjuster only knows the paper's windows).
    """
    if allowed is not None and text not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {text!r}")
    if unbounded is not None and text == unbounded:
        return None
    number, unit = text[:-1], text[-1:]
    if unit not in DURATION_UNITS or not number.isdigit() or (int(number) == 0 and not zero):
        alternative = f", or {unbounded}" if unbounded is not None else ""
        raise ValueError(
            f"{name} must be a whole number of days, hours, minutes or seconds such as 7d, 12h, 30m or 90s"
            f"{alternative}; got {text!r}"
        )
    return int(number) * DURATION_UNITS[unit]


def required_duration(text: str, name: str, *, zero: bool = False) -> int:
    """A duration that must be bounded (no keyword for "no limit")."""
    seconds = parse_duration(text, name, zero=zero)
    assert seconds is not None  # without `unbounded`, parse_duration returns a number or raises
    return seconds


#: Slurm's words for "no time limit" (`sbatch --time`, `scontrol`, sacct's Timelimit).
SLURM_UNLIMITED = frozenset({"UNLIMITED", "INFINITE"})
SLURM_DURATION_HELP = "Slurm's syntax: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS; a bare number is minutes"


def slurm_duration(text: str) -> int | None:
    """Seconds in a time limit written as Slurm reads `--time`; None for UNLIMITED (or INFINITE).

    A bare number is minutes, as `sbatch --time=1440` is a day: `MM`, `MM:SS`,
    `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`. Raises ValueError saying so
    for anything else.
    """
    word = text.strip()
    if word.upper() in SLURM_UNLIMITED:
        return None
    days, dash, clock = word.rpartition("-")
    parts = clock.split(":")
    numbers = [days] * bool(dash) + parts
    if not all(part.isdigit() for part in numbers) or len(parts) > 3:
        raise ValueError(f"{text!r} is not a time limit in {SLURM_DURATION_HELP}")
    values = [int(part) for part in parts]
    if dash:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = [*values, 0, 0][:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(values) == 3:  # HH:MM:SS
        return (values[0] * 60 + values[1]) * 60 + values[2]
    minutes, seconds = [*values, 0][:2]  # MM or MM:SS
    return minutes * 60 + seconds


def slurm_clock(seconds: int) -> str:
    """`seconds` as Slurm prints a limit, [D-]HH:MM:SS: what `slurm_duration` reads back to the same number."""
    days, rest = divmod(seconds, SECONDS_PER_DAY)
    return (f"{days}-" if days else "") + f"{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
