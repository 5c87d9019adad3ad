"""The worker process caps glibc's malloc arenas at two, unless MALLOC_ARENA_MAX says otherwise.

Arenas are counted from glibc's own report (``malloc_info``: one ``<heap>`` element per arena),
in subprocesses, since the cap is process-wide and can't be undone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import StartWorker, cogworker_env, started_workers

import cogworker
from cogworker.worker.malloc_arenas import ARENA_LIMIT, _is_glibc

pytestmark = pytest.mark.skipif(not _is_glibc(), reason="malloc arenas are glibc's")

COUNT_ARENAS = '''
import ctypes
import tempfile


def malloc_arenas():
    """How many arenas glibc's malloc has made in this process."""
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile() as report:
        stream = libc.fopen(report.name.encode(), b"w")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        return open(report.name).read().count("<heap nr=")
'''

# six threads allocate at once (blocks too big for Python's own allocator), then the arenas
# are counted: glibc gives each new thread an arena of its own while under its limit
THREADS_ALLOCATE = COUNT_ARENAS + '''
import sys
import threading

if sys.argv[1] == "cap":
    from cogworker.worker.malloc_arenas import cap_malloc_arenas
    print(cap_malloc_arenas())
else:
    print(None)
started = threading.Barrier(6)
done = threading.Barrier(7)


def allocate():
    started.wait()
    kept = [bytearray(4096) for _ in range(50)]
    done.wait()


threads = [threading.Thread(target=allocate) for _ in range(6)]
for thread in threads:
    thread.start()
done.wait()
print(malloc_arenas())
'''


def threads_allocate(cap: bool, **env: str) -> tuple[str, int]:
    """What cap_malloc_arenas returned ('None' when not called), and the arenas counted."""
    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    done = subprocess.run(
        [sys.executable, "-c", THREADS_ALLOCATE, "cap" if cap else "leave"],
        env=environment, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    returned, arenas = done.stdout.split()
    return returned, int(arenas)


def test_six_threads_allocating_share_two_arenas_once_capped() -> None:
    assert threads_allocate(cap=True) == ("True", ARENA_LIMIT)


def test_without_the_cap_each_thread_gets_an_arena_of_its_own() -> None:
    # the control: the count above is glibc's and would be higher without the cap
    returned, arenas = threads_allocate(cap=False)
    assert returned == "None" and arenas >= 1 + 6


def test_a_malloc_arena_max_in_the_environment_wins() -> None:
    returned, arenas = threads_allocate(cap=True, MALLOC_ARENA_MAX="4")
    assert (returned, arenas) == ("False", 4)


JOBS_MODULE = (
    COUNT_ARENAS
    + '''
import cogworker


class ArenasJob(cogworker.Job):
    name = "Test::Arenas"

    def perform(self):
        kept = [bytearray(4096) for _ in range(50)]
        cogworker.default_config().redis().rpush("test:arenas", malloc_arenas())
'''
)


@pytest.fixture
def start_worker(tmp_path: Path, redis_url: str) -> Iterator[StartWorker]:
    (tmp_path / "arena_jobs.py").write_text(JOBS_MODULE)
    with started_workers(tmp_path) as workers:
        yield lambda *args: workers.start(
            ["run", "-r", "arena_jobs", "-c", "10", *args], cogworker_env(redis_url)
        )


def test_a_worker_with_ten_threads_runs_its_jobs_on_two_arenas(
    start_worker: StartWorker, config: cogworker.Config, r: redis.Redis
) -> None:
    worker = start_worker("--log-level", "WARNING")
    # waiting jobs would get a thread each; these short ones run wherever the pace puts them,
    # and the worker's other threads (fetcher, heartbeat, bookkeeper) allocate beside them
    cogworker.Client(config).push_bulk({"class": "Test::Arenas", "args": []} for _ in range(200))
    wait_for(lambda: worker.alive() and r.llen("test:arenas") == 200, timeout=60)
    assert max(int(count) for count in r.lrange("test:arenas", 0, -1)) <= ARENA_LIMIT
