"""Fill Redis with demo data so that every tab of the dashboard has something to show, with no
worker running:

    python -m examples.seed [--redis-url URL]

Jobs on the queues go through the normal push; the rest is written straight into the keys the
workers write (cogworker.keys): scheduled, retrying and dead jobs with realistic errors and
attempt logs, two processes with running jobs (they vanish after 10 minutes, as a real process
does when it stops beating), cron entries with their last runs (one disabled), about 200
recorded runs over the last 24 hours (busier by day) with their hourly and daily counters, and
daily counters for the month before. Each run adds to what is there; flush the database first
for a clean slate (``redis-cli -n 0 flushdb``).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

import cogworker
from cogworker import connection, history, keys, wire
from cogworker.metrics.by_class import Tallies
from cogworker.periodic import Entry
from examples.jobs import FlakyJob, GreetingJob, LowPriorityJob

PROCESS_TTL = 600  # the fake processes' presence: ten minutes
ATTEMPTS_TTL = 30 * 86_400
FAILURE_SHARE = 0.12  # of the recorded runs
EARLIER_DAYS = 29  # days before today with daily counters
HISTORY_CLASSES = (
    "GreetingJob",
    "FlakyJob",
    "FetchReportJob",
    "LowPriorityJob",
    "DailyReportJob",
    "billing.ChargeCardJob",
    "mail.SendWelcomeEmailJob",
)


class CardDeclined(Exception):
    wire_name = "payments.CardDeclined"


class SMTPAuthenticationError(Exception):
    wire_name = "smtplib.SMTPAuthenticationError"


FAILURES: tuple[tuple[type[BaseException], str], ...] = (
    (TimeoutError, "timed out after 5.0s reading from api.example.com:443"),
    (ConnectionRefusedError, "[Errno 111] Connection refused: redis-cache.internal:6380"),
    (CardDeclined, "card_declined: insufficient funds (order 991, 25.00 EUR)"),
    (SMTPAuthenticationError, "(535, b'5.7.8 Username and Password not accepted')"),
    (KeyError, "'user_id'"),
)


@dataclass
class Seeded:
    """What one run of the seeder wrote, for its summary."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, what: str, count: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + count


def raised(kind: type[BaseException], message: str) -> BaseException:
    """``kind(message)`` with a real traceback of a few frames."""

    def charge(order: int) -> None:
        raise kind(message)

    def perform(order: int) -> None:
        charge(order)

    try:
        perform(991)
    except BaseException as error:  # keep what was raised, traceback and all
        return error
    raise AssertionError("unreachable")


def seed_queues(done: Seeded) -> None:
    for n in range(5):
        GreetingJob.perform_async(f"queued visitor {n}")
    for n in range(3):
        LowPriorityJob.perform_async(f"nightly export part {n}")
    for n in range(2):  # a paused queue: its jobs wait until it is resumed
        GreetingJob.set(queue="mailers").perform_async(f"newsletter {n}")
    cogworker.default_config().redis().sadd(keys.PAUSED_QUEUES, "mailers")
    done.add("queued", 10)
    for delay in (30, 300, 3600):
        GreetingJob.perform_in(delay, f"in {delay} s")
    FlakyJob.perform_in(1800, 1)
    done.add("scheduled", 4)


def seed_schedules(client: redis.Redis, now: float, done: Seeded) -> None:
    entries = [
        (
            Entry(
                "*/5 * * * *", "DailyReportJob", [{"section": "hourly_digest"}], 0, "until_executed"
            ),
            240,
        ),
        (Entry("0 * * * *", "SyncInventoryJob", [], 0, None, "low"), 1500),
        (Entry("0 7 * * 1-5 Europe/Berlin", "DailyReportJob", [{"section": "daily"}]), 86_400),
        (Entry("0 3 * * *", "PurgeOldSessionsJob", [], 0, "until_executed"), None),
    ]
    pipe = client.pipeline(transaction=False)
    for entry, age in entries:
        pipe.hset(keys.PERIODIC_SCHEDULE, entry.pjid, entry.published())
        if age is not None:
            pipe.set(keys.periodic_last_slot(entry.pjid), entry.schedule.slot(now - age))
    pipe.sadd(keys.PERIODIC_DISABLED, entries[-1][0].pjid)  # shows the Disabled state
    pipe.execute()
    done.add("schedules", len(entries))


