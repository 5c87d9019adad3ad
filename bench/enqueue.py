"""Enqueue rates on a private local redis-server: one by one, and with push_bulk.

    python3 dev.py bench enqueue        (or: .venv/bin/python bench/enqueue.py [N])

One-by-one pushes are bound by one round trip each; push_bulk sends 1,000 jobs per round trip.
Prints the best of 3 runs of each (the machine is shared, so the best is the least disturbed).
"""

from __future__ import annotations

import sys
import time

import cogworker
from cogworker.local.server import RedisServer


class BenchJob(cogworker.Job, queue="bench"):
    name = "BenchJob"

    def perform(self, user_id: int, email: str, plan: dict[str, object]) -> None:
        pass


ARGS = (12345, "ada@example.com", {"plan": "pro", "seats": 3, "price": 49.5})


def one_by_one(client: cogworker.Client, count: int) -> float:
    enqueue = client.enqueue
    started = time.perf_counter()
    for _ in range(count):
        enqueue(BenchJob, *ARGS)
    return count / (time.perf_counter() - started)


def bulk(count: int) -> float:
    args_list = [list(ARGS)] * count
    started = time.perf_counter()
    BenchJob.perform_bulk(args_list)
    return count / (time.perf_counter() - started)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    with RedisServer() as server:
        config = cogworker.Config(redis_url=server.url)
        cogworker.set_default_config(config)
        client = cogworker.Client(config)
        redis = config.redis()
        client.enqueue(BenchJob, *ARGS)  # warm up: connection, queue registration
        single, many = [], []
        for _ in range(3):
            redis.delete("cogworker:queue:bench")
            single.append(one_by_one(client, count))
            redis.delete("cogworker:queue:bench")
            many.append(bulk(count * 5))
        stored = redis.llen("cogworker:queue:bench")
        assert stored == count * 5, f"expected {count * 5} jobs, found {stored}"
        print(f"redis-server {'.'.join(map(str, server.version))}, {count} jobs per run, best of 3")
        print(f"perform_async one by one: {max(single):,.0f} jobs/s (target >= 6,000)")
        print(f"push_bulk (1,000 per round trip): {max(many):,.0f} jobs/s (target >= 50,000)")


if __name__ == "__main__":
    main()
