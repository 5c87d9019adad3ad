"""The example app (``examples/``): the seeder fills every tab of the example's web app (the
dashboard mounted at /cogworker, its auth layer and its Job status tab) with no worker; a real
worker started as the README says runs the pushed jobs, the flaky one included, and publishes
the cron entries; the stress tool passes all three scenarios in a small configuration."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import Worker, cogworker_env
from web_support import inner_html

import cogworker
from cogworker import history, keys, status
from cogworker.local.server import RedisServer

pytestmark = pytest.mark.slow  # the full run only: the example app's worker and tools as processes

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the examples are a package at the repository's root
    sys.path.insert(0, str(ROOT))

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette asks for httpx2; httpx works the same
    from starlette.testclient import TestClient


def run_example(
    *args: str, redis_url: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=cogworker_env(redis_url),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def site(config: cogworker.Config) -> Iterator[TestClient]:
    from examples.web import make_site

    with TestClient(make_site(config), follow_redirects=False) as client:
        yield client


def seg_counts(html: str) -> dict[str, int]:
    nav = html.split('<nav class="seg seg-counts" aria-label="Status">')[1].split("</nav>")[0]
    return {
        label: int(count)
        for label, count in re.findall(r">(\w+) <span class=\"seg-count\">(\d+)<", nav)
    }


def test_the_seeder_fills_every_tab(site: TestClient, redis_url: str, r: redis.Redis) -> None:
    seeded = run_example("examples.seed", "--redis-url", redis_url, redis_url=redis_url)
    assert seeded.returncode == 0, seeded.stderr
    summary = "queued 10, scheduled 4, schedules 4, processes 2, retrying 3, dead 4, history runs"
    assert summary in seeded.stdout
    runs = int(re.search(r"history runs (\d+)", seeded.stdout).group(1))  # type: ignore[union-attr]
    assert runs > 100
    assert site.get("/").headers["location"] == "/cogworker/"

    overview = site.get("/cogworker/").text
    content = inner_html(overview, "overview-content")
    for queue in ("default", "low", "mailers"):
        assert f">{queue}</a>" in content
    assert '>mailers</a> <span class="tag tag-warning">paused</span>' in content
    throughput = inner_html(overview, "overview-throughput")
    drawn = [int(n.replace(",", "")) for n in re.findall(r"<strong>([\d,]+)</strong>", throughput)]
    assert sum(drawn) == runs  # processed and failed over the 24 hours: every recorded run
    per_day = inner_html(overview, "overview-runs")
    assert "nothing counted" not in per_day and "Succeeded <strong>" in per_day

    jobs = seg_counts(site.get("/cogworker/jobs").text)
    assert jobs == {
        "All": 23,
        "Running": 2,
        "Enqueued": 10,
        "Scheduled": 4,
        "Retrying": 3,
        "Dead": 4,
    }
    dead = site.get("/cogworker/jobs?status=Dead").text
    assert "payments.CardDeclined" in dead and "(unparseable)" in dead

    schedules = inner_html(site.get("/cogworker/schedules").text, "schedules-content")
    assert "4 of 4 shown" in schedules
    assert schedules.count(">Disabled</span>") == 1 and schedules.count(">never</em>") == 1

    workers = site.get("/cogworker/workers").text
    assert "2 processes · 10 threads" in workers
    assert workers.count("demo-host:") >= 4  # two processes, each with a running job

    rows, failed = history.query(r, status="failed", offset=0, limit=100)
    assert failed == int(r.get(keys.STATS_FAILED) or 0) > 0
    assert all(row.get("backtrace") for row in rows)
    assert history.query(r, status="all", offset=0, limit=1)[1] == runs
    for raw in r.zrange(keys.RETRY, 0, -1):
        assert r.llen(keys.job_attempts(json.loads(raw)["jid"])) >= 1


def test_the_seeder_adds_on_each_run(redis_url: str, r: redis.Redis) -> None:
    recorded = []
    for _ in range(2):
        done = run_example("examples.seed", "--redis-url", redis_url, redis_url=redis_url)
        assert done.returncode == 0, done.stderr
        recorded.append(int(re.search(r"history runs (\d+)", done.stdout).group(1)))  # type: ignore[union-attr]
    assert r.llen(keys.queue("default")) == 10
    assert r.zcard(keys.HISTORY_ALL) == sum(recorded)


def test_the_web_app_has_its_job_status_tab(
    site: TestClient, config: cogworker.Config, r: redis.Redis
) -> None:
    status.enable(config)
    jid = cogworker.Client(config).push({"class": "GreetingJob", "args": ["tab"]})
    page = site.get("/cogworker/status", params={"jid": jid}).text
    assert '<a href="/cogworker/status" aria-current="page">Job status</a>' in page
    assert "<dt>status</dt><dd>queued</dd>" in page
    assert "<dt>class</dt><dd>GreetingJob</dd>" in page
    assert "<dd>queued</dd>" in site.get(f"/cogworker/status/{jid}").text
    assert "No status for nope" in site.get("/cogworker/status/nope").text


@pytest.fixture
def worker_started(tmp_path: Path, redis_url: str) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(*args: str) -> Worker:
        worker = Worker(
            list(args), ROOT, cogworker_env(redis_url), tmp_path / f"worker-{len(started)}.out"
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()
    for worker in started:
        print(f"--- worker {worker.pid}:\n{worker.output()}")


def test_the_worker_runs_the_example_jobs(
    worker_started: Callable[..., Worker], redis_url: str, r: redis.Redis
) -> None:
    pushed = run_example("examples.push_jobs", redis_url=redis_url)
    assert pushed.returncode == 0, pushed.stderr
    flaky = re.search(r"jid=(\w+)", pushed.stdout).group(1)  # type: ignore[union-attr]
    worker = worker_started("run", "-r", "examples.app", "-C", "examples/worker.yml")
    worker.identity(r, timeout=30)
    wait_for(lambda: r.hlen(keys.PERIODIC_SCHEDULE) == 3, timeout=30)  # published at boot
    wait_for(lambda: r.get(f"examples:flaky_job:{flaky}:attempts") == "3", timeout=60)
    wait_for(lambda: r.hget(keys.status(flaky), "status") == "complete", timeout=30)
    assert r.hget(keys.status(flaky), "message") == "attempt 3"
    wait_for(
        lambda: r.llen(keys.queue("default")) == 0 and r.llen(keys.queue("low")) == 0, timeout=30
    )
    wait_for(lambda: int(r.get(keys.STATS_PROCESSED) or 0) >= 7, timeout=30)
    assert int(r.get(keys.STATS_FAILED) or 0) == 2  # the flaky job's two failures
    classes = {json.loads(raw)["class"] for raw in r.zrange(keys.HISTORY_SUCCESS, 0, -1)}
    assert {"GreetingJob", "FlakyJob", "FetchReportJob", "LowPriorityJob"} <= classes
    assert re.search(r"GreetingJob jid=\w+ on default took \d+\.\d{3}s", worker.output())
    assert worker.stop() == 0


def test_the_stress_tool_passes_small(redis_server_factory: Callable[..., RedisServer]) -> None:
    private = redis_server_factory()  # it flushes its database: never the shared one
    done = run_example(
        "examples.stress", "all", "--redis-url", private.url,
        "--jobs", "500", "--concurrency", "4", "--producers", "2",
        "--web-threads", "4", "--web-duration", "1",
        "--tickers", "2", "--entries", "4", "--seconds", "3",
        redis_url=private.url, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "500 settled in" in done.stdout
    result = json.loads(done.stdout.split("STRESS_WEB_RESULT ")[1].splitlines()[0])
    assert result["by_status"] == {"200": result["total"]} and result["total"] > 0
    assert set(result) == {
        "total",
        "by_status",
        "errors",
        "req_per_sec",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "max_ms",
    }
    assert "every slot had exactly one winner among 2 processes" in done.stdout
    assert done.stdout.rstrip().endswith("stress: all passed")


def test_the_stress_tool_refuses_a_bad_command(redis_url: str) -> None:
    done = run_example("examples.stress", "sideways", redis_url=redis_url)
    assert done.returncode != 0
    assert "invalid choice: 'sideways'" in done.stderr
