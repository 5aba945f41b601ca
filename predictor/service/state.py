"""The state file: what every namespace recorded (completions, submissions), in SQLite, with snapshots.

A call's events are committed before it is answered (WAL,
synchronous=FULL), so an acknowledged completion or submission survives
`kill -9` and a power cut. Calls that arrive while a commit is under way are
committed together in the next transaction (group commit): one fsync for
all, so durability costs less per call as the load rises. A namespace is rebuilt on start from its
latest snapshot and the events recorded after it; writing a snapshot drops
the events it holds, so the file and the restart stay bounded.

The file cannot be lost quietly:
- one server per file: an exclusive lock on the database file itself (its
  identity, not its spelling: a symlink or hard link is the same file) is
  taken before it is opened; `FILE.lock` beside the real file names the
  holder's pid;
- a log cut short after a crash: `FILE.lock` counts the transactions
  acknowledged, and a start that finds fewer in the file refuses it;
- the write-ahead log is checked before SQLite reads it (a damaged header,
  or committed transactions beyond a damaged frame, are refused: SQLite would
  silently skip them), and a log missing after a server that did not close
  the file is refused;
- `PRAGMA quick_check` runs on every start; every SQLite error becomes a
  `StateError` naming the file;
- the schema has a version: version 1 files are migrated (after a backup
  copy), versions 2 and 3 in place (the table of names, which 3 added; the
  count of job fields in each event's rows, which 4 added when jobs gained
  their resources: older rows read with those unset), newer ones refused;
- a write that fails (disk full, I/O error) is rolled back and answered
  UNAVAILABLE, the store reports itself unhealthy (health NOT_SERVING) and
  probes the file until a write succeeds again.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernel.errors import TschedError, Unavailable
from kernel.jobs import JOB_FIELDS, LEGACY_FIELD_COUNT, FinishedJob, JobRequest
from predictor.service import records

log = logging.getLogger("tsched.service")

SCHEMA_VERSION = 4
#: SQLite's application id for tsched state files ("tscd"): another program's database is refused.
APPLICATION_ID = 0x74736364
#: Seconds between attempts to write after a failed write.
PROBE_SECONDS = 2.0
#: Event kinds.
COMPLETIONS = 1
SUBMISSIONS = 2
#: The log is cut back to this size after each checkpoint (SQLite checkpoints every 1000 pages, about 4 MB).
WAL_SIZE_LIMIT = 16 * 1024 * 1024
#: Version 1 rows are migrated this many at a time.
_MIGRATION_CHUNK = 50_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value);
CREATE TABLE IF NOT EXISTS namespaces (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    clock INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    kind INTEGER NOT NULL,
    spec TEXT,
    rows BLOB NOT NULL,
    fields INTEGER
);
CREATE INDEX IF NOT EXISTS events_by_namespace ON events(namespace_id, seq);
CREATE TABLE IF NOT EXISTS snapshots (
    namespace_id INTEGER PRIMARY KEY REFERENCES namespaces(id),
    through_seq INTEGER NOT NULL,
    image BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS names (
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    field TEXT NOT NULL,
    name TEXT NOT NULL,
    id INTEGER NOT NULL,
    PRIMARY KEY (namespace_id, field, name)
);
"""
#: Versions read and brought to SCHEMA_VERSION: 1 by `_migrate_from_1`; 2 lacks the names table, which opening
#: creates, and 2 and 3 the events' `fields` (how many job fields its rows hold: NULL, the first schema's),
#: which opening adds.
_MIGRATED_IN_PLACE = (2, 3)


class StateError(TschedError):
    """The state file cannot be used: locked by another server, damaged, of another schema or program."""


@dataclass(frozen=True)
class Event:
    """Completions a namespace learned, or jobs submitted to it and predicted by the estimator `spec`."""

    seq: int
    kind: int
    spec: str | None
    rows: np.ndarray

    @property
    def completions(self) -> list[FinishedJob]:
        return records.completions_from(self.rows)

    @property
    def submissions(self) -> list[JobRequest]:
        return records.submissions_from(self.rows)


