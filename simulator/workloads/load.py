"""Load scaling: the same jobs, submitted more (or less) densely.

To see a scheduler at a load its trace never had, every inter-arrival time is
divided by a factor F: F > 1 means more load, F < 1 less. Streit's shrinking
factor is 1/F; Mu'alem & Feitelson scale the load of their workloads the same
way. Runtimes, requests, sizes and users stay as they are, so the work is the
same and only its density in time changes: the offered load is multiplied by F.
"""

from __future__ import annotations

import math

import numpy as np

from kernel.errors import UsageError
from simulator.workloads.trace import Trace


def scale_load(trace: Trace, factor: float) -> Trace:
    """`trace` with every inter-arrival time divided by `factor`, so its offered load is `factor` times higher.

    Each submit time's offset from the first submission is divided and rounded
    to the nearest second (halves up): the first submission stays put, the
    submission order is kept (the map never decreases), and rounding errors do
    not add up along the trace. Every other field of each record is kept,
    including the waits the trace recorded; the header gains a note saying how
    the trace was scaled.
    """
    if not (math.isfinite(factor) and factor > 0):
        raise UsageError(f"the load factor must be a positive number, not {factor}")
    submit = trace.records["submit"].to_numpy(dtype=np.int64)
    if submit.size:
        first = submit.min()
        submit = first + np.floor((submit - first) / factor + 0.5).astype(np.int64)
    note = f"; Note: load scaled by {factor:g} by tsched (every inter-arrival time divided by {factor:g})"
    return trace.with_submit_times(submit, note)
