"""A namespace's state as one blob for the state file, so that a restart replays only what came after it.

The blob carries data only, never code: reading one calls nothing a file
could choose (no pickle). Estimators hold what they learned in Python
objects (sorted lists, numpy arrays, LightGBM boosters, key functions), so a
snapshot is their object graph written as a tree of tagged JSON nodes, with
its numpy arrays as raw bytes after it:

- containers (list, tuple, dict, set, deque), numbers, strings; numpy
  arrays and scalars of numeric dtypes only (an object array is refused);
- objects of the classes estimators are made of, named in `_CLASSES` and no
  other: each is rebuilt empty (`object.__new__`) and given its attributes,
  so no constructor, `__setstate__` or reducer runs;
- a key function (`operator.attrgetter`) as the job fields it reads, each
  checked to be a field of `kernel.jobs.JobRequest`;
- a LightGBM booster in LightGBM's own text model format;
- a finished training (a `Future`) as its result; an executor as nothing
  (the restored estimators are given the server's).

Objects and containers shared by reference are written once and shared again
when read. A snapshot is checked before use: its header and version, every
node against what it may hold, every array's bounds, and each estimator's
parameters as its constructor checks them. Writing one while a model trains
is deferred (`SnapshotDeferredError`) and tried again later.
"""

from __future__ import annotations

import importlib
import itertools
import json
import operator
import struct
from collections import deque
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernel.errors import TschedError
from kernel.jobs import JOB_FIELDS, LEGACY_FIELD_COUNT, JobRequest
from predictor.estimators.base import Estimator

#: Bumped when what a snapshot holds changes; an older one is ignored (the events are replayed instead).
#: Format 1 was a pickle: never read (it could run code), its namespace is rebuilt from its events.
FORMAT = 4  # 4: the history's rows say how many job fields they hold (jobs gained their resources)
#: Formats read besides FORMAT: 3 (the lgbm calibrations became `Calibration`), whose rows hold the first
#: schema's job fields.
_READ_FORMATS = {3: LEGACY_FIELD_COUNT, FORMAT: None}
_MAGIC = b"tsched-snapshot\n"
_LENGTH = struct.Struct("<Q")

#: The classes a snapshot may hold objects of (what estimators are made of), by "module:name".
_CLASSES = frozenset(
    {
        "predictor.estimators.baselines:RequestEstimator",
        "predictor.estimators.percentile:PercentileEstimator",
        "predictor.estimators.last2:LastTwoEstimator",
        "predictor.estimators.meanstd:MeanStdEstimator",
        "predictor.estimators.meanstd:RunningMoments",
        "predictor.estimators.lgbm.estimator:LGBMQuantileEstimator",
        "predictor.estimators.lgbm.sched:LGBMSchedEstimator",
        "predictor.estimators.lgbm.calibration:Calibration",
        "predictor.estimators.lgbm.calibration:TrailingCalibrator",
        "predictor.estimators.lgbm.calibration:UserCalibrator",
        "predictor.estimators.lgbm.conformal:AdaptiveLevel",
        "predictor.estimators.lgbm.conformal:TrailingScores",
        "predictor.estimators.lgbm.quantiles:LevelCalibrator",
        "predictor.estimators.lgbm.features:FeatureHistory",
        "predictor.estimators.lgbm.features:_KeySeries",
        "predictor.estimators.lgbm.model:TrainedModel",
        "predictor.estimators.lgbm.training:ModelSchedule",
        "predictor.estimators.lgbm.training:Trainer",
        "predictor.estimators.lgbm.training:TrainingWindow",
        "predictor.history:KeyedHistory",
        "predictor.history:WindowedSeries",
        "predictor.history:EndSeries",
        "sortedcontainers.sortedlist:SortedList",
    }
)
#: numpy dtype kinds an array or scalar may have: booleans, integers, floats.
_NUMERIC_KINDS = frozenset("biuf")
_SORTED_LIST = "sortedcontainers.sortedlist:SortedList"
#: Containers of this many numbers or more (all floats, or all integers) are written as one array's bytes.
_PACKED_AT = 256
#: The values JSON carries as they are; a container of these only is written flat (`"flat": [...]`), and
#: read back with one check of the types it holds instead of a node per value.
_PRIMITIVES = frozenset({type(None), bool, int, float, str})


