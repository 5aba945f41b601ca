"""How good an estimate is: Tang et al.'s accuracy (Eq. 3) and the NA/OE/UE/BE categories.

One implementation, vectorised, shared by offline evaluation and by the
simulator's report of the estimates it used.
"""

from __future__ import annotations

import math

import numpy as np

#: An underestimate by more than this many seconds is a bad estimate (BE).
BAD_UNDERESTIMATE_SECONDS = 1800


def accuracy(t_est: np.ndarray, t_act: np.ndarray) -> np.ndarray:
    """Eq. 3: 1 if equal, t_act/t_est if over, t_est/t_act if under (0 for a 0-second job)."""
    est = np.asarray(t_est, dtype=np.float64)
    act = np.asarray(t_act, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        over = np.where(est > 0, act / est, 0.0)
        under = np.where(act > 0, est / act, 0.0)
    return np.where(est == act, 1.0, np.where(act < est, over, under))


def categories(t_est: np.ndarray, t_act: np.ndarray, t_req: np.ndarray) -> dict[str, float]:
    """Fractions of jobs in each category (docs/definitions.md).

    NA: t_est == t_req; OE: t_act <= t_est < t_req; UE: under by at most 1800 s;
    BE: under by more than 1800 s. The four add up to 1.
    """
    est = np.asarray(t_est)
    act = np.asarray(t_act)
    req = np.asarray(t_req)
    n = max(len(est), 1)
    under = est < act
    shortfall = act - est
    na = (est == req) & ~under
    return {
        "NA": float(np.count_nonzero(na)) / n,
        "OE": float(np.count_nonzero(~na & ~under)) / n,
        "UE": float(np.count_nonzero(under & (shortfall <= BAD_UNDERESTIMATE_SECONDS))) / n,
        "BE": float(np.count_nonzero(under & (shortfall > BAD_UNDERESTIMATE_SECONDS))) / n,
    }


def summarize(t_est: np.ndarray, t_act: np.ndarray, t_req: np.ndarray) -> dict[str, float]:
    """The prediction-quality block every report shares."""
    est = np.asarray(t_est, dtype=np.float64)
    act = np.asarray(t_act, dtype=np.float64)
    acc = accuracy(est, act)
    result = {
        "accuracy_mean": float(acc.mean()) if len(acc) else float("nan"),
        "accuracy_median": float(np.median(acc)) if len(acc) else float("nan"),
        "underestimated": float(np.count_nonzero(est < act)) / max(len(est), 1),
    }
    result.update(categories(est, act, t_req))
    return result


def _defined(value: float) -> float | None:
    """NaN becomes None, so that reports are valid JSON."""
    return None if math.isnan(value) else value


def prediction_scores(t_sched: np.ndarray, t_act: np.ndarray, t_req: np.ndarray) -> dict[str, float | None]:
    """Tang's accuracy and categories plus absolute errors and lambda.

    lambda = mean |t_sched - t_act| / mean |t_req - t_act|: below 1 the
    estimates beat the requests (None when every request was exact).
    """
    error = np.abs(np.asarray(t_sched, dtype=np.float64) - t_act)
    request_error = np.abs(np.asarray(t_req, dtype=np.float64) - t_act).mean()
    scores: dict[str, float | None] = {key: _defined(value) for key, value in summarize(t_sched, t_act, t_req).items()}
    scores["mae"] = float(error.mean())
    scores["medae"] = float(np.median(error))
    scores["lambda"] = float(error.mean() / request_error) if request_error > 0 else None
    return scores
