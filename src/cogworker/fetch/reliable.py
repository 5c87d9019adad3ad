"""Reliable fetch: jobs move atomically onto this process's in-progress list (LMOVE/BLMOVE).

One call moves as many jobs as there are idle processor threads (``fetch_batch.lua``). When
every queue is empty it blocks server-side with BLMOVE if it reads a single queue, else it
polls with a backoff of 0.25 s doubling up to ``fetch_idle_max_interval``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Sequence

import redis

from cogworker import keys, redis_errors, scripts
from cogworker.config import Config
from cogworker.fetch import (
    NO_QUEUE_SLEEP,
    BlockingConnection,
    PausedQueues,
    UnsupportedError,
    Work,
    requeue_args,
    weighted_order,
)

logger = logging.getLogger("cogworker")

MIN_REDIS_VERSION = (6, 2)
EMPTY_POLL_INTERVAL = 0.25
BLOCK_SECONDS = 5.0
ORPHANINGS_TTL = 7 * 86400

FETCH_BATCH = scripts.load(__file__, "fetch_batch")
ACK = scripts.load(__file__, "ack")
REQUEUE_ONE = scripts.load(__file__, "requeue_one")
REQUEUE_LIST = scripts.load(__file__, "requeue_list")
INTERRUPT = scripts.load(__file__, "interrupt")
RETAKE = scripts.load(__file__, "retake")


def supported(client: redis.Redis) -> bool:
    """True if this Redis has LMOVE/BLMOVE (>= 6.2).

    A connection error propagates (decide again later); any other error assumes support and
    leaves it to the first "unknown command" to prove otherwise.
    """
    try:
        version = str(client.info("server").get("redis_version", "0"))
    except (redis.ConnectionError, redis.TimeoutError):
        raise
    except redis.RedisError:
        return True
    parts = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    return parts >= MIN_REDIS_VERSION


def jid_of(raw: str) -> str:
    """The jid in a raw payload, for keys and log lines; ``?`` if unreadable.

    Lenient on purpose: a payload holding invalid bytes still yields the jid the scripts see
    in it (they read it with cjson), so both name the same orphan counter.
    """
    try:
        job = json.loads(raw)
    except (ValueError, RecursionError):
        return "?"
    jid = job.get("jid") if isinstance(job, dict) else None
    return jid if isinstance(jid, str) else "?"


def orphan_counter(work: Work) -> str:
    """The key counting how often ``work``'s job was recovered from a dead process."""
    return keys.orphanings(work.jid if work.jid is not None else jid_of(work.raw))


