"""The two views of a job an estimator may see.

`JobRequest` is what a scheduler knows when a job is submitted: it has no
runtime field, so nothing that predicts from it can read the job's future.
`FinishedJob` is what the estimator learns once the job has ended.

They are named tuples: immutable, with no room for an attribute added later,
and several times cheaper to build than frozen dataclasses, which matters
because a service batch or a simulation builds one per job.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class JobField(NamedTuple):
    """One field of a job as submitted: the single schema the job type, the wire and the state file share.

    `JobRequest` lists the fields in this order; the service's codec reads
    and writes proto `Job` fields of the same names with these bounds; the
    state file stores them in columns named `column`. A test checks all three.
    """

    name: str
    minimum: int
    #: The value of a field a request leaves unset; None: the field is required.
    unset: int | None
    #: The SQLite column (`group` is an SQL keyword).
    column: str
    #: The largest value admitted; None: no bound beyond int64.
    maximum: int | None = None


#: The submit time of a job that left it unset: the service predicts it at the namespace's clock.
UNSET_SUBMIT = -1

JOB_FIELDS = (
    JobField("job_id", 0, 0, "job_id"),
    JobField("submit", 0, UNSET_SUBMIT, "submit"),
    JobField("user", -1, None, "user"),
    JobField("group", -1, None, "grp"),
    JobField("t_req", 1, None, "t_req"),
    JobField("procs", 1, None, "procs"),
    JobField("queue", -1, -1, "queue"),
    JobField("executable", -1, -1, "executable"),
    JobField("nodes", 0, 0, "nodes"),
    JobField("memory_mb", 0, 0, "memory_mb"),
    JobField("gpus", 0, 0, "gpus"),
    JobField("qos", -1, -1, "qos"),
    JobField("exclusive", 0, 0, "exclusive", maximum=1),
)
#: The fields of the first schema (SWF's view of a job): state files and snapshots written before the
#: resource fields hold rows of these only, read back with the others unset.
LEGACY_FIELD_COUNT = 8
#: The fields a job table must have; the resource fields after them default to unset when a trace has none.
REQUIRED_FIELD_NAMES = tuple(field.name for field in JOB_FIELDS[:LEGACY_FIELD_COUNT])
JOB_FIELD_NAMES = tuple(field.name for field in JOB_FIELDS)
#: What a job asks beyond its size: a site log's jobs carry them, an SWF trace's leave them unset.
RESOURCE_FIELD_NAMES = JOB_FIELD_NAMES[LEGACY_FIELD_COUNT:]

#: A user or group a request gave by name: (the job's index in the request, "user" or "group", the name).
#: The service maps names to ids per namespace; estimators only ever see the ids.
JobName = tuple[int, str, str]


class JobRequest(NamedTuple):
    """A job as submitted: everything known before it runs (integer ids, seconds).

    `queue` is the SWF queue or the Slurm partition (PBS queue); the resource
    fields say what a batch system's log or a scheduler adds to the size
    (`kernel.resources.ResourceRequest` is the full request; these are the
    numbers a predictor may learn from): `nodes` asked for at least (0: not
    said), `memory_mb` in all (0: not said, or all of each node's), `gpus` in
    all, the `qos` id (-1: unknown) and whether the job takes whole nodes.
    """

    job_id: int
    submit: int
    user: int
    group: int
    t_req: int
    procs: int
    queue: int = -1
    executable: int = -1
    nodes: int = 0
    memory_mb: int = 0
    gpus: int = 0
    qos: int = -1
    exclusive: int = 0


class FinishedJob(NamedTuple):
    """A job that has ended: its request plus when it ended and how long it ran.

    `runtime` is t_act, already capped at t_req.
    """

    request: JobRequest
    end: int
    runtime: int

    @property
    def ratio(self) -> float:
        """R = t_act / t_req, capped at 1 (Tang et al. Eq. 1)."""
        return min(1.0, self.runtime / self.request.t_req)


class Prediction(NamedTuple):
    """An estimate t_sched with its explanation.

    `factor` is Tang's A where the estimator has one. `basis` is how many
    finished jobs similar to this one (the estimator's key, in its window:
    the adjuster's eligible history, mean + k sigma's window, last-two's two
    jobs, the lgbm estimator's same user and request in the last 30 days) the
    estimate draws on; 0 when it draws on none (the baselines, a model alone).
    `fallback` is true when the estimator had too little history and answered t_req.
    """

    t_sched: int
    factor: float | None
    basis: int
    fallback: bool


#: The probabilities at which a runtime interval gives the runtime (Predict's quantiles).
INTERVAL_PROBABILITIES = (0.5, 0.9, 0.95)


class RuntimeInterval(NamedTuple):
    """What an estimator with a distribution of the runtime knows beyond t_sched.

    `quantiles` pairs each of INTERVAL_PROBABILITIES with the runtime (seconds,
    in [1, t_req]) the job ends by with that probability; `p_underestimate` is
    the probability that it runs longer than t_sched.
    """

    quantiles: tuple[tuple[float, int], ...]
    p_underestimate: float


def clamp_estimate(value: float, t_req: int) -> int:
    """Every estimate is capped at t_req and floored at 1 s (docs/definitions.md)."""
    if math.isnan(value):
        return t_req
    return int(max(1, min(t_req, round(value))))
