"""A namespace's state as one blob for the state file, so that a restart replays only what came after it.

Estimators hold what they learned in arbitrary Python objects (sorted lists,
numpy arrays, LightGBM boosters), so a snapshot is a pickle. Two rules make
that safe:

- writing: a model still training (a `Future`) cannot be saved; the snapshot
  is deferred (`SnapshotDeferredError`) and tried again later. The training
  executor is not saved; the restored estimators are given the server's.
- reading: only the classes estimators are made of may be loaded
  (`_ALLOWED`, and classes defined in the estimators' modules); a state file
  altered to call anything else is refused, not run.
"""

from __future__ import annotations

import io
import pickle
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from kernel.errors import TschedError
from predictor.estimators.base import Estimator

#: Bumped when what a snapshot holds changes; an older one is ignored (the events are replayed instead).
FORMAT = 1

#: Besides classes defined in `predictor`, what a snapshot may name: the containers, numpy and
#: LightGBM objects estimators hold, and the two stand-ins this module writes.
_ALLOWED = {
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("collections", "OrderedDict"),
    ("collections", "defaultdict"),
    ("collections", "deque"),
    ("operator", "attrgetter"),
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("lightgbm.basic", "Booster"),
    ("sortedcontainers.sortedlist", "SortedList"),
    ("sortedcontainers.sortedlist", "SortedKeyList"),
    (__name__, "_finished"),
    (__name__, "_no_executor"),
}


class SnapshotDeferredError(TschedError):
    """The namespace cannot be saved now (a model is training); it is saved at a later write."""


class SnapshotRefusedError(TschedError):
    """A snapshot names something estimators are not made of: it was altered, or written by another program."""


@dataclass
class NamespaceImage:
    """What a snapshot restores: the history rows (packed), the clock, and the estimators by canonical SPEC."""

    history: bytes
    clock: int
    estimators: dict[str, Estimator]
    format: int = FORMAT


def _finished(result: Any) -> futures.Future[Any]:
    done: futures.Future[Any] = futures.Future()
    done.set_result(result)
    return done


def _no_executor() -> None:
    return None


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, futures.Future):
            if not obj.done():
                raise SnapshotDeferredError("a model is still training")
            return (_finished, (obj.result(),))
        if isinstance(obj, futures.Executor):
            return (_no_executor, ())
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module.startswith(_ESTIMATOR_MODULES) or module == __name__:
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise SnapshotRefusedError(f"a snapshot may not load {module}.{name}")


#: Where the classes estimators are made of are defined.
_ESTIMATOR_MODULES = ("predictor.estimators.", "predictor.history", "kernel.jobs")


def dump(image: NamespaceImage) -> bytes:
    """The image as bytes; SnapshotDeferredError while a model trains."""
    sink = io.BytesIO()
    _Pickler(sink, protocol=pickle.HIGHEST_PROTOCOL).dump(image)
    return sink.getvalue()


def load(blob: bytes, executor: futures.Executor | None) -> NamespaceImage:
    """Read an image back; its estimators train on `executor`. SnapshotRefusedError for anything but an image."""
    try:
        image = _Unpickler(io.BytesIO(blob)).load()
    except SnapshotRefusedError:
        raise
    except Exception as error:
        raise SnapshotRefusedError(f"not a readable snapshot ({type(error).__name__}: {error})") from None
    if not isinstance(image, NamespaceImage):
        raise SnapshotRefusedError(f"a snapshot holds a {type(image).__name__}, not a namespace")
    for estimator in image.estimators.values():
        estimator.train_on(executor)
    return image