class ReliableFetch:
    mode = "reliable"

    def __init__(
        self,
        config: Config,
        identity: str,
        stopping: threading.Event,
        *,
        block_seconds: float = BLOCK_SECONDS,
    ) -> None:
        self.config = config
        self.identity = identity
        self.inprogress = keys.inprogress(identity)
        self._client = config.redis()
        self._stopping = stopping
        self._paused = PausedQueues(self._client)
        self._block_seconds = block_seconds
        self._blocking = BlockingConnection(config, block_seconds)
        self._idle_interval = 0.0
        self._wakeup = threading.Event()

    # -- taking jobs ------------------------------------------------------------------------

    def retrieve(self, wanted: int, *, wait: bool = True) -> list[Work]:
        """Up to ``wanted`` jobs; with ``wait`` False, never blocks or pauses when none."""
        order = weighted_order(self.config.queues, self._paused.get())
        if not order:
            if wait:
                self._pause(NO_QUEUE_SLEEP)
            return []
        try:
            works = self._take(order, wanted)
            if not works and wait and len(order) == 1:
                works = self._block_on(order[0])
        except redis.ResponseError as error:
            if redis_errors.is_unknown_command(error):
                raise UnsupportedError(str(error)) from error
            raise
        if works:
            self._idle_interval = 0.0
        elif wait and len(order) > 1:
            self._idle_pause()
        return works

    def _take(self, order: list[str], wanted: int) -> list[Work]:
        reply = FETCH_BATCH(self._client, [*map(keys.queue, order), self.inprogress], [wanted])
        return [Work(keys.queue_name(reply[i]), reply[i + 1]) for i in range(0, len(reply), 2)]

    def _block_on(self, queue: str) -> list[Work]:
        if self._stopping.is_set():
            return []
        raw = self._blocking.call(
            "BLMOVE", keys.queue(queue), self.inprogress, "RIGHT", "LEFT", self._block_seconds
        )
        return [Work(queue, raw)] if raw is not None else []

    def _idle_pause(self) -> None:
        cap = self.config.fetch_idle_max_interval
        self._idle_interval = min(
            EMPTY_POLL_INTERVAL if not self._idle_interval else self._idle_interval * 2, cap
        )
        self._pause(self._idle_interval * random.uniform(0.75, 1.0))

    def _pause(self, seconds: float) -> None:
        self._wakeup.wait(seconds)
        self._wakeup.clear()

    def wake(self) -> None:
        self._wakeup.set()
        self._blocking.wake(self._client)

    # -- settling ---------------------------------------------------------------------------

    def acknowledge(self, works: Sequence[Work]) -> list[bool]:
        counters = [orphan_counter(work) for work in works]
        removed = ACK(self._client, [self.inprogress, *counters], [work.raw for work in works])
        return [bool(flag) for flag in removed]

    def give_back(self, work: Work) -> None:
        REQUEUE_ONE(self._client, [self.inprogress], [work.raw, *requeue_args(self.config)])

    def interrupt(self, work: Work, target: str, score: float, payload: str) -> bool:
        keys_ = [self.inprogress, target, orphan_counter(work)]
        return bool(INTERRUPT(self._client, keys_, [work.raw, score, payload]))

    def requeue_in_progress(
        self,
        identity: str,
        *,
        if_dead_for: float | None = None,
        finished: Sequence[str] = (),
        keep: Sequence[str] = (),
    ) -> int:
        """Requeue ``identity``'s in-progress list; -1 if that process turned out alive.

        ``if_dead_for`` (orphan recovery) requeues only when the owner's presence key is gone
        and its last beat is older than that many seconds; None requeues unconditionally
        (own shutdown, where ``finished`` jobs are dropped and ``keep`` jobs stay listed).
        """
        return requeue_list(
            self.config,
            self._client,
            identity,
            if_dead_for=if_dead_for,
            finished=finished,
            keep=keep,
        )

    def close(self) -> None:
        self._blocking.close()


def requeue_list(
    config: Config,
    client: redis.Redis,
    identity: str,
    *,
    if_dead_for: float | None = None,
    finished: Sequence[str] = (),
    keep: Sequence[str] = (),
) -> int:
    """Run ``requeue_list.lua`` for ``identity``; see ``ReliableFetch.requeue_in_progress``."""
    script_keys = [
        keys.inprogress(identity),
        keys.process(identity),
        keys.LAST_BEAT,
        keys.REPEAT_ORPHANS,
        keys.DEAD,
        keys.QUEUES,
        keys.LIVE_QUEUES,
    ]
    marks = [f"d:{raw}" for raw in finished] + [f"k:{raw}" for raw in keep]
    args = [
        *requeue_args(config),
        identity,
        "" if if_dead_for is None else int(if_dead_for),
        int(time.time()),
        keys.ORPHANINGS_PREFIX,
        ORPHANINGS_TTL,
        config.max_orphanings,
        *marks,
    ]
    reply = REQUEUE_LIST(client, script_keys, args)
    moved, failed, n_unlisted, n_buried = (int(count) for count in reply[:4])
    if moved == -1:
        return -1
    unlisted = reply[4 : 4 + n_unlisted]
    buried = reply[4 + n_unlisted : 4 + n_unlisted + n_buried]
    unnamed = reply[4 + n_unlisted + n_buried :]
    if unlisted:
        logger.warning(
            "requeued jobs of %s onto queue(s) no live process reads: %s — make sure some "
            "worker reads them",
            identity,
            ", ".join(unlisted),
        )
    if failed:
        logger.error(
            "%d job(s) left in progress by %s couldn't be put back; they stay listed and are "
            "retried on the next check",
            failed,
            identity,
        )
    if buried or unnamed:
        from cogworker.worker import recovery

        recovery.remember_raw_burials(list(buried))
        recovery.bury_unnamed_requeues(client, list(unnamed))
    return moved
