"""Helpers shared by the worker-runtime tests (tests/test_runtime_*.py); not a test module."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import cogworker
from cogworker import keys
from cogworker.redis_server import RedisServer
from cogworker.worker.manager import Manager

WORKER_USER = "worker"
WORKER_PASSWORD = "worker-pw"


def queue_jobs(r: redis.Redis, name: str) -> list[dict[str, Any]]:
    """The payloads waiting on queue ``name``, next to run first."""
    return [json.loads(raw) for raw in reversed(r.lrange(keys.queue(name), 0, -1))]


def zset_entries(r: redis.Redis, key: str) -> list[tuple[dict[str, Any], float]]:
    """(payload, score) of every member of a sorted set, lowest score first."""
    return [(json.loads(member), score) for member, score in r.zrange(key, 0, -1, withscores=True)]


def redis_time(r: redis.Redis) -> int:
    """Redis's own clock, whole seconds (what orphan recovery compares stamps with)."""
    seconds, _ = r.time()
    return int(seconds)


def counter(r: redis.Redis, key: str) -> int:
    return int(r.get(key) or 0)


@contextlib.contextmanager
def running(manager: Manager, stop_timeout: float = 5.0) -> Iterator[Manager]:
    """Start ``manager``; stop it on exit unless the test already did."""
    manager.start()
    try:
        yield manager
    finally:
        if not manager.stopping.is_set():
            manager.stop(stop_timeout)


class Gate:
    """Lets a test hold a job inside ``perform`` and release it when it chooses."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._open = threading.Event()

    def pass_through(self, timeout: float = 15.0) -> None:
        """Called from ``perform``: signal entry, then wait until opened."""
        self.entered.set()
        if not self._open.wait(timeout):
            raise TimeoutError("the test never opened the gate")

    def open(self) -> None:
        self._open.set()

    def reset(self) -> None:
        self.entered.clear()
        self._open.clear()


class AclServer:
    """A private server where the code under test connects as its own ACL user, so a test can
    revoke one command at run time (the denial hits the worker's existing connections)."""

    def __init__(self, factory: Callable[..., RedisServer], **kwargs: Any) -> None:
        self.server = factory(**kwargs)
        self.admin = redis.Redis.from_url(self.server.url, decode_responses=True)
        self.admin.execute_command(
            "ACL", "SETUSER", WORKER_USER, "on", f">{WORKER_PASSWORD}", "~*", "&*", "+@all"
        )

    @property
    def worker_url(self) -> str:
        return f"redis://{WORKER_USER}:{WORKER_PASSWORD}@127.0.0.1:{self.server.port}/0"

    def deny(self, *commands: str) -> None:
        self.admin.execute_command(
            "ACL", "SETUSER", WORKER_USER, *[f"-{command}" for command in commands]
        )

    def allow(self, *commands: str) -> None:
        self.admin.execute_command(
            "ACL", "SETUSER", WORKER_USER, *[f"+{command}" for command in commands]
        )

    def close(self) -> None:
        self.admin.close()


def release(cfg: cogworker.Config) -> None:
    """Drop ``cfg``'s client and close its sockets now. (``Config._drop_redis`` alone leaves
    them open until garbage collection: the client is built on an explicit pool, which
    ``Redis.close()`` does not disconnect.)"""
    client = cfg._redis
    if client is not None:
        client.connection_pool.disconnect()
    cfg._drop_redis()


def closing_pools(request: pytest.FixtureRequest) -> Iterator[None]:
    """Body of a module's autouse fixture: close the ``config`` fixture's sockets after the
    test (set up first, so it is torn down after everything that used it)."""
    cfg = request.getfixturevalue("config") if "config" in request.fixturenames else None
    yield
    if cfg is not None:
        release(cfg)


def private_config(url: str, **options: Any) -> cogworker.Config:
    """A Config on a private server (not installed as the default)."""
    return cogworker.Config(redis_url=url, **options)


# -- additions for the hardening tests (tests/test_hardening_*.py) ------------------------------


def all_settled(r: redis.Redis, manager: Manager) -> bool:
    """The bookkeeper sent everything, nothing is listed in progress or running in memory."""
    manager.bookkeeper.flush()
    return r.llen(keys.inprogress(manager.identity)) == 0 and not manager.running()


def attempts_log(r: redis.Redis, jid: str) -> list[dict[str, Any]]:
    """The entries of ``cogworker:job_attempts:<jid>``, oldest first."""
    return [json.loads(item) for item in r.lrange(keys.job_attempts(jid), 0, -1)]


def plant_orphan(r: redis.Redis, identity: str, raws: list[str], *, beat_age: int = 10_000) -> None:
    """A dead process's leftovers: its in-progress list (``raws[0]`` at the head), its registry
    entry and a last-beat stamp ``beat_age`` seconds old on Redis's clock; no presence key."""
    r.lpush(keys.inprogress(identity), *reversed(raws))
    r.sadd(keys.INPROGRESS_IDENTITIES, identity)
    r.hset(keys.LAST_BEAT, identity, str(redis_time(r) - beat_age))


def paused_scripts(admin: redis.Redis) -> int:
    """How many clients are held by CLIENT PAUSE in the middle of sending a script."""
    return sum(
        1
        for client in admin.client_list()
        if client.get("cmd") in ("evalsha", "eval") and "b" in str(client.get("flags"))
    )


def quiet_stop(manager: Manager, timeout: float = 5.0) -> None:
    """Stop ``manager`` whether or not it was started, closing its fetch connection."""
    if not manager.stopping.is_set():
        manager.stop(timeout)
    elif manager.fetch_mode is not None:
        manager.fetch().close()
