"""Jobs taken off their queues and not settled yet: in the in-progress lists of live
processes (running, or about to), and in those of processes that are gone (orphaned: they
run again once orphan recovery judges their process dead)."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from cogworker import keys

DEFAULT_ORPHAN_THRESHOLD = 300.0
"""The workers' default ``orphan_threshold``: how long after its last beat a process that is
gone counts as dead, so that its in-progress jobs are requeued."""


@dataclass(frozen=True)
class GoneProcess:
    """A process whose presence expired, with jobs still in its in-progress list."""

    identity: str
    jobs: int
    last_beat: int | None  # on Redis's clock; None: never stamped
    recover_from: float | None
    """When its last beat is older than the threshold (epoch seconds): its jobs go back at
    the first orphan check after that. None: at the next orphan check."""


@dataclass(frozen=True)
class InProgress:
    running: int  # jobs in the lists of live processes
    gone: list[GoneProcess]

    @property
    def orphaned(self) -> int:
        return sum(process.jobs for process in self.gone)


def in_progress(
    client: redis.Redis, *, orphan_threshold: float = DEFAULT_ORPHAN_THRESHOLD
) -> InProgress:
    """Every registered in-progress list, by whether its process is alive, in two round
    trips. ``orphan_threshold`` is the workers' setting (it dates each recovery)."""
    identities = sorted(str(name) for name in client.smembers(keys.INPROGRESS_IDENTITIES))
    if not identities:
        return InProgress(0, [])
    pipe = client.pipeline(transaction=False)
    for identity in identities:
        pipe.llen(keys.inprogress(identity))
        pipe.exists(keys.process(identity))
    pipe.hmget(keys.LAST_BEAT, identities)
    *replies, stamps = pipe.execute()
    running, gone = 0, []
    for index, identity in enumerate(identities):
        jobs, alive = int(replies[2 * index]), bool(replies[2 * index + 1])
        if alive:
            running += jobs
        elif jobs:
            stamp = stamps[index]
            last_beat = int(stamp) if str(stamp or "").isdigit() else None
            recover_from = None if last_beat is None else last_beat + orphan_threshold
            gone.append(GoneProcess(identity, jobs, last_beat, recover_from))
    return InProgress(running, gone)
