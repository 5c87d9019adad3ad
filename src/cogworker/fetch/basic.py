"""Basic fetch: BRPOP, for Redis servers without LMOVE (< 6.2).

A job is in memory only while it runs, tracked in the workers hash; a clean shutdown requeues
those entries, but a job whose process is killed mid-job is lost. With no in-progress entry to
guard a filing into retry or dead, a short-lived marker per fetched attempt keeps a filing sent
again (its reply was lost) from writing a second record.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Sequence

from cogworker import keys, scripts
from cogworker.config import Config
from cogworker.failure import Rejection
from cogworker.fetch import Connect, FetchMode, Filing, Turn, Turned, Work
from cogworker.fetch.blocking import BlockingConnection
from cogworker.fetch.queues import NO_QUEUE_SLEEP, PausedQueues
from cogworker.scripts import Batch

TIMEOUT = 2.0
# how long a filed attempt is remembered: far longer than a process keeps retrying a filing
FILED_MARKER_TTL = 86_400

FILE_ONCE = scripts.load(__file__, "file_once")


class BasicFetch:
    mode: FetchMode = "basic"
    keeps_in_progress = False  # BRPOP: a job popped is only in this process's memory
    takes_in_turnover = False

    def __init__(self, config: Config, identity: str, stopping: threading.Event) -> None:
        self.config = config
        self.identity = identity
        self._client = config.redis()
        self._stopping = stopping
        self._paused = PausedQueues(self._client)
        self._blocking = BlockingConnection(config, TIMEOUT)
        self._wakeup = threading.Event()

    def retrieve(self, wanted: int, *, wait: bool = True) -> list[Work]:
        """At most one job (BRPOP pops one)."""
        paused = self._paused.get()
        active = [keys.queue(name) for name in self.config.queues if name not in paused]
        if not active:
            if wait:
                self._wakeup.wait(NO_QUEUE_SLEEP)
                self._wakeup.clear()
            return []
        if self._stopping.is_set() or wanted < 1:
            return []
        random.shuffle(active)  # repeats kept: they are the weights
        if not wait:
            return self._pop_any(active)
        reply = self._blocking.call("BRPOP", *active, TIMEOUT)
        if not reply:
            return []
        key, raw = reply
        return [Work.taken(keys.queue_name(key), raw)]

    def _pop_any(self, active: list[str]) -> list[Work]:
        for key in dict.fromkeys(active):
            raw = self._client.rpop(key)
            if raw is not None:
                return [Work.taken(keys.queue_name(key), str(raw))]
        return []

    def wake(self) -> None:
        self._wakeup.set()
        self._blocking.wake(self._client)

    def settle_and_take(self, connect: Connect, turn: Turn) -> Turned | None:
        return None  # BRPOP can't take inside a script: the fetcher feeds every thread

    def acknowledge(self, works: Sequence[Work]) -> list[bool]:
        return [True for _ in works]  # BRPOP already removed them

    def queue_acknowledge(self, batch: Batch, works: Sequence[Work]) -> int | None:
        return None  # nothing to send: BRPOP already removed them

    def give_back(self, work: Work) -> None:
        self._client.rpush(keys.queue(work.queue), work.raw)

    def file_instead(self, work: Work, filing: Filing) -> bool:
        if isinstance(work.job, Rejection):
            # not a job: two identical payloads can't be told apart, so no marker (a lost
            # reply may leave a second dead wrapper, never drop a payload pushed twice)
            self._client.zadd(filing.target, {filing.payload: filing.score})
            return True
        digest = hashlib.sha1(work.raw.encode("utf-8", "surrogateescape")).hexdigest()
        marker = keys.filed_attempt(work.jid, digest)
        args = [FILED_MARKER_TTL, filing.score, filing.payload]
        return bool(FILE_ONCE(self._client, [marker, filing.target], args))

    def close(self) -> None:
        self._blocking.close()
