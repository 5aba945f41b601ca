"""Give the jobs of a trace without requested times their queue's time limit, so that the trace can be replayed.

SDSC-Par-1996 (Downey's Paragon) records no requested time: its users chose an
NQS queue whose name carries a size and a length class (q32s, q64m, q128l), and
the queue's limit was the request. The limits are not in the log, so each
queue's limit is taken as its `--quantile` runtime rounded up to a whole hour
(a few jobs ran past the limits by special permission; the replay cuts them at
it). With `--partition`, only that partition's jobs are kept (the Paragon's
interactive partition had its own nodes). Writes a new SWF file; never
overwrites the input. docs/queue-time.md uses it:

    python scripts/queue_requests.py ../shared/traces/SDSC-Par-1996-3.1-cln.swf.gz /tmp/par.swf.gz --partition 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from simulator.traces.swf import read_swf, write_swf

HOUR = 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path, help="SWF trace to read")
    parser.add_argument("out", type=Path, help="SWF file to write (.gz: gzipped)")
    parser.add_argument("--partition", type=int, help="keep only this partition's jobs (SWF field 16)")
    parser.add_argument("--quantile", type=float, default=0.99, help="runtime quantile taken as a queue's limit")
    args = parser.parse_args()
    if args.out.resolve() == args.trace.resolve():
        parser.error("out must differ from the trace")
    if not 0 < args.quantile <= 1:
        parser.error(f"--quantile must be in (0, 1], got {args.quantile}")
    trace = read_swf(args.trace)
    records = trace.records
    if args.partition is not None:
        records = records.loc[records["partition"] == args.partition]
        if records.empty:
            parser.error(f"--partition {args.partition}: no job of {args.trace} is in it")
    records = records.copy()
    known = records["run"] >= 0
    limits = (
        records.loc[known]
        .groupby("queue")["run"]
        .quantile(args.quantile)
        .map(lambda seconds: int(np.ceil(max(seconds, 1) / HOUR)) * HOUR)
    )
    missing = records["req_time"] <= 0
    records.loc[missing, "req_time"] = records.loc[missing, "queue"].map(limits).fillna(-1).astype(np.int64)
    write_swf(records, args.out, trace.header)
    for queue, limit in limits.items():
        print(f"queue {queue}: limit {limit // HOUR} h ({int((records['queue'] == queue).sum())} jobs)")
    print(f"wrote {len(records)} jobs to {args.out}")


if __name__ == "__main__":
    main()
