"""A TCP proxy in front of a real Redis that can lose one reply on the way back.

Armed with a byte string, it forwards the next request that contains it to the server as
usual, reads the server's reply and throws it away, then closes the client's connection:
what a network cut right after the write looks like from the client (the command ran; the
client sees a connection error). An error reply (a NOSCRIPT before the script is loaded, say)
is passed through and the proxy stays armed, so the command that is lost is one that ran.

Every other byte is forwarded unchanged, in both directions. Clients talk to it one command
at a time per connection (redis-py does, outside pipelines), so the bytes that come back
after the armed request are its reply.
"""

from __future__ import annotations

import select
import socket
import threading
from types import TracebackType

CHUNK = 65_536


class ReplyDropper:
    def __init__(self, upstream_port: int) -> None:
        self._upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._armed: bytes | None = None
        self.dropped = 0  # replies thrown away so far
        self._last_marker = b""
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._start(self._accept_loop)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, marker: bytes) -> None:
        """Lose the reply to the next request containing ``marker`` that the server answers
        without an error."""
        with self._lock:
            self._armed = marker

    def armed(self) -> bool:
        with self._lock:
            return self._armed is not None

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> ReplyDropper:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            ready, _, _ = select.select([self._listener], [], [], 0.1)
            if not ready:
                continue
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed under us
                return
            self._start(self._relay, client)

    def _relay(self, client: socket.socket) -> None:
        server = socket.create_connection(self._upstream)
        dropping = False  # the armed request went out: its reply is to be lost
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([client, server], [], [], 0.1)
                if client in ready:
                    data = client.recv(CHUNK)
                    if not data:
                        return
                    dropping = dropping or self._matches(data)
                    server.sendall(data)
                if server in ready:
                    data = server.recv(CHUNK)
                    if not data:
                        return
                    if dropping and not data.startswith(b"-"):
                        with self._lock:
                            self.dropped += 1
                        return  # the reply goes nowhere; the client sees its connection end
                    if dropping:  # an error: the command didn't run, so stay armed
                        self.arm(self._last_marker)
                        dropping = False
                    client.sendall(data)
        except OSError:
            return
        finally:
            client.close()
            server.close()

    def _matches(self, request: bytes) -> bool:
        with self._lock:
            if self._armed is None or self._armed not in request:
                return False
            self._last_marker, self._armed = self._armed, None
            return True
