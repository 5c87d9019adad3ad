"""``cogworker demo --keep``: the dashboard comes up beside the worker, keeps showing new work
until Ctrl-C, the worker records run history and per-class metrics (so the History and Metrics
tabs fill), and everything the demo started stops cleanly.

(The run-and-exit form is checked in test_e2e_worker.py.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import redis
from conftest import wait_for

from cogworker import keys
from cogworker.metrics import by_class as metrics_by_class
from cogworker.metrics.by_class import Period

pytestmark = pytest.mark.slow  # the full run only: the demo as a process

DASHBOARD = re.compile(r"^demo: dashboard at (http://127\.0\.0\.1:\d+/)$", re.MULTILINE)
REDIS = re.compile(r"^demo: private (?:redis|valkey)-server \S+ at (redis://\S+)$", re.MULTILINE)
# the demo enqueues a job every TRICKLE_INTERVAL (2 s) while it keeps running: two should run
# in 20 s
TRICKLE_TIMEOUT = 20


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        return str(response.read().decode("utf-8"))


def processed_on_overview(url: str) -> int:
    page = fetch(url)
    found = re.search(r"Processed</[^>]+>\s*<[^>]+>([\d,]+)<", page, re.IGNORECASE)
    assert found, page[:2000]
    return int(found.group(1).replace(",", ""))


def recorded_classes(client: redis.Redis) -> set[str]:
    return set(metrics_by_class.summaries(client, Period.HOUR).classes)


def test_demo_with_keep_serves_the_dashboard_until_interrupted(tmp_path: Path) -> None:
    out_path = tmp_path / "demo.out"
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    with open(out_path, "wb") as out:
        demo = subprocess.Popen(
            [sys.executable, "-m", "cogworker", "demo", "--jobs", "2", "--keep"],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output() -> str:
        return out_path.read_text(errors="replace")

    try:
        wait_for(lambda: "demo: still running" in output(), timeout=60, interval=0.1)
        found = DASHBOARD.search(output())
        assert found, output()
        url = found.group(1)
        assert "Overview" in fetch(url)
        assert "Workers" in fetch(url + "workers")
        first = processed_on_overview(url)
        wait_for(lambda: processed_on_overview(url) >= first + 2, timeout=TRICKLE_TIMEOUT)
        server = REDIS.search(output())
        assert server, output()
        client = redis.Redis.from_url(server.group(1), decode_responses=True)
        try:
            # every job the demo ran before it kept running: a history run and class metrics
            runs = [json.loads(entry) for entry in client.zrange(keys.HISTORY_ALL, 0, -1)]
            assert {"GreetingJob", "FlakyJob", "DoomedJob"} <= {run["class"] for run in runs}
            assert {run["class"] for run in runs if run["status"] == "failed"} == {
                "FlakyJob",
                "DoomedJob",
            }
            wait_for(lambda: {"GreetingJob", "FlakyJob", "DoomedJob"} <= recorded_classes(client))
            found = metrics_by_class.summaries(client, Period.HOUR).classes
            assert found["DoomedJob"].failures == 1
            assert found["GreetingJob"].executions >= 4  # 2 + the delayed one + the trickle
        finally:
            client.close()
        assert "DoomedJob" in fetch(url + "class_metrics")
        demo.send_signal(signal.SIGINT)
        code = demo.wait(60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(10)
    assert code == 0, output()
    assert "demo: worker exited with status 0" in output()
    assert "demo: dashboard exited with status 0" in output()