class SnapshotDeferredError(TschedError):
    """The namespace cannot be saved now (a model is training); it is saved at a later write."""


class SnapshotRefusedError(TschedError):
    """A snapshot holds something estimators are not made of: it was altered, or written by another program."""


@dataclass
class NamespaceImage:
    """What a snapshot restores: the history rows (packed, of `fields` job fields each), the clock, and the
    estimators by canonical SPEC."""

    history: bytes
    clock: int
    estimators: dict[str, Estimator]
    format: int = FORMAT
    fields: int = len(JOB_FIELDS)


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _state_of(obj: object) -> dict[str, Any]:
    """An object's attributes: its `__dict__` and its slots."""
    state = dict(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        for name in cls.__dict__.get("__slots__", ()):
            if not name.startswith("__") and hasattr(obj, name):
                state[name] = getattr(obj, name)
    return state


class _Writer:
    """Turns an object graph into JSON nodes and a list of arrays' bytes."""

    def __init__(self) -> None:
        self.arrays: list[bytes] = []
        self.offset = 0
        self._ids: dict[int, int] = {}
        self._keep: list[object] = []  # what the ids refer to stays alive (ids are not reused meanwhile)

    def node(self, value: Any) -> Any:
        if value is None or type(value) in (bool, int, float, str):
            return value
        if type(value) is tuple:
            return {"t": "tuple", **self.items(value)}
        if isinstance(value, np.generic):
            return self._scalar(value)
        if isinstance(value, operator.attrgetter):
            return {"t": "getter", "fields": list(value.__reduce__()[1])}
        if isinstance(value, futures.Future):
            if not value.done():
                raise SnapshotDeferredError("a model is still training")
            return {"t": "future", "value": self.node(value.result())}
        if isinstance(value, futures.Executor):
            return None
        if isinstance(value, type):
            if _class_name(value) not in _CLASSES:
                raise TypeError(f"a snapshot cannot hold the class {_class_name(value)}")
            return {"t": "class", "name": _class_name(value)}
        seen = self._ids.get(id(value))
        if seen is not None:
            return {"t": "ref", "id": seen}
        self._ids[id(value)] = number = len(self._ids)
        self._keep.append(value)
        return {"id": number, **self._shared(value)}

    def items(self, values: Any) -> dict[str, Any]:
        """A container's items: flat when they are all primitives (the common case: runtimes, ends)."""
        kinds = set(map(type, values))
        if len(kinds) == 1 and kinds <= {int, float} and len(values) >= _PACKED_AT:
            try:  # as float64 or int64 bytes: exact both ways, and far quicker to read than JSON numbers
                return {"numbers": self._array(np.array(values, dtype=np.float64 if float in kinds else np.int64))}
            except OverflowError:
                pass  # an integer beyond int64: JSON carries it
        if kinds <= _PRIMITIVES:
            return {"flat": list(values)}
        if kinds == {tuple} and set(map(type, itertools.chain.from_iterable(values))) <= _PRIMITIVES:
            return {"rows": list(values)}  # JSON writes a tuple as an array
        return {"items": [self.node(item) for item in values]}

    def _scalar(self, value: np.generic) -> dict[str, Any]:
        if value.dtype.kind not in _NUMERIC_KINDS:
            raise TypeError(f"a snapshot cannot hold a numpy {value.dtype}")
        return {"t": "scalar", "dtype": value.dtype.str, "value": value.item()}

    def _shared(self, value: Any) -> dict[str, Any]:
        """A node for a value that may be referred to more than once."""
        kind = type(value)
        if kind is list:
            return {"t": "list", **self.items(value)}
        if kind is dict:
            return {"t": "dict", "items": [[self.node(key), self.node(item)] for key, item in value.items()]}
        if kind in (set, frozenset):
            return {"t": kind.__name__, **self.items(value)}
        if kind is deque:
            return {"t": "deque", **self.items(value), "maxlen": value.maxlen}
        if kind is np.ndarray:
            return self._array(value)
        name = _class_name(kind)
        if name == _SORTED_LIST:
            return {"t": "sortedlist", **self.items(value)}
        if kind.__module__ == "lightgbm.basic" and kind.__name__ == "Booster":
            return {"t": "booster", "model": value.model_to_string()}
        if name not in _CLASSES:
            raise TypeError(f"a snapshot cannot hold a {name}")
        return {"t": "object", "class": name, "state": {k: self.node(v) for k, v in _state_of(value).items()}}

    def _array(self, value: np.ndarray) -> dict[str, Any]:
        if value.dtype.kind not in _NUMERIC_KINDS:
            raise TypeError(f"a snapshot cannot hold a numpy array of {value.dtype}")
        data = np.ascontiguousarray(value).tobytes()
        self.arrays.append(data)
        self.offset += len(data)
        return {"t": "array", "dtype": value.dtype.str, "shape": list(value.shape), "end": self.offset}


def dump(image: NamespaceImage) -> bytes:
    """The image as bytes; SnapshotDeferredError while a model trains."""
    writer = _Writer()
    document = {
        "format": FORMAT,
        "clock": image.clock,
        "fields": image.fields,
        "history": writer.node(np.frombuffer(image.history, np.uint8)),
        "estimators": {spec: writer.node(estimator) for spec, estimator in image.estimators.items()},
    }
    text = json.dumps(document, separators=(",", ":"), allow_nan=True).encode("utf-8")
    return b"".join([_MAGIC, _LENGTH.pack(len(text)), text, *writer.arrays])


def load(blob: bytes, executor: futures.Executor | None) -> NamespaceImage:
    """Read an image back, checked; its estimators train on `executor`. SnapshotRefusedError for anything else."""
    try:
        image = _read(blob)
    except SnapshotRefusedError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, RecursionError, UnicodeDecodeError) as error:
        raise SnapshotRefusedError(f"not a readable snapshot ({type(error).__name__}: {error})") from None
    for estimator in image.estimators.values():
        estimator.train_on(executor)
    return image


