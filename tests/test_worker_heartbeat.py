"""Heartbeat and launcher: presence in Redis, failed beats, remote quiet / resume / stop over
pub/sub, a prompt and clean stop, and a boot that waits for Redis."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from conftest import wait_for
from runtime_support import fresh_runtime, private_config, redis_time, release

import cogworker
from cogworker import keys, redis_errors
from cogworker.local.server import RedisServer
from cogworker.worker.heartbeat import Heartbeat
from cogworker.worker.identity import hostname, new_identity
from cogworker.worker.launcher import Launcher
from cogworker.worker.manager import Manager

RUNS: list[str] = []


class BeatJob(cogworker.Job):
    name = "RtBeat::Job"

    def perform(self, token: str) -> None:
        RUNS.append(token)


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS)


def numsub(r: redis.Redis, identity: str) -> int:
    [(_, count)] = r.pubsub_numsub(keys.signal_channel(identity))
    return int(count)


class Beating:
    """A Heartbeat over an (unstarted) Manager, stopped and closed at the end."""

    def __init__(self, cfg: cogworker.Config) -> None:
        self.received: list[str] = []
        self.manager = Manager(cfg, new_identity())
        self.heartbeat = Heartbeat(cfg, self.manager, self.received.append)

    @property
    def identity(self) -> str:
        return self.manager.identity

    def close(self) -> None:
        self.heartbeat.stop()
        if self.manager.strategy.mode is not None:
            self.manager.strategy.current().close()


@pytest.fixture
def beating(config: cogworker.Config) -> Iterator[Beating]:
    config.heartbeat_interval = 0.05
    subject = Beating(config)
    try:
        yield subject
    finally:
        subject.close()


@pytest.fixture
def down_server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    """A private server, stopped: its port refuses connections until ``start()``."""
    server = redis_server_factory()
    server.stop()
    return server


# -- what a beat writes --------------------------------------------------------------------------


def test_beat_writes_presence_registries_and_last_beat(
    config: cogworker.Config, r: redis.Redis
) -> None:
    config.queues = ["alpha,2", "beta"]
    config.concurrency = 3
    config.presence_ttl = 9
    subject = Beating(config)
    try:
        before, redis_before = time.time(), redis_time(r)
        assert subject.heartbeat.beat() is True
        redis_after = redis_time(r)
        presence = r.hgetall(keys.process(subject.identity))
        # the Ruby fields plus "beat", the last beat on Redis's clock (an extra field)
        assert set(presence) == {"info", "busy", "quiet", "beat"}
        assert redis_before <= int(presence["beat"]) <= redis_after
        info = json.loads(presence["info"])
        assert info["hostname"] == hostname()
        assert info["pid"] == os.getpid()
        assert info["concurrency"] == 3
        assert info["queues"] == ["alpha", "alpha", "beta"]  # weights as configured
        assert before <= info["started_at"] <= time.time()
        assert isinstance(info["rss_kb"], int) and info["rss_kb"] > 0
        assert presence["busy"] == "0"
        assert presence["quiet"] == "false"
        assert 7 <= r.ttl(keys.process(subject.identity)) <= 9  # presence_ttl, not 60
        assert r.sismember(keys.PROCESSES, subject.identity) == 1
        assert r.smembers(keys.QUEUES) == {"alpha", "beta"}
        for queue in ("alpha", "beta"):
            assert redis_before <= r.zscore(keys.LIVE_QUEUES, queue) <= redis_after
        # stamped on Redis's clock, during the beat
        assert redis_before <= int(r.hget(keys.LAST_BEAT, subject.identity)) <= redis_after
        assert r.sismember(keys.INPROGRESS_IDENTITIES, subject.identity) == 1
        subject.manager.set_quiet(True)
        assert subject.heartbeat.beat() is True
        again = r.hgetall(keys.process(subject.identity))
        assert again["quiet"] == "true"
        assert json.loads(again["info"])["started_at"] == info["started_at"]  # fixed
    finally:
        subject.close()


def test_basic_fetch_beat_does_not_register_an_in_progress_list(
    config: cogworker.Config, r: redis.Redis
) -> None:
    config.fetch = "basic"
    subject = Beating(config)
    try:
        assert subject.heartbeat.beat() is True
        assert r.exists(keys.process(subject.identity)) == 1
        assert r.hexists(keys.LAST_BEAT, subject.identity) is False
        assert r.sismember(keys.INPROGRESS_IDENTITIES, subject.identity) == 0
    finally:
        subject.close()


# -- failed beats ---------------------------------------------------------------------------


def test_a_failed_beat_does_not_end_the_loop(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = private_config(server.url, heartbeat_interval=0.05)
    subject = Beating(cfg)
    presence = keys.process(subject.identity)
    try:
        assert subject.heartbeat.start(abort_if=lambda: False) is True
        wait_for(lambda: admin.exists(presence) == 1)
        server.stop()  # nothing persisted: the presence key is gone after the restart
        wait_for(lambda: subject.heartbeat.beat_failed)
        assert redis_errors.reporter.in_outage("Heartbeat")
        server.start()
        wait_for(lambda: admin.exists(presence) == 1, timeout=15)  # the loop beat again
        wait_for(lambda: not subject.heartbeat.beat_failed)
        assert not redis_errors.reporter.in_outage("Heartbeat")
        assert subject.heartbeat._beat_thread.is_alive()
    finally:
        subject.close()
        release(cfg)
        admin.close()


# -- remote commands ------------------------------------------------------------------------


def test_remote_quiet_and_resume_reach_on_signal(
    beating: Beating, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    assert beating.heartbeat.start(abort_if=lambda: False) is True
    wait_for(lambda: numsub(r, beating.identity) == 1)  # pub/sub does not queue
    channel = keys.signal_channel(beating.identity)
    for message in ("quiet", "bogus", "resume"):
        r.publish(channel, message)
    wait_for(lambda: beating.received == ["quiet", "resume"])
    assert "Unknown signal message: bogus" in caplog.text


def test_signal_published_once_the_subscriber_is_back_is_not_lost(
    beating: Beating, r: redis.Redis
) -> None:
    """The subscriber's connection drops (CLIENT KILL); once Redis again counts a subscriber
    on the channel (PUBSUB NUMSUB == 1) a published command must reach ``on_signal``."""
    assert beating.heartbeat.start(abort_if=lambda: False) is True
    wait_for(lambda: numsub(r, beating.identity) == 1)
    r.client_kill_filter(_type="pubsub")
    wait_for(lambda: redis_errors.reporter.in_outage("Signals"))  # the listener noticed
    wait_for(lambda: numsub(r, beating.identity) == 1)  # subscribed again, says Redis
    r.publish(keys.signal_channel(beating.identity), "quiet")
    wait_for(lambda: beating.received == ["quiet"], timeout=5)


@pytest.fixture
def fast(config: cogworker.Config) -> cogworker.Config:
    config.concurrency = 1
    config.heartbeat_interval = 0.05
    config.poll_interval = 0.05
    config.shutdown_timeout = 1.0
    return config


def fetcher_blocked(r: redis.Redis) -> bool:
    """Some client of this server is blocked in BLMOVE (an idle reliable fetcher)."""
    clients = r.client_list()
    return any(c.get("cmd") == "blmove" and "b" in c.get("flags", "") for c in clients)


def run_in_thread(launcher: Launcher) -> threading.Thread:
    thread = threading.Thread(target=launcher.run, name="launcher-main")
    thread.start()
    return thread


def test_remote_quiet_resume_and_stop_drive_a_running_launcher(
    fast: cogworker.Config, r: redis.Redis
) -> None:
    launcher = Launcher(fast)
    identity = launcher.identity
    channel = keys.signal_channel(identity)
    thread = run_in_thread(launcher)
    try:
        wait_for(launcher.started.is_set)
        wait_for(lambda: numsub(r, identity) == 1)
        wait_for(lambda: fetcher_blocked(r))  # idle: waiting in BLMOVE on the empty queue
        r.publish(channel, "quiet")
        wait_for(lambda: launcher.manager.quiet)
        wait_for(lambda: r.hget(keys.process(identity), "quiet") == "true")
        wait_for(lambda: not fetcher_blocked(r))  # the quiet woke the fetcher
        BeatJob.perform_async("while-quiet")
        wait_for(lambda: r.hget(keys.process(identity), "busy") == "0")
        assert r.llen(keys.queue("default")) == 1  # quiet: nothing new starts
        assert RUNS == []
        r.publish(channel, "resume")
        wait_for(lambda: RUNS == ["while-quiet"])
        assert not launcher.manager.quiet
        wait_for(lambda: r.hget(keys.process(identity), "quiet") == "false")
        r.publish(channel, "stop")
        thread.join(15)
        assert not thread.is_alive()
    finally:
        if thread.is_alive():
            launcher.signals.put("stop")
            thread.join(15)
    assert launcher.stopped.is_set()
    assert r.exists(keys.process(identity)) == 0
    assert r.sismember(keys.PROCESSES, identity) == 0
    assert r.sismember(keys.INPROGRESS_IDENTITIES, identity) == 0
    assert r.hexists(keys.LAST_BEAT, identity) is False


# -- stopping ---------------------------------------------------------------------------------


def test_heartbeat_stop_is_prompt_and_removes_presence(beating: Beating, r: redis.Redis) -> None:
    heartbeat = beating.heartbeat
    assert heartbeat.start(abort_if=lambda: False) is True
    wait_for(lambda: numsub(r, beating.identity) == 1)
    r.hset(keys.workers(beating.identity), "tid", "{}")
    started = time.monotonic()
    heartbeat.stop()
    assert time.monotonic() - started < 5
    assert not heartbeat._listen_thread.is_alive()
    wait_for(lambda: not heartbeat._beat_thread.is_alive(), timeout=5)
    assert r.exists(keys.process(beating.identity), keys.workers(beating.identity)) == 0
    assert r.sismember(keys.PROCESSES, beating.identity) == 0
    assert r.sismember(keys.INPROGRESS_IDENTITIES, beating.identity) == 0
    assert r.hexists(keys.LAST_BEAT, beating.identity) is False
    assert numsub(r, beating.identity) == 0


def test_clean_stop_keeps_the_recovery_stamp_while_jobs_are_listed(
    beating: Beating, r: redis.Redis
) -> None:
    assert beating.heartbeat.beat() is True
    r.rpush(keys.inprogress(beating.identity), '{"jid":"left-behind"}')
    beating.heartbeat.stop()
    assert r.exists(keys.process(beating.identity)) == 0
    assert r.sismember(keys.INPROGRESS_IDENTITIES, beating.identity) == 1
    assert r.hexists(keys.LAST_BEAT, beating.identity) is True


def test_heartbeat_stop_is_prompt_when_redis_is_gone(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    cfg = private_config(server.url, heartbeat_interval=0.05)
    subject = Beating(cfg)
    try:
        assert subject.heartbeat.start(abort_if=lambda: False) is True
        wait_for(subject.heartbeat.subscribed.is_set)
        server.kill()
        started = time.monotonic()
        subject.heartbeat.stop()
        assert time.monotonic() - started < 5
        assert not subject.heartbeat._listen_thread.is_alive()
    finally:
        subject.close()
        release(cfg)


# -- boot while Redis is unreachable -----------------------------------------------------------


def test_first_beat_is_retried_until_redis_answers(down_server: RedisServer) -> None:
    cfg = private_config(down_server.url, heartbeat_interval=0.05)
    subject = Beating(cfg)
    outcome: list[bool] = []
    booting = threading.Thread(
        target=lambda: outcome.append(subject.heartbeat.start(abort_if=lambda: False))
    )
    admin = redis.Redis.from_url(down_server.url, decode_responses=True)
    try:
        booting.start()
        wait_for(lambda: redis_errors.reporter.in_outage("Heartbeat"))
        assert not subject.heartbeat._beat_thread.is_alive()  # nothing started yet
        down_server.start()
        booting.join(15)
        assert outcome == [True]
        assert admin.exists(keys.process(subject.identity)) == 1
        assert subject.heartbeat._beat_thread.is_alive()
        assert subject.heartbeat._listen_thread.is_alive()
    finally:
        booting.join(15)
        subject.close()
        release(cfg)
        admin.close()


def test_abort_if_ends_the_startup_wait(down_server: RedisServer) -> None:
    cfg = private_config(down_server.url)
    subject = Beating(cfg)
    asked: list[int] = []

    def abort_if() -> bool:
        asked.append(1)
        return len(asked) >= 3

    try:
        assert subject.heartbeat.start(abort_if=abort_if) is False
        assert len(asked) == 3  # failed beat, slept, asked again, failed beat again
        assert not subject.heartbeat._beat_thread.is_alive()
        assert not subject.heartbeat._listen_thread.is_alive()
    finally:
        subject.close()
        release(cfg)


def test_launcher_stopped_during_the_startup_wait_starts_nothing(
    down_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cogworker")
    cfg = private_config(down_server.url, concurrency=2)
    launcher = Launcher(cfg)
    launcher.signals.put("quiet")
    launcher.signals.put("stop")
    try:
        started = time.monotonic()
        launcher.run()
        assert time.monotonic() - started < 10
        assert launcher.stopped.is_set() and not launcher.started.is_set()
        assert launcher.manager.quiet  # the quiet signal was applied while waiting
        assert not any(p.thread.is_alive() for p in launcher.manager.processors)
        assert not launcher.manager.fetcher.is_alive()
        assert "Received stop signal before startup completed" in caplog.text
    finally:
        release(cfg)


def test_launcher_boots_once_redis_answers(down_server: RedisServer) -> None:
    cfg = private_config(
        down_server.url,
        concurrency=1,
        heartbeat_interval=0.05,
        poll_interval=0.05,
        shutdown_timeout=1.0,
    )
    launcher = Launcher(cfg)
    thread = run_in_thread(launcher)
    admin = redis.Redis.from_url(down_server.url, decode_responses=True)
    try:
        wait_for(lambda: redis_errors.reporter.in_outage("Heartbeat"))
        assert not launcher.manager.fetcher.is_alive()  # nothing fetches before a beat
        down_server.start()
        wait_for(launcher.started.is_set, timeout=15)
        assert admin.exists(keys.process(launcher.identity)) == 1
        cogworker.Client(cfg).enqueue(BeatJob, "booted")
        wait_for(lambda: RUNS == ["booted"])
    finally:
        launcher.signals.put("stop")
        thread.join(15)
        release(cfg)
    assert not thread.is_alive()
    assert admin.exists(keys.process(launcher.identity)) == 0
    admin.close()
