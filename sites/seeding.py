"""A site's own history into a running service (`tsched observe`, `tsched pbs-report`): one identity, one clock,
in chunks that say what they did.

- One identity: a job's user and account go by name wherever the log has
  names (sacct's User and Account, PBS's user and account), the names
  job_submit.lua, the jobcomp follower and the PBS hook send; a log without
  names (SWF) sends its numbers. Its name (sacct's JobName) goes by name too,
  or as unknown where the service would refuse it.
- One clock: a site log's times are Unix seconds (its reader keeps them), as
  are the submissions of the site's scheduler; an SWF trace is sent on its own
  clock, as `tsched train` and the simulator read it.
- In chunks: `CHUNK` completions per call, each with its own deadline, and a
  progress line after each; the completions that ended before the namespace's
  clock are skipped (they are held from an earlier run, or could not be added:
  completions come in end order), so a run that stopped is resumed by running
  it again. A failure says how many jobs were stored and what to do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from kernel.errors import TschedError
from kernel.jobs import FinishedJob
from predictor.frames import finished_from_frame
from predictor.service.client import SECONDS_PER_COMPLETION, PredictorClient, PredictorError, SiteNames
from sites.slurm import JOB_NAME_PATTERN

#: Completions per ObserveCompletions call: a call of a few tenths of a second even on a loaded server, so
#: that health checks, metrics scrapes and the scheduler's questions are answered between two calls.
CHUNK = 2000


class SeedingError(TschedError):
    """A load that stopped part-way: the message says how much was stored and what to do."""


@dataclass
class Seeded:
    """What a load did: jobs sent and new to the namespace, already held, skipped as older than its clock."""

    namespace: str
    total: int
    sent: int = 0
    new: int = 0
    skipped: int = 0

    @property
    def held(self) -> int:
        """Jobs the namespace already held: sent again (recognised, not learned twice) or skipped by end time."""
        return self.sent - self.new + self.skipped

    def progress(self) -> str:
        done = self.sent + self.skipped
        return f"{done:,} of {self.total:,} jobs done ({self.new:,} new, {self.held:,} already held)"

    def line(self) -> str:
        return f"namespace {self.namespace}: {self.new} finished job(s) learned, {self.held} already held"


def trace_completions(
    jobs: pd.DataFrame, names: dict[str, dict[int, str]]
) -> tuple[list[FinishedJob], list[SiteNames]]:
    """A trace's replayable jobs (`Trace.jobs`) as completions in end order, each with its user, account,
    partition and QOS by name where the trace's `names` (`Trace.names`) has them: the numbers a reader gave
    them depend on the dump, the names are what every path to the service shares."""
    finished = finished_from_frame(jobs)
    users, groups, queues, qos = (names.get(field, {}) for field in ("user", "group", "queue", "qos"))
    if "executable" in names:  # a dump's numbers for job names mean nothing beyond it: each goes by name, or unknown
        finished = [_named_application(job, names["executable"]) for job in finished]
    applications = names.get("executable", {})
    return finished, [
        SiteNames(
            users.get(job.request.user),
            groups.get(job.request.group),
            queues.get(job.request.queue),
            qos.get(job.request.qos),
            applications.get(job.request.executable),
        )
        for job in finished
    ]


_PLAIN_JOB_NAME = re.compile(JOB_NAME_PATTERN)


def _named_application(job: FinishedJob, applications: dict[int, str]) -> FinishedJob:
    """`job` as sent: its application unknown (-1) where its name is not a plain one, as jobcomp.sh and
    job_submit.lua send (any user names their jobs), rather than the dump's number for it."""
    name = applications.get(job.request.executable)
    if name is not None and _PLAIN_JOB_NAME.fullmatch(name):
        return job
    return job._replace(request=job.request._replace(executable=-1))


def seed(
    client: PredictorClient,
    namespace: str,
    finished: Sequence[FinishedJob],
    names: Sequence[SiteNames],
    progress: Callable[[Seeded], None] = lambda _: None,
) -> Seeded:
    """Send `finished` (in end order) to `namespace` in chunks of `CHUNK`, calling `progress` after each.

    Raises SeedingError, saying what was stored and what to do, when a call fails.
    """
    shown = namespace or "default"
    done = Seeded(shown, len(finished))
    try:
        clock = client.status(namespace).clock
    except PredictorError as error:
        raise SeedingError(_stopped(done, client, error)) from None
    first = next((index for index, job in enumerate(finished) if job.end >= clock), len(finished))
    done.skipped = first
    for start in range(first, len(finished), CHUNK):
        chunk, chunk_names = finished[start : start + CHUNK], names[start : start + CHUNK]
        deadline = client.timeout + len(chunk) * SECONDS_PER_COMPLETION
        try:
            done.new += client.observe(chunk, names=chunk_names, namespace=namespace, timeout=deadline)
        except PredictorError as error:
            raise SeedingError(_stopped(done, client, error)) from None
        done.sent += len(chunk)
        progress(done)
    return done


def _stopped(done: Seeded, client: PredictorClient, error: PredictorError) -> str:
    """What a load that failed did, and what to do next."""
    advice = "run the same command again: the jobs already held are skipped, the load goes on from there"
    if error.code.name == "DEADLINE_EXCEEDED":
        advice = f"raise --timeout (now {client.timeout:g} s) and " + advice
    return (
        f"stopped after {done.sent + done.skipped:,} of {done.total:,} jobs ({done.new:,} stored by this run, "
        f"{done.held:,} already held) in namespace {done.namespace}: {error}. To finish: {advice}"
    )