def _read(blob: bytes) -> NamespaceImage:
    if not blob.startswith(_MAGIC):
        raise SnapshotRefusedError(
            "not a snapshot of this tsched's format (an older tsched wrote pickles, which are never read: "
            "they can run code)"
        )
    start = len(_MAGIC) + _LENGTH.size
    (length,) = _LENGTH.unpack_from(blob, len(_MAGIC))
    document = json.loads(blob[start : start + length].decode("utf-8"))
    if not isinstance(document, dict) or document.get("format") not in _READ_FORMATS:
        raise SnapshotRefusedError(f"a snapshot of another format than {', '.join(map(str, _READ_FORMATS))}")
    fields = _READ_FORMATS[document["format"]] or document.get("fields")
    if type(fields) is not int or not 0 < fields <= len(JOB_FIELDS):
        raise SnapshotRefusedError(f"a snapshot's rows hold {fields!r} job fields; this tsched knows {len(JOB_FIELDS)}")
    reader = _Reader(memoryview(blob)[start + length :])
    history = reader.value(document["history"])
    clock = document["clock"]
    estimators = {spec: reader.value(node) for spec, node in document["estimators"].items()}
    if not isinstance(history, np.ndarray) or history.dtype != np.uint8 or type(clock) is not int:
        raise SnapshotRefusedError("a snapshot's history or clock is not what a namespace holds")
    for spec, estimator in estimators.items():
        if not isinstance(spec, str) or not isinstance(estimator, Estimator):
            raise SnapshotRefusedError(f"a snapshot holds a {type(estimator).__name__} as an estimator")
        try:
            estimator._validate()  # parameters as the constructor admits them: a file cannot lift a limit
        except ValueError as error:
            raise SnapshotRefusedError(f"estimator {spec!r} in a snapshot: {error}") from None
    return NamespaceImage(history.tobytes(), clock, estimators, document["format"], fields)


