"""Who may call what: bearer tokens, the namespaces each token may use, and where a server may listen open.

This is the policy, in plain Python so that it is tested without a server;
`predictor.service.gate` applies it to every call.

A token file (`tsched serve --tokens FILE`) holds one token per line:

    TOKEN NAMESPACE_GLOB[,NAMESPACE_GLOB...] [reset]

`#` starts a comment. A token may use (predict in, report to, list) the
namespaces its globs match (`fnmatch` globs: `*` also matches `/`; the empty
namespace is `default`), and reset them when the line ends with `reset`.
A token for every namespace (`*`) is the server's operator: `Status` shows
it the server-wide counts (namespaces, training runs, calls); any other
token sees the namespaces it may use counted, and no calls or trainings.
Clients send `authorization: Bearer TOKEN` with every call. Tokens are kept
only as SHA-256 digests and never written to a log or a message.
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import ipaddress
import re
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernel.errors import PermissionDenied, UsageError
from predictor.service.namespaces import DEFAULT_NAMESPACE
from predictor.service.quoting import quote

#: The metadata key and scheme clients send their token under (RFC 6750).
AUTHORIZATION = "authorization"
BEARER = "bearer "
#: Shorter tokens can be guessed; `openssl rand -hex 32` makes a good one.
MIN_TOKEN_LENGTH = 16
RESET_WORD = "reset"
_TOKEN_CHARACTERS = re.compile(r"[\x21-\x7e]+")  # visible ASCII: what an HTTP/2 header value carries as is
_GLOB_CHARACTERS = re.compile(r"[A-Za-z0-9._:/@+*?\[\]!-]+")


class Access(enum.Enum):
    """What a call does to the namespace it names."""

    USE = "use"  # predict in it, report completions and submissions to it, describe it
    RESET = "reset"  # forget it
    LIST = "list"  # see the namespaces it may use (the answer is filtered, nothing is refused)
    STATUS = "status"  # use it, and see the server's counts as far as its namespaces go (the answer is cut)


#: The access each RPC of `tsched.v1.Predictor` needs (tests check that every RPC of the contract has one).
ACCESS_BY_METHOD: Mapping[str, Access] = {
    "Predict": Access.USE,
    "PredictBatch": Access.USE,
    "ObserveCompletions": Access.USE,
    "Sync": Access.USE,
    "SyncStream": Access.USE,
    "ListEstimators": Access.USE,
    "ResetNamespace": Access.RESET,
    "ListNamespaces": Access.LIST,
    "ForecastStart": Access.USE,
    "Status": Access.STATUS,
}


@dataclass(frozen=True)
class Grant:
    """What one token may do; `holder` names it in logs (its line in the token file, never the token)."""

    holder: str
    globs: tuple[str, ...]
    may_reset: bool
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern = re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in self.globs))
        object.__setattr__(self, "_pattern", pattern)  # a frozen dataclass sets derived fields this way

    @property
    def operator(self) -> bool:
        """A token for every namespace (`*`) is the server's operator: it sees the server-wide counts."""
        return "*" in self.globs

    def allows(self, namespace: str, access: Access) -> bool:
        if access is Access.RESET and not self.may_reset:
            return False
        return self._pattern.fullmatch(namespace or DEFAULT_NAMESPACE) is not None

    def check(self, namespace: str, access: Access) -> None:
        """Raise PermissionDenied unless this grant allows `access` to `namespace`."""
        if not self.allows(namespace, access):
            name = quote(namespace or DEFAULT_NAMESPACE)
            if access is Access.RESET and self.may_reset is False and self.allows(namespace, Access.USE):
                raise PermissionDenied(f"namespace {name}: this token may use it but not reset it")
            raise PermissionDenied(f"namespace {name} is outside this token's namespaces")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii")).digest()


