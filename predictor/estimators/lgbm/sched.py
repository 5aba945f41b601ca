"""`lgbm-sched`: lgbm-quantile's runtime distribution, turned into the estimate EASY-SJBF plans best with.

An accuracy-oriented estimate sits high in the distribution (lgbm-quantile's
`alpha=0.9`, or a 6% underestimation target). In EASY-SJBF with a correction
to the request (Tsafrir's EASY++) the costs are the other way round: an
overestimate pushes a short job back in the backfill order and hides the hole
it would fit in, while an underestimate costs one correction to t_req. The
q-quantile minimises the expected pinball cost with weight q on underestimates
and 1 - q on overestimates, so a scheduling estimate takes a quantile below
the median. `scale` multiplies it by a safety margin for the reservations that
running jobs' estimates set; it did not pay (docs/lgbm-sched.md), so it is off
by default. The defaults were chosen once for every trace (docs/lgbm-sched.md):
the 0.3 quantile gained more than the median, a high quantile, a margin, or
"short jobs only, t_req for the rest" on the four traces of Gaussier et al.
taken together, and it improved the average wait of EASY-SJBF on each.

Everything else (features, training schedule, causality, and calibration when
`target_under` > 0, whose choice is then scaled) is lgbm-quantile's. Unlike
lgbm-quantile, it reads its quantile at the model's own level by default
(`recalibrate=false`): 0.3 was chosen for what it does to the schedule, not for
what it covers, and recalibrating it would move every estimate it was chosen by.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from predictor.estimators.base import parameter
from predictor.estimators.lgbm.estimator import LGBMQuantileEstimator, quantile_level, underestimation_share


@dataclass(kw_only=True, eq=False, repr=False)
class LGBMSchedEstimator(LGBMQuantileEstimator):
    """`scale` x the `alpha` quantile of lgbm's runtime distribution: an estimate for scheduling, not accuracy."""

    name: ClassVar[str] = "lgbm-sched"

    alpha: float = quantile_level(0.3, "the estimate is scale x this quantile of the runtime distribution")
    target_under: float = underestimation_share(
        0.0, "share of jobs the calibrated choice may underestimate before scaling (0: the alpha quantile)"
    )
    scale: float = parameter(1.0, "safety margin the chosen estimate is multiplied by", low=0, high=100, low_open=True)
    recalibrate: bool = parameter(
        False, "read the quantile at a level calibrated to cover alpha of recent runtimes (off: the model's own)"
    )

    def _initialise(self) -> None:
        super()._initialise()
        self._scale = self.scale