class _Reader:
    """Rebuilds values from JSON nodes and the arrays' bytes, checking each node."""

    def __init__(self, arrays: memoryview) -> None:
        self._arrays = arrays
        self._start = 0
        self._shared: dict[int, Any] = {}

    def value(self, node: Any) -> Any:
        if node is None or type(node) in (bool, int, float, str):
            return node
        if type(node) is not dict:
            raise SnapshotRefusedError(f"a snapshot node that is a {type(node).__name__}")
        tag = str(node.get("t"))
        simple = _SIMPLE.get(tag)
        if simple is not None:
            return simple(self, node)
        if tag == "ref":
            return self._shared[node["id"]]
        build = _SHARED.get(tag)
        if build is None:
            raise SnapshotRefusedError(f"a snapshot node of unknown kind {tag!r}")
        number = node["id"]
        if type(number) is not int or number in self._shared:
            raise SnapshotRefusedError(f"a snapshot node with a bad id {number!r}")
        return build(self, node, number)

    def items(self, node: dict[str, Any]) -> list[Any]:
        numbers = node.get("numbers")
        if numbers is not None:
            packed = self._read_array(numbers)
            if packed.ndim != 1 or packed.dtype not in (np.float64, np.int64):
                raise SnapshotRefusedError("a snapshot container of numbers that is not a list of them")
            values: list[Any] = packed.tolist()
            return values
        flat = node.get("flat")
        if flat is not None:
            if type(flat) is not list or not set(map(type, flat)) <= _PRIMITIVES:
                raise SnapshotRefusedError("a snapshot container whose flat items are not plain values")
            return flat
        rows = node.get("rows")
        if rows is not None:
            if type(rows) is not list or not set(map(type, rows)) <= {list}:
                raise SnapshotRefusedError("a snapshot container whose rows are not lists")
            if not set(map(type, itertools.chain.from_iterable(rows))) <= _PRIMITIVES:
                raise SnapshotRefusedError("a snapshot container whose rows hold more than plain values")
            return list(map(tuple, rows))
        items = node["items"]
        if type(items) is not list:
            raise SnapshotRefusedError("a snapshot container without its items")
        return [self.value(item) for item in items]

    def keep(self, number: int, value: Any) -> Any:
        self._shared[number] = value
        return value

    def array(self, node: dict[str, Any], number: int) -> np.ndarray:
        array = self._read_array(node)
        self.keep(number, array)
        return array

    def _read_array(self, node: Any) -> np.ndarray:
        """The next array's bytes, checked against the shape and dtype its node gives."""
        if type(node) is not dict:
            raise SnapshotRefusedError("a snapshot array without its description")
        dtype = np.dtype(_checked_dtype(node["dtype"]))
        shape = tuple(node["shape"])
        end = node["end"]
        if not all(type(size) is int and size >= 0 for size in shape) or type(end) is not int:
            raise SnapshotRefusedError("a snapshot array of a bad shape")
        if not self._start <= end <= len(self._arrays) or end - self._start != int(np.prod(shape)) * dtype.itemsize:
            raise SnapshotRefusedError("a snapshot array outside the snapshot's bytes")
        array: np.ndarray = np.frombuffer(self._arrays[self._start : end], dtype).reshape(shape).copy()
        self._start = end
        return array

    def obj(self, node: dict[str, Any], number: int) -> Any:
        name = node["class"]
        if name not in _CLASSES or name == _SORTED_LIST:
            raise SnapshotRefusedError(f"a snapshot may not hold a {name}")
        module, _, qualname = name.partition(":")
        cls = getattr(importlib.import_module(module), qualname)
        instance = self.keep(number, object.__new__(cls))
        state = node["state"]
        for attribute, value in state.items():
            if type(attribute) is not str or not attribute.isidentifier() or attribute.startswith("__"):
                raise SnapshotRefusedError(f"a snapshot sets the attribute {attribute!r} of a {name}")
            object.__setattr__(instance, attribute, self.value(value))
        return instance


