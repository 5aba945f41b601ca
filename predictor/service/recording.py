"""What a server records of each namespace, and how a namespace is rebuilt from it on start.

With a state file (`state.CompletionStore`) every event a call brings is
stored before the call is answered (write-ahead), and each namespace is
saved whole as a snapshot every `--snapshot-every` events; a replay's
namespace (`records.EPHEMERAL_PREFIX`) is never stored. On start, a
namespace is rebuilt from its latest snapshot and the events after it,
replayed in order, so a restart answers exactly as before it. Without a
state file the same checks run and nothing is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from kernel.errors import InvalidRequest, ResourceExhausted
from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.history import HistoryDiscardedError
from predictor.service import records, snapshots
from predictor.service.limits import Limits, MemoryWatch
from predictor.service.namespaces import Namespace, at_clock
from predictor.service.quoting import clip, quote
from predictor.service.specs import ResolvedSpec
from predictor.service.state import COMPLETIONS, CompletionStore, StateError, StoredNamespace
from predictor.service.training import Trainer

log = logging.getLogger("tsched.service")

#: After a snapshot had to wait (a model training), the events recorded before it is tried again.
SNAPSHOT_RETRY_EVENTS = 1000


class Recorded(NamedTuple):
    """What recording a call changed: completions accepted, duplicates skipped, the submissions (their
    submit times set) and the namespace's clock after it."""

    accepted: int
    duplicates: int
    submitted: list[JobRequest]
    clock: int


