"""Slurm's completions into the predictor: `tsched-slurm-jobcomp --follow SPOOL`.

slurmctld runs the `jobcomp/script` program (deploy/slurm/jobcomp.sh) once per
finished job, one after the other in the order the jobs finished; it only
appends the job's environment (JOBID, UID, GID, SUBMIT, START, END, LIMIT,
PROCS, JOBSTATE) as one line to a spool file, in microseconds, whatever the
predictor's state. This follower, left running beside the service, reads the
spool and reports the jobs with `ObserveCompletions` in batches, as
job_submit.lua asked about them: user = UID, group = GID, t_req = LIMIT,
procs = PROCS. A job that never started or had no limit is not reported.

While the service is down or slow the lines wait in the spool and are sent
later (retries back off to 30 s); a completion the service refuses (e.g. one
ending before what it already holds) is logged and skipped. The offset reached
is kept in SPOOL.offset, so a restarted follower goes on where it stopped; the
service skips a completion it already holds, so a line sent twice is harmless.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kernel.jobs import FinishedJob, JobRequest

log = logging.getLogger("tsched.slurm")

#: Seconds each report may take.
DEFAULT_TIMEOUT_SECONDS = 10.0
#: How often the spool is read when there is nothing new (seconds).
POLL_SECONDS = 1.0
#: Lines read and reported at once.
BATCH_LINES = 1000
#: Retries after a failure wait from 0.5 s, doubling up to this.
MAX_RETRY_SECONDS = 30.0

#: Reports completions; raises PredictorError.
Send = Callable[[Sequence[FinishedJob]], object]


def limit_seconds(text: str) -> int | None:
    """Slurm's time limit as jobcomp/script writes it ([D-]HH:MM:SS) in seconds; None for UNLIMITED or other."""
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if len(parts) != 3 or not all(part.isdigit() for part in parts) or (days and not days.isdigit()):
        return None
    hours, minutes, seconds = (int(part) for part in parts)
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def completion_from_env(env: Mapping[str, str]) -> tuple[FinishedJob | None, str]:
    """The finished job jobcomp/script describes, or None and why it is not reported."""
    try:
        start, end, submit = int(env["START"]), int(env["END"]), int(env["SUBMIT"])
        job_id, user, group, procs = int(env["JOBID"]), int(env["UID"]), int(env["GID"]), int(env["PROCS"])
    except (KeyError, ValueError) as error:
        return None, f"not a jobcomp/script record ({type(error).__name__}: {error})"
    if start <= 0 or end < start:
        return None, f"job {job_id} never ran ({env.get('JOBSTATE', '?')})"
    t_req = limit_seconds(env.get("LIMIT", ""))
    if t_req is None or t_req <= 0:
        return None, f"job {job_id} had no time limit ({env.get('LIMIT', '?')})"
    if procs <= 0:
        return None, f"job {job_id} had no processors"
    request = JobRequest(job_id, submit, user, group, t_req, procs)
    return FinishedJob(request, end, min(end - start, t_req)), ""


def parse_line(line: str) -> dict[str, str]:
    """A spool line (KEY=VALUE words, as deploy/slurm/jobcomp.sh writes them) as a dict."""
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


class Follower:
    """Reads the spool from the kept offset and reports what it finds (one batch per `step`)."""

    def __init__(self, spool: Path, send: Send) -> None:
        self.spool = spool
        self.send = send
        self.offset_file = spool.with_name(spool.name + ".offset")
        try:
            self.offset = int(self.offset_file.read_text())
        except (OSError, ValueError):
            self.offset = 0

    def step(self) -> int:
        """Report the next batch of complete lines; return how many lines were consumed (0: nothing new).

        Raises PredictorError when the service is unreachable (the lines stay for the next step).
        """
        from predictor.service.client import PredictorError, is_transient

        try:
            with self.spool.open("rb") as file:
                if file.seek(0, 2) < self.offset:  # the spool was rotated: start it over
                    self.offset = 0
                file.seek(self.offset)
                lines = file.readlines(BATCH_LINES * 200)
        except FileNotFoundError:
            return 0
        complete = [line for line in lines if line.endswith(b"\n")]
        if not complete:
            return 0
        jobs = []
        for line in complete:
            job, why = completion_from_env(parse_line(line.decode("utf-8", "replace")))
            if job is None:
                log.info("not reported: %s", why)
            else:
                jobs.append(job)
        jobs.sort(key=lambda job: (job.end, job.request.submit, job.request.job_id))
        try:
            self.send(jobs)
        except PredictorError as error:
            if is_transient(error):
                raise
            for job in jobs:  # refused as a batch: send them one by one, skipping those refused
                try:
                    self.send([job])
                except PredictorError as refusal:
                    if is_transient(refusal):
                        raise
                    log.warning("job %d not reported: %s", job.request.job_id, refusal)
        self.offset += sum(len(line) for line in complete)
        self.offset_file.write_text(str(self.offset))
        log.info("%d job(s) reported", len(jobs))
        return len(complete)

    def run(self, stop: threading.Event) -> None:
        """Report until `stop` is set, waiting out failures with a backoff."""
        from kernel.errors import TschedError

        retry = 0.5
        while not stop.is_set():
            try:
                consumed = self.step()
            except TschedError as error:
                log.warning("the service did not take the completions, retrying in %.1f s: %s", retry, error)
                stop.wait(retry)
                retry = min(retry * 2, MAX_RETRY_SECONDS)
                continue
            retry = 0.5
            if not consumed:
                stop.wait(POLL_SECONDS)
