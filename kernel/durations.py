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
