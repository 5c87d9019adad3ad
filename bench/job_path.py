"""Which modules one job visits on its way through a worker, and how often it comes back to
one it had left: the figures of the one-writer work (ARCHITECTURE.md's "One job" list).

    python3 dev.py bench job_path        (or: .venv/bin/python bench/job_path.py)

A worker runs in this process (concurrency 1, reliable fetch) on a private Redis. Every
call and return of code in a ``cogworker`` module on the threads a job passes through
(``processor-*``, ``fetcher``, ``bookkeeper``) is recorded with ``threading.setprofile``,
from the push of one job until Redis shows it settled: a job that succeeds (acknowledged)
and one that raises (filed into retry). The path is the sequence of modules on top of each
thread's cogworker stack, a module counted each time the path enters it; a *return* is an
entry into a module the path had already left. "Leaf helpers dropped" leaves out the modules
that never call another cogworker module on the path (``keys``, ``wire``, ...), as a reader
following the job skips them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import cogworker
from cogworker import keys
from cogworker.local.server import RedisServer
from cogworker.worker.launcher import Launcher

THREADS = ("processor-", "fetcher", "bookkeeper")
RUNS = 5


def processed(client: Any) -> int:
    return int(client.get(keys.STATS_PROCESSED) or 0)


class Succeeds(cogworker.Job):
    def perform(self) -> None:
        pass


class Fails(cogworker.Job, retry=3):
    def perform(self) -> None:
        raise ValueError("planned failure")


@dataclass
class Trace:
    recording: bool = False
    events: list[tuple[str, str, str]] = field(default_factory=list)  # thread, event, module

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.recording or event not in ("call", "return"):
            return
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith("cogworker"):
            return
        thread = threading.current_thread().name
        if thread.startswith(THREADS):
            self.events.append((thread, event, module))


def paths(events: list[tuple[str, str, str]]) -> tuple[dict[str, list[str]], set[str]]:
    """Per thread, the module on top of its cogworker stack each time it changes; and the
    modules that call into another module (the others are leaf helpers)."""
    stacks: dict[str, list[str]] = {}
    walked: dict[str, list[str]] = {}
    calling: set[str] = set()
    for thread, event, module in events:
        stack = stacks.setdefault(thread, [])
        path = walked.setdefault(thread, [])
        if event == "call":
            if stack and stack[-1] != module:
                calling.add(stack[-1])
            stack.append(module)
        elif stack:
            stack.pop()
        top = stack[-1] if stack else None
        if top is not None and (not path or path[-1] != top):
            path.append(top)
    return walked, calling


def summarise(path: list[str], keep: Callable[[str], bool]) -> tuple[list[str], int, Counter[str]]:
    """The path without the dropped modules, how often it re-enters a module it had left,
    and those re-entries per module."""
    kept: list[str] = []
    for module in path:
        if keep(module) and (not kept or kept[-1] != module):
            kept.append(module)
    seen: set[str] = set()
    again: Counter[str] = Counter()
    for module in kept:
        if module in seen:
            again[module] += 1
        seen.add(module)
    return kept, sum(again.values()), again


def follow(
    trace: Trace, push: Callable[[], object], settled_count: Callable[[], int]
) -> list[tuple[str, str, str]]:
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


def measure(events: list[tuple[str, str, str]], drop_leaves: bool) -> Figures:
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
    return Figures(frozenset(modules), returns, tuple(per_module.most_common(5)))


def report(name: str, runs: list[list[tuple[str, str, str]]]) -> None:
    threads = sorted({thread for events in runs for thread, _, _ in events})
    print(f"\n{name}: {len(runs)} runs, on threads {', '.join(threads)}")
    for label, drop in (("all modules", False), ("leaf helpers dropped", True)):
        figures = sorted((measure(events, drop) for events in runs), key=lambda f: f.returns)
        middle = figures[len(figures) // 2]
        spread = f"{figures[0].returns}..{figures[-1].returns}"
        most = ", ".join(f"{m.removeprefix('cogworker.')} {n}" for m, n in middle.most)
        print(
            f"  {label}: {len(middle.modules)} modules, {middle.returns} returns to a module"
            f" left (median; {spread} over the runs); most: {most}"
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