def seed_processes(client: redis.Redis, now: float, done: Seeded) -> None:
    running = [("GreetingJob", ["a visitor"]), ("FlakyJob", [2])]
    for n, (job_class, args) in enumerate(running):
        identity = f"demo-host:{1234 + n}:{random.Random(n).getrandbits(48):012x}"
        info = {
            "hostname": "demo-host",
            "pid": 1234 + n,
            "concurrency": 5,
            "queues": ["default", "low"],
            "started_at": now - 3600,
            "rss_kb": 90_000 + 15_000 * n,
            "identity": identity,
        }
        payload = {"jid": wire.new_jid(), "class": job_class, "queue": "default", "args": args}
        work = {"queue": "default", "payload": payload, "run_at": int(now) - 5 - 40 * n}
        pipe = client.pipeline(transaction=False)
        presence = keys.process(identity)
        fields = {"info": wire.dumps(info), "busy": "1", "quiet": "false", "beat": str(int(now))}
        pipe.hset(presence, mapping=fields)  # type: ignore[arg-type]
        pipe.expire(presence, PROCESS_TTL)
        pipe.sadd(keys.PROCESSES, identity)
        pipe.hset(keys.workers(identity), "thread-1", wire.dumps(work))
        pipe.expire(keys.workers(identity), PROCESS_TTL)
        pipe.execute()
    done.add("processes", len(running))


def failed_job(
    job_class: str, args: list[Any], error: tuple[type[BaseException], str], **extra: Any
) -> dict[str, Any]:
    kind, message = error
    return {
        "class": job_class,
        "args": args,
        "jid": wire.new_jid(),
        "queue": "default",
        "created_at": extra.pop("created_at"),
        "enqueued_at": extra.pop("enqueued_at"),
        "error_class": getattr(kind, "wire_name", kind.__name__),
        "error_message": message,
        **extra,
    }


def attempts(
    pipe: Any,
    jid: str,
    count: int,
    outcome: str,
    error: tuple[type[BaseException], str],
    first: float,
) -> None:
    kind, message = error
    for attempt in range(1, count + 1):
        entry = {
            "attempt": attempt,
            "failed_at": first + 60 * (attempt - 1),
            "outcome": outcome if attempt == count else "retrying",
            "error_class": getattr(kind, "wire_name", kind.__name__),
            "error_message": message,
        }
        pipe.rpush(keys.job_attempts(jid), wire.dumps(entry))
    pipe.expire(keys.job_attempts(jid), ATTEMPTS_TTL)


def seed_retry_and_dead(client: redis.Redis, now: float, done: Seeded) -> None:
    pipe = client.pipeline(transaction=False)
    for n in range(3):  # retrying: a flaky job at its 1st, 2nd and 3rd retry
        error = FAILURES[n]
        started = now - 600 * (n + 1)
        job = failed_job(
            "FlakyJob",
            [2],
            error,
            created_at=started,
            enqueued_at=started,
            retry=3,
            retry_count=n + 1,
            failed_at=started + 1,
        )
        pipe.zadd(keys.RETRY, {wire.dumps(job): now + 60 * (n + 1)})
        attempts(pipe, job["jid"], n + 1, "retrying", error, started + 1)
    dead: list[tuple[str, list[Any], tuple[type[BaseException], str]]] = [
        ("mail.SendWelcomeEmailJob", [{"user_id": 42}], FAILURES[3]),
        ("billing.ChargeCardJob", [{"order_id": 991, "amount_cents": 2500}], FAILURES[2]),
        ("SyncInventoryJob", [{"sku": "ABC-123"}], FAILURES[0]),
    ]
    for n, (job_class, args, error) in enumerate(dead):
        died = now - 3600 * n - 120
        job = failed_job(
            job_class,
            args,
            error,
            created_at=died - 900,
            enqueued_at=died - 900,
            retry=2,
            retry_count=2,
            failed_at=died - 600,
        )
        pipe.zadd(keys.DEAD, {wire.dumps(job): died})
        attempts(pipe, job["jid"], 3, "dead", error, died - 600)
    pipe.zadd(
        keys.DEAD, {'{"class":"ImportJob","args":["rows.csv"],"jid":"4f1c': now - 7200}
    )  # cut short
    pipe.execute()
    done.add("retrying", 3)
    done.add("dead", len(dead) + 1)


