"""Reading and operating cogworker's state in Redis: the API the CLI, the metrics and the
Web UI are built on. Every read is one or two round trips, and iteration pages through Redis
rather than loading a large set at once.

    from cogworker import api
    client = config.redis()
    api.stats(client).enqueued
    api.Queue(client, "default").latency()
    api.dead_set(client).retry_now(record.raw)
    for process in api.ProcessSet(client): process.quiet_down()
"""

from cogworker.api.processes import Process, ProcessSet, Work, WorkSet
from cogworker.api.queues import Queue, queue_names
from cogworker.api.records import JobRecord
from cogworker.api.sets import JobSet, dead_set, retry_set, scheduled_set
from cogworker.api.stats import QueueStats, Stats, attempts, stats, throughput

__all__ = [
    "JobRecord",
    "JobSet",
    "Process",
    "ProcessSet",
    "Queue",
    "QueueStats",
    "Stats",
    "Work",
    "WorkSet",
    "attempts",
    "dead_set",
    "queue_names",
    "retry_set",
    "scheduled_set",
    "stats",
    "throughput",
]
