"""The chaos suite's short mode (bench/chaos.py --short) passes: no job lost, every check OK.

It runs the real thing as a subprocess: a private redis-server with AOF, four worker processes,
about 2,000 jobs (unique ones among them) and three per-second cron entries, at least 20
injected faults (kill -9, TERM, Redis restarts, CLIENT PAUSE, killed connections, ACL denials),
then the drain and the checker's table. About 2.5 minutes each, marked slow.

Two runs: one with the defaults, and one where worker 0 is a swarm (kill -9 hits its children,
whose jobs its supervisor must requeue within seconds) and the presence key lives three
heartbeats instead of 60 s (so dead verdicts, true and false, come within seconds, and each
false one must be named with its cause).

Where the time goes, and why it stays: 75 s of faults, the least that carries the 2,000 jobs
this test demands at the driver's 40 per second with 20 faults or more among them; then the
drain, which with the defaults must wait out the 60 s presence key of a worker killed near the
end (that key's lifetime is the Ruby gem's, so Ruby and Python processes agree on who is dead)
before its jobs come back. A shorter run would have to lower those floors, which are what the
test proves.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the full run only: fault injection against worker processes

ROOT = Path(__file__).resolve().parent.parent
CHAOS = ROOT / "bench" / "chaos.py"
SEED = 20261130
SWARM_SEED = 20261202
RUN_TIMEOUT = 540


def run_chaos(*flags: str) -> str:
    """The driver's whole output, once it has exited 0 with every check passed."""
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env["PYTHONUNBUFFERED"] = "1"
    # own session: if the run overstays, its whole group (driver and redis-server) goes; the
    # workers are in sessions of their own and die with the driver (PR_SET_PDEATHSIG)
    process = subprocess.Popen(
        [sys.executable, str(CHAOS), "--short", *flags],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"chaos run overran {RUN_TIMEOUT}s:\n{output[-6000:]}")
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    tail = output[-12000:]
    assert process.returncode == 0, f"chaos run failed (exit {process.returncode}):\n{tail}"
    assert_exercised(output)
    return output


def assert_exercised(output: str) -> None:
    tail = output[-12000:]
    lost = re.search(r"^jobs lost\s+(\d+)\s+OK$", output, re.MULTILINE)
    assert lost is not None, f"no 'jobs lost' row in the table:\n{tail}"
    assert int(lost.group(1)) == 0, tail
    assert "RESULT: PASS  (lost = 0)" in output, tail
    faults = re.search(r"^faults injected\s+(\d+):", output, re.MULTILINE)
    assert faults is not None and int(faults.group(1)) >= 20, tail
    pushed = re.search(r"^jobs pushed\s+\d+ \(confirmed (\d+),", output, re.MULTILINE)
    assert pushed is not None and int(pushed.group(1)) >= 2000, tail
    # the cron entries and unique jobs were exercised, not just present
    fired = re.search(r"^cron slots\s+.*?fired once (\d+)", output, re.MULTILINE | re.DOTALL)
    assert fired is not None and int(fired.group(1)) >= 30, tail
    unique = re.search(r"^unique jobs\s+(\d+) accepted, (\d+) refused", output, re.MULTILINE)
    assert unique is not None and int(unique.group(1)) >= 50 and int(unique.group(2)) >= 5, tail


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_chaos_short_mode_loses_no_job() -> None:
    run_chaos("--seed", str(SEED))


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_chaos_with_a_swarm_and_short_liveness_loses_no_job() -> None:
    output = run_chaos("--seed", str(SWARM_SEED), "--swarm", "--short-liveness")
    assert "(worker 0 a swarm of 2), presence TTL 1.5s" in output
    kills = re.findall(r"worker 0 swarm child \d+ killed -9 with (\d+) job", output)
    assert kills and any(int(running) > 0 for running in kills), output[-6000:]
    assert re.search(r"swarm children: \d+ jobs, longest", output), output[-12000:]
    assert re.search(r"^dead verdicts on live processes .* OK$", output, re.MULTILINE)
