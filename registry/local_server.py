"""A registry server of its own on a free loopback port, for the benchmark and the tests:
``tokmaint registry serve`` over SQLite in a folder, started and waited for (``/healthz``);
``start_service`` does the same for any of tokmaint's servers (``ingest-server``).

    process, url = start_server(Path("/tmp/reg"), env={"TOKMAINT_REGISTRY_TOKEN": token})
    ...
    process.terminate()
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tokenizer_service.errors import TokmaintError


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortTaken(TokmaintError):
    """The server could not bind its port: another process took it first."""


def start_server(
    root: Path, *, env: dict[str, str], timeout: float = 60.0, port: int | None = None
) -> tuple[subprocess.Popen, str]:
    """Start a server with its database and artifacts in ``root`` and the extra environment
    ``env`` (the token, limits); returns it and its URL once it answers. Its output goes to
    ``root/server.log``. ``port``: that one (a server started again where its clients look)
    instead of a free one."""
    root.mkdir(parents=True, exist_ok=True)
    return start_service(
        ["registry", "serve", "--db", f"sqlite:///{root / 'registry.db'}", "--artifacts", str(root / "artifacts")],
        env=env,
        log=root / "server.log",
        timeout=timeout,
        what="the registry server",
        port=port,
    )


def start_service(
    command: list[str],
    *,
    env: dict[str, str],
    log: Path,
    timeout: float = 60.0,
    what: str = "the server",
    tries: int = 3,
    port: int | None = None,
) -> tuple[subprocess.Popen, str]:
    """Start ``tokmaint COMMAND --port P`` (a server with ``/healthz``) on a free port with the
    extra environment ``env``; returns it and its URL once it answers. Its output goes to ``log``
    (a pipe nobody reads would block a chatty server once it filled). The port is free when
    chosen, but another process may bind it before the server does (its imports take seconds):
    a server that exits for that is started again on another port, up to ``tries`` times.
    ``port``: that port, tried once."""
    for _ in range(tries - 1 if port is None else 0):
        try:
            return _started(command, env=env, log=log, timeout=timeout, what=what, port=free_port())
        except PortTaken:
            continue
    return _started(command, env=env, log=log, timeout=timeout, what=what, port=port or free_port())


def _started(
    command: list[str], *, env: dict[str, str], log: Path, timeout: float, what: str, port: int
) -> tuple[subprocess.Popen, str]:
    """One try of :func:`start_service` on ``port``."""
    started = log.stat().st_size if log.exists() else 0
    with open(log, "ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "tokmaint.cli", *command, "--port", str(port)],
            env={**os.environ, **env},
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = log.read_bytes()[started:].decode("utf-8", "replace")
            if "address already in use" in said:
                raise PortTaken(f"{what} found port {port} taken (its log: {log})")
            raise TokmaintError(f"{what} exited (its log: {log}): {said[-500:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise TokmaintError(f"{what} did not answer /healthz within {timeout:g} s")
