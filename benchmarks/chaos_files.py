"""Issue 25's attacks through files, each against a real `tsched serve` (or the state file code it opens).

Each takes a fresh folder and returns (survived, what happened). Nothing of a
victim can be measured here: the attack either makes the server refuse to
start (which is the survival) or is about what a restart finds. `chaos.py`
prints them in its table beside the attacks on a running server.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from predictor.service.client import PredictorClient
from predictor.service.launcher import ServerProcess
from predictor.service.state import CompletionStore, StateError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from service_support import (  # the tests' workload and crafted files
    PATIENT_SECONDS,
    code_running_payloads,
    damaged_state,
    history,
    snapshotted_state,
)

FileAttack = Callable[[Path], tuple[bool, str]]
#: Acknowledged single-completion calls before the kill, in the torn-log attack.
ACKNOWLEDGED = 200
#: How long a refused `tsched serve` may take to exit (it imports everything first on a loaded machine).
REFUSAL_SECONDS = 120


def _serve(*arguments: str, listen: str = "127.0.0.1:0") -> tuple[int | None, str]:
    """`tsched serve --listen LISTEN ARGUMENTS`: its exit status and its error output; None (and the server
    killed) if it was still running after REFUSAL_SECONDS, that is, it started."""
    tsched = shutil.which("tsched") or "tsched"
    command = [tsched, "serve", "--listen", listen, *arguments]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, error = process.communicate(timeout=REFUSAL_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        _, error = process.communicate()
        return None, error
    return process.returncode, error


def _refused(code: int | None, error: str, named: str) -> tuple[bool, str]:
    """Refused as promised: status 2, one line naming `named`, no traceback."""
    line = error.strip().splitlines()[-1] if error.strip() else ""
    survived = code == 2 and named in error and "Traceback" not in error
    return survived, f"exit {code}: {line[:110]}"


def crafted_state_file(folder: Path) -> tuple[bool, str]:
    """A snapshot replaced by a pickle that runs a command (through operator.attrgetter, and a plain one)."""
    state = snapshotted_state(folder)
    marker = folder / "ran"
    outcomes = []
    for payload in code_running_payloads(f"touch {marker}"):
        with sqlite3.connect(state) as db:
            db.execute("UPDATE snapshots SET image = ?", (payload,))
        code, error = _serve("--state", str(state))
        outcomes.append(_refused(code, error, str(state)))
    survived = all(refused for refused, _ in outcomes) and not marker.exists()
    return survived, f"code ran: {marker.exists()}; {outcomes[0][1]}"


def torn_write_ahead_log(folder: Path) -> tuple[bool, str]:
    """kill -9 after ACKNOWLEDGED acknowledged calls, the log cut at nine offsets: each start is refused
    naming the log, or holds every acknowledged completion."""
    state = folder / "state.sqlite"
    server = ServerProcess(state=str(state))
    try:
        with PredictorClient(server.address, timeout=PATIENT_SECONDS) as client:
            for job in history(ACKNOWLEDGED):
                client.observe([job], namespace="cluster")
    finally:
        server.stop(signal.SIGKILL)
    files = {path: path.read_bytes() for path in folder.iterdir() if path.is_file()}
    wal = Path(f"{state}-wal")
    intact = files[wal]
    frame = 24 + 4096
    cuts = [0, 16, 32, 32 + frame + 100, len(intact) // 3, len(intact) // 2, len(intact) - frame - 7]
    refused, lost = 0, []
    for cut in [*cuts, len(intact) - 1, len(intact)]:
        for path, data in files.items():
            path.write_bytes(data)
        wal.write_bytes(intact[:cut])
        try:
            store = CompletionStore(state)
        except StateError as error:
            refused += str(wal) in str(error)
            continue
        held = sum(len(event.completions) for event in store.load()["cluster"].events)
        store.close()
        if held != ACKNOWLEDGED:
            lost.append(f"cut at {cut}: {held} of {ACKNOWLEDGED}")
    detail = f"{refused} of {len(cuts) + 2} cuts refused naming the log, the others hold all {ACKNOWLEDGED}"
    return not lost, "; ".join(lost) or detail


def state_lock_spellings(folder: Path) -> tuple[bool, str]:
    """A second server on the live state file through a symbolic link, a hard link and another spelling."""
    state = folder / "state.sqlite"
    server = ServerProcess(state=str(state))
    try:
        (folder / "link.sqlite").symlink_to(state)
        os.link(state, folder / "hard.sqlite")
        spellings = [folder / "link.sqlite", folder / "hard.sqlite", folder / "." / "state.sqlite"]
        outcomes = [_serve("--state", str(spelling)) for spelling in spellings]
    finally:
        server.stop()
    started = sum(code is None for code, _ in outcomes)
    refused = sum(code == 2 and "Traceback" not in error for code, error in outcomes)
    return refused == len(spellings), f"{refused} of {len(spellings)} refused, {started} started beside the first"


def damaged_database(folder: Path) -> tuple[bool, str]:
    """A page in the middle of the state file overwritten."""
    state = damaged_state(folder)
    return _refused(*_serve("--state", str(state)), str(state))


def open_listen(folder: Path) -> tuple[bool, str]:
    """Listening on every interface with neither TLS nor tokens."""
    return _refused(*_serve(listen="0.0.0.0:0"), "--insecure")


FILE_ATTACKS: dict[str, FileAttack] = {
    "crafted state file (a snapshot that runs code)": crafted_state_file,
    "torn -wal after kill -9 (9 cuts)": torn_write_ahead_log,
    "second server on the state file (links, spellings)": state_lock_spellings,
    "damaged state file": damaged_database,
    "listen off loopback with no TLS, no tokens": open_listen,
}
