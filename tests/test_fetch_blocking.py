"""Waking a fetch's blocking connection. A BLMOVE sent while CLIENT PAUSE WRITE holds writes
back (as a fail-over does) is blocked by the pause, not on its list; unblocking such a client
by timeout crashes Redis before 8.2, so the wake must not do that."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from conftest import wait_for

import cogworker
from cogworker.fetch.blocking import BlockingConnection
from cogworker.local.server import RedisServer

BLMOVE = ("BLMOVE", "q", "p", "RIGHT", "LEFT", 30)


@pytest.fixture
def admin_and_blocking(
    redis_server_factory: Callable[..., RedisServer],
) -> Iterator[tuple[redis.Redis, BlockingConnection]]:
    """A private server (a crash must not take the shared one down), a client to watch it and
    a blocking connection already connected (its client id known)."""
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    blocking = BlockingConnection(cogworker.Config(redis_url=server.url), block_seconds=30)
    assert blocking.call("PING") == "PONG"
    yield admin, blocking
    blocking.close()
    admin.close()


def woken_reply(admin: redis.Redis, blocking: BlockingConnection, blocked: str) -> list[Any]:
    """Send BLMOVE from a thread, wait until CLIENT LIST shows it ``blocked`` (a flag or a
    command), wake it, and return what the call returned."""
    replies: list[Any] = []
    caller = threading.Thread(target=lambda: replies.append(blocking.call(*BLMOVE)))
    caller.start()
    wait_for(lambda: any(blocked in c["flags"] or blocked == c["cmd"] for c in admin.client_list()))
    blocking.wake(admin)
    caller.join(10)
    assert not caller.is_alive()
    return replies


def test_waking_a_blmove_held_back_by_client_pause_leaves_redis_running(
    admin_and_blocking: tuple[redis.Redis, BlockingConnection],
) -> None:
    admin, blocking = admin_and_blocking
    admin.client_pause(30_000, all=False)  # writes only: BLMOVE is held back, flagged "b"
    assert woken_reply(admin, blocking, blocked="b") == [None]
    assert blocking.woken
    assert admin.ping() is True  # the server is still up
    admin.client_unpause()
    admin.lpush("q", "job")
    # the woken connection was closed: the next call reconnects and takes the job
    assert blocking.call(*BLMOVE) == "job"
    assert not blocking.woken


def test_waking_a_blmove_waiting_on_its_list_returns_at_once(
    admin_and_blocking: tuple[redis.Redis, BlockingConnection],
) -> None:
    admin, blocking = admin_and_blocking
    assert woken_reply(admin, blocking, blocked="blmove") == [None]
    assert blocking.woken
    assert admin.llen("p") == 0  # nothing was moved
