"""cogworker side by side with huey and dramatiq, one worker process each, on one private Redis.

    .venv/bin/python bench/peers.py [--rounds N] [--jobs N] [--pickups N] [--quick]
                                    [--baseline CHECKOUT] [--io-only | --idle-only]

Each system gets its own virtualenv under ``.bench-venvs/`` in the checkout (git ignores it;
kept between runs, cogworker reinstalled from this checkout every run so its figures are the
tree's): ``huey`` + ``redis``, ``dramatiq[redis]``, and ``pip install <checkout>``, so all three
run as installed packages on the same redis-py without hiredis. The job body, the same in all,
is one INCR through a client the worker process creates once (bench/peers_*.py).

Per system and round: enqueue N jobs one by one (timed in the system's venv), drain them at
concurrency 1; flush; enqueue N in bulk, drain at the system's default concurrency (cogworker
``-c 10``, huey's consumer default ``-w 1`` so its c=1 run stands for it, dramatiq
``--processes 1`` with its default 8 threads). A drain is timed from spawning the worker until
the counter reaches N; the worker's CPU (user + system of its process tree, start-up included)
and peak RSS (VmHWM summed over the tree) are read then, before it is stopped. A bare redis-py
LPUSH loop gives the enqueue floor. Systems run in a rotated order each round; the table shows
medians and min-max. Then as many rounds, rotated the same way, of jobs that sleep 20 ms at
concurrency 20 (bench/peers_io.py), and of an idle worker (bench/peers_latency.py): its pickup
latency and the commands it sends while idle. ``--io-only`` and ``--idle-only`` run just one
of those.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
from peers_io import NAPS, ROW, measure_io
from peers_latency import Idle, measure_idle, percentile
from peers_systems import (
    CHECKOUT,
    COUNTER,
    SYSTEMS,
    VENVS,
    System,
    baseline,
    enqueue,
    running,
)

from cogworker.local.server import RedisServer

SETTINGS = (
    "default c: cogworker -c 10 (its default); huey's consumer default, -w 1 thread (the c=1 run); "
    "dramatiq --processes 1 with its default 8 threads. Per-job logging off: cogworker "
    "--log-level WARNING, huey_consumer -q (WARNING); dramatiq logs no line per job at its "
    "default INFO. Bulk: cogworker perform_bulk (1,000 per round trip); huey Task.map and "
    "dramatiq group().run() enqueue one by one (neither has a bulk API); bare: 1,000 per LPUSH."
)

# -- virtualenvs -----------------------------------------------------------------------------


def pip(system: System, *args: str) -> None:
    command = [str(system.python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*command, *args], check=True)


def prepare(system: System) -> None:
    """Create the venv once; install its packages once (cogworker: every run, from the tree)."""
    marker = system.python.parent.parent / "peers-installed.txt"
    wanted = "\n".join(system.requirements)
    if not system.python.exists():
        print(f"creating virtualenv {system.python.parent.parent} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(system.python.parent.parent)], check=True)
    source = str(system.source or CHECKOUT)
    if system.module == "cog" and marker.exists():
        print(f"reinstalling cogworker from {source} (dependencies kept) ...", flush=True)
        pip(system, "--force-reinstall", "--no-deps", source)
    elif system.module == "cog":
        print(f"installing cogworker and its dependencies from {source} ...", flush=True)
        pip(system, source)
        marker.write_text(wanted)
    elif not marker.exists() or marker.read_text() != wanted:
        print(f"installing {', '.join(system.requirements)} for {system.name} ...", flush=True)
        pip(system, *system.requirements)
        marker.write_text(wanted)


def versions(system: System) -> str:
    code = (
        "import importlib.metadata as m; "
        f"print(', '.join(p + ' ' + m.version(p) for p in {list(system.packages)!r}))"
    )
    found = subprocess.run([str(system.python), "-c", code], capture_output=True, text=True)
    return found.stdout.strip() or f"(versions unknown: {found.stderr.strip()[-200:]})"


# -- one drain -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drain:
    rate: float  # jobs/s
    cpu_us: float  # worker CPU per job
    rss_mb: float


def drain(system: System, client: redis.Redis, url: str, count: int, concurrency: int) -> Drain:
    """Timed from the worker's spawn until the counter reaches count; CPU and RSS read then."""

    def reached() -> bool:
        return int(client.get(COUNTER) or 0) >= count

    started = time.perf_counter()
    with running(system, url, concurrency) as worker:
        worker.wait_until(reached, max(120.0, count / 50), f"{count:,} jobs")
        elapsed = time.perf_counter() - started
        cpu, rss = worker.cpu_seconds(), worker.peak_rss_mb()
    return Drain(count / elapsed, cpu / count * 1e6, rss)


