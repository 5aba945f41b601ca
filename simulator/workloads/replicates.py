"""Replicates: the same trace with every submission moved by a few seconds.

A backfilling simulation is chaotic: one job started a second earlier changes
which hole the next one fits in, and the change cascades. On SDSC-SP2, EASY-SJBF
planning with a runtime predictor gives an average bounded slowdown anywhere
between 60 and 69 when the submissions move by up to 10 s (docs/scheduling-value.md).
A single run is one draw from that spread, so two configurations are only told
apart by comparing them over several draws (Tsafrir & Feitelson, "Instability in
parallel job scheduling simulation", IPDPS 2006; Frachtenberg & Feitelson,
"Pitfalls in parallel job scheduling evaluation", JSSPP 2005). Replicate 0 is
the trace itself; replicate N > 0 moves each submission by an independent
whole number of seconds drawn uniformly from [-jitter, +jitter] with seed N,
never before the trace's first submission. Runtimes, requests, sizes and users
stay as they are.
"""

from __future__ import annotations

import numpy as np

from kernel.errors import UsageError
from simulator.workloads.trace import Trace

#: How far, in seconds, a replicate may move a submission by default: far less than a typical wait,
#: enough to reorder jobs submitted within seconds of each other.
DEFAULT_JITTER_SECONDS = 10


def replicate_trace(trace: Trace, replicate: int, jitter: int = DEFAULT_JITTER_SECONDS) -> Trace:
    """`trace` as replicate `replicate`: itself for 0, else every submit time moved by up to `jitter` seconds."""
    if replicate < 0:
        raise UsageError(f"the replicate must be 0 (the trace as it is) or a positive seed, not {replicate}")
    if jitter < 0:
        raise UsageError(f"the jitter must be a whole number of seconds >= 0, not {jitter}")
    if replicate == 0:
        return trace
    submit = trace.records["submit"].to_numpy(dtype=np.int64)
    if submit.size:
        offsets = np.random.default_rng(replicate).integers(-jitter, jitter + 1, submit.size)
        submit = np.maximum(submit.min(), submit + offsets)
    note = f"; Note: replicate {replicate} by tsched (every submit time moved by up to {jitter} s, seed {replicate})"
    return trace.with_submit_times(submit, note)
