"""Reliable fetch's idle back-off: a worker reading several empty queues polls less and less
often, up to ``fetch_idle_max_interval``, and starts over after a job.

It is observed through Redis itself: MONITOR on a private server reports every command with
the server's own timestamp, so the test sees when each fetch happened.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator

import pytest
from conftest import wait_for
from monitor_support import Monitor
from runtime_support import (
    fresh_runtime,
    private_config,
    release,
    running,
)

import cogworker
from cogworker import keys
from cogworker.fetch.reliable import EMPTY_POLL_INTERVAL, FETCH_BATCH, ReliableFetch
from cogworker.local.server import RedisServer
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager

ServerFactory = Callable[..., RedisServer]

RUNS: list[str] = []

# Slack for thread wake-ups and round trips between two fetches on a shared, loaded machine.
# It stays below what tells the levels apart: a pause that started one level too high is at
# least 0.75 x 0.5 s longer than the 0.25 s level.
SCHEDULING_NOISE = 0.45
CLOCK_RESOLUTION = 0.01


class IdleJob(cogworker.Job):
    name = "FMFetch::Idle"

    def perform(self, token: str) -> None:
        RUNS.append(token)


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS)


def assert_pause(gap: float, level: float) -> None:
    """A pause of the ``level`` back-off step: jittered to 75-100 % of it, plus noise."""
    assert 0.75 * level - CLOCK_RESOLUTION <= gap <= level + SCHEDULING_NOISE, (gap, level)


# -- the idle back-off of a multi-queue worker -----------------------------------------------------


def test_idle_multi_queue_fetch_backs_off_to_the_cap_and_starts_over_after_a_job(
    redis_server_factory: ServerFactory,
) -> None:
    """Empty polls of several queues wait 0.25 s, then twice as long each time up to
    ``fetch_idle_max_interval`` (each pause jittered to 75-100 %); a job taken starts the
    series over. Seen as the server's timestamps of the fetch script's calls."""
    server = redis_server_factory()
    cap = 2.0
    cfg = private_config(
        server.url,
        queues=["alpha", "beta"],
        concurrency=1,
        fetch_idle_max_interval=cap,
        shutdown_timeout=1.0,
    )
    levels = [EMPTY_POLL_INTERVAL]
    while levels[-1] < cap:
        levels.append(min(levels[-1] * 2, cap))
    levels.append(cap)  # 0.25, 0.5, 1, 2, 2: the cap holds
    manager = Manager(cfg, new_identity())
    try:
        with Monitor(server.url) as monitor, running(manager, stop_timeout=2.0):
            fetches = lambda: monitor.calls_of(FETCH_BATCH.sha)  # noqa: E731
            wait_for(lambda: len(fetches()) >= len(levels) + 1, timeout=30, interval=0.1)
            job = {"class": IdleJob.name, "args": ["wakes"], "queue": "beta"}
            cogworker.Client(cfg).push(job)
            wait_for(lambda: RUNS == ["wakes"], timeout=10, interval=0.1)
            before_job = len(fetches())  # the next fetch, or this one, took the job
            wait_for(lambda: len(fetches()) >= before_job + 4, timeout=30, interval=0.1)
    finally:
        release(cfg)
    pushed_at = next(c.at for c in monitor.commands() if c.words[0] == "LPUSH")
    times = monitor.calls_of(FETCH_BATCH.sha)
    idle = [at for at in times if at < pushed_at]
    took_job = next(at for at in times if at > pushed_at)
    after = [at for at in times if at > took_job]
    gaps = [later - earlier for earlier, later in itertools.pairwise(idle)]
    assert len(gaps) >= len(levels)
    for gap, level in zip(gaps, levels + [cap] * len(gaps), strict=False):
        assert_pause(gap, level)
    # the poll that found the job had waited out a pause of the series too
    assert_pause(took_job - idle[-1], levels[min(len(gaps), len(levels) - 1)])
    # after[0] is the first poll once the job was done (no pause before it); from there the
    # series starts over at 0.25 s: without the reset the pause would be >= 0.75 x the cap
    assert_pause(after[1] - after[0], levels[0])
    assert_pause(after[2] - after[1], levels[1])
    assert RUNS == ["wakes"]


# -- the idle fetch of a single queue ------------------------------------------------------------


def test_a_timed_out_blmove_is_followed_by_another_without_the_batch_script(
    redis_server_factory: ServerFactory,
) -> None:
    """A BLMOVE that timed out proves its queue stayed empty: the next fetch blocks again at
    once (an idle worker sends one command per block). A job pushed meanwhile is still taken,
    and once one is, the batch script takes the rest."""
    server = redis_server_factory()
    cfg = private_config(server.url)
    fetch = ReliableFetch(cfg, new_identity(), threading.Event(), block_seconds=0.2)
    client = cfg.redis()
    try:
        with Monitor(server.url) as monitor:
            assert fetch.retrieve(5) == []  # the script found nothing, then BLMOVE timed out
            assert fetch.retrieve(5) == []  # BLMOVE alone
            client.lpush(keys.queue("default"), "first")
            assert [w.raw for w in fetch.retrieve(5)] == ["first"]  # BLMOVE took it
            client.lpush(keys.queue("default"), "second", "third")
            assert [w.raw for w in fetch.retrieve(5)] == ["second", "third"]  # the script
    finally:
        fetch.close()
        release(cfg)
    sent = [c.words[0] for c in monitor.commands() if c.words[0] in ("EVALSHA", "BLMOVE")]
    assert sent == ["EVALSHA", "BLMOVE", "BLMOVE", "BLMOVE", "EVALSHA"]


def test_a_woken_blmove_is_followed_by_the_batch_script(
    redis_server_factory: ServerFactory,
) -> None:
    """A wake (stop, quiet, a thread gone idle) may mean more is wanted than BLMOVE takes:
    the next fetch runs the batch script first again."""
    server = redis_server_factory()
    cfg = private_config(server.url)
    fetch = ReliableFetch(cfg, new_identity(), threading.Event(), block_seconds=30)
    try:
        with Monitor(server.url) as monitor:
            caller = threading.Thread(target=fetch.retrieve, args=(5,))
            caller.start()
            wait_for(lambda: any(c.words[0] == "BLMOVE" for c in monitor.commands()))
            fetch.wake()
            caller.join(10)
            assert not caller.is_alive()
            cfg.redis().lpush(keys.queue("default"), "first", "second")
            assert [w.raw for w in fetch.retrieve(5)] == ["first", "second"]
    finally:
        fetch.close()
        release(cfg)
    sent = [c.words[0] for c in monitor.commands() if c.words[0] in ("EVALSHA", "BLMOVE")]
    assert sent == ["EVALSHA", "BLMOVE", "EVALSHA"]
