"""Slurm's completions into the predictor: `tsched-slurm-jobcomp --follow SPOOL`.

slurmctld runs the `jobcomp/script` program (deploy/slurm/jobcomp.sh) once per
finished job, one after the other in the order the jobs finished; it only
appends the job's JOBID, UID, GID, SUBMIT, START, END, LIMIT, PROCS and
JOBSTATE (and USERNAME, ACCOUNT, PARTITION, QOS, NODECNT, and JOBNAME where it
is a plain name) as one line to a
spool file, whatever the predictor's state. This follower, left running
beside the service, reads the spool and reports the jobs with
`ObserveCompletions` in batches, as job_submit.lua asked about them and as
`tsched observe` sends a sacct dump: the user by name (USERNAME, else the
number UID) and the account by name (ACCOUNT, else the number GID), the
partition, QOS and job name by name, t_req = LIMIT, procs = PROCS, nodes = NODECNT,
times in Unix seconds. A job that never started or had no limit is not
reported.

A spool line is untrusted: any Slurm user names their jobs. jobcomp.sh writes
only checked values, and the follower checks them again: a line with a field
given twice, a value Slurm cannot write, a time in the future (more than
`MAX_FUTURE_SECONDS` past this host's clock) or a line longer than
`MAX_LINE_BYTES` is refused and logged, never reported.

While the service is down or slow the lines wait in the spool and are sent
later (retries back off to 30 s); a completion the service refuses (e.g. one
ending before what it already holds) is logged and skipped. The offset reached
is kept in SPOOL.offset (replaced atomically, never written through a link),
so a restarted follower goes on where it stopped; the service skips a
completion it already holds, so a line sent twice is harmless.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kernel.errors import UsageError
from kernel.jobs import FinishedJob, JobRequest
from predictor.service.client import SiteNames

log = logging.getLogger("tsched.slurm")

#: Seconds each report may take.
DEFAULT_TIMEOUT_SECONDS = 10.0
#: How often the spool is read when there is nothing new (seconds).
POLL_SECONDS = 1.0
#: Lines read and reported at once.
BATCH_LINES = 1000
#: Retries after a failure wait from 0.5 s, doubling up to this.
MAX_RETRY_SECONDS = 30.0
#: The longest spool line taken: jobcomp.sh writes about 300 bytes; a longer line is refused unread.
MAX_LINE_BYTES = 4096
#: How far past this host's clock a job may say it ended (clocks of the controller and this host differ
#: by seconds; a job cannot end in the future).
MAX_FUTURE_SECONDS = 300
#: The spool line's format version jobcomp.sh writes first (lines of the first script have none).
FORMAT = "v2"

#: A job name every path sends (jobcomp.sh, job_submit.lua, `tsched observe`): any user chooses it, so only a plain
#: one; another goes as an unknown application.
JOB_NAME_PATTERN = r"[A-Za-z0-9._@-]{1,128}"
#: What each field may hold (what Slurm writes there); a line with another value is refused.
FIELD_PATTERNS = {
    key: re.compile(pattern)
    for key, pattern in {
        "JOBID": r"[0-9]{1,12}",
        "UID": r"[0-9]{1,10}",
        "GID": r"[0-9]{1,10}",
        "SUBMIT": r"[0-9]{1,12}",
        "START": r"[0-9]{1,12}",
        "END": r"[0-9]{1,12}",
        "PROCS": r"[0-9]{1,9}",
        "NODECNT": r"[0-9]{1,9}",
        "LIMIT": r"([0-9]{1,6}-)?[0-9]{1,6}:[0-9]{2}:[0-9]{2}|[A-Za-z_]{1,32}",
        "JOBSTATE": r"[A-Z_]{1,32}",
        "USERNAME": r"[A-Za-z0-9._@-]{1,64}",
        "ACCOUNT": r"[A-Za-z0-9._@-]{1,64}",
        "PARTITION": r"[A-Za-z0-9._,-]{1,128}",
        "QOS": r"[A-Za-z0-9._-]{1,64}",
        "JOBNAME": JOB_NAME_PATTERN,
    }.items()
}

#: Reports completions, each with its user's and account's names; raises PredictorError.
Send = Callable[[Sequence[FinishedJob], Sequence[SiteNames]], object]


class ForgedLineError(ValueError):
    """A spool line no honest jobcomp.sh run writes: refused, never reported."""


def limit_seconds(text: str) -> int | None:
    """Slurm's time limit as jobcomp/script writes it ([D-]HH:MM:SS) in seconds; None for UNLIMITED or other."""
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if len(parts) != 3 or not all(part.isdigit() for part in parts) or (days and not days.isdigit()):
        return None
    hours, minutes, seconds = (int(part) for part in parts)
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def completion_from_env(env: Mapping[str, str], now: float | None = None) -> tuple[FinishedJob | None, str]:
    """The finished job jobcomp/script describes, or None and why it is not reported.

    `now` (default: this host's clock) bounds the times: a job cannot have ended in the future.
    """
    try:
        start, end, submit = int(env["START"]), int(env["END"]), int(env["SUBMIT"])
        job_id, user, group, procs = int(env["JOBID"]), int(env["UID"]), int(env["GID"]), int(env["PROCS"])
    except (KeyError, ValueError) as error:
        return None, f"not a jobcomp/script record ({type(error).__name__}: {error})"
    if start <= 0 or end < start:
        return None, f"job {job_id} never ran ({env.get('JOBSTATE', '?')})"
    if submit > start:
        return None, f"job {job_id} started ({start}) before it was submitted ({submit})"
    latest = (time.time() if now is None else now) + MAX_FUTURE_SECONDS
    if end > latest:
        return (
            None,
            f"job {job_id} ends at {end}, in the future of this host's clock ({latest - MAX_FUTURE_SECONDS:.0f})",
        )
    t_req = limit_seconds(env.get("LIMIT", ""))
    if t_req is None or t_req <= 0:
        return None, f"job {job_id} had no time limit ({env.get('LIMIT', '?')})"
    if procs <= 0:
        return None, f"job {job_id} had no processors"
    nodes = int(env.get("NODECNT", "0") or 0)
    request = JobRequest(job_id, submit, user, group, t_req, procs, nodes=nodes)
    return FinishedJob(request, end, min(end - start, t_req)), ""


