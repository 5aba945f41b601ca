"""Give the jobs of a trace without requested times their queue's time limit, so that the trace can be replayed.

SDSC-Par-1996 (Downey's Paragon) records no requested time: its users chose an
NQS queue whose name carries a size and a length class (q32s, qf64m, q128l:
short, medium, long), and the queue's limit was the request. The header names
the queues; `--limits` maps the length letter to a limit (default the
Paragon's: s = 1 h, m = 4 h, l = 12 h) and every other queue (standby, q1ll,
...) gets the longest, as Downey reports that most jobs' limit was 12 hours.
Jobs that ran longer (by special permission) are cut at the limit by the replay
rules. With `--partition`, only that partition's jobs are kept (the Paragon's
interactive partition had its own nodes). Writes a new SWF file:

    python scripts/queue_requests.py ../shared/traces/SDSC-Par-1996-3.1-cln.swf.gz /tmp/par.swf.gz --partition 2
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from kernel.durations import required_duration
from simulator.workloads.swf import read_swf, write_swf

#: `; Queue: 12  qf32m` in an SWF header.
QUEUE_LINE = re.compile(r";\s*Queue:\s*(\d+)\s+(\S+)")
#: An NQS queue name: q, f for fat nodes, the largest size, the length letter.
LENGTH_CLASS = re.compile(r"qf?\d+([a-z])")


def parse_limits(text: str) -> dict[str, int]:
    """`s=1h,m=4h,l=12h` as {letter: seconds}."""
    limits = {}
    for item in text.split(","):
        letter, sep, duration = item.partition("=")
        if not sep or len(letter.strip()) != 1:
            raise argparse.ArgumentTypeError(f"expected LETTER=DURATION items joined by commas, got {item!r}")
        limits[letter.strip()] = required_duration(duration.strip(), f"the limit of {letter.strip()}")
    return limits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path, help="SWF trace to read")
    parser.add_argument("out", type=Path, help="SWF file to write (.gz: gzipped)")
    parser.add_argument("--partition", type=int, help="keep only this partition's jobs (SWF field 16)")
    parser.add_argument(
        "--limits", type=parse_limits, default="s=1h,m=4h,l=12h", help="limit per length letter of a queue's name"
    )
    args = parser.parse_args()
    if args.out.resolve() == args.trace.resolve():
        parser.error("out must differ from the trace")
    trace = read_swf(args.trace)
    names = {int(match[1]): match[2] for line in trace.header.lines if (match := QUEUE_LINE.match(line))}
    if not names:
        parser.error(f"{args.trace}: the header names no queue (; Queue: N NAME)")
    longest = max(args.limits.values())
    limits = {}
    for queue, name in names.items():
        match = LENGTH_CLASS.fullmatch(name)
        limits[queue] = args.limits.get(match[1], longest) if match else longest
    records = trace.records
    if args.partition is not None:
        records = records.loc[records["partition"] == args.partition]
        if records.empty:
            parser.error(f"--partition {args.partition}: no job of {args.trace} is in it")
    records = records.copy()
    missing = records["req_time"] <= 0
    records.loc[missing, "req_time"] = records.loc[missing, "queue"].map(limits).fillna(longest).astype(int)
    write_swf(records, args.out, trace.header)
    counts = records["queue"].value_counts()
    for queue, name in sorted(names.items()):
        if counts.get(queue, 0):
            print(f"queue {queue} {name}: limit {limits[queue] / 3600:g} h, {counts[queue]} jobs")
    print(f"wrote {len(records)} jobs to {args.out}")


if __name__ == "__main__":
    main()
