"""What the Workers tab shows: live processes and the jobs they are running, from one snapshot.

Busy counts come from the same snapshot of running jobs as the running-jobs table (the
heartbeat's own ``busy`` figure can be a beat old), so the two always agree. A heartbeat's age
is measured on Redis's clock against the process's last beat stamp.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import redis

from cogworker import api


@dataclass(frozen=True)
class ProcessRow:
    identity: str
    hostname: str
    pid: int | None
    tag: str | None
    quiet: bool
    queues: list[tuple[str, int]]  # (name, weight), each queue once, in configured order
    busy: int
    concurrency: int
    rss_kb: int | None
    started_at: float | None
    beat_age: float | None
    late: bool  # no beat for three intervals: it may be stuck or gone
    silent: bool = False  # no beat for three of its own intervals: its threads count as idle

    @property
    def weighted(self) -> bool:
        return any(weight > 1 for _, weight in self.queues)


@dataclass(frozen=True)
class RunningRow:
    identity: str
    thread_id: str
    jid: str
    queue: str
    job_class: str
    run_at: float | None
    running_for: float | None


@dataclass(frozen=True)
class Workers:
    processes: list[ProcessRow]
    running: list[RunningRow]
    heartbeat_interval: float

    @property
    def threads(self) -> int:
        return sum(process.concurrency for process in self.processes)

    @property
    def any_active(self) -> bool:
        return any(not process.quiet for process in self.processes)


def weighted_queues(names: list[str]) -> list[tuple[str, int]]:
    """``[a, a, b]`` (a queue listed once per unit of weight) as ``[(a, 2), (b, 1)]``."""
    return list(Counter(names).items())


def redis_clock(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return float(seconds) + float(micros) / 1_000_000


def workers(client: redis.Redis, heartbeat_interval: float) -> Workers:
    processes = list(api.ProcessSet(client))
    works = list(api.WorkSet(client)) if processes else []
    now = redis_clock(client)
    busy = Counter(work.identity for work in works)
    rows = []
    for process in processes:
        age = max(now - process.last_beat, 0.0) if process.last_beat is not None else None
        tag = process.info.get("tag")
        rows.append(
            ProcessRow(
                identity=process.identity,
                hostname=process.hostname,
                pid=process.pid,
                tag=tag if isinstance(tag, str) and tag else None,
                quiet=process.quiet,
                queues=weighted_queues(process.queues),
                busy=0 if process.silent else busy[process.identity],
                concurrency=process.concurrency,
                rss_kb=process.rss_kb,
                started_at=process.started_at,
                beat_age=age,
                late=process.silent or (age is not None and age > 3 * heartbeat_interval),
                silent=process.silent,
            )
        )
    running = [
        RunningRow(
            identity=work.identity,
            thread_id=work.thread_id,
            jid=str(work.job.get("jid", "")),
            queue=work.queue,
            job_class=str(work.job.get("class", "(unparseable)")),
            run_at=float(work.run_at) if work.run_at is not None else None,
            running_for=max(now - work.run_at, 0.0) if work.run_at is not None else None,
        )
        for work in works
    ]
    running.sort(key=lambda row: (row.run_at is None, row.run_at or 0.0))
    return Workers(rows, running, heartbeat_interval)


def summary(client: redis.Redis) -> tuple[int, bool]:
    """(live processes, whether any of them is taking jobs) for the header's cluster bar."""
    processes = list(api.ProcessSet(client))
    return len(processes), any(not process.quiet for process in processes)
