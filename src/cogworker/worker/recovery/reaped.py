"""Requeueing at once the jobs of a swarm child that its supervisor reaped.

``waitpid`` returning a child's pid is certain knowledge that the child is gone (kill -9, an
OOM kill, a segfault, or a clean exit with nothing left listed), so its in-progress list is
requeued right away instead of waiting for its presence key to expire and the orphan
threshold to pass. One script does it (``requeue_list.lua`` with the "reaped" verdict): each
job's recovery is counted, as for any orphan, so a job that kills every child it lands on is
parked after ``max_orphanings`` recoveries instead of killing children forever (the next
orphan check of any worker files it into dead; a respawned child runs one at boot), and the
child's presence is removed, so it is neither counted as a process nor shown busy.

Only identities the supervisor forked are ever passed here: no live process's list is
touched. When Redis can't be reached the recovery is tried again every second; meanwhile the
orphan check of every other worker would recover the list too, in the usual time.
"""

from __future__ import annotations

import logging
import time

import redis

from cogworker import redis_errors
from cogworker.config import Config
from cogworker.worker.recovery.burials import bury_unnamed_requeues
from cogworker.worker.recovery.requeue import requeue_list

logger = logging.getLogger("cogworker")

RETRY_INTERVAL = 1.0
SITE = "Swarm recovery"


class ReapedChildren:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._pending: dict[str, int] = {}  # identity -> pid, in the order they were reaped
        self._next_try = 0.0

    def exited(self, identity: str, pid: int) -> None:
        self._pending[identity] = pid
        self._next_try = 0.0
        self.retry()

    def retry(self) -> None:
        if not self._pending or time.monotonic() < self._next_try:
            return
        for identity, pid in list(self._pending.items()):
            try:
                self._recover(identity, pid)
            except redis.RedisError as error:
                redis_errors.reporter.report(SITE, error)
                self._next_try = time.monotonic() + RETRY_INTERVAL
                return
            del self._pending[identity]
        redis_errors.reporter.recovered(SITE)

    def _recover(self, identity: str, pid: int) -> None:
        client = self._config.redis()
        done = requeue_list(self._config, client, identity, reaped=True)
        bury_unnamed_requeues(client, done.unnamed)
        requeued = done.moved - done.parked
        if requeued:
            logger.warning(
                "swarm: requeued %d job(s) left running by child pid=%d identity=%s; they run "
                "again as soon as a worker takes them",
                requeued,
                pid,
                identity,
            )
        if done.parked:
            logger.warning(
                "swarm: %d job(s) left running by child pid=%d identity=%s were orphaned more "
                "than %d times (max_orphanings): they go to dead at the next orphan check, not "
                "back to their queue",
                done.parked,
                pid,
                identity,
                self._config.max_orphanings,
            )
        if done.buried:
            logger.error(
                "swarm: %d job(s) of child pid=%d went straight to dead as raw payloads "
                "(parking them failed); they keep their payload but no error record",
                len(done.buried),
                pid,
            )
