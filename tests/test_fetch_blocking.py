"""Waking a fetch's blocking connection. A BLMOVE sent while CLIENT PAUSE WRITE holds writes
back (as a fail-over does) is blocked by the pause, not on its list; unblocking such a client
by timeout crashes Redis before 8.2, so the wake must not do that."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis
from conftest import wait_for

import cogworker
from cogworker.fetch.blocking import BlockingConnection
from cogworker.redis_server import RedisServer


def test_waking_a_blmove_held_back_by_client_pause_leaves_redis_running(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    blocking = BlockingConnection(cogworker.Config(redis_url=server.url), block_seconds=30)
    replies: list[Any] = []
    try:
        assert blocking.call("PING") == "PONG"  # connected, its client id known
        admin.client_pause(30_000, all=False)  # writes only: BLMOVE is held back
        caller = threading.Thread(
            target=lambda: replies.append(blocking.call("BLMOVE", "q", "p", "RIGHT", "LEFT", 30))
        )
        caller.start()
        wait_for(lambda: any("b" in c["flags"] for c in admin.client_list()))
        blocking.wake(admin)
        caller.join(10)
        assert not caller.is_alive() and replies == [None]
        assert admin.ping() is True  # the server is still up
        admin.client_unpause()
        admin.lpush("q", "job")
        # the woken connection was closed: the next call reconnects and takes the job
        assert blocking.call("BLMOVE", "q", "p", "RIGHT", "LEFT", 5) == "job"
    finally:
        blocking.close()
        admin.close()


def test_waking_a_blmove_waiting_on_its_list_returns_at_once(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    blocking = BlockingConnection(cogworker.Config(redis_url=server.url), block_seconds=30)
    replies: list[Any] = []
    try:
        assert blocking.call("PING") == "PONG"
        caller = threading.Thread(
            target=lambda: replies.append(blocking.call("BLMOVE", "q", "p", "RIGHT", "LEFT", 30))
        )
        caller.start()
        wait_for(lambda: any(c["cmd"] == "blmove" for c in admin.client_list()))
        blocking.wake(admin)
        caller.join(10)
        assert not caller.is_alive() and replies == [None]
        assert admin.llen("p") == 0  # nothing was moved
    finally:
        blocking.close()
        admin.close()
