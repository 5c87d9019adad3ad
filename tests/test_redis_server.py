"""The private redis-server the demo and the tests start: it answers on its own port, and a
port another process took in the meantime is never mistaken for it."""

from __future__ import annotations

import pytest
import redis

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
