"""The threads a server's estimators train their models on, with a bounded queue, and waits a call may afford.

A training runs on these threads, never on a call's: a call waits for one only
where its estimator cannot answer without it (a replay's trace time passing the
point where the new model goes live, `predictor.estimators.lgbm.training`), or
for a place in the queue. Every such wait is bounded by the call's deadline and
the server's `--max-wait` (`waiting_at_most`): past it the call is refused
UNAVAILABLE, to retry once the training is done, and its thread and slot are
free. Outside a call (a namespace rebuilt on start) waits are not bounded.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

from kernel.errors import Unavailable

#: Threads that train models in the background (LightGBM releases the interpreter lock while it trains).
TRAINING_THREADS = 2
#: Trainings that may wait for a thread: each holds its training data (up to max_train rows) until it runs.
QUEUED_TRAININGS = 2

#: When the call this thread serves must stop waiting (time.monotonic()); None outside a call.
_wait_until: contextvars.ContextVar[float | None] = contextvars.ContextVar("tsched_wait_until", default=None)


@contextmanager
def waiting_at_most(seconds: float) -> Iterator[None]:
    """Bound every training wait of the block (this thread's) to `seconds` from now."""
    token = _wait_until.set(time.monotonic() + max(0.0, seconds))
    try:
        yield
    finally:
        _wait_until.reset(token)


def _left() -> float | None:
    """Seconds the current call may still wait (None: not in a call, no bound)."""
    until = _wait_until.get()
    return None if until is None else max(0.0, until - time.monotonic())


class TrainingFuture(futures.Future[Any]):
    """A training's result, waited for at most as long as the waiting call may (`waiting_at_most`)."""

    def result(self, timeout: float | None = None) -> Any:
        left = _left()
        bounded = left if timeout is None else timeout if left is None else min(left, timeout)
        try:
            return super().result(bounded)
        except futures.TimeoutError:
            if timeout is not None and (left is None or timeout <= left):
                raise
            raise Unavailable(
                "a model for this namespace is still training: retry shortly (the call would have waited "
                "past its deadline or this server's --max-wait)"
            ) from None


class Trainer(futures.ThreadPoolExecutor):
    """The training threads, with at most QUEUED_TRAININGS trainings waiting: a further one waits to be queued,
    as long as its call may.

    A training carries a snapshot of its training data; with an unbounded
    queue, many namespaces due for retraining at once would hold all of theirs.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=TRAINING_THREADS, thread_name_prefix="tsched-train")
        self._slots = threading.BoundedSemaphore(TRAINING_THREADS + QUEUED_TRAININGS)
        self._runs_lock = threading.Lock()
        #: Trainings started since the server started (the metrics' training runs).
        self.runs = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> TrainingFuture:
        """Queue a training; Unavailable when the queue stays full for as long as the call may wait."""
        if not self._slots.acquire(timeout=_left()):
            raise Unavailable(
                "the server's model trainings are all busy: retry shortly (the call would have waited past "
                "its deadline or this server's --max-wait)"
            )
        with self._runs_lock:
            self.runs += 1
        try:
            running = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._slots.release()
            raise
        result = TrainingFuture()
        running.add_done_callback(lambda done: self._finished(done, result))
        return result

    def _finished(self, done: futures.Future[Any], result: TrainingFuture) -> None:
        self._slots.release()
        if done.cancelled():  # the server is stopping
            result.cancel()
            return
        error = done.exception()
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(done.result())
