"""Which modules one job visits on its way through a worker, and how often it comes back to
one it had left: the figures of the one-writer work (ARCHITECTURE.md's "One job" list).

    python3 dev.py bench job_path        (or: .venv/bin/python bench/job_path.py)

A worker runs in this process (concurrency 1, reliable fetch) on a private Redis. The calls
and returns of cogworker code on the threads a job passes through are recorded
(``tools/job_trace.py`` says how, and how a path and its returns are counted) from the push of
one job until Redis shows it settled: a job that succeeds (acknowledged) and one that raises
(filed into retry).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cogworker
from cogworker import keys
from cogworker.local.server import RedisServer
from cogworker.worker.launcher import Launcher

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from job_trace import Event, Trace, paths, summarise

RUNS = 5


def processed(client: Any) -> int:
    return int(client.get(keys.STATS_PROCESSED) or 0)


class Succeeds(cogworker.Job):
    def perform(self) -> None:
        pass


class Fails(cogworker.Job, retry=3):
    def perform(self) -> None:
        raise ValueError("planned failure")


def follow(
    trace: Trace, push: Callable[[], object], settled_count: Callable[[], int]
) -> list[Event]:
    """The calls and returns from ``push()`` until ``settled_count()`` (a count in
    Redis: processed jobs, retry entries) has grown."""
    before = settled_count()
    trace.events = []
    trace.recording = True
    push()
    deadline = time.monotonic() + 10
    while settled_count() <= before:
        if time.monotonic() > deadline:
            raise SystemExit("the job was not settled within 10 s")
        time.sleep(0.002)
    trace.recording = False
    return trace.events


@dataclass(frozen=True)
class Figures:
    modules: frozenset[str]
    returns: int
    most: tuple[tuple[str, int], ...]
    to_processor: int  # returns to the processor's module (its loop's steps only, by design)


def measure(events: list[Event], drop_leaves: bool) -> Figures:
    walked, not_leaves = paths(events)
    modules: set[str] = set()
    returns = 0
    per_module: Counter[str] = Counter()
    for thread in sorted(walked):
        kept, again, counts = summarise(
            walked[thread], not_leaves.__contains__ if drop_leaves else lambda module: True
        )
        modules.update(kept)
        returns += again
        per_module.update(counts)
    return Figures(
        frozenset(modules),
        returns,
        tuple(per_module.most_common(5)),
        per_module["cogworker.worker.processor"],
    )


def report(name: str, runs: list[list[Event]]) -> None:
    threads = sorted({thread for events in runs for thread, _, _ in events})
    print(f"\n{name}: {len(runs)} runs, on threads {', '.join(threads)}")
    for label, drop in (("all modules", False), ("leaf helpers dropped", True)):
        figures = sorted((measure(events, drop) for events in runs), key=lambda f: f.returns)
        middle = figures[len(figures) // 2]
        spread = f"{figures[0].returns}..{figures[-1].returns}"
        most = ", ".join(f"{m.removeprefix('cogworker.')} {n}" for m, n in middle.most)
        print(
            f"  {label}: {len(middle.modules)} modules, {middle.returns} returns to a module"
            f" left (median; {spread} over the runs), {middle.to_processor} to the processor;"
            f" most: {most}"
        )
        print("    " + " ".join(sorted(m.removeprefix("cogworker.") for m in middle.modules)))


def main() -> None:
    logging.getLogger("cogworker").setLevel(logging.ERROR)  # the planned failure's log line
    trace = Trace()
    # every thread the worker starts from now on reports to the trace (it ignores what
    # happens while it isn't recording)
    threading.setprofile(trace.profile)
    with RedisServer() as server:
        config = cogworker.Config(redis_url=server.url, concurrency=1)
        cogworker.set_default_config(config)
        client = config.redis()
        launcher = Launcher(config)
        runner = threading.Thread(target=launcher.run, name="launcher", daemon=True)
        runner.start()
        if not launcher.started.wait(15):
            raise SystemExit("the worker did not start")
        for job in (Succeeds, Fails):  # warm up: every script loaded, every lazy import done
            job.perform_async()
        time.sleep(1.0)
        ok, failed = [], []
        for _ in range(RUNS):
            ok.append(follow(trace, Succeeds.perform_async, lambda: processed(client)))
            time.sleep(0.2)  # the threads back to idle
            failed.append(follow(trace, Fails.perform_async, lambda: int(client.zcard(keys.RETRY))))
            time.sleep(0.2)
        launcher.signals.put("stop")
        runner.join(15)
    report("a successful job", ok)
    report("a failed job (filed into retry)", failed)


if __name__ == "__main__":
    main()
