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
    done = requeue_list(config, client, identity, finished=finished, keep=keep)
    bury_unnamed_requeues(client, done.unnamed)
    return done.moved


def hand_back_registered(config: Config, client: redis.Redis, identity: str) -> int:
    """Requeue the jobs registered in ``identity``'s workers hash (basic fetch keeps them
    nowhere else); how many went back."""
    count = 0
    for entry in client.hvals(keys.workers(identity)):
        try:
            record = json.loads(entry)
            queue_key, job = keys.queue(str(record["queue"])), record["payload"]
            lock = requeued_lock(job)
            REQUEUE_ENTRY(
                client,
                [queue_key, lock or queue_key],
                [
                    wire.dumps(job),
                    "1" if lock else "0",
                    str(job.get("jid", "")),
                    queued_ttl(config),
                ],
            )
            count += 1
        except _UNUSABLE_ENTRY as error:
            logger.error(
                "couldn't requeue in-flight entry %s (lost: basic fetch keeps it nowhere else): %s",
                entry[:200],
                error,
            )
    return count
