"""The fetcher's hand-out: the thread it wakes gets a head start, never a hold on it."""

from __future__ import annotations

import queue

import redis

import cogworker
from cogworker import keys
from cogworker.fetch import Work
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager


def test_a_thread_that_never_says_it_runs_does_not_hold_the_fetcher(
    config: cogworker.Config, r: redis.Redis
) -> None:
    """After a hand-out the fetcher waits for the woken thread to report running, but only
    briefly: a thread that never does (it died, or is slow to wake) must not keep the next
    idle thread from its job."""
    config.queues = ["default"]  # one queue: the idle fetcher blocks in BLMOVE
    config.concurrency = 2
    manager = Manager(config, new_identity())
    silent: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
    waiting: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
    client = cogworker.Client(config)
    manager.fetcher.start()
    try:
        manager.fetcher.ready("silent", silent)
        client.push({"class": "Any", "args": ["first"]})
        first = silent.get(timeout=10)  # and no running() follows
        manager.fetcher.ready("waiting", waiting)
        client.push({"class": "Any", "args": ["second"]})
        second = waiting.get(timeout=10)
    finally:
        manager.stopping.set()
        manager.fetcher.stop()
        manager.strategy.close()
    assert first is not None and second is not None
    assert isinstance(first.job, dict) and isinstance(second.job, dict)
    assert [first.job["args"], second.job["args"]] == [["first"], ["second"]]
    # both were moved onto the worker's in-progress list, where recovery finds them
    assert r.llen(keys.inprogress(manager.identity)) == 2
