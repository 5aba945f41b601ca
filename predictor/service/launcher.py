"""The predictor service in a child process, with a port handshake over a pipe.

This is how to run the service next to a simulator in the same program: in a
thread of the same process it would compete with the simulator for the
interpreter lock, and every round trip would be slower. It also lets tests
kill the server outright.

The child is `python -m predictor.service.launcher ARGUMENTS FD`: it serves
with the JSON `ARGUMENTS` and, once the server accepts calls, writes the bound
port as one line to the inherited file descriptor `FD` and closes it. The
parent waits for that line; end of file before it means the child failed,
and its log says why.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from predictor.service.limits import Limits
from predictor.service.server import CLOSE_SECONDS, STUCK_SECONDS, Security, serve


class ServerProcess:
    """`serve()` in a child process, on a free loopback port by default. The child's log is collected in `log`."""

    def __init__(
        self,
        listen: str = "127.0.0.1:0",
        state: str | None = None,
        default_estimators: Sequence[str] | None = None,
        startup_timeout: float = 60.0,
        *,
        models_dir: str | None = None,
        security: Security | None = None,
        limits: Limits | None = None,
        metrics_listen: str | None = None,
    ) -> None:
        self.limits = limits or Limits()
        arguments = {
            "listen": listen,
            "state": None if state is None else str(state),
            "default_estimators": None if default_estimators is None else list(default_estimators),
            "models_dir": None if models_dir is None else str(models_dir),
            "security": dataclasses.asdict(security or Security()),
            "limits": dataclasses.asdict(self.limits),
            "metrics_listen": metrics_listen,
        }
        ready_read, ready_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "predictor.service.launcher", json.dumps(arguments), str(ready_write)],
                stderr=subprocess.PIPE,
                text=True,
                pass_fds=(ready_write,),
            )
        finally:
            os.close(ready_write)
        self.log: list[str] = []
        assert self.process.stderr is not None
        self._reader = threading.Thread(
            target=self.log.extend, args=(self.process.stderr,), name="tsched-server-log", daemon=True
        )
        self._reader.start()
        try:
            port = _read_port(ready_read, startup_timeout)
        finally:
            os.close(ready_read)
        if port is None:
            self.process.kill()
            self.process.wait()
            self._reader.join(5)
            raise RuntimeError("the predictor service did not start:\n" + "".join(self.log))
        self.port = port
        host = listen.rpartition(":")[0]
        if listen.startswith("unix:"):
            self.address = listen
        else:
            self.address = f"{'127.0.0.1' if host in ('', '0.0.0.0', '[::]') else host}:{port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, signum: int = signal.SIGTERM, timeout: float | None = None) -> int:
        """Send `signum` (SIGTERM: graceful), wait for the exit, return its code.

        The default wait outlasts the child's own watchdog (`serve`), so a stuck stop ends with status 1 and
        every thread's stack in `log`. On `subprocess.TimeoutExpired` the child is asked for its stacks (SIGUSR1)
        before the error is raised: the log then says where it hangs.
        """
        if self.process.poll() is None:
            self.process.send_signal(signum)
        bound = self.limits.shutdown_grace + CLOSE_SECONDS + STUCK_SECONDS + 2
        try:
            code = self.process.wait(bound if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGUSR1)
            raise
        self._reader.join(5)
        return code


def _read_port(descriptor: int, timeout: float) -> int | None:
    """The port line the child writes, or None at end of file, on garbage, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    received = b""
    while not received.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([descriptor], [], [], remaining)[0]:
            return None
        chunk = os.read(descriptor, 64)
        if not chunk:
            return None
        received += chunk
    text = received.decode("ascii", errors="replace").strip()
    return int(text) if text.isdigit() else None


def main(argv: Sequence[str]) -> None:
    """The child: serve with the JSON arguments, announcing the port on the given descriptor."""
    arguments, descriptor = json.loads(argv[0]), int(argv[1])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")

    def announce(port: int) -> None:
        os.write(descriptor, f"{port}\n".encode("ascii"))
        os.close(descriptor)

    security = Security(**arguments.pop("security"))
    limits = _limits(arguments.pop("limits"))
    serve(**arguments, on_ready=announce, security=security, limits=limits)


def _limits(values: dict[str, Any]) -> Limits:
    """`Limits` from its JSON form (where tuples became lists)."""
    fields: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value for key, value in values.items()}
    return Limits(**fields)


if __name__ == "__main__":
    main(sys.argv[1:])