def hourly_runs(hour: int, chooser: random.Random) -> int:
    """How many runs the demo records in the UTC hour ``hour``: busy by day, quiet at night."""
    of_day = hour % 24
    return max(1, round(7 + 6 * math.sin((of_day - 9) / 24 * 2 * math.pi))) + chooser.randint(0, 3)


def seed_history(client: redis.Redis, now: float, done: Seeded) -> None:
    """Runs over the 24 hourly buckets ending now (about one in eight failed, with its
    backtrace), with the counters a worker bumps for each (hourly throughput, daily runs,
    totals, per-class metrics), and daily counters alone for the month before."""
    chooser = random.Random(12)
    retention = history.Retention(max_entries=500)
    pipe = client.pipeline(transaction=False)
    current, recorded = int(now) // 3600, 0
    by_minute: dict[int, Tallies] = {}  # the runs' per-class metrics, as workers record them
    for hour in range(current - 23, current + 1):
        for _ in range(hourly_runs(hour, chooser)):
            finished = chooser.uniform(hour * 3600, min(hour * 3600 + 3600, now))
            started = finished - chooser.uniform(0.01, 2.5)
            job = {
                "jid": wire.new_jid(),
                "class": chooser.choice(HISTORY_CLASSES),
                "args": [recorded],
            }
            failed = chooser.random() < FAILURE_SHARE
            error = raised(*chooser.choice(FAILURES)) if failed else None
            minute = by_minute.setdefault(int(finished) // 60, Tallies())
            minute.add_run(str(job["class"]), finished - started, failed)
            record_run(
                pipe, retention, history.build_entry(job, "default", started, finished, error)
            )
            bucket = keys.throughput(hour)
            pipe.hincrby(bucket, "failed" if failed else "processed", 1)
            pipe.expire(bucket, keys.THROUGHPUT_TTL)
            pipe.incr(keys.STATS_FAILED if failed else keys.STATS_PROCESSED)
            recorded += 1
    today = datetime.fromtimestamp(now, UTC).date()
    for offset in range(1, EARLIER_DAYS + 1):  # the month before (on top of yesterday's runs)
        day = keys.history_daily((today - timedelta(days=offset)).isoformat())
        pipe.hincrby(
            day, "success", 80 + chooser.randint(0, 60) - (30 if offset % 7 in (5, 6) else 0)
        )
        pipe.hincrby(day, "failed", chooser.randint(0, 12))
        pipe.expire(day, retention.daily_stats_days * 86_400)
    pipe.execute()
    for minute_number, tallies in by_minute.items():
        tallies.write(client, minute_number * 60)
    done.add("history runs", recorded)


def record_run(pipe: Any, retention: history.Retention, entry: dict[str, Any]) -> None:
    """What the history middleware writes for one run (its sets, day counter and the History
    tab's index), at the run's own finish time."""
    history.store(pipe, retention, entry)


def seed(config: cogworker.Config) -> Seeded:
    """Write the demo data into ``config``'s Redis (see the module docstring)."""
    previous = cogworker.default_config()
    cogworker.set_default_config(config)  # the jobs' pushes go through this config
    try:
        client, done, now = config.redis(), Seeded(), wire.now()
        seed_queues(done)
        seed_schedules(client, now, done)
        seed_processes(client, now, done)
        seed_retry_and_dead(client, now, done)
        seed_history(client, now, done)
        return done
    finally:
        cogworker.set_default_config(previous)


def main() -> None:
    parser = argparse.ArgumentParser(description="Fill Redis with the dashboard's demo data.")
    default = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
    parser.add_argument("--redis-url", default=default, help=f"default: $REDIS_URL or {default}")
    options = parser.parse_args()
    config = cogworker.Config(redis_url=options.redis_url)
    started = time.monotonic()
    done = seed(config)
    shown = ", ".join(f"{what} {count}" for what, count in done.counts.items())
    took = time.monotonic() - started
    print(f"seeded {connection.redacted_url(config.redis_url)} in {took:.1f}s: {shown}")
    print("  queue mailers is paused, one schedule disabled; the processes expire in 10 minutes")
    print("  see it: python -m examples.web, then open http://127.0.0.1:9394/cogworker/")


if __name__ == "__main__":
    main()
