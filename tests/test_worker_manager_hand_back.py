"""``Manager.stop`` when the hand-back of a still-running job fails: the run's lock release is
withheld only while a requeued copy may hold the lock.

The run is a cron run (``until_executed``) inside ``perform`` at the shutdown deadline, holding
its entry's running lock. When the hand-back certainly did not run (its connection was refused:
nothing was sent), the run frees its own lock when it finishes; when the hand-back's reply was
lost after sending, a copy may be queued with the lock, so the run leaves the lock alone. Real
private servers throughout: one stopped and restarted on its port (AOF keeps the data), one
whose clients are paused and killed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import pytest
import redis
from conftest import wait_for
from runtime_support import Gate, fresh_runtime, private_config

import cogworker
from cogworker import keys, locks, wire
from cogworker.local.server import RedisServer
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager

RUNS: list[str] = []
GATE = Gate()
PJID = "hb-cron-pj"
LOCK = keys.periodic_running(PJID)
PERSISTENT = ["appendonly yes", "appendfsync always"]


class GatedCron(cogworker.Job):
    name = "HBCron::Gated"

    def perform(self) -> None:
        GATE.pass_through()
        RUNS.append(self.jid)


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, gate=GATE)


@pytest.fixture
def server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_server_factory(config_lines=PERSISTENT)


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=server.port, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def manager(server: RedisServer) -> Iterator[Manager]:
    cfg = private_config(server.url, concurrency=1, shutdown_timeout=0.2)
    subject = Manager(cfg, new_identity())
    try:
        yield subject
    finally:
        GATE.open()
        if not subject.stopping.is_set():
            subject.stop()
        cfg.close()


def start_cron_run(admin: redis.Redis, manager: Manager) -> str:
    """Push a cron run holding its running lock (as the ticker leaves it); returns its jid
    once it is inside ``perform``."""
    raw = wire.dumps(
        wire.normalize(
            {"class": GatedCron.name, "periodic_pjid": PJID, "periodic_until_executed": True}
        )
    )
    jid = str(json.loads(raw)["jid"])
    admin.set(LOCK, jid, ex=300)
    admin.lpush(keys.queue("default"), raw)
    manager.start()
    assert GATE.entered.wait(10)
    manager.bookkeeper.flush()
    return jid


def test_a_refused_hand_back_lets_the_run_release_its_lock(
    server: RedisServer, admin: redis.Redis, manager: Manager
) -> None:
    """Redis is down at the deadline: the hand-back's connection is refused, so no copy was
    requeued; once Redis is back and the run finishes, the run frees its lock."""
    jid = start_cron_run(admin, manager)
    server.stop()
    manager.stop()  # the hand-back fails: connection refused
    server.start()
    assert admin.get(LOCK) == jid  # AOF: the restart kept the data
    assert admin.llen(keys.queue("default")) == 0  # nothing was requeued
    GATE.open()
    wait_for(lambda: [jid] == RUNS)
    wait_for(lambda: admin.exists(LOCK) == 0)
    assert jid not in locks.handed_back
    assert admin.llen(keys.queue("default")) == 0


def test_a_hand_back_whose_reply_was_lost_keeps_the_lock_for_a_copy(
    admin: redis.Redis, manager: Manager
) -> None:
    """The hand-back's script is sent, then its connection is killed before any reply: the
    copy may have been requeued with the lock, so the run here must not release it."""
    jid = start_cron_run(admin, manager)
    admin.client_pause(30_000, all=False)  # WRITE: scripts wait, this client's reads don't
    try:
        stopping = _stop_in_thread(manager)
        hand_back = wait_for(lambda: _client_running(admin, "evalsha"))
        admin.client_kill_filter(_id=hand_back)
        stopping.join(15)
        assert not stopping.is_alive()
    finally:
        admin.client_unpause()
    assert jid in locks.handed_back
    GATE.open()
    wait_for(lambda: [jid] == RUNS)
    wait_for(lambda: manager.ledger.busy == 0)  # the run ended here (its release was skipped)
    assert admin.get(LOCK) == jid


def _stop_in_thread(manager: Manager) -> threading.Thread:
    thread = threading.Thread(target=manager.stop, name="stopping")
    thread.start()
    return thread


def _client_running(admin: redis.Redis, command: str) -> str | None:
    """The id of a client waiting in ``command`` (paused), or None."""
    for client in admin.client_list():
        if client.get("cmd") == command:
            return str(client["id"])
    return None


def test_a_withdrawn_mark_makes_the_releases_skipped_meanwhile(
    config: cogworker.Config, r: redis.Redis
) -> None:
    """A run that finished while it was marked skipped its release (a direct one and a
    deferred one); withdrawing the mark makes both, owner-checked."""
    direct, deferred, newer = (keys.periodic_running(pjid) for pjid in ("a", "b", "c"))
    r.mset({direct: "jid-1", deferred: "jid-1", newer: "a-newer-run"})
    locks.handed_back.add("jid-1")
    try:
        locks.release_key(config.redis(), direct, "jid-1")
        locks.deferred.add(deferred, "jid-1")
        locks.deferred.retry_all(config.redis())
        locks.release_key(config.redis(), newer, "jid-1")
        assert r.mget(direct, deferred) == ["jid-1", "jid-1"]  # skipped: marked
        locks.withdraw_hand_back(config.redis(), ["jid-1"])
    finally:
        locks.handed_back.discard("jid-1")
    assert r.exists(direct, deferred) == 0
    assert r.get(newer) == "a-newer-run"
    assert "jid-1" not in locks.handed_back
