"""PBS Pro / OpenPBS `queuejob` hook: set the job's soft walltime to the tsched prediction.

PBS's scheduler plans with `Resource_List.soft_walltime` where it is set (its
calendar, backfilling, top-job estimates) and extends it when a job outlives
it; only the hard walltime (`Resource_List.walltime`) kills. So this hook is
tsched's selective mode on a real PBS: a job's soft walltime becomes the
prediction, never above the walltime the user requested, and is left unset
when there is no prediction (no walltime, a fallback, the service down or
slower than the deadline). The hook never rejects a job.

Install (as root on the server host), after editing SETTINGS below:

    qmgr -c "create hook tsched_queuejob event=queuejob"
    qmgr -c "import hook tsched_queuejob application/x-python default tsched_queuejob.py"
    qmgr -c "set hook tsched_queuejob alarm=10"

The hook runs in PBS's own Python, which has no gRPC: it asks through the
`tsched predict` command (installed with tsched on the server host) with a
deadline. Users and groups (the account, else the project, else the Unix
group) are sent by name, and so is the job's name (PBS's Job_Name, which
lgbm's application=true learns from) where it is a plain one, as `tsched
pbs-report` and `tsched observe` send them with completions: one identity for
the site's jobs whatever path they arrive by.
Everything here but `run` takes plain values, so it is tested without PBS
(tests/test_pbs_hook.py, against a stand-in of the `pbs` module).
"""

import json
import re
import subprocess
import time

try:
    import pbs  # provided by PBS to the hooks it runs
except ImportError:  # imported outside PBS (the tests load it with a stand-in, or without one)
    pbs = None

SETTINGS = {
    "client": ["tsched", "predict"],  # the command that asks the service
    "address": "127.0.0.1:50051",  # the predictor service (HOST:PORT or unix:PATH)
    "namespace": "",  # this cluster's namespace ("": the server's default)
    "deadline": 5.0,  # seconds qsub may wait for the answer (tsched predict starts in about a second)
    "extra": [],  # e.g. ["--token-file", "/etc/tsched/token", "--tls-ca", "/etc/tsched/ca.pem"]
    "advisory": False,  # True: log the soft walltime the job would get, set nothing (the first rollout step)
}


#: A job name sent as it is (sites.slurm.JOB_NAME_PATTERN, which `tsched pbs-report` applies to the accounting
#: log's jobname): any user chooses it, so another goes unsent, as an unknown application.
PLAIN_JOB_NAME = re.compile(r"[A-Za-z0-9._@-]{1,128}")


def soft_walltime(walltime, prediction):
    """The soft walltime (seconds) to set for a job requesting `walltime` seconds, or None to set none.

    The prediction is capped at the request and never raises it; a fallback
    (the request itself) or an estimate at the request sets nothing.
    """
    if not walltime or walltime <= 0 or prediction is None or prediction.get("fallback"):
        return None
    estimate = int(prediction["t_sched"])
    if estimate <= 0 or estimate >= walltime:
        return None
    return estimate


def command(settings, user, group, walltime, procs, submit, queue="", job_name=""):
    """The `tsched predict` command line for a job: its user, group, queue and plain job name by name, as
    `tsched pbs-report` keys the history (the queue as the partition)."""
    return [
        *settings["client"],
        "--json",
        "-",
        "--address",
        settings["address"],
        "--namespace",
        settings["namespace"],
        "--user",
        str(user),
        *(["--account", group] if group else ["--group", "-1"]),
        *(["--partition", queue] if queue else []),
        *(["--job-name", job_name] if job_name and PLAIN_JOB_NAME.fullmatch(job_name) else []),
        "--request",
        f"{walltime // 3600}:{walltime // 60 % 60:02d}:{walltime % 60:02d}",  # Slurm's HH:MM:SS, as tsched reads limits
        "--procs",
        str(procs),
        "--submit",
        str(submit),
        "--timeout",
        str(settings["deadline"]),
        *settings["extra"],
    ]


def ask(settings, user, group, walltime, procs, submit, queue="", job_name=""):
    """The service's answer (`tsched predict --json -`) as a dict, or None and why not."""
    command_line = command(settings, user, group, walltime, procs, submit, queue, job_name)
    try:
        done = subprocess.run(
            command_line, capture_output=True, text=True, timeout=settings["deadline"] + 1, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"no answer: {error}"
    if done.returncode != 0:
        return None, "no answer: " + (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    try:
        return json.loads(done.stdout), ""
    except ValueError:
        return None, f"not an answer: {done.stdout[:200]!r}"


def queue_of(job):
    """The queue the job was submitted to, by name ("" when it named none: the server's default applies)."""
    queue = getattr(job, "queue", None)
    name = getattr(queue, "name", queue)
    return str(name) if name else ""


def group_of(account, project, group):
    """The job's group as tsched's PBS reader takes it: the account, else the project, else the Unix group."""
    for name in (account, project if project != "_pbs_project_default" else None, group):
        if name:
            return str(name)
    return ""


def run(pbs):
    """The hook: read the job from the event, ask, set the soft walltime; accept the job whatever happens.

    `event.accept()` ends the hook (PBS raises SystemExit), so it is never caught below.
    """
    event = pbs.event()
    job = event.job
    try:
        walltime = job.Resource_List["walltime"]
        seconds = int(walltime) if walltime is not None else 0
        if seconds <= 0:
            event.accept()
        ncpus = job.Resource_List["ncpus"]
        group = group_of(job.Account_Name, job.project, job.group_list or job.egroup)
        queue = queue_of(job)
        name = str(job.Job_Name or "")
        prediction, why = ask(SETTINGS, event.requestor, group, seconds, int(ncpus or 1), int(time.time()), queue, name)
        chosen = soft_walltime(seconds, prediction)
        if chosen is not None and SETTINGS["advisory"]:
            pbs.logmsg(pbs.LOG_WARNING, f"tsched: advisory: soft_walltime would be {chosen} s of {seconds} s")
        elif chosen is not None:
            job.Resource_List["soft_walltime"] = pbs.duration(chosen)
        elif prediction is None:
            pbs.logmsg(pbs.LOG_WARNING, f"tsched: no prediction, job queued without a soft walltime: {why}")
    except Exception as error:  # a bug here must never cost a user their job
        pbs.logmsg(pbs.LOG_ERROR, f"tsched: queuejob hook failed, job queued unchanged: {error!r}")
    event.accept()


if pbs is not None:
    run(pbs)