def enqueue_rate(system: System, url: str, mode: str, count: int) -> float:
    return count / enqueue(system, url, mode, count)


# -- rounds ----------------------------------------------------------------------------------

Results = dict[tuple[str, str], list[float]]


def record_drain(results: Results, system: System, label: str, measured: Drain) -> None:
    results[(system.name, f"drain {label}, jobs/s")].append(measured.rate)
    results[(system.name, f"worker CPU per job {label}, us")].append(measured.cpu_us)
    results[(system.name, f"worker peak RSS {label}, MB")].append(measured.rss_mb)


def run_system(
    system: System, client: redis.Redis, url: str, count: int, results: Results, label: str
) -> None:
    client.flushall()
    print(f"  {label}: {system.name} enqueue one by one ...", flush=True)
    one_by_one = enqueue_rate(system, url, "one", count)
    results[(system.name, "enqueue one by one, jobs/s")].append(one_by_one)
    if system.default_concurrency:
        print(f"  {label}: {system.name} drain c=1 ...", flush=True)
        measured = drain(system, client, url, count, 1)
        record_drain(results, system, "c=1", measured)
    client.flushall()
    print(f"  {label}: {system.name} enqueue bulk ...", flush=True)
    results[(system.name, "enqueue bulk, jobs/s")].append(enqueue_rate(system, url, "bulk", count))
    if system.default_concurrency > 1:
        concurrency = system.default_concurrency
        print(f"  {label}: {system.name} drain c={concurrency} (default) ...", flush=True)
        measured = drain(system, client, url, count, concurrency)
    if system.default_concurrency:
        record_drain(results, system, "default c", measured)
    client.flushall()


def run_rounds(
    systems: list[System], rounds: int, count: int, client: redis.Redis, url: str
) -> Results:
    results: Results = defaultdict(list)
    for round_index in range(rounds):
        shift = round_index % len(systems)
        order = systems[shift:] + systems[:shift]
        names = ", ".join(system.name for system in order)
        print(f"round {round_index + 1}/{rounds} ({count:,} jobs; order: {names})", flush=True)
        for system in order:
            label = f"round {round_index + 1}/{rounds}"
            run_system(system, client, url, count, results, label)
    return results


def rotations(systems: list[System], rounds: int) -> Iterator[tuple[int, System]]:
    """(round, system) for the systems that run a worker, in the rotated order of the rounds."""
    measured = [system for system in systems if system.default_concurrency]
    for round_index in range(rounds):
        shift = round_index % len(measured)
        for system in measured[shift:] + measured[:shift]:
            yield round_index, system


def run_io(systems: list[System], rounds: int, client: redis.Redis, url: str) -> Results:
    results: Results = defaultdict(list)
    for round_index, system in rotations(systems, rounds):
        print(f"I/O round {round_index + 1}/{rounds}: {system.name} ...", flush=True)
        results[(system.name, ROW)].append(measure_io(system, client, url))
    return results


def run_idle(
    systems: list[System], rounds: int, client: redis.Redis, url: str, samples: int
) -> dict[str, list[Idle]]:
    """Each system's idle rounds, in the rotated order the other rows use."""
    found: dict[str, list[Idle]] = defaultdict(list)
    for round_index, system in rotations(systems, rounds):
        print(
            f"idle round {round_index + 1}/{rounds}: {system.name}: commands/s, "
            f"then {samples} pickups ...",
            flush=True,
        )
        found[system.name].append(measure_idle(system, client, url, samples))
    return dict(found)


# -- the table -------------------------------------------------------------------------------