def names_from_env(env: Mapping[str, str]) -> SiteNames:
    """The job's user, account, partition, QOS and name by name, as job_submit.lua asks about them (None where
    Slurm gave none)."""
    return SiteNames(
        env.get("USERNAME") or None,
        (env.get("ACCOUNT") or "").lower() or None,
        env.get("PARTITION") or None,
        env.get("QOS") or None,
        env.get("JOBNAME") or None,
    )


def parse_line(line: str) -> dict[str, str]:
    """A spool line (`v2 KEY=VALUE ...`, as deploy/slurm/jobcomp.sh writes it) as a dict.

    Raises ForgedLineError for anything jobcomp.sh does not write: a field given twice, a value outside what
    Slurm writes in it, a control character, a field jobcomp.sh rejected (REJECTED=...). Unknown fields
    are ignored (a later script may write more).
    """
    words = line.split()
    if words and words[0] == FORMAT:
        words = words[1:]
    fields: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise ForgedLineError(f"{word[:40]!r} is not KEY=VALUE")
        if key == "REJECTED":
            raise ForgedLineError(f"jobcomp.sh rejected its {value[:80]}")
        if key in fields:
            raise ForgedLineError(f"{key} given twice")
        pattern = FIELD_PATTERNS.get(key)
        if pattern is not None and not pattern.fullmatch(value):
            raise ForgedLineError(f"{key}={value[:40]!r} is not what Slurm writes there")
        fields[key] = value
    return fields


