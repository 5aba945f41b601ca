"""Jobs as rows of int64: how the service keeps a namespace's history and writes events to its state file.

A completion is its `JobRequest` fields (the one job schema,
`kernel.jobs.JOB_FIELDS`) then its end and runtime; a submission is the
`JobRequest` fields alone. As tuples a completion costs about 400 bytes of
memory; as a row, 80. Rows convert to job tuples only where an estimator
needs them (teaching a new estimator, replaying, spotting a resent job).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from kernel.jobs import JOB_FIELDS, FinishedJob, JobRequest

#: How many job fields a row holds now; files written before the resource fields hold `LEGACY_FIELD_COUNT`.
FIELD_COUNT = len(JOB_FIELDS)
SUBMISSION_WIDTH = FIELD_COUNT
COMPLETION_WIDTH = SUBMISSION_WIDTH + 2
END = SUBMISSION_WIDTH
#: Namespaces whose name starts so are a replay's (`tsched simulate --address` names them `sim-...`): they are
#: never written to the state file (a replay can be run again; it needs no durability, and must not pay an
#: fsync per instant), and the replay removes them when it ends.
EPHEMERAL_PREFIX = "sim-"
#: Rows turned into tuples at a time when iterating (bounded memory, few numpy calls).
_CHUNK = 4096
_DTYPE = np.dtype("<i8")


def completion_rows(jobs: Sequence[FinishedJob]) -> np.ndarray:
    return np.array([(*job.request, job.end, job.runtime) for job in jobs], dtype=_DTYPE).reshape(-1, COMPLETION_WIDTH)


def submission_rows(jobs: Sequence[JobRequest]) -> np.ndarray:
    return np.array(jobs, dtype=_DTYPE).reshape(-1, SUBMISSION_WIDTH)


def completions_from(rows: np.ndarray) -> list[FinishedJob]:
    return [FinishedJob(JobRequest(*row[:END]), row[END], row[END + 1]) for row in rows.tolist()]


def submissions_from(rows: np.ndarray) -> list[JobRequest]:
    return [JobRequest(*row) for row in rows.tolist()]


def pack(rows: np.ndarray) -> bytes:
    return rows.astype(_DTYPE, copy=False).tobytes()


def unpack(blob: bytes, width: int) -> np.ndarray:
    if len(blob) % (width * _DTYPE.itemsize):
        raise ValueError(f"a record of {len(blob)} bytes is not a whole number of {width}-column rows")
    return np.frombuffer(blob, dtype=_DTYPE).reshape(-1, width)


def unpack_jobs(blob: bytes, fields: int, completions: bool) -> np.ndarray:
    """Rows written when a job had `fields` fields (completions: then their end and runtime), as today's rows:
    the fields added since read as unset."""
    rows = unpack(blob, fields + 2 if completions else fields)
    if fields == FIELD_COUNT:
        return rows
    if not 0 < fields < FIELD_COUNT:
        raise ValueError(f"rows of {fields} job fields; this tsched knows {FIELD_COUNT}")
    unset = np.array([field.unset or 0 for field in JOB_FIELDS[fields:]], dtype=_DTYPE)
    added = np.broadcast_to(unset, (len(rows), len(unset)))
    return np.concatenate([rows[:, :fields], added, rows[:, fields:]], axis=1)


class History:
    """A namespace's completions in end order, as int64 rows that grow by doubling and drop from the front."""

    def __init__(self, rows: np.ndarray | None = None) -> None:
        self._rows = np.empty((64, COMPLETION_WIDTH), dtype=_DTYPE) if rows is None else np.array(rows, dtype=_DTYPE)
        self._start = 0
        self._stop = 0 if rows is None else len(rows)
        #: Completions ever appended (evicted ones included): how a reader finds the ones it has not seen.
        self.appended = self._stop

    def __len__(self) -> int:
        return self._stop - self._start

    @property
    def rows(self) -> np.ndarray:
        return self._rows[self._start : self._stop]

    @property
    def latest_end(self) -> int | None:
        return int(self._rows[self._stop - 1, END]) if self._stop > self._start else None

    def extend(self, jobs: Sequence[FinishedJob]) -> None:
        """Append completions (in end order, none before the latest held)."""
        new = completion_rows(jobs)
        needed = len(self) + len(new)
        if self._stop + len(new) > len(self._rows):
            capacity = max(64, 2 * needed)
            grown = np.empty((capacity, COMPLETION_WIDTH), dtype=_DTYPE)
            grown[: len(self)] = self.rows
            self._rows, self._start, self._stop = grown, 0, len(self)
        self._rows[self._stop : self._stop + len(new)] = new
        self._stop += len(new)
        self.appended += len(new)

    def newest(self, count: int) -> list[FinishedJob]:
        """The `count` latest completions held (all of them if fewer), in end order."""
        return completions_from(self._rows[max(self._start, self._stop - count) : self._stop])

    def since(self, end: int) -> list[FinishedJob]:
        """The completions that ended at or after `end`."""
        ends = self._rows[self._start : self._stop, END]
        first = self._start + int(np.searchsorted(ends, end, side="left"))
        return completions_from(self._rows[first : self._stop])

    def evict(self, before_end: int, keep_at_most: int) -> int:
        """Drop completions that ended before `before_end`, and the oldest beyond `keep_at_most`; return how many."""
        ends = self._rows[self._start : self._stop, END]
        first = self._start + max(int(np.searchsorted(ends, before_end, side="left")), len(self) - keep_at_most)
        dropped = first - self._start
        if dropped > 0:
            self._start = first
            if self._start > len(self._rows) // 2:  # give the memory back once half the rows are dropped
                self._rows = self._rows[self._start : self._stop].copy()
                self._start, self._stop = 0, len(self._rows)
        return max(dropped, 0)

    def __iter__(self) -> Iterator[FinishedJob]:
        for first in range(self._start, self._stop, _CHUNK):
            yield from completions_from(self._rows[first : min(first + _CHUNK, self._stop)])
