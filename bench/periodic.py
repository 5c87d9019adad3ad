"""Cost of the cron ticker with 1,000 registered entries, for one process.

    python3 dev.py bench periodic       (or: .venv/bin/python bench/periodic.py)

Measures Redis commands (INFO commandstats delta, INFO itself excluded) and wall time of
a tick in which no entry reached a new slot (target: at most 2 commands whatever the number
of entries) and of a tick in which all 1,000 reach a new slot (target: <= 500 ms); once with
plain entries, once with until_executed ones (their running locks are extended after the
pushes).
"""

from __future__ import annotations

import threading
import time

import cogworker
from cogworker.local.server import RedisServer
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.ticker import Ticker

ENTRIES = 1_000


class ReportJob(cogworker.Job):
    name = "ReportJob"

    def perform(self, number: int) -> None:
        pass


def commands(client: object) -> int:
    stats = client.info("commandstats")  # type: ignore[attr-defined]
    return sum(v["calls"] for name, v in stats.items() if name != "cmdstat_info")


def measure(ticker: Ticker, client: object, now: float) -> tuple[int, float]:
    before = commands(client)
    started = time.perf_counter()
    ticker.tick(now)
    elapsed = time.perf_counter() - started
    return commands(client) - before, elapsed


def run(unique: str | None) -> None:
    with RedisServer() as server:
        config = cogworker.Config(redis_url=server.url)
        for number in range(ENTRIES):
            config.periodic.register("* * * * *", ReportJob, args=[number], unique=unique)
        client = config.redis()
        ready = threading.Event()
        ready.set()
        ticker = Ticker(Manager(config, new_identity()), ready)
        minute = (int(time.time()) // 60) * 60
        ticker.tick(minute - 60 + 1)  # first tick: every entry claims its current slot
        client.delete("cogworker:queue:default")
        running_locks = list(client.scan_iter("periodic:running:*"))
        if running_locks:  # as if those runs had finished: the next slots are free
            client.delete(*running_locks)
        fresh_count, fresh_time = measure(ticker, client, minute + 1)
        queued = client.llen("cogworker:queue:default")
        idle_count, idle_time = measure(ticker, client, minute + 30)
        kind = "until_executed" if unique else "plain"
        print(
            f"{ENTRIES:,} {kind} periodic entries, redis-server "
            f"{'.'.join(map(str, server.version))}"
        )
        print(
            f"  tick with no new slot: {idle_count} Redis commands, {idle_time * 1000:.2f} ms "
            "(target <= 2 commands)"
        )
        print(
            f"  tick where all {ENTRIES:,} reach a new slot: {fresh_count:,} Redis commands, "
            f"{fresh_time * 1000:.0f} ms, {queued:,} jobs pushed (target <= 500 ms)"
        )


def main() -> None:
    run(None)
    run("until_executed")


if __name__ == "__main__":
    main()