class Follower:
    """Reads the spool from the kept offset and reports what it finds (one batch per `step`)."""

    def __init__(self, spool: Path, send: Send) -> None:
        self.spool = spool
        self.send = send
        self.offset_file = spool.with_name(spool.name + ".offset")
        self.offset = _read_offset(self.offset_file)
        self._skipping = False  # inside a line longer than MAX_LINE_BYTES, dropped up to its end

    def step(self) -> int:
        """Report the next batch of complete lines; return how many lines were consumed, a dropped (part of a)
        long line counting as one (0: nothing new).

        Raises PredictorError when the service is unreachable (the lines stay for the next step).
        """
        lines, dropped, consumed = self._read()
        if not consumed:
            return 0
        jobs = self._completions(lines)
        if jobs:
            self._send(jobs)
            log.info("%d job(s) reported", len(jobs))
        self.offset += consumed
        _write_offset(self.offset_file, self.offset)
        return len(lines) + dropped

    def _read(self) -> tuple[list[bytes], int, int]:
        """The next complete lines (at most BATCH_LINES, each at most MAX_LINE_BYTES), how many longer lines (or
        parts of one) were dropped, and the bytes they all take. A longer line is dropped in bounded reads,
        whatever its length, and logged once."""
        try:
            with self.spool.open("rb") as file:
                if file.seek(0, os.SEEK_END) < self.offset:  # the spool was rotated: start it over
                    self.offset, self._skipping = 0, False
                file.seek(self.offset)
                chunk = file.read(BATCH_LINES * MAX_LINE_BYTES)
        except FileNotFoundError:
            return [], 0, 0
        lines: list[bytes] = []
        dropped = position = 0
        while len(lines) < BATCH_LINES:
            end = chunk.find(b"\n", position)
            if end < 0:
                if len(chunk) - position > MAX_LINE_BYTES:  # no end in sight: drop what was read of it
                    self._drop_long_line()
                    position, dropped = len(chunk), dropped + 1
                break
            line = chunk[position : end + 1]
            position = end + 1
            if self._skipping or len(line) > MAX_LINE_BYTES:
                self._drop_long_line()
                self._skipping, dropped = False, dropped + 1
                continue
            lines.append(line)
        return lines, dropped, position

    def _drop_long_line(self) -> None:
        """Skip the rest of a line longer than MAX_LINE_BYTES (logged once per line)."""
        if not self._skipping:
            log.warning("a spool line longer than %d bytes is dropped: jobcomp.sh never writes one", MAX_LINE_BYTES)
        self._skipping = True

    @staticmethod
    def _completions(lines: Sequence[bytes]) -> list[tuple[FinishedJob, SiteNames]]:
        """The jobs the lines describe with their names, in end order; the others logged with the reason."""
        jobs = []
        for line in lines:
            try:
                env = parse_line(line.decode("utf-8", "replace"))
                job, why = completion_from_env(env)
            except ForgedLineError as forged:
                log.warning("refused a spool line: %s", forged)
                continue
            if job is None:
                log.info("not reported: %s", why)
            else:
                jobs.append((job, names_from_env(env)))
        return sorted(jobs, key=lambda pair: (pair[0].end, pair[0].request.submit, pair[0].request.job_id))

    def _send(self, jobs: list[tuple[FinishedJob, SiteNames]]) -> None:
        """Report `jobs`; a batch the service refuses is sent again job by job, skipping those refused."""
        from predictor.service.client import PredictorError, is_transient

        try:
            self.send([job for job, _ in jobs], [names for _, names in jobs])
        except PredictorError as error:
            if is_transient(error):
                raise
            for job, names in jobs:
                try:
                    self.send([job], [names])
                except PredictorError as refusal:
                    if is_transient(refusal):
                        raise
                    log.warning("job %d not reported: %s", job.request.job_id, refusal)

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


def _read_offset(path: Path) -> int:
    """The offset kept in `path` (0 when there is none); a link there is refused, never followed."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return 0
    except OSError as error:
        if path.is_symlink():
            raise UsageError(f"{path} is a symbolic link: remove it (the follower keeps its offset there)") from None
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    with os.fdopen(descriptor) as file:
        text = file.read(32).strip()
    return int(text) if text.isdigit() else 0


def _write_offset(path: Path, offset: int) -> None:
    """Keep `offset` in `path`, replaced atomically: a link placed there is replaced, never written through."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(descriptor, "w") as file:
        file.write(str(offset))
    os.replace(temporary, path)