def cell(values: list[float], digits: int | None = None) -> str:
    if not values:
        return "-"
    if digits is None:
        digits = 1 if max(values) < 100 else 0
    median = f"{statistics.median(values):,.{digits}f}"
    if len(values) == 1:
        return median
    return f"{median} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def table(systems: list[System], results: Results, digits: int | None = None) -> str:
    metrics = list(dict.fromkeys(metric for _, metric in results))
    metrics.sort(key=lambda metric: not metric.startswith("enqueue"))  # enqueue rows first
    header = "| | " + " | ".join(system.name for system in systems) + " |"
    lines = [header, "|---" * (len(systems) + 1) + "|"]
    for metric in metrics:
        cells = [cell(results.get((system.name, metric), []), digits) for system in systems]
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def idle_table(found: dict[str, list[Idle]]) -> str:
    """Per system: p50 and p99 of all its rounds' pickups pooled, the rounds' own p99s (median
    and min-max) and the idle command rate (median and min-max)."""
    lines = [
        "| idle worker, default c | " + " | ".join(found) + " |",
        "|---" * (len(found) + 1) + "|",
    ]
    pooled = {
        name: sorted(ms for idle in rounds for ms in idle.pickups_ms)
        for name, rounds in found.items()
    }
    rows = {
        "pickup latency p50, ms (all rounds)": [
            f"{statistics.median(values):.2f}" for values in pooled.values()
        ],
        "pickup latency p99, ms (all rounds)": [
            f"{percentile(values, 0.99):.2f}" for values in pooled.values()
        ],
        "pickup latency p99, ms (per round)": [
            cell([idle.p99_ms for idle in rounds]) for rounds in found.values()
        ],
        "Redis commands/s while idle": [
            cell([idle.commands_per_s for idle in rounds]) for rounds in found.values()
        ],
    }
    for label, values in rows.items():
        lines.append(f"| {label} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def machine(systems: list[System], server: RedisServer) -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    redis_version = ".".join(str(part) for part in server.version)
    packages = "; ".join(f"{system.name}: {versions(system)}" for system in systems)
    return (
        f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, redis-server {redis_version}; {packages}"
    )


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run (default 20,000)")
    parser.add_argument("--quick", action="store_true", help="1 round of 2,000 jobs, 50 pickups")
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--io-only", action="store_true", help=f"only the I/O-bound rounds ({NAPS:,} naps)"
    )
    only.add_argument(
        "--idle-only",
        action="store_true",
        help="only the idle-worker rounds: pickup latency and idle commands/s",
    )
    parser.add_argument("--pickups", type=int, default=200, help="latency samples (default 200)")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="CHECKOUT",
        help="also run cogworker installed from CHECKOUT (an earlier revision, e.g. made with "
        "git worktree add), alternating with the others: a before/after table",
    )
    args = parser.parse_args()
    if args.baseline is not None and not (args.baseline / "pyproject.toml").is_file():
        parser.error(f"--baseline {args.baseline}: no pyproject.toml there (not a checkout)")
    if args.quick:
        args.rounds, args.jobs, args.pickups = 1, 2_000, 50
    if min(args.rounds, args.jobs, args.pickups) < 1:
        parser.error("--rounds, --jobs and --pickups must be at least 1")
    return args


def main() -> None:
    args = arguments()
    # a SIGTERM unwinds like Ctrl-C, so the worker and redis-server are stopped, not orphaned
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    VENVS.mkdir(exist_ok=True)
    systems = list(SYSTEMS)
    if args.baseline is not None:
        systems.insert(1, baseline(args.baseline.resolve()))
    for system in systems:
        prepare(system)
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        print(f"redis-server {'.'.join(map(str, server.version))} on {server.url}", flush=True)
        url, rounds = server.url, args.rounds
        full = not (args.io_only or args.idle_only)
        results = run_rounds(systems, rounds, args.jobs, client, url) if full else None
        io = None if args.idle_only else run_io(systems, rounds, client, url)
        idle = None if args.io_only else run_idle(systems, rounds, client, url, args.pickups)
        if results is not None:
            print(f"\n{args.rounds} round(s) x {args.jobs:,} jobs, median (min-max):\n")
            print(table(systems, results))
            print(f"\n{SETTINGS}\n")
        if io is not None:
            print(f"\n{args.rounds} I/O-bound round(s), median (min-max):\n")
            print(table([s for s in systems if s.default_concurrency], io, digits=2))
        if idle is not None:
            print(f"\n{args.rounds} idle round(s) x {args.pickups} pickups:\n")
            print(idle_table(idle))
        print(f"\nMachine: {machine(systems, server)}")


if __name__ == "__main__":
    main()
