"""The errors a user can act on, as one family.

Every error that carries a message for a person rather than a bug derives
from `TschedError`: the command line prints it as one line and exits with
status 2, and the service turns it into a status code. Anything else is a
bug and keeps its traceback.
"""

from __future__ import annotations


class TschedError(Exception):
    """An error caused by what the user gave (a file, a SPEC, a request), with a message that says so."""


class SpecError(TschedError, ValueError):
    """An estimator SPEC that names an unknown estimator or parameter, or a bad value."""


class TraceError(TschedError, ValueError):
    """A trace that cannot be read; the message names the file, line and field."""


class ModelError(TschedError, ValueError):
    """A model folder that cannot be used: missing or malformed files, a checksum mismatch, other features."""


class UsageError(TschedError, ValueError):
    """Command-line arguments that cannot work together."""


class PredictorUnavailable(TschedError):
    """Too many jobs of a run got t_req because the predictor service did not answer: its numbers would mislead."""


class ServiceError(TschedError):
    """A request the predictor service refuses; subclasses say why, the message names the field.

    The domain code raises these; only the gRPC adapter maps them to status codes.
    """


class InvalidRequest(ServiceError, ValueError):
    """The request itself is wrong (a field missing or out of range, a bad SPEC)."""


class NotFound(ServiceError):
    """The request names something the service does not hold (a namespace)."""


class FailedPrecondition(ServiceError):
    """The request cannot be answered in the current state (a job older than what the history has moved past)."""


class Conflict(ServiceError):
    """The request raced with another that changed what it works on (a namespace reset meanwhile)."""


class DeadlineExceeded(ServiceError):
    """The caller's deadline passed before the work was done."""


class PermissionDenied(ServiceError):
    """The caller's token does not grant what the request needs (a namespace outside its globs, a reset)."""


class ResourceExhausted(ServiceError):
    """A bound of the server is reached (namespaces, estimators, memory, calls at once); retry later."""


class Unavailable(ServiceError):
    """The server cannot do this now (its state file cannot be written: disk full, I/O error); retry later."""