class TokenTable:
    """The grants of a token file, looked up by the token a call presents."""

    def __init__(self, grants: Mapping[bytes, Grant], source: str) -> None:
        self._grants = dict(grants)
        self.source = source

    def __len__(self) -> int:
        return len(self._grants)

    @classmethod
    def parse(cls, text: str, source: str) -> TokenTable:
        """Read token lines; UsageError names the line (never the token) of the first mistake."""
        grants: dict[bytes, Grant] = {}
        first_line: dict[bytes, int] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.partition("#")[0].strip()
            if not line:
                continue
            where = f"{source}:{number}"
            fields = line.split()
            if len(fields) not in (2, 3) or (len(fields) == 3 and fields[2] != RESET_WORD):
                raise UsageError(f"{where}: expected TOKEN NAMESPACE_GLOB[,NAMESPACE_GLOB...] [{RESET_WORD}]")
            token, globs_text = fields[0], fields[1]
            if len(token) < MIN_TOKEN_LENGTH or not _TOKEN_CHARACTERS.fullmatch(token):
                raise UsageError(
                    f"{where}: a token must be at least {MIN_TOKEN_LENGTH} visible ASCII characters "
                    "(make one with `openssl rand -hex 32`)"
                )
            globs = tuple(globs_text.split(","))
            bad = next((glob for glob in globs if not _GLOB_CHARACTERS.fullmatch(glob)), None)
            if bad is not None:
                raise UsageError(f"{where}: namespace glob {quote(bad)} is not letters, digits, ._:/@+- and *?[]!")
            digest = _digest(token)
            if digest in grants:
                raise UsageError(f"{where}: the same token as line {first_line[digest]}")
            first_line[digest] = number
            grants[digest] = Grant(f"{source}:{number}", globs, len(fields) == 3)
        if not grants:
            raise UsageError(f"{source}: no tokens (a server started with a token file admits only its tokens)")
        return cls(grants, source)

    @classmethod
    def load(cls, path: str | Path) -> TokenTable:
        """Read a token file. Its permissions are the caller's to check (`readable_by_others`)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="ascii")
        except UnicodeDecodeError:
            raise UsageError(f"{path}: a token file is ASCII text") from None
        return cls.parse(text, str(path))

    def grant_for(self, authorization: str | None) -> Grant | None:
        """The grant of the token in an `authorization` metadata value, or None for a missing or unknown one."""
        if authorization is None or authorization[: len(BEARER)].lower() != BEARER:
            return None
        token = authorization[len(BEARER) :].strip()
        if not _TOKEN_CHARACTERS.fullmatch(token):
            return None
        return self._grants.get(_digest(token))


def readable_by_others(path: str | Path) -> bool:
    """True when a secret file (token file, TLS key) can be read by users other than its owner's group."""
    return bool(Path(path).stat().st_mode & stat.S_IROTH)


def read_token_file(path: str | Path) -> str:
    """A client's token: the first line of `path` that is not blank or a `#` comment."""
    path = Path(path)
    for raw in path.read_text(encoding="ascii", errors="replace").splitlines():
        line = raw.partition("#")[0].strip()
        if line:
            if not _TOKEN_CHARACTERS.fullmatch(line):
                raise UsageError(f"{path}: the token must be one word of visible ASCII characters")
            return line
    raise UsageError(f"{path}: no token in the file")


def is_local(listen: str) -> bool:
    """True when `listen` (HOST:PORT or unix:PATH) only accepts connections from this machine."""
    if listen.startswith("unix:"):
        return True
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in addresses)


def check_exposure(listen: str, *, tls: bool, tokens: bool, insecure: bool) -> list[str]:
    """Refuse to listen off this machine with neither TLS nor tokens unless `insecure`; return warnings.

    Off loopback, anyone who can reach the port would otherwise own every namespace.
    """
    if is_local(listen):
        return []
    if not (tls or tokens):
        if not insecure:
            raise UsageError(
                f"listening on {listen} (reachable from other machines) needs --tls-cert/--tls-key or --tokens; "
                "--insecure serves anyone who can connect"
            )
        return [f"listening on {listen} with neither TLS nor tokens (--insecure): anyone who can connect owns it"]
    if tokens and not tls:
        return [f"listening on {listen} without TLS: tokens and data cross the network in clear"]
    return []
