"""Reading and operating cogworker's state in Redis: the API the CLI, the metrics and the
Web UI are built on. Reads are one or two round trips, except the searches by jid (there is
no index by jid), which read each structure once, a page at a time.

    from cogworker import api
    client = config.redis()
    api.stats(client).enqueued
    api.Queue(client, "default").latency()
    api.dead_set(client).retry_now(record.raw)
    for process in api.ProcessSet(client): process.quiet_down()
    api.explain(client, jid).place          # where a job is; .reasons: why it waits
"""

from cogworker.api.explain import explain
from cogworker.api.explanation import Explanation, Location, Place, Reason, Run, Why
from cogworker.api.in_progress import GoneProcess, InProgress, in_progress
from cogworker.api.locks import Release, UniqueLock, release_owned_by, unique_locks
from cogworker.api.locks import release as release_lock
from cogworker.api.processes import Process, ProcessSet, Work, WorkSet
from cogworker.api.queues import Queue, queue_names
from cogworker.api.records import JobRecord
from cogworker.api.sets import JobSet, dead_set, retry_set, scheduled_set
from cogworker.api.stats import QueueStats, Stats, attempts, stats, throughput
from cogworker.graduation import Requeue

__all__ = [
    "Explanation",
    "GoneProcess",
    "InProgress",
    "JobRecord",
    "JobSet",
    "Location",
    "Place",
    "Process",
    "ProcessSet",
    "Queue",
    "QueueStats",
    "Reason",
    "Release",
    "Requeue",
    "Run",
    "Stats",
    "UniqueLock",
    "Why",
    "Work",
    "WorkSet",
    "attempts",
    "dead_set",
    "explain",
    "in_progress",
    "queue_names",
    "release_lock",
    "release_owned_by",
    "retry_set",
    "scheduled_set",
    "stats",
    "throughput",
    "unique_locks",
]