class Recorder:
    """Checks, stores, then teaches a namespace each call's events; snapshots; rebuilds namespaces on start."""

    def __init__(self, store: CompletionStore | None, limits: Limits, memory: MemoryWatch, trainer: Trainer) -> None:
        self.store = store
        self.limits = limits
        self.memory = memory
        self.trainer = trainer

    @property
    def healthy(self) -> bool:
        """False while the state file cannot be written (writes are answered UNAVAILABLE)."""
        return self.store is None or self.store.healthy

    def on_health_change(self, listener: Callable[[bool], None]) -> None:
        if self.store is not None:
            self.store.on_health_change(listener)

    def record(
        self,
        held: Namespace,
        batch: Sequence[FinishedJob],
        jobs: Sequence[JobRequest],
        spec: ResolvedSpec | None,
        moves_clock: bool,
        new_names: Sequence[tuple[str, str, int]] = (),
    ) -> Recorded:
        """Check, store, then learn a call's completions and submissions (under the namespace's lock).

        Everything is checked before anything is stored, and stored before
        anything is learned: a refused call changes nothing.
        """
        held.check_ends(batch, "completions")
        fresh = held.fresh(batch, "completions")
        clock = max(held.clock, fresh[-1].end) if fresh else held.clock
        submitted = at_clock(jobs, clock)
        if moves_clock:
            held.check_submits(submitted, "submitted", clock)
            clock = max(clock, max((job.submit for job in submitted), default=clock))
        if not fresh and not submitted:
            return Recorded(0, len(batch), submitted, clock)
        assert not held.transient  # only calls that record create (or find) a lasting namespace
        self.memory.check_growth(f"namespace {quote(held.name)}")
        if self.store is not None and not held.name.startswith(records.EPHEMERAL_PREFIX):
            recorded_spec = None if spec is None or not submitted else spec.canonical
            held.last_seq = self.store.record(held.name, clock, fresh, submitted, recorded_spec, new_names)
        held.names.update(((kind, name), number) for kind, name, number in new_names)
        held.learn(fresh)
        held.clock = clock
        held.since_snapshot += len(fresh) + len(submitted)
        return Recorded(len(fresh), len(batch) - len(fresh), submitted, clock)

    def remember(
        self, held: Namespace, spec: ResolvedSpec, jobs: Sequence[JobRequest], predictions: Sequence[Prediction]
    ) -> None:
        """Count the answers and keep them for the live scores (not for a transient namespace, nor near the
        memory ceiling: scoring must never refuse a prediction)."""
        if held.transient or not predictions:
            return
        held.predictions += len(predictions)
        held.fallbacks += sum(prediction.fallback for prediction in predictions)
        try:
            self.memory.check_growth(f"live scores of namespace {quote(held.name)}")
        except ResourceExhausted:
            return
        held.live.predicted(spec.canonical, jobs, predictions)

    def maybe_snapshot(self, held: Namespace) -> None:
        """Save the namespace (under its lock) once it has recorded `snapshot_every` events since the last save."""
        if self.store is None or held.since_snapshot < self.limits.snapshot_every:
            return
        if held.name.startswith(records.EPHEMERAL_PREFIX):
            held.since_snapshot = 0
            return
        image = snapshots.NamespaceImage(records.pack(held.history.rows), held.clock, dict(held.estimators))
        try:
            blob = snapshots.dump(image)
        except snapshots.SnapshotDeferredError:
            held.since_snapshot = self.limits.snapshot_every - SNAPSHOT_RETRY_EVENTS
            return
        self.store.save_snapshot(held.name, held.last_seq, blob)
        held.since_snapshot = 0
        log.info("namespace %s saved: %d completions, %d bytes", quote(held.name), len(held.history), len(blob))

    def forget(self, name: str) -> None:
        if self.store is not None:
            self.store.forget(name)

    def stored(self) -> dict[str, StoredNamespace]:
        """Every namespace the state file holds (none without one)."""
        return {} if self.store is None else self.store.load()

    def restore(self, held: Namespace, stored: StoredNamespace, resolve: Callable[[str], ResolvedSpec]) -> None:
        """Rebuild the empty `held` as the state file holds it: its snapshot, then the events after it, in order.

        `resolve` gives the estimator a recorded SPEC stands for (InvalidRequest if no longer served).
        """
        if stored.snapshot is not None:
            try:
                image = snapshots.load(stored.snapshot, self.trainer)
            except snapshots.SnapshotRefusedError as error:
                assert self.store is not None  # a stored namespace comes from the state file
                raise _refused_snapshot(self.store.path, held.name, error) from None
            held.history = records.History(records.unpack_jobs(image.history, image.fields, completions=True))
            held.estimators = image.estimators
        skipped: set[str] = set()
        for event in stored.events:
            if event.kind == COMPLETIONS:
                held.learn(event.completions)
            elif event.spec is not None:
                _replay_submissions(held, event.spec, event.submissions, resolve, skipped)
            held.last_seq = event.seq
        held.since_snapshot = len(stored.events)
        held.clock = stored.clock
        held.names = stored.names

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def _refused_snapshot(path: Path, name: str, error: snapshots.SnapshotRefusedError) -> StateError:
    """The refusal of a namespace's snapshot: the file and namespace named, and the way out."""
    literal = "'" + name.replace("'", "''") + "'"
    dropped = f"SELECT id FROM namespaces WHERE name = {literal}"
    return StateError(
        f"{path}: the snapshot of namespace {quote(name)} is refused: {error}. Restore the file from a backup, "
        "or drop the snapshot (the namespace then restarts from the events recorded after it only): "
        f'sqlite3 {path} "DELETE FROM snapshots WHERE namespace_id = ({dropped})"'
    )


def _replay_submissions(
    held: Namespace,
    spec: str,
    jobs: list[JobRequest],
    resolve: Callable[[str], ResolvedSpec],
    skipped: set[str],
) -> None:
    """Predict recorded submissions again, as they were: errors included (a refusal refused again)."""
    try:
        resolved = resolve(spec)
    except InvalidRequest as error:  # a model folder no longer served
        if spec not in skipped:
            skipped.add(spec)
            log.warning("namespace %s: recorded submissions of %s not replayed: %s", quote(held.name), spec, error)
        return
    if not resolved.replays:
        return
    try:
        held.estimator(resolved).predict_many(jobs)
    except HistoryDiscardedError:
        pass
    except Exception as error:  # an estimator's bug recurs here as it occurred; the server must still start
        log.warning("namespace %s: replaying submissions to %s: %s", quote(held.name), spec, clip(repr(error)))
