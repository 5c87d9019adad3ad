"""The private redis-server the demo and the tests start: it answers on its own port, and a
port another process took in the meantime is never mistaken for it."""

from __future__ import annotations

import pytest
import redis
from conftest import wait_for

from cogworker.redis_server import PortTaken, RedisServer


def test_a_free_port_taken_before_the_start_moves_the_server_to_another() -> None:
    with RedisServer() as first:
        redis.Redis.from_url(first.url).set("owner", "first")
        second = RedisServer()
        second.port = first.port  # as if another run took "our" free port first
        try:
            second.start()
            assert second.port != first.port
            assert redis.Redis.from_url(second.url).get("owner") is None  # not the first's
            assert redis.Redis.from_url(first.url).get("owner") == b"first"
        finally:
            second.cleanup()


def test_a_chosen_port_that_is_taken_is_an_error_naming_it() -> None:
    with RedisServer() as first:
        taken = RedisServer(port=first.port)
        try:
            with pytest.raises(PortTaken, match=f"port {first.port} is taken"):
                taken.start()
        finally:
            taken.cleanup()
        assert redis.Redis.from_url(first.url).ping()


def test_start_returns_once_the_dataset_is_loaded() -> None:
    """A restarted server answers INFO while it still loads its AOF; start() waits for the
    load (PING answered), so that nothing acts on a half-loaded dataset."""
    # key-load-delay (a debugging setting): 50 µs per key loaded, so the load takes 0.5 s
    lines = ["appendonly yes", "key-load-delay 50", "loading-process-events-interval-bytes 1024"]
    with RedisServer(config_lines=lines) as server:
        client = redis.Redis.from_url(server.url)
        client.execute_command("DEBUG", "POPULATE", 10_000)
        client.execute_command("BGREWRITEAOF")
        wait_for(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0)
        server.stop()
        server.start()
        assert client.info("persistence")["loading"] == 0
        assert client.dbsize() == 10_000