class _Write:
    """One call's rows waiting for a group commit, and what became of them."""

    __slots__ = ("done", "error", "insert", "seq")

    def __init__(self, insert: Callable[[sqlite3.Connection], int]) -> None:
        self.insert = insert
        self.done = False
        self.seq = 0
        self.error: BaseException | None = None


@dataclass
class StoredNamespace:
    """A namespace as the file holds it: its clock, its latest snapshot (if any) and the events after it."""

    clock: int = 0
    snapshot: bytes | None = None
    events: list[Event] = field(default_factory=list)
    #: The ids its user and group names stand for: {(field, name): id}.
    names: dict[tuple[str, str], int] = field(default_factory=dict)


class StateLock:
    """One server per state file, keyed by the file's identity; and what the server acknowledged in it.

    The lock is an exclusive `flock` on the database file itself, so it holds
    whatever the file is called (a symlink, a hard link, another spelling of
    its folder); the kernel drops it when the holder dies, even by `kill -9`.
    Beside the file (its real path, `FILE.lock`) the holder writes its pid and,
    after each commit, the file's device and inode and the number of commits
    acknowledged so far: a later start that finds fewer commits in the file
    (a write-ahead log cut or replaced after a crash) refuses it. That count
    is written after SQLite's `fsync` of the commit, so the file on disk never
    holds fewer commits than it says, power cut included.
    """

    def __init__(self, database: Path) -> None:
        try:
            self._file = os.open(database, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise StateError(f"{database}: cannot open the state file: {error.strerror}") from None
        status = os.fstat(self._file)
        self.identity = f"{status.st_dev}:{status.st_ino}"
        real = Path(os.path.realpath(database))
        self.path = real.with_name(real.name + ".lock")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._file)
            holder = self._read().get("pid", "unknown")
            raise StateError(
                f"{database} is in use by another tsched server (pid {holder}): one server per state file"
            ) from None
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            os.close(self._file)
            raise StateError(f"{self.path}: cannot write the state file's lock: {error.strerror}") from None
        found = self._read()
        #: Commits the last server on this very file acknowledged (0: none known).
        self.acknowledged = int(found.get("acknowledged", 0)) if found.get("file") == self.identity else 0
        self.previous_holder = found.get("pid", "unknown")

    def _read(self) -> dict[str, str]:
        """The lock file's `key value` lines (an older tsched wrote only its pid)."""
        try:
            text = self.path.read_text("ascii", "replace")
        except OSError:
            return {}
        lines = [line.split(None, 1) for line in text.splitlines()]
        if len(lines) == 1 and len(lines[0]) == 1:
            return {"pid": lines[0][0]}
        return {line[0]: line[1].strip() for line in lines if len(line) == 2}

    def hold(self, commits: int) -> None:
        """Name this server as the holder of a file with `commits` commits (once the file is checked)."""
        os.ftruncate(self._fd, 0)
        self.acknowledge(commits)

    def acknowledge(self, commits: int) -> None:
        """Note that `commits` writes are committed (fixed width: one `pwrite`, never a torn line)."""
        line = f"pid {os.getpid():>10}\nfile {self.identity:>40}\nacknowledged {commits:>20}\n"
        os.pwrite(self._fd, line.encode("ascii"), 0)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            fcntl.flock(self._file, fcntl.LOCK_UN)
            os.close(self._file)
            self._fd = -1


# --- the write-ahead log, read before SQLite reads it --------------------------------------------

_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_VERSION = 3007000
_WAL_HEADER = 32
_FRAME_HEADER = 24
#: Frames whose checksums are computed together (bounds the memory the check takes).
_FRAMES_AT_ONCE = 1024


