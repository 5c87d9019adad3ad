"""Lua scripts: each lives in its own ``.lua`` file beside the module that runs it.

A script is read once, called by SHA (EVALSHA) and re-sent whole (EVAL, which also caches it)
when Redis answers NOSCRIPT: after SCRIPT FLUSH, a restart or a failover. Script calls can also
ride in a pipeline with other commands (``Batch``); the ones Redis answered NOSCRIPT are then
re-sent whole together, in one more round trip.

A file may start with ``--#include name.lua`` lines to prepend helper functions: from
``name.lua`` beside it (helpers of one directory's scripts), else ``cogworker/lua/name.lua``
(helpers shared by scripts of several directories).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from redis.exceptions import NoScriptError

if TYPE_CHECKING:
    from redis.client import Pipeline
    from redis.connection import AbstractConnection

_INCLUDE = "--#include "
HELPERS = Path(__file__).resolve().parent / "lua"


def _read(path: Path) -> str:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    parts = []
    for line in lines:
        if line.startswith(_INCLUDE):
            name = line[len(_INCLUDE) :].strip()
            beside = path.parent / name
            parts.append(_read(beside if beside.exists() else HELPERS / name))
        else:
            parts.append(line)
    return "".join(parts)


class Script:
    """One Lua script, run by SHA with a transparent reload on NOSCRIPT."""

    def __init__(self, path: Path) -> None:
        self.name = path.stem
        self.source = _read(path)
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    def __call__(self, client: redis.Redis, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)

    def call_on(
        self,
        connection: AbstractConnection,
        keys: Sequence[str],
        args: Sequence[Any] = (),
    ) -> Any:
        """Run on a connection the calling thread owns (``connection.dedicated``). After any
        error but an error reply the connection is closed: a reply still on its way must never
        be read as the answer to the next call."""
        try:
            connection.send_command("EVALSHA", self.sha, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
            try:
                return connection.read_response()
            except NoScriptError:
                connection.send_command("EVAL", self.source, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
                return connection.read_response()
        except redis.ResponseError:
            raise
        except BaseException:
            connection.disconnect()  # type: ignore[no-untyped-call]
            raise

    def __repr__(self) -> str:
        return f"Script({self.name})"


class Batch:
    """A pipeline (not a transaction) of plain commands, queued on ``pipe``, and script calls,
    queued with ``script``. ``execute`` returns every reply in order, an error as a value."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self.pipe: Pipeline = client.pipeline(transaction=False)
        self._calls: dict[int, tuple[Script, list[str], list[Any]]] = {}

    def __len__(self) -> int:
        return len(self.pipe)

    def script(self, script: Script, keys: Sequence[str], args: Sequence[Any] = ()) -> int:
        """Queue a call of ``script``; returns the position of its reply."""
        position = len(self.pipe)
        self.pipe.evalsha(script.sha, len(keys), *keys, *args)
        self._calls[position] = (script, list(keys), list(args))
        return position

    def execute(self) -> list[Any]:
        """Send everything queued (nothing when empty). A connection error is raised."""
        if not len(self.pipe):
            return []
        replies: list[Any] = self.pipe.execute(raise_on_error=False)
        unknown = [at for at in self._calls if isinstance(replies[at], NoScriptError)]
        if unknown:
            self._send_whole(unknown, replies)
        return replies

    def _send_whole(self, positions: list[int], replies: list[Any]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for position in positions:
            script, keys, args = self._calls[position]
            pipe.eval(script.source, len(keys), *keys, *args)
        try:
            again: list[Any] = pipe.execute(raise_on_error=False)
        except redis.RedisError as error:
            again = [error] * len(positions)
        for position, reply in zip(positions, again, strict=True):
            replies[position] = reply


def load(module_file: str, name: str) -> Script:
    """The script ``name``.lua in the directory of ``module_file`` (pass ``__file__``)."""
    return Script(Path(module_file).parent / f"{name}.lua")
