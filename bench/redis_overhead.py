"""What one Redis command costs in the client, by way of calling it: redis-py's per-command
overhead (connection pool, retry wrapper, observability hooks, health checks) measured.

    .venv/bin/python bench/redis_overhead.py [--calls N]

One thread, a private local Redis, the command an EVALSHA of a one-line script (what the
worker's turnover sends) and a plain INCR. Each way is timed in wall time and in this process's
CPU time per call, with hiredis and with redis-py's pure-Python parser:

* ``plain``: ``redis.Redis`` as an app makes it (ConnectionPool, its defaults);
* ``cogworker``: the client ``Config.redis()`` makes (BlockingConnectionPool, no command
  retries, the lossless packer);
* ``held``: a connection taken from that pool once and used with ``send_command`` /
  ``read_response``: no pool, no retry wrapper, no hooks (what a processor thread's turnover
  uses).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import redis
from redis._parsers import _HiredisParser, _RESP2Parser

from cogworker import connection
from cogworker.local.server import RedisServer

SCRIPT = "return redis.call('INCR', KEYS[1])"


def timed(calls: int, call: Callable[[], object]) -> tuple[float, float]:
    """Microseconds per call: wall, CPU."""
    for _ in range(min(calls // 10, 1000)):  # warm up
        call()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        call()
    return (
        (time.perf_counter() - wall) / calls * 1e6,
        (time.process_time() - cpu) / calls * 1e6,
    )


def ways(url: str, parser: type) -> dict[str, Callable[[], object]]:
    plain = redis.Redis.from_url(url, parser_class=parser)
    ours = connection.connect(url, parser_class=parser)
    sha = str(plain.script_load(SCRIPT))
    held = ours.connection_pool.get_connection()

    def held_evalsha() -> object:
        held.send_command("EVALSHA", sha, 1, "bench:n")
        return held.read_response()

    def held_incr() -> object:
        held.send_command("INCR", "bench:n")
        return held.read_response()

    return {
        "plain EVALSHA": lambda: plain.evalsha(sha, 1, "bench:n"),
        "cogworker EVALSHA": lambda: ours.evalsha(sha, 1, "bench:n"),
        "held EVALSHA": held_evalsha,
        "plain INCR": lambda: plain.incr("bench:n"),
        "cogworker INCR": lambda: ours.incr("bench:n"),
        "held INCR": held_incr,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per way (20,000)")
    calls = parser.parse_args().calls
    with RedisServer() as server:
        print(f"{calls:,} calls per way, one thread; microseconds per call")
        print(f"{'way':<20} {'parser':<8} {'wall':>7} {'CPU':>7}")
        for name, parser_class in (("hiredis", _HiredisParser), ("python", _RESP2Parser)):
            for way, call in ways(server.url, parser_class).items():
                wall, cpu = timed(calls, call)
                print(f"{way:<20} {name:<8} {wall:7.1f} {cpu:7.1f}")


if __name__ == "__main__":
    main()
