"""Handing back at shutdown the jobs this process still holds, each onto its queue.

With reliable fetch the in-progress list is requeued in one script, except the jobs already
finished (dropped) and the failures parked for another process (kept); with basic fetch the
jobs are only known from the workers hash, and requeued from there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import redis

from cogworker import keys, scripts, wire
from cogworker.config import Config
from cogworker.periodic.running_lock import queued_ttl, requeued_lock
from cogworker.worker.recovery.burials import bury_unnamed_requeues
from cogworker.worker.recovery.requeue import requeue_list

logger = logging.getLogger("cogworker")

REQUEUE_ENTRY = scripts.load(__file__, "requeue_entry")
_UNUSABLE_ENTRY = (
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    RecursionError,
    redis.ResponseError,
)


class HandBackFailed(Exception):
    """A Redis error stopped the hand-back's requeue. ``requeued``: the jids requeued before
    it, by commands whose replies came back. Whether the failing command ran is the error's
    to say (``connection.not_sent``)."""

    def __init__(self, error: redis.RedisError, requeued: frozenset[str] = frozenset()) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error
        self.requeued = requeued


def hand_back_list(
    config: Config,
    client: redis.Redis,
    identity: str,
    *,
    finished: Sequence[str] = (),
    keep: Sequence[str] = (),
) -> int:
    """Requeue ``identity``'s in-progress list but for ``finished`` raws (dropped) and
    ``keep`` raws (left listed); how many jobs went back."""
    try:
        done = requeue_list(config, client, identity, finished=finished, keep=keep)
    except redis.RedisError as error:
        raise HandBackFailed(error) from error  # one script: nothing went back before it
    bury_unnamed_requeues(client, done.unnamed)
    return done.moved


def hand_back_registered(config: Config, client: redis.Redis, identity: str) -> int:
    """Requeue the jobs registered in ``identity``'s workers hash (basic fetch keeps them
    nowhere else); how many went back."""
    requeued: list[str] = []
    try:
        for entry in client.hvals(keys.workers(identity)):
            jid = _requeue_entry(config, client, str(entry))
            if jid is not None:
                requeued.append(jid)
    except (redis.ConnectionError, redis.TimeoutError) as error:
        raise HandBackFailed(error, frozenset(requeued)) from error
    return len(requeued)


def _requeue_entry(config: Config, client: redis.Redis, entry: str) -> str | None:
    """Requeue one workers-hash entry; its jid, or None if the entry is unusable (logged)."""
    try:
        record = json.loads(entry)
        queue_key, job = keys.queue(str(record["queue"])), record["payload"]
        lock = requeued_lock(job)
        jid = str(job.get("jid", ""))
        REQUEUE_ENTRY(
            client,
            [queue_key, lock or queue_key],
            [wire.dumps(job), "1" if lock else "0", jid, queued_ttl(config)],
        )
        return jid
    except _UNUSABLE_ENTRY as error:
        logger.error(
            "couldn't requeue in-flight entry %s (lost: basic fetch keeps it nowhere else): %s",
            entry[:200],
            error,
        )
        return None
