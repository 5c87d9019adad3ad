"""``cogworker demo --wait``: the dashboard comes up beside the worker, keeps showing new work
until Ctrl-C, and everything the demo started stops cleanly.

(The run-and-exit form is checked in test_e2e_worker.py.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from conftest import wait_for

DASHBOARD = re.compile(r"^demo: dashboard at (http://127\.0\.0\.1:\d+/)$", re.MULTILINE)
# the demo enqueues a job every TRICKLE_INTERVAL (2 s) while it waits: two should run in 20 s
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


def test_demo_with_wait_serves_the_dashboard_until_interrupted(tmp_path: Path) -> None:
    out_path = tmp_path / "demo.out"
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    with open(out_path, "wb") as out:
        demo = subprocess.Popen(
            [sys.executable, "-m", "cogworker", "demo", "--jobs", "2", "--wait"],
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
        demo.send_signal(signal.SIGINT)
        code = demo.wait(60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(10)
    assert code == 0, output()
    assert "demo: worker exited with status 0" in output()
    assert "demo: dashboard exited with status 0" in output()
