"""Quoting client input in messages: never more than a few hundred characters of it.

A refusal names what was wrong and shows the offending value, but a value is
whatever a client sent: a 63 MiB SPEC echoed into a status message overflows
gRPC's metadata limit (the client sees RESOURCE_EXHAUSTED instead of the
refusal) and into a log line fills the disk. Every message that shows client
input goes through `quote`.
"""

from __future__ import annotations

import logging
import threading
import time

#: Characters of a client's value shown in a message; the rest is counted, not shown.
QUOTE_LIMIT = 200
#: The longest status message the server sends (well under gRPC's 8 KiB default metadata limit).
DETAILS_LIMIT = 1000


def quote(value: str | bytes, limit: int = QUOTE_LIMIT) -> str:
    """`repr(value)` of at most `limit` characters of it, saying how long it was when cut."""
    shown = repr(value[:limit])
    return shown if len(value) <= limit else f"{shown}... ({len(value):,} characters)"


def clip(message: str, limit: int = DETAILS_LIMIT) -> str:
    """A message cut to `limit` characters: the last guard before a status message or log line."""
    return message if len(message) <= limit else message[: limit - 30] + f"... ({len(message):,} characters)"


class RefusalLog:
    """Logs refusals at most `per_second` a second and counts the rest: garbage from a client must not fill the disk."""

    def __init__(self, logger: logging.Logger, per_second: float = 20.0) -> None:
        self._logger = logger
        self._interval = 1.0 / per_second
        self._next = 0.0
        self._suppressed = 0
        self._lock = threading.Lock()

    def log(self, level: int, message: str, *args: object, exc_info: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                self._suppressed += 1
                return
            self._next = now + self._interval
            suppressed, self._suppressed = self._suppressed, 0
        text = clip(message % args if args else message)
        if suppressed:
            text += f" ({suppressed} more refusals not logged)"
        self._logger.log(level, "%s", text, exc_info=exc_info)
