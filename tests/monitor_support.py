"""Redis MONITOR for tests (not a test module): ``Monitor(url)`` records every command a
server runs while it is open, with the server's own timestamp, and marks those a Lua script ran
(client ``lua``), so a test sees when each call happened and which writes one script made.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Any

import redis

SCRIPT_CALLS = ("EVALSHA", "EVAL")


@dataclass(frozen=True)
class Command:
    at: float  # the server's clock, seconds
    by_script: bool
    words: list[str]


class Monitor:
    """Every command a server runs while the monitor is open (Redis MONITOR)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._marker = f"end-of-monitor-{uuid.uuid4().hex}"
        self._seen: list[Command] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._read, name="monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        assert self._ready.wait(10), "MONITOR never started"
        return self

    def __exit__(self, *exc: object) -> None:
        poke = redis.Redis.from_url(self._url, decode_responses=True)
        try:
            poke.echo(self._marker)  # the reader stops at this one
        finally:
            poke.close()
        self._thread.join(10)

    def _read(self) -> None:
        client = redis.Redis.from_url(self._url, decode_responses=True)
        try:
            with client.monitor() as feed:
                self._ready.set()
                while True:
                    line: dict[str, Any] = feed.next_command()
                    words = str(line["command"]).split(" ")
                    if words == ["ECHO", self._marker]:
                        return
                    self._seen.append(Command(line["time"], line["client_type"] == "lua", words))
        finally:
            client.close()

    def commands(self) -> list[Command]:
        return list(self._seen)

    def calls_of(self, sha: str) -> list[float]:
        """When the script with this SHA was called (EVALSHA), oldest first."""
        return [c.at for c in self.commands() if c.words[:2] == ["EVALSHA", sha]]

    def script_writes(self) -> list[list[list[str]]]:
        """The commands each script call ran, one list per EVALSHA / EVAL."""
        groups: list[list[list[str]]] = []
        for command in self.commands():
            if command.words[0] in SCRIPT_CALLS:
                groups.append([])
            elif command.by_script and groups:
                groups[-1].append(command.words)
        return groups
