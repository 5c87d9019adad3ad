"""Requeueing a whole in-progress list in one script (``requeue_list.lua``): a dead
process's (orphan recovery: the liveness verdict is taken in the same step), a swarm child's
that its supervisor reaped, or this process's own at shutdown. It only moves payloads and
says what it did; what to do with the payloads it could not requeue is the caller's."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from cogworker import keys, scripts
from cogworker.config import Config
from cogworker.periodic.running_lock import queued_ttl

logger = logging.getLogger("cogworker")

REQUEUE_LIST = scripts.load(__file__, "requeue_list")
ORPHANINGS_TTL = 7 * 86400
DEFAULT_QUEUE = "default"  # where a requeue sends a payload in which no queue can be read


@dataclass(frozen=True)
class Requeued:
    """What one requeue did; ``moved`` is -1 when the owner turned out alive (nothing
    touched)."""

    moved: int
    failed: int = 0
    parked: int = 0  # of ``moved``: recovered too often, parked to be filed into dead
    unlisted: tuple[str, ...] = ()  # queues no live process reads
    buried: tuple[str, ...] = ()  # raws put straight into dead: parking them failed
    unnamed: tuple[str, ...] = ()  # raws sent to the default queue: no queue could be read


def requeue_list(
    config: Config,
    client: redis.Redis,
    identity: str,
    *,
    if_dead_for: float | None = None,
    reaped: bool = False,
    finished: Sequence[str] = (),
    keep: Sequence[str] = (),
) -> Requeued:
    """Requeue ``identity``'s in-progress list.

    ``if_dead_for`` (orphan recovery) requeues only when the owner's presence key is gone and
    its last beat is older than that many seconds, counting each job's recoveries (a job
    recovered more than ``max_orphanings`` times is parked on ``cogworker:repeat_orphans``);
    ``reaped`` (a swarm child its supervisor saw exit) skips the verdict, counts the
    recoveries the same way and removes the owner's presence; otherwise the list is requeued
    unconditionally (own shutdown, where ``finished`` jobs are dropped and ``keep`` jobs stay
    listed).
    """
    if reaped and if_dead_for is not None:
        raise ValueError("a reaped process needs no liveness verdict: pass one of the two")
    script_keys = [
        keys.inprogress(identity),
        keys.process(identity),
        keys.LAST_BEAT,
        keys.REPEAT_ORPHANS,
        keys.DEAD,
        keys.QUEUES,
        keys.LIVE_QUEUES,
        keys.workers(identity),
        keys.PROCESSES,
        keys.INPROGRESS_IDENTITIES,
    ]
    if reaped:
        verdict = "reaped"
    elif if_dead_for is not None:
        verdict = str(float(if_dead_for))
    else:
        verdict = ""  # own shutdown: unconditional
    args = _script_args(config, identity, verdict)
    args += [f"d:{raw}" for raw in finished] + [f"k:{raw}" for raw in keep]
    reply = REQUEUE_LIST(client, script_keys, args)
    moved, failed, n_unlisted, n_buried, parked = (int(count) for count in reply[:5])
    if moved == -1:
        return Requeued(-1)
    names = reply[5:]
    done = Requeued(
        moved,
        failed,
        parked,
        unlisted=tuple(names[:n_unlisted]),
        buried=tuple(names[n_unlisted : n_unlisted + n_buried]),
        unnamed=tuple(names[n_unlisted + n_buried :]),
    )
    _log(identity, done)
    return done


def _script_args(config: Config, identity: str, verdict: str) -> list[Any]:
    """ARGV up to the marks: the prefixes of the keys the script names after what a job
    holds (its queue, its cron entry's running lock, its orphan counter), then the rest."""
    return [
        keys.QUEUE_PREFIX,
        DEFAULT_QUEUE,
        keys.PERIODIC_RUNNING_PREFIX,
        queued_ttl(config),
        identity,
        verdict,
        int(time.time()),
        keys.ORPHANINGS_PREFIX,
        ORPHANINGS_TTL,
        config.max_orphanings,
    ]


def _log(identity: str, done: Requeued) -> None:
    if done.unlisted:
        logger.warning(
            "requeued jobs of %s onto queue(s) no live process reads: %s — make sure some "
            "worker reads them",
            identity,
            ", ".join(done.unlisted),
        )
    if done.failed:
        logger.error(
            "%d job(s) left in progress by %s couldn't be put back; they stay listed and are "
            "retried on the next check",
            done.failed,
            identity,
        )
