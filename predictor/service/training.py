"""The threads a server's estimators train their models on, with a bounded queue."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

#: Threads that train models in the background (LightGBM releases the interpreter lock while it trains).
TRAINING_THREADS = 2
#: Trainings that may wait for a thread: each holds its training data (up to max_train rows) until it runs.
QUEUED_TRAININGS = 2


class Trainer(futures.ThreadPoolExecutor):
    """The training threads, with at most QUEUED_TRAININGS trainings waiting: a further one waits to be queued.

    A training carries a snapshot of its training data; with an unbounded
    queue, many namespaces due for retraining at once would hold all of theirs.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=TRAINING_THREADS, thread_name_prefix="tsched-train")
        self._slots = threading.BoundedSemaphore(TRAINING_THREADS + QUEUED_TRAININGS)
        self._runs_lock = threading.Lock()
        #: Trainings started since the server started (the metrics' training runs).
        self.runs = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        self._slots.acquire()
        with self._runs_lock:
            self.runs += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _: self._slots.release())
        return future