def _checked_dtype(text: Any) -> str:
    if type(text) is not str or np.dtype(text).kind not in _NUMERIC_KINDS:
        raise SnapshotRefusedError(f"a snapshot array or number of dtype {text!r}")
    return text


def _getter(reader: _Reader, node: dict[str, Any]) -> operator.attrgetter[Any]:
    fields = node["fields"]
    if type(fields) is not list or not fields or any(field not in JobRequest._fields for field in fields):
        raise SnapshotRefusedError(f"a snapshot's key function reads {fields!r}, not fields of a job")
    return operator.attrgetter(*fields)


def _class(reader: _Reader, node: dict[str, Any]) -> type:
    name = node["name"]
    if name not in _CLASSES:
        raise SnapshotRefusedError(f"a snapshot may not name the class {name!r}")
    module, _, qualname = name.partition(":")
    found: type = getattr(importlib.import_module(module), qualname)
    return found


def _finished(reader: _Reader, node: dict[str, Any]) -> futures.Future[Any]:
    done: futures.Future[Any] = futures.Future()
    done.set_result(reader.value(node["value"]))
    return done


def _scalar(reader: _Reader, node: dict[str, Any]) -> np.generic:
    value = node["value"]
    if type(value) not in (bool, int, float):
        raise SnapshotRefusedError(f"a snapshot number that is a {type(value).__name__}")
    scalar: np.generic = np.dtype(_checked_dtype(node["dtype"])).type(value)
    return scalar


def _dict(reader: _Reader, node: dict[str, Any], number: int) -> dict[Any, Any]:
    built: dict[Any, Any] = reader.keep(number, {})
    pairs = node["items"]
    if type(pairs) is not list or any(type(pair) is not list or len(pair) != 2 for pair in pairs):
        raise SnapshotRefusedError("a snapshot dict whose entries are not keys and values")
    for key, value in pairs:
        built[reader.value(key)] = reader.value(value)
    return built


def _list(reader: _Reader, node: dict[str, Any], number: int) -> list[Any]:
    built: list[Any] = reader.keep(number, [])
    built.extend(reader.items(node))
    return built


def _deque(reader: _Reader, node: dict[str, Any], number: int) -> deque[Any]:
    maxlen = node.get("maxlen")
    if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
        raise SnapshotRefusedError("a snapshot deque of a bad length")
    built: deque[Any] = reader.keep(number, deque(maxlen=maxlen))
    built.extend(reader.items(node))
    return built


def _booster(reader: _Reader, node: dict[str, Any], number: int) -> Any:
    import lightgbm as lgb

    model = node["model"]
    if type(model) is not str:
        raise SnapshotRefusedError("a snapshot booster without its model text")
    try:
        return reader.keep(number, lgb.Booster(model_str=model))
    except lgb.basic.LightGBMError as error:
        raise SnapshotRefusedError(f"a snapshot booster LightGBM cannot read: {error}") from None


def _sorted_list(reader: _Reader, node: dict[str, Any], number: int) -> Any:
    from sortedcontainers import SortedList

    items = reader.items(node)
    if any(type(item) not in (int, float) for item in items):
        raise SnapshotRefusedError("a snapshot sorted list of values that are not numbers")
    return reader.keep(number, SortedList(items))


#: Builders of values that are never shared (immutable), by tag.
_SIMPLE: dict[str, Callable[[_Reader, dict[str, Any]], Any]] = {
    "tuple": lambda reader, node: tuple(reader.items(node)),
    "scalar": _scalar,
    "getter": _getter,
    "class": _class,
    "future": _finished,
}
#: Builders of values that may be shared by reference, by tag (each registers its value before its contents).
_SHARED: dict[str, Callable[[_Reader, dict[str, Any], int], Any]] = {
    "list": _list,
    "dict": _dict,
    "set": lambda reader, node, number: reader.keep(number, set(reader.items(node))),
    "frozenset": lambda reader, node, number: reader.keep(number, frozenset(reader.items(node))),
    "deque": _deque,
    "array": _Reader.array,
    "object": _Reader.obj,
    "booster": _booster,
    "sortedlist": _sorted_list,
}
