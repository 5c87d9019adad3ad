"""This process's own leftovers: settlements that failed earlier, strays on its in-progress
list, and what it still holds when it stops.

* Reconcile (every orphan check): settle what we failed to settle earlier, and requeue strays
  (listed but not running here) once they have been seen on two checks in a row; a stray that
  is not a job goes to dead instead.
* At shutdown: settle what can be settled, hand failures we couldn't file to
  ``cogworker:unsettled`` for any live process to file, and hand the rest back to its queue.
"""

from __future__ import annotations

import logging

import redis

from cogworker import keys, scripts, wire
from cogworker.config import Config
from cogworker.failure import Rejection
from cogworker.fetch import Filing, Work
from cogworker.fetch.strategy import FetchStrategy
from cogworker.worker.ledger import ACK, Ledger
from cogworker.worker.recovery.burials import filed_as_dead
from cogworker.worker.recovery.handback import hand_back_list, hand_back_registered
from cogworker.worker.settle import Settler

logger = logging.getLogger("cogworker")

PARK_UNSETTLED = scripts.load(__file__, "park_unsettled")


class Reconciler:
    def __init__(
        self,
        config: Config,
        client: redis.Redis,
        identity: str,
        ledger: Ledger,
        strategy: FetchStrategy,
        settler: Settler,
    ) -> None:
        self._config = config
        self._client = client
        self._identity = identity
        self._ledger = ledger
        self._strategy = strategy
        self._settler = settler
        self._strays: set[str] = set()  # seen on the last check: requeued if seen again

    def reconcile(self) -> None:
        """Settle pending work and requeue strays seen on the previous check too."""
        # each settlement is guarded by the job's exact entry (or, with basic fetch, its
        # attempt's marker): one whose first try landed after all writes nothing now
        self.settle_pending()
        listed = {str(raw) for raw in self._client.lrange(keys.inprogress(self._identity), 0, -1)}
        strays = listed - self._ledger.running() - self._ledger.pending().keys()
        fetch = self._strategy.current()
        for raw in strays & self._strays:
            work = Work.taken("", raw)  # found in progress: the queue is the one it names
            if isinstance(work.job, Rejection):
                self._settler.bury_unparseable(work)
                continue
            fetch.give_back(work)
            logger.warning("requeued stray in-progress job jid=%s", work.jid)
        self._strays = strays - self._strays  # a failure above leaves them to the next check

    def settle_pending(self) -> None:
        """Retry settlements that failed earlier (acks and filings of this process's jobs)."""
        fetch = self._strategy.current()
        for work, how in self._ledger.pending_work():
            try:
                if how is ACK:
                    fetch.acknowledge([work])
                    self._ledger.settled(work)
                    continue
                written = fetch.file_instead(work, how)
                self._ledger.settled(work)
                if written and how.target == keys.DEAD:
                    filed_as_dead(self._client, self._settler, how.payload)
            except Exception as error:  # one entry must not stop the others
                logger.error("still couldn't settle jid=%s: %s", work.jid, error)

    def park_unsettled(self) -> list[str]:
        """At shutdown: hand failures we couldn't file to ``cogworker:unsettled``.

        Returns the raws that couldn't even be parked (they stay on the in-progress list).
        """
        keep = []
        inprogress = keys.inprogress(self._identity)
        for work, how in self._ledger.pending_work():
            if not isinstance(how, Filing):  # an ack: nothing to park
                continue
            record = wire.dumps({"set": how.target, "score": how.score, "payload": how.payload})
            try:
                PARK_UNSETTLED(self._client, [inprogress, keys.UNSETTLED], [work.raw, record])
                self._ledger.settled(work)
            except Exception as error:  # one entry must not stop the others
                logger.error("couldn't park unsettled jid=%s: %s", work.jid, error)
                keep.append(work.raw)
        return keep

    def hand_back(self) -> None:
        """At shutdown: settle, park or requeue everything this process still holds."""
        fetch = self._strategy.chosen()
        if fetch is None:
            return  # never fetched: holds nothing
        self.settle_pending()
        if not fetch.keeps_in_progress:
            count = hand_back_registered(self._config, self._client, self._identity)
        else:
            keep = self.park_unsettled()
            finished = [work for work, how in self._ledger.pending_work() if how is ACK]
            count = hand_back_list(
                self._config,
                self._client,
                self._identity,
                finished=[work.raw for work in finished],
                keep=keep,
            )
            for work in finished:
                self._ledger.settled(work)
        if count > 0:
            logger.warning("requeued %d job(s) unfinished at shutdown", count)
