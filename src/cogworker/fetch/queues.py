"""Which queues a fetch reads, and in what order: paused ones left out, the rest by weight."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

import redis

from cogworker import keys

PAUSED_CACHE_SECONDS = 5.0
NO_QUEUE_SLEEP = 2.0  # how long a fetch waits when every queue it reads is paused


class PausedQueues:
    """The names in ``cogworker:paused_queues``, re-read at most every 5 s (idle load)."""

    def __init__(self, client: redis.Redis, ttl: float = PAUSED_CACHE_SECONDS) -> None:
        self._client = client
        self._ttl = ttl
        self._names: set[str] = set()
        self._read_at = -ttl

    def get(self) -> set[str]:
        now = time.monotonic()
        if now - self._read_at >= self._ttl:
            self._names = {str(name) for name in self._client.smembers(keys.PAUSED_QUEUES)}
            self._read_at = now
        return self._names


def weighted_order(queues: Sequence[str], paused: set[str]) -> list[str]:
    """Active queue names, shuffled by weight then de-duplicated (first occurrence kept)."""
    active = [name for name in queues if name not in paused]
    random.shuffle(active)
    return list(dict.fromkeys(active))
