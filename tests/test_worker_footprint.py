"""What a worker process doesn't load: PyYAML without a config file, the cron parser (cronsim,
zoneinfo) without cron entries. Together they are about 1.5 MB of resident memory per
process, so each is imported where it is first needed. Checked in real ``cogworker run``
processes by a job that reports which of them its process holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import StartWorker, cogworker_env, started_workers

import cogworker

pytestmark = pytest.mark.slow  # the full run only: worker processes

OPTIONAL = ("yaml", "cronsim", "zoneinfo", "cogworker.config.file", "cogworker.periodic.cron")

JOBS_MODULE = f'''
import sys

import cogworker


class FootprintJob(cogworker.Job):
    name = "Test::Footprint"

    def perform(self, run):
        held = [name for name in {OPTIONAL!r} if name in sys.modules]
        cogworker.default_config().redis().rpush(f"test:footprint:{{run}}", " ".join(held) or "-")
'''


@pytest.fixture
def start_worker(tmp_path: Path, redis_url: str) -> Iterator[StartWorker]:
    (tmp_path / "footprint_jobs.py").write_text(JOBS_MODULE)
    with started_workers(tmp_path) as workers:
        yield lambda *args: workers.start(
            ["run", "-r", "footprint_jobs", "--log-level", "WARNING", *args],
            cogworker_env(redis_url),
        )


def held_by_worker(config: cogworker.Config, r: redis.Redis) -> str:
    """What the worker's process holds, as reported by the run of a job pushed now (and by no
    other run: a cron entry of the job reports under its own name)."""
    cogworker.Client(config).push({"class": "Test::Footprint", "args": ["pushed"]})
    return str(wait_for(lambda: r.lpop("test:footprint:pushed"), timeout=30))


def test_a_worker_without_config_file_or_cron_entries_loads_neither(
    start_worker: StartWorker, config: cogworker.Config, r: redis.Redis
) -> None:
    start_worker()
    assert held_by_worker(config, r) == "-"


def test_a_config_file_with_a_cron_entry_loads_both(
    start_worker: StartWorker, config: cogworker.Config, r: redis.Redis, tmp_path: Path
) -> None:
    # the control: the job sees these modules when the worker does need them. On a fresh
    # Redis the entry also fires once at boot (catch-up of its latest slot): that run reports
    # under "cron", apart from the run the test pushes
    (tmp_path / "cogworker.yml").write_text(
        "periodic:\n  - cron: '0 3 * * *'\n    job: Test::Footprint\n    args: [cron]\n"
    )
    start_worker("-C", str(tmp_path / "cogworker.yml"))
    assert held_by_worker(config, r).split() == list(OPTIONAL)
