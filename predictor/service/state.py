"""Durable history for the predictor service: acknowledged completions in SQLite (WAL).

The service writes a call's completions in one transaction before it replies,
so a completion the client saw acknowledged survives `kill -9` (and, with
synchronous=FULL, a power cut). On restart each namespace is rebuilt by
replaying its completions in the order they were accepted, which is end order.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from predictor.errors import TschedError
from predictor.jobs import JOB_FIELDS, FinishedJob, JobRequest

#: Bumped when the tables change; a file written by another version is refused, not guessed at.
SCHEMA_VERSION = 1

#: The job columns, from the one job-field schema; then when the job ended and how long it ran.
JOB_COLUMNS = tuple(field.column for field in JOB_FIELDS)
_COLUMNS = ", ".join((*JOB_COLUMNS, "end_time", "runtime"))
_JOB_COLUMN_DEFINITIONS = "".join(f"    {column} INTEGER NOT NULL,\n" for column in JOB_COLUMNS)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS namespaces (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    clock INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS completions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
{_JOB_COLUMN_DEFINITIONS}    end_time INTEGER NOT NULL,
    runtime INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS completions_by_namespace ON completions(namespace_id, seq);
"""


class StateError(TschedError):
    """The state file cannot be used (not SQLite, another schema, unwritable)."""


@dataclass
class StoredNamespace:
    """What a namespace had acknowledged when the server last ran."""

    completions: list[FinishedJob] = field(default_factory=list)
    clock: int = 0


class CompletionStore:
    """One SQLite file holding every namespace's acknowledged completions.

    Calls come from the server's worker threads; one connection behind a lock
    keeps writes serialised, which SQLite needs anyway.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._namespace_ids: dict[str, int] = {}
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise StateError(f"{self.path}: SQLite refused WAL journaling (mode is {mode!r})")
            self._db.execute("PRAGMA synchronous=FULL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if tables and version != SCHEMA_VERSION:
                raise StateError(
                    f"{self.path}: not a tsched state file of schema version {SCHEMA_VERSION} "
                    f"(user_version is {version}, tables: {', '.join(sorted(tables))})"
                )
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._namespace_ids = dict(self._db.execute("SELECT name, id FROM namespaces"))
        except sqlite3.Error as error:
            raise StateError(f"{self.path}: cannot use as the state database: {error}") from None

    def load(self) -> dict[str, StoredNamespace]:
        """Every namespace's completions, in the order they were accepted, and its clock."""
        with self._lock:
            names = {ns_id: name for name, ns_id in self._namespace_ids.items()}
            stored = {
                name: StoredNamespace(clock=clock)
                for name, clock in self._db.execute("SELECT name, clock FROM namespaces")
            }
            rows = self._db.execute(f"SELECT namespace_id, {_COLUMNS} FROM completions ORDER BY seq")
            for ns_id, *job, end, runtime in rows:
                stored[names[ns_id]].completions.append(FinishedJob(JobRequest(*job), end, runtime))
        return stored

    def append(self, namespace: str, completions: Sequence[FinishedJob], clock: int) -> None:
        """Durably add `completions` to `namespace` and record its clock, in one transaction."""
        rows = [(*job.request, job.end, job.runtime) for job in completions]
        with self._lock, self._transaction():
            ns_id = self._namespace_ids.get(namespace)
            if ns_id is None:
                cursor = self._db.execute("INSERT INTO namespaces (name, clock) VALUES (?, ?)", (namespace, clock))
                assert cursor.lastrowid is not None  # an INSERT into a rowid table
                ns_id = self._namespace_ids[namespace] = cursor.lastrowid
            else:
                self._db.execute("UPDATE namespaces SET clock = ? WHERE id = ?", (clock, ns_id))
            placeholders = ", ".join("?" * (len(JOB_COLUMNS) + 2))
            self._db.executemany(
                f"INSERT INTO completions (namespace_id, {_COLUMNS}) VALUES ({ns_id}, {placeholders})", rows
            )

    def forget(self, namespace: str) -> None:
        """Drop a namespace and its completions."""
        with self._lock, self._transaction():
            ns_id = self._namespace_ids.pop(namespace, None)
            if ns_id is not None:
                self._db.execute("DELETE FROM completions WHERE namespace_id = ?", (ns_id,))
                self._db.execute("DELETE FROM namespaces WHERE id = ?", (ns_id,))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """Commit on success; on failure roll back, and re-read the namespace ids the rollback undid."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            self._namespace_ids = dict(self._db.execute("SELECT name, id FROM namespaces"))
            raise
        self._db.execute("COMMIT")
