"""Basic fetch: BRPOP, for Redis servers without LMOVE (< 6.2).

A job is in memory only while it runs, tracked in the workers hash; a clean shutdown requeues
those entries, but a job whose process is killed mid-job is lost.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Sequence

import redis

from cogworker import keys, scripts, wire
from cogworker.config import Config
from cogworker.fetch import (
    NO_QUEUE_SLEEP,
    BlockingConnection,
    PausedQueues,
    Work,
    queued_ttl,
)

logger = logging.getLogger("cogworker")

TIMEOUT = 2.0
REQUEUE_ENTRY = scripts.load(__file__, "requeue_entry")


class BasicFetch:
    mode = "basic"

    def __init__(self, config: Config, identity: str, stopping: threading.Event) -> None:
        self.config = config
        self.identity = identity
        self._client = config.redis()
        self._stopping = stopping
        self._paused = PausedQueues(self._client)
        self._blocking = BlockingConnection(config, TIMEOUT)
        self._wakeup = threading.Event()

    def retrieve(self, wanted: int) -> list[Work]:
        paused = self._paused.get()
        active = [keys.queue(name) for name in self.config.queues if name not in paused]
        if not active:
            self._wakeup.wait(NO_QUEUE_SLEEP)
            self._wakeup.clear()
            return []
        if self._stopping.is_set():
            return []
        random.shuffle(active)  # repeats kept: they are the weights
        reply = self._blocking.call("BRPOP", *active, TIMEOUT)
        if not reply:
            return []
        key, raw = reply
        return [Work(keys.queue_name(key), raw)]

    def wake(self) -> None:
        self._wakeup.set()
        self._blocking.wake(self._client)

    def acknowledge(self, works: Sequence[Work]) -> list[bool]:
        return [True for _ in works]  # BRPOP already removed them

    def give_back(self, work: Work) -> None:
        self._client.rpush(keys.queue(work.queue), work.raw)

    def interrupt(self, work: Work, target: str, score: float, payload: str) -> bool:
        self._client.zadd(target, {payload: score})
        return True

    def requeue_in_progress(
        self, identity: str, *, finished: Sequence[str] = (), keep: Sequence[str] = ()
    ) -> int:
        """Requeue the jobs registered in ``identity``'s workers hash (shutdown)."""
        count = 0
        for entry in self._client.hvals(keys.workers(identity)):
            try:
                record = json.loads(entry)
                queue, job = str(record["queue"]), record["payload"]
                retake = bool(
                    job.get("periodic_until_executed")
                    and job.get("periodic_pjid")
                    and job.get("jid")
                )
                lock = keys.periodic_running(job["periodic_pjid"]) if retake else keys.queue(queue)
                REQUEUE_ENTRY(
                    self._client,
                    [keys.queue(queue), lock],
                    [
                        wire.dumps(job),
                        "1" if retake else "0",
                        str(job.get("jid", "")),
                        queued_ttl(self.config),
                    ],
                )
                count += 1
            except (
                ValueError,
                KeyError,
                TypeError,
                AttributeError,
                RecursionError,
                redis.ResponseError,
            ) as error:
                logger.error(
                    "couldn't requeue in-flight entry %s (lost: basic fetch keeps it nowhere "
                    "else): %s",
                    entry[:200],
                    error,
                )
        return count

    def close(self) -> None:
        self._blocking.close()
