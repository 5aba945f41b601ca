"""A stand-in for the `pbs` module PBS gives its hooks: only what deploy/pbs/tsched_queuejob.py touches.

It holds values and records calls, nothing more: the hook's decisions are the
hook's own code, run unchanged. `event.accept()` ends the hook with
SystemExit, as PBS's does.
"""

from __future__ import annotations

LOG_WARNING = 2
LOG_ERROR = 3
logged: list[tuple[int, str]] = []
current: Event | None = None


class duration(int):  # noqa: N801 - PBS's name
    """PBS's duration: a number of seconds."""


class Resources(dict[str, object]):
    """Resource_List: an unset resource reads as None."""

    def __getitem__(self, key: str) -> object:
        return self.get(key)


class Queue:
    def __init__(self, name: str) -> None:
        self.name = name


class Job:
    def __init__(
        self,
        walltime: int | None,
        ncpus: int | None = None,
        account: str | None = None,
        queue: str | None = None,
        name: str | None = None,
    ) -> None:
        self.Resource_List = Resources(walltime=None if walltime is None else duration(walltime), ncpus=ncpus)
        self.Job_Name = name
        self.Account_Name = account
        self.queue = None if queue is None else Queue(queue)
        self.project = "_pbs_project_default"
        self.group_list = None
        self.egroup = "users"


class Event:
    def __init__(self, job: Job, requestor: str) -> None:
        self.job = job
        self.requestor = requestor
        self.accepted = False

    def accept(self) -> None:
        self.accepted = True
        raise SystemExit(0)


def event() -> Event:
    assert current is not None
    return current


def logmsg(level: int, message: str) -> None:
    logged.append((level, message))
