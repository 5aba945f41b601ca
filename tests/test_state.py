"""The state file: one server per file, nothing acknowledged lost, nothing lost quietly, restarts that answer alike."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from service_support import (
    PATIENT_SECONDS,
    code_running_payloads,
    damaged_state,
    history,
    instants,
    observe_by_name,
    rewritten_snapshot,
    snapshotted_state,
    status_of,
    submissions,
)

from kernel.jobs import LEGACY_FIELD_COUNT, FinishedJob, JobRequest, Prediction
from predictor.registry import make_estimator
from predictor.service import records, snapshots
from predictor.service.client import PredictorClient
from predictor.service.core import PredictorCore
from predictor.service.launcher import ServerProcess
from predictor.service.limits import Limits
from predictor.service.state import APPLICATION_ID, SCHEMA_VERSION, CompletionStore, StateError, check_wal
from predictor.session import LocalSession
from simulator.engine import SimulationConfig
from simulator.workloads.formats import read_trace
from tsched.cli import main

PERCENTILE = "percentile"
#: Retrains every 2 days of trace time: in the service on its training threads, in-process inline.
SMALL_LGBM = "lgbm-quantile:window=5d,retrain=2d,calibration=3d,min_train=200,trees=5"


def in_process(spec: str, steps: list[tuple[list[FinishedJob], list[JobRequest]]]) -> list[list[Prediction]]:
    session = LocalSession(make_estimator(spec))
    return [session.sync(finished, submitted) for finished, submitted in steps]


# --- one server per file ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_server_on_the_same_file_refuses_naming_the_first(tmp_path: Path) -> None:
    state = tmp_path / "state.sqlite"
    first = ServerProcess(state=str(state))
    try:
        with pytest.raises(StateError, match=rf"in use by another tsched server \(pid {first.pid}\)"):
            CompletionStore(state)
        with pytest.raises(RuntimeError, match=f"pid {first.pid}"):
            ServerProcess(state=str(state))
        with PredictorClient(first.address, timeout=PATIENT_SECONDS) as client:
            assert client.observe(history(10), namespace="kept") == 10
    finally:
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    second = ServerProcess(state=str(state))  # the kernel dropped the dead server's lock
    try:
        with PredictorClient(second.address, timeout=PATIENT_SECONDS) as client:
            assert client.list_estimators("kept").completions == 10
    finally:
        assert second.stop() == 0


def test_the_lock_follows_the_file_not_its_spelling(tmp_path: Path) -> None:
    """A symlink or a hard link to the live file is the same file: a second server through it is refused."""
    state = tmp_path / "state.sqlite"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    symlink, hard_link = elsewhere / "link.sqlite", elsewhere / "hard.sqlite"
    first = ServerProcess(state=str(state))
    try:
        symlink.symlink_to(state)
        hard_link.hardlink_to(state)
        for spelling in (symlink, hard_link, tmp_path / "." / "state.sqlite"):
            with pytest.raises(StateError, match="in use by another tsched server"):
                CompletionStore(spelling)
        with pytest.raises(StateError, match=rf"pid {first.pid}\)"):
            CompletionStore(symlink)  # the holder's pid is found beside the real file
    finally:
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    store = CompletionStore(symlink)  # once the holder is gone, any spelling opens it
    store.close()


# --- restarts answer alike ----------------------------------------------------------------------------


@pytest.mark.slow
def test_after_kill_9_the_clock_and_every_answer_are_as_before(tmp_path: Path) -> None:
    state = str(tmp_path / "state.sqlite")
    finished = history(40)
    first = ServerProcess(state=state, default_estimators=["last2"])
    try:
        with PredictorClient(first.address, timeout=PATIENT_SECONDS) as client:
            client.sync(finished, submissions(finished[-1].end + 3600, count=2), namespace="cluster")
            clock = client.list_estimators("cluster").clock
            before = client.predict(user=1, group=7, t_req=3600, procs=4, namespace="cluster")
    finally:
        first.stop(signal.SIGKILL)
    assert clock == finished[-1].end + 3600  # the submissions moved it
    second = ServerProcess(state=state, default_estimators=["last2"])
    try:
        with PredictorClient(second.address, timeout=PATIENT_SECONDS) as client:
            assert client.list_estimators("cluster").clock == clock
            assert client.predict(user=1, group=7, t_req=3600, procs=4, namespace="cluster") == before
    finally:
        second.stop()


@pytest.mark.slow
def test_an_lgbm_namespace_restarted_by_kill_9_answers_as_an_in_process_replay(tmp_path: Path) -> None:
    state = str(tmp_path / "state.sqlite")
    steps = instants()
    expected = in_process(SMALL_LGBM, steps)
    assert sum(not p.fallback for answers in expected for p in answers) > 200  # models were trained and used
    limits = Limits(snapshot_every=400)  # snapshots mid-way, and events after the last one at the kill
    served: list[list[Prediction]] = []
    half = len(steps) // 2
    for part in (steps[:half], steps[half:]):
        server = ServerProcess(state=state, limits=limits)
        try:
            with PredictorClient(server.address, timeout=60) as client:
                served += [client.sync(f, s, namespace="replay", estimator=SMALL_LGBM) for f, s in part]
        finally:
            assert server.stop(signal.SIGKILL) == -signal.SIGKILL
        assert part is steps[half:] or any("saved" in line for line in server.log)
    assert any("restored" in line for line in server.log)
    assert served == expected


def test_a_restart_replays_from_the_latest_snapshot(tmp_path: Path) -> None:
    state = tmp_path / "state.sqlite"
    limits = Limits(snapshot_every=100, max_history=150)
    core = PredictorCore([PERCENTILE], store=CompletionStore(state), limits=limits)
    finished = history(500)
    for start in range(0, 500, 50):
        core.observe("bounded", finished[start : start + 50], lambda: None)
    answer = core.predict("bounded", "", submissions(finished[-1].end)).predictions
    core.close()
    with sqlite3.connect(state) as db:
        events = db.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        snapshots = db.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0]
    assert snapshots == 1 and events < 100 / 50 + 1  # the file holds the snapshot and the events after it only
    restored = PredictorCore([PERCENTILE], store=CompletionStore(state), limits=limits)
    assert restored.describe("bounded").completions == 150  # the oldest were dropped, on disk too
    assert restored.predict("bounded", "", submissions(finished[-1].end)).predictions == answer
    restored.close()


# --- nothing lost quietly ---------------------------------------------------------------------------


@pytest.fixture
def crashed(tmp_path: Path) -> Path:
    """A state file whose server was killed: its last writes are only in the write-ahead log."""
    state = tmp_path / "state.sqlite"
    server = ServerProcess(state=str(state))
    with PredictorClient(server.address, timeout=PATIENT_SECONDS) as client:
        client.observe(history(50), namespace="cluster")
    server.stop(signal.SIGKILL)
    assert check_wal(Path(f"{state}-wal")) >= 1
    return state


def test_a_write_ahead_log_lost_after_a_crash_is_refused_naming_it(
    crashed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path(f"{crashed}-wal").unlink()
    Path(f"{crashed}-shm").unlink(missing_ok=True)
    with pytest.raises(StateError, match=r"state\.sqlite-wal is missing"):
        CompletionStore(crashed)
    assert main(["serve", "--state", str(crashed)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "-wal is missing" in error and "Traceback" not in error


def test_a_damaged_write_ahead_log_is_refused(crashed: Path) -> None:
    wal = Path(f"{crashed}-wal")
    intact = wal.read_bytes()
    wal.write_bytes(intact[:24] + bytes(8) + intact[32:])  # its header's checksum
    with pytest.raises(StateError, match="header fails its checksum"):
        CompletionStore(crashed)
    damaged = bytearray(intact)
    damaged[32 + 24 + 100] ^= 0xFF  # inside the first frame's page: the commits after it would be dropped
    wal.write_bytes(bytes(damaged))
    with pytest.raises(StateError, match=r"would be lost|acknowledged are not in it"):
        CompletionStore(crashed)
    wal.write_bytes(intact)
    store = CompletionStore(crashed)
    assert len(store.load()["cluster"].events) == 1
    store.close()


def test_a_damaged_frame_in_the_last_transaction_loses_only_that_transaction(tmp_path: Path) -> None:
    """SQLite writes a commit frame before it rewrites the checksums of frames it overwrote in place: a kill -9
    between the two leaves a bad frame followed by its own transaction's commit, never acknowledged. That log is
    read without the torn transaction; a bad frame followed by more than its own commit is refused."""
    state = tmp_path / "state.sqlite"
    server = ServerProcess(state=str(state))
    with PredictorClient(server.address, timeout=PATIENT_SECONDS) as client:
        for job in history(3):
            client.observe([job], namespace="cluster")
    server.stop(signal.SIGKILL)
    wal = Path(f"{state}-wal")
    intact = wal.read_bytes()
    frame = 24 + 4096
    count = (len(intact) - 32) // frame
    commits = [i for i in range(count) if int.from_bytes(intact[32 + i * frame + 4 : 32 + i * frame + 8], "big")]
    assert len(commits) >= 2 and check_wal(wal) == len(commits)

    def damaged_at(index: int) -> bytes:
        data = bytearray(intact)
        data[32 + index * frame + 24 + 100] ^= 0xFF
        return bytes(data)

    wal.write_bytes(damaged_at(commits[-2] + 1))  # the last transaction's first frame
    assert check_wal(wal) == len(commits) - 1
    wal.write_bytes(damaged_at(commits[-2]))  # the commit frame before it: the last transaction would be lost too
    with pytest.raises(StateError, match="would be lost"):
        check_wal(wal)


#: Acknowledged calls (one transaction each) before the kill, in the torn-log test.
ACKNOWLEDGED = 200


def test_a_write_ahead_log_cut_after_kill_9_is_refused_or_loses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kill -9 a real server after ACKNOWLEDGED acknowledged calls, cut its log at several offsets: every start
    is refused naming the log, or has every acknowledged completion (frames left intact: no checksum can
    tell that a log lost its tail, the count of commits acknowledged beside the file does)."""
    state = tmp_path / "state.sqlite"
    finished = history(ACKNOWLEDGED)
    server = ServerProcess(state=str(state))
    try:
        with PredictorClient(server.address, timeout=PATIENT_SECONDS) as client:
            for job in finished:
                assert client.observe([job], namespace="cluster") == 1
    finally:
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    files = {path: path.read_bytes() for path in tmp_path.iterdir() if path.is_file()}
    wal = Path(f"{state}-wal")
    intact = files[wal]
    frame = 24 + 4096
    assert len(intact) > 32 + 20 * frame  # the calls are in the log, not yet in the database
    refused = []
    cuts = [0, 16, 32, 32 + frame + 100, len(intact) // 3, len(intact) // 2, len(intact) - frame - 7]
    for cut in [*cuts, len(intact) - 1, len(intact)]:
        for path, data in files.items():  # the same files (same inodes), as the kill left them
            path.write_bytes(data)
        wal.write_bytes(intact[:cut])
        try:
            store = CompletionStore(state)
        except StateError as error:
            message = str(error)
        else:
            held = store.load()["cluster"]
            store.close()
            # Started: every acknowledged completion is there (a cut in frames of an earlier, checkpointed
            # generation of the log, which SQLite had started overwriting from its head, loses nothing).
            assert sum(len(event.completions) for event in held.events) == ACKNOWLEDGED, f"cut at byte {cut}"
            continue
        assert str(wal) in message and "damaged write-ahead log" in message
        assert wal.read_bytes() == intact[:cut]  # a refused file is left as it was found
        refused.append(cut)
    assert refused[:4] == cuts[:4] and len(intact) not in refused
    for path, data in files.items():
        path.write_bytes(data)
    wal.write_bytes(intact[: cuts[3]])
    assert main(["serve", "--state", str(state)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "state.sqlite-wal: damaged write-ahead log" in error and "Traceback" not in error


def test_a_damaged_database_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = damaged_state(tmp_path)
    with pytest.raises(StateError, match=r"state\.sqlite"):
        CompletionStore(state)
    assert main(["serve", "--state", str(state)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "state.sqlite" in error


def test_files_of_other_versions_and_programs(tmp_path: Path) -> None:
    newer = tmp_path / "newer.sqlite"
    with sqlite3.connect(newer) as db:
        db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
        db.execute("CREATE TABLE namespaces (id INTEGER PRIMARY KEY)")
    with pytest.raises(StateError, match=f"schema version {SCHEMA_VERSION + 1}"):
        CompletionStore(newer)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
    with pytest.raises(StateError, match="not a tsched state file"):
        CompletionStore(foreign)
    text = tmp_path / "notes.txt"
    text.write_text("this is not SQLite\n" * 100)
    with pytest.raises(StateError, match=r"notes\.txt"):
        CompletionStore(text)


#: Version 1's tables, as tsched wrote them before events and snapshots.
_VERSION_1 = """
CREATE TABLE namespaces (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, clock INTEGER NOT NULL);
CREATE TABLE completions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    job_id INTEGER NOT NULL, submit INTEGER NOT NULL, user INTEGER NOT NULL, grp INTEGER NOT NULL,
    t_req INTEGER NOT NULL, procs INTEGER NOT NULL, queue INTEGER NOT NULL, executable INTEGER NOT NULL,
    end_time INTEGER NOT NULL, runtime INTEGER NOT NULL
);
PRAGMA user_version=1;
"""


def test_a_version_1_file_is_migrated_after_a_backup(tmp_path: Path) -> None:
    state = tmp_path / "state.sqlite"
    finished = history(120)
    with sqlite3.connect(state) as db:
        db.executescript(_VERSION_1)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("INSERT INTO namespaces VALUES (1, 'cluster', ?)", (finished[-1].end,))
        db.executemany(
            "INSERT INTO completions (namespace_id, job_id, submit, user, grp, t_req, procs, queue, executable, "
            "end_time, runtime) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(*job.request[:LEGACY_FIELD_COUNT], job.end, job.runtime) for job in finished],
        )
    core = PredictorCore([PERCENTILE], store=CompletionStore(state))
    assert core.describe("cluster").completions == 120
    expected = LocalSession(make_estimator(PERCENTILE)).sync(finished, submissions(finished[-1].end))
    assert core.predict("cluster", "", submissions(finished[-1].end)).predictions == expected
    core.close()
    assert (tmp_path / "state.sqlite.v1-backup").is_file()
    with sqlite3.connect(state) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_snapshot_that_would_run_code_is_refused_naming_the_file(tmp_path: Path) -> None:
    state = snapshotted_state(tmp_path)
    marker = tmp_path / "ran"
    for crafted in code_running_payloads(f"touch {marker}"):
        with sqlite3.connect(state) as db:
            db.execute("UPDATE snapshots SET image = ?", (crafted,))
        store = CompletionStore(state)
        try:
            with pytest.raises(StateError) as refused:
                PredictorCore([PERCENTILE], store=store)
        finally:
            store.close()
        assert not marker.exists()  # nothing ran
        assert f"{state}: the snapshot of namespace 'cluster' is refused" in str(refused.value)


def test_snapshots_hold_data_only_and_are_checked_before_use() -> None:
    estimator = make_estimator("mean-std")
    for job in history(50):
        estimator.observe(job)
    image = snapshots.NamespaceImage(records.pack(records.completion_rows(history(5))), 7, {"mean-std": estimator})
    blob = snapshots.dump(image)
    assert b"\x80" not in blob[:16] and blob.startswith(b"tsched-snapshot")  # not a pickle
    restored = snapshots.load(blob, None)
    query = submissions(history(50)[-1].end)
    assert restored.estimators["mean-std"].predict_many(query) == estimator.predict_many(query)

    def node_of_class(document: dict[str, Any]) -> dict[str, Any]:
        return document["estimators"]["mean-std"]

    def foreign_class(document: dict[str, Any]) -> None:
        node_of_class(document)["class"] = "os:system"

    def getter_of(document: dict[str, Any]) -> dict[str, Any]:
        history_node = node_of_class(document)["state"]["_history"]
        return history_node["state"]["_key"]

    def dunder_getter(document: dict[str, Any]) -> None:
        getter_of(document)["fields"] = ["__class__"]

    def out_of_range(document: dict[str, Any]) -> None:
        node_of_class(document)["state"]["k"] = 1e9

    def dunder_attribute(document: dict[str, Any]) -> None:
        node_of_class(document)["state"]["__class__"] = None

    def object_array(document: dict[str, Any]) -> None:
        document["history"]["dtype"] = "|O"

    for change, refusal in (
        (foreign_class, "may not hold a os:system"),
        (dunder_getter, "not fields of a job"),
        (out_of_range, "k must be in"),
        (dunder_attribute, "sets the attribute '__class__'"),
        (object_array, "dtype '|O'"),
    ):
        with pytest.raises(snapshots.SnapshotRefusedError, match=refusal):
            snapshots.load(rewritten_snapshot(blob, change), None)
    with pytest.raises(snapshots.SnapshotRefusedError, match="outside the snapshot's bytes"):
        snapshots.load(blob[:-8], None)


def test_records_round_trip() -> None:
    finished = history(10)
    rows = records.completion_rows(finished)
    assert records.completions_from(records.unpack(records.pack(rows), records.COMPLETION_WIDTH)) == finished
    kept = records.History()
    for start in range(0, 10, 3):
        kept.extend(finished[start : start + 3])
    assert list(kept) == finished and kept.latest_end == finished[-1].end
    assert kept.evict(before_end=finished[4].end, keep_at_most=10) == 4
    assert list(kept) == finished[4:] and kept.since(finished[8].end) == finished[8:]
    assert kept.evict(before_end=0, keep_at_most=2) == 4 and len(kept) == 2
    with pytest.raises(ValueError, match="whole number"):
        records.unpack(b"\0" * 12, records.COMPLETION_WIDTH)
    assert np.array_equal(kept.rows, rows[8:])


# --- a full disk ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB file system of its own (tmpfs; needs root, as CI and this project's machine have)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(folder)]
    if os.geteuid() != 0 or subprocess.run(mount, check=False, capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.mark.slow
def test_a_full_disk_is_not_serving_and_writes_answer_unavailable(small_disk: Path) -> None:
    server = ServerProcess(state=str(small_disk / "state.sqlite"))
    filler = small_disk / "filler"
    try:
        with PredictorClient(server.address, timeout=PATIENT_SECONDS) as client:
            kept = client.observe(history(100), namespace="cluster")
            free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
            filler.write_bytes(b"\0" * (free - 32 * 1024))
            codes = set()
            for start in range(20):
                batch = history(2000, start=10**6 * (start + 1))
                codes.add(status_of(lambda b=batch: client.observe(b, namespace="cluster"))[0])
                if grpc.StatusCode.UNAVAILABLE in codes:
                    break
            assert codes == {grpc.StatusCode.UNAVAILABLE}
            assert client.health() == "NOT_SERVING"
            assert client.predict(user=1, group=7, t_req=3600, procs=4, namespace="cluster").prediction.t_sched > 0
            assert client.list_estimators("cluster").completions == kept  # nothing half-learned
            filler.unlink()
            deadline = time.monotonic() + 10
            while client.health() != "SERVING" and time.monotonic() < deadline:
                time.sleep(0.2)
            assert client.health() == "SERVING"
            assert client.observe(history(10, start=10**5), namespace="cluster") == 10
    finally:
        assert server.stop() == 0
    assert any("write failed" in line for line in server.log)


def test_names_keep_their_ids_across_a_restart(tmp_path: Path) -> None:
    """Users and groups had to be integers; names are now mapped to ids kept with the namespace's state."""
    state = tmp_path / "state.sqlite"
    server = ServerProcess(state=str(state), default_estimators=["last2"])
    assert observe_by_name(server.address, "cluster", history(30)) == 30
    with PredictorClient(server.address, timeout=PATIENT_SECONDS) as client:
        before = client.predict(user="user-1", group=-1, account="proj1", t_req=3600, procs=4, namespace="cluster")
        stranger = client.predict(user="user-9", group="proj1", t_req=3600, procs=4, namespace="cluster")
    assert not before.prediction.fallback and stranger.prediction.fallback
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    server = ServerProcess(state=str(state), default_estimators=["last2"])
    with PredictorClient(server.address, timeout=PATIENT_SECONDS) as client:
        after = client.predict(user="user-1", group=-1, account="proj1", t_req=3600, procs=4, namespace="cluster")
    assert after == before
    assert observe_by_name(server.address, "cluster", history(30)) == 0  # the same jobs: recognised, not relearned
    assert server.stop() == 0


def test_a_version_2_file_gains_the_table_of_names(tmp_path: Path) -> None:
    state = tmp_path / "state.sqlite"
    CompletionStore(state).close()
    with sqlite3.connect(state) as db:
        db.execute("DROP TABLE names")
        db.execute("PRAGMA user_version=2")
    store = CompletionStore(state)
    store.record("cluster", 10, history(3), names=[("user", "alice", 1 << 40)])
    assert store.load()["cluster"].names == {("user", "alice"): 1 << 40}
    store.close()
    with sqlite3.connect(state) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4


def _legacy(rows: np.ndarray, completions: bool) -> bytes:
    """Rows as a version 3 file held them: the first schema's job fields (then end and runtime)."""
    kept = list(range(LEGACY_FIELD_COUNT)) + ([records.END, records.END + 1] if completions else [])
    return records.pack(rows[:, kept])


def test_a_version_3_file_reads_its_jobs_with_their_resources_unset(tmp_path: Path) -> None:
    """Jobs gained their resources in version 4: a version 3 file's rows (eight job fields) are read as they
    were, the fields added since unset, without rewriting a row; the events written after hold all fields."""
    state = tmp_path / "state.sqlite"
    finished, asked = history(6), submissions(10_000, count=2)
    store = CompletionStore(state)
    store.record("cluster", 10_000, finished, asked, spec="percentile")
    store.close()
    with sqlite3.connect(state) as db:
        for seq, kind, blob in db.execute("SELECT seq, kind, rows FROM events").fetchall():
            completions = kind == 1
            rows = records.unpack(blob, records.COMPLETION_WIDTH if completions else records.SUBMISSION_WIDTH)
            db.execute("UPDATE events SET rows = ? WHERE seq = ?", (_legacy(rows, completions), seq))
        db.execute("ALTER TABLE events DROP COLUMN fields")
        db.execute("PRAGMA user_version=3")
    store = CompletionStore(state)
    later = JobRequest(99, 10_500, 1, 7, 3600, 8, 2, -1, nodes=2, memory_mb=4096, gpus=4, qos=3, exclusive=1)
    store.record("cluster", 10_500, [], [later], spec="percentile")
    events = store.load()["cluster"].events
    store.close()
    assert events[0].completions == finished and events[1].submissions == asked
    assert events[2].submissions == [later]
    with sqlite3.connect(state) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_snapshot_of_format_3_is_read_with_resources_unset() -> None:
    """A snapshot written before jobs gained their resources restores its history, the added fields unset."""
    finished = history(5)
    estimator = make_estimator("mean-std")
    rows = records.completion_rows(finished)
    blob = snapshots.dump(snapshots.NamespaceImage(_legacy(rows, completions=True), 7, {"mean-std": estimator}))

    def format_3(document: dict[str, Any]) -> None:
        document["format"] = 3
        del document["fields"]

    restored = snapshots.load(rewritten_snapshot(blob, format_3), None)
    history_rows = records.unpack_jobs(restored.history, restored.fields, completions=True)
    assert restored.fields == LEGACY_FIELD_COUNT and records.completions_from(history_rows) == finished
    with pytest.raises(snapshots.SnapshotRefusedError, match="hold 99 job fields"):
        snapshots.load(rewritten_snapshot(blob, lambda document: document.update(fields=99)), None)


# --- durability where it is owed ------------------------------------------------------------------


def test_a_replay_namespace_is_never_stored_and_is_removed_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tsched simulate --address` replays in an ephemeral `sim-*` namespace: nothing of it reaches the state
    file (no fsync per instant), and it is gone when the run ends, or fails."""
    import simulator.experiment

    trace = tmp_path / "small.swf"
    assert (
        main(["trace", "generate", "--jobs", "300", "--machine-procs", "64", "--seed", "5", "--out", str(trace)]) == 0
    )
    state = tmp_path / "state.sqlite"
    server = ServerProcess(state=str(state), default_estimators=["last2"])
    try:
        with PredictorClient(server.address, timeout=PATIENT_SECONDS) as client:
            client.observe(history(10), namespace="live")  # a live namespace beside the replays: kept
            arguments = ["simulate", "--trace", str(trace), "--estimator", "last2", "--address", server.address]
            assert main([*arguments, "--mode", "regular"]) == 0
            assert "got t_req" not in capsys.readouterr().out
            assert [view.name for view in client.list_namespaces()] == ["live"]
            replayed = simulator.experiment.simulate

            def failing(jobs, config, session, history=None):  # type: ignore[no-untyped-def]
                replayed(jobs.iloc[:50], config, session, history)  # the namespace exists, then the run fails
                assert any(view.name.startswith("sim-") for view in client.list_namespaces())
                raise RuntimeError("the run failed")

            monkeypatch.setattr(simulator.experiment, "simulate", failing)
            with pytest.raises(RuntimeError, match="the run failed"):
                simulator.experiment.run_simulation(
                    read_trace(trace), SimulationConfig(procs=64), "last2", address=server.address
                )
            assert [view.name for view in client.list_namespaces()] == ["live"]
            with sqlite3.connect(f"{state.as_uri()}?mode=ro", uri=True) as db:
                assert db.execute("SELECT name FROM namespaces").fetchall() == [("live",)]
                assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1
    finally:
        assert server.stop() == 0
