"""PBS's side of the predictor: how users and groups, known to PBS by name, are numbered, and how a site's
accounting logs reach a running service (`tsched pbs-report`, from cron).

The queuejob hook (deploy/pbs/tsched_queuejob.py) runs in PBS's own Python,
where tsched is not installed, and carries a copy of `name_id`; a test checks
that the two agree.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from kernel.jobs import FinishedJob
from predictor.digests import files_of
from predictor.frames import finished_from_frame
from predictor.service.client import PredictorClient
from simulator.workloads.pbs import read_pbs
from simulator.workloads.trace import Trace

#: Completions per ObserveCompletions call of `pbs-report`.
REPORT_BATCH = 10_000


def name_id(name: str) -> int:
    """A user or group name as the non-negative number the predictor keys it by (the same on every host)."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


def site_completions(trace: Trace) -> list[FinishedJob]:
    """The trace's jobs as completions for a live predictor: Unix times, and users and groups numbered from
    their names (`name_id`) as the queuejob hook asks about them; in end order."""
    epoch = trace.header.unix_start_time or 0
    users, groups = trace.names.get("user", {}), trace.names.get("group", {})
    finished = []
    for job in finished_from_frame(trace.jobs):
        request = job.request._replace(
            submit=job.request.submit + epoch,
            user=name_id(users.get(job.request.user, str(job.request.user))),
            group=name_id(groups.get(job.request.group, str(job.request.group))),
        )
        finished.append(FinishedJob(request, job.end + epoch, job.runtime))
    return sorted(finished, key=lambda job: (job.end, job.request.submit, job.request.job_id))


def report_accounting(paths: Sequence[str], client: PredictorClient, namespace: str) -> tuple[int, int]:
    """Send the jobs of PBS accounting logs to `namespace` in batches: (completions sent, new to the service).

    Each path is a log file or a folder of them (PBS's `server_priv/accounting`, one file a day), read in
    name order: the documented cron line names the folder.
    """
    files = [file for path in paths for file in files_of(path)]
    finished = site_completions(read_pbs(files, lenient=True).require_jobs())
    new = 0
    for start in range(0, len(finished), REPORT_BATCH):
        new += client.observe(finished[start : start + REPORT_BATCH], namespace=namespace)
    return len(finished), new
