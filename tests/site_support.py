"""A site's Slurm history for tests: a `sacct --parsable2` dump of the documented fields, its jobs ending in
the last days (so that a live submission, `os.time()`, is within a seeded namespace's reach whatever day the
test runs), its users and accounts named as Slurm names them."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime
from pathlib import Path

from simulator.workloads.sacct import SACCT_FIELDS

#: Users, their UIDs and accounts, and the share of the request their jobs use.
USERS = {
    "mallory3": (1070, "proj6", 0.1),
    "trent": (1071, "proj2", 0.5),
    "peggy": (1072, "proj6", 0.9),
    "alice": (1073, "physics", 0.25),
}


def utc_text(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def write_dump(path: Path, jobs: int = 300, days: float = 3.0) -> Path:
    """A sacct dump (the documented fields) of `jobs` finished jobs over the `days` before now, in UTC."""
    rng = random.Random(27)
    now = int(time.time())
    lines = ["|".join(SACCT_FIELDS)]
    for job_id in range(1, jobs + 1):
        user = rng.choice(list(USERS))
        uid, account, share = USERS[user]
        limit = rng.choice([30, 60])  # minutes
        submit = now - int(days * 86_400) + job_id * int(days * 86_400 * 0.9 / jobs)
        start, elapsed = submit + 5, int(limit * 60 * share)
        values = {
            "JobIDRaw": str(job_id), "JobID": str(job_id), "User": user, "UID": str(uid), "Group": user,
            "GID": str(uid), "Account": account, "Partition": "batch", "QOS": "normal", "Submit": utc_text(submit),
            "Eligible": utc_text(submit), "Start": utc_text(start), "End": utc_text(start + elapsed),
            "ElapsedRaw": str(elapsed), "TimelimitRaw": str(limit), "AllocCPUS": "1", "ReqCPUS": "1",
            "NNodes": "1", "ReqTRES": "billing=1,cpu=1,mem=1000M,node=1", "AllocTRES": "billing=1,cpu=1,node=1",
            "State": "COMPLETED", "ExitCode": "0:0", "Flags": "SchedMain", "JobName": "namd",
        }  # fmt: skip
        lines.append("|".join(values[name] for name in SACCT_FIELDS))
    path.write_text("\n".join(lines) + "\n")
    return path
