"""Reliable fetch: jobs move atomically onto this process's in-progress list (LMOVE/BLMOVE).

One call moves as many jobs as there are idle processor threads (``fetch_batch.lua``). When
every queue is empty it blocks server-side with BLMOVE if it reads a single queue, else it
polls with a backoff of 0.25 s doubling up to ``fetch_idle_max_interval``. A BLMOVE that timed
out proves its queue stayed empty, so the next call blocks again at once, without the batch
script first (an idle worker's fetch is one command per block). A job stays on the list until
it is acknowledged, filed elsewhere in its place, or given back to its queue.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis

from cogworker import keys, redis_errors, scripts, wire
from cogworker.config import Config
from cogworker.failure import Rejection
from cogworker.fetch import Connect, FetchMode, Filing, Turn, Turned, UnsupportedError, Work
from cogworker.fetch.blocking import BlockingConnection
from cogworker.fetch.queues import NO_QUEUE_SLEEP, PausedQueues, weighted_order
from cogworker.periodic.running_lock import queued_ttl, requeued_lock
from cogworker.scripts import Batch
from cogworker.wire import Payload

logger = logging.getLogger("cogworker")

MIN_REDIS_VERSION = (6, 2)
EMPTY_POLL_INTERVAL = 0.25
BLOCK_SECONDS = 5.0
DEFAULT_QUEUE = "default"  # where a payload in which no queue can be read is handed back

FETCH_BATCH = scripts.load(__file__, "fetch_batch")
ACK = scripts.load(__file__, "ack")
GIVE_BACK = scripts.load(__file__, "give_back")
FILE_INSTEAD = scripts.load(__file__, "file_instead")
TURNOVER = scripts.load(__file__, "turnover")


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


class ReliableFetch:
    mode: FetchMode = "reliable"
    keeps_in_progress = True
    takes_in_turnover = True

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
        self._found_empty: str | None = None  # the queue a BLMOVE just timed out on
        self._workers_key = keys.workers(identity)
        self._openings: dict[str, str] = {}  # queue name -> its workers-entry opening

    # -- taking jobs ------------------------------------------------------------------------

    def queue_order(self) -> list[str]:
        """The queues to take from now, in the order to try: paused ones left out, the rest
        shuffled by weight (the processor threads' turnover takes in the same order)."""
        return weighted_order(self.config.queues, self._paused.get())

    def retrieve(self, wanted: int, *, wait: bool = True) -> list[Work]:
        order = self.queue_order()
        if not order:
            if wait:
                self._pause(NO_QUEUE_SLEEP)
            return []
        try:
            blocked_again = wait and order == [self._found_empty]
            works = [] if blocked_again else self._take(order, wanted)
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
        return [
            Work.taken(keys.queue_name(reply[i]), reply[i + 1]) for i in range(0, len(reply), 2)
        ]

    def _block_on(self, queue: str) -> list[Work]:
        self._found_empty = None
        if self._stopping.is_set():
            return []
        raw = self._blocking.call(
            "BLMOVE", keys.queue(queue), self.inprogress, "RIGHT", "LEFT", self._block_seconds
        )
        if raw is None:
            self._found_empty = None if self._blocking.woken else queue
            return []
        return [Work.taken(queue, raw)]

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

    def settle_and_take(self, connect: Connect, turn: Turn) -> Turned | None:
        """One call of ``turnover.lua``: the ack of ``turn.done`` (``LREM``, its orphan
        counter deleted), the counts, then the ``LMOVE`` of the next job onto the in-progress
        list with its workers-hash entry (``HDEL`` of the entry when none waits)."""
        order = self.queue_order() if turn.take_next else []  # may read the paused queues
        done = turn.done
        now = int(time.time())
        script_keys = [
            self.inprogress,
            keys.orphanings(done.jid) if done is not None else self.inprogress,
            self._workers_key,
            keys.STATS_PROCESSED,
            keys.STATS_FAILED,
            keys.throughput(now // 3600),
            *map(keys.queue, order),
        ]
        args = [
            done.raw if done is not None else "",
            turn.tid,
            turn.processed,
            turn.failed,
            keys.THROUGHPUT_TTL,
            now,
            *map(self._opening, order),
        ]
        reply: list[Any] = TURNOVER.call_on(connect(), script_keys, args)
        failures = reply[1]
        pairs = [(str(failures[at]), str(failures[at + 1])) for at in range(0, len(failures), 2)]
        if len(reply) < 4:
            return Turned(None, pairs)
        return Turned(Work.taken(keys.queue_name(reply[2]), reply[3]), pairs)

    def _opening(self, queue: str) -> str:
        opening = self._openings.get(queue)
        if opening is None:
            opening = self._openings[queue] = wire.workers_entry_opening(queue)
        return opening

    # -- giving jobs up ---------------------------------------------------------------------

    def acknowledge(self, works: Sequence[Work]) -> list[bool]:
        removed = ACK(self._client, *self._ack_call(works))
        return [bool(flag) for flag in removed]

    def queue_acknowledge(self, batch: Batch, works: Sequence[Work]) -> int | None:
        return batch.script(ACK, *self._ack_call(works)) if works else None

    def _ack_call(self, works: Sequence[Work]) -> tuple[list[str], list[str]]:
        counters = [keys.orphanings(work.jid) for work in works]
        return [self.inprogress, *counters], [work.raw for work in works]

    def give_back(self, work: Work) -> None:
        job = work.job if not isinstance(work.job, Rejection) else _as_scripts_read(work.raw)
        queue_key = keys.queue(str(job["queue"]))
        lock = requeued_lock(job)
        GIVE_BACK(
            self._client,
            [self.inprogress, queue_key, lock or queue_key],
            [work.raw, "1" if lock else "0", work.jid, queued_ttl(self.config)],
        )

    def file_instead(self, work: Work, filing: Filing) -> bool:
        script_keys = [self.inprogress, filing.target, keys.orphanings(work.jid)]
        args = [work.raw, filing.score, filing.payload]
        return bool(FILE_INSTEAD(self._client, script_keys, args))

    def close(self) -> None:
        self._blocking.close()


def file_instead_on(client: redis.Redis, list_key: str, raw: str, filing: Filing) -> bool:
    """``file_instead`` for a payload held on another list than an in-progress one (a queue a
    requeue sent it to): ``filing`` written in its place, by its exact entry; False if it was
    no longer there."""
    script_keys = [list_key, filing.target, keys.orphanings(wire.jid_of(raw))]
    return bool(FILE_INSTEAD(client, script_keys, [raw, filing.score, filing.payload]))


def _as_scripts_read(raw: str) -> Payload:
    """A payload that is not a job, as the requeue script reads it: its queue when one can be
    read in it, else the default queue (where the worker reading it files it into dead)."""
    job = wire.read_leniently(raw) or {}
    queue = job.get("queue")
    return {**job, "queue": queue if isinstance(queue, str) and queue else DEFAULT_QUEUE}
