"""ARCHITECTURE.md's "One job" path, checked against a traced job: the modules a plain job
visits on each thread (``tools/job_trace.py``, leaf helpers dropped), in the order the
document lists them, and a processor thread that comes back to its own module only once per
job, for the next one (take, run, settle: the loop itself)."""

from __future__ import annotations

import importlib.util
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis
from conftest import wait_for
from runtime_support import running

import cogworker
from cogworker import keys
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager

ROOT = Path(__file__).resolve().parents[1]


def _load_tracer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("job_trace", ROOT / "tools" / "job_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["job_trace"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


job_trace = _load_tracer()


class Plain(cogworker.Job):
    name = "JobPath::Plain"

    def perform(self) -> None:
        pass


@pytest.fixture
def traced(config: cogworker.Config) -> Iterator[tuple[Manager, object]]:
    config.concurrency = 1
    trace = job_trace.Trace()
    threading.setprofile(trace.profile)  # the threads the manager starts report to it
    try:
        manager = Manager(config, new_identity())
        with running(manager):
            yield manager, trace
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]


DOCUMENT = ROOT / "ARCHITECTURE.md"
THREAD_LINE = re.compile(r"^- (processor|fetcher|bookkeeper) thread[^:]*: (.+)$")
JOBS = 2  # one fed by the fetcher to the idle thread, one taken by its turnover


def documented() -> dict[str, list[str]]:
    """The traced path ARCHITECTURE.md lists, by thread: module paths become module names."""
    listed: dict[str, list[str]] = {}
    bullets = re.sub(r"\n  (?=\S)", " ", DOCUMENT.read_text())  # a bullet's lines, joined
    for line in bullets.splitlines():
        match = THREAD_LINE.match(line)
        if match:
            paths = re.findall(r"`([\w/]+)\.py`", match.group(2))
            listed[match.group(1)] = [
                "cogworker." + path.removesuffix("/__init__").replace("/", ".") for path in paths
            ]
    assert set(listed) == {"processor", "fetcher", "bookkeeper"}, "the list is missing"
    return listed


def first_visits(path: list[str]) -> list[str]:
    return list(dict.fromkeys(path))


def traced_paths(manager: Manager, trace: object, r: redis.Redis) -> dict[str, list[str]]:
    Plain.perform_async()  # warm up: scripts loaded, lazy imports done
    wait_for(lambda: int(r.get(keys.STATS_PROCESSED) or 0) == 1)
    trace.events = []  # type: ignore[attr-defined]
    trace.recording = True  # type: ignore[attr-defined]
    for _ in range(JOBS):
        Plain.perform_async()
    wait_for(lambda: int(r.get(keys.STATS_PROCESSED) or 0) == 1 + JOBS)
    trace.recording = False  # type: ignore[attr-defined]
    found: dict[str, list[str]] = {}
    for thread, path in job_trace.kept_paths(trace.events).items():  # type: ignore[attr-defined]
        found[thread.split("-")[0]] = path
    return found


def test_a_plain_job_visits_the_modules_the_document_lists_in_its_order(
    traced: tuple[Manager, object], r: redis.Redis
) -> None:
    listed = documented()
    found = traced_paths(*traced, r)
    processor = found["processor"]
    # from its first job on; its take (``worker.fetcher``'s ready) is the fetcher's to list
    run = processor[processor.index("cogworker.worker.processor") :]
    assert [m for m in first_visits(run) if m != "cogworker.worker.fetcher"] == listed["processor"]
    for thread in ("fetcher", "bookkeeper"):  # what they send varies with timing: a subset
        assert set(found.get(thread, [])) <= set(listed[thread]), thread
    every = {module for modules in found.values() for module in modules}
    assert every <= {module for modules in listed.values() for module in modules}
    assert len(every) <= 12


def test_the_processor_comes_back_only_from_the_steps_of_its_loop(
    traced: tuple[Manager, object], r: redis.Redis
) -> None:
    """Between two visits of the processor's module the thread is in one step of its loop:
    take (the fetcher), run (execute) or settle; never called back from inside one."""
    processor = traced_paths(*traced, r)["processor"]
    own = "cogworker.worker.processor"
    entries = [at for at, module in enumerate(processor) if module == own]
    steps = [processor[at + 1] for at in entries if at + 1 < len(processor)]
    loop = {"cogworker.worker.fetcher", "cogworker.execute", "cogworker.worker.settle"}
    assert set(steps) <= loop, steps
    assert steps.count("cogworker.execute") == JOBS
    assert steps.count("cogworker.worker.settle") == JOBS
    # takes from the fetcher: for the second job if the first's turnover found nothing yet
    # (the pushes race the run), and after the last, if the trace was still recording
    assert steps.count("cogworker.worker.fetcher") <= JOBS
