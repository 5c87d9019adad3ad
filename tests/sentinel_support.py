"""A Redis Sentinel set-up on loopback for the fail-over tests: a primary, a replica and one
sentinel, each a real server process, with timings small enough for a fail-over in about
a second or two. Not a test module.

One sentinel is enough to fail over (quorum 1, and it is the majority of the sentinels it
knows); the fail-over behaviour of several sentinels is Redis's to test, not cogworker's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import redis
from conftest import wait_for

from cogworker.local.server import RedisServer

SERVICE = "cogworker-test"
# a primary feeds a new replica at once (by default it waits 5 s for more replicas to come)
REPLICATION = ["repl-diskless-sync-delay 0"]


class SentinelSet:
    """The primary (``servers[0]`` at first), its replica and a sentinel watching them.

    ``down_after_ms``: how long the primary must not answer before the sentinel calls it
    down; ``failover_timeout_ms``: the sentinel's fail-over timeout (which also spaces
    retries). Both are small by default so the tests take seconds.
    """

    def __init__(
        self,
        factory: Callable[..., RedisServer],
        *,
        down_after_ms: int = 500,
        failover_timeout_ms: int = 5000,
    ) -> None:
        first = factory(config_lines=REPLICATION)
        second = factory(config_lines=[*REPLICATION, f"replicaof 127.0.0.1 {first.port}"])
        self.servers = [first, second]
        self.sentinel = factory(
            extra_args=["--sentinel"],
            config_lines=[
                f"sentinel monitor {SERVICE} 127.0.0.1 {first.port} 1",
                f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}",
                f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}",
            ],
        )
        self.control = redis.Redis(port=self.sentinel.port, decode_responses=True)
        # a sentinel reads its servers' INFO every 10 s by default, and waits 4 announcement
        # periods (8 s) before turning a former primary that is back into a replica
        self.control.execute_command(
            "SENTINEL", "DEBUG", "info-period", "100", "publish-period", "100"
        )
        self.clients: dict[int, redis.Redis] = {}
        wait_for(self._replica_ready, timeout=15)

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel.port}/{SERVICE}/0"

    def client(self, server: RedisServer) -> redis.Redis:
        """A plain client on one server (not through the sentinel)."""
        if server.port not in self.clients:
            self.clients[server.port] = redis.Redis(port=server.port, decode_responses=True)
        return self.clients[server.port]

    def primary_port(self) -> int:
        _, port = self.control.sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def primary(self) -> RedisServer:
        """The server the sentinel names as the primary now."""
        port = self.primary_port()
        return next(server for server in self.servers if server.port == port)

    def replica(self) -> RedisServer:
        port = self.primary_port()
        return next(server for server in self.servers if server.port != port)

    def replicated(self, server: RedisServer) -> None:
        """Wait until every write ``server`` has taken so far reached the replica (WAIT)."""
        assert self.client(server).wait(1, 5000) == 1, "the replica did not acknowledge"

    def _replica_ready(self) -> bool:
        """The sentinel knows the replica, reaches it, and the replica is in sync: only
        then can it be promoted (SENTINEL FAILOVER refuses with NOGOODSLAVE before)."""
        replicas = self.control.sentinel_slaves(SERVICE)
        return any(
            entry["flags"] == "slave" and entry["master-link-status"] == "ok" for entry in replicas
        )

    def fail_over(self) -> RedisServer:
        """SENTINEL FAILOVER; returns once the replica is the primary and the former primary
        follows it. Returns the new primary."""
        old, new = self.primary(), self.replica()
        assert self.control.execute_command("SENTINEL", "FAILOVER", SERVICE)
        self._promoted(new)
        wait_for(lambda: self._follows(old, new), timeout=15)
        return new

    def kill_primary(self) -> tuple[RedisServer, RedisServer]:
        """kill -9 the primary; returns (the killed one, the promoted replica) once the
        sentinel has promoted it."""
        old, new = self.primary(), self.replica()
        old.kill()
        self._promoted(new)
        # forget the killed server: another test's server may take its port, and the sentinel
        # would make that one a replica
        self.control.sentinel_reset(SERVICE)
        return old, new

    def _promoted(self, new: RedisServer) -> None:
        """Wait until the fail-over to ``new`` is over, not merely past the promotion: the
        sentinel's record of the primary has switched to it."""

        def switched() -> bool:
            state = self.control.sentinel_master(SERVICE)
            return bool(
                int(state["port"]) == new.port
                and state["flags"] == "master"
                and self.client(new).info("replication")["role"] == "master"
            )

        wait_for(switched, timeout=20)

    def _follows(self, server: RedisServer, primary: RedisServer) -> bool:
        info = self.client(server).info("replication")
        return bool(
            info["role"] == "slave"
            and info["master_port"] == primary.port
            and info["master_link_status"] == "up"
        )

    def log(self) -> str:
        return (Path(self.sentinel.directory) / "redis.log").read_text(errors="replace")

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        self.control.close()