def _wal_checksum(words: Sequence[int], s0: int, s1: int) -> tuple[int, int]:
    """SQLite's WAL checksum (https://www.sqlite.org/fileformat2.html#walformat) of 32-bit words, from (s0, s1)."""
    for index in range(0, len(words), 2):
        s0 = (s0 + words[index] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[index + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def _checksum_steps(pairs: int) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The checksum as a linear map, for frames of `pairs` word pairs.

    One step is v' = M v + w with v = (s0, s1), M = [[1, 1], [1, 2]] and
    w = (a, a + b) for the words (a, b); over a frame, v' = M^pairs v + C with
    C = sum_t M^(pairs-1-t) w_t. Returns the powers M^(pairs-1-t) for each t
    (to compute C for many frames at once) and M^pairs, all modulo 2^32.
    """
    powers = np.empty((pairs + 1, 2, 2), dtype=np.uint64)
    powers[0] = np.eye(2, dtype=np.uint64)
    step = np.array([[1, 1], [1, 2]], dtype=np.uint64)
    for exponent in range(1, pairs + 1):
        powers[exponent] = (step @ powers[exponent - 1]) & 0xFFFFFFFF
    whole = powers[pairs]
    return powers[pairs - 1 :: -1], (int(whole[0, 0]), int(whole[0, 1]), int(whole[1, 0]), int(whole[1, 1]))


def check_wal(wal: Path) -> int:
    """The number of committed transactions in `wal`; StateError when SQLite would drop some of them.

    SQLite reads a log up to its first frame that fails the checksum or is of
    an earlier generation of the log, and ignores a log whose header fails it:
    either would silently lose acknowledged writes. A torn last transaction (a
    crash during its write, never acknowledged) is fine, even where a frame
    before its commit frame fails the checksum.
    """
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return 0
    if not data:
        return 0
    if len(data) < _WAL_HEADER:
        raise StateError(f"{wal}: damaged write-ahead log ({len(data)} bytes, shorter than its header)")
    magic, version, page_size, _, salt1, salt2, check1, check2 = struct.unpack(">8I", data[:_WAL_HEADER])
    order = ">" if magic == _WAL_MAGIC[1] else "<"
    if magic not in _WAL_MAGIC or version != _WAL_VERSION:
        raise StateError(f"{wal}: damaged write-ahead log (not SQLite's header)")
    if (check1, check2) != _wal_checksum(struct.unpack(f"{order}6I", data[:24]), 0, 0):
        raise StateError(f"{wal}: damaged write-ahead log (its header fails its checksum)")
    page_size = 65536 if page_size == 1 else page_size
    frame_size = _FRAME_HEADER + page_size
    count = (len(data) - _WAL_HEADER) // frame_size
    frames = np.frombuffer(data, np.uint8, count * frame_size, _WAL_HEADER).reshape(count, frame_size)
    headers = frames[:, :_FRAME_HEADER].copy().view(">u4").astype(np.int64)  # page, commit, salts, checksum
    current = (headers[:, 2] == salt1) & (headers[:, 3] == salt2)
    leading = count if current.all() else int(np.argmin(current))  # SQLite stops at an earlier generation's frame
    powers, (m00, m01, m10, m11) = _checksum_steps((8 + page_size) // 8)
    s0, s1 = check1, check2
    valid = 0
    for first in range(0, leading, _FRAMES_AT_ONCE):
        chunk = frames[first : min(leading, first + _FRAMES_AT_ONCE)]
        signed = np.concatenate([chunk[:, :8], chunk[:, _FRAME_HEADER:]], axis=1)  # what each checksum covers
        words = signed.view(f"{order}u4").astype(np.uint64).reshape(len(chunk), -1, 2)
        inputs = np.stack([words[:, :, 0], (words[:, :, 0] + words[:, :, 1]) & 0xFFFFFFFF], axis=2)
        added = np.einsum("tij,ntj->ni", powers, inputs) & 0xFFFFFFFF  # wraps modulo 2^64: exact modulo 2^32
        for c0, c1 in added.tolist():
            s0, s1 = (m00 * s0 + m01 * s1 + c0) & 0xFFFFFFFF, (m10 * s0 + m11 * s1 + c1) & 0xFFFFFFFF
            if (s0, s1) != (headers[valid, 4], headers[valid, 5]):
                break
            valid += 1
        if valid < first + len(chunk):
            break
    # The first commit after the damaged frame ends that frame's own transaction. If it is the last one, it was torn
    # while written (SQLite writes a commit frame before it rewrites the checksums of frames it overwrote in place),
    # and dropping it loses nothing acknowledged unless the lock file says so (`CompletionStore._check_acknowledged`).
    lost = np.flatnonzero(current[valid:] & (headers[valid:, 1] != 0))[1:]
    if lost.size:
        raise StateError(
            f"{wal}: damaged write-ahead log: transactions committed after the frame at byte "
            f"{_WAL_HEADER + valid * frame_size} would be lost (SQLite stops reading at a damaged frame); "
            "restore the file from a backup"
        )
    return int(np.count_nonzero(headers[:valid, 1]))


# --- the store -----------------------------------------------------------------------------------


class CompletionStore:
    """One SQLite file holding every namespace's recorded events and snapshots, for one server.

    Calls come from the server's worker threads; one connection behind a lock
    keeps writes serialised, which SQLite needs anyway.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._namespace_ids: dict[str, int] = {}
        self._healthy = True
        self._listeners: list[Callable[[bool], None]] = []
        self._probing = threading.Event()
        self._closed = False
        #: Writes waiting for the next group commit (see `_commit_group`), and the lock that guards the list.
        self._queue: list[_Write] = []
        self._queue_lock = threading.Lock()
        self._state_lock = StateLock(self.path)
        try:
            self._db = self._open()
        except BaseException:
            self._state_lock.release()
            raise
        #: Transactions committed in the file's life (`meta.commits`), as the lock file acknowledges them.
        self._commits = int(self._db.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()[0])
        self._state_lock.hold(self._commits)

    # --- opening ---

    def _open(self) -> sqlite3.Connection:
        real = Path(os.path.realpath(self.path))  # SQLite follows a symlink: its log is beside the real file
        wal = real.with_name(real.name + "-wal")
        existed = self.path.exists() and self.path.stat().st_size > 0
        if not existed and wal.exists() and wal.stat().st_size:
            raise StateError(f"{wal} holds writes but {self.path} is missing or empty: restore {self.path.name}")
        commits = check_wal(wal) if existed else 0
        wal_present = wal.exists()  # before SQLite opens the database, which creates an empty log
        if existed and wal_present:
            self._check_acknowledged(wal)
        try:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as error:
            raise StateError(f"{self.path}: cannot open as the state database: {error}") from None
        try:
            self._check(db, wal, existed, wal_present)
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise StateError(f"{self.path}: SQLite refused WAL journaling (mode is {mode!r})")
            db.execute("PRAGMA synchronous=FULL")
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            db.executescript(_SCHEMA)
            if "fields" not in {row[1] for row in db.execute("PRAGMA table_info(events)")}:
                db.execute("ALTER TABLE events ADD COLUMN fields INTEGER")  # constant time: no row is rewritten
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            # Written, then checkpointed into the database itself: a later start that finds this pid
            # knows this server did not close the file, and that its log holds writes.
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('running_pid', ?)", (os.getpid(),))
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('commits', 0)")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._namespace_ids = dict(db.execute("SELECT name, id FROM namespaces"))
        except sqlite3.Error as error:
            db.close()
            raise StateError(
                f"{self.path}: cannot use as the state database: {error} "
                f"(is it damaged? its log {wal.name} must stay beside it)"
            ) from None
        except BaseException:
            db.close()
            raise
        if commits:
            log.info("%s: replaying %d transaction(s) from %s", self.path, commits, wal.name)
        return db

    def _check_acknowledged(self, wal: Path) -> None:
        """Refuse a file that holds fewer commits than its last server acknowledged: its log was cut or
        replaced after a crash (no checksum can tell: the frames left are intact). Read-only, so that a
        refused file is left exactly as it was found."""
        owed = self._state_lock.acknowledged
        if not owed:
            return
        try:
            reader = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
            try:
                row = reader.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()
            finally:
                reader.close()
        except sqlite3.Error:
            return  # damaged or of an older schema: the checks of the open that follows name what is wrong
        held = 0 if row is None else int(row[0])
        if held < owed:
            raise StateError(
                f"{wal}: damaged write-ahead log: {owed - held} of the {owed} transactions the last server "
                f"(pid {self._state_lock.previous_holder}) acknowledged are not in it (cut or replaced after a "
                f"crash); starting would lose acknowledged data. Restore {self.path.name} and {wal.name} "
                f"from a backup; to start without those writes instead, remove {self._state_lock.path}"
            )

    def _check(self, db: sqlite3.Connection, wal: Path, existed: bool, wal_present: bool) -> None:
        """Integrity, program, schema version, and a log lost since an unclean stop; migrate version 1."""
        problems = [row[0] for row in db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise StateError(
                f"{self.path}: damaged database ({'; '.join(problems[:3])}); restore it (and {wal.name}) from a backup"
            )
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            if existed and not self.path.read_bytes()[:16].startswith(b"SQLite format 3"):
                raise StateError(f"{self.path}: not an SQLite database")
            return
        version = db.execute("PRAGMA user_version").fetchone()[0]
        application = db.execute("PRAGMA application_id").fetchone()[0]
        if version == 1 and tables >= {"namespaces", "completions"} and application == 0:
            self._migrate_from_1(db)
            return
        if application != APPLICATION_ID:
            raise StateError(f"{self.path}: not a tsched state file (tables: {', '.join(sorted(tables))})")
        if version in _MIGRATED_IN_PLACE:
            log.info("%s: schema version %d brought to %d in place", self.path, version, SCHEMA_VERSION)
        elif version != SCHEMA_VERSION:
            raise StateError(
                f"{self.path}: a state file of schema version {version}; this tsched reads versions 1 to "
                f"{SCHEMA_VERSION} (a newer tsched wrote it?)"
            )
        running = db.execute("SELECT value FROM meta WHERE key = 'running_pid'").fetchone()
        if running is not None and running[0] is not None and not wal_present:
            raise StateError(
                f"{wal} is missing: the server that last used {self.path} (pid {running[0]}) stopped without "
                f"closing it, and its last writes are in that log. Put {wal.name} back beside {self.path.name}; "
                f'to start without those writes instead: sqlite3 {self.path} "UPDATE meta SET value = NULL '
                "WHERE key = 'running_pid'\""
            )

    def _migrate_from_1(self, db: sqlite3.Connection) -> None:
        """Version 1 (one row per completion) to version 2 (events), after a backup copy of the file."""
        backup = self.path.with_name(self.path.name + ".v1-backup")
        if backup.exists():
            raise StateError(f"{self.path}: a version 1 file to migrate, but {backup} already exists; move it away")
        db.execute("VACUUM INTO ?", (str(backup),))
        columns = ", ".join((*(item.column for item in JOB_FIELDS[:LEGACY_FIELD_COUNT]), "end_time", "runtime"))
        db.executescript(_SCHEMA)  # the new tables (version 1's namespaces table is version 2's)
        db.execute("BEGIN IMMEDIATE")
        try:
            for (ns_id,) in db.execute("SELECT id FROM namespaces").fetchall():
                rows = db.execute(f"SELECT {columns} FROM completions WHERE namespace_id = ? ORDER BY seq", (ns_id,))
                while chunk := rows.fetchmany(_MIGRATION_CHUNK):
                    db.execute(
                        "INSERT INTO events (namespace_id, kind, spec, rows) VALUES (?, ?, NULL, ?)",
                        (ns_id, COMPLETIONS, records.pack(np.array(chunk, dtype=np.int64))),
                    )
            db.execute("DROP TABLE completions")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        log.info(
            "%s: migrated from schema version 1 to %d (the version 1 file is kept as %s)",
            self.path,
            SCHEMA_VERSION,
            backup,
        )

    # --- reading ---

    def load(self) -> dict[str, StoredNamespace]:
        """Every namespace: its clock, latest snapshot, and the events recorded after it, in order."""
        with self._lock:
            stored: dict[str, StoredNamespace] = {}
            names: dict[int, str] = {}
            for ns_id, name, clock in self._db.execute("SELECT id, name, clock FROM namespaces"):
                names[ns_id] = name
                stored[name] = StoredNamespace(clock=clock)
            since: dict[int, int] = {}
            for ns_id, through, image in self._db.execute("SELECT namespace_id, through_seq, image FROM snapshots"):
                stored[names[ns_id]].snapshot = image
                since[ns_id] = through
            for ns_id, kind, name, number in self._db.execute("SELECT namespace_id, field, name, id FROM names"):
                stored[names[ns_id]].names[(kind, name)] = number
            for seq, ns_id, kind, spec, blob, fields in self._db.execute(
                "SELECT seq, namespace_id, kind, spec, rows, fields FROM events ORDER BY seq"
            ):
                if seq > since.get(ns_id, 0):
                    rows = records.unpack_jobs(blob, fields or LEGACY_FIELD_COUNT, kind == COMPLETIONS)
                    stored[names[ns_id]].events.append(Event(seq, kind, spec, rows))
        return stored

    # --- writing ---

    def record(
        self,
        namespace: str,
        clock: int,
        completions: Sequence[FinishedJob],
        submissions: Sequence[JobRequest] = (),
        spec: str | None = None,
        names: Sequence[tuple[str, str, int]] = (),
    ) -> int:
        """Durably add a call's events, and the ids of names it used first, to `namespace` and set its clock;
        return the last seq. Returns once the transaction holding them is committed: the calls of other
        threads waiting meanwhile are committed with it, in one transaction (group commit)."""
        write = _Write(functools.partial(self._insert, namespace, clock, completions, submissions, spec, names))
        with self._queue_lock:
            self._queue.append(write)
        with self._lock:
            if not write.done:
                self._commit_group()
        if write.error is not None:
            raise write.error
        return write.seq

    def _commit_group(self) -> None:
        """Commit every queued write in one transaction (the caller holds the lock); a failure fails them all
        (nothing of any is kept)."""
        with self._queue_lock:
            group, self._queue = self._queue, []
        try:
            with self._transaction() as db:
                for write in group:
                    write.seq = write.insert(db)
        except BaseException as error:
            for write in group:
                write.error = error
        finally:
            for write in group:
                write.done = True

    def _insert(
        self,
        namespace: str,
        clock: int,
        completions: Sequence[FinishedJob],
        submissions: Sequence[JobRequest],
        spec: str | None,
        names: Sequence[tuple[str, str, int]],
        db: sqlite3.Connection,
    ) -> int:
        """One call's rows, inside the group's transaction; the last seq."""
        ns_id = self._namespace_ids.get(namespace)
        if ns_id is None:
            cursor = db.execute("INSERT INTO namespaces (name, clock) VALUES (?, ?)", (namespace, clock))
            assert cursor.lastrowid is not None  # an INSERT into a rowid table
            ns_id = self._namespace_ids[namespace] = cursor.lastrowid
        else:
            db.execute("UPDATE namespaces SET clock = ? WHERE id = ?", (clock, ns_id))
        db.executemany(
            "INSERT INTO names (namespace_id, field, name, id) VALUES (?, ?, ?, ?)",
            [(ns_id, kind, name, number) for kind, name, number in names],
        )
        seq = 0
        insert = "INSERT INTO events (namespace_id, kind, spec, rows, fields) VALUES (?, ?, ?, ?, ?)"
        if completions:
            blob = records.pack(records.completion_rows(completions))
            seq = db.execute(insert, (ns_id, COMPLETIONS, None, blob, records.FIELD_COUNT)).lastrowid or 0
        if submissions:
            blob = records.pack(records.submission_rows(submissions))
            seq = db.execute(insert, (ns_id, SUBMISSIONS, spec, blob, records.FIELD_COUNT)).lastrowid or 0
        return seq

    def save_snapshot(self, namespace: str, through_seq: int, image: bytes) -> None:
        """Keep `image` as the namespace's state through event `through_seq`, and drop the events it holds."""
        with self._writing() as db:
            ns_id = self._namespace_ids.get(namespace)
            if ns_id is None:
                return
            db.execute(
                "INSERT OR REPLACE INTO snapshots (namespace_id, through_seq, image) VALUES (?, ?, ?)",
                (ns_id, through_seq, image),
            )
            db.execute("DELETE FROM events WHERE namespace_id = ? AND seq <= ?", (ns_id, through_seq))
        with self._lock:  # move the snapshot out of the log: the log stays small, and so do restarts
            try:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as error:
                log.warning("%s: checkpoint after a snapshot failed: %s", self.path, error)

    def forget(self, namespace: str) -> None:
        """Drop a namespace, its events and its snapshot."""
        if namespace not in self._namespace_ids:
            return  # never stored (an ephemeral namespace, or nothing recorded yet): no transaction to pay
        with self._writing() as db:
            ns_id = self._namespace_ids.pop(namespace, None)
            if ns_id is not None:
                for table in ("events", "snapshots", "names"):
                    db.execute(f"DELETE FROM {table} WHERE namespace_id = ?", (ns_id,))
                db.execute("DELETE FROM namespaces WHERE id = ?", (ns_id,))

    def close(self) -> None:
        """Checkpoint the log into the database, mark the file closed, and release it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._db.execute("UPDATE meta SET value = NULL WHERE key = 'running_pid'")
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as error:  # a full disk: the log stays, and the next start replays it
                log.warning("%s: not closed cleanly (%s); the next start replays its log", self.path, error)
            self._db.close()
            self._state_lock.release()

    # --- health ---

    @property
    def healthy(self) -> bool:
        """False after a write failed, until a write succeeds again."""
        return self._healthy

    def on_health_change(self, listener: Callable[[bool], None]) -> None:
        self._listeners.append(listener)

    def _set_healthy(self, healthy: bool) -> None:
        if healthy == self._healthy:
            return
        self._healthy = healthy
        if healthy:
            log.info("%s: writable again", self.path)
        for listener in self._listeners:
            listener(healthy)
        if not healthy and not self._probing.is_set():
            self._probing.set()
            threading.Thread(target=self._probe, name="tsched-state-probe", daemon=True).start()

    def _probe(self) -> None:
        """While unhealthy, try a small write every PROBE_SECONDS; the first that succeeds restores health."""
        try:
            while not self._healthy and not self._closed:
                time.sleep(PROBE_SECONDS)
                try:
                    with self._writing() as db:
                        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('probed_by', ?)", (os.getpid(),))
                except Unavailable:
                    continue
        finally:
            self._probing.clear()

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One transaction of its own, under the lock (see `_transaction`)."""
        with self._lock, self._transaction() as db:
            yield db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction (the caller holds the lock): committed and acknowledged on success; on failure
        rolled back, the namespace ids re-read, and a database error reported as Unavailable (the store
        turns unhealthy)."""
        if self._closed:
            raise Unavailable("the server is stopping: its state file is closed")
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("UPDATE meta SET value = ? WHERE key = 'commits'", (self._commits + 1,))
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                self._namespace_ids = dict(db.execute("SELECT name, id FROM namespaces"))
                raise
        except sqlite3.Error as error:
            log.error("%s: write failed: %s", self.path, error)
            self._set_healthy(False)
            raise Unavailable(
                f"the server cannot write its state file ({error}); nothing of this call was kept; retry later"
            ) from None
        self._commits += 1
        self._state_lock.acknowledge(self._commits)
        self._set_healthy(True)
