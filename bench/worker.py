"""Worker throughput, latency and idle cost, one worker process on a private local Redis.

    python3 dev.py bench worker         (or: .venv/bin/python bench/worker.py [w2 w3 w4 w5])

W2  drain: 20,000 no-op jobs enqueued first, timed from spawning the worker until the last ran
W3  2,000 jobs sleeping 20 ms each at concurrency 20, timed from the first job's start
W4  pickup latency: idle worker (concurrency 10), 200 jobs enqueued 50 ms apart; each records
    its start time minus a timestamp taken just before its enqueue call; p50 / p99
W5  idle cost: Redis commands per second (INFO commandstats delta, INFO itself excluded) over
    60 s for an idle worker at concurrency 10 reading one queue, then three; and its RSS
W6  drain: 20,000 jobs each doing one INCR (as real jobs touch Redis) at concurrency 1 and 10,
    per-job logging off and at INFO (two lines per job, to /dev/null): jobs/s and the worker's
    CPU time per job (user + system, start-up included), 3 runs each, medians

Per-job logging is off (--log-level WARNING) but where W6 says. Reliable fetch (the default)
throughout.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import cogworker
from cogworker import keys
from cogworker.local.server import RedisServer

HERE = Path(__file__).resolve().parent
JOBS = HERE / "bench_jobs.py"
PICKUPS = 200  # W4's latency samples


def spawn(
    server: RedisServer,
    *flags: str,
    log_level: str = "WARNING",
    quiet: bool = False,
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": server.url, **(extra_env or {})}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cogworker",
            "run",
            "-r",
            str(JOBS),
            "--log-level",
            log_level,
            *flags,
        ],
        env=env,
        cwd=HERE,
        stdout=subprocess.DEVNULL if quiet else None,
    )


def stop(worker: subprocess.Popen[bytes]) -> None:
    worker.terminate()
    worker.wait(60)


def wait_until(condition: object, timeout: float, interval: float = 0.002) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        time.sleep(interval)


def processed(client: object) -> int:
    return int(client.get(keys.STATS_PROCESSED) or 0)  # type: ignore[attr-defined]


def w2(server: RedisServer, client: object) -> None:
    count = 20_000
    from bench_jobs import NoopJob

    NoopJob.perform_bulk([[] for _ in range(count)])
    started = time.perf_counter()
    worker = spawn(server, "-c", "10")
    try:
        wait_until(lambda: processed(client) >= count, 120)
        elapsed = time.perf_counter() - started
    finally:
        stop(worker)
    print(
        f"W2 drain {count:,} no-op jobs (concurrency 10, incl. worker start): {elapsed:.2f} s "
        f"= {count / elapsed:,.0f} jobs/s (target >= 5,000)"
    )


def w3(server: RedisServer, client: object) -> None:
    count = 2_000
    from bench_jobs import SleepJob

    SleepJob.perform_bulk([[0.02] for _ in range(count)])
    worker = spawn(server, "-c", "20")
    try:
        wait_until(lambda: processed(client) >= count, 120)
        finished = time.time()
    finally:
        stop(worker)
    first = float(client.get("bench:first_start"))  # type: ignore[attr-defined]
    print(
        f"W3 {count:,} x 20 ms jobs at concurrency 20: {finished - first:.2f} s from the first "
        f"start (ideal 2.00, target <= 2.10)"
    )


def w4(server: RedisServer, client: object) -> None:
    from bench_jobs import LatencyJob

    worker = spawn(server, "-c", "10", extra_env={"BENCH_TRACE_TAKING": "1"})
    try:
        wait_until(lambda: client.scard(keys.PROCESSES) > 0, 30)  # type: ignore[attr-defined]
        time.sleep(1.0)  # let the worker settle into its idle blocking fetch
        for _ in range(PICKUPS):
            LatencyJob.perform_async(time.time())
            time.sleep(0.05)
        wait_until(lambda: client.llen("bench:latency") >= PICKUPS, 30)  # type: ignore[attr-defined]
    finally:
        stop(worker)
    p50, p99 = _median_and_p99("bench:latency", client)
    inside_p50, inside_p99 = _median_and_p99("bench:latency:in-worker", client)
    print(
        f"W4 pickup latency over {PICKUPS} jobs: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
        f"(targets <= 1.2 / <= 2.0); of it inside the worker, from the fetch reply read to "
        f"perform: p50 {inside_p50:.2f} ms, p99 {inside_p99:.2f} ms"
    )


def _median_and_p99(key: str, client: object) -> tuple[float, float]:
    samples = sorted(float(v) * 1000 for v in client.lrange(key, 0, -1))  # type: ignore[attr-defined]
    if len(samples) != PICKUPS:
        raise RuntimeError(f"{key} holds {len(samples)} samples, not {PICKUPS}")
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def _commands(client: object) -> int:
    stats = client.info("commandstats")  # type: ignore[attr-defined]
    return sum(v["calls"] for name, v in stats.items() if name != "cmdstat_info")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def w5(server: RedisServer, client: object, seconds: float = 60.0) -> None:
    for queues in (["default"], ["critical", "default", "low"]):
        flags = ["-c", "10"]
        for name in queues:
            flags += ["-q", name]
        worker = spawn(server, *flags)
        try:
            wait_until(lambda: client.scard(keys.PROCESSES) > 0, 30)  # type: ignore[attr-defined]
            time.sleep(5)  # past start-up (first orphan check, key scan)
            before = _commands(client)
            time.sleep(seconds)
            rate = (_commands(client) - before) / seconds
            rss = _rss_mb(worker.pid)
        finally:
            stop(worker)
            client.delete(keys.PROCESSES)  # type: ignore[attr-defined]
        target = 5 if len(queues) == 1 else 8
        print(
            f"W5 idle, {len(queues)} queue(s), concurrency 10: {rate:.2f} Redis commands/s "
            f"over {seconds:.0f} s (target <= {target}); RSS {rss:.1f} MB (target <= 40)"
        )


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def w6(server: RedisServer, client: object, count: int = 20_000, runs: int = 3) -> None:
    from bench_jobs import IncrJob

    for log_level in ("WARNING", "INFO"):
        for concurrency in (1, 10):
            rates, cpus = [], []
            for _ in range(runs):
                client.flushall()  # type: ignore[attr-defined]
                IncrJob.perform_bulk([[] for _ in range(count)])
                started = time.perf_counter()
                worker = spawn(server, "-c", str(concurrency), log_level=log_level, quiet=True)
                try:
                    wait_until(lambda: int(client.get("bench:incr") or 0) >= count, 300)  # type: ignore[attr-defined]
                    rates.append(count / (time.perf_counter() - started))
                    cpus.append(_cpu_seconds(worker.pid) / count * 1e6)
                finally:
                    stop(worker)
            print(
                f"W6 drain {count:,} INCR jobs, concurrency {concurrency:>2}, log level "
                f"{log_level:<7}: {statistics.median(rates):,.0f} jobs/s "
                f"({min(rates):,.0f}-{max(rates):,.0f}), worker CPU "
                f"{statistics.median(cpus):.0f} us/job"
            )


def main() -> None:
    wanted = [arg.lower() for arg in sys.argv[1:]] or ["w2", "w3", "w4", "w5", "w6"]
    sys.path.insert(0, str(HERE))
    for name in wanted:
        with RedisServer() as server:
            config = cogworker.Config(redis_url=server.url)
            cogworker.set_default_config(config)
            globals()[name](server, config.redis())


if __name__ == "__main__":
    main()
