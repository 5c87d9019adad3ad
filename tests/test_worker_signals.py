"""Remote commands across a dropped subscription: the listener never leaves Redis counting a
subscriber it won't read, and a command sent through the API while it isn't subscribed is
kept in its presence hash and heard once it subscribes again, exactly once.

The listener's connection is dropped with CLIENT KILL TYPE pubsub; the test acts while the
listener handles that failure, from inside its report of it (the one moment it is certainly
not subscribed), so the window is held open rather than raced for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import AclServer, fresh_runtime

import cogworker
from cogworker import api, keys, redis_errors, wire
from cogworker.worker.heartbeat import Heartbeat
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request)


class Listening:
    """A started Heartbeat over an unstarted Manager, recording the commands it hears."""

    def __init__(self, cfg: cogworker.Config) -> None:
        self.received: list[str] = []
        self.manager = Manager(cfg, new_identity())
        self.heartbeat = Heartbeat(cfg, self.manager, self.received.append)
        assert self.heartbeat.start(abort_if=lambda: False)

    @property
    def identity(self) -> str:
        return self.manager.identity

    def close(self) -> None:
        self.heartbeat.stop()


@pytest.fixture
def listening(config: cogworker.Config, r: redis.Redis) -> Iterator[Listening]:
    config.heartbeat_interval = 0.05
    subject = Listening(config)
    try:
        wait_for(lambda: subscribers(r, subject.identity) == 1)
        yield subject
    finally:
        subject.close()


def subscribers(r: redis.Redis, identity: str) -> int:
    [(_, count)] = r.pubsub_numsub(keys.signal_channel(identity))
    return int(count)


def send(r: redis.Redis, identity: str, command: str) -> int:
    """``command`` sent as the admin CLI and the web UI send it."""
    process = api.ProcessSet(r).find(identity)
    assert process is not None
    return process.signal(command)


def during_the_next_drop(monkeypatch: pytest.MonkeyPatch, act: Callable[[], Any]) -> dict[str, Any]:
    """Run ``act`` once, inside the listener's report of its dropped connection; returns
    ``{"result": ...}`` once it has run."""
    done: dict[str, Any] = {}
    acted = threading.Event()
    report = redis_errors.reporter.report

    def reporting(site: str, error: BaseException) -> None:
        if site == "Signals" and not acted.is_set():
            acted.set()
            done["result"] = act()
        report(site, error)

    monkeypatch.setattr(redis_errors.reporter, "report", reporting)
    return done


def test_no_subscriber_is_counted_while_the_listener_is_between_subscriptions(
    listening: Listening, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py re-subscribes inside a failing read, on a connection the listener then
    closes: a PUBLISH at that moment was counted heard (1) and lost. It must say 0."""
    channel = keys.signal_channel(listening.identity)
    done = during_the_next_drop(
        monkeypatch, lambda: (subscribers(r, listening.identity), r.publish(channel, "quiet"))
    )
    r.client_kill_filter(_type="pubsub")
    wait_for(lambda: "result" in done)
    assert done["result"] == (0, 0)
    wait_for(lambda: subscribers(r, listening.identity) == 1)  # subscribed again
    r.publish(channel, "resume")
    wait_for(lambda: listening.received == ["resume"])


def test_a_command_sent_while_the_listener_is_not_subscribed_is_heard_when_it_is(
    listening: Listening, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = during_the_next_drop(monkeypatch, lambda: send(r, listening.identity, "quiet"))
    r.client_kill_filter(_type="pubsub")
    wait_for(lambda: "result" in done)
    assert done["result"] == 0  # nobody heard it then
    wait_for(lambda: listening.received == ["quiet"])
    wait_for(lambda: r.hget(keys.process(listening.identity), wire.SIGNAL_FIELD) is None)


def test_a_command_heard_is_not_heard_again_at_the_next_subscription(
    listening: Listening, r: redis.Redis
) -> None:
    assert send(r, listening.identity, "quiet") == 1
    wait_for(lambda: listening.received == ["quiet"])
    wait_for(lambda: r.hget(keys.process(listening.identity), wire.SIGNAL_FIELD) is None)
    r.client_kill_filter(_type="pubsub")
    wait_for(lambda: redis_errors.reporter.in_outage("Signals"))
    wait_for(lambda: not redis_errors.reporter.in_outage("Signals"))  # subscribed again
    assert send(r, listening.identity, "resume") == 1
    wait_for(lambda: listening.received == ["quiet", "resume"])
    assert r.hget(keys.process(listening.identity), wire.SIGNAL_FIELD) is None
    assert listening.received == ["quiet", "resume"]


def test_a_ruby_process_gets_the_channel_only_and_a_gone_one_no_presence(
    r: redis.Redis,
) -> None:
    """A process that doesn't publish ``beat_interval`` (a Ruby one) never reads the kept
    command: none is written into its presence. A presence that expired is not re-made."""
    r.hset(keys.process("ruby-1"), mapping={"info": wire.dumps({"pid": 1}), "busy": "0"})
    r.sadd(keys.PROCESSES, "ruby-1")
    assert send(r, "ruby-1", "quiet") == 0
    assert r.hkeys(keys.process("ruby-1")) == ["info", "busy"]
    python = api.Process(r, "gone-1", {"beat_interval": 5}, 0, False, None)
    assert python.signal("quiet") == 0
    assert r.exists(keys.process("gone-1")) == 0


def test_a_sender_refused_the_script_still_publishes(acl: AclServer) -> None:
    """A sender whose ACL rules refuse scripts sends the command as Ruby does: published."""
    cfg = cogworker.Config(redis_url=acl.worker_url, heartbeat_interval=0.05)
    sender = cogworker.Config(redis_url=acl.worker_url)
    subject = Listening(cfg)
    try:
        wait_for(lambda: subscribers(acl.admin, subject.identity) == 1)
        acl.deny("evalsha", "eval")
        assert send(sender.redis(), subject.identity, "quiet") == 1
        wait_for(lambda: subject.received == ["quiet"])
    finally:
        subject.close()
        sender.close()
        cfg.close()
